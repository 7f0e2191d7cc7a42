"""RackWeave workers for Python: gradient exchange through a rack-scale parameter service.

    import numpy as np, rackweave
    w = rackweave.Worker(connect="127.0.0.1:7700", job="my-job", rank=0, workers=2,
                         tensors={"w": 1024}, optimizer="sum", token=token)
    grad = np.ones(1024, np.float32); out = np.empty_like(grad)
    w.push_pull("w", grad, out).result()

Buffers (NumPy arrays, CPU torch tensors: float32, C-contiguous, the tensor's size)
are used in place; anything else is a TypeError or ValueError, never a silent copy.
Calls return a Future; result() waits with the GIL released. Failures raise
rackweave.Error, whose `code` names the error ("unknown_job", "timeout", ...).
"""

from ._rackweave import Error, Future, Worker, __version__, create_job, delete_job, set_hyper

__all__ = ["Error", "Future", "Worker", "__version__", "create_job", "delete_job", "set_hyper"]
