#!/usr/bin/env bash
# The control plane through one rack-agg that embeds the cluster coordinator, on this
# machine: how long an rw-shell request takes (create, status, delete: shell ->
# coordinator over the middleman, the create also -> the node's link and rack
# coordinator), and what the token's challenge-response adds to a worker's join
# compared with an open job's hello (the peer, same node, same run).
# Prints a table and writes bench/RESULTS.md (the section between the control markers).
#
#   bash bench/control.sh [--requests 300] [--joins 30] [--rounds 3]
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/.."

take_smoke "$@"
set -- ${smoke_args[@]+"${smoke_args[@]}"}
requests=300 # create + status + delete cycles per shell session
joins=30     # worker processes per kind of join per round
rounds=3
while (($#)); do
  case $1 in
    --requests) requests=$2; shift 2 ;;
    --joins) joins=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) usage_error "unknown option $1" ;;
  esac
done
if ((smoke)); then requests=5 joins=2 rounds=1; fi
for v in requests joins rounds; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || usage_error "--$v must be a positive integer, not '${!v}'"
done

build_tree
tmp=$(mktemp -d)
node_pid=
cleanup() { release ${node_pid:+"$node_pid"}; }
set_exit_traps cleanup

build/apps/rw-node --open-jobs --listen 127.0.0.1:0 --port-file "$tmp/port" --log-level warn \
  2>"$tmp/node.log" &
node_pid=$!
wait_for_port "$tmp/port" "$node_pid" || { note "node did not start"; cat "$tmp/node.log" >&2; exit 1; }
address=$(<"$tmp/port")
shell=(timeout -k 5 300 build/apps/rw-shell --connect "$address")
worker=(timeout -k 5 60 build/tests/rw-test-worker --connect "$address" --rank 0 --workers 1
        --steps 1 --transport tcp --out "$tmp/out.bin")
now_ns() { date +%s%N; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

request_us=() open_ms=() token_ms=()
for ((round = 1; round <= rounds; round++)); do
  # One session doing 3 x requests requests, less an empty session's cost.
  t0=$(now_ns)
  "${shell[@]}" -c "print(#rw.nodes())" >/dev/null
  t1=$(now_ns)
  "${shell[@]}" -c "for i = 1, $requests do local n = 'r$round-' .. i
    rw.job_create{name = n, workers = 2}; rw.job_status(n); rw.job_delete(n) end"
  t2=$(now_ns)
  request_us+=("$(( ((t2 - t1) - (t1 - t0)) / (3 * requests) / 1000 ))")

  # Joins: open jobs (hello, welcome) against created jobs (hello, challenge, proof,
  # welcome); each worker joins, runs one step and leaves.
  mapfile -t tokens < <("${shell[@]}" -c "for i = 1, $joins do
    print(rw.job_create{name = 'j$round-' .. i, workers = 1, optimizer = 'sum', lr = 0.05,
                        momentum = 0.9, chunk_bytes = 4096}.token) end")
  # Alternating, so neither kind runs on a node the other left busier.
  open_ns=0 token_ns=0
  for ((i = 1; i <= joins; i++)); do
    t0=$(now_ns)
    "${worker[@]}" --job "o$round-$i" >/dev/null
    t1=$(now_ns)
    "${worker[@]}" --job "j$round-$i" --token "${tokens[i - 1]}" >/dev/null
    t2=$(now_ns)
    open_ns=$((open_ns + t1 - t0))
    token_ns=$((token_ns + t2 - t1))
  done
  open_ms+=("$(awk -v d=$open_ns -v n="$joins" 'BEGIN {printf "%.2f", d / n / 1e6}')")
  token_ms+=("$(awk -v d=$token_ns -v n="$joins" 'BEGIN {printf "%.2f", d / n / 1e6}')")
done

req=$(median "${request_us[@]}")
open=$(median "${open_ms[@]}")
token=$(median "${token_ms[@]}")
ratio=$(awk -v a="$token" -v b="$open" 'BEGIN {printf "%.3f", a / b}')
printf '%-34s %s\n' "shell request (median of $rounds)" "$req us" \
  "open-job worker, join+step+leave" "$open ms" \
  "token worker, join+step+leave" "$token ms" \
  "token / open" "$ratio"

{
  echo "<!-- control:begin -->"
  echo "## Control plane: shell requests and authenticated joins"
  echo
  echo "$(date -u +%Y-%m-%d), $(machine_facts); one rw-node (rack-agg, embedded coordinator)"
  echo "on 127.0.0.1; every process on this one machine."
  echo
  echo "Command: \`bash bench/control.sh --requests $requests --joins $joins --rounds $rounds\`."
  echo "A shell request is \`rw.job_create\`, \`rw.job_status\` or \`rw.job_delete\` in one"
  echo "rw-shell session (CAF middleman to the coordinator; a create also grants the job"
  echo "to the node), an empty session's cost taken off. A join is a whole rw-test-worker"
  echo "process (connect, hello, one push_pull step of 9,333 floats, bye) for an open job,"
  echo "and for a created job, which adds the challenge and the HMAC proof."
  echo
  echo "| measure | median of $rounds rounds | rounds |"
  echo "|---|---|---|"
  echo "| shell request | $req us | ${request_us[*]} |"
  echo "| open-job worker process | $open ms | ${open_ms[*]} |"
  echo "| token worker process | $token ms | ${token_ms[*]} |"
  echo "| token / open | $ratio | |"
  echo "<!-- control:end -->"
} >"$tmp/section.md"
update_results control "$tmp/section.md"
((smoke)) || echo "written: bench/RESULTS.md"
