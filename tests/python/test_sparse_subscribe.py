"""Sparse pushes, pull_changed and subscriptions from Python, on NumPy arrays and torch
tensors, checked against what the dense calls give."""

import itertools
import threading
import time

import numpy as np
import pytest

import rackweave
from rwnode import run_ranks

_jobs = itertools.count()
N = 4096  # four 4 KiB chunks


def job_name():
    return f"sparse-{next(_jobs)}"


def test_sparse_pushes_add_up_as_dense_ones(node):
    job = job_name()
    outs = [np.zeros(N, np.float32) for _ in range(2)]
    idx = [np.array([3, 3, 1500, 4095], np.int64), np.array([7, 3000], np.uint64)]
    vals = [np.array([1.0, 2.0, 0.5, -1.0], np.float32), np.array([4.0, 8.0], np.float32)]

    def rank(r):
        with rackweave.Worker(connect=node, job=job, rank=r, workers=2, tensors={"e": N},
                              chunk_bytes=4096) as w:
            w.push_pull_sparse("e", idx[r], vals[r], outs[r]).result(timeout=60)

    run_ranks(2, rank)
    want = np.zeros(N, np.float32)
    for i, v in zip(idx, vals):
        np.add.at(want, i.astype(np.int64), v)
    assert outs[0].tobytes() == outs[1].tobytes() == want.tobytes()


def test_sparse_bad_input(node):
    with rackweave.Worker(connect=node, job=job_name(), rank=0, workers=1,
                          tensors={"e": N}) as w:
        with pytest.raises(ValueError, match="2 indices but 1 values"):
            w.push_sparse("e", np.array([1, 2], np.int64), np.array([1.0], np.float32))
        with pytest.raises(TypeError, match="int64"):
            w.push_sparse("e", np.array([1.0], np.float32), np.array([1.0], np.float32))
        with pytest.raises(rackweave.Error) as e:
            w.push_sparse("e", np.array([N], np.int64), np.array([1.0], np.float32))
        assert e.value.code in ("bad_chunk", "invalid_spec")
        assert w.clock("e") == 0


def test_pull_changed_and_subscribe(node):
    torch = pytest.importorskip("torch")
    job = job_name()
    w = rackweave.Worker(connect=node, job=job, rank=0, workers=1, tensors={"t": N},
                         chunk_bytes=4096)
    seen, lock = [], threading.Lock()

    def on_version(v):
        with lock:
            seen.append(v)

    mirror = torch.zeros(N)
    w.subscribe("t", mirror, on_version).result(timeout=30)
    out = np.zeros(N, np.float32)
    # Step 2 is a sparse push into chunk 1; every chunk still makes version 2 (a step
    # runs for every chunk: the others' gradient counts as zero).
    w.push_pull("t", np.ones(N, np.float32), out).result(timeout=30)
    w.push_pull_sparse("t", np.array([1500], np.int64), np.array([2.0], np.float32),
                       out).result(timeout=30)
    changed = np.full(N, -1.0, np.float32)
    w.pull_changed("t", changed, 1).result(timeout=30)
    assert w.last_changed("t") == 4
    assert changed.tobytes() == out.tobytes()
    w.pull_changed("t", changed, 2).result(timeout=30)
    assert w.last_changed("t") == 0  # nothing newer than version 2
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with lock:
            if 2 in seen:
                break
        time.sleep(0.01)
    with lock:
        assert 2 in seen and seen == sorted(seen)
    assert mirror.numpy().tobytes() == out.tobytes()
    with pytest.raises(TypeError, match="callable"):
        w.subscribe("t", np.zeros(N, np.float32), 5)
    w.close()
