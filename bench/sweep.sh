#!/usr/bin/env bash
# Two sweeps of RackWeave's step time through one rw-node --role rack-agg on 127.0.0.1
# (rw-bench comm, loopback TCP, optimizer sum):
#   chunk size    one node with its default shards (one per core); rw-bench comm
#                 --chunk-bytes C for every C (default 4KiB 16KiB 32KiB 64KiB 256KiB
#                 1MiB 4MiB), W workers x S bytes (default 4 x 16MiB)
#   core scaling  a node with --shards N for every N (default 1 2), 32KiB chunks, every
#                 W (default 2 4) and S (default 16MiB 64MiB)
# Prints the tables, plots them (bench/plot_sweep.py: bench/sweep-chunk.png,
# bench/sweep-cores.png) and writes bench/RESULTS.md (the section between the sweep
# markers).
#
#   bash bench/sweep.sh [--workers "W ..."] [--bytes "S ..."] [--iters N] [--warmup K]
#                       [--chunks "C ..."] [--shards "N ..."] [--timeout S] [--json]
#                       [--smoke] [--build-dir DIR]
#
# --workers and --bytes, when given, replace the defaults of both sweeps (the chunk
# sweep then runs every chunk size for every W and S). Each run is bounded by --timeout
# seconds (default 300); a failed run is reported on stderr and marked in its row.
# With --json stdout carries only one JSON object per run. --smoke (see lib/common.sh):
# W = 2 x 1MiB, chunks 32KiB and 256KiB, shards 1 and 2, 2 iterations after 1 warm-up,
# plotted into a scratch directory (not plotted, and said so, without matplotlib).
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/.."

invocation=$(invocation_of "$@")
common_options "$@"
set -- ${rest[@]+"${rest[@]}"}

chunk_workers=4 chunk_sizes=16MiB
scale_workers="2 4" scale_sizes="16MiB 64MiB"
chunks="4KiB 16KiB 32KiB 64KiB 256KiB 1MiB 4MiB"
shard_counts="1 2"
scale_chunk=32KiB
iters=10
warmup=2
run_timeout=300
json=0
if ((smoke)); then
  chunk_workers=2 chunk_sizes=1MiB scale_workers=2 scale_sizes=1MiB chunks="32KiB 256KiB"
  iters=2 warmup=1 run_timeout=60
fi
while (($#)); do
  case $1 in
    --workers) chunk_workers=$2 scale_workers=$2; shift 2 ;;
    --bytes) chunk_sizes=$2 scale_sizes=$2; shift 2 ;;
    --chunks) chunks=$2; shift 2 ;;
    --shards) shard_counts=$2; shift 2 ;;
    *) run_option 2,22 "$@"; shift "$shifted" ;; # --iters --warmup --timeout --json -h
  esac
done

# shellcheck disable=SC2086 # word lists
check_sizes $chunk_sizes $scale_sizes $chunks $scale_chunk
for n in $chunk_workers $scale_workers $shard_counts; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || usage_error "bad count $n"
done
check_run_counts "$iters" "$warmup" "$run_timeout"
# Plots need Debian's matplotlib; the python3 first in PATH may not have it. Checked
# now rather than after minutes of measuring.
plot_python=/usr/bin/python3
plot=1
if ! "$plot_python" -c 'import matplotlib' 2>/dev/null; then
  ((smoke)) || usage_error "$plot_python has no matplotlib (apt-get install python3-matplotlib)"
  note "smoke: partly skipped: the plots: $plot_python has no matplotlib (apt-get install python3-matplotlib)"
  plot=0
fi

# Everything but the --json lines goes to stdout only without --json.
open_report "$json"

started=$(date +%s)
load_start=$(load_avg)
tmp=$(mktemp -d)
node_pid= # rw-node, stopped on exit
run_pid=  # the rw-bench run under way, stopped on exit

cleanup() {
  local rc=$?
  release ${run_pid:+"$run_pid"} ${node_pid:+"$node_pid"}
  exit "$rc"
}
set_exit_traps cleanup

snapshot_rackweave "$tmp/bin" comm

# start_node RUNS [rw-node options]: a node on a free loopback port, bounded in time
# by RUNS runs' timeouts; sets address.
start_node() {
  local bound=$(($1 * run_timeout + 60)); shift
  rm -f "$tmp/port"
  timeout -k 5 "$bound" "$tmp/bin/rw-node" --role rack-agg --open-jobs \
    --listen 127.0.0.1:0 --port-file "$tmp/port" --log-level warn "$@" \
    >"$tmp/node.log" 2>&1 </dev/null &
  node_pid=$!
  wait_for_port "$tmp/port" "$node_pid" ||
    { note "rw-node $* did not start:"; cat "$tmp/node.log" >&2; exit 1; }
  address=$(<"$tmp/port")
}
stop_node() {
  stop_pids "$node_pid"
  node_pid=
}

