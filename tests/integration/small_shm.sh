#!/usr/bin/env bash
# A /dev/shm smaller than a job (a container's default is 64 MiB): in a private mount
# namespace with an 8 MiB tmpfs on /dev/shm, a node and two workers (rw-bench comm) run a
# 16 MiB job over shared memory. Once the segments lived in /dev/shm: the first worker
# died of SIGBUS, then (reserved with posix_fallocate) the node kept the parameters
# private and the workers fell back to TCP. Now every segment is a sealed memfd (issue
# 59: nobody can shrink one under another process), which /dev/shm does not hold: the
# job runs over shared memory with --transport auto and shm, the results are verified
# exactly, the node shares the parameters, and /dev/shm stays empty.
#
#   bash tests/integration/small_shm.sh BUILD_DIR          (root: unshare -m, mount)
set -euo pipefail
build=$(cd "${1:?usage: small_shm.sh BUILD_DIR}" && pwd)
if [[ ${RW_SMALL_SHM_INSIDE:-} != 1 ]]; then
  exec env RW_SMALL_SHM_INSIDE=1 timeout -k 5 170 unshare -m --propagation private \
    bash "$0" "$build"
fi
mount -t tmpfs -o size=8m tmpfs /dev/shm
tmp=$(mktemp -d)
node_pid=
cleanup() {
  [[ -n $node_pid ]] && kill -KILL "$node_pid" 2>/dev/null && wait "$node_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "small_shm: FAIL: $*" >&2; [[ -f $tmp/node.log ]] && tail -20 "$tmp/node.log" >&2; exit 1; }

"$build/apps/rw-node" --listen 127.0.0.1:0 --port-file "$tmp/port" --open-jobs --no-pin \
  2>"$tmp/node.log" &
node_pid=$!
for ((i = 0; i < 200; i++)); do
  [[ -s $tmp/port ]] && break
  kill -0 "$node_pid" 2>/dev/null || fail "the node exited at start"
  sleep 0.05
done
[[ -s $tmp/port ]] || fail "the node did not listen within 10 s"
address=$(<"$tmp/port")

bench() { timeout -k 5 120 "$build/apps/rw-bench" comm --connect "$address" --open-job \
  --workers 2 --bytes 16MiB --iters 2 --warmup 0 --verify --json "$@"; }
rc=0
bench --transport auto >"$tmp/auto.json" 2>"$tmp/auto.err" || rc=$?
((rc == 0)) || { cat "$tmp/auto.err" >&2; fail "rw-bench --transport auto exited $rc"; }
grep -q '"verified":true' "$tmp/auto.json" || fail "the result was not verified: $(cat "$tmp/auto.json")"
! grep -q "parameters stay private" "$tmp/node.log" ||
  fail "the node kept the parameters private: $(grep 'parameters stay private' "$tmp/node.log")"
! grep -q "shared memory not used" "$tmp/auto.err" ||
  fail "the workers did not use shared memory: $(grep 'shared memory not used' "$tmp/auto.err")"

rc=0
bench --transport shm >"$tmp/shm.json" 2>"$tmp/shm.err" || rc=$?
((rc == 0)) || { cat "$tmp/shm.err" >&2; fail "rw-bench --transport shm exited $rc"; }
grep -q '"verified":true' "$tmp/shm.json" || fail "the shm result was not verified: $(cat "$tmp/shm.json")"
kill -0 "$node_pid" 2>/dev/null || fail "the node died"
# Nothing in /dev/shm, the node's doorbell included.
leftover=$(find /dev/shm -mindepth 1 -printf '%f ')
[[ -z $leftover ]] || fail "shared memory objects left in /dev/shm: $leftover"
echo "small_shm: ok"
