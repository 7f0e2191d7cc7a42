#!/usr/bin/env bash
# PyTorch training through RackWeave against torch DDP over gloo, the same run: each
# model trained by W ranks on this host (torchrun: python3 -m rackweave.torchrun) once
# per system, through a fresh `rw-node --role rack-agg` on 127.0.0.1
# (apps/examples/torch/compare.py):
#   server   rackweave.torch.ServerOptimizer (momentum SGD on the node)
#   hook     torch DDP with rackweave.torch.allreduce_hook (the node sums), SGD in process
#   ddp      torch DDP over gloo, SGD in process
#   local    no exchange at all: the same ranks on their own (the compute floor; each
#            system's step minus it is what its exchange costs on this host)
# Models (apps/examples/torch/models.py): digits, a small CNN (38 k parameters) on
# scikit-learn's handwritten digits, 10 epochs of 4 x 32 examples; resnet, a
# ResNet-style CNN (2.4 M parameters) on generated 3x16x16 images, 100 steps of 4 x 8.
# Prints per model and system the median step time, the payload bytes a rank exchanges
# per step, the test accuracy and the ratios to DDP; with --json one JSON object per
# model and system on stdout (model, system, median_step_ms, accuracy, bytes_per_step,
# step_vs_ddp, ...). Writes bench/RESULTS.md (the torch section) and
# bench/torch-loss.png (loss against time, per model, the three systems).
#
#   bash bench/torch.sh [--models "digits resnet"] [--systems "server hook ddp local"]
#                       [--workers W] [--timeout S] [--json] [--smoke] [--build-dir DIR]
#
# Defaults: both models, the four systems, W = 4, 900 s per model at most.
# --smoke (lib/common.sh): W = 2, 4 steps of each model, no plot.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/torch_runs.sh
source "$(dirname "$0")/lib/torch_runs.sh"
cd "$(dirname "$0")/.."

invocation=$(invocation_of "$@")
common_options "$@"
set -- ${rest[@]+"${rest[@]}"}

models="digits resnet" systems="server hook ddp local" workers=4 run_timeout=900 json=0
iters=1 warmup=0 # run_option's, unused here
while (($#)); do
  case $1 in
    --models) models=$2; shift 2 ;;
    --systems) systems=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    *) run_option 2,22 "$@"; shift "$shifted" ;; # --timeout --json -h
  esac
done
check_torch_options digits resnet
py=/usr/bin/python3 # Debian's, the one with python3-torch
$py -c 'import torch, sklearn' 2>/dev/null ||
  skip_smoke "Debian's python3-torch and python3-sklearn are needed (apps/scripts/setup.sh installs them)"
if ((smoke)); then workers=2 run_timeout=120; fi
build_tree

open_report "$json"
started=$(date +%s)
load_start=$(load_avg)
facts=$(machine_facts) # before OMP_NUM_THREADS=1, which nproc would report
tmp=$(mktemp -d)
node_pid= run_pid=
cleanup() {
  local rc=$?
  release ${run_pid:+"$run_pid"} ${node_pid:+"$node_pid"}
  exit "$rc"
}
set_exit_traps cleanup
snapshot_rackweave "$tmp/bin" comm
cp -r "$build/python" "$tmp/python" # the package, beside the binaries it was built with
export PYTHONPATH=$tmp/python OMP_NUM_THREADS=1

train_args() { # MODEL: train.py's options for it
  if ((smoke)); then
    echo "--max-steps 4 --batch 4 --progress-every 0 --test-examples 128"
  elif [[ $1 == digits ]]; then
    echo "--epochs 10 --batch 32 --lr 0.05"
  else
    echo "--max-steps 100 --batch 8 --lr 0.02 --progress-every 5"
  fi
}

failures=0
say "torch: models [$models], systems [$systems], $workers ranks each"
train_models "$tmp/bin/rw-node" --print
elapsed=$(($(date +%s) - started))

machine="$facts; load average $load_start at the start, $(load_avg) at the end"
plot=bench/torch-loss.png
((smoke)) && plot=$tmp/torch-loss.png # checked, then thrown away
$py - "$tmp/results.jsonl" "$tmp/section.md" "$invocation" "$machine" "$elapsed" \
  "$workers" "$models" "$systems" "$tmp/curves" "$plot" >&3 <<'PY'
