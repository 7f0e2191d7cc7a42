"""The staging path CUDA tensors take through rackweave.torch (rackweave.staging): its
pipeline with host buffers (no GPU needed), the device checks, the DDP hook through it,
and, where a GPU is present, the same on CUDA tensors."""

import itertools
import os
import subprocess
import sys
import threading
import time

import pytest

from rwnode import run_ranks

torch = pytest.importorskip("torch")
import rackweave.torch as rwt  # noqa: E402 - after the skip
from rackweave.staging import HostOps, Pipeline, arena_elements, device_of  # noqa: E402
from torchref import rank_data, reference_losses, server_losses, transformer_run  # noqa: E402,E501

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

    def to_device(self, copies, after):
        self._note("to_device")
        return super().to_device(copies, after)


def test_each_pipeline_thread_binds_the_device_before_any_device_step():
    # Issue 63, item 4: the pusher and lander threads never set the current CUDA
    # device, so on a rank using GPU k > 0 their first CUDA call made a context on
    # device 0. Each thread now binds the device first (CudaOps: torch.cuda.set_device).
    ops = RecordingOps()
    p = Pipeline(ops, 16)
    try:
        for _ in range(3):
            param = torch.zeros(4)
            p.submit("w", torch.ones(4), lambda buf: Done(), dst=param).result(timeout=10)
    finally:
        p.close()
    by_thread = {}
    for thread, what in ops.calls:
        by_thread.setdefault(thread, []).append(what)
    # The caller's thread waits only for a region's copy to the device before reusing it.
    assert set(by_thread.pop("MainThread", [])) <= {"host_wait"}
    assert set(by_thread) == {"rackweave-push", "rackweave-land"}
    assert by_thread["rackweave-push"] == ["bind_thread"] + ["host_wait"] * 3
    assert by_thread["rackweave-land"] == ["bind_thread"] + ["to_device"] * 3


def test_the_answer_lands_over_the_gradient_in_one_arena_made_once():
    seen = []

    def exchange(buf):  # the node: the answer is twice the gradient, in its place
        seen.append(buf.data_ptr())
        buf.mul_(2)
        return Done()

    p = Pipeline(HostOps(), arena_elements([6]))
    arena = p._arena.buffer
    try:
        for step in range(3):
            grad = torch.arange(6, dtype=torch.float32).reshape(2, 3) + step
            param = torch.zeros(2, 3)
            p.submit("w", grad, exchange, dst=param, finish=lambda h: h.add_(1)).result(10)
            assert torch.equal(param, grad * 2 + 1)
        assert set(seen) == {arena.data_ptr()}  # one region of the one arena, reused
        assert p._arena.buffer is arena and p.host_bytes == 16 * 4  # 6 rounded up to 16
        dst = torch.ones(4)  # the DDP hook's way: the answer goes back into the source
        p.submit("b", dst, lambda buf: (buf.mul_(3), Done())[1]).result(timeout=10)
        assert torch.equal(dst, torch.full((4,), 3.0))
    finally:
        p.close()


class Pin:
    """What Worker.register_buffer returns where chunks travel over libfabric."""

    def __init__(self, buffer):
        self.buffer, self.active = buffer, True

    def release(self):
        self.active = False


def test_the_arena_is_registered_once_when_made_and_released_at_close():
    pins = []

    def register(buffer):
        pins.append(Pin(buffer))
        return pins[-1]

    p = Pipeline(HostOps(), arena_elements([6, 8]), register=register)
    assert len(pins) == 1 and pins[0].buffer is p._arena.buffer
    for n in (6, 8, 6):  # sizes change (a DDP bucket rebuilt): the same arena
        p.submit("w", torch.ones(n), lambda buf: Done(), dst=torch.zeros(n)).result(10)
    assert len(pins) == 1 and pins[0].active
    assert p.registrations() == pins
    p.close()
    assert not pins[0].active
    assert p.registrations() == []
    # Over TCP or shared memory register_buffer gives None: nothing is kept.
    q = Pipeline(HostOps(), 16, register=lambda b: None)
    assert q.registrations() == []
    q.close()


