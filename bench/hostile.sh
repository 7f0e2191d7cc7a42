#!/usr/bin/env bash
# A node under hostile clients stays small and alive (issue 34): a rack-agg with
# --metrics on 127.0.0.1 serves one verified job (warm), then for SECONDS gets
# STRANGERS connections to its --listen that never authenticate (a locate, then a hello
# header announcing 1 MiB and 10 bytes of it; each one cut is opened again) and POSTS
# POST requests of POST_MIB MiB each to its metrics port, while /healthz is asked every
# 20 ms (bench/hostile_load.cpp, rw-hostile-load). Targets, in every run: the node's
# peak RSS <= 1.2x its idle RSS, and every /healthz answered 200 within 100 ms. RUNS
# runs, each on a fresh node; prints each run and the spread, and writes bench/RESULTS.md
# (the section between the hostile markers).
#
#   bash bench/hostile.sh [--runs 3] [--strangers 200] [--posts 300] [--post-mib 10]
#                         [--seconds 15] [--smoke] [--build-dir DIR]
#
# --smoke (see lib/common.sh): one run, 50 strangers, 20 POSTs of 2 MiB, 4 s; /healthz
# within 500 ms there (the suite runs it beside other tests on a 2-core machine).
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/.."
all_args=("$@")
common_options "$@"
set -- ${rest[@]+"${rest[@]}"}

runs=3 strangers=200 posts=300 post_mib=10 seconds=15 healthz_ms=100
if ((smoke)); then runs=1 strangers=50 posts=20 post_mib=2 seconds=4 healthz_ms=500; fi
while (($#)); do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --strangers) strangers=$2; shift 2 ;;
    --posts) posts=$2; shift 2 ;;
    --post-mib) post_mib=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    -h|--help) sed -n 2,16p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown option $1" ;;
  esac
done
for v in runs strangers posts post_mib seconds; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || usage_error "--${v//_/-} must be a positive integer, not '${!v}'"
done

build_tree
[[ -x $build/bench/rw-hostile-load ]] || { note "no $build/bench/rw-hostile-load: build the tree"; exit 1; }
tmp=$(mktemp -d)
node_pid=
cleanup() { release ${node_pid:+"$node_pid"}; }
set_exit_traps cleanup

# one_run N: a fresh node, warmed by one job, then the load; its JSON in $tmp/run-N.json.
one_run() {
  local n=$1 metrics
  rm -f "$tmp/port"
  "$build/apps/rw-node" --listen 127.0.0.1:0 --port-file "$tmp/port" --log-level info \
    --metrics 127.0.0.1:0 --stats-interval-s 0 2>"$tmp/node-$n.log" &
  node_pid=$!
  wait_for_port "$tmp/port" "$node_pid" || { note "node did not start"; cat "$tmp/node-$n.log" >&2; exit 1; }
  local address
  address=$(<"$tmp/port")
  metrics=$(sed -n '/metrics on http:/{s|.*metrics on http://\([0-9.]*:[0-9]*\)/metrics.*|\1|p;q}' "$tmp/node-$n.log")
  [[ -n $metrics ]] || { note "the node did not say where its metrics are"; cat "$tmp/node-$n.log" >&2; exit 1; }
  timeout -k 5 120 "$build/apps/rw-bench" comm --connect "$address" --workers 2 --bytes 4MiB \
    --iters 3 --warmup 0 --transport tcp --verify --json >"$tmp/warm-$n.json" \
    || { note "run $n: the warm-up job failed"; tail -5 "$tmp/node-$n.log" >&2; exit 1; }
  grep -q '"verified":true' "$tmp/warm-$n.json" || { note "run $n: warm-up not verified"; exit 1; }
  sleep 3 # the finished job's buffers: the pollers give idle ones back every second
  timeout -k 5 $((seconds + 120)) "$build/bench/rw-hostile-load" --node "$address" \
    --metrics "$metrics" --pid "$node_pid" --strangers "$strangers" --posts "$posts" \
    --post-mib "$post_mib" --seconds "$seconds" >"$tmp/run-$n.json" \
    || { note "run $n: the load failed"; exit 1; }
  kill -0 "$node_pid" 2>/dev/null || { note "run $n: the node died under the load"; tail -20 "$tmp/node-$n.log" >&2; exit 1; }
  stop_pids "$node_pid"
  node_pid=
}

