#!/usr/bin/env bash
# PyTorch training on a GPU through RackWeave against torch DDP over gloo with CUDA
# tensors, the same run (issue 37): each model trained by W ranks sharing this host's
# GPU (torchrun: python3 -m rackweave.torchrun, apps/examples/torch/compare.py with
# train.py --device cuda), once per system, through a fresh local `rw-node --role
# rack-agg` (shared memory):
#   server   rackweave.torch.ServerOptimizer (momentum SGD on the node; CUDA gradients
#            staged through a pinned host arena on side streams: rackweave/staging.py)
#   hook     torch DDP with rackweave.torch.allreduce_hook (the node sums), SGD in process
#   ddp      torch DDP over gloo with CUDA tensors, SGD in process
#   local    no exchange: the same ranks on their own (the floor)
# Models (apps/examples/torch/models.py): digits (a small CNN, scikit-learn's digits or
# the bundle's copy of them), resnet18 (ResNet-18, 11.2 M parameters, generated
# CIFAR-shaped 3x32x32 data, batch 64 per rank), transformer (a two-layer Transformer
# encoder classifier, 0.4 M parameters, generated token sequences, batch 64 per rank).
# MODEL+bf16 trains MODEL under bf16 autocast; MODEL+fp16 under fp16 autocast with a
# GradScaler (CUDA only, and without ServerOptimizer, which refuses a scaler: its row
# is left out). Each row also reports what a rank held at its peak: device memory
# (torch.cuda.max_memory_allocated), the staging arena (host memory, pinned on a GPU:
# staging_bytes) and its resident set. Ranks go to GPU LOCAL_RANK modulo the GPUs: on a
# machine with two or more, that is the ranks spread over them (the section says how
# many).
#
#   bash bench/gpu.sh [--build-dir BUILD|BUNDLE] [--models "digits resnet18 ..."]
#                     [--systems "server hook ddp local"] [--workers W] [--steps N]
#                     [--device cuda|cpu] [--python PY] [--out DIR] [--timeout S]
#                     [--json] [--smoke]
#
# BUILD: a build tree, or a bundle (bench/bundle.sh) carried to a machine with none of
# our packages: its python/ must hold _rackweave for PY's version (bundle.sh builds one
# for each RW_PYTHON_EXTRA the build was configured with; the GPU machine runs 3.12).
# PY: the Python with torch (default: python3 on PATH, /usr/bin/python3 on Debian).
# Prints one JSON line per model and system with --json (model, system, device, torch,
# median_step_ms, accuracy, final_loss, step_vs_ddp, max_loss_diff_vs_ddp: the largest
# difference of rank 0's loss from DDP's, step by step), the targets (resnet18 on cuda:
# ServerOptimizer <= 0.6 x DDP, the hook <= 0.8 x, losses within 1e-5 of DDP's) and
# writes bench/RESULTS.md (the gpu section); --out DIR also gets results.jsonl,
# section.md and run.log (for the device tool, which returns only what is in DIR).
# Exits 1 if a system failed.
# Then apps/examples/torch/resume.py: ServerOptimizer.state_dict() saved after step 3,
# loaded into a new job, the resumed steps bitwise those of the run that went on (a
# JSON line, check "state_dict_resume"; a mismatch fails the bench).
# --smoke (lib/common.sh): on the CPU (no GPU needed), W = 2, 2 steps each of digits,
# resnet18 and transformer+bf16, with train.py --staging, so the staging path CUDA
# tensors take runs end to end.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/torch_runs.sh
source "$(dirname "$0")/lib/torch_runs.sh"
cd "$(dirname "$0")/.."

invocation=$(invocation_of "$@")
common_options "$@"
set -- ${rest[@]+"${rest[@]}"}

models="digits resnet18 transformer transformer+bf16 transformer+fp16"
systems="server hook ddp local" workers=4 run_timeout=900 json=0
steps= device=cuda py= out=
iters=1 warmup=0 # run_option's, unused here
while (($#)); do
  case $1 in
    --models) models=$2; shift 2 ;;
    --systems) systems=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) run_option 2,45 "$@"; shift "$shifted" ;; # --timeout --json -h
  esac
done
models_given=$models
models=
for m in $models_given; do
  case ${m#*+} in
    "$m"|bf16|fp16) ;;
    *) usage_error "model $m: the mixed precision after + must be bf16 or fp16" ;;
  esac
  [[ $m == *+fp16 && $device != cuda ]] && { note "$m left out: fp16 needs --device cuda"; continue; }
  models+="${models:+ }$m"
