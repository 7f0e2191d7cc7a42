"""Issue 63, item 6: BatchNorm's running statistics were never made the same across
ranks under ServerOptimizer; torch DDP broadcasts rank 0's buffers before every forward
by default. ServerOptimizer(model=...) now does the same (rackweave.buffers)."""

import itertools

import pytest

from rwnode import run_ranks

torch = pytest.importorskip("torch")
import rackweave.torch as rwt  # noqa: E402 - after the skip

_jobs = itertools.count()
WORKERS, STEPS = 2, 4


def bn_model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.BatchNorm1d(6),
                               torch.nn.ReLU(), torch.nn.Linear(6, 1))


def train(node, **options):
    """Per rank, per step: the BatchNorm buffers as that step's forward saw them, and
    the buffers and eval-mode outputs at the end; each rank its own data."""
    job = f"buffers-{next(_jobs)}"
    models = [bn_model() for _ in range(WORKERS)]
    seen = [[] for _ in range(WORKERS)]
    final = [None] * WORKERS

    def rank(r):
        model = models[r]
        opt = rwt.ServerOptimizer(model.named_parameters(), optimizer="sgd", lr=0.1,
                                  connect=node, job=job, rank=r, workers=WORKERS,
                                  model=model, **options)
        bn = model[1]
        # After ServerOptimizer's own pre-hooks: what the forward reads.
        model.register_forward_pre_hook(lambda m, i: seen[r].append(
            (bn.running_mean.clone(), bn.running_var.clone())))
        g = torch.Generator().manual_seed(100 + r)
        try:
            for _ in range(STEPS):
                x = torch.randn(8, 5, generator=g) * (r + 1)
                model(x).square().mean().backward()
                opt.step()
                opt.zero_grad()
            model.eval()
            out = model(torch.ones(2, 5))
            final[r] = (bn.running_mean.clone(), bn.running_var.clone(), out.detach())
        finally:
            opt.close()

    run_ranks(WORKERS, rank)
    return seen, final


def test_every_forward_reads_rank_0s_buffers_as_under_ddp(node):
    seen, final = train(node)
    assert len(seen[0]) == STEPS + 1
    for step, (a, b) in enumerate(zip(seen[0], seen[1])):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), f"forward {step}"
    assert torch.equal(seen[0][-1][0], final[0][0])  # eval: rank 0's, not updated
    for r in range(1, WORKERS):
        for want, got in zip(final[0], final[r]):
            assert torch.equal(want, got)
    # Rank 0's statistics move with its batches (rank 1's data, twice as large, would
    # move them elsewhere).
    assert not torch.equal(seen[0][0][1], seen[0][-1][1])


def test_without_the_broadcast_the_ranks_drift_apart(node):
    seen, final = train(node, broadcast_buffers=False)
    assert not torch.equal(final[0][0], final[1][0])
    assert not torch.equal(final[0][2], final[1][2])


def test_a_model_without_buffers_joins_no_second_job(node):
    model = torch.nn.Linear(3, 2)
    opt = rwt.ServerOptimizer(model.named_parameters(), optimizer="sgd", lr=0.1,
                              connect=node, job=f"buffers-{next(_jobs)}", rank=0,
                              workers=1, model=model)
    try:
        assert opt._buffers.worker is None
        model(torch.ones(1, 3)).sum().backward()
        opt.step()
    finally:
        opt.close()
