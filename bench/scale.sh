#!/usr/bin/env bash
# All-reduce step time as the host grows: bench/peers.sh over a many-core worker list,
# with RackWeave's transports, Gloo's ring, torch's gloo and (where installed) MPI, one
# JSON line per (system, W, S) with --json and, after them, one per cell (W, S) with
# RackWeave's best against the best peer ({"system":"cell", ..., "ratio", "tcp_vs_gloo"}),
# each peer's ratio to RackWeave's best in the report, and
# rackweave-tcp against Gloo's ring (issue 36's targets: <= 1.0 at W = 4 and 8 x 64MiB,
# <= 1.3 at W = 14). Writes the "scale" section of bench/RESULTS.md.
#
#   bash bench/scale.sh [--workers "2 4 8 14"] [--bytes "4MiB 64MiB"] [--systems "..."]
#                       [--iters N] [--warmup K] [--timeout S] [--json] [--no-results]
#                       [--smoke] [--build-dir DIR]
#
# The default systems: rackweave-tcp rackweave-shm gloo torch-gloo mpi-shm (on a machine
# without MPI, mpi-shm is left out and the report says so). Worker counts above the
# core count oversubscribe the cores; the machine line records the core count.
#
# On a machine with nothing of ours installed (the 16-core GPU machine): pack the build
# here with `bash bench/bundle.sh build-bundle --build-dir build --name new`, carry
# build-bundle there with the checkout, and run
#   bash bench/scale.sh --build-dir build-bundle/new
# (torch-gloo uses that machine's python3 and torch). --smoke: W = 2 at 1MiB, as
# peers.sh's smoke.
set -uo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh" || exit 1
RW_BENCH_INVOCATION=$(invocation_of "$@")
export RW_BENCH_INVOCATION
cd "$(dirname "$0")/.." || exit 1
case " $* " in
  *" -h "*|*" --help "*) sed -n 2,23p "$0"; exit 0 ;;
esac
workers="2 4 8 14"
systems="rackweave-tcp rackweave-shm gloo torch-gloo mpi-shm"
args=()
while (($#)); do
  case $1 in
    --workers) workers=$2; shift 2 ;;
    --systems) systems=$2; args+=(--systems "$2"); shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
has_systems=0
for a in "${args[@]}"; do [[ $a == --systems ]] && has_systems=1; done
((has_systems)) || args+=(--default-systems "$systems")
smoke=0 build=build
for ((i = 0; i < ${#args[@]}; i++)); do
  [[ ${args[i]} == --smoke ]] && smoke=1
  [[ ${args[i]} == --build-dir ]] && build=${args[i + 1]:-}
done
((smoke)) || args=(--workers "$workers" "${args[@]}")
bundle=
if ((smoke)) && [[ -d $build && ! -f $build/BUNDLE ]]; then
  # The smoke runs the build as the many-core machine does: packed by bench/bundle.sh.
  # Gloo's program goes in when its packages are here (else the smoke leaves gloo out).
  bash bench/setup-peers.sh --no-install "$build" >/dev/null 2>&1
  bundle=$(mktemp -d)
  trap 'rm -rf "$bundle"' EXIT
  bash bench/bundle.sh "$bundle" --build-dir "$build" --name smoke >&2 ||
    { echo "scale.sh: bench/bundle.sh failed" >&2; exit 1; }
  args+=(--build-dir "$bundle/smoke")
fi
bash bench/peers.sh --section scale \
  --title "All-reduce as the host grows (bench/scale.sh)" "${args[@]}"