field() { sed -n "s/.*\"$2\":\\([-0-9.e]*\\).*/\\1/p" "$1"; }

open_report 0
say "node under hostile clients: $strangers strangers (1 MiB hello announced, 10 B sent), $posts POSTs of $post_mib MiB to /metrics, /healthz every 20 ms, ${seconds} s a run"
verdict=ok
rows=()
for ((n = 1; n <= runs; n++)); do
  one_run "$n"
  f=$tmp/run-$n.json
  idle=$(field "$f" idle_rss_mib) peak=$(field "$f" peak_rss_mib) ratio=$(field "$f" peak_ratio)
  asked=$(field "$f" healthz) failed=$(field "$f" healthz_failed)
  p99=$(field "$f" healthz_p99_ms) max=$(field "$f" healthz_max_ms)
  opened=$(field "$f" strangers) posted=$(field "$f" posts)
  check_numbers "run $n" "$idle" "$peak" "$ratio" "$asked" "$failed" "$p99" "$max" "$opened" "$posted"
  ok=$(awk -v r="$ratio" -v f="$failed" -v m="$max" -v a="$asked" -v t="$healthz_ms" \
    'BEGIN {print (r <= 1.2 && f == 0 && m < t && a > 0) ? "ok" : "FAIL"}')
  [[ $ok == ok ]] || verdict=FAIL
  say "  run $n: RSS idle $idle MiB, peak $peak MiB (${ratio}x); /healthz $asked asked, $failed failed, p99 $p99 ms, max $max ms; $opened strangers, $posted POSTs: $ok"
  rows+=("| $n | $idle | $peak | $ratio | $asked | $failed | $p99 | $max | $opened | $posted | $ok |")
done
spread() { # FIELD: "min-max" over the runs
  local vals=() n
  for ((n = 1; n <= runs; n++)); do vals+=("$(field "$tmp/run-$n.json" "$1")"); done
  printf '%s\n' "${vals[@]}" | sort -g | sed -n '1p;$p' | paste -sd- -
}
say "  spread over $runs run(s): peak/idle RSS $(spread peak_ratio)x, /healthz max $(spread healthz_max_ms) ms: $verdict"

section=$tmp/section.md
{
  echo "<!-- hostile:begin -->"
  echo "## A node under hostile clients (bench/hostile.sh)"
  echo
  echo "\`$(invocation_of ${all_args[@]+"${all_args[@]}"})\` on $(machine_facts)."
  echo "Each run: a fresh rack-agg with \`--metrics 127.0.0.1:0\`, warmed by one verified job"
  echo "(2 workers x 4 MiB), idle RSS read, then for $seconds s: $strangers connections to its"
  echo "--listen that never authenticate (a locate, then a hello header announcing 1 MiB and"
  echo "10 bytes of it; one the node cuts is opened again), $posts POSTs of $post_mib MiB to"
  echo "/metrics from 4 threads, and GET /healthz every 20 ms (connect to whole answer)."
  echo "Targets: peak RSS <= 1.2x idle, every /healthz a 200 within $healthz_ms ms."
  echo
  echo "| run | idle RSS (MiB) | peak RSS (MiB) | peak / idle | /healthz asked | failed | p99 (ms) | max (ms) | strangers | POSTs | verdict |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "Spread over $runs runs: peak/idle $(spread peak_ratio)x, /healthz max $(spread healthz_max_ms) ms: $verdict."
  echo "<!-- hostile:end -->"
} >"$section"
update_results hostile "$section"
[[ $verdict == ok ]]
