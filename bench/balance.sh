#!/usr/bin/env bash
# In-node balancing on a skewed job: rw-bench comm --layers L cuts each worker's
# gradient into L layers, a weight and a 256-element bias each, with chunks the size of
# a weight, so round-robin puts every weight on shard 0 and every bias on shard 1 of a
# node of two shards. Three runs per repeat, in turn, each through a fresh
# `rw-node --shards 2` on 127.0.0.1, every result verified bitwise (--verify):
#   skewed        the skewed job, --no-balance (chunks stay where routes put them)
#   balanced      the skewed job, --balance-ms B (chunks move to the idle shard)
#   even          the same layers in chunks of half a weight, --no-balance: each weight
#                 two chunks, so round-robin spreads the weights evenly (the floor)
# Prints each run's median step time and what the balanced node logged (its moves, and
# its shards' busy time after them), and writes bench/RESULTS.md (the balance section).
#
#   bash bench/balance.sh [--workers W] [--bytes S] [--layers L] [--chunk C]
#                         [--repeat N] [--balance-ms B] [--iters N] [--warmup K]
#                         [--timeout S] [--json] [--smoke] [--build-dir DIR]
#
# Defaults: W = 4, S = 16MiB, L = 16, C = S / L, 3 repeats, B = 200, 100 iterations after
# 2 warm-up, 300 s per run at most. The figure is each kind's median over the repeats.
# --smoke (lib/common.sh): W = 2, S = 2MiB, L = 8, 1 repeat, 10 iterations.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/.."

invocation=$(invocation_of "$@")
common_options "$@"
set -- ${rest[@]+"${rest[@]}"}

workers=4 bytes=16MiB layers=16 chunk= repeat=3 balance_ms=200
iters=100 warmup=2 run_timeout=300 json=0
if ((smoke)); then
  workers=2 bytes=2MiB layers=8 repeat=1 iters=10 warmup=1 run_timeout=60 balance_ms=100
fi
while (($#)); do
  case $1 in
    --workers) workers=$2; shift 2 ;;
    --bytes) bytes=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --chunk) chunk=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --balance-ms) balance_ms=$2; shift 2 ;;
    *) run_option 2,20 "$@"; shift "$shifted" ;; # --iters --warmup --timeout --json -h
  esac
done
for n in "$workers" "$layers" "$repeat" "$balance_ms"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || usage_error "bad count $n"
done
check_sizes "$bytes"
check_run_counts "$iters" "$warmup" "$run_timeout"
total=$(to_bytes "$bytes")
[[ -n $chunk ]] || chunk=$(((total / layers + 3) / 4 * 4))
check_sizes "$chunk"
half=$(($(to_bytes "$chunk") / 8 * 4))

open_report "$json"
started=$(date +%s)
load_start=$(load_avg)
tmp=$(mktemp -d)
node_pid= run_pid=
cleanup() {
  local rc=$?
  release ${run_pid:+"$run_pid"} ${node_pid:+"$node_pid"}
  rm -rf "$tmp"
  exit "$rc"
}
set_exit_traps cleanup
snapshot_rackweave "$tmp/bin" comm

# run KIND CHUNK [rw-node options]: a node of two shards, one rw-bench run, the node
# stopped; appends the run's record to results.jsonl.
run() {
  local kind=$1 c=$2 st=0 line rec; shift 2
  rm -f "$tmp/port"
  timeout -k 5 $((run_timeout + 30)) "$tmp/bin/rw-node" --role rack-agg --open-jobs \
    --listen 127.0.0.1:0 --port-file "$tmp/port" --shards 2 "$@" \
    >"$tmp/node.log" 2>&1 </dev/null &
  node_pid=$!
  wait_for_port "$tmp/port" "$node_pid" ||
    { note "rw-node $* did not start:"; cat "$tmp/node.log" >&2; exit 1; }
  timeout -k 5 "$run_timeout" "$tmp/bin/rw-bench" comm --connect "$(<"$tmp/port")" \
    --open-job --workers "$workers" --bytes "$bytes" --layers "$layers" --chunk-bytes "$c" \
    --iters "$iters" --warmup "$warmup" --verify --json \
    >"$tmp/run.out" 2>"$tmp/run.err" </dev/null &
  run_pid=$!
  wait "$run_pid" || st=$?
  run_pid=
  stop_pids "$node_pid"
  node_pid=
  line=$(grep -m1 '^{' "$tmp/run.out" || true)
  rec=$(python3 - "$kind" "$st" "$line" "$tmp/node.log" <<'PY'
import json, math, re, sys
kind, st, line, log = sys.argv[1:]
try:
    d = json.loads(line) if st == "0" and line else {}
except ValueError:
    d = {}
text = open(log, errors="replace").read()
moves = re.findall(r"balance: job .*? (\d+) chunk\(s\), ([0-9.]+) MiB, moved from shard (\d+) "
                   r"\(busy (\d+)%\) to shard (\d+) \(busy (\d+)%\) in (\d+) us", text)
after = re.findall(r"balance: shards busy \[([^\]]*)\] since the last move", text)
m = d.get("median_ms")
rec = {"kind": kind, "median_ms": m if isinstance(m, (int, float)) and math.isfinite(m) and m > 0 else None,
       "verified": d.get("verified") is True, "moves": len(moves),
       "chunks_moved": sum(int(x[0]) for x in moves),
       "busy_before": [f"{moves[0][3]}%", f"{moves[0][5]}%"] if moves else None,
       "busy_after": after[-1] if after else None,
       "move_us": [int(x[6]) for x in moves]}
if rec["median_ms"] is None or not rec["verified"]:
    rec["error"] = f"exit {st}" if st != "0" else "not verified, or no figures"
print(json.dumps(rec))
PY
  )
  echo "$rec" >>"$tmp/results.jsonl"
  ((json)) && echo "$rec"
  if [[ $rec == *'"error"'* ]]; then
    note "$kind failed (exit $st):"; tail -n 5 "$tmp/run.err" | sed 's/^/    /' >&2
    failures=$((failures + 1))
  else
    note "$kind: $rec"
  fi
}

