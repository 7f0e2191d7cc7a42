#!/usr/bin/env bash
# The RackWeave demo: installs what it needs, builds, starts a rack-agg node (which
# embeds the cluster coordinator) on a free local port and trains a small CNN on the
# handwritten digits scikit-learn ships with DEMO_WORKERS (default 4) ranks under
# torchrun: first through the node (rackweave.torch.ServerOptimizer: momentum SGD runs
# on the node), then with torch DDP over gloo, the same run; prints a progress line,
# each one's test accuracy and step time side by side. DEMO_EPOCHS (default 10).
# Every process it starts is stopped by PID however it exits.
# The C++ embedding demo (rw-shell creates a job, C++ workers train): demo_cpp.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."

workers=${DEMO_WORKERS:-4}
epochs=${DEMO_EPOCHS:-10}
for v in workers epochs; do
  if ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then
    echo "demo: DEMO_${v^^} must be a positive integer, not '${!v}'" >&2
    exit 2
  fi
done

[[ -n ${RW_BUILD_DIR:-} ]] || bash apps/scripts/setup.sh

source apps/scripts/local_node.sh
start_node

echo "demo: training the digits CNN with $workers ranks for $epochs epochs, through the" \
  "node and then with torch DDP (gloo) for comparison"
failed=0
rc=0
PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH} \
  /usr/bin/python3 apps/examples/torch/compare.py --connect "$address" --model digits \
  --workers "$workers" --systems server,ddp -- --epochs "$epochs" </dev/null &
run_pid=$!
pids+=("$run_pid")
wait "$run_pid" || rc=$?
forget "$run_pid"
if ((rc != 0)); then
  failed=1
  echo "demo: the training run failed (exit $rc)" >&2
fi

echo "demo: done; stopping the node"
stop_node || failed=1
if ((failed)); then
  echo "demo: FAILED" >&2
  exit 1
fi
echo "demo: ok"
