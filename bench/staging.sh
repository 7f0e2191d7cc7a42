#!/usr/bin/env bash
# What the staging path costs (issue 63, items 7 and 8): the host memory a rank's
# staging arena holds against its parameters' bytes (ResNet-18, 11.2 M parameters in 62
# tensors, and a 250 M-parameter model of four 7906 x 7906 tensors), and what the
# exchange adds to a step of a 200-tensor model (54 KiB: the per-tensor work) against
# the same model with torch's SGD and no exchange: through the staging path, and in
# place (the worker's push_pulls and the hooks alone), so that what the staging path
# itself adds is their difference. One rank against a fresh `rw-node` on 127.0.0.1 over
# shared memory (bench/staging_cost.py). The CPU staging path (staging=True, host
# memory, plain copies) is the one measured: the same Python, threads and arena as
# CUDA's, without a GPU. Targets: arena <= 1.1 x the parameters' bytes; with
# --baseline (an older rackweave package: a directory holding rackweave/, or a git
# revision of this repository, e.g. c4afbc1, main before issue 63's items 7 and 8; run
# in the same session, in turn), what the staging path adds per step <= 0.2 x the
# baseline's in every run. Writes the staging section of bench/RESULTS.md.
#
#   bash bench/staging.sh [--reps 5] [--steps 400] [--baseline DIR|REV] [--smoke]
#                         [--build-dir DIR]
#
# --smoke (lib/common.sh): ResNet-18 and a 25 M-parameter model, 1 round of 30 steps.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/.."

invocation=$(invocation_of "$@")
common_options "$@"
set -- ${rest[@]+"${rest[@]}"}
reps=5 steps=400 baseline='' models="resnet18 big250m"
while (($#)); do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) usage_error "unknown option $1" ;;
  esac
done
[[ $reps =~ ^[1-9][0-9]?$ ]] || usage_error "--reps must be 1..99"
[[ $steps =~ ^[1-9][0-9]*$ ]] && ((steps >= 10)) || usage_error "--steps must be 10 or more"
baseline_rev=''
if [[ -n $baseline && ! -d $baseline ]]; then
  git rev-parse -q --verify "$baseline^{commit}" >/dev/null ||
    usage_error "--baseline $baseline is neither a directory nor a revision of this repository"
  baseline_rev=$baseline
elif [[ -n $baseline ]]; then
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
if [[ -n $baseline_rev ]]; then # the revision's package, taken out of git
  mkdir -p "$tmp/rev"
  git archive "$baseline_rev" apps/python/rackweave | tar -x -C "$tmp/rev"
  [[ -f $tmp/rev/apps/python/rackweave/staging.py ]] ||
    usage_error "--baseline $baseline_rev has no apps/python/rackweave/staging.py"
  baseline=$tmp/rev/apps/python
fi
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
  cost --part overhead --reps 1 --first-rep "$i" --steps "$steps" --label current
  if [[ -n $baseline ]]; then
    # The baseline's package, with this build's native module (its Python calls the same).
    mkdir -p "$tmp/base/rackweave"
    cp "$baseline"/rackweave/*.py "$tmp/base/rackweave/"
    ln -sf "$build"/python/rackweave/_rackweave*.so "$tmp/base/rackweave/"
    cost --part overhead --reps 1 --first-rep "$i" --steps "$steps" --label baseline \
      --package "$tmp/base"
  fi
done

python3 - "$tmp/results.jsonl" "$invocation" "$(machine_facts)" "$reps" "$steps" \
  "$smoke" "${baseline_rev:-$baseline}" >"$tmp/section.md" 2>"$tmp/report.err" <<'PY' || { cat "$tmp/report.err" >&2; exit 1; }
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
say(f"Per-step cost of the exchange, a model of 100 Linear(16, 16) layers (200 tensors, "
    f"54 KiB), {steps} steps per run, the median step and the process's CPU time per "
    "step after the first fifth, the three made at once and stepped in turn (one step "
    "of each per round, the first of a round rotating), so that what else the machine "
    "does falls on all three alike: local (torch's "
    "SGD, no exchange), in place (ServerOptimizer reading and writing the parameters in "
    "place: the gradient hooks and the worker's 200 push_pulls, no staging) and staged "
    "(ServerOptimizer, `staging=True`: the path CUDA tensors take). *added* = staged - "
    "local, all the exchange adds; *staging* = staged - in place, what the staging path "
    "itself adds (arena, buckets, copies, the pusher and lander threads and their hops, "
    "the cost issue 63's item 8 is about):")
say("")
say("| package | local (ms) | in place (ms) | staged (ms) | added (ms) | staging (ms) | added CPU (ms) | staging CPU (ms) |")
say("|---|---|---|---|---|---|---|---|")
for r in cur + base:
    say(f"| {r['label']} | {r['local_ms']} | {r['inplace_ms']} | {r['staged_ms']} | "
        f"{r['added_ms']} | {r['staging_ms']} | {r['added_cpu_ms']} | "
        f"{r['staging_cpu_ms']} |")


def spread(rows, key):
    v = [r[key] for r in rows]
    return statistics.median(v), min(v), max(v)


say("")
a, lo, hi = spread(cur, "added_ms")
st, slo, shi = spread(cur, "staging_ms")
line = (f"The exchange adds a median {a:.2f} ms per step ({lo:.2f} to {hi:.2f} over "
        f"{len(cur)} runs), of which the staging path {st:.2f} ms ({slo:.2f} to "
        f"{shi:.2f})")
ok = True
if base:
    ba, blo, bhi = spread(base, "added_ms")
    bs, bslo, bshi = spread(base, "staging_ms")
    ratio = st / bs if bs > 0 else float("inf")
    # Judged run by run: each round's current against the baseline run right after it.
    per_run = [c["staging_ms"] / b["staging_ms"] if b["staging_ms"] > 0 else float("inf")
               for c, b in zip(cur, base)]
    ok = max(per_run) <= 0.2
    verdict = ("not judged in a smoke run (one short run)" if smoke == "1"
               else f"**{'met' if ok else 'NOT met'}**")
    line += (f"; the baseline ({baseline}) adds {ba:.2f} ms ({blo:.2f} to {bhi:.2f}), of "
             f"which its staging path {bs:.2f} ms ({bslo:.2f} to {bshi:.2f}). The staging "
             f"path's cost: {ratio:.2f} x the baseline's (medians), "
             f"{min(per_run):.2f} to {max(per_run):.2f} x run by run; target <= 0.2 x in "
             f"every run: {verdict}. "
             f"All the exchange adds: {a / ba:.2f} x (the in-place exchange, the worker's "
             "push_pulls and the hooks, is the same code in both and bounds it from "
             "below).")
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