def test_staging_arena_registers_with_the_nic_once_over_fabric():
    """ServerOptimizer over libfabric (the tcp provider): its pinned arena is registered
    when made, and training makes no registration after that."""
    from rwnode import running_node

    with running_node("--open-jobs", "--fabric", "tcp") as address:
        model = torch.nn.Linear(64, 32)
        opt = rwt.ServerOptimizer(model.named_parameters(), optimizer="sgd", lr=0.1,
                                  connect=address, job="fabric-pins", rank=0, workers=1,
                                  transport="fabric", staging=True)
        try:
            assert opt.worker.transport == "fabric"
            pins = opt._stage.registrations()
            assert len(pins) == 1 and pins[0].active
            before = opt.worker.fabric_registrations
            x = torch.randn(16, 64)
            for _ in range(4):
                model(x).square().mean().backward()
                opt.step()
                opt.zero_grad()
            assert opt.worker.fabric_registrations == before  # none on the way
        finally:
            opt.close()
        assert not any(x.active for x in pins)


class Answer:
    """A node's answer that comes when the test says: result() waits for release()."""

    def __init__(self, buf):
        self.buf, self.gate = buf, threading.Event()

    def release(self, value):
        self.buf.fill_(value)
        self.gate.set()

    def result(self):
        assert self.gate.wait(10)


def wait_for(condition, seconds=10):
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_a_bounded_arena_waits_for_the_oldest_answer_and_never_overlaps_live_regions():
    # Issue 63, item 7: 8 bytes a parameter, in two pinned buffers per tensor rounded up
    # to a power of two. Now one arena, and under pinned_bytes staging waits for room:
    # here room for two of the three tensors (16 elements each).
    p = Pipeline(HostOps(), arena_elements([16] * 3, limit_bytes=2 * 16 * 4))
    assert p.host_bytes == 2 * 16 * 4
    answers, params, futures = [], [torch.zeros(16) for _ in range(3)], []

    def exchange(buf):
        answers.append(Answer(buf))
        return answers[-1]

    try:
        futures.append(p.submit("a", torch.full((16,), 1.0), exchange, dst=params[0]))
        futures.append(p.submit("b", torch.full((16,), 2.0), exchange, dst=params[1]))
        third = threading.Thread(target=lambda: futures.append(
            p.submit("c", torch.full((16,), 3.0), exchange, dst=params[2])))
        third.start()
        third.join(0.5)
        assert third.is_alive()  # no room until a's answer lands
        wait_for(lambda: len(answers) == 2)  # both pushed
        answers_at = [a.buf.data_ptr() for a in answers]
        assert answers_at[0] != answers_at[1]
        answers[1].release(20.0)  # b answers first: a's region is still the oldest
        third.join(0.3)
        assert third.is_alive()
        answers[0].release(10.0)
        third.join(10)
        assert not third.is_alive()
        wait_for(lambda: len(answers) == 3)
        assert answers[2].buf.data_ptr() == answers_at[0]  # a's region, taken back
        answers[2].release(30.0)
        for f in futures:
            f.result(timeout=10)
        assert [float(x[0]) for x in params] == [10.0, 20.0, 30.0]
    finally:
        for a in answers:
            a.gate.set()
        p.close()


def test_a_limit_below_the_largest_tensor_is_refused():
    assert arena_elements([5, 100]) == 16 + 112
    assert arena_elements([5, 100], limit_bytes=1 << 20) == 128  # more than needed
    with pytest.raises(ValueError, match="cannot hold the largest tensor .400 bytes"):
        arena_elements([5, 100], limit_bytes=256)
    p = Pipeline(HostOps(), 16)
    try:
        with pytest.raises(RuntimeError, match="bucket_cap_mb"):
            p.submit("big", torch.ones(17), lambda buf: Done())
    finally:
        p.close()


