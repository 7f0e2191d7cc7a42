#!/usr/bin/env bash
# Gradient-exchange step time through one rack-agg on this machine: rw-bench comm for
# each worker count (default 2 and 4) at each size (default 64 MiB), verified bitwise.
# Prints a table and writes bench/RESULTS.md (the section between the comm markers).
# Each run is bounded by 300 s; a failed or unverified run fails the script, and then
# bench/RESULTS.md is left alone.
#
#   bash bench/comm.sh [--workers "2 4"] [--bytes "64MiB"] [--iters 10] [--smoke]
#                      [--build-dir DIR]
#
# --smoke (see lib/common.sh): W = 2 at 1MiB, 2 iterations.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/.."
common_options "$@"
set -- ${rest[@]+"${rest[@]}"}

workers="2 4"
sizes="64MiB"
iters=10
run_timeout=300
if ((smoke)); then workers=2 sizes=1MiB iters=2 run_timeout=60; fi
while (($#)); do
  case $1 in
    --workers) workers=$2; shift 2 ;;
    --bytes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
    *) usage_error "unknown option $1" ;;
  esac
done
# shellcheck disable=SC2086 # word lists
check_sizes $sizes
for w in $workers; do [[ $w =~ ^[1-9][0-9]*$ ]] || usage_error "bad worker count $w"; done
check_run_counts "$iters" 0 "$run_timeout"

build_tree
tmp=$(mktemp -d)
node_pid=
cleanup() { release ${node_pid:+"$node_pid"}; }
set_exit_traps cleanup

"$build/apps/rw-node" --open-jobs --listen 127.0.0.1:0 --port-file "$tmp/port" --log-level warn 2>"$tmp/node.log" &
node_pid=$!
wait_for_port "$tmp/port" "$node_pid" || { note "node did not start"; cat "$tmp/node.log" >&2; exit 1; }
address=$(<"$tmp/port")

rows=()
printf '%-8s %-8s %10s %10s %14s %9s\n' workers bytes median_ms p90_ms goodput_gbps verified
for w in $workers; do
  for s in $sizes; do
    cmd=("$build/apps/rw-bench" comm --connect "$address" --workers "$w" --bytes "$s"
         --iters "$iters" --verify --json --timeout-s $((run_timeout - 10)))
    st=0
    timeout -k 5 "$run_timeout" "${cmd[@]}" >"$tmp/run.out" 2>"$tmp/run.err" </dev/null || st=$?
    line=$(grep -m1 '^{' "$tmp/run.out" || true)
    # The figures, and whether every worker ran every iteration and verified every result.
    if ((st)) || ! fields=$(python3 - "$line" "$w" "$iters" 2>>"$tmp/run.err" <<'PY'
import json, sys
d, w, n = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
if d["workers"] != w or d["iters"] != n or len(d["iterations"]) != w:
    sys.exit(f"ran {d['workers']} workers x {d['iters']} iterations, not {w} x {n}")
if min(d["iterations"]) < n:
    sys.exit(f"a worker ran fewer than {n} iterations: {d['iterations']}")
if d["verified"] is not True:
    sys.exit("the results were not verified bitwise")
print(d["median_ms"], d["p90_ms"], d["goodput_gbps"], str(d["verified"]).lower())
PY
    ) || ! read -r med p90 gbps ver <<<"$fields" || ! check_numbers "rw-bench comm W=$w S=$s" "$med" "$p90" "$gbps"
    then
      ((st == 124 || st == 137)) && note "timed out after ${run_timeout}s"
      note "W=$w S=$s failed (exit $st): ${cmd[*]}"
      tail -n 5 "$tmp/run.err" "$tmp/run.out" "$tmp/node.log" >&2
      exit 1
    fi
    echo "$line" >>"$tmp/results.jsonl"
    printf '%-8s %-8s %10s %10s %14s %9s\n' "$w" "$s" "$med" "$p90" "$gbps" "$ver"
    rows+=("| $w | $s | $med | $p90 | $gbps | $ver |")
  done
done

cpu=$(cpu_model)
mem=$(mem_gib_floor)
{
  echo "<!-- comm:begin -->"
  echo "## Step time through one rack-agg (rw-bench comm)"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores ($cpu), $mem, loopback TCP, node and all"
  echo "workers on this one machine. Optimizer \`sum\` (the exact all-reduce), every result"
  echo "verified bitwise. A step lasts until its slowest worker has its result; goodput"
  echo "counts 2 x workers x bytes per step (every worker pushes and receives the tensor)."
  echo
  echo "Command: \`bash bench/comm.sh --workers \"$workers\" --bytes \"$sizes\" --iters $iters\`,"
  echo "which runs \`rw-bench comm --connect ADDR --workers W --bytes S --iters $iters --verify --json\`."
  echo
  echo "| workers | bytes | median ms | p90 ms | goodput Gbit/s | verified |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo "<!-- comm:end -->"
} >"$tmp/section.md"

update_results comm "$tmp/section.md"
((smoke)) || echo "written: bench/RESULTS.md"
