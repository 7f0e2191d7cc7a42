#!/usr/bin/env bash
# Sets everything up (Debian packages, build in ./build) and runs the whole test suite
# through ctest: unit tests, multi-process integration tests on 127.0.0.1 and every
# benchmark in its smoke mode, then the threaded unit tests under ThreadSanitizer
# (tests/tsan.sh), then the unit and integration tests under ASan + UBSan and a short run
# of every fuzz target (tests/sanitize.sh). Every test is
# bounded in time, and every process a test starts is stopped by PID.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash apps/scripts/setup.sh
# The peers the benchmarks compare against (Gloo, OpenMPI, PyTorch): the suite runs
# every benchmark in its smoke mode (tests/bench_smoke.cmake), peers and netns included.
bash bench/setup-peers.sh
ctest --test-dir build --output-on-failure --timeout 600 -j"${RW_TEST_JOBS:-2}"
# The unit tests of code that threads share outside CAF's mailboxes (send queues, shm
# rings, pools, fabric slots) under ThreadSanitizer (clang-14, ./build-tsan).
bash tests/tsan.sh
# The unit and integration tests again under AddressSanitizer + UndefinedBehavior-
# Sanitizer + LeakSanitizer (clang-14, ./build-asan), every process they start
# instrumented too, and every libFuzzer target (tests/fuzz) 10 s in the same build; a
# crash, leak, sanitizer report or violated property fails.
bash tests/sanitize.sh --fuzz-seconds "${RW_FUZZ_SECONDS:-10}"
