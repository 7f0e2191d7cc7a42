"""Rank 0's buffers on every rank before each forward: what torch DDP does by default
(broadcast_buffers=True), for ServerOptimizer(model=...).

A model's buffers (BatchNorm's running mean and variance) are not parameters: no
gradient moves them, each rank updates its own from its own batches, and without this
the ranks' models drift apart in them (and so in eval-mode outputs). Before each forward
of the model, every float32 buffer is replaced by rank 0's, through a `sum` job beside
the training job: rank 0 pushes its buffers, every other rank zeros, and the node's sum
(in rank order: x + 0 + ... + 0, exactly x) comes back to every rank. Other buffers
(BatchNorm's num_batches_tracked, an int64 counter every rank counts alike) are left as
they are. One round trip per forward, as DDP's broadcast is one collective.

The job is JOB.buffers, of the same ranks: on a node with --open-jobs the first rank's
hello creates it; on a node whose jobs are made through the coordinator, make it as the
training job is made (a `sum` job, the same workers) and pass its token.
"""

import torch as _torch

from ._rackweave import Worker

__all__ = ["BufferBroadcast"]


class BufferBroadcast:
    """A forward pre-hook for the model's root module: rank 0's float32 buffers into
    every rank's."""

    def __init__(self, model, *, connect, job, rank, workers, token, transport, timeout):
        self.rank = rank
        self.buffers = [(n, b) for n, b in model.named_buffers()
                        if b.dtype == _torch.float32 and b.numel() > 0]
        self.worker = None
        if not self.buffers:
            return
        for n, b in self.buffers:
            if not b.is_contiguous():
                raise TypeError(f"ServerOptimizer: buffer '{n}' is not contiguous")
        try:
            self.worker = Worker(connect=connect, job=job, rank=rank, workers=workers,
                                 tensors=[(n, b.numel(), False) for n, b in self.buffers],
                                 token=token, optimizer="sum", transport=transport,
                                 timeout=timeout)
        except Exception as e:
            raise RuntimeError(
                f"ServerOptimizer: the model's buffers go from rank 0 to every rank through "
                f"the job '{job}', which this rank could not join ({e}). On a node with "
                "--open-jobs the first rank makes it; otherwise make it as the training job "
                "was made (a sum job of the same workers) and give its token as "
                "buffers_token=, or pass broadcast_buffers=False") from e
        # On the host: the worker reads and writes host memory (CUDA buffers are copied).
        self.host = {n: _torch.zeros(b.numel(), dtype=_torch.float32) for n, b in self.buffers}

    def __call__(self, module, inputs):
        if self.worker is None:
            return
        calls = []
        for n, b in self.buffers:
            h = self.host[n]
            if self.rank == 0:
                h.copy_(b.detach().reshape(-1))
            else:
                h.zero_()
            calls.append(self.worker.push_pull(n, h, h))  # the sum lands in place
        for (n, b), call in zip(self.buffers, calls):
            call.result()
            b.data.view(-1).copy_(self.host[n])

    def close(self):
        if self.worker is not None:
            self.worker.close()
            self.worker = None
