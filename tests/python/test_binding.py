"""The rackweave package's Worker: every call, the errors, and zero copies."""

import itertools

import numpy as np
import pytest

import rackweave
from rwnode import run_ranks

_jobs = itertools.count()


def job_name():
    return f"py-{next(_jobs)}"


def gradient(rank, n, step=0):
    rng = np.random.default_rng(1000 * rank + step)
    return rng.uniform(-1, 1, n).astype(np.float32)


def test_push_pull_is_the_rank_order_sum_bitwise(node):
    job, n, workers = job_name(), 100_000, 3
    outs = {}

    def rank(r):
        with rackweave.Worker(connect=node, job=job, rank=r, workers=workers,
                              tensors={"w": n, "b": 10}, chunk_bytes=16384) as w:
            assert w.rank == r and w.transport == "tcp"
            for step in range(3):
                out = np.full(n, np.nan, np.float32)
                before = out.__array_interface__["data"][0]
                f = w.push_pull("w", gradient(r, n, step), out)
                f.result(timeout=60)
                assert f.done()
                # Written in place: the array the caller gave, at the same address.
                assert out.__array_interface__["data"][0] == before
                outs[(r, step)] = out
            assert w.clock("w") == 3

    run_ranks(workers, rank)
    for step in range(3):
        expect = gradient(0, n, step)
        for r in range(1, workers):
            expect = expect + gradient(r, n, step)  # float32, rank order
        for r in range(workers):
            assert outs[(r, step)].tobytes() == expect.tobytes()


def test_torch_tensors_in_place(node):
    torch = pytest.importorskip("torch")
    job, n = job_name(), 5000

    def rank(r):
        w = rackweave.Worker(connect=node, job=job, rank=r, workers=2, tensors={"p": n},
                             optimizer="sgd", lr=0.5)
        grad = torch.from_numpy(gradient(r, n))
        out = torch.empty(n, dtype=torch.float32)
        ptr = out.data_ptr()
        w.push_pull("p", grad, out).result()
        assert out.data_ptr() == ptr
        # SGD from zeros: -lr * (g0 + g1) / workers, as the node computes it.
        expect = (gradient(0, n) + gradient(1, n)) * np.float32(1 / 2)
        np.testing.assert_allclose(out.numpy(), -0.5 * expect, rtol=1e-6, atol=1e-7)
        w.close()

    run_ranks(2, rank)


def test_push_then_pull_and_init(node):
    job, n = job_name(), 1000
    values = gradient(7, n)

    def rank(r):
        w = rackweave.Worker(connect=node, job=job, rank=r, workers=2,
                             tensors=[("x", n, True)])
        if r == 0:
            w.init("x", values).result()
        start = np.empty(n, np.float32)
        w.pull("x", start, 0).result()
        assert start.tobytes() == values.tobytes()
        w.push("x", gradient(r, n)).result()
        after = np.empty(n, np.float32)
        w.pull("x", after, 1).result()
        assert after.tobytes() == (gradient(0, n) + gradient(1, n)).tobytes()
        w.close()

    run_ranks(2, rank)


def test_bad_buffers_are_refused_at_the_call(node):
    w = rackweave.Worker(connect=node, job=job_name(), rank=0, workers=1, tensors={"t": 8})
    good = np.zeros(8, np.float32)
    with pytest.raises(TypeError, match="float32"):
        w.push("t", np.zeros(8, np.float64))
    with pytest.raises(TypeError, match="C-contiguous"):
        w.push("t", np.zeros(16, np.float32)[::2])
    with pytest.raises(ValueError, match="7 elements"):
        w.push("t", np.zeros(7, np.float32))
    readonly = np.zeros(8, np.float32)
    readonly.setflags(write=False)
    with pytest.raises(TypeError, match="read-only"):
        w.pull("t", readonly)
    with pytest.raises(TypeError, match="NumPy array or a torch tensor"):
        w.push("t", [0.0] * 8)
    with pytest.raises(rackweave.Error) as e:
        w.push("nope", good)
    assert e.value.code == "unknown_tensor"
    w.push_pull("t", good, np.empty(8, np.float32)).result()
    w.close()
    with pytest.raises(rackweave.Error) as e:
        w.push("t", good)
    assert e.value.code == "closed"


