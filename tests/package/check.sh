#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds and runs tests/package against
# it: find_package(RackWeave) must work for a project outside this tree.
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/build" -j2 >/dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib:${LD_LIBRARY_PATH:-}" "$tmp/build/consumer"
