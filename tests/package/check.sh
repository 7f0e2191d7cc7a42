#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds and runs tests/package against
# it: find_package(RackWeave) must work for a project outside this tree. The installed
# programs must start from the prefix as they are (no LD_LIBRARY_PATH: their RPATH finds
# librackweave), and the config examples must be there.
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/build" -j2 >/dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib:${LD_LIBRARY_PATH:-}" "$tmp/build/consumer"
for program in rw-node rw-shell rw-bench rw-train-demo; do
  if ! out=$(env -u LD_LIBRARY_PATH "$tmp/prefix/bin/$program" --help 2>&1); then
    echo "installed $program --help failed: $out" >&2
    exit 1
  fi
done
for f in rack-agg.toml coordinator.toml examples/tenants.toml examples/train_job.lua \
  systemd/rw-node.service; do
  [[ -f $tmp/prefix/share/rackweave/config/$f ]] || {
    echo "not installed: share/rackweave/config/$f" >&2
    exit 1
  }
done
# systemd waits longer for the node to stop than a drain may take (rw-node's
# drain_timeout_ms + 5 s for the answer), else it kills a node that is moving its jobs.
unit=$tmp/prefix/share/rackweave/config/systemd/rw-node.service
stop_s=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)$/\1/p' "$unit")
drain_ms=$(sed -n 's/.*drain_timeout_ms = \([0-9'"'"']*\);.*/\1/p' \
  "$src/../../include/rackweave/defaults.hpp" | tr -d "'")
if [[ -z $stop_s || -z $drain_ms ]] || ((stop_s * 1000 <= drain_ms + 5000)); then
  echo "rw-node.service: TimeoutStopSec=${stop_s:-none} is not longer than a drain" \
    "(${drain_ms:-?} ms + 5 s)" >&2
  exit 1
fi
# The systemd unit's command line, from this prefix instead of /usr/local, starts a node
# (on a free port: flags win over the config) that stops cleanly on SIGTERM, as systemd
# stops it.
exec_start=$(sed -n 's/^ExecStart=//p' "$tmp/prefix/share/rackweave/config/systemd/rw-node.service")
read -r -a cmd <<<"${exec_start//\/usr\/local/$tmp/prefix}"
env -u LD_LIBRARY_PATH "${cmd[@]}" --listen 127.0.0.1:0 --port-file "$tmp/port" \
  2>"$tmp/node.log" &
node=$!
for _ in $(seq 1 200); do
  [[ -s $tmp/port ]] && break
  kill -0 "$node" 2>/dev/null || break
  sleep 0.1
done
if [[ ! -s $tmp/port ]]; then
  kill -9 "$node" 2>/dev/null || true
  echo "the systemd unit's rw-node did not start:" >&2
  cat "$tmp/node.log" >&2
  exit 1
fi
kill -TERM "$node"
st=0
for _ in $(seq 1 100); do
  kill -0 "$node" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$node" 2>/dev/null; then
  kill -9 "$node"
  echo "the systemd unit's rw-node did not stop within 10 s of SIGTERM" >&2
  exit 1
fi
wait "$node" || st=$?
((st == 0)) || { echo "the systemd unit's rw-node exited $st after SIGTERM:" >&2; cat "$tmp/node.log" >&2; exit 1; }
echo "installed programs start from the prefix; config examples installed; the systemd unit's node starts and stops"