def test_errors_reach_the_waiter_and_the_pipeline_goes_on():
    p = Pipeline(HostOps(), 16)  # room for one: a failed push gives its region back
    try:
        def refused(buf):
            raise ValueError("the node said no")
        f = p.submit("a", torch.ones(2), refused, dst=torch.zeros(2))
        with pytest.raises(ValueError, match="said no"):
            f.result(timeout=10)

        def failed(buf):
            return Done(RuntimeError("timeout"))
        with pytest.raises(RuntimeError, match="timeout"):
            p.submit("a", torch.ones(2), failed, dst=torch.zeros(2)).result(timeout=10)

        dst = torch.zeros(2)
        p.submit("a", torch.ones(2), lambda buf: Done(), dst=dst).result(10)
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

    p = Pipeline(HostOps(), 32)
    a = p.submit("first", torch.ones(1), lambda buf: Slow("first"), dst=torch.zeros(1))
    b = p.submit("second", torch.ones(1), lambda buf: Slow("second"), dst=torch.zeros(1))
    assert not a.done() and not b.done()
    gate.set()
    p.close()
    assert a.done() and b.done() and order == ["first", "second"]
    with pytest.raises(RuntimeError, match="closed"):
        p.submit("late", torch.ones(1), lambda buf: Done())


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
# torchref's model: tensors of 32, 8, 8 and 1 elements, 80 once each is rounded up to 16;
# 48 hold the largest and one more.
BOUND_BYTES = 48 * 4


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
def exchange(buf):
    time.sleep(0.5)  # the node takes a while
    return Done()
