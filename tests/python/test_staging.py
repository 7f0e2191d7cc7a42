"""The staging path CUDA tensors take through rackweave.torch (rackweave.staging): its
pipeline with host buffers (no GPU needed), the device checks, the DDP hook through it,
and, where a GPU is present, the same on CUDA tensors."""

import itertools
import os
import subprocess
import sys
import threading

import pytest

from rwnode import run_ranks

torch = pytest.importorskip("torch")
import rackweave.torch as rwt  # noqa: E402 - after the skip
from rackweave.staging import HostOps, Pipeline, device_of  # noqa: E402
from torchref import rank_data, reference_losses, server_losses  # noqa: E402

_jobs = itertools.count()
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device here (torch.cuda.is_available() is "
                                       "false): the staging path runs with host buffers")


class Done:
    """A finished exchange, as a rackweave Future is once answered."""

    def __init__(self, error=None):
        self.error = error

    def result(self):
        if self.error:
            raise self.error


class RecordingOps(HostOps):
    """HostOps that records, per thread, which device steps ran there, in order."""

    def __init__(self):
        self.calls = []
        self._lock = threading.Lock()

    def _note(self, what):
        with self._lock:
            self.calls.append((threading.current_thread().name, what))

    def bind_thread(self):
        self._note("bind_thread")

    def host_wait(self, event):
        self._note("host_wait")

    def to_device(self, dst, src, after):
        self._note("to_device")
        return super().to_device(dst, src, after)


def test_each_pipeline_thread_binds_the_device_before_any_device_step():
    # Issue 63, item 4: the pusher and lander threads never set the current CUDA
    # device, so on a rank using GPU k > 0 their first CUDA call made a context on
    # device 0. Each thread now binds the device first (CudaOps: torch.cuda.set_device).
    ops = RecordingOps()
    p = Pipeline(ops)
    try:
        for _ in range(3):
            param = torch.zeros(4)
            p.submit("w", torch.ones(4), param, lambda out, into: Done()).result(timeout=10)
    finally:
        p.close()
    by_thread = {}
    for thread, what in ops.calls:
        by_thread.setdefault(thread, []).append(what)
    assert set(by_thread) == {"rackweave-push", "rackweave-land"}
    assert by_thread["rackweave-push"] == ["bind_thread"] + ["host_wait"] * 3
    assert by_thread["rackweave-land"] == ["bind_thread"] + ["to_device"] * 3


def test_the_answer_lands_after_finish_and_buffers_are_made_once():
    seen = []

    def exchange(out, into):  # the node: the answer is twice the gradient
        seen.append((out.data_ptr(), into.data_ptr()))
        into.copy_(out * 2)
        return Done()

    p = Pipeline(HostOps())
    try:
        for step in range(3):
            grad = torch.arange(6, dtype=torch.float32).reshape(2, 3) + step
            param = torch.zeros(2, 3)
            p.submit("w", grad, param, exchange, finish=lambda h: h.add_(1)).result(timeout=10)
            assert torch.equal(param, grad * 2 + 1)
        assert len(set(seen)) == 1  # the same two buffers every step
        out, into = p.buffers("w", 6)
        assert out.data_ptr() != into.data_ptr()
        assert p.buffers("w", 8)[0].numel() == 8  # a new size: new buffers
    finally:
        p.close()


class Pin:
    """What Worker.register_buffer returns where chunks travel over libfabric."""

    def __init__(self, buffer):
        self.buffer, self.active = buffer, True

    def release(self):
        self.active = False


def test_each_buffer_is_registered_once_when_made_and_released_at_close():
    pins = []

    def register(buffer):
        pins.append(Pin(buffer))
        return pins[-1]

    p = Pipeline(HostOps(), register=register)
    for _ in range(3):
        p.submit("w", torch.ones(6), torch.zeros(6),
                 lambda out, into: (into.copy_(out), Done())[1]).result(timeout=10)
    assert len(pins) == 2  # out and in, once, reused every step
    assert {id(x.buffer) for x in pins} == {id(b) for b in p.buffers("w", 6)}
    p.buffers("w", 8)  # a DDP bucket rebuilt: the old ones go, the new ones register
    assert [x.active for x in pins] == [False, False, True, True]
    p.close()
    assert not any(x.active for x in pins)
    assert p.registrations() == []
    # Over TCP or shared memory register_buffer gives None: nothing is kept.
    q = Pipeline(HostOps(), register=lambda b: None)
    q.buffers("w", 4)
    assert q.registrations() == []
    q.close()