def test_torch_bad_tensors(node):
    torch = pytest.importorskip("torch")
    w = rackweave.Worker(connect=node, job=job_name(), rank=0, workers=1, tensors={"t": 8})
    with pytest.raises(TypeError, match="float32"):
        w.push("t", torch.zeros(8, dtype=torch.float64))
    with pytest.raises(TypeError, match="not contiguous"):
        w.push("t", torch.zeros(16)[::2])
    with pytest.raises(TypeError, match="requires grad"):
        w.pull("t", torch.zeros(8, requires_grad=True))
    w.close()


def test_a_node_that_is_not_there(node):
    with pytest.raises(rackweave.Error) as e:
        rackweave.Worker(connect="127.0.0.1:1", job=job_name(), rank=0, workers=1,
                         tensors={"t": 8}, timeout=5)
    assert e.value.code == "io_error"
    assert "127.0.0.1:1" in str(e.value)


def test_a_missing_rank_is_a_timeout_not_a_hang(node):
    w = rackweave.Worker(connect=node, job=job_name(), rank=0, workers=2, tensors={"t": 8},
                         timeout=1)
    out = np.empty(8, np.float32)
    f = w.push_pull("t", np.ones(8, np.float32), out)
    with pytest.raises(TimeoutError):
        f.result(timeout=0.05)  # still running: rank 1 never comes
    with pytest.raises(rackweave.Error) as e:
        f.result()  # the worker's request timeout ends it
    assert e.value.code == "timeout"
    w.close()


def test_a_future_dropped_early_keeps_its_buffers(node):
    job, n = job_name(), 50_000

    def rank(r):
        w = rackweave.Worker(connect=node, job=job, rank=r, workers=2, tensors={"t": n})
        if r == 0:
            # Nobody keeps the arrays but the future, which is dropped at once: it waits
            # for the call before they can go.
            w.push_pull("t", gradient(0, n), np.empty(n, np.float32))
        else:
            out = np.empty(n, np.float32)
            w.push_pull("t", gradient(1, n), out).result()
            assert out.tobytes() == (gradient(0, n) + gradient(1, n)).tobytes()
        w.close()

    run_ranks(2, rank)


def test_a_spec_that_differs_is_refused(node):
    job = job_name()
    first = rackweave.Worker(connect=node, job=job, rank=0, workers=2, tensors={"t": 8})
    with pytest.raises(rackweave.Error) as e:
        rackweave.Worker(connect=node, job=job, rank=1, workers=2, tensors={"t": 9})
    assert e.value.code == "spec_mismatch"
    with pytest.raises(ValueError, match="unknown optimizer"):
        rackweave.Worker(connect=node, job=job, rank=1, workers=2, tensors={"t": 8},
                         optimizer="nope")
    first.close()


def test_push_pull_regions_is_push_pull_in_place_for_each_region(node):
    # Two tensors staged in one buffer (a bucket of an arena): one call, each region's
    # gradient replaced by the rank-order sum, in place; a region that runs past the
    # buffer is refused before anything is pushed.
    job, workers = job_name(), 2
    outs = {}

    def rank(r):
        with rackweave.Worker(connect=node, job=job, rank=r, workers=workers,
                              tensors={"w": 1000, "b": 10}, chunk_bytes=1024) as w:
            with pytest.raises(ValueError, match="runs past the buffer"):
                w.push_pull_regions(np.zeros(1005, np.float32), [("w", 0), ("b", 1000)])
            with pytest.raises(rackweave.Error, match="not part of job"):
                w.push_pull_regions(np.zeros(1010, np.float32), [("x", 0)])
            assert w.clock("w") == 0 and w.clock("b") == 0  # nothing was pushed
            buf = np.zeros(1024, np.float32)
            buf[0:1000] = gradient(r, 1000)
            buf[1008:1018] = gradient(r, 10, 1)
            w.push_pull_regions(buf, [("w", 0), ("b", 1008)]).result(timeout=60)
            outs[r] = buf
            assert w.clock("w") == 1 and w.clock("b") == 1

    run_ranks(workers, rank)
    want_w = gradient(0, 1000) + gradient(1, 1000)
    want_b = gradient(0, 10, 1) + gradient(1, 10, 1)
    for r in range(workers):
        assert outs[r][0:1000].tobytes() == want_w.tobytes()
        assert outs[r][1008:1018].tobytes() == want_b.tobytes()
        assert not outs[r][1000:1008].any() and not outs[r][1018:].any()