# measure SWEEP SHARDS W S C: one rw-bench comm run against the running node; appends
# its record (or its failure) to results.jsonl.
measure() {
  local sweep=$1 shards=$2 w=$3 s=$4 c=$5 st=0 line rec
  timeout -k 5 "$run_timeout" "$tmp/bin/rw-bench" comm --connect "$address" --workers "$w" \
    --bytes "$s" --iters "$iters" --warmup "$warmup" --chunk-bytes "$c" --json \
    --timeout-s $((run_timeout > 20 ? run_timeout - 10 : run_timeout)) \
    >"$tmp/run.out" 2>"$tmp/run.err" </dev/null &
  run_pid=$!
  wait "$run_pid" || st=$?
  run_pid=
  line=$(grep -m1 '^{' "$tmp/run.out" || true)
  # The run's record; a run that failed, or whose figures are missing or not positive
  # numbers, is recorded with null figures and an error.
  rec=$(python3 - "$sweep" "$shards" "$w" "$(to_bytes "$s")" "$s" "$(to_bytes "$c")" "$c" \
    "$st" "$line" <<'PY'
import json, math, sys
sweep, shards, w, b, size, cb, chunk, st, line = sys.argv[1:]
rec = {"sweep": sweep, "shards": shards, "workers": int(w), "bytes": int(b), "size": size,
       "chunk_bytes": int(cb), "chunk": chunk}
try:
    d = json.loads(line) if st == "0" and line else {}
except ValueError:
    d = {}
keys = ("median_ms", "p90_ms", "goodput_gbps")
good = all(isinstance(d.get(k), (int, float)) and math.isfinite(d[k]) and d[k] > 0 for k in keys)
for k in keys:
    rec[k] = d[k] if good else None
if not good:
    rec["error"] = f"exit {st}" if st != "0" else "no figures"
print(json.dumps(rec))
PY
  )
  echo "$rec" >>"$tmp/results.jsonl"
  ((json)) && echo "$rec"
  if [[ $rec == *'"error"'* ]]; then
    if ((st == 124 || st == 137)); then note "timed out after ${run_timeout}s"; fi
    note "$sweep: shards $shards, W=$w S=$s C=$c failed (exit $st):"
    if ((st)); then tail -n 5 "$tmp/run.err" | sed 's/^/    /' >&2
    else note "    no usable figures in: ${line:-(no JSON line)}"; fi
    failures=$((failures + 1))
  else
    note "$sweep: shards $shards, W=$w S=$s C=$c: $line"
  fi
}

failures=0
: >"$tmp/results.jsonl"
say "chunk sweep: chunks $chunks; workers $chunk_workers; bytes $chunk_sizes; default shards ($(nproc) cores)"
words() { wc -w <<<"$1"; }
start_node $(($(words "$chunk_workers") * $(words "$chunk_sizes") * $(words "$chunks")))
for w in $chunk_workers; do
  for s in $chunk_sizes; do
    for c in $chunks; do measure chunk default "$w" "$s" "$c"; done
  done
done
stop_node
say "core scaling: shards $shard_counts; workers $scale_workers; bytes $scale_sizes; chunks $scale_chunk"
for n in $shard_counts; do
  start_node $(($(words "$scale_workers") * $(words "$scale_sizes"))) --shards "$n"
  for w in $scale_workers; do
    for s in $scale_sizes; do measure cores "$n" "$w" "$s" "$scale_chunk"; done
  done
  stop_node
done
elapsed=$(($(date +%s) - started))

