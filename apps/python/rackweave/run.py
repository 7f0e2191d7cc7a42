"""Launch a training script's ranks on a RackWeave job, as torchrun launches them:

    python3 -m rackweave.run --connect 127.0.0.1:7700 --nproc-per-node 4 \\
        --optimizer momentum --lr 0.05 train.py --epochs 10

creates the job (`rackweave.create_job`: every rank of every machine, the spec given
here), hands every rank RACKWEAVE_CONNECT, RACKWEAVE_JOB and RACKWEAVE_TOKEN, starts the
ranks with torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), waits for
them, deletes the job it created and exits with torchrun's status. A script then needs
only `rackweave.torch.ServerOptimizer(model.named_parameters())` (the job's spec) or
`HookState(model.named_parameters())`.

Several machines (--nnodes M): machine 0 (--node-rank 0) creates the job; every machine
names the same --job and reaches the token either from the environment
(RACKWEAVE_TOKEN) or from --token-file, a file machine 0 writes (mode 0600) and the
others wait for (a shared file system), each machine pointing its ranks at its own
node with --connect. A token already in RACKWEAVE_TOKEN (or --token-file existing on
machine 0) joins that job instead of creating one.
"""

import argparse
import os
import signal
import subprocess
import sys
import time

OPTIMIZERS = ("sum", "sgd", "momentum", "nesterov", "adam", "lamb", "lars")


def parse(argv):
    p = argparse.ArgumentParser(
        prog="python3 -m rackweave.run", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Everything after the script is the script's. torchrun's own options not "
               "named here: run python3 -m rackweave.torchrun yourself under the same "
               "RACKWEAVE_* variables.")
    where = p.add_argument_group("where")
    where.add_argument("--connect", default=os.environ.get("RACKWEAVE_CONNECT"),
                       help="HOST:PORT of this machine's node (default: RACKWEAVE_CONNECT)")
    where.add_argument("--job", default=os.environ.get("RACKWEAVE_JOB"),
                       help="the job's name (default: RACKWEAVE_JOB, else the script's "
                            "name and this launcher's pid; needed with --nnodes > 1)")
    where.add_argument("--token-file", default="",
                       help="machine 0 writes the job's token here (0600), the others "
                            "read it (with --nnodes > 1, unless RACKWEAVE_TOKEN is set)")
    where.add_argument("--join-timeout", type=float, default=120.0,
                       help="seconds a machine other than 0 waits for --token-file")
    where.add_argument("--secret-file", default="",
                       help="the cluster secret (a cluster started with --cluster-secret)")
    where.add_argument("--keep-job", action="store_true",
                       help="leave the job on the cluster when the ranks are done")
    ranks = p.add_argument_group("ranks (torchrun's)")
    ranks.add_argument("--nproc-per-node", "--nproc_per_node", type=int, required=True,
                       dest="nproc", help="ranks on this machine")
    ranks.add_argument("--nnodes", type=int, default=1, help="machines (default 1)")
    ranks.add_argument("--node-rank", "--node_rank", type=int, default=0, dest="node_rank",
                       help="this machine's index, 0..nnodes-1")
    ranks.add_argument("--master-addr", "--master_addr", default="127.0.0.1",
                       dest="master_addr", help="machine 0's address (--nnodes > 1)")
    ranks.add_argument("--master-port", "--master_port", type=int, default=29500,
                       dest="master_port", help="machine 0's rendezvous port (--nnodes > 1)")
    spec = p.add_argument_group("the job's spec (what create_job takes)")
    spec.add_argument("--optimizer", choices=OPTIMIZERS, default="momentum")
    spec.add_argument("--lr", type=float, default=0.01)
    spec.add_argument("--momentum", type=float, default=0.9)
    spec.add_argument("--weight-decay", type=float, default=0.0)
    spec.add_argument("--betas", type=float, nargs=2, default=(0.9, 0.999))
    spec.add_argument("--eps", type=float, default=1e-8)
    spec.add_argument("--chunk-bytes", type=int, default=262144)
    spec.add_argument("--consistency", default="bsp", help="bsp, ssp:S or async")
    spec.add_argument("--compression", default="none",
                      help="none, bf16, fp16, topk:RATIO[,warmup=STEPS]")
    spec.add_argument("--compress-updates", action="store_true")
    p.add_argument("script", help="the training script")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")
    a = p.parse_args(argv)
    if not a.connect:
        p.error("--connect (or RACKWEAVE_CONNECT) is needed: HOST:PORT of this machine's node")
    if a.nproc < 1 or a.nnodes < 1 or not 0 <= a.node_rank < a.nnodes:
        p.error("--nproc-per-node and --nnodes must be positive, --node-rank in 0..nnodes-1")
    if a.nnodes > 1 and not a.job:
        p.error("--nnodes > 1: every machine must name the same --job")
    if (a.nnodes > 1 and a.node_rank > 0 and not os.environ.get("RACKWEAVE_TOKEN")
            and not a.token_file):
        p.error("--node-rank > 0: the token comes from RACKWEAVE_TOKEN or --token-file "
                "(machine 0 writes it)")
    if not a.job:
        stem = os.path.splitext(os.path.basename(a.script))[0] or "job"
        a.job = f"{stem}-{os.getpid()}"
    return a


