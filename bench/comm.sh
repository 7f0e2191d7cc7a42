#!/usr/bin/env bash
# Gradient-exchange step time through one rack-agg on this machine: rw-bench comm for
# each worker count (default 2 and 4) at each size (default 64 MiB), verified bitwise.
# Prints a table and writes bench/RESULTS.md (the section between the comm markers).
#
#   bash bench/comm.sh [--workers "2 4"] [--bytes "64MiB"] [--iters 10]
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/.."

take_smoke "$@"
set -- ${smoke_args[@]+"${smoke_args[@]}"}
workers="2 4"
sizes="64MiB"
iters=10
while (($#)); do
  case $1 in
    --workers) workers=$2; shift 2 ;;
    --bytes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    -h|--help) sed -n 2,7p "$0"; exit 0 ;;
    *) echo "comm.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if ((smoke)); then workers=2 sizes=1MiB iters=2; fi

build_tree
tmp=$(mktemp -d)
node_pid=
cleanup() { release ${node_pid:+"$node_pid"}; }
set_exit_traps cleanup

build/apps/rw-node --open-jobs --listen 127.0.0.1:0 --port-file "$tmp/port" --log-level warn 2>"$tmp/node.log" &
node_pid=$!
wait_for_port "$tmp/port" "$node_pid" || { note "node did not start"; cat "$tmp/node.log" >&2; exit 1; }
address=$(<"$tmp/port")

rows=()
printf '%-8s %-8s %10s %10s %14s %9s\n' workers bytes median_ms p90_ms goodput_gbps verified
for w in $workers; do
  for s in $sizes; do
    cmd="build/apps/rw-bench comm --connect $address --workers $w --bytes $s --iters $iters --verify --json"
    line=$($cmd)
    echo "$line" >>"$tmp/results.jsonl"
    read -r med p90 gbps ver < <(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["median_ms"], d["p90_ms"], d["goodput_gbps"], str(d["verified"]).lower())' "$line")
    printf '%-8s %-8s %10s %10s %14s %9s\n' "$w" "$s" "$med" "$p90" "$gbps" "$ver"
    [[ $ver == true ]] || { note "rw-bench did not verify its result: $line"; exit 1; }
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

results=bench/RESULTS.md
update_results comm "$tmp/section.md"
echo "written: $results"
