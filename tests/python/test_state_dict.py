"""ServerOptimizer.state_dict / load_state_dict: training saved with torch.save after a
step and resumed in a new job (new workers, a new optimizer, the model loaded from the
save) goes on bitwise as the run that was not interrupted; and what a wrong state or a
late load is told. Two ranks, threads of this process."""

import io
import itertools

import pytest

torch = pytest.importorskip("torch")
import rackweave  # noqa: E402 - after the skip
import rackweave.torch as rwt  # noqa: E402
from rwnode import run_ranks  # noqa: E402
from torchref import make_model, rank_data  # noqa: E402

WORKERS, SAVE_AT, STEPS = 2, 3, 6
_jobs = itertools.count()


def train(node, job, optimizer, first, last, load=None, lazy=False, **options):
    """Steps first+1..last of both ranks; each rank's model starts from make_model(rank)
    (rank 0's values become the job's), or, with `load` (torch.save bytes of rank 0's
    {"model", "opt"}), from the saved model with the saved optimizer state. Returns the
    losses per step and rank, rank 0's final parameters, and the saves each rank made
    after step SAVE_AT (rank 0's as bytes, the other's as its state_dict)."""
    losses = {s: [None] * WORKERS for s in range(first + 1, last + 1)}
    models = [make_model(r) for r in range(WORKERS)]  # one after the other: global seed
    saves = [None] * WORKERS
    finals = [None] * WORKERS

    def rank(r):
        model = models[r]
        saved = torch.load(io.BytesIO(load)) if load is not None else None
        if saved is not None:
            model.load_state_dict(saved["model"])
        opt = rwt.ServerOptimizer(model.named_parameters(), optimizer=optimizer, lr=0.02,
                                  connect=node, job=job, rank=r, workers=WORKERS,
                                  model=model if lazy else None, **options)
        if saved is not None:
            opt.load_state_dict(saved["opt"])
        x, y = rank_data(100, r)
        for s in range(first + 1, last + 1):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses[s][r] = loss.item()
            if s == SAVE_AT and load is None:
                state = opt.state_dict()
                if r == 0:
                    opt.synchronize()
                    out = io.BytesIO()
                    torch.save({"model": model.state_dict(), "opt": state}, out)
                    saves[r] = out.getvalue()
                else:
                    saves[r] = state
        opt.synchronize()
        finals[r] = [p.detach().clone() for p in model.parameters()]
        opt.close()

    run_ranks(WORKERS, rank)
    return losses, finals, saves


@pytest.mark.parametrize("optimizer,options", [
    ("adam", {}), ("momentum", {}), ("sgd", {}),
    ("adam", {"lazy": True, "staging": True}), ("nesterov", {"overlap": False})])
def test_a_saved_state_resumes_bitwise(node, optimizer, options):
    whole, finals, saves = train(node, f"sd-{next(_jobs)}", optimizer, 0, STEPS, **options)
    saved = torch.load(io.BytesIO(saves[0]))["opt"]
    assert saved["rackweave"]["clock"] == SAVE_AT
    assert saved["rackweave"]["optimizer"] == optimizer
    entry = saved["state"][0]
    assert entry["step"] == SAVE_AT
    keys = {"adam": ["exp_avg", "exp_avg_sq"], "sgd": []}.get(optimizer, ["momentum_buffer"])
    assert sorted(k for k in entry if k != "step") == keys
    for k in keys:  # shaped like the parameter, and trained
        assert entry[k].shape == torch.Size([8, 4])
        assert entry[k].abs().sum() > 0
        assert torch.equal(entry[k], saves[1]["state"][0][k])  # every rank reads the same
    resumed, again, _ = train(node, f"sd-{next(_jobs)}", optimizer, SAVE_AT, STEPS,
                              load=saves[0], **options)
    for s in range(SAVE_AT + 1, STEPS + 1):
        assert resumed[s] == whole[s], f"step {s}"  # bitwise: the same floats
    for a, b in zip(again[0], finals[0]):
        assert torch.equal(a, b)


def test_wrong_states_and_late_loads_are_refused(node):
    _, _, saves = train(node, f"sd-{next(_jobs)}", "adam", 0, SAVE_AT)
    saved = torch.load(io.BytesIO(saves[0]))["opt"]
    model = make_model(0)
    job = f"sd-{next(_jobs)}"

    def optimizer(kind, params=None):
        return rwt.ServerOptimizer(params or model.named_parameters(), optimizer=kind,
                                   lr=0.02, connect=node, job=job, rank=0, workers=1)

    opt = optimizer("momentum")
    with pytest.raises(ValueError, match="the state is adam's, the job runs momentum"):
        opt.load_state_dict(saved)
    with pytest.raises(ValueError, match="not a ServerOptimizer's state_dict"):
        opt.load_state_dict(torch.optim.SGD(model.parameters(), lr=0.1).state_dict())
    opt.close()
    job = f"sd-{next(_jobs)}"
    renamed = [("w" + n, p) for n, p in model.named_parameters()]
    opt = optimizer("adam", renamed)
    with pytest.raises(ValueError, match="the state is of other parameters"):
        opt.load_state_dict(saved)
    opt.close()
    job = f"sd-{next(_jobs)}"
    opt = optimizer("adam")
    x, y = rank_data(100, 0)
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()  # the job has stepped: a state loads only before the first step
    with pytest.raises(rackweave.Error, match="is at version 1") as refused:
        opt.load_state_dict(saved)
    assert refused.value.code == "clock_out_of_range"
    opt.close()
