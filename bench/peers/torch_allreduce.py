#!/usr/bin/env python3
"""torch.distributed all-reduce benchmark, gloo backend, on 127.0.0.1.

  torch_allreduce.py --size W --bytes S --iters N --warmup K [--timeout-s T]

starts W worker processes (this script with --rank R --port P) that join one process
group (init_method tcp://127.0.0.1:P, P a free port), and each iteration run
dist.barrier() then time dist.all_reduce(SUM) of a float32 tensor of S bytes.
Prints on stdout, one line per rank:  RANK r t_1 ... t_N  (milliseconds), then
VERIFIED 1. Every element of every result is checked against the exact sum (inputs
are small integers); a wrong element is reported on stderr and the exit status is 3.
"""
import argparse
import os
import socket
import subprocess
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def parse_bytes(text):
    units = {"": 1, "B": 1, "K": 1 << 10, "KiB": 1 << 10, "M": 1 << 20, "MiB": 1 << 20,
             "G": 1 << 30, "GiB": 1 << 30}
    num = text.rstrip("KMGiB")
    return int(float(num) * units[text[len(num):]])


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(a):
    import torch
    import torch.distributed as dist
    from datetime import timedelta

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{a.master}:{a.port}", rank=a.rank,
                            world_size=a.size, timeout=timedelta(seconds=a.timeout_s))
    n = parse_bytes(a.bytes) // 4
    idx = torch.arange(n, dtype=torch.int64)
    # Rank r's input at element i in iteration it: ((i + 7r + 3it) & 15), exact sums.
    table = torch.tensor([sum(float((k + 7 * r) & 15) for r in range(a.size)) for k in range(16)],
                         dtype=torch.float32)
    times = []
    for it in range(a.warmup + a.iters):
        t = ((idx + 7 * a.rank + 3 * it) & 15).to(torch.float32)
        expect = table[(idx + 3 * it) & 15]
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        t1 = time.perf_counter()
        if it >= a.warmup:
            times.append((t1 - t0) * 1e3)
        bad = (t != expect).nonzero()
        if bad.numel():
            i = int(bad[0, 0])
            print(f"torch_allreduce: rank {a.rank}: iteration {it}: element {i} is "
                  f"{float(t[i])!r}, expected {float(expect[i])!r}", file=sys.stderr, flush=True)
            os._exit(3)
    dist.barrier()
    print(f"RANK {a.rank} " + " ".join(f"{x:.4f}" for x in times), flush=True)
    if a.one_rank:
        print("VERIFIED 1", flush=True)  # every iteration was checked above
    dist.destroy_process_group()
    return 0


def launch(a):
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = []
    for r in range(a.size):
        cmd = [sys.executable, os.path.abspath(__file__), "--rank", str(r), "--port", str(port),
               "--size", str(a.size), "--bytes", a.bytes, "--iters", str(a.iters),
               "--warmup", str(a.warmup), "--timeout-s", str(a.timeout_s)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True))
    deadline = time.monotonic() + a.timeout_s
    outs, rc = [], 0
    try:
        for r, p in enumerate(procs):
            try:
                out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"torch_allreduce: rank {r} did not finish in {a.timeout_s} s",
                      file=sys.stderr)
                rc = rc or 124
                break
            outs.append(out)
            if p.returncode != 0:
                print(f"torch_allreduce: rank {r} failed (exit {p.returncode})", file=sys.stderr)
                rc = rc or p.returncode
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if rc:
        return rc
    for out in outs:
        sys.stdout.write(out)
    print("VERIFIED 1", flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, required=True, help="world size W")
    ap.add_argument("--bytes", default="4MiB", help="tensor size per rank, e.g. 64MiB")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timeout-s", type=int, default=280)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--master", default="127.0.0.1",
                    help="with --one-rank: the host of rank 0, where ranks meet at --port")
    ap.add_argument("--one-rank", action="store_true",
                    help="run only rank --rank (one rank per host, as bench/netns-racks.sh "
                         "does) and end with VERIFIED 1 once every result was checked")
    a = ap.parse_args()
    if a.one_rank and (a.rank is None or a.port is None):
        ap.error("--one-rank needs --rank and --port")
    if parse_bytes(a.bytes) % 4 or a.size < 1 or a.iters < 1:
        ap.error("--bytes must be a multiple of 4, --size and --iters at least 1")
    return worker(a) if a.rank is not None else launch(a)


if __name__ == "__main__":
    sys.exit(main())
