#!/usr/bin/env bash
# The RackWeave demo: builds the tree, starts a rack-agg node (which embeds the cluster
# coordinator) on a free local port, and runs the example job script through rw-shell:
# it creates a job, starts DEMO_WORKERS (default 4) worker processes that train a small
# MLP for DEMO_STEPS (default 300) steps with the job's token, watches them and prints
# the job's summary. Every process it starts is stopped by PID however it exits.
set -euo pipefail
cd "$(dirname "$0")/../.."

workers=${DEMO_WORKERS:-4}
steps=${DEMO_STEPS:-300}
for v in workers steps; do
  if ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then
    echo "demo: DEMO_${v^^} must be a positive integer, not '${!v}'" >&2
    exit 2
  fi
done

bash apps/scripts/setup.sh

tmp=$(mktemp -d)
pids=() # started and not yet reaped

forget() {
  local keep=() p
  for p in "${pids[@]}"; do
    [[ $p == "$1" ]] || keep+=("$p")
  done
  pids=("${keep[@]}")
}

cleanup() {
  local p alive
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  # A short grace period so the node and workers can say bye; then no mercy.
  for _ in {1..30}; do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
# Background jobs of a script ignore Ctrl-C, so the EXIT trap has to stop them.
trap 'exit 130' INT
trap 'exit 143' TERM

echo "demo: starting rack-agg node on 127.0.0.1 (a free port)"
build/apps/rw-node --role rack-agg --listen 127.0.0.1:0 --port-file "$tmp/port" \
  >"$tmp/node.log" 2>&1 &
node_pid=$!
pids+=("$node_pid")
for _ in {1..100}; do
  [[ -s $tmp/port ]] && break
  if ! kill -0 "$node_pid" 2>/dev/null; then
    echo "demo: the node exited at start-up:" >&2
    cat "$tmp/node.log" >&2
    exit 1
  fi
  sleep 0.1
done
if ! [[ -s $tmp/port ]]; then
  echo "demo: the node did not report its port within 10 s" >&2
  exit 1
fi
address=$(<"$tmp/port")
echo "demo: node listening on $address (pid $node_pid)"

noun=workers
((workers > 1)) || noun=worker
echo "demo: creating a job through rw-shell (config/examples/train_job.lua): $workers $noun" \
  "train a 2-32-1 MLP on two spirals for $steps steps, proving the job's token"
failed=0
rc=0
build/apps/rw-shell --connect "$address" -f config/examples/train_job.lua -- \
  build/apps/examples/rw-train-demo "$workers" "$steps" </dev/null &
shell_pid=$!
pids+=("$shell_pid")
wait "$shell_pid" || rc=$?
forget "$shell_pid"
if ((rc != 0)); then
  failed=1
  echo "demo: the job script failed (exit $rc)" >&2
fi

echo "demo: job done; stopping the node"
kill -TERM "$node_pid"
for _ in {1..50}; do
  kill -0 "$node_pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$node_pid" 2>/dev/null; then
  echo "demo: the node did not stop within 5 s of SIGTERM" >&2
  failed=1 # the EXIT trap kills it
else
  rc=0
  wait "$node_pid" || rc=$?
  forget "$node_pid"
  ((rc == 0)) || { echo "demo: the node exited with $rc" >&2; failed=1; }
fi
echo "demo: node log (tail):"
tail -n 8 "$tmp/node.log" | sed 's/^/  /'
if ((failed)); then
  echo "demo: FAILED" >&2
  exit 1
fi
echo "demo: ok"
