"""What the staging path (rackweave.staging: CUDA tensors, or CPU ones with
staging=True) holds and costs, one rank against a node at --node (bench/staging.sh).

  memory    ServerOptimizer(staging=True) for a model: the staging arena's bytes
            (staging_bytes) against the trainable parameters' bytes, after two steps;
            beside it what the per-tensor buffers before issue 63 held (an out and an in
            buffer per tensor; on a GPU each rounded up to a power of two by torch's
            pinned allocator), computed from the same tensor sizes
  overhead  a model of 100 Linear(16, 16) layers (200 tensors, 54 KiB), one rank: the
            median step (forward, backward, step) and the process's CPU time per step,
            with torch's own SGD and no exchange (local), with ServerOptimizer reading
            and writing the parameters in place (inplace: the worker's 200 push_pulls
            and the gradient hooks, no staging), and with ServerOptimizer through the
            staging path (staged, staging=True), made at once and stepped in turn, one step of each per round; what the exchange
            through the staging path adds to a step is staged - local (with 54 KiB to
            move, that is per-tensor work), and of that, what the staging path itself
            costs (its arena, buckets, copies, pusher and lander threads and their hops)
            is staged - inplace

Prints one JSON line per measurement. --package DIR imports rackweave from DIR first (an
older copy, for a before/after comparison in the same run)."""

import argparse
import json
import os
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--node", required=True, help="HOST:PORT of a node with --open-jobs")
    ap.add_argument("--part", choices=("memory", "overhead"), required=True)
    ap.add_argument("--models", default="resnet18 big250m",
                    help="memory: resnet18, big250m (4 x 7906 x 7906), big25m")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--first-rep", type=int, default=0,
                    help="the first rep's number (which kind runs first turns with it)")
    ap.add_argument("--package", default="", help="import rackweave from this directory")
    ap.add_argument("--label", default="current")
    a = ap.parse_args()
    if a.package:
        sys.path.insert(0, a.package)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "apps", "examples", "torch"))
    import torch
    import rackweave.torch as rwt
    torch.set_num_threads(1)
    jobs = iter(range(1 << 30))

    def optimizer(model, **kw):
        return rwt.ServerOptimizer(model.named_parameters(), optimizer="sgd", lr=1e-3,
                                   connect=a.node, job=f"staging-{os.getpid()}-{next(jobs)}",
                                   rank=0, workers=1, transport="shm", **kw)

    if a.part == "memory":
        for name in a.models.split():
            model, x = build(torch, name)
            opt = optimizer(model, staging=True)
            for _ in range(2):
                model(x).float().square().mean().backward()
                opt.step()
                opt.zero_grad()
            sizes = [p.numel() * 4 for p in model.parameters() if p.requires_grad]
            params = sum(sizes)
            out = dict(part="memory", model=name, tensors=len(sizes), param_bytes=params,
                       staging_bytes=opt.staging_bytes,
                       ratio=round(opt.staging_bytes / params, 4),
                       before_host_bytes=2 * params,
                       before_pinned_bytes=2 * sum(1 << (n - 1).bit_length() for n in sizes))
            opt.close()
            print(json.dumps(out), flush=True)
            del model, opt
        return

    def small():
        torch.manual_seed(0)
        return torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(100)])

    x = torch.randn(8, 16)

    kinds = ("local", "inplace", "staged")

    def medians(first):
        """The three, made at once and stepped in turn (one step of each per round,
        `first` first, then rotating): whatever else the machine does at a moment
        falls on all three alike. The median step and the mean CPU per step of each,
        after the first fifth of the rounds."""
        made = {}
        for k in kinds:
            model = small()
            made[k] = (model, torch.optim.SGD(model.parameters(), lr=1e-3) if k == "local"
                       else optimizer(model, staging=k == "staged"))
        times = {k: [] for k in kinds}
        cpus = {k: 0.0 for k in kinds}
        warm = a.steps // 5
        try:
            for i in range(a.steps):
                at = (first + i) % 3
                for k in kinds[at:] + kinds[:at]:
                    model, opt = made[k]
                    c, t = time.process_time(), time.perf_counter()
                    model(x).square().mean().backward()
                    opt.step()
                    opt.zero_grad()
                    if i >= warm:
                        times[k].append(time.perf_counter() - t)
                        cpus[k] += time.process_time() - c
        finally:
            for k in kinds[1:]:
                made[k][1].close()
        return ({k: statistics.median(times[k]) * 1e3 for k in kinds},
                {k: cpus[k] / len(times[k]) * 1e3 for k in kinds})

    for rep in range(a.first_rep, a.first_rep + a.reps):
        ms, cpu = medians(rep)
        print(json.dumps(dict(part="overhead", label=a.label, rep=rep,
                              local_ms=round(ms["local"], 3),
                              inplace_ms=round(ms["inplace"], 3),
                              staged_ms=round(ms["staged"], 3),
                              added_ms=round(ms["staged"] - ms["local"], 3),
                              staging_ms=round(ms["staged"] - ms["inplace"], 3),
                              local_cpu_ms=round(cpu["local"], 3),
                              inplace_cpu_ms=round(cpu["inplace"], 3),
                              staged_cpu_ms=round(cpu["staged"], 3),
                              added_cpu_ms=round(cpu["staged"] - cpu["local"], 3),
                              staging_cpu_ms=round(cpu["staged"] - cpu["inplace"], 3))),
              flush=True)


def build(torch, name):
    if name == "resnet18":
        import models
        return models.resnet18_model(), torch.randn(4, 3, 32, 32)
    side = {"big250m": 7906, "big25m": 2500}[name]  # 4 x side^2 parameters
    return (torch.nn.Sequential(*[torch.nn.Linear(side, side, bias=False) for _ in range(4)]),
            torch.randn(2, side))


if __name__ == "__main__":
    main()
