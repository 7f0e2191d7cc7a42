#!/usr/bin/env bash
# The rackweave package as a Python user installs it: `pip install .` into a fresh
# virtual environment that sees the system's packages (Debian's torch and NumPy), then,
# from another directory, `import rackweave` from that environment (not the build's
# .pth), its version, the native part's $ORIGIN RUNPATH with librackweave.so beside it,
# and a push_pull through a node; then `python3 -m build --wheel` and what the wheel
# holds. RACKWEAVE_BUILD_DIR points setup.py at this build, so nothing is compiled twice.
#
#   bash tests/python/pip_install.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: pip_install.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
node_pid=
cleanup() {
  if [[ -n $node_pid ]]; then kill -TERM "$node_pid" 2>/dev/null; wait "$node_pid" 2>/dev/null; fi
  rm -rf "$tmp" "$src"/apps/python/rackweave.egg-info "$src"/rackweave.egg-info
}
trap cleanup EXIT
fail() { echo "pip_install: FAIL: $*" >&2; exit 1; }
# runpath_of FILE: its RUNPATH (or RPATH) line; readelf's whole output read first, so no
# reader stops a pipeline early under pipefail.
runpath_of() {
  local dyn
  dyn=$(readelf -d "$1")
  grep -E 'R(UN)?PATH' <<<"$dyn" || true
}
export RACKWEAVE_BUILD_DIR=$build PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

version=$(sed -n 's/^project(RackWeave VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
# No build isolation: it would fetch setuptools from the network; the venv sees Debian's.
"$tmp/venv/bin/pip" install -q --no-build-isolation --no-deps "$src" >"$tmp/pip.log" 2>&1 ||
  { tail -30 "$tmp/pip.log" >&2; fail "pip install . failed"; }

cd "$tmp"
"$tmp/venv/bin/python" - "$tmp/venv" "$version" >"$tmp/where" <<'PY' || fail "the installed package: $(cat "$tmp/where")"
import os, sys
import rackweave, rackweave.torch, rackweave.staging, rackweave.run  # noqa: F401
venv, version = sys.argv[1:]
where = os.path.dirname(rackweave.__file__)
if not where.startswith(os.path.realpath(venv)) and not where.startswith(venv):
    sys.exit(f"rackweave was imported from {where}, not from the environment {venv}")
if rackweave.__version__ != version:
    sys.exit(f"rackweave.__version__ is {rackweave.__version__}, CMakeLists.txt says {version}")
native = rackweave._rackweave.__file__
print(native)
PY
native=$(<"$tmp/where")
[[ -f $(dirname "$native")/librackweave.so ]] || fail "no librackweave.so beside $native"
runpath=$(runpath_of "$native")
[[ $runpath == *'$ORIGIN'* ]] || fail "$native has no \$ORIGIN in its RUNPATH: $runpath"
# Loaded from beside it, not from the build.
LD_DEBUG=libs "$tmp/venv/bin/python" -c 'import rackweave' 2>"$tmp/ld.log" || true
grep -q "calling init: $(dirname "$native")/librackweave.so" "$tmp/ld.log" ||
  fail "librackweave.so was not loaded from $(dirname "$native"): $(grep -m3 'librackweave' "$tmp/ld.log")"

"$build/apps/rw-node" --listen 127.0.0.1:0 --port-file "$tmp/port" --open-jobs --no-pin \
  2>"$tmp/node.log" &
node_pid=$!
for ((i = 0; i < 200; i++)); do
  [[ -s $tmp/port ]] && break
  kill -0 "$node_pid" 2>/dev/null || fail "the node exited at start: $(tail -5 "$tmp/node.log")"
  sleep 0.05
done
[[ -s $tmp/port ]] || fail "the node did not listen within 10 s"
"$tmp/venv/bin/python" - "$(<"$tmp/port")" <<'PY' || fail "a push_pull through the installed package"
import sys
import numpy as np
import rackweave
w = rackweave.Worker(connect=sys.argv[1], job="pip-install", rank=0, workers=1,
                     tensors={"w": 16}, optimizer="sum")
grad = np.arange(16, dtype=np.float32)
out = np.empty_like(grad)
w.push_pull("w", grad, out).result()
w.close()
assert (out == grad).all(), out
PY

# The wheel.
/usr/bin/python3 -m build --wheel --no-isolation --outdir "$tmp/dist" "$src" >"$tmp/build.log" 2>&1 ||
  { tail -30 "$tmp/build.log" >&2; fail "python3 -m build --wheel failed"; }
wheels=("$tmp"/dist/rackweave-"$version"-*.whl)
wheel=${wheels[0]}
[[ -f $wheel ]] || fail "no rackweave-$version wheel in $tmp/dist: $(ls "$tmp/dist")"
/usr/bin/python3 - "$wheel" "$tmp/unpacked" <<'PY' || fail "the wheel's contents"
import sys, zipfile
wheel, into = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
for want in ("rackweave/__init__.py", "rackweave/torch.py", "rackweave/staging.py",
             "rackweave/buffers.py",
             "rackweave/run.py", "rackweave/librackweave.so"):
    if want not in names:
        sys.exit(f"{want} is not in {wheel}: {names}")
if not any(n.startswith("rackweave/_rackweave.cpython-") for n in names):
    sys.exit(f"no native part in {wheel}: {names}")
zipfile.ZipFile(wheel).extractall(into)
PY
unpacked=("$tmp"/unpacked/rackweave/_rackweave.cpython-*.so)
runpath=$(runpath_of "${unpacked[0]}")
[[ $runpath == *'$ORIGIN'* ]] || fail "the wheel's native part has no \$ORIGIN RUNPATH: $runpath"
echo "pip_install: ok ($(basename "$wheel"))"
