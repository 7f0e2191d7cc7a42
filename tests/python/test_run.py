"""python3 -m rackweave.run, as a user launches a training script with it: the job
created with the spec given, every rank handed the job's variables, the script's
ServerOptimizer taking the job's spec, the job deleted at the end; two machines (here
two launchers on this host) sharing the token through --token-file."""

import json
import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("torch")

SCRIPT = '''
import json, os, sys, torch
import rackweave.torch as rwt
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = rwt.ServerOptimizer(model.named_parameters())  # the job's spec: sgd, lr 0.05
x, y = torch.ones(8, 4), torch.zeros(8, 1)
losses = []
for _ in range(3):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward(); opt.step(); opt.zero_grad()
    losses.append(loss.item())
opt.close()
with open(os.path.join(sys.argv[1], f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump({"losses": losses, "job": os.environ["RACKWEAVE_JOB"],
               "world": int(os.environ["WORLD_SIZE"]), "lr": opt.param_groups[0]["lr"]}, f)
'''


def launch(node, tmp_path, *args):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    return subprocess.Popen(
        [sys.executable, "-m", "rackweave.run", "--connect", node, "--optimizer", "sgd",
         "--lr", "0.05", *args, str(script), str(tmp_path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc):
    try:
        out, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"rackweave.run did not finish: {err[-2000:]}")
    assert proc.returncode == 0, err[-3000:]
    return err


def ranks(tmp_path, n):
    got = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(n)]
    for g in got:
        assert g["world"] == n and g["lr"] == pytest.approx(0.05) and g["job"] == got[0]["job"]
        assert g["losses"] == got[0]["losses"]  # one model, the node's
    assert got[0]["losses"][-1] < got[0]["losses"][0]  # it trains
    return got


def test_one_machine_creates_the_job_and_deletes_it(node, tmp_path):
    import rackweave
    err = finish(launch(node, tmp_path, "--nproc-per-node", "2", "--job", "run-one"))
    assert "job 'run-one' created for 2 ranks (sgd, lr 0.05)" in err
    ranks(tmp_path, 2)
    # Deleted: the name is free again.
    rackweave.create_job(node, "run-one", workers=1)
    rackweave.delete_job(node, "run-one")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_machines_share_the_token_through_a_file(node, tmp_path):
    token_file = tmp_path / "token"
    common = ["--nproc-per-node", "1", "--nnodes", "2", "--job", "run-two",
              "--token-file", str(token_file), "--master-addr", "127.0.0.1",
              "--master-port", str(free_port())]
    second = launch(node, tmp_path, *common, "--node-rank", "1")  # waits for the token
    first = launch(node, tmp_path, *common, "--node-rank", "0")
    finish(first)
    finish(second)
    ranks(tmp_path, 2)
    assert not token_file.exists()  # machine 0 removed it with the job


def test_refusals_say_what_to_give(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RACKWEAVE_")}
    run = lambda *a: subprocess.run([sys.executable, "-m", "rackweave.run", *a], env=env,
                                    capture_output=True, text=True, timeout=60)
    r = run("--nproc-per-node", "2", "train.py")
    assert r.returncode == 2 and "--connect (or RACKWEAVE_CONNECT) is needed" in r.stderr
    r = run("--connect", "127.0.0.1:1", "--nproc-per-node", "1", "--nnodes", "2", "train.py")
    assert r.returncode == 2 and "every machine must name the same --job" in r.stderr
    r = run("--connect", "127.0.0.1:1", "--nproc-per-node", "1", "--nnodes", "2",
            "--job", "j", "--node-rank", "1", "train.py")
    assert r.returncode == 2 and "RACKWEAVE_TOKEN or --token-file" in r.stderr