plots=bench
((smoke)) && plots=$tmp # plotted all the same, but not over the recorded figures
if ((plot)); then
  "$plot_python" bench/plot_sweep.py "$tmp/results.jsonl" "$plots/sweep-chunk.png" \
    "$plots/sweep-cores.png" \
    --note "$(date -u +%Y-%m-%d), $(nproc) cores, loopback; $iters iterations after $warmup warm-up"
  for f in "$plots/sweep-chunk.png" "$plots/sweep-cores.png"; do
    [[ $(head -c 8 "$f" 2>/dev/null | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
      { note "plot_sweep.py wrote no PNG to $f"; exit 1; }
  done
fi

machine="$(machine_facts); load average $load_start at the start, $(load_avg) at the end"
python3 - "$tmp/results.jsonl" "$tmp/tables.txt" "$tmp/section.md" "$invocation" "$machine" \
  "$iters" "$warmup" "$elapsed" "$(nproc)" <<'PY'
import datetime, json, sys
res_path, txt_path, md_path, invocation, machine, iters, warmup, elapsed, cores = sys.argv[1:]
recs = [json.loads(l) for l in open(res_path)]
fmt = lambda v, f="{:.3f}": "FAIL" if v is None else f.format(v)

chunk_head = ["workers", "bytes", "chunk", "median ms", "p90 ms", "goodput Gbit/s"]
chunk_rows = [[str(r["workers"]), r["size"], r["chunk"], fmt(r["median_ms"]), fmt(r["p90_ms"]),
               fmt(r["goodput_gbps"])] for r in recs if r["sweep"] == "chunk"]

cores_recs = [r for r in recs if r["sweep"] == "cores"]
shards = list(dict.fromkeys(r["shards"] for r in cores_recs))
cases = list(dict.fromkeys((r["workers"], r["size"]) for r in cores_recs))
by = {(r["shards"], r["workers"], r["size"]): r for r in cores_recs}
cores_head = ["workers", "bytes"] + [f"{n} shard{'s' if n != '1' else ''} {k}"
                                     for n in shards for k in ("median ms", "p90 ms")]
if len(shards) > 1:
    cores_head.append(f"speedup {shards[0]} -> {shards[-1]}")
cores_rows = []
for w, size in cases:
    row = [str(w), size]
    for n in shards:
        r = by.get((n, w, size), {})
        row += [fmt(r.get("median_ms")), fmt(r.get("p90_ms"))]
    if len(shards) > 1:
        a = by.get((shards[0], w, size), {}).get("median_ms")
        b = by.get((shards[-1], w, size), {}).get("median_ms")
        row.append(f"{a / b:.2f}x" if a and b else "-")
    cores_rows.append(row)

# The chunk-cost target (data-path issue): 32 KiB chunks within 1.15x the step time
# of 1 MiB chunks, for every W and S the chunk sweep ran both at.
chunk_cost = []
by_chunk = {(r["workers"], r["size"], r["chunk_bytes"]): r for r in recs if r["sweep"] == "chunk"}
for (w, size, cb), r in by_chunk.items():
    big = by_chunk.get((w, size, 1 << 20), {})
    if cb == 32 << 10 and r["median_ms"] and big.get("median_ms"):
        ratio = r["median_ms"] / big["median_ms"]
        chunk_cost.append(f"W = {w}, {size}: 32 KiB chunks {r['median_ms']:.1f} ms against "
                          f"{big['median_ms']:.1f} ms with 1 MiB chunks, {ratio:.2f}x "
                          f"(target 1.15x: {'met' if ratio <= 1.15 else 'not met'})")

def text_table(head, rows):
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    return "".join("  ".join(c.rjust(widths[i]) for i, c in enumerate(r)) + "\n"
                   for r in [head] + rows)
def md_table(head, rows):
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + \
        ["| " + " | ".join(r) + " |" for r in rows]

with open(txt_path, "w") as f:
    f.write(f"chunk size (one node, default shards = {cores}):\n")
    f.write(text_table(chunk_head, chunk_rows))
    for line in chunk_cost:
        f.write(f"chunk cost: {line}\n")
    f.write("\ncore scaling (32KiB chunks; speedup = median with the first shard count / "
            "median with the last):\n")
    f.write(text_table(cores_head, cores_rows))
md = ["<!-- sweep:begin -->",
      "## Chunk size and core scaling (bench/sweep.sh)",
      "",
      f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {machine}; node and workers on "
      "this one machine, loopback TCP.",
      "",
      f"Command: `{invocation}` ({iters} timed iterations after {warmup} warm-up per run; "
      f"the whole run took {elapsed} s). Each run is `rw-bench comm --connect ADDR --workers W "
      "--bytes S --iters N --warmup K --chunk-bytes C --json` (optimizer `sum`, not "
      "verified: `bench/comm.sh` verifies the same path) through `rw-node --role rack-agg "
      "--listen 127.0.0.1:0`, with its default shards (one per core) for the chunk sweep "
      "and `--shards N` for the core scaling. A step lasts until the slowest worker has its "
      "result; median and p90 over the iterations. Goodput counts 2 x W x S per step.",
      "",
      f"Chunk size, one node with the default {cores} shards "
      "([sweep-chunk.png](sweep-chunk.png)):",
      "",
      *md_table(chunk_head, chunk_rows),
      "",
      *[f"Chunk cost: {line}. Each poller hands each shard a round's pushes in one "
        "message, and a shard serving many chunks in one message sends each worker's "
        "answers in one gather write." for line in chunk_cost],
      *([""] if chunk_cost else []),
      "Core scaling, 32KiB chunks, one node per shard count "
      "([sweep-cores.png](sweep-cores.png)); speedup is the median with the first shard "
      "count over the median with the last:",
      "",
      *md_table(cores_head, cores_rows),
      "",
      "![step time against chunk size](sweep-chunk.png)",
      "![step time against shards](sweep-cores.png)",
      "<!-- sweep:end -->"]
open(md_path, "w").write("\n".join(md) + "\n")
PY

cat "$tmp/tables.txt" >&3
say ""
say "command: $invocation"
((plot && !smoke)) && say "plots: bench/sweep-chunk.png bench/sweep-cores.png"
say "took ${elapsed} s"
update_results sweep "$tmp/section.md"
((smoke)) || say "written: bench/RESULTS.md"
if ((failures)); then note "$failures run(s) failed"; exit 1; fi
