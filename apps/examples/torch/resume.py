"""Saving and resuming ServerOptimizer's state, checked bitwise:

    python3 resume.py --connect HOST:PORT [--device cuda] [--optimizer adam] [--workers 2]

W ranks (threads of this process) train a small model through the node at --connect
(one running --open-jobs, e.g. `rw-node --role rack-agg --open-jobs`) for --steps steps;
after step --save-at rank 0 saves the model and `opt.state_dict()` (the node's momentum
or Adam moments, and the clock) with torch.save, as a training script checkpoints. A
new job then starts from that file: every rank loads the model, makes its optimizer,
calls `opt.load_state_dict(...)`, and trains the remaining steps. Prints one JSON line
(device, torch, optimizer, clock, bitwise, max_loss_diff) and exits 1 unless the resumed
steps' losses and final parameters are bitwise those of the run that went on. On CUDA
the parameters take the staging path (the pinned arena, side streams) and torch's
deterministic algorithms are on, so the two runs compute the same floats.
"""

import argparse
import io
import itertools
import json
import os
import sys
import threading

# cuBLAS is deterministic with a fixed workspace (torch.use_deterministic_algorithms).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402 - after the environment it reads

import rackweave.torch as rwt  # noqa: E402

_jobs = itertools.count()


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--connect", required=True, help="HOST:PORT of a node with --open-jobs")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--optimizer", default="adam",
                   choices=["adam", "momentum", "nesterov", "sgd", "lamb", "lars"])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--save-at", type=int, default=3)
    p.add_argument("--staging", action="store_true",
                   help="CPU parameters through the staging path CUDA ones take")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a call may wait")
    a = p.parse_args(argv)
    if a.workers < 1 or not 0 < a.save_at < a.steps:
        p.error("need --workers >= 1 and 0 < --save-at < --steps")
    return a


def make_model(rank, device):
    torch.manual_seed(rank)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 10)).to(device)


def rank_data(rank, device):
    g = torch.Generator().manual_seed(1000 + rank)
    return (torch.randn(64, 32, generator=g).to(device),
            torch.randn(64, 10, generator=g).to(device))


def run_ranks(workers, body):
    errors = []

    def one(r):
        try:
            body(r)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(r,)) for r in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def train(a, first, load=None):
    """Steps first+1..a.steps of every rank, from make_model or from `load` (torch.save
    bytes of {"model", "opt"}). Returns rank 0's losses by step, its final parameters,
    and the save made after step a.save_at (when not loading)."""
    job = f"resume-{os.getpid()}-{next(_jobs)}"
    losses, finals, saved = {}, [None] * a.workers, [None]
    models = [make_model(r, a.device) for r in range(a.workers)]  # the seed is global

    def rank(r):
        model = models[r]
        state = None
        if load is not None:
            state = torch.load(io.BytesIO(load), map_location=a.device)
            model.load_state_dict(state["model"])
        opt = rwt.ServerOptimizer(model.named_parameters(), optimizer=a.optimizer,
                                  lr=0.01, connect=a.connect, job=job, rank=r,
                                  workers=a.workers, timeout=a.timeout,
                                  staging=a.staging)
        try:
            if state is not None:
                opt.load_state_dict(state["opt"])
            x, y = rank_data(r, a.device)
            for s in range(first + 1, a.steps + 1):
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
                if r == 0:
                    losses[s] = loss.item()
                if s == a.save_at and load is None:
                    snapshot = opt.state_dict()  # every rank may; rank 0 keeps it
                    if r == 0:
                        out = io.BytesIO()
                        torch.save({"model": model.state_dict(), "opt": snapshot}, out)
                        saved[0] = out.getvalue()
            opt.synchronize()
            finals[r] = [p.detach().cpu().clone() for p in model.parameters()]
        finally:
            opt.close()

    run_ranks(a.workers, rank)
    return losses, finals[0], saved[0]


def main(argv=None):
    a = parse(argv)
    if a.device.startswith("cuda"):
        if not torch.cuda.is_available():
            print("resume.py: --device cuda, but torch sees no CUDA device", file=sys.stderr)
            return 2
        torch.use_deterministic_algorithms(True)
    whole, final, save = train(a, 0)
    resumed, again, _ = train(a, a.save_at, load=save)
    clock = torch.load(io.BytesIO(save))["opt"]["rackweave"]["clock"]
    tail = range(a.save_at + 1, a.steps + 1)
    diff = max(abs(resumed[s] - whole[s]) for s in tail)
    bitwise = (all(resumed[s] == whole[s] for s in tail)
               and all(torch.equal(p, q) for p, q in zip(again, final)))
    print(json.dumps({"check": "state_dict_resume", "device": a.device,
                      "torch": torch.__version__, "optimizer": a.optimizer,
                      "workers": a.workers, "saved_at": a.save_at, "clock": clock,
                      "steps": a.steps, "bitwise": bitwise, "max_loss_diff": diff}))
    if not bitwise:
        print(f"resume.py: the resumed run differs (largest loss difference {diff:.3g})",
              file=sys.stderr)
    return 0 if bitwise and clock == a.save_at else 1


if __name__ == "__main__":
    sys.exit(main())
