"""Hyper-parameters that change during training, deterministically: a torch LR
scheduler on ServerOptimizer (rank 0's param group drives the node), against a
single-process reference with the same schedule; rackweave.set_hyper and its refusals."""

import itertools

import pytest

import rackweave
from rwnode import run_ranks, running_node

torch = pytest.importorskip("torch")
import rackweave.torch as rwt  # noqa: E402 - after the skip
from torchref import make_model, rank_data, reference_losses  # noqa: E402

STEPS, LR, WORKERS = 6, 0.1, 2
_jobs = itertools.count()


@pytest.fixture(scope="module")
def cluster():
    with running_node("--name", "sched") as address:
        yield address


def data(rank):
    return rank_data(200, rank)


@pytest.mark.parametrize("overlap", [True, False])
def test_an_lr_scheduler_drives_the_node(cluster, overlap):
    job = f"sched-{next(_jobs)}"
    token = rackweave.create_job(cluster, job, workers=WORKERS, optimizer="sgd", lr=LR)["token"]
    got = [[None] * WORKERS for _ in range(STEPS)]
    models = [make_model(r) for r in range(WORKERS)]

    def rank(r):
        model = models[r]
        opt = rwt.ServerOptimizer(model.named_parameters(), connect=cluster, job=job, rank=r,
                                  token=token, overlap=overlap)
        assert opt.param_groups[0]["lr"] == pytest.approx(LR)  # the job's
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        x, y = data(r)
        for s in range(STEPS):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            sched.step()
            got[s][r] = loss.item()
        opt.close()

    run_ranks(WORKERS, rank)
    want = reference_losses(STEPS, WORKERS, lambda s: LR * 0.5 ** (s // 2), data)
    constant = reference_losses(STEPS, WORKERS, lambda s: LR, data)
    for s in range(STEPS):
        assert got[s] == pytest.approx(want[s], rel=1e-5, abs=1e-6), f"step {s}"
    # The schedule made a difference the comparison can see.
    assert want[-1][0] != pytest.approx(constant[-1][0], rel=1e-4)
    # Too late: every chunk has run the step of clock 2 already.
    with pytest.raises(rackweave.Error) as e:
        rackweave.set_hyper(cluster, job, at_clock=2, lr=1.0)
    assert e.value.code in ("clock_out_of_range", "invalid_spec")  # or the job finished
    rackweave.delete_job(cluster, job)


def test_set_hyper_refusals(cluster):
    job = f"sched-{next(_jobs)}"
    token = rackweave.create_job(cluster, job, workers=2, optimizer="momentum")["token"]
    with pytest.raises(rackweave.Error) as e:
        rackweave.set_hyper(cluster, job, at_clock=0, lr=0.5)
    assert e.value.code == "invalid_spec" and "has not started" in str(e.value)
    with pytest.raises(ValueError, match="no hyper-parameter"):
        rackweave.set_hyper(cluster, job, at_clock=0)
    with pytest.raises(ValueError, match="momentum must be below 1"):
        rackweave.set_hyper(cluster, job, at_clock=0, momentum=1.5)
    with pytest.raises(rackweave.Error) as e:
        rackweave.set_hyper(cluster, "no-such-job", at_clock=0, lr=0.5)
    assert e.value.code == "unknown_job"
    w0 = rackweave.Worker(connect=cluster, job=job, rank=0, token=token, tensors={"w": 8})
    w1 = rackweave.Worker(connect=cluster, job=job, rank=1, token=token)
    with pytest.raises(rackweave.Error) as e:
        w1.set_hyper(0, lr=0.5)
    assert e.value.code == "bad_rank"
    # Rank 0 changes lr for clock 1; clock 0 runs with the job's lr (0.01).
    assert w0.set_hyper(1, lr=0.5) == 0
    import numpy as np
    outs = [np.zeros(8, np.float32), np.zeros(8, np.float32)]

    def step(r):
        w = (w0, w1)[r]
        for _ in range(2):
            w.push_pull("w", np.ones(8, np.float32), outs[r]).result()

    run_ranks(2, step)
    # momentum: m1 = 1, p1 = -0.01; m2 = 0.9 + 1 = 1.9, p2 = p1 - 0.5 * 1.9
    m2 = np.float32(0.9) * np.float32(1.0) + np.float32(1.0)
    p1 = np.float32(0.0) - np.float32(0.01) * np.float32(1.0)
    assert outs[0].tolist() == outs[1].tolist() == [float(p1 - np.float32(0.5) * m2)] * 8
    with pytest.raises(rackweave.Error) as e:
        w0.set_hyper(1, lr=0.1)
    assert e.value.code == "clock_out_of_range" and "at clock 2" in str(e.value)
    w0.close()
    w1.close()
    rackweave.delete_job(cluster, job)