p = Pipeline(HostOps(), 16)
p.submit("w", torch.ones(4), exchange, dst=torch.zeros(4),
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


# Issue 63, item 7: pinned memory was two buffers per tensor, each rounded up to a power
# of two by torch's pinned allocator (up to 4 x the parameters' bytes); one arena now.
def test_the_arena_holds_the_parameters_bytes_once(node):
    model = torch.nn.Sequential(torch.nn.Linear(100, 30), torch.nn.Linear(30, 7))
    opt = rwt.ServerOptimizer(model.named_parameters(), optimizer="sgd", lr=0.1,
                              connect=node, job=f"staging-{next(_jobs)}", rank=0,
                              workers=1, staging=True)
    try:
        params = sum(p.numel() * 4 for p in model.parameters())
        assert params <= opt.staging_bytes <= params + 64 * len(list(model.parameters()))
        assert opt.staging_bytes <= 1.1 * params
    finally:
        opt.close()
    plain = rwt.ServerOptimizer(model.named_parameters(), optimizer="sgd", lr=0.1,
                                connect=node, job=f"staging-{next(_jobs)}", rank=0,
                                workers=1)
    assert plain.staging_bytes == 0  # CPU parameters in place: no arena
    plain.close()
    with pytest.raises(ValueError, match="only with staging=True"):
        rwt.ServerOptimizer(model.named_parameters(), optimizer="sgd", lr=0.1,
                            connect=node, job=f"staging-{next(_jobs)}", rank=0, workers=1,
                            pinned_bytes=1 << 20)
    with pytest.raises(ValueError, match="cannot hold the largest tensor"):
        rwt.ServerOptimizer(model.named_parameters(), optimizer="sgd", lr=0.1,
                            connect=node, job=f"staging-{next(_jobs)}", rank=0, workers=1,
                            staging=True, pinned_bytes=1000)


@pytest.mark.parametrize("lazy", [False, True])
def test_a_bounded_arena_trains_bitwise_as_an_unbounded_one(node, lazy):
    # Room for about a third of the model at once: staging waits for answers to land.
    unbounded = server_losses(node, f"staging-{next(_jobs)}", STEPS, WORKERS, LR, data,
                              lazy=lazy, staging=True)
    bounded = server_losses(node, f"staging-{next(_jobs)}", STEPS, WORKERS, LR, data,
                            lazy=lazy, staging=True, pinned_bytes=BOUND_BYTES)
    assert bounded == unbounded
    want = reference_losses(STEPS, WORKERS, lambda s: LR, data)
    for s in range(STEPS):
        assert bounded[s] == pytest.approx(want[s], rel=1e-4, abs=1e-5), f"step {s}"


@pytest.mark.parametrize("staging", [False, True])
def test_a_transformer_trains_bitwise_the_same_with_model_as_without(node, staging):
    jobs = (f"staging-{next(_jobs)}" for _ in range(2))
    lazy_losses, lazy_params = transformer_run(node, next(jobs), True, staging)
    eager_losses, eager_params = transformer_run(node, next(jobs), False, staging)
    assert lazy_losses == eager_losses
    for r in range(len(lazy_params)):
        for a, b, c in zip(lazy_params[r], eager_params[r], lazy_params[0]):
            assert torch.equal(a, b) and torch.equal(a, c)


def test_the_arena_never_hands_out_overlapping_regions():
    # A ring under a bound, regions landing in random order: every live region lies in
    # the arena and overlaps no other, and each request is served once room is back.
    import random
    from rackweave.staging import _Arena
    rng = random.Random(63)
    for trial in range(20):
        sizes = [rng.randint(1, 200) for _ in range(30)]
        arena = _Arena(HostOps(), arena_elements(sizes, limit_bytes=4 * rng.randint(208, 900)))
        live = []
        for n in sizes * 3:
            # Land some of the regions out there, in any order, until this one fits.
            while True:
                for r in rng.sample(live, k=min(len(live), rng.randint(1, 3))):
                    arena.landed([r], None)
                    live.remove(r)
                try:
                    region = arena.acquire(n, lambda: True, None)  # closed: never waits
                    break
                except RuntimeError as e:
                    assert "closed" in str(e) and live, (trial, n)
            live.append(region)
            held = sorted((r[0], r[1]) for r in arena._live)  # landed ones not yet reused too
            assert all(0 <= a < b <= arena.elements for a, b in held)
            assert all(b1 <= a2 for (_, b1), (a2, _) in zip(held, held[1:])), held


def test_in_place_exchanges_of_a_bucket_go_in_one_native_call_in_push_order():
    # A bucket of InPlace tensors, a callable one between them: the runs of InPlace
    # items go as one push_pull_regions call each, every tensor in its push order, at
    # the start of its region; each answer lands over its gradient.
    from rackweave.staging import InPlace
    pushed = []

    def push_pull_regions(buffer, regions):
        for name, first in regions:
            pushed.append((name, first))
            n = {"a": 16, "b": 32, "d": 16}[name]
            buffer[first:first + n].mul_(2)
        return Done()

    def callable_exchange(buf):
        pushed.append(("c", None))
        buf.mul_(3)
        return Done()

    p = Pipeline(HostOps(), arena_elements([16, 32, 16, 16]), push_pull_regions=push_pull_regions)
    try:
        grads = {n: torch.full((k,), 1.0) for n, k in (("a", 16), ("b", 32), ("c", 16),
                                                         ("d", 16))}
        outs = {n: torch.zeros_like(g) for n, g in grads.items()}
        for n in ("a", "b"):
            p.stage(n, grads[n], InPlace(((n, 0),)), dst=outs[n])
        p.stage("c", grads["c"], callable_exchange, dst=outs["c"])
        done = p.stage("d", grads["d"], InPlace(((n, 0) for n in "d")), dst=outs["d"])
        p.flush()
        done.result(timeout=10)
        assert pushed == [("a", 0), ("b", 16), ("c", None), ("d", 64)]
        assert [outs[n][0].item() for n in "abcd"] == [2.0, 2.0, 3.0, 2.0]
        with pytest.raises(ValueError, match="push_pull_regions"):
            Pipeline(HostOps(), 16).stage("a", grads["a"], InPlace((("a", 0),)))
    finally:
        p.close()


def test_a_mean_is_divided_on_the_device_behind_the_copy_not_in_the_arena():
    # divide= (the DDP hook's mean): to_device gets the divisor with the copy and divides
    # the device tensor on its stream; the arena keeps the node's sum as it came.
    class DividingOps(HostOps):
        def __init__(self):
            self.divisors = []

        def to_device(self, copies, after):
            self.divisors.extend(d for _, _, d in copies)
            return super().to_device(copies, after)

    ops = DividingOps()
    p = Pipeline(ops, arena_elements([16]))
    try:
        grad = torch.full((16,), 3.0)

        def exchange(buf):  # the node's sum of four ranks' 3.0
            buf.mul_(4)
            return Done()

        p.submit("b", grad, exchange, divide=4).result(timeout=10)
        assert ops.divisors == [4]
        assert torch.equal(grad, torch.full((16,), 3.0))  # 12 / 4, on the "device"
        assert torch.equal(p._arena.buffer[:16], torch.full((16,), 12.0))
    finally:
        p.close()
