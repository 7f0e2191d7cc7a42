#!/usr/bin/env bash
# Sets everything up (Debian packages, build in ./build) and runs the whole test suite
# through ctest: unit tests and every benchmark in its smoke mode in ./build, then the
# unit and the multi-process integration tests (127.0.0.1) under ASan + UBSan and a
# short run of every fuzz target (tests/sanitize.sh), then the threaded unit tests under
# ThreadSanitizer (tests/tsan.sh), then tests/stress.sh's smoke (two multi-process
# tests beside a CPU hog). Every test is bounded in time, and every
# process a test starts is stopped by PID. At the end (pass or fail) it prints how long
# each stage took.
set -euo pipefail
cd "$(dirname "$0")/../.."

start=$SECONDS
stage_lines=()
# stage NAME COMMAND...: runs it, notes its time; a failure ends the run (set -e).
stage() {
  local name=$1 t0=$SECONDS rc=0
  shift
  "$@" || rc=$?
  note_stage "$name" $((SECONDS - t0)) "$rc"
  return "$rc"
}
note_stage() {
  local failed=""
  (($3 == 0)) || failed="   FAILED (exit $3)"
  stage_lines+=("$(printf '%-40s %5d s%s' "$1" "$2" "$failed")")
}
builds_pid=
finish() {
  local rc=$?
  if [[ -n $builds_pid ]] && kill -0 "$builds_pid" 2>/dev/null; then
    kill -TERM -- "-$builds_pid" 2>/dev/null || kill -TERM "$builds_pid" 2>/dev/null || true
    wait "$builds_pid" 2>/dev/null || true
  fi
  echo
  echo "test.sh: time per stage"
  printf '  %s\n' "${stage_lines[@]}"
  printf '  %-40s %5d s\n' "total" $((SECONDS - start))
  exit "$rc"
}
trap finish EXIT

# ./build without rw-integration-tests: the ASan + UBSan build below runs them. In CI
# (CI=true, a clean clone) also without debug information: -g changes no generated code
# and costs a quarter of the compiler's time; elsewhere ./build keeps it, so that the
# test command does not rebuild a developer's tree.
debug_info=ON
[[ ${CI:-} == true ]] && debug_info=OFF
stage "setup (packages, ./build)" env RW_INTEGRATION_TESTS=OFF \
  RW_DEBUG_INFO="${RW_DEBUG_INFO:-$debug_info}" bash apps/scripts/setup.sh
# The peers the benchmarks compare against (Gloo, OpenMPI, PyTorch): the suite runs
# every benchmark in its smoke mode (tests/bench_smoke.cmake), peers and netns included.
stage "peers (bench/setup-peers.sh)" bash bench/setup-peers.sh

# The sanitizer builds (clang-14) compile while tests run: most tests wait on
# processes, sockets and timers, and at the lowest priority (nice 19) the compilers take
# only the CPU the tests leave. ASan + UBSan (./build-asan: everything, every fuzz
# target) while the main suite runs; ThreadSanitizer (./build-tsan: the layers whose
# threads share memory outside CAF's mailboxes, and their unit tests) while the ASan
# build's tests run.
fuzz_seconds=${RW_FUZZ_SECONDS:-10}
# background_build LOG COMMAND...: starts it at nice 19 in a process group of its own
# (so a failure stops all of it), its pid in builds_pid.
background_build() {
  local log=$1
  shift
  set -m
  nice -n 19 "$@" >"$log" 2>&1 &
  builds_pid=$!
  set +m
}
# wait_build NAME LOG T0: waits for it, notes its time; its log's end if it failed.
wait_build() {
  local rc=0 t0=$SECONDS
  wait "$builds_pid" || rc=$?
  builds_pid=
  note_stage "$1 (after the tests beside it)" $((SECONDS - t0)) "$rc"
  note_stage "  ($1 in all)" $((SECONDS - $3)) "$rc"
  if ((rc)); then
    echo "test.sh: $1 failed; the end of $2:" >&2
    tail -n 60 "$2" >&2
    exit "$rc"
  fi
}

asan_log=$(pwd)/build/asan-build.log
asan_t0=$SECONDS
background_build "$asan_log" bash tests/sanitize.sh --build-only --fuzz-seconds "$fuzz_seconds"

# Everything but the multi-process integration tests (label `integration`), which run in
# the ASan + UBSan build below: unit tests, benchmark smokes, Python, demos, scripts.
stage "ctest ./build" ctest --test-dir build --output-on-failure --timeout 600 \
  -j"${RW_TEST_JOBS:-2}" -LE '^integration$'
wait_build "asan build" "$asan_log" "$asan_t0"

tsan_log=$(pwd)/build/tsan-build.log
tsan_t0=$SECONDS
background_build "$tsan_log" bash tests/tsan.sh --build-only
# The unit and integration tests again under AddressSanitizer + UndefinedBehavior-
# Sanitizer + LeakSanitizer, every process they start instrumented too, and every
# libFuzzer target (tests/fuzz) for RW_FUZZ_SECONDS (10) in the same build; a crash,
# leak, sanitizer report or violated property fails.
stage "asan+ubsan, fuzz (run)" bash tests/sanitize.sh --no-build
wait_build "tsan build" "$tsan_log" "$tsan_t0"
# The unit tests of code that threads share outside CAF's mailboxes (send queues, shm
# rings, pools, fabric slots) under ThreadSanitizer.
stage "tsan (run)" bash tests/tsan.sh --no-build
# tests/stress.sh's smoke: two multi-process tests of the ASan build, once, beside a CPU
# hog on both cores (bash tests/stress.sh runs every multi-process test 20 times).
stage "stress smoke (run)" bash tests/stress.sh --runs 1 --build-dir build-asan --hog 2 \
  --tests '' --only '^(a hierarchical job over three racks, exact|one hyper-parameter change at a time per job)$' \
  --out build-asan/stress-smoke
