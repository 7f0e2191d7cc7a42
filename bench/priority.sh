#!/usr/bin/env bash
# Does priority servicing cut the laggard's wait? Runs rw-bench comm with a straggler
# under SSP against a node with --priority and one with --no-priority, alternating,
# several pairs, and compares the straggler's mean wait per iteration. Writes the
# priority section of bench/RESULTS.md.
#
#   bash bench/priority.sh [--pairs 5] [--workers 6] [--bytes 8MiB] [--iters 30]
#                          [--consistency async] [--straggler 1:30ms]
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/.."

# async by default: there the fast workers keep pushing, so pushes queue at the shards
# and their order matters; under SSP with a small bound they mostly wait for the laggard.
take_smoke "$@"
set -- ${smoke_args[@]+"${smoke_args[@]}"}
pairs=5 workers=6 bytes=8MiB iters=30 consistency=async straggler=1:30ms
invocation=$(invocation_of "$@")
while (($#)); do
  case $1 in
    --pairs) pairs=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --bytes) bytes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --consistency) consistency=$2; shift 2 ;;
    --straggler) straggler=$2; shift 2 ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) usage_error "unknown option $1" ;;
  esac
done
if ((smoke)); then pairs=1 workers=3 bytes=1MiB iters=4 straggler=1:5ms; fi
[[ $pairs =~ ^[1-9][0-9]?$ ]] || usage_error "--pairs must be 1..99"
laggard=${straggler%%:*}

build_tree
tmp=$(mktemp -d)
node_pid=
cleanup() { release ${node_pid:+"$node_pid"}; }
set_exit_traps cleanup

# measure MODE: one run against a fresh node started with --MODE; prints the laggard's mean wait.
measure() {
  build/apps/rw-node --open-jobs --listen 127.0.0.1:0 --port-file "$tmp/port" --log-level warn "--$1" \
    2>"$tmp/node.log" &
  node_pid=$!
  wait_for_port "$tmp/port" "$node_pid" || { cat "$tmp/node.log" >&2; exit 1; }
  local line
  line=$(timeout 300 build/apps/rw-bench comm --connect "$(<"$tmp/port")" --workers "$workers" \
    --bytes "$bytes" --iters "$iters" --consistency "$consistency" --straggler "$straggler" \
    --json 2>"$tmp/bench.err") || true
  stop_pids "$node_pid"
  node_pid=
  rm -f "$tmp/port"
  if [[ -z $line ]]; then
    note "rw-bench failed (--$1):"
    sed 's/^/  /' "$tmp/bench.err" "$tmp/node.log" >&2
    exit 1
  fi
  python3 -c 'import json,sys; print(json.loads(sys.argv[1])["mean_wait_ms"][int(sys.argv[2])])' \
    "$line" "$laggard"
}

on=() off=()
for ((i = 1; i <= pairs; i++)); do
  on+=("$(measure priority)")
  off+=("$(measure no-priority)")
  note "pair $i: laggard waits ${on[-1]} ms with priority, ${off[-1]} ms without"
done

summary=$(python3 - "${on[*]}" "${off[*]}" <<'PY'
import statistics, sys
on = [float(x) for x in sys.argv[1].split()]
off = [float(x) for x in sys.argv[2].split()]
m_on, m_off = statistics.median(on), statistics.median(off)
wins = sum(1 for a, b in zip(on, off) if a < b)
print(f"{m_on:.2f} {m_off:.2f} {m_on / m_off:.3f} {wins} {len(on)}")
PY
)
read -r med_on med_off ratio wins total <<<"$summary"
echo "laggard's mean wait per iteration (median of $total runs): $med_on ms with priority, $med_off ms without (ratio $ratio; priority lower in $wins of $total pairs)"
echo "command: $invocation"

{
  echo "<!-- priority:begin -->"
  echo "## Priority servicing and the laggard's wait (bench/priority.sh)"
  echo
  echo "$(date -u +%Y-%m-%d), $(machine_facts). A node started with \`--priority\` or"
  echo "\`--no-priority\`, alternately, $total times each; each run is \`rw-bench comm --workers $workers"
  echo "--bytes $bytes --iters $iters --consistency $consistency --straggler $straggler\` over TCP on 127.0.0.1."
  echo "The figure is the straggler's (rank $laggard) mean wait per push_pull."
  echo
  echo "Command: \`$invocation\`"
  echo
  echo "| run | with priority (ms) | without (ms) |"
  echo "|---|---|---|"
  for ((i = 0; i < total; i++)); do echo "| $((i + 1)) | ${on[i]} | ${off[i]} |"; done
  echo
  echo "Median: **$med_on ms with priority, $med_off ms without** (ratio $ratio); priority was lower"
  echo "in $wins of $total pairs."
  echo "<!-- priority:end -->"
} >"$tmp/section.md"
update_results priority "$tmp/section.md"
((smoke)) || echo "written: bench/RESULTS.md"
