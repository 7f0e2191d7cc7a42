#!/usr/bin/env bash
# Sets everything up (Debian packages, build in ./build) and runs the whole test suite
# through ctest: unit tests, multi-process integration tests on 127.0.0.1 and every
# benchmark in its smoke mode, then a short run of every fuzz target. Every test is
# bounded in time, and every process a test starts is stopped by PID.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash apps/scripts/setup.sh
# The peers the benchmarks compare against (Gloo, OpenMPI, PyTorch): the suite runs
# every benchmark in its smoke mode (tests/bench_smoke.cmake), peers and netns included.
bash bench/setup-peers.sh
ctest --test-dir build --output-on-failure --timeout 600 -j"${RW_TEST_JOBS:-2}"
# Every libFuzzer target (tests/fuzz) 10 s under ASan + UBSan + LSan, in its own clang
# build (./build-fuzz); a crash, leak, sanitizer report or violated property fails.
bash tests/fuzz/run.sh --seconds "${RW_FUZZ_SECONDS:-10}"
