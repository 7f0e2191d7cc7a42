#!/usr/bin/env bash
# What the staging path costs (issue 63, items 7 and 8): the host memory a rank's
# staging arena holds against its parameters' bytes (ResNet-18, 11.2 M parameters in 62
# tensors, and a 250 M-parameter model of four 7906 x 7906 tensors), and what the
# exchange through the staging path adds to a step of a 200-tensor model (54 KiB: the
# per-tensor work), against the same model with torch's SGD and no exchange, one rank
# against a fresh `rw-node` on 127.0.0.1
# over shared memory (bench/staging_cost.py). The CPU staging path (staging=True, host
# memory, plain copies) is the one measured: the same Python, threads and arena as
# CUDA's, without a GPU. Targets: arena <= 1.1 x the parameters' bytes; with
# --baseline DIR (an older rackweave package, e.g. main before issue 63's items 7 and 8,
# run in the same session, alternating), what the exchange adds per step <= 0.2 x the
# baseline's. Writes the staging section of bench/RESULTS.md.
#
#   bash bench/staging.sh [--reps 5] [--steps 150] [--baseline DIR] [--smoke]
#                         [--build-dir DIR]
#
# --smoke (lib/common.sh): ResNet-18 and a 25 M-parameter model, 1 pair of 30 steps.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/.."