done
[[ -n $models ]] || usage_error "no model left to run"
models_base=$models models=${models//+bf16/} models=${models//+fp16/}
check_torch_options digits resnet resnet18 transformer
models=$models_base
[[ -z $steps || $steps =~ ^[1-9][0-9]*$ ]] || usage_error "bad --steps $steps"
[[ $device == cuda || $device == cpu ]] || usage_error "--device takes cuda or cpu"
if ((smoke)); then
  workers=2 run_timeout=240 device=cpu steps=2
  models="digits resnet18 transformer+bf16" # the Transformer under bf16 autocast
fi
if [[ -z $py ]]; then
  py=python3
  [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import torch' 2>/dev/null && py=/usr/bin/python3
fi
$py -c 'import torch' 2>/dev/null ||
  skip_smoke "$py has no torch (Debian: python3-torch, which apps/scripts/setup.sh installs)"
if [[ $device == cuda ]] && ! $py -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
  usage_error "--device cuda: $py's torch sees no CUDA device (--device cpu runs it on the CPU)"
fi
build_tree

open_report "$json"
started=$(date +%s)
facts=$(machine_facts)
gpu_name=$($py -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")' 2>/dev/null || echo unknown)
torch_version=$($py -c 'import torch; print(torch.__version__)')
py_version=$($py -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
tmp=$(mktemp -d)
node_pid= run_pid=
cleanup() {
  local rc=$?
  release ${run_pid:+"$run_pid"} ${node_pid:+"$node_pid"}
  exit "$rc"
}
set_exit_traps cleanup

# The package: the build's (or bundle's) native part for this Python, the source tree's
# Python part (the same as a build's copy). A bundle's extension finds its libraries in
# its bin/ and ../lib, but not ../lib/cxx: Python keeps the machine's own C++ runtime,
# the one its torch was built against (the programs' wrappers take the bundle's).
[[ -x $build/apps/rw-node ]] || usage_error "$build/apps/rw-node is missing (a build or a bundle)"
mkdir -p "$tmp/python/rackweave"
cp apps/python/rackweave/*.py "$tmp/python/rackweave/"
cp "$build"/python/rackweave/_rackweave*.so "$tmp/python/rackweave/" 2>/dev/null || true
if [[ -f $build/BUNDLE ]]; then
  export LD_LIBRARY_PATH=$build/bin:$build/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export PYTHONPATH=$tmp/python OMP_NUM_THREADS=1
if ! $py -c 'import rackweave' 2>"$tmp/import.err"; then
  note "$py (Python $py_version) cannot import rackweave from $build/python:"
  tail -n 3 "$tmp/import.err" >&2
  note "a bundle carries _rackweave for each Python the build was configured for (cmake -DRW_PYTHON_EXTRA=.../include/python3.12)"
  exit 1
fi
# The digits without scikit-learn: the copy bundle.sh saved.
if ! $py -c 'import sklearn' 2>/dev/null && [[ -f $build/python/digits.pt ]]; then
  export RACKWEAVE_DIGITS=$build/python/digits.pt
fi

train_args() { # MODEL[+AMP]: train.py's options for it (compare.py adds --amp)
  local a="--device $device --progress-every 0"
  ((smoke)) && a+=" --staging --batch 2 --test-examples 64"
  case ${1%%+*} in
    digits) ((smoke)) || a+=" --epochs 10 --batch 32 --lr 0.05" ;;
    resnet) ((smoke)) || a+=" --batch 8 --lr 0.02" ;;
    resnet18) ((smoke)) || a+=" --batch 64 --lr 0.02" ;;
    transformer) ((smoke)) || a+=" --batch 64 --lr 0.05" ;;
  esac
  [[ -n $steps ]] && a+=" --max-steps $steps"
  [[ -z $steps && $1 != digits ]] && a+=" --max-steps 60"
  echo "$a"
}

# ServerOptimizer.state_dict() saved mid-run and loaded into a new job, on this device
# and torch (apps/examples/torch/resume.py): the resumed steps must be bitwise those of
# the run that went on, or the bench fails. Its JSON line goes to $tmp/resume.jsonl.
resume_check() {
  local st=0 extra=
  rm -f "$tmp/port"
  timeout -k 5 $((run_timeout + 30)) "$build/apps/rw-node" --role rack-agg --open-jobs \
    --listen 127.0.0.1:0 --port-file "$tmp/port" >"$tmp/node-resume.log" 2>&1 </dev/null &
  node_pid=$!
  wait_for_port "$tmp/port" "$node_pid" ||
    { note "rw-node did not start:"; cat "$tmp/node-resume.log" >&2; exit 1; }
  ((smoke)) && extra=--staging # on the CPU, through the path CUDA tensors take
  timeout -k 5 "$run_timeout" "$py" apps/examples/torch/resume.py --connect "$(<"$tmp/port")" \
    --device "$device" --workers "$workers" ${extra:+"$extra"} \
    >"$tmp/resume.jsonl" 2>"$tmp/resume.err" </dev/null &
  run_pid=$!
  wait "$run_pid" || st=$?
  run_pid=
  if ! stop_pids "$node_pid"; then ((st)) || st=1; fi
  node_pid=
  if ((st != 0)); then
    note "the state_dict resume check failed (exit $st):"
    tail -n 12 "$tmp/resume.err" | sed 's/^/    /' >&2
    failures=$((failures + 1))
  fi
  cat "$tmp/resume.jsonl" >&2
}

# ServerOptimizer refuses a GradScaler (tests/python/test_torch.py): no server row for fp16.
systems_for() {
  if [[ $1 == *+fp16 ]]; then echo "${systems//server/}"; else echo "$systems"; fi
}

gpus=$($py -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null || echo 0)
failures=0
say "gpu: models [$models], systems [$systems], $workers ranks each on $device ($gpu_name), Python $py_version, torch $torch_version"
train_models "$build/apps/rw-node"
resume_check
elapsed=$(($(date +%s) - started))

machine="$facts; GPU: $gpu_name (x $gpus); Python $py_version, torch $torch_version"
$py - "$tmp/results.jsonl" "$tmp/curves" "$tmp/final.jsonl" "$tmp/section.md" "$invocation" \
  "$machine" "$elapsed" "$workers" "$models" "$systems" "$device" "$tmp/resume.jsonl" >&3 <<'PY'
import datetime, json, math, os, sys
(res, curves, final, md_path, invocation, machine, elapsed, w, models, systems,
 device, resume_path) = sys.argv[1:]
recs = [json.loads(l) for l in open(res) if l.strip()]
models, systems = models.split(), systems.split()
names = {"server": "rackweave ServerOptimizer", "hook": "rackweave DDP hook",
         "ddp": "torch DDP (gloo)", "local": "no exchange (floor)"}

def ok(r):
    m = r.get("median_step_ms")
    return ("error" not in r and isinstance(m, (int, float)) and math.isfinite(m) and m > 0)

def mib(n):
    return "-" if n is None else f"{n / 1048576:.1f}"

def curve(model, system):
    path = os.path.join(curves, f"{model}-{system}.json")
    return [l for _, l in json.load(open(path))["curve"]] if os.path.exists(path) else None

out, rows, targets = [], [], []
for model in models:
    ddp = curve(model, "ddp")
    for s in systems:
        if model.endswith("+fp16") and s == "server":
            continue  # ServerOptimizer refuses a GradScaler
        r = next((r for r in recs if r.get("model") == model and r.get("system") == s), None)
        if r is None or not ok(r):
            rows.append([model, names[s], "FAIL", "-", "-", "-", "-", "-", "-", "-"])
            out.append({"model": model, "system": s, "device": device, "error": "failed"})
            continue
        r = {k: v for k, v in r.items() if k != "curve"}
        mine = curve(model, s)
        diff = None
        if s in ("server", "hook") and ddp and mine and len(ddp) == len(mine):
            diff = max(abs(a - b) for a, b in zip(mine, ddp))
        r["max_loss_diff_vs_ddp"] = None if diff is None else float(f"{diff:.3g}")
        out.append(r)
        rows.append([model, names[s], f"{r['median_step_ms']:.2f}",
                     str(r.get("step_vs_ddp", "-")),
                     f"{100 * r['accuracy']:.2f}" if r.get("accuracy") is not None else "-",
                     f"{r['final_loss']:.4f}", "-" if diff is None else f"{diff:.2g}",
                     mib(r.get("peak_device_bytes")), mib(r.get("staging_bytes")),
                     mib(r.get("peak_rss_bytes"))])
    by = {r["system"]: r for r in out if r.get("model") == model and "error" not in r}
    if model == "resnet18" and device == "cuda" and "ddp" in by:
        for s, bound in (("server", 0.6), ("hook", 0.8)):
            if s in by:
                x = by[s]["median_step_ms"] / by["ddp"]["median_step_ms"]
                verdict = "met" if x <= bound else "not met"
                targets.append(f"- resnet18 on {device}: {names[s]} {x:.2f} x DDP's step "
                               f"(target {bound}): **{verdict}**")
    for s in ("server", "hook"):
        d = by.get(s, {}).get("max_loss_diff_vs_ddp")
        # Judged on the float32 CNNs; the Transformer (an embedding's backward adds
        # with atomics on a GPU) and mixed precision are reported only.
        if d is not None and model in ("digits", "resnet", "resnet18"):
            targets.append(f"- {model}: {names[s]}'s loss within {d:.2g} of DDP's at every "
                           f"step (target 1e-5): **{'met' if d <= 1e-5 else 'not met'}**")
resume = [json.loads(l) for l in open(resume_path) if l.strip()] \
    if os.path.exists(resume_path) else []
if resume:
    r = resume[0]
    out.append(r)
    targets.append(f"- ServerOptimizer.state_dict() saved at step {r['saved_at']} and loaded "
                   f"into a new job ({r['optimizer']}, {r['workers']} ranks on {r['device']}, "
                   f"torch {r['torch']}): the resumed steps bitwise those of the run that went "
                   f"on: **{'met' if r['bitwise'] else 'not met'}**")
else:
    targets.append("- ServerOptimizer.state_dict() resume: **did not run**")
with open(final, "w") as f:
    for r in out:
        f.write(json.dumps(r) + "\n")
head = ["model", "system", "median step ms", "vs DDP", "test accuracy %", "final loss",
        "max loss diff vs DDP", "peak device MiB", "staging arena MiB", "peak RSS MiB"]
print("  ".join(head))
for row in rows:
    print("  ".join(row))
print("\n".join(targets))
md = ["<!-- gpu:begin -->",
      "## PyTorch training on a GPU: RackWeave against torch DDP over gloo (bench/gpu.sh)",
      "",
      f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {machine}; the node and {w} ranks "
      f"on this one machine, every rank's model and data on {device} (rank r on GPU r "
      "modulo the GPUs: several ranks share one), the node over shared memory.",
      "",
      f"Command: `{invocation}` (the whole run took {elapsed} s). Per model a fresh "
      "`rw-node --role rack-agg`, then `apps/examples/torch/compare.py` with `train.py "
      f"--device {device}`: the same training (data order, initial parameters, momentum "
      "SGD 0.9) once per system. ServerOptimizer: each CUDA gradient copied into its "
      "region of one pinned arena per rank on a side stream as backward produces it, "
      "pushed once copied, the node's momentum step, the answer landing in place and "
      "copied back on another side stream, the next forward waiting for every copy "
      "in flight; the DDP hook: each bucket the same "
      "way, the mean taken on the host; DDP over gloo with CUDA tensors is the comparison. "
      "Step: forward, backward, exchange and optimizer, timed to the end of the step's "
      "kernels (torch.cuda.synchronize), median over the run. Max loss diff: the largest "
      "difference of rank 0's training loss from DDP's at the same step. MODEL+bf16: "
      "under bf16 autocast; MODEL+fp16: fp16 autocast with a GradScaler, without "
      "ServerOptimizer (it refuses a scaler). Peak device memory is rank 0's "
      "torch.cuda.max_memory_allocated, the staging arena its staging_bytes (pinned "
      "host memory on a GPU), the peak RSS its resident set.",
      "",
      "| " + " | ".join(head) + " |",
      "|" + "---|" * len(head),
      *[f"| {' | '.join(r)} |" for r in rows],
      "",
      "Targets:" if targets else "",
      "",
      *targets,
      "<!-- gpu:end -->"]
open(md_path, "w").write("\n".join(md) + "\n")
PY
((json)) && cat "$tmp/final.jsonl"
say "command: $invocation"
say "took ${elapsed} s"
if [[ -n $out ]]; then
  mkdir -p "$out"
  cp "$tmp/final.jsonl" "$out/results.jsonl"
  cp "$tmp/section.md" "$out/section.md"
  { for f in "$tmp"/*.err "$tmp"/node-*.log; do echo "== ${f##*/}"; tail -n 200 "$f"; done; } \
    >"$out/run.log" 2>/dev/null || true
fi
if ((failures)); then note "$failures model(s) failed"; exit 1; fi
update_results gpu "$tmp/section.md"
((smoke)) || say "written: bench/RESULTS.md"
