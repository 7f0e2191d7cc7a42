#!/usr/bin/env bash
# Installs every Debian package RackWeave builds or tests with (idempotent), then
# configures and builds the tree in ./build. Safe to run again: apt skips what is
# installed and the build is incremental. With --packages-only it stops after the
# packages (tests/fuzz/run.sh and tests/sanitize.sh build their own trees).
# RW_INTEGRATION_TESTS=OFF leaves rw-integration-tests out of ./build (apps/scripts/
# test.sh: it runs them in its ASan build); any other run builds them (default ON).
# RW_DEBUG_INFO=OFF builds RelWithDebInfo without -g (the same -O2 code, a quarter less
# compiler time; test.sh in CI); any other run with -g (default ON).
set -euo pipefail
cd "$(dirname "$0")/../.."
packages_only=0
[[ ${1:-} == --packages-only ]] && packages_only=1

packages=(
  build-essential cmake pkg-config ninja-build
  libcaf-dev                # C++ Actor Framework 0.17.6
  libcaf-openssl0.17 libssl-dev openssl  # TLS on the control plane (--tls-*): CAF's module
  tcpdump                   # the TLS test checks a capture of the control port
  capnproto libcapnp-dev    # frame header and control schemas
  libspdlog-dev libfmt-dev  # logging
  catch2                    # tests (v2)
  libhwloc-dev libnuma-dev  # topology, NUMA-local memory
  libcli11-dev              # command lines
  nlohmann-json3-dev        # JSON output: rw-bench --json, rw-node --log-format json
  libtomlplusplus-dev       # config files
  libxxhash-dev             # hashing
  libsodium-dev             # job tokens: random secrets, HMAC challenge-response
  libsqlite3-dev            # the cluster coordinator's --state-db
  libfabric-dev libfabric-bin  # the fabric transport (RDMA: verbs, efa; tcp for tests), fi_info
  liblua5.4-dev             # rw-shell scripts
  libreadline-dev           # rw-shell line editing and history
  python3-prometheus-client # the metrics test parses /metrics with its parser
  pybind11-dev python3-dev  # the rackweave Python package
  python3-numpy python3-pytest python3-torch  # its buffers and its tests
  python3-venv python3-pip python3-setuptools python3-wheel python3-build  # pip install ., a wheel
  python3-sklearn python3-matplotlib  # the digits demo's data set; bench/torch.sh's plots
  clang-14 libclang-rt-14-dev llvm-14  # libFuzzer, sanitizer runtimes, llvm-symbolizer
  clang-format-14  # the house style (.clang-format; ctest format_clean)
)

missing=()
for p in "${packages[@]}"; do
  [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == "install ok installed" ]] || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

((packages_only)) && exit 0

build_type=${RW_BUILD_TYPE:-RelWithDebInfo}
# Ninja for a new build directory; one configured before keeps its generator.
generator=()
[[ -f build/CMakeCache.txt ]] || generator=(-G Ninja)
debug_info=-g
[[ ${RW_DEBUG_INFO:-ON} == OFF ]] && debug_info=
cmake -S . -B build ${generator[@]+"${generator[@]}"} -DCMAKE_BUILD_TYPE="$build_type" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 $debug_info -DNDEBUG" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 $debug_info -DNDEBUG" \
  -DRW_INTEGRATION_TESTS="${RW_INTEGRATION_TESTS:-ON}" >/dev/null
cmake --build build -j"${RW_JOBS:-2}"

# `import rackweave` for Debian's /usr/bin/python3: a .pth file pointing at the build's
# package (build/python), written only when it changes.
site=$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])')
pth="$site/rackweave.pth"
want="$(pwd)/build/python"
if [[ ! -f $pth || $(<"$pth") != "$want" ]]; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" mkdir -p "$site"
  echo "$want" | "${sudo_cmd[@]}" tee "$pth" >/dev/null
  echo "setup: /usr/bin/python3 imports rackweave from $want ($pth)"
fi