failures=0
: >"$tmp/results.jsonl"
say "balance: W=$workers x $bytes, $layers layers, chunks of $chunk, 2 shards, $repeat repeat(s)"
for ((i = 0; i < repeat; i++)); do
  run skewed "$chunk" --no-balance
  run balanced "$chunk" --balance-ms "$balance_ms"
  run even "$half" --no-balance
done
elapsed=$(($(date +%s) - started))

machine="$(machine_facts); load average $load_start at the start, $(load_avg) at the end"
python3 - "$tmp/results.jsonl" "$tmp/section.md" "$invocation" "$machine" "$iters" \
  "$warmup" "$elapsed" "$workers" "$bytes" "$layers" "$chunk" "$balance_ms" >&3 <<'PY'
import datetime, json, statistics, sys
(res, md_path, invocation, machine, iters, warmup, elapsed, w, size, layers, chunk,
 bms) = sys.argv[1:]
recs = [json.loads(l) for l in open(res)]
def med(kind):
    v = [r["median_ms"] for r in recs if r["kind"] == kind and r["median_ms"]]
    return statistics.median(v) if v else None
fmt = lambda v: "FAIL" if v is None else f"{v:.1f}"
sk, ba, ev = med("skewed"), med("balanced"), med("even")
bal = [r for r in recs if r["kind"] == "balanced"]
moves = [r["moves"] for r in bal]
rows = [["skewed, --no-balance", fmt(sk), "-", "-"],
        ["skewed, --balance", fmt(ba), ", ".join(str(m) for m in moves),
         "; ".join(f"[{', '.join(r['busy_before'])}] -> [{r['busy_after']}]" for r in bal if r["moves"]) or "-"],
        ["even (chunks of half a weight), --no-balance", fmt(ev), "-", "-"]]
ratio = f"{ba / sk:.2f}x" if ba and sk else "-"
versus_even = f"{ba / ev:.2f}x" if ba and ev else "-"
lines = [f"skewed job: {w} workers x {size}, {layers} layers (weight + 256-element bias), "
         f"chunks of {chunk}, 2 shards",
         *(f"  {r[0]:45s} median {r[1]:>7s} ms  moves {r[2]:>5s}  shard busy {r[3]}" for r in rows),
         f"  balanced / skewed {ratio}; balanced / even {versus_even}; all verified bitwise: "
         f"{'yes' if all(r['verified'] for r in recs) else 'NO'}"]
print("\n".join(lines))
md = ["<!-- balance:begin -->",
      "## In-node balancing on a skewed job (bench/balance.sh)",
      "",
      f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {machine}; node and workers on this "
      "one machine, loopback TCP.",
      "",
      f"Command: `{invocation}` (the whole run took {elapsed} s). Each run: a fresh "
      f"`rw-node --shards 2` and `rw-bench comm --workers {w} --bytes {size} --layers "
      f"{layers} --chunk-bytes {chunk} --iters {iters} --warmup {warmup} --verify`: every "
      "weight one chunk, round-robin putting every weight on shard 0 and every bias on "
      f"shard 1. `--balance-ms {bms}`: the node compares its shards' CPU time every "
      f"{bms} ms and moves chunks after three samples in a row with one shard more than "
      "1.25x busier (and 5 points) than the other. Median step time over the run's "
      "iterations, then over the repeats; the balanced run's median includes its first "
      "iterations, before the move. Even: the same job in chunks of half a weight, so "
      "round-robin spreads the weights over both shards. Shard busy: the busy and idle shard's share of a core "
      "when the move started -> both shards' share in the next sample after it.",
      "",
      "| run | median ms | moves | shard busy |",
      "|---|---|---|---|",
      *[f"| {' | '.join(r)} |" for r in rows],
      "",
      f"Balanced against skewed: {ratio}; against the evenly spread job: {versus_even}. "
      f"Every result bitwise the rank-order sum: "
      f"{'yes' if all(r['verified'] for r in recs) else 'NO'}. What bounds the gain: "
      "the busy shard's share of a core before the move (above) is all that evening the "
      "shards can win back; the rest of a step is the workers and the pollers, on the "
      "same cores, which balancing leaves alone, and the evenly spread job is the floor.",
      "<!-- balance:end -->"]
open(md_path, "w").write("\n".join(md) + "\n")
PY

say "command: $invocation"
say "took ${elapsed} s"
update_results balance "$tmp/section.md"
((smoke)) || say "written: bench/RESULTS.md"
if ((failures)); then note "$failures run(s) failed"; exit 1; fi
