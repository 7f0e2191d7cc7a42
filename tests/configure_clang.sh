#!/usr/bin/env bash
# Configures a clang-14 build directory with sanitizers, for tests/sanitize.sh,
# tests/tsan.sh and tests/fuzz/run.sh: Ninja for a new directory (one configured before
# keeps its generator), -O1 with line tables only (reports name file and line, the build
# stays fast), RW_SANITIZE as asked.
#
#   bash tests/configure_clang.sh DIR SANITIZERS [CMAKE-ARG...]
#
#   SANITIZERS   address,undefined | thread
set -euo pipefail
dir=${1:?configure_clang.sh: a build directory}
sanitizers=${2:?configure_clang.sh: the sanitizers (address,undefined or thread)}
shift 2
generator=()
[[ -f $dir/CMakeCache.txt ]] || generator=(-G Ninja)
cmake -S "$(dirname "$0")/.." -B "$dir" ${generator[@]+"${generator[@]}"} \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" \
  -DCMAKE_C_FLAGS_DEBUG="-O1 -gline-tables-only" -DRW_SANITIZE="$sanitizers" "$@" >/dev/null