invocation=$(invocation_of "$@")
common_options "$@"
set -- ${rest[@]+"${rest[@]}"}
reps=5 steps=150 baseline='' models="resnet18 big250m"
while (($#)); do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) usage_error "unknown option $1" ;;
  esac
done
[[ $reps =~ ^[1-9][0-9]?$ ]] || usage_error "--reps must be 1..99"
[[ $steps =~ ^[1-9][0-9]*$ ]] && ((steps >= 10)) || usage_error "--steps must be 10 or more"
if [[ -n $baseline ]]; then
  [[ -f $baseline/rackweave/staging.py ]] || usage_error "--baseline $baseline has no rackweave/staging.py"
  baseline=$(cd "$baseline" && pwd)
fi
if ((smoke)); then reps=1 steps=30 models="resnet18 big25m"; fi
py=/usr/bin/python3
$py -c 'import torch' 2>/dev/null ||
  skip_smoke "Debian's python3-torch is needed (apps/scripts/setup.sh installs it)"
build_tree

tmp=$(mktemp -d)
node_pid=
cleanup() { release ${node_pid:+"$node_pid"}; rm -rf "$tmp"; }
set_exit_traps cleanup
"$build/apps/rw-node" --open-jobs --listen 127.0.0.1:0 --port-file "$tmp/port" --log-level warn \
  2>"$tmp/node.log" &
node_pid=$!
wait_for_port "$tmp/port" "$node_pid" || { cat "$tmp/node.log" >&2; exit 1; }
node=$(<"$tmp/port")
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=1

cost() { # cost ARGS...: staging_cost.py's JSON lines appended to $tmp/results.jsonl
  timeout -k 5 1200 $py bench/staging_cost.py --node "$node" "$@" >>"$tmp/results.jsonl" \
    2>"$tmp/cost.err" || { note "staging_cost.py $* failed:"; sed 's/^/  /' "$tmp/cost.err" "$tmp/node.log" >&2; exit 1; }
}
cost --part memory --models "$models"
for ((i = 0; i < reps; i++)); do
  cost --part overhead --reps 1 --steps "$steps" --label current
  if [[ -n $baseline ]]; then
    # The baseline's package, with this build's native module (its Python calls the same).
    mkdir -p "$tmp/base/rackweave"
    cp "$baseline"/rackweave/*.py "$tmp/base/rackweave/"
    ln -sf "$build"/python/rackweave/_rackweave*.so "$tmp/base/rackweave/"
    cost --part overhead --reps 1 --steps "$steps" --label baseline --package "$tmp/base"
  fi
done

python3 - "$tmp/results.jsonl" "$invocation" "$(machine_facts)" "$reps" "$steps" \
  "$smoke" "${baseline:+$baseline}" >"$tmp/section.md" 2>"$tmp/report.err" <<'PY' || { cat "$tmp/report.err" >&2; exit 1; }
import json, statistics, sys
path, invocation, facts, reps, steps, smoke, baseline = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
mem = [r for r in rows if r["part"] == "memory"]
cur = [r for r in rows if r["part"] == "overhead" and r["label"] == "current"]
base = [r for r in rows if r["part"] == "overhead" and r["label"] == "baseline"]
if not mem or not cur or (baseline and len(base) != len(cur)):
    sys.exit("staging_cost.py printed too few results")
for r in mem + cur + base:
    for k, v in r.items():
        if isinstance(v, float) and v != v:
            sys.exit(f"not a number: {r}")
mem_ok = all(r["ratio"] <= 1.1 for r in mem)
say = print
say("<!-- staging:begin -->")
say("## What the staging path holds and costs (bench/staging.sh)")
say("")
say(f"{__import__('datetime').date.today()}, {facts}. One rank against a fresh `rw-node "
    "--open-jobs` on 127.0.0.1 (shared memory), through the CPU staging path "
    "(`staging=True`: the arena, threads and copies CUDA tensors take, in host memory).")
say("")
say(f"Command: `{invocation}`")
say("")
say("| model | tensors | parameter bytes | arena bytes | arena / parameters | before: host buffers | before: pinned on a GPU |")
say("|---|---|---|---|---|---|---|")
for r in mem:
    say(f"| {r['model']} | {r['tensors']} | {r['param_bytes']} | {r['staging_bytes']} | "
        f"{r['ratio']:.4f} | {r['before_host_bytes']} | {r['before_pinned_bytes']} |")
say("")
say(f"Target: the arena <= 1.1 x the parameters' bytes: **{'met' if mem_ok else 'NOT met'}**. "
    "The before columns are computed from the same tensor sizes (an out and an in buffer "
    "per tensor; on a GPU each rounded up to a power of two by torch's pinned allocator), "
    "not measured.")
say("")
say(f"Per-step cost of the exchange through the staging path, a model of 100 Linear(16, "
    f"16) layers (200 tensors, 54 KiB), {steps} steps per run, the median step and the "
    "process's CPU time per step after the first fifth; local (torch's SGD, no "
    "exchange) and staged (ServerOptimizer, `staging=True`, a fresh job) runs "
    "alternate:")
say("")
say("| package | local step (ms) | staged step (ms) | added (ms) | local CPU (ms) | staged CPU (ms) | added CPU (ms) |")
say("|---|---|---|---|---|---|---|")
for r in cur + base:
    say(f"| {r['label']} | {r['local_ms']} | {r['staged_ms']} | {r['added_ms']} | "
        f"{r['local_cpu_ms']} | {r['staged_cpu_ms']} | {r['added_cpu_ms']} |")
added = [r["added_ms"] for r in cur]
say("")
line = (f"The exchange adds a median {statistics.median(added):.2f} ms per step "
        f"(from {min(added):.2f} to {max(added):.2f} over {len(added)} pairs)")
ok = True
if base:
    b = [r["added_ms"] for r in base]
    ratio = statistics.median(added) / statistics.median(b)
    ok = ratio <= 0.2
    verdict = ("not judged in a smoke run (one short pair)" if smoke == "1"
               else f"**{'met' if ok else 'NOT met'}**")
    line += (f"; the baseline ({baseline}) {statistics.median(b):.2f} ms (from {min(b):.2f} "
             f"to {max(b):.2f}): {ratio:.2f} x. Target <= 0.2 x: {verdict}.")
else:
    line += "; no baseline given (--baseline DIR), so the <= 0.2 x target is not judged here."
say(line)
say("<!-- staging:end -->")
print("arena / parameters: " + ", ".join(f"{r['model']} {r['ratio']}" for r in mem),
      file=sys.stderr)
PY
cat "$tmp/report.err" >&2
sed -n '/^| /p' "$tmp/section.md"
echo "command: $invocation"
grep -q "NOT met" "$tmp/section.md" && { update_results staging "$tmp/section.md" || true; note "a target was not met"; exit 1; }
update_results staging "$tmp/section.md"
