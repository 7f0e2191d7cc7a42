#!/usr/bin/env bash
# Issue 59, finding 4: a process of the node's user (not a worker of the job) must not
# reach a job's shared memory. Once the node's segments were memfds named
# /proc/NODEPID/fd/N in the welcome: any process of its user could open them and
# rewrite a job's parameters. Now rw-node is non-dumpable (only root may ptrace it or
# open its /proc/PID/fd) and hands the doorbell and the parameters to welcomed workers
# as descriptors over a unix socket.
#
# Everything runs as `nobody` (root bypasses the check): a node, a two-worker job over
# shared memory (rw-bench comm --transport shm --verify) and an intruder that looks for
# the job's parameters in /proc/NODEPID/fd. With --debuggable (the old exposure) the
# intruder opens them for writing: the check can fail. Without, it is denied, and the
# job still runs over shared memory with exact results.
#
#   bash tests/integration/shm_same_user.sh BUILD_DIR          (root: setpriv)
set -euo pipefail
build=$(cd "${1:?usage: shm_same_user.sh BUILD_DIR}" && pwd)
if [[ $(id -u) != 0 ]]; then
  echo "shm_same_user: skipped (needs root, to run the node and its peers as nobody)"
  exit 77
fi
tmp=$(mktemp -d)
chmod 777 "$tmp"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "shm_same_user: FAIL: $*" >&2; exit 1; }
# An array, not a function: `"${as_nobody[@]}" CMD &` makes $! the command's own PID
# (setpriv execs it), which a function run in the background would not.
as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)

# The intruder: for up to 20 s, looks in /proc/PID/fd for the job's parameters and opens
# them for writing. Prints "reached", or "denied" once /proc/PID/fd is closed to it and
# no descriptor number 0-255 of the node opens.
intruder='
import os, sys, time
pid = sys.argv[1]
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except PermissionError:
        for n in range(256):
            try:
                os.close(os.open(f"/proc/{pid}/fd/{n}", os.O_RDWR))
                print(f"reached descriptor {n}"); sys.exit(0)
            except OSError:
                pass
        print("denied"); sys.exit(3)
    for n in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{n}")
        except OSError:
            continue
        if "rackweave-params" in target:
            os.close(os.open(f"/proc/{pid}/fd/{n}", os.O_RDWR))
            print(f"reached {target}"); sys.exit(0)
    time.sleep(0.01)
print("nothing found"); sys.exit(4)
'

# One run: a node (with the given options), the intruder, then the job.
run() {
  local mode=$1
  shift
  rm -f "$tmp/port"
  "${as_nobody[@]}" "$build/apps/rw-node" --listen 127.0.0.1:0 --port-file "$tmp/port" \
    --open-jobs --no-pin "$@" >/dev/null 2>"$tmp/node-$mode.log" &
  local node=$!
  pids+=("$node")
  for ((i = 0; i < 200; i++)); do
    [[ -s $tmp/port ]] && break
    kill -0 "$node" 2>/dev/null || fail "$mode: the node exited at start: $(tail -5 "$tmp/node-$mode.log")"
    sleep 0.05
  done
  [[ -s $tmp/port ]] || fail "$mode: the node did not listen within 10 s"
  "${as_nobody[@]}" /usr/bin/python3 -c "$intruder" "$node" >"$tmp/intruder-$mode" 2>&1 &
  local spy=$!
  pids+=("$spy")
  local rc=0
  "${as_nobody[@]}" timeout -k 5 60 "$build/apps/rw-bench" comm --connect "$(<"$tmp/port")" \
    --open-job --workers 2 --bytes 4MiB --iters 300 --warmup 0 --transport shm \
    --verify --json >"$tmp/bench-$mode.json" 2>"$tmp/bench-$mode.err" || rc=$?
  ((rc == 0)) || fail "$mode: rw-bench exited $rc: $(tail -5 "$tmp/bench-$mode.err")"
  grep -q '"verified":true' "$tmp/bench-$mode.json" ||
    fail "$mode: the result was not verified: $(cat "$tmp/bench-$mode.json")"
  wait "$spy" || true
  kill -TERM "$node" 2>/dev/null || true
  wait "$node" 2>/dev/null || true
}

run debuggable --debuggable
grep -q '^reached' "$tmp/intruder-debuggable" ||
  fail "with --debuggable the intruder should reach the parameters (the check cannot fail otherwise): $(cat "$tmp/intruder-debuggable")"
echo "shm_same_user: --debuggable: $(cat "$tmp/intruder-debuggable")"

run default
[[ $(cat "$tmp/intruder-default") == denied ]] ||
  fail "a process of the node's user reached its shared memory: $(cat "$tmp/intruder-default")"
! grep -q "shared memory not used" "$tmp/bench-default.err" ||
  fail "the workers did not use shared memory: $(grep 'shared memory not used' "$tmp/bench-default.err")"
echo "shm_same_user: default: the intruder was denied; the job ran over shared memory, verified"
echo "shm_same_user: ok"
