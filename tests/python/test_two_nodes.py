"""Issue 63: a Transformer encoder trained with ServerOptimizer(model=...) over a job
held by two nodes (its chunks spread over both, each node answering its own as it
goes, so the answers of one push come back in no fixed order) is bitwise the same on
every rank, and the same as without model= (every answer waited for in step())."""

import itertools
import time

import pytest

from rwnode import running_node

torch = pytest.importorskip("torch")
import rackweave  # noqa: E402 - after the skip
from torchref import transformer_run  # noqa: E402


@pytest.fixture(scope="module")
def two_nodes():
    """Two rack-aggs of one rack, the first embedding the coordinator; no open jobs. The
    second listens before the coordinator counts it: a job is placed on both only once
    it does (a probe job, made and deleted until it lands on both, for up to 20 s)."""
    with running_node("--name", "two-a", "--rack", "two") as first:
        with running_node("--name", "two-b", "--rack", "two", "--coordinator", first):
            deadline = time.monotonic() + 20
            for attempt in itertools.count():
                name = f"two-nodes-probe-{attempt}"
                nodes = rackweave.create_job(first, name, workers=1, racks=["two"])["nodes"]
                rackweave.delete_job(first, name)
                if sorted(nodes) == ["two-a", "two-b"]:
                    break
                assert time.monotonic() < deadline, f"the coordinator still sees {nodes}"
                time.sleep(0.1)
            yield first


def job_on_both(first, name, workers=2):
    """The job transformer_run trains (momentum 0.9, lr 0.05), on both nodes in chunks
    of 256 bytes, so that each tensor's chunks are served by both: (endpoint, token)."""
    created = rackweave.create_job(first, name, workers=workers, optimizer="momentum",
                                   lr=0.05, momentum=0.9, chunk_bytes=256, racks=["two"])
    assert sorted(created["nodes"]) == ["two-a", "two-b"], created
    return created["endpoints"][0], created["token"]


@pytest.mark.parametrize("staging", [False, True])
def test_a_transformer_over_two_nodes_is_bitwise_with_model_as_without(two_nodes, staging):
    got = {}
    for lazy in (True, False):
        name = f"two-nodes-{staging:d}{lazy:d}"
        endpoint, token = job_on_both(two_nodes, name)
        got[lazy] = transformer_run(endpoint, name, lazy, staging, token=token,
                                    chunk_bytes=256, transport="tcp")
        rackweave.delete_job(two_nodes, name)
    (lazy_losses, lazy_params), (eager_losses, eager_params) = got[True], got[False]
    assert lazy_losses == eager_losses
    for r in range(len(lazy_params)):
        for a, b, c in zip(lazy_params[r], eager_params[r], lazy_params[0]):
            assert torch.equal(a, b) and torch.equal(a, c)
