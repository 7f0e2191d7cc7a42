"""Joining with the job's name and token alone: the node sends the spec. The first
worker of a job created without tensors declares them; later workers read them; a
stated spec is still checked."""

import numpy as np
import pytest

import rackweave
from rwnode import run_ranks, running_node


@pytest.fixture(scope="module")
def cluster():
    with running_node("--name", "byname") as address:
        yield address


def test_workers_join_with_name_and_token(cluster):
    job = rackweave.create_job(cluster, "by-name", workers=2, optimizer="sgd", lr=0.25,
                               chunk_bytes=64)
    token = job["token"]
    # No tensors declared yet, and this worker declares none either.
    with pytest.raises(rackweave.Error) as e:
        rackweave.Worker(connect=cluster, job="by-name", rank=0, token=token)
    assert e.value.code == "invalid_spec" and "no tensors yet" in str(e.value)
    first = rackweave.Worker(connect=cluster, job="by-name", rank=0, token=token,
                             tensors={"w": 40})
    second = rackweave.Worker(connect=cluster, job="by-name", rank=1, token=token)
    for w in (first, second):
        s = w.spec
        assert (s["name"], s["workers"], s["optimizer"], s["chunk_bytes"]) == \
            ("by-name", 2, "sgd", 64)
        assert s["lr"] == 0.25 and s["tensors"] == [("w", 40, False)]
    outs = [np.empty(40, np.float32) for _ in range(2)]

    def step(rank):
        w = (first, second)[rank]
        w.push_pull("w", np.full(40, rank + 1.0, np.float32), outs[rank]).result()

    run_ranks(2, step)
    # p = 0 - 0.25 * (1 + 2) / 2, on both ranks, over several chunks (64-byte chunks).
    assert outs[0].tolist() == outs[1].tolist() == [-0.375] * 40
    # A stated tensor list that differs is refused; an unknown rank too.
    with pytest.raises(rackweave.Error) as e:
        rackweave.Worker(connect=cluster, job="by-name", rank=1, token=token,
                         tensors={"w": 41})
    assert e.value.code == "spec_mismatch"
    with pytest.raises(rackweave.Error) as e:
        rackweave.Worker(connect=cluster, job="by-name", rank=2, token=token)
    assert e.value.code == "bad_rank"
    first.close()
    second.close()
    rackweave.delete_job(cluster, "by-name")


def test_name_only_needs_an_existing_job_and_the_token(cluster):
    with pytest.raises(rackweave.Error) as e:
        rackweave.Worker(connect=cluster, job="never-made", rank=0, token="x" * 64)
    assert e.value.code == "unknown_job"
    job = rackweave.create_job(cluster, "by-name-2", workers=1)
    with pytest.raises(rackweave.Error) as e:
        rackweave.Worker(connect=cluster, job="by-name-2", rank=0, token="y" * 64,
                         tensors={"w": 4})
    assert e.value.code == "unauthorized"
    with pytest.raises(rackweave.Error) as e:
        rackweave.Worker(connect=cluster, job="by-name-2", rank=0, token=job["token"],
                         tensors={"w": 4}, transport="shm")
    assert e.value.code == "invalid_spec" and "shm" in str(e.value)
    rackweave.delete_job(cluster, "by-name-2")


def test_a_partial_spec_is_a_value_error(cluster):
    with pytest.raises(ValueError, match="give workers too"):
        rackweave.Worker(connect=cluster, job="x", rank=0, optimizer="adam")
    with pytest.raises(ValueError, match="needs tensors"):
        rackweave.Worker(connect=cluster, job="x", rank=0, workers=1)


def test_server_optimizer_takes_the_jobs_optimizer(cluster):
    torch = pytest.importorskip("torch")
    import rackweave.torch as rwt

    job = rackweave.create_job(cluster, "by-name-torch", workers=1, optimizer="sgd", lr=0.5)
    lin = torch.nn.Linear(3, 1)
    before = [p.detach().clone() for p in lin.parameters()]
    opt = rwt.ServerOptimizer(lin.named_parameters(), connect=cluster, job="by-name-torch",
                              rank=0, token=job["token"])
    assert opt.workers == 1 and opt.worker.spec["optimizer"] == "sgd"
    lin(torch.ones(2, 3)).sum().backward()
    grads = [p.grad.clone() for p in lin.parameters()]
    opt.step()
    for p, b, g in zip(lin.parameters(), before, grads):
        assert torch.equal(p.detach(), b - 0.5 * g)  # the job's lr; rescale 1 / 1
    opt.close()
    with pytest.raises(ValueError, match="without an optimizer"):
        rwt.ServerOptimizer(lin.named_parameters(), lr=0.1, connect=cluster, job="x", rank=0)
    rackweave.delete_job(cluster, "by-name-torch")


def test_tensors_declared_at_create(cluster):
    job = rackweave.create_job(cluster, "declared", workers=2, optimizer="sum",
                               tensors=[("w", 10), ("b", 3, True)])
    token = job["token"]
    # Nobody states anything: the tensors come from the job.
    w0 = rackweave.Worker(connect=cluster, job="declared", rank=0, token=token)
    assert w0.spec["tensors"] == [("w", 10, False), ("b", 3, True)]
    with pytest.raises(rackweave.Error) as e:
        rackweave.Worker(connect=cluster, job="declared", rank=1, token=token,
                         tensors={"w": 11})
    assert e.value.code == "spec_mismatch"
    with pytest.raises(rackweave.Error) as e:  # a stated spec is checked against them too
        rackweave.Worker(connect=cluster, job="declared", rank=1, token=token, workers=2,
                         tensors={"w": 10})
    assert e.value.code == "spec_mismatch"
    w1 = rackweave.Worker(connect=cluster, job="declared", rank=1, token=token, workers=2,
                          tensors=[("w", 10), ("b", 3, True)])
    outs = [np.zeros(10, np.float32), np.zeros(10, np.float32)]

    def step(r):
        (w0, w1)[r].push_pull("w", np.full(10, r + 1.0, np.float32), outs[r]).result()

    run_ranks(2, step)
    assert outs[0].tolist() == outs[1].tolist() == [3.0] * 10
    w0.close()
    w1.close()
    rackweave.delete_job(cluster, "declared")
    with pytest.raises(rackweave.Error) as e:
        rackweave.create_job(cluster, "bad-tensors", workers=1, tensors={"w": 0})
    assert e.value.code == "invalid_spec"