def read_token(path, timeout):
    """The token in `path`, waiting up to `timeout` seconds for machine 0 to write it."""
    end = time.monotonic() + timeout
    while True:
        try:
            with open(path) as f:
                token = f.read().strip()
            if token:
                return token
        except FileNotFoundError:
            pass
        if time.monotonic() >= end:
            raise SystemExit(f"rackweave.run: no token in {path} after {timeout:.0f} s "
                             "(machine 0 writes it once it has created the job)")
        time.sleep(0.2)


def write_token(path, token):
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.replace(path + ".tmp", path)


def create(a, rackweave):
    b1, b2 = a.betas
    made = rackweave.create_job(
        a.connect, a.job, workers=a.nproc * a.nnodes, optimizer=a.optimizer, lr=a.lr,
        momentum=a.momentum, weight_decay=a.weight_decay, beta1=b1, beta2=b2, eps=a.eps,
        chunk_bytes=a.chunk_bytes, consistency=a.consistency, compression=a.compression,
        compress_updates=a.compress_updates, secret_file=a.secret_file)
    return made["token"]


def torchrun_command(a):
    cmd = [sys.executable, "-m", "rackweave.torchrun", f"--nproc_per_node={a.nproc}"]
    if a.nnodes == 1:
        cmd.append("--standalone")
    else:
        cmd += [f"--nnodes={a.nnodes}", f"--node_rank={a.node_rank}",
                f"--master_addr={a.master_addr}", f"--master_port={a.master_port}"]
    return cmd + [a.script, *a.script_args]


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    import rackweave

    token = os.environ.get("RACKWEAVE_TOKEN", "")
    created = False
    if not token and a.token_file and a.node_rank > 0:
        token = read_token(a.token_file, a.join_timeout)
    elif not token and a.token_file and os.path.exists(a.token_file):
        token = read_token(a.token_file, 0)  # a job made earlier: join it
    if not token:
        try:
            token = create(a, rackweave)
        except rackweave.Error as e:
            raise SystemExit(f"rackweave.run: could not create job '{a.job}' through "
                             f"{a.connect}: {e}")
        created = True
        if a.token_file:
            write_token(a.token_file, token)
        print(f"rackweave.run: job '{a.job}' created for {a.nproc * a.nnodes} ranks "
              f"({a.optimizer}, lr {a.lr}) through {a.connect}", file=sys.stderr, flush=True)
    env = dict(os.environ, RACKWEAVE_CONNECT=a.connect, RACKWEAVE_JOB=a.job,
               RACKWEAVE_TOKEN=token)
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.Popen(torchrun_command(a), env=env, start_new_session=False)

    def forward(sig, _frame):
        proc.send_signal(sig)  # torchrun stops its ranks and exits

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if created and not a.keep_job:
            try:
                rackweave.delete_job(a.connect, a.job, secret_file=a.secret_file)
            except rackweave.Error as e:
                print(f"rackweave.run: could not delete job '{a.job}': {e}", file=sys.stderr)
            if a.token_file:
                try:
                    os.unlink(a.token_file)
                except FileNotFoundError:
                    pass
    if rc != 0:
        print(f"rackweave.run: the ranks failed (torchrun exit status {rc})", file=sys.stderr)
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