import datetime, json, math, os, sys
res, md_path, invocation, machine, elapsed, w, models, systems, curves, plot = sys.argv[1:]
recs = [json.loads(l) for l in open(res)]
models, systems = models.split(), systems.split()
names = {"server": "rackweave ServerOptimizer", "hook": "rackweave DDP hook",
         "ddp": "torch DDP (gloo)", "local": "no exchange (compute floor)"}
def ok(r):
    m = r.get("median_step_ms")
    return ("error" not in r and isinstance(m, (int, float)) and math.isfinite(m) and m > 0
            and isinstance(r.get("accuracy"), (int, float)) and 0 <= r["accuracy"] <= 1)
rows, lines = [], []
for model in models:
    floor = next((r["median_step_ms"] for r in recs if r.get("model") == model
                  and r.get("system") == "local" and ok(r)), None)
    for s in systems:
        r = next((r for r in recs if r.get("model") == model and r.get("system") == s), None)
        if r is None or not ok(r):
            rows.append([model, names[s], "FAIL", "-", "-", "-", "-", "-"])
            continue
        over = "-" if floor is None or s == "local" else f"{r['median_step_ms'] - floor:.2f}"
        rows.append([model, names[s], f"{r['median_step_ms']:.2f}",
                     f"{r.get('step_vs_ddp', '-')}", over, f"{100 * r['accuracy']:.2f}",
                     f"{r['final_loss']:.4f}", f"{r['bytes_per_step'] / 1e6:.2f}"])
for row in rows:
    lines.append(f"  {row[0]:7s} {row[1]:28s} median {row[2]:>8s} ms  vs DDP {row[3]:>6s}  "
                 f"over the floor {row[4]:>6s} ms  accuracy {row[5]:>6s} %  loss {row[6]:>7s}  "
                 f"{row[7]:>6s} MB/step/rank")
print("\n".join(lines))
# Loss against time, one panel per model.
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models):
        for s in [s for s in systems if s != "local"]:
            path = os.path.join(curves, f"{model}-{s}.json")
            if os.path.exists(path):
                c = json.load(open(path))["curve"]
                ax.plot([t for t, _ in c], [l for _, l in c], label=names[s], lw=1)
        ax.set_title(f"{model}: W = {w}"); ax.set_xlabel("seconds"); ax.set_ylabel("training loss (rank 0)")
        ax.legend()
    fig.tight_layout(); fig.savefig(plot, dpi=90)
    plotted = True
except ImportError:
    print("smoke: partly skipped: the plot: no matplotlib", file=sys.stderr)
    plotted = False
md = ["<!-- torch:begin -->",
      "## PyTorch training: RackWeave against torch DDP over gloo (bench/torch.sh)",
      "",
      f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {machine}; the node and {w} ranks "
      "on this one machine (torchrun, one torch thread per rank), loopback.",
      "",
      f"Command: `{invocation}` (the whole run took {elapsed} s). Per model a fresh "
      "`rw-node --role rack-agg`, then `apps/examples/torch/compare.py`: the same training "
      "(same data order, same initial parameters, momentum SGD 0.9) once per system: "
      "ServerOptimizer runs momentum on the node (gradients pushed from autograd hooks as "
      "backward produces them, shared memory with the node); the DDP hook sends DDP's "
      "buckets through the node (`sum`), the optimizer in process; DDP over gloo is the "
      "comparison. Step: forward, backward, exchange and optimizer, median over the run. "
      "MB/step/rank: payload a rank sends plus receives (RackWeave: the gradient out and "
      "the result back; gloo's ring: 2 (W-1)/W of the gradient each way). Accuracy: on "
      "the held-out set after the run. The floor: the same ranks training on their own, "
      "without any exchange; a system's step less the floor is what its exchange costs "
      "here. On this host the ranks and the node share the same cores, so an exchange's "
      "CPU time (the node's sums and optimizer, the workers' copies; gloo's ring inside the "
      "ranks) is taken from the ranks' compute: on a rack the node runs on its own "
      "machine.",
      "",
      "| model | system | median step ms | vs DDP | over the floor ms | test accuracy % | final loss | MB/step/rank |",
      "|---|---|---|---|---|---|---|---|",
      *[f"| {' | '.join(r)} |" for r in rows],
      "",
      "![loss against time](torch-loss.png)" if plotted else "",
      "<!-- torch:end -->"]
open(md_path, "w").write("\n".join(md) + "\n")
PY

say "command: $invocation"
say "took ${elapsed} s"
update_results torch "$tmp/section.md"
((smoke)) || say "written: bench/RESULTS.md, $plot"
if ((failures)); then note "$failures model(s) failed"; exit 1; fi
