#!/usr/bin/env bash
# Memory that comes back: a rack-agg (embedded coordinator) runs JOBS jobs one after
# another, each W workers x BYTES over TCP through rw-bench; the node's resident size
# (VmRSS) is read when it is idle and after each job ended (no job live, the finished
# job's chunks released: the node runs with --keep-finished-ms KEEP, default 60 s, here
# 2000, and RSS is read after that, when the pollers have given their receive buffers
# back too). Target: RSS back within 1.2x of the idle node's.
# Prints a table and writes bench/RESULTS.md (the section between the memory markers).
#
#   bash bench/memory.sh [--jobs 4] [--workers 4] [--bytes 128MiB] [--iters 3]
#                        [--keep-ms 2000] [--smoke] [--build-dir DIR]
#
# --smoke (see lib/common.sh): 2 jobs of 2 workers x 8 MiB, 1 iteration.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/.."
all_args=("$@")
common_options "$@"
set -- ${rest[@]+"${rest[@]}"}

jobs=4 workers=4 bytes=128MiB iters=3 keep_ms=2000
if ((smoke)); then jobs=2 workers=2 bytes=8MiB iters=1; fi
while (($#)); do
  case $1 in
    --jobs) jobs=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --bytes) bytes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --keep-ms) keep_ms=$2; shift 2 ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) usage_error "unknown option $1" ;;
  esac
done
[[ $keep_ms =~ ^[0-9]+$ ]] || usage_error "--keep-ms takes a whole number of ms, not '$keep_ms'"
for v in jobs workers iters; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || usage_error "--$v must be a positive integer, not '${!v}'"
done
to_bytes "$bytes" >/dev/null || usage_error "--bytes takes a size such as 128MiB, not '$bytes'"

build_tree
tmp=$(mktemp -d)
node_pid=
cleanup() { release ${node_pid:+"$node_pid"}; }
set_exit_traps cleanup

"$build/apps/rw-node" --listen 127.0.0.1:0 --port-file "$tmp/port" --log-level info \
  --keep-finished-ms "$keep_ms" \
  2>"$tmp/node.log" &
node_pid=$!
wait_for_port "$tmp/port" "$node_pid" || { note "node did not start"; cat "$tmp/node.log" >&2; exit 1; }
address=$(<"$tmp/port")

rss_mib() { awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$node_pid/status"; }
# live_jobs: jobs the node serves now (0 once every job has ended on it).
live_jobs() {
  timeout -k 5 30 "$build/apps/rw-shell" --connect "$address" \
    -c "local n = 0 for _, j in ipairs(rw.jobs()) do if j.state == 'running' or j.state == 'created' then n = n + 1 end end print(n)"
}
# settle: waits (up to 20 s) until no job is live, then for the finished job's release
# (--keep-ms, and the shards' 250 ms scan) and the pollers' idle check (1 s).
settle() {
  for _ in {1..100}; do [[ $(live_jobs) == 0 ]] && break; sleep 0.2; done
  [[ $(live_jobs) == 0 ]] || { note "a job is still live on the node"; exit 1; }
  sleep "$(awk -v k="$keep_ms" 'BEGIN {print k / 1000 + 2}')"
}

sleep 1
idle=$(rss_mib)
after=()
for ((j = 1; j <= jobs; j++)); do
  timeout -k 5 600 "$build/apps/rw-bench" comm --connect "$address" --workers "$workers" \
    --bytes "$bytes" --iters "$iters" --warmup 0 --transport tcp --verify --json \
    >"$tmp/bench-$j.json" || { note "job $j failed"; tail -5 "$tmp/node.log" >&2; exit 1; }
  grep -q '"verified":true' "$tmp/bench-$j.json" || { note "job $j: results not verified"; exit 1; }
  settle
  after+=("$(rss_mib)")
done
check_numbers "node RSS" "$idle" "${after[@]}"
last=${after[-1]}
ratio=$(awk -v a="$last" -v b="$idle" 'BEGIN {printf "%.2f", a / b}')
verdict=$(awk -v r="$ratio" 'BEGIN {print (r <= 1.2) ? "ok" : "FAIL"}')

open_report 0
say "node RSS (MiB), $jobs jobs of $workers workers x $bytes over TCP, one after another:"
say "  idle: $idle"
for ((j = 1; j <= jobs; j++)); do say "  after job $j ended: ${after[j - 1]}"; done
say "  after the last job / idle: ${ratio}x (target <= 1.2): $verdict"

section=$tmp/section.md
{
  echo "<!-- memory:begin -->"
  echo "## Memory that comes back (bench/memory.sh)"
  echo
  echo "\`$(invocation_of ${all_args[@]+"${all_args[@]}"})\` on $(machine_facts)."
  echo "One rack-agg node (embedded coordinator); each job created through the coordinator"
  echo "by rw-bench comm --verify, $workers workers x $bytes over TCP, $iters iterations;"
  echo "RSS read from /proc once the job had ended, its chunks had been released"
  echo "(\`--keep-finished-ms $keep_ms\`; the default keeps them 60 s for a checkpoint of the"
  echo "finished job) and 2 s more had passed (pollers return idle receive buffers)."
  echo
  echo "| node state | RSS (MiB) |"
  echo "|---|---|"
  echo "| idle, before any job | $idle |"
  for ((j = 1; j <= jobs; j++)); do echo "| after job $j ended | ${after[j - 1]} |"; done
  echo
  echo "After the last job: **${ratio}x** the idle node's RSS (target <= 1.2x): $verdict."
  echo "<!-- memory:end -->"
} >"$section"
update_results memory "$section"
[[ $verdict == ok ]]
