"""rackweave.torch.ServerOptimizer against a single-process reference: two ranks (threads
of this process), each on its own data; the node sums their gradients in rank order and
runs SGD, which is the reference's step on the mean gradient."""

import itertools

import pytest

torch = pytest.importorskip("torch")
import rackweave.torch as rwt  # noqa: E402 - after the skip
from torchref import make_model, rank_data, reference_losses, server_losses  # noqa: E402

STEPS, LR, WORKERS = 4, 0.1, 2
_jobs = itertools.count()


def data(rank):
    return rank_data(100, rank)


def reference():
    return reference_losses(STEPS, WORKERS, lambda s: LR, data)


# staging: the path CUDA parameters take (pinned buffers, side streams, the pusher and
# lander threads: rackweave.staging), here with host buffers and plain copies.
@pytest.mark.parametrize("overlap,lazy,staging", [
    (True, False, False), (False, False, False), (True, True, False), (False, True, False),
    (True, False, True), (False, False, True), (True, True, True)])
def test_server_sgd_matches_the_reference(node, overlap, lazy, staging):
    got = server_losses(node, f"torch-{next(_jobs)}", STEPS, WORKERS, LR, data, lazy=lazy,
                        overlap=overlap, staging=staging)
    want = reference()
    for s in range(STEPS):
        assert got[s] == pytest.approx(want[s], rel=1e-5, abs=1e-6), f"step {s}"
    assert want[-1][0] < want[0][0]  # it trains


def test_torchrun_environment(node, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RACKWEAVE_CONNECT", node)
    monkeypatch.setenv("RACKWEAVE_JOB", f"torch-{next(_jobs)}")
    model = make_model(0)
    opt = rwt.ServerOptimizer(model.named_parameters(), optimizer="sgd", lr=LR)
    assert (opt.rank, opt.workers) == (0, 1)
    x, y = data(0)
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    opt.close()


def test_bad_models_are_refused(node):
    with pytest.raises(TypeError, match="float32"):
        rwt.ServerOptimizer(make_model(0).double().named_parameters(), connect=node,
                            job="never", rank=0, workers=1)
    frozen = make_model(0)
    for p in frozen.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="no parameter"):
        rwt.ServerOptimizer(frozen.named_parameters(), connect=node, job="never", rank=0,
                            workers=1)
