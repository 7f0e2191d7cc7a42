"""Gradient compression from Python: the spec's compression and compress_updates, what
the results are (rounded as the wire carries them), and the refusals."""

import itertools

import numpy as np
import pytest

import rackweave
from rwnode import run_ranks

_jobs = itertools.count()
N = 3000


def job_name():
    return f"compressed-{next(_jobs)}"


@pytest.mark.parametrize("transport", ["tcp", "auto"])
def test_bf16_rounds_pushes_and_updates(node, transport):
    job = job_name()
    # 1 + 2^-8 is a bf16 tie: to even, 1. 1 + 3 * 2^-9 rounds up to 1 + 2^-7. The node
    # sums 2 + 2^-7 in float32; the bf16 update rounds that, to even, to 2.
    grads = [np.full(N, 1 + 2**-8, np.float32), np.full(N, 1 + 3 * 2**-9, np.float32)]
    outs = [np.empty(N, np.float32) for _ in range(2)]

    def rank(r):
        with rackweave.Worker(connect=node, job=job, rank=r, workers=2, tensors={"g": N},
                              chunk_bytes=4096, compression="bf16", compress_updates=True,
                              transport=transport) as w:
            assert w.spec["compression"] == "bf16"
            assert w.spec["compress_updates"] is True
            w.push_pull("g", grads[r], outs[r]).result(timeout=60)

    run_ranks(2, rank)
    assert (outs[0] == 2.0).all() and (outs[1] == 2.0).all()


def test_topk_sends_the_largest_and_keeps_the_rest(node):
    job = job_name()
    # One chunk of 1024 elements (the shortest top-k thins), ratio 0.002: 3 per step.
    with rackweave.Worker(connect=node, job=job, rank=0, workers=1, tensors={"g": 1024},
                          chunk_bytes=4096, compression="topk:0.002") as w:
        g = np.zeros(1024, np.float32)
        g[:8] = [5, 1, -3, 0.5, 0, 0, 0, 0.25]
        out = np.empty(1024, np.float32)
        w.push_pull("g", g, out).result(60)
        assert out[:8].tolist() == [5, 1, -3, 0, 0, 0, 0, 0] and not out[8:].any()
        w.push_pull("g", np.zeros(1024, np.float32), out).result(60)
        assert out[:8].tolist() == [0, 0, 0, 0.5, 0, 0, 0, 0.25] and not out[8:].any()


def test_topk_sends_a_short_tensor_whole_and_warms_up(node):
    with rackweave.Worker(connect=node, job=job_name(), rank=0, workers=1, tensors={"b": 8},
                          compression="topk:0.25") as w:
        g = np.array([5, 1, -3, 0.5, 0, 0, 0, 0.25], np.float32)
        out = np.empty(8, np.float32)
        w.push_pull("b", g, out).result(60)
        assert out.tolist() == g.tolist()
    with rackweave.Worker(connect=node, job=job_name(), rank=0, workers=1, tensors={"g": 4096},
                          chunk_bytes=16384, compression="topk:0.001,warmup=4") as w:
        assert w.spec["compression"] == "topk:0.001,warmup=4"
        g = np.arange(1, 4097, dtype=np.float32)
        out = np.empty(4096, np.float32)
        counts = []
        for _ in range(5):
            w.push_pull("g", g, out).result(60)
            counts.append(int(np.count_nonzero(out)))
        assert counts == [1024, 256, 64, 16, 5]


def test_bad_compressions_are_refused(node):
    with pytest.raises(ValueError, match="not a compression"):
        rackweave.Worker(connect=node, job=job_name(), rank=0, workers=1, tensors={"g": 8},
                         compression="zip")
    with pytest.raises(ValueError, match="only ',warmup=STEPS' may follow"):
        rackweave.Worker(connect=node, job=job_name(), rank=0, workers=1, tensors={"g": 8},
                         compression="topk:0.1,warm=3")
    with pytest.raises(ValueError, match="ratio after topk"):
        rackweave.Worker(connect=node, job=job_name(), rank=0, workers=1, tensors={"g": 8},
                         compression="topk:3")
    with pytest.raises(rackweave.Error) as e:
        rackweave.Worker(connect=node, job=job_name(), rank=0, workers=1, tensors={"g": 8},
                         compression="topk:0.5", compress_updates=True)
    assert e.value.code == "invalid_spec"
    job = job_name()
    first = rackweave.Worker(connect=node, job=job, rank=0, workers=2, tensors={"g": 8},
                             compression="fp16")
    try:
        with pytest.raises(rackweave.Error, match="compresses fp16") as e:
            rackweave.Worker(connect=node, job=job, rank=1, workers=2, tensors={"g": 8})
        assert e.value.code == "spec_mismatch"
    finally:
        first.close()