def test_staging_buffers_register_with_the_nic_once_over_fabric():
    """ServerOptimizer over libfabric (the tcp provider): its pinned buffers are
    registered when made, and training makes no registration after that."""
    from rwnode import running_node

    with running_node("--open-jobs", "--fabric", "tcp") as address:
        model = torch.nn.Linear(64, 32)
        opt = rwt.ServerOptimizer(model.named_parameters(), optimizer="sgd", lr=0.1,
                                  connect=address, job="fabric-pins", rank=0, workers=1,
                                  transport="fabric", staging=True)
        try:
            assert opt.worker.transport == "fabric"
            pins = opt._stage.registrations()
            assert len(pins) == 2 * len(opt.params) and all(x.active for x in pins)
            before = opt.worker.fabric_registrations
            assert before >= len(pins)
            x = torch.randn(16, 64)
            for _ in range(4):
                model(x).square().mean().backward()
                opt.step()
                opt.zero_grad()
            assert opt.worker.fabric_registrations == before  # none on the way
        finally:
            opt.close()
        assert not any(x.active for x in pins)


def test_in_place_answers_over_the_out_buffer():
    p = Pipeline(HostOps())
    try:
        def exchange(out, into):
            assert out.data_ptr() == into.data_ptr()
            into.mul_(3)
            return Done()
        dst = torch.ones(4)
        p.submit("b", dst, dst, exchange, in_place=True).result(timeout=10)
        assert torch.equal(dst, torch.full((4,), 3.0))
    finally:
        p.close()


def test_errors_reach_the_waiter_and_the_pipeline_goes_on():
    p = Pipeline(HostOps())
    try:
        def refused(out, into):
            raise ValueError("the node said no")
        f = p.submit("a", torch.ones(2), torch.zeros(2), refused)
        with pytest.raises(ValueError, match="said no"):
            f.result(timeout=10)

        def failed(out, into):
            return Done(RuntimeError("timeout"))
        with pytest.raises(RuntimeError, match="timeout"):
            p.submit("a", torch.ones(2), torch.zeros(2), failed).result(timeout=10)

        dst = torch.zeros(2)
        p.submit("a", torch.ones(2), dst, lambda o, i: (i.copy_(o), Done())[1]).result(10)
        assert torch.equal(dst, torch.ones(2))
    finally:
        p.close()


def test_answers_land_in_submission_order_and_close_waits_for_them():
    order = []
    gate = threading.Event()

    class Slow:
        def __init__(self, name):
            self.name = name

        def result(self):
            if self.name == "first":
                gate.wait(10)
            order.append(self.name)

    p = Pipeline(HostOps())
    a = p.submit("first", torch.ones(1), torch.zeros(1), lambda o, i: Slow("first"))
    b = p.submit("second", torch.ones(1), torch.zeros(1), lambda o, i: Slow("second"))
    assert not a.done() and not b.done()
    gate.set()
    p.close()
    assert a.done() and b.done() and order == ["first", "second"]
    with pytest.raises(RuntimeError, match="closed"):
        p.submit("late", torch.ones(1), torch.zeros(1), lambda o, i: Done())


class Fake:
    """What device_of reads of a tensor, on any device, without that device."""

    def __init__(self, device, dtype=torch.float32, contiguous=True):
        self.device, self.dtype, self._contiguous = torch.device(device), dtype, contiguous

    def is_contiguous(self):
        return self._contiguous


def test_one_device_per_worker_and_clear_errors():
    assert device_of([("a", Fake("cuda:0")), ("b", Fake("cuda:0"))], "X") == torch.device("cuda:0")
    assert device_of([("a", Fake("cpu"))], "X").type == "cpu"
    with pytest.raises(TypeError, match="'b' is on cuda:1 but 'a' is on cuda:0 .a second GPU"):
        device_of([("a", Fake("cuda:0")), ("b", Fake("cuda:1"))], "X")
    with pytest.raises(TypeError, match="'b' is on cuda:0 but 'a' is on cpu .another device"):
        device_of([("a", Fake("cpu")), ("b", Fake("cuda:0"))], "X")
    with pytest.raises(TypeError, match="'a' is not contiguous"):
        device_of([("a", Fake("cuda:0", contiguous=False))], "X")
    with pytest.raises(TypeError, match="'a' must be float32 .it is torch.float16"):
        device_of([("a", Fake("cuda:0", torch.float16))], "X")
    with pytest.raises(TypeError, match="'a' is on meta; RackWeave takes CPU and CUDA"):
        device_of([("a", Fake("meta"))], "X")


