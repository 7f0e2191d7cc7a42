#!/usr/bin/env bash
# Installs what the peer all-reduce benchmarks need (Debian packages, only those
# missing), then builds bench/peers (a standalone CMake project, not part of the
# RackWeave build) into build/peers. Idempotent: apt skips what is installed and the
# build is incremental.
#
#   bash bench/setup-peers.sh
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake
  libgloo-dev                  # Gloo (TCP transport, FileStore rendezvous)
  openmpi-bin libopenmpi-dev   # mpirun, MPI_Allreduce
  python3-torch                # torch.distributed, gloo backend
  python3-matplotlib
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup-peers: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cmake -S bench/peers -B build/peers -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/peers -j"${RW_JOBS:-2}"
