#!/usr/bin/env bash
# ThreadSanitizer over the code that shares memory between threads without CAF's
# mailboxes: a node's send queues (shard threads send, the poller's thread drains),
# shared-memory rings and completion backlogs, the buffer pool, the registration cache
# and fabric slot pool, the shard's answer batching, the chunk state and the node-wide
# budget for strangers' payloads (byte_budget, [admission]), and the slot a shard's
# thread publishes its CPU clock in for the balancer ([thread_cpu]). A third build
# directory (clang-14, -fsanitize=thread) builds only those tests (rw-tsan-tests) and
# the layers they test: runtime, transports and the shard's CAF-free logic.
#
# Not here: the actors and the multi-process tests. CAF 0.17's runtime comes
# uninstrumented from Debian, so its mailboxes' synchronisation is invisible to TSan
# and every message between actors would be reported as a race; those run under
# ASan + UBSan (tests/sanitize.sh) instead. apps/scripts/test.sh runs this after it.
#
#   bash tests/tsan.sh [--build-dir DIR] [--build-only | --no-build] [-- CATCH-ARG...]
#
#   --build-dir DIR   default ./build-tsan
#   --build-only      configure and build, run nothing
#   --no-build        run what an earlier --build-only built
#   CATCH-ARG...      test names or tags for rw-tsan-tests instead of the default set
#
# A data race, or any other TSan report, fails the run (halt_on_error).
set -euo pipefail
cd "$(dirname "$0")/.."

dir=build-tsan
tests=("[send_queue],[shm],[pool],[fabric],[answers],[answer_slots],[chunk_state],[consistency],[balance],[admission],[thread_cpu],[trace]")
build=1
run=1
while (($#)); do
  case $1 in
    --build-dir) dir=${2:?--build-dir needs a directory}; shift 2 ;;
    --build-only) build=1; run=0; shift ;;
    --no-build) build=0; run=1; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; tests=("$@"); break ;;
    *) echo "tsan.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

if ((build)); then
  bash apps/scripts/setup.sh --packages-only
  bash tests/configure_clang.sh "$dir" thread
  cmake --build "$dir" -j"${RW_JOBS:-2}" --target rw-tsan-tests
fi
((run)) || exit 0

export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
timeout -k 10 900 "$dir/tests/rw-tsan-tests" "${tests[@]}"
