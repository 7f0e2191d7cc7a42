#!/usr/bin/env bash
# Installs what the peer all-reduce benchmarks need (Debian packages, only those
# missing), then builds bench/peers (a standalone CMake project, not part of the
# RackWeave build) into BUILD_DIR/peers (default build/peers). Idempotent: apt skips
# what is installed and the build is incremental.
#
#   bash bench/setup-peers.sh [--no-install] [BUILD_DIR]
#
# --no-install installs nothing: when a package the peer build needs (Gloo, OpenMPI)
# is missing it says which and exits 3, else it only builds (a few seconds). The smoke
# runs use it: installing the peers' packages downloads hundreds of MiB.
set -euo pipefail
cd "$(dirname "$0")/.."

install=1
build_dir=build
while (($#)); do
  case $1 in
    --no-install) install=0; shift ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
    -*) echo "setup-peers: unknown option $1" >&2; exit 2 ;;
    *) build_dir=$1; shift ;;
  esac
done

build_packages=(
  build-essential cmake
  libgloo-dev                  # Gloo (TCP transport, FileStore rendezvous)
  openmpi-bin libopenmpi-dev   # mpirun, MPI_Allreduce
)
packages=(
  "${build_packages[@]}"
  python3-torch                # torch.distributed, gloo backend
  python3-matplotlib
  iperf3                       # peers.sh: one loopback TCP stream, the ceiling
)

missing=()
for p in "${packages[@]}"; do
  [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == *"install ok installed"* ]] || missing+=("$p")
done
if ((${#missing[@]} && install)); then
  echo "setup-peers: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
elif ((${#missing[@]})); then
  needed=()
  for p in "${build_packages[@]}"; do
    if [[ " ${missing[*]} " == *" $p "* ]]; then needed+=("$p"); fi
  done
  if ((${#needed[@]})); then
    echo "setup-peers: not installed: ${needed[*]} (bash bench/setup-peers.sh installs them)" >&2
    exit 3
  fi
fi

cmake -S bench/peers -B "$build_dir/peers" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build_dir/peers" -j"${RW_JOBS:-2}"
