#!/usr/bin/env bash
# Gradient compression (rw.job_create{compression = ...}): what each mode costs and
# saves, in one run.
#   1. loopback: rw-bench comm through one node on this machine, every mode in turn,
#      --rounds times (median of the rounds' medians), each result verified bitwise
#      against the mode's single-process reference in a short run of its own;
#   2. an emulated rack on shaped links (bench/netns.sh --compression, Gloo's ring in the
#      same run as the uncompressed peer): step time against each mode's link bound;
#   3. the digits CNN (apps/examples/torch, ServerOptimizer, W ranks): test accuracy after
#      the same steps in each of --accuracy-modes (top-k with and without its warm-up
#      over the first 4 of the 10 epochs, 44 steps), once per --seeds (the model's
#      initial weights; one run's accuracy moves by points from seed to seed, so modes
#      are compared on the mean).
# Prints the tables and writes bench/RESULTS.md (the section between the compression
# markers). A failed or unverified run fails the script and leaves bench/RESULTS.md alone.
#
#   bash bench/compression.sh [--workers 4] [--bytes 64MiB] [--iters 10] [--rounds 3]
#        [--modes "none bf16 fp16 topk:0.01"] [--netns-modes "none bf16 topk:0.01"]
#        [--accuracy-modes "none bf16 fp16 topk:0.01 topk:0.01,warmup=44"]
#        [--seeds "0 1 2"] [--rate 1gbit] [--netns-iters 5] [--no-netns] [--no-accuracy] [--smoke]
#        [--build-dir DIR]
#
# bf16 and fp16 compress the answers too (rw-bench's default for them). The netns part
# needs root and network namespaces (else it is skipped, saying why); the accuracy part
# needs torch (python3-torch) and scikit-learn (the digits). --smoke (see lib/common.sh):
# W = 2 at 1 MiB, 2 iterations, one round; netns.sh --smoke with bf16; 4 training steps.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/.."
invocation=$(invocation_of "$@")
common_options "$@"
set -- ${rest[@]+"${rest[@]}"}

workers=4
size=64MiB
iters=10
rounds=3
modes="none bf16 fp16 topk:0.01"
netns_modes="none bf16 topk:0.01"
accuracy_modes="none bf16 fp16 topk:0.01 topk:0.01,warmup=44"
seeds="0 1 2"
rate=1gbit
netns_iters=5
do_netns=1
do_accuracy=1
run_timeout=600
if ((smoke)); then
  workers=2 size=1MiB iters=2 rounds=1 modes="none bf16 topk:0.1" netns_modes=bf16
  accuracy_modes="none topk:0.1,warmup=2" seeds="0 1"
  run_timeout=120
fi
while (($#)); do
  case $1 in
    --workers) workers=$2; shift 2 ;;
    --bytes) size=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --netns-modes) netns_modes=$2; shift 2 ;;
    --accuracy-modes) accuracy_modes=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --netns-iters) netns_iters=$2; shift 2 ;;
    --no-netns) do_netns=0; shift ;;
    --no-accuracy) do_accuracy=0; shift ;;
    -h|--help) sed -n 2,26p "$0" | sed "s/^# \{0,1\}//"; exit 0 ;;
    *) usage_error "unknown option $1" ;;
  esac
done
check_sizes "$size"
[[ $workers =~ ^[1-9][0-9]*$ ]] || usage_error "bad --workers $workers"
[[ $rounds =~ ^[1-9][0-9]*$ ]] || usage_error "bad --rounds $rounds"
check_run_counts "$iters" 0 "$run_timeout"
check_run_counts "$netns_iters" 0 "$run_timeout"
for m in $modes $netns_modes $accuracy_modes; do
  [[ $m =~ ^(none|bf16|fp16|topk:(0?\.[0-9]+|1(\.0*)?)(,warmup=[0-9]+)?)$ ]] ||
    usage_error "bad mode $m (none, bf16, fp16, topk:RATIO or topk:RATIO,warmup=STEPS)"
