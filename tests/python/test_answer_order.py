"""Answers that arrive out of push order (issue 63): a node started with
--test-delay-answers holds back the updates of chosen tensors, as a job over several
nodes or shards can. The worker still gets each in place, and ServerOptimizer(model=...)
trains bitwise as it does with every answer waited for at step(), because every forward
of the model waits for every answer in flight first (out_proj, a ParameterList and a
tied weight included, read outside their own modules' forwards)."""

import itertools
import time

import numpy as np
import pytest

import rackweave
from rwnode import running_node

torch = pytest.importorskip("torch")
import rackweave.torch as rwt  # noqa: E402 - after the skip
from torchref import ReadsElsewhere  # noqa: E402

_jobs = itertools.count()
HELD_MS = 400  # how long the delaying node holds each update of a delayed tensor


def delayed_tensors():
    """ReadsElsewhere's parameters read outside their own modules' forwards, by index
    in the job (the order of named_parameters): out_proj's weight and bias, the
    ParameterList's two entries and the tied weight."""
    names = [n for n, _ in ReadsElsewhere().named_parameters()]
    held = [i for i, n in enumerate(names)
            if n.startswith(("attn.out_proj", "scales", "tied"))]
    assert len(held) == 5, names
    return held


@pytest.fixture(scope="module")
def delaying_node():
    spec = ",".join(f"{i}:{HELD_MS}" for i in delayed_tensors())
    with running_node("--open-jobs", "--test-delay-answers", spec) as address:
        yield address


def test_a_held_tensor_answers_after_one_pushed_later(delaying_node):
    # Tensor 2 is held, tensor 0 is not: pushed 2 then 0, 0's answer comes first.
    with rackweave.Worker(connect=delaying_node, job=f"order-{next(_jobs)}", rank=0,
                          workers=1, tensors={"a": 64, "b": 64, "c": 64}) as w:
        outs = {n: np.zeros(64, np.float32) for n in ("a", "c")}
        started = time.monotonic()
        held = w.push_pull("c", np.ones(64, np.float32), outs["c"])
        free = w.push_pull("a", np.full(64, 2, np.float32), outs["a"])
        free.result(timeout=30)
        assert not held.done()  # still held by the node
        held.result(timeout=30)
        assert time.monotonic() - started >= HELD_MS / 1000 * 0.9
        assert (outs["a"] == 2).all() and (outs["c"] == 1).all()


def train(node, lazy, staging, steps=4):
    model = ReadsElsewhere()
    # Staged, each tensor is a bucket of its own (bucket_bytes=1): in one bucket of all,
    # waiting for any of them would wait for every one.
    opt = rwt.ServerOptimizer(model.named_parameters(), optimizer="sgd", lr=0.1,
                              connect=node, job=f"order-{next(_jobs)}", rank=0, workers=1,
                              model=model if lazy else None, staging=staging,
                              **(dict(bucket_bytes=1) if staging else {}))
    x = torch.randn(3, 4, 8, generator=torch.Generator().manual_seed(1))
    losses = []
    try:
        for _ in range(steps):
            loss = model(x)
            losses.append(loss.item())
            loss.backward()
            opt.step()
            opt.zero_grad()
        opt.synchronize()
        return losses, [p.detach().clone() for p in model.parameters()]
    finally:
        opt.close()


# In place (staging=False) this fails with the waits before issue 63's item 1 (each
# module waiting for its own parameters only: checked). Staged, the lander thread lands
# buckets in push order whatever order the node answers in, so waiting for the last
# tensor pushed waits for all; the staged case checks that holding answers back changes
# nothing there either.
@pytest.mark.parametrize("staging", [False, True])
def test_model_trains_bitwise_with_answers_out_of_push_order(node, delaying_node, staging):
    want_losses, want_params = train(node, lazy=False, staging=staging)
    got_losses, got_params = train(delaying_node, lazy=True, staging=staging)
    assert got_losses == want_losses
    for got, want in zip(got_params, want_params):
        assert torch.equal(got, want)