def test_the_native_worker_names_what_takes_cuda_tensors(node):
    import rackweave
    w = rackweave.Worker(connect=node, job=f"staging-{next(_jobs)}", rank=0, workers=1,
                         tensors={"w": 4}, optimizer="sum")
    try:
        cuda_like = torch.empty(4, device="meta")
        with pytest.raises(TypeError, match="rackweave.torch"):
            w.push_pull("w", cuda_like, torch.empty(4)).result()
    finally:
        w.close()


class Bucket:
    """What allreduce_hook reads of DDP's GradBucket."""

    def __init__(self, index, params, buffer):
        self._index, self._params, self._buffer = index, params, buffer

    def index(self):
        return self._index

    def parameters(self):
        return self._params

    def buffer(self):
        return self._buffer


def hook_means(node, device, staging):
    """Two ranks (threads) each hand allreduce_hook a bucket of two parameters holding
    rank-dependent gradients; returns each rank's bucket afterwards."""
    job, workers = f"hook-{next(_jobs)}", 2
    models = [torch.nn.Linear(3, 2).to(device) for _ in range(workers)]
    got = [None] * workers

    def rank(r):
        params = list(models[r].parameters())
        state = rwt.HookState(models[r].named_parameters(), connect=node, job=job, rank=r,
                              workers=workers, staging=staging)
        try:
            for step in range(2):
                n = sum(p.numel() for p in params)
                buf = (torch.arange(n, dtype=torch.float32) * (r + 1) + step).to(device)
                fut = rwt.allreduce_hook(state, Bucket(0, params, buf))
                got[r] = fut.wait().cpu().clone()
        finally:
            state.close()

    run_ranks(workers, rank)
    return got


@pytest.mark.parametrize("staging", [False, True])
def test_the_ddp_hook_gives_the_mean(node, staging):
    got = hook_means(node, "cpu", staging)
    n = got[0].numel()
    want = (torch.arange(n, dtype=torch.float32) * 1 + 1 + torch.arange(n) * 2 + 1) / 2
    for g in got:
        assert torch.equal(g, want)


STEPS, LR, WORKERS = 4, 0.1, 2


def data(rank):
    return rank_data(100, rank)


@needs_cuda
@pytest.mark.parametrize("lazy", [False, True])
def test_cuda_parameters_train_as_the_reference(node, lazy):
    got = server_losses(node, f"staging-{next(_jobs)}", STEPS, WORKERS, LR, data, "cuda", lazy)
    want = reference_losses(STEPS, WORKERS, lambda s: LR, data)
    for s in range(STEPS):
        assert got[s] == pytest.approx(want[s], rel=1e-4, abs=1e-5), f"step {s}"


@needs_cuda
def test_cuda_buckets_through_the_hook(node):
    cpu = hook_means(node, "cpu", False)
    cuda = hook_means(node, "cuda", False)
    for a, b in zip(cpu, cuda):
        assert torch.equal(a, b)


# Issue 63, item 9: the pipeline's threads are daemons, which the interpreter stops
# wherever they are at exit: a push or a copy half done. A pipeline nobody closed is
# closed at exit now, its answers landed first.
def test_a_pipeline_nobody_closed_lands_its_answers_before_the_interpreter_exits(tmp_path):
    mark = tmp_path / "landed"
    script = f"""
import time, torch
from rackweave.staging import HostOps, Pipeline
class Done:
    def result(self):
        return None
def exchange(out, into):
    time.sleep(0.5)  # the node takes a while
    into.copy_(out)
    return Done()
p = Pipeline(HostOps())
p.submit("w", torch.ones(4), torch.zeros(4), exchange,
         finish=lambda host: open({str(mark)!r}, "w").write("ok"))
"""  # and exits at once, without close()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", script], env=env, timeout=60,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert mark.read_text() == "ok"


def test_close_waits_for_a_backward_with_no_step_and_is_idempotent(node):
    model = torch.nn.Linear(4, 2)
    opt = rwt.ServerOptimizer(model.named_parameters(), optimizer="sgd", lr=0.1,
                              connect=node, job=f"staging-{next(_jobs)}", rank=0,
                              workers=1, staging=True)
    model(torch.ones(3, 4)).sum().backward()  # pushed, no step()
    assert opt._pending
    opt.close()
    assert not opt._pending and not opt._inflight
    opt.close()  # nothing more to do