done
[[ " $modes " == *" none "* ]] || usage_error "--modes needs none: the others are compared with it"
for s in $seeds; do [[ $s =~ ^[0-9]{1,9}$ ]] || usage_error "bad seed $s (0, 1, ...)"; done
[[ -n ${seeds// /} ]] || usage_error "--seeds needs at least one seed"
[[ " $accuracy_modes " == *" none "* ]] ||
  usage_error "--accuracy-modes needs none: the others are compared with it"
open_report 0

build_tree
tmp=$(mktemp -d)
node_pid=
cleanup() { release ${node_pid:+"$node_pid"}; }
set_exit_traps cleanup
started=$(date +%s)

# --- 1. loopback ----------------------------------------------------------------------
"$build/apps/rw-node" --open-jobs --listen 127.0.0.1:0 --port-file "$tmp/port" \
  --log-level warn 2>"$tmp/node.log" &
node_pid=$!
wait_for_port "$tmp/port" "$node_pid" || { note "node did not start"; cat "$tmp/node.log" >&2; exit 1; }
address=$(<"$tmp/port")
# bench ARGS...: one rw-bench comm run; its JSON line on stdout, or the script fails.
bench() {
  local st=0
  timeout -k 5 "$run_timeout" "$build/apps/rw-bench" comm --connect "$address" --open-job \
    --workers "$workers" --bytes "$size" --json --timeout-s $((run_timeout - 10)) "$@" \
    >"$tmp/run.out" 2>"$tmp/run.err" </dev/null || st=$?
  local line
  line=$(grep -m1 '^{' "$tmp/run.out" || true)
  if ((st)) || [[ -z $line ]]; then
    note "rw-bench comm $* failed (exit $st):"
    tail -n 5 "$tmp/run.err" "$tmp/node.log" >&2
    exit 1
  fi
  echo "$line"
}
: >"$tmp/loopback.jsonl"
say "loopback: $workers workers x $size, modes [$modes], $rounds round(s) of $iters iterations"
for m in $modes; do # the check, apart from the timed runs (verifying takes the cores)
  line=$(bench --compression "$m" --iters 2 --verify)
  [[ $line == *'"verified":true'* ]] || { note "$m: not verified: $line"; exit 1; }
  echo "{\"verify\": true, \"mode\": \"$m\", \"run\": $line}" >>"$tmp/loopback.jsonl"
done
for ((r = 1; r <= rounds; r++)); do
  for m in $modes; do
    line=$(bench --compression "$m" --iters "$iters")
    echo "{\"round\": $r, \"mode\": \"$m\", \"run\": $line}" >>"$tmp/loopback.jsonl"
  done
done
stop_pids "$node_pid"
node_pid=

# --- 2. emulated rack -------------------------------------------------------------------
: >"$tmp/netns.jsonl"
netns_note=""
if ((do_netns)); then
  for m in $netns_modes; do
    args=(--compression "$m" --json --no-results --build-dir "$build")
    if ((smoke)); then args+=(--smoke); else
      args+=(--workers "$workers" --bytes "$size" --rate "$rate" --iters "$netns_iters"
        --congestion cubic); fi # one congestion control (netns.sh runs three unless told)
    st=0
    bash bench/netns.sh "${args[@]}" >"$tmp/netns.out" 2>"$tmp/netns.err" </dev/null || st=$?
    if grep -q "smoke: skipped:" "$tmp/netns.out" "$tmp/netns.err"; then
      netns_note=$(grep -h -m1 "smoke: skipped:" "$tmp/netns.out" "$tmp/netns.err")
      say "netns: $netns_note"
      break
    fi
    if ((st)); then
      note "bench/netns.sh --compression $m failed (exit $st):"; tail -n 25 "$tmp/netns.err" >&2
      exit 1
    fi
    grep '^{' "$tmp/netns.out" | sed "s/^/{\"mode\": \"$m\", \"run\": /; s/\$/}/" >>"$tmp/netns.jsonl"
  done
else
  netns_note="left out (--no-netns)"
fi

# --- 3. accuracy -------------------------------------------------------------------------
: >"$tmp/accuracy.jsonl"
accuracy_note=""
train=(--epochs 10 --batch 32 --lr 0.05 --progress-every 0)
((smoke)) && train=(--max-steps 4 --batch 4 --progress-every 0 --test-examples 128)
if ((do_accuracy)); then
  if ! PYTHONPATH=$build/python /usr/bin/python3 -c 'import torch, sklearn' 2>/dev/null; then
    accuracy_note="left out: python3-torch or python3-sklearn is missing"
    say "accuracy: $accuracy_note"
  else
    "$build/apps/rw-node" --role rack-agg --listen 127.0.0.1:0 --port-file "$tmp/cport" \
      --log-level warn 2>"$tmp/cnode.log" &
    node_pid=$!
    wait_for_port "$tmp/cport" "$node_pid" ||
      { note "node did not start"; cat "$tmp/cnode.log" >&2; exit 1; }
    for seed in $seeds; do
      for m in $accuracy_modes; do
        extra=(--compression "$m" --seed "$seed")
        [[ $m == bf16 || $m == fp16 ]] && extra+=(--compress-updates)
        st=0
        OMP_NUM_THREADS=1 PYTHONPATH=$build/python timeout -k 5 "$run_timeout" /usr/bin/python3 \
          apps/examples/torch/compare.py --connect "$(<"$tmp/cport")" --model digits \
          --systems server --workers "$workers" --json -- "${train[@]}" "${extra[@]}" \
          >"$tmp/acc.out" 2>"$tmp/acc.err" </dev/null || st=$?
        line=$(grep -m1 '^{' "$tmp/acc.out" || true)
        if ((st)) || [[ -z $line ]]; then
          note "digits with $m, seed $seed failed (exit $st):"; tail -n 8 "$tmp/acc.err" >&2
          exit 1
        fi
        say "accuracy: $m, seed $seed: $(grep -o '"accuracy": *[0-9.]*' <<<"$line" | sed -n 1p)"
        echo "{\"mode\": \"$m\", \"seed\": $seed, \"run\": $line}" >>"$tmp/accuracy.jsonl"
      done
    done
    stop_pids "$node_pid"
    node_pid=
  fi
else
  accuracy_note="left out (--no-accuracy)"
fi
elapsed=$(($(date +%s) - started))

# --- report ------------------------------------------------------------------------------
machine="$(machine_facts), load average $(load_avg) at the end"
python3 - "$tmp" "$invocation" "$machine" "$elapsed" "$workers" "$size" "$iters" "$rounds" \
  "$rate" "$netns_note" "$accuracy_note" "${train[*]}" >&3 <<'PY'
import datetime, json, statistics, sys
(tmp, invocation, machine, elapsed, w, size, iters, rounds, rate, netns_note, accuracy_note,
 train) = sys.argv[1:]
load = lambda name: [json.loads(l) for l in open(f"{tmp}/{name}.jsonl") if l.strip()]
loop, netns, acc = load("loopback"), load("netns"), load("accuracy")
out = []
p = lambda s="": (print(s), out.append(s))

modes = list(dict.fromkeys(r["mode"] for r in loop))
verified = {r["mode"]: r["run"]["verified"] is True for r in loop if r.get("verify")}
timed = {m: [r["run"] for r in loop if r["mode"] == m and "round" in r] for m in modes}
for m, runs in timed.items():
    for r in runs:
        if not all(n >= int(iters) for n in r["iterations"]):
            sys.exit(f"compression.sh: {m}: a worker ran fewer than {iters} iterations")
med = {m: statistics.median(r["median_ms"] for r in runs) for m, runs in timed.items()}
wire = {m: statistics.median(r["wire_bytes"] for r in runs) for m, runs in timed.items()}
p(f"| mode | verified | median step ms | vs none | wire bytes per step | vs none |")
p("|---|---|---|---|---|---|")
for m in modes:
    p(f"| {m} | {'yes' if verified.get(m) else 'NO'} | {med[m]:.1f} | "
      f"{med[m] / med['none']:.2f} | {wire[m] / 1e6:.1f} MB | {wire[m] / wire['none']:.3f} |")
if not all(verified.get(m) for m in modes):
    sys.exit("compression.sh: a mode's results were not verified")
loop_table = out[:]
out.clear()

if netns:
    base = next((r["run"] for r in netns if r["mode"] == "none" and r["run"]["system"] == "rackweave"), None)
    p("| system | mode | median step ms | link bound ms | measured/bound | vs uncompressed | wire bytes per step |")
    p("|---|---|---|---|---|---|---|")
    seen_gloo = False
    for r in netns:
        d = r["run"]
        if d["median_ms"] is None:
            sys.exit(f"compression.sh: netns {r['mode']}: {d['system']} failed")
        if d["system"] == "gloo-ring":  # the uncompressed peer: once
            if not seen_gloo:
                p(f"| gloo-ring | none | {d['median_ms']:.1f} | {d['bound_ms']:.1f} | "
                  f"{d['ratio']:.2f} | - | - |")
            seen_gloo = True
            continue
        rel = f"{d['median_ms'] / base['median_ms']:.2f}" if base else "-"
        p(f"| rackweave | {r['mode']} | {d['median_ms']:.1f} | {d['bound_ms']:.1f} | "
          f"{d['ratio']:.2f} | {rel} | {d.get('wire_bytes', 0) / 1e6:.1f} MB |")
netns_table = out[:]
out.clear()

if acc:
    seeds = list(dict.fromkeys(r["seed"] for r in acc))
    by_mode = {}
    for r in acc:
        by_mode.setdefault(r["mode"], {})[r["seed"]] = r["run"]
    mean = {m: statistics.mean(d["accuracy"] for d in runs.values()) for m, runs in by_mode.items()}
    base = mean.get("none")
    p("| mode | " + " | ".join(f"seed {s}" for s in seeds)
      + " | mean | vs none (mean, points) | median step ms | steps |")
    p("|---|" + "---|" * len(seeds) + "---|---|---|---|")
    for m, runs in by_mode.items():
        cells = " | ".join(f"{100 * runs[s]['accuracy']:.2f}%" if s in runs else "-" for s in seeds)
        delta = f"{100 * (mean[m] - base):+.2f}" if base is not None else "-"
        step_ms = statistics.median(d["median_step_ms"] for d in runs.values())
        steps = sorted({d["steps"] for d in runs.values()})
        p(f"| {m} | {cells} | {100 * mean[m]:.2f}% | {delta} | {step_ms:.2f} | "
          f"{', '.join(map(str, steps))} |")
acc_table = out[:]

md = ["<!-- compression:begin -->", "## Gradient compression (bench/compression.sh)", "",
      f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {machine}. Command: `{invocation}` "
      f"(took {elapsed} s). bf16 and fp16 compress the answers too; topk sends each "
      "chunk's largest entries of gradient + residual as sparse pairs (a chunk under 1024 "
      "elements whole) and gets the "
      "answers dense.", "",
      f"**Loopback** (one node, {w} workers x {size}, `rw-bench comm --open-job "
      f"--compression MODE --iters {iters}`, median of {rounds} round(s) in turn; every "
      "mode verified bitwise against its single-process reference in a run of its own, "
      "`--verify --iters 2`). Wire bytes: every worker's data frames, both ways, headers "
      "included.", "", *loop_table, "",
      f"**Emulated rack** (`bench/netns.sh --compression MODE --workers {w} --bytes {size} "
      f"--rate {rate}`: {w} worker hosts and a rack-agg with 2 links, every link {rate}, "
      "tc tbf; Gloo's ring uncompressed in the same run). A compressed job's bound takes "
      "the bytes its workers measured on the wire.", "",
      *(netns_table or [f"Not measured: {netns_note}."]), "",
      f"**Accuracy** (the digits CNN, `apps/examples/torch/compare.py --systems server "
      f"--workers {w} -- {train} --compression MODE --seed S`, ServerOptimizer: momentum "
      "SGD on the node; test set 360 images, so one image is 0.28 points).", "", *(acc_table or [f"Not measured: {accuracy_note}."]),
      "<!-- compression:end -->"]
open(f"{tmp}/section.md", "w").write("\n".join(md) + "\n")
PY
update_results compression "$tmp/section.md"
((smoke)) || say "written: bench/RESULTS.md"
