"""rackweave.torch.ServerOptimizer against a single-process reference: two ranks (threads
of this process), each on its own data; the node sums their gradients in rank order and
runs SGD, which is the reference's step on the mean gradient."""

import itertools

import pytest

torch = pytest.importorskip("torch")
import rackweave.torch as rwt  # noqa: E402 - after the skip
from torchref import (ReadsElsewhere, make_model, rank_data, reference_losses,  # noqa: E402
                      server_losses)

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


def one_rank(node, model, **options):
    """ServerOptimizer(model=model) for a one-rank sgd job of its own on `node`."""
    return rwt.ServerOptimizer(model.named_parameters(), optimizer="sgd", lr=LR,
                               connect=node, job=f"torch-{next(_jobs)}", rank=0, workers=1,
                               model=model, **options)


# Issue 63, item 1: with model=, each module's forward waited for its own parameters
# only, so out_proj, the ParameterList and the tied weight were read with their answers
# still in flight (on a GPU, racing their copy onto the device). Now any module's
# forward waits for every answer first: nothing is in flight once the forward starts.
@pytest.mark.parametrize("staging", [False, True])
def test_every_parameter_a_forward_reads_is_waited_for(node, staging):
    model = ReadsElsewhere()
    opt = one_rank(node, model, staging=staging)
    reads = []
    hook = model.attn.register_forward_pre_hook(
        lambda m, i: reads.append(sorted(opt._inflight)))
    x = torch.randn(3, 4, 8, generator=torch.Generator().manual_seed(1))
    try:
        for _ in range(3):
            model(x).backward()
            opt.step()
        # step() returned with every answer in flight; the next forward waits for all
        # before the attention (the first module to read) runs.
        assert reads == [[], [], []]
        model(x)
        assert reads[-1] == [] and not opt._inflight
    finally:
        hook.remove()
        opt.close()


def test_a_gradient_made_without_a_forward_of_the_model_is_said(node):
    model = ReadsElsewhere()
    opt = one_rank(node, model)
    x = torch.randn(3, 4, 8, generator=torch.Generator().manual_seed(1))
    try:
        model(x).backward()
        opt.step()
        # Read outside the model's forward: nothing waited for these answers.
        loss = sum(p.square().sum() for p in model.parameters())
        with pytest.warns(RuntimeWarning, match="no forward of the model ran"):
            loss.backward()
        opt.step()
    finally:
        opt.close()
    with pytest.raises(ValueError, match="holds none of the parameters"):
        rwt.ServerOptimizer(model.named_parameters(), optimizer="sgd", connect=node,
                            job="never", rank=0, workers=1, model=torch.nn.Linear(2, 2))


# Issue 63, item 2: with a GradScaler the hook pushed the scaled gradient (the node
# stepped 65,536 x too far) and a skipped step broke the next backward. A scaler is
# refused by name (GradScaler.step calls step(grad_scaler=...) on an optimizer with
# _step_supports_amp_scaling); bf16 autocast, which needs none, trains.
def test_a_grad_scaler_is_refused_and_bf16_autocast_trains(node):
    assert rwt.ServerOptimizer._step_supports_amp_scaling
    model = make_model(0)
    opt = one_rank(node, model)
    x, y = data(0)
    try:
        losses = []
        for _ in range(4):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(model(x).float(), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < losses[0]
        torch.nn.functional.mse_loss(model(x), y).backward()
        with pytest.raises(RuntimeError, match="GradScaler is not supported.*bf16 autocast"):
            opt.step(grad_scaler=object())
    finally:
        opt.close()


# Issue 63, item 3: with model=, step() returns while the worker may still send from
# each gradient's memory (on a GPU, copy it to the host); zero_grad(set_to_none=False)
# zeroed it in place under them. It waits for the answers first now.
def test_zeroing_gradients_in_place_waits_for_what_still_reads_them(node):
    model = make_model(0)
    opt = one_rank(node, model)
    x, y = data(0)
    try:
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        assert opt._inflight  # step() returned before the answers
        opt.zero_grad(set_to_none=False)
        assert not opt._inflight
        assert all(float(p.grad.abs().sum()) == 0 for p in model.parameters())
    finally:
        opt.close()


# Issue 63, item 5: torch.compile and CUDA graphs run the step without the hooks' host
# work (a graph break, or a replay that skips them): refused where the hooks see them.
@pytest.mark.parametrize("seen", ["compile", "capture"])
def test_compiling_or_capturing_a_step_is_refused(node, monkeypatch, seen):
    model = torch.nn.Linear(4, 2)
    opt = rwt.ServerOptimizer(model.named_parameters(), optimizer="sgd", lr=0.1,
                              connect=node, job=f"graphs-{seen}", rank=0, workers=1,
                              model=model)
    try:
        model(torch.ones(3, 4)).sum().backward()
        opt.step()  # trains as usual
        if seen == "compile":
            monkeypatch.setattr(rwt, "_compiling", lambda: True)
            want = "torch.compile is tracing a RackWeave hook"
        else:
            monkeypatch.setattr(rwt, "_capturing", lambda device: True)
            want = "CUDA graphs are not supported"
        with pytest.raises(RuntimeError, match=want):
            model(torch.ones(3, 4))  # the forward pre-hook
        monkeypatch.undo()
        y = model(torch.ones(3, 4)).sum()
        if seen == "compile":
            monkeypatch.setattr(rwt, "_compiling", lambda: True)
        else:
            monkeypatch.setattr(rwt, "_capturing", lambda device: True)
        with pytest.raises(RuntimeError, match=want):
            y.backward()  # the gradient hook
    finally:
        monkeypatch.undo()
        opt.close()


def test_compiling_is_never_seen_on_torch_without_a_compiler():
    assert rwt._compiling() is (hasattr(torch, "compiler")
                                and bool(torch.compiler.is_compiling()))
    assert rwt._capturing(torch.device("cpu")) is False
