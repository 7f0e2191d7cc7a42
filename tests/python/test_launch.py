"""torchrun-style launches, as a user runs them: apps/examples/torch/compare.py creates
each job through the coordinator and starts 2 ranks per system with
`python3 -m rackweave.torchrun`; the systems' losses are compared step by step.

With 2 ranks every mean is exact (a division by a power of two), so the DDP hook's
gradients are bitwise gloo's and, with the same in-process optimizer, so are its
losses. ServerOptimizer runs momentum on the node without fused multiply-adds while
torch's in-process step may use them: its losses agree to 1e-5 (relative)."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPARE = os.path.join(ROOT, "apps", "examples", "torch", "compare.py")


def test_three_systems_train_the_same_model(node, tmp_path):
    proc = subprocess.run(
        [sys.executable, COMPARE, "--connect", node, "--model", "digits", "--workers", "2",
         "--json", "--curves", str(tmp_path), "--timeout", "120", "--",
         "--max-steps", "5", "--batch", "16", "--progress-every", "0"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["system"] for r in rows] == ["server", "hook", "ddp"]
    for r in rows:
        assert r["model"] == "digits" and r["steps"] == 5 and r["workers"] == 2
        assert r["median_step_ms"] > 0 and 0.0 <= r["accuracy"] <= 1.0
    curves = {s: [loss for _, loss in json.load(open(tmp_path / f"digits-{s}.json"))["curve"]]
              for s in ("server", "hook", "ddp")}
    assert len(curves["ddp"]) == 5
    assert curves["hook"] == curves["ddp"]
    assert curves["server"] == pytest.approx(curves["ddp"], rel=1e-5)
    # The first step starts from the same parameters everywhere: rank 0's.
    assert curves["server"][0] == curves["ddp"][0]
    # Rank 0's progress went to stderr, stdout stayed JSON.
    assert "digits/server epoch 1/" in proc.stderr


def test_compare_refuses_an_unknown_system(node):
    proc = subprocess.run([sys.executable, COMPARE, "--connect", node, "--systems", "mpi"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "unknown ['mpi']" in proc.stderr
