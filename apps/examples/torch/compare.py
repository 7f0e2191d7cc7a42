"""Trains a model with W ranks on this host once per system, the same run, and compares:

    python3 compare.py --connect 127.0.0.1:7700 --model digits --systems server,ddp

For each RackWeave system it creates a job through the coordinator at --connect
(rackweave.create_job, the token handed to the ranks in RACKWEAVE_TOKEN), starts the
ranks with torchrun (python3 -m rackweave.torchrun) running train.py, and deletes the
job afterwards. Prints each system's test accuracy, median step time and bytes
exchanged per step, and the ratios to torch DDP over gloo; with --json one JSON object
per system on stdout (model, system, median_step_ms, accuracy, ...), with --curves DIR
each run's loss curve as DIR/<model>-<system>.json.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import rackweave

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEMS = ("server", "hook", "ddp", "local")
NAMES = {"server": "rackweave ServerOptimizer", "hook": "rackweave DDP hook",
         "ddp": "torch DDP (gloo)", "local": "no exchange (compute floor)"}


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--connect", required=True, help="HOST:PORT of a node embedding the "
                   "coordinator (rw-node --role rack-agg), or of the coordinator")
    p.add_argument("--model", default="digits",
                   help="a model of models.py, or MODEL+bf16 / MODEL+fp16: trained under "
                        "torch.autocast (train.py --amp)")
    p.add_argument("--systems", default="server,hook,ddp",
                   help="comma-separated, of " + ", ".join(SYSTEMS))
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--json", action="store_true", help="one JSON object per system on stdout")
    p.add_argument("--curves", default="", help="write each run's loss curve into this directory")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per run, then it is stopped")
    p.add_argument("train_args", nargs=argparse.REMAINDER,
                   help="after --: passed to train.py (--epochs, --max-steps, --batch, --lr, ...)")
    a = p.parse_args(argv)
    a.systems = [s for s in a.systems.split(",") if s]
    bad = [s for s in a.systems if s not in SYSTEMS]
    if bad or not a.systems:
        p.error(f"--systems: unknown {bad} (of {', '.join(SYSTEMS)})")
    if a.workers < 1:
        p.error("--workers must be positive")
    if a.train_args[:1] == ["--"]:
        a.train_args = a.train_args[1:]
    return a


def option(args, name, default):
    return float(args[args.index(name) + 1]) if name in args else default


def text_option(args, name, default):
    return args[args.index(name) + 1] if name in args else default


def run(a, system, out_dir):
    model, _, amp = a.model.partition("+")
    chunk = int(option(a.train_args, "--chunk-bytes", 262144))
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # as train.py sets; torchrun warns if unset
    job = None
    if system in ("server", "hook"):
        job = f"{a.model.replace('+', '-')}-{system}-{os.getpid()}-{int(time.time())}"
        if system == "server":
            # The job as train.py's ServerOptimizer states it, compression included.
            created = rackweave.create_job(
                a.connect, job, workers=a.workers, optimizer="momentum",
                lr=option(a.train_args, "--lr", 0.05),
                momentum=option(a.train_args, "--momentum", 0.9), chunk_bytes=chunk,
                compression=text_option(a.train_args, "--compression", "none"),
                compress_updates="--compress-updates" in a.train_args)
        else:
            created = rackweave.create_job(a.connect, job, workers=a.workers, optimizer="sum",
                                           chunk_bytes=chunk)
        env.update(RACKWEAVE_CONNECT=a.connect, RACKWEAVE_JOB=job,
                   RACKWEAVE_TOKEN=created["token"])
    result = os.path.join(out_dir, f"{system}.json")
    cmd = [sys.executable, "-m", "rackweave.torchrun", "--standalone",
           f"--nproc_per_node={a.workers}", os.path.join(HERE, "train.py"),
           "--model", model, "--system", system, "--json-out", result, *a.train_args]
    if amp:
        cmd += ["--amp", amp]
    # The ranks' progress goes to stderr under --json, so stdout stays JSON.
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                            stdout=sys.stderr if a.json else None)
    try:
        rc = proc.wait(timeout=a.timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise SystemExit(f"compare: {system} did not finish within {a.timeout:.0f} s")
    finally:
        if job:
            try:
                rackweave.delete_job(a.connect, job)
            except rackweave.Error as e:
                print(f"compare: could not delete job '{job}': {e}", file=sys.stderr)
    if rc != 0:
        raise SystemExit(f"compare: the {system} run failed (torchrun exit code {rc})")
    with open(result) as f:
        return json.load(f)


def main(argv):
    a = parse(argv)
    results = {}
    with tempfile.TemporaryDirectory(prefix="rw-compare-") as tmp:
        for system in a.systems:
            print(f"compare: {a.model} with {NAMES[system]}, {a.workers} ranks",
                  file=sys.stderr if a.json else sys.stdout, flush=True)
            results[system] = run(a, system, tmp)
    if a.curves:
        os.makedirs(a.curves, exist_ok=True)
        for system, r in results.items():
            with open(os.path.join(a.curves, f"{a.model}-{system}.json"), "w") as f:
                json.dump({"model": a.model, "system": system, "curve": r["curve"]}, f)
    base = results.get("ddp")
    for system, r in results.items():
        r = {k: v for k, v in r.items() if k != "curve"}
        if base:
            r["step_vs_ddp"] = round(r["median_step_ms"] / base["median_step_ms"], 3)
            r["accuracy_vs_ddp_points"] = round(100.0 * (r["accuracy"] - base["accuracy"]), 2)
        if a.json:
            print(json.dumps(r), flush=True)
            continue
        line = (f"{NAMES[system]:>26}: test accuracy {100.0 * r['accuracy']:6.2f}%  median step "
                f"{r['median_step_ms']:8.2f} ms  {r['bytes_per_step'] / 1e6:6.2f} MB/step/rank")
        if base and system not in ("ddp", "local"):
            line += (f"  ({r['step_vs_ddp']:.2f}x DDP's step, accuracy "
                     f"{r['accuracy_vs_ddp_points']:+.2f} points)")
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
