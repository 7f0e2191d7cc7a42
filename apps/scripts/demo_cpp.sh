#!/usr/bin/env bash
# The C++ embedding demo: builds the tree, starts a rack-agg node (which embeds the cluster
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

[[ -n ${RW_BUILD_DIR:-} ]] || bash apps/scripts/setup.sh

source apps/scripts/local_node.sh
start_node

noun=workers
((workers > 1)) || noun=worker
echo "demo: creating a job through rw-shell (config/examples/train_job.lua): $workers $noun" \
  "train a 2-32-1 MLP on two spirals for $steps steps, proving the job's token"
failed=0
rc=0
"$build/apps/rw-shell" --connect "$address" -f config/examples/train_job.lua -- \
  "$build/apps/examples/rw-train-demo" "$workers" "$steps" </dev/null &
shell_pid=$!
pids+=("$shell_pid")
wait "$shell_pid" || rc=$?
forget "$shell_pid"
if ((rc != 0)); then
  failed=1
  echo "demo: the job script failed (exit $rc)" >&2
fi

echo "demo: job done; stopping the node"
stop_node || failed=1
if ((failed)); then
  echo "demo: FAILED" >&2
  exit 1
fi
echo "demo: ok"
