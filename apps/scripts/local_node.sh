# Sourced by the demos: a rack-agg node (embedding the cluster coordinator) on a free
# 127.0.0.1 port, and the bookkeeping that stops every process a demo starts, by PID,
# however the demo exits. Sets `tmp` (a scratch directory, removed at exit) and `build`
# (RW_BUILD_DIR: a build to use as it is, as the tests do; default ./build, which the
# demo first brings up to date with setup.sh).
#   start_node       starts it: sets node_pid and address (HOST:PORT)
#   stop_node        SIGTERM, waits up to 5 s; returns non-zero if it did not stop cleanly
#   pids+=("$pid")   any other process to stop at exit; forget PID once it is reaped

build=${RW_BUILD_DIR:-build}
tmp=$(mktemp -d)
pids=() # started and not yet reaped

forget() {
  local keep=() p
  for p in "${pids[@]}"; do
    [[ $p == "$1" ]] || keep+=("$p")
  done
  pids=("${keep[@]}")
}

cleanup() {
  local p alive
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  # A short grace period so the node and workers can say bye; then no mercy.
  for _ in {1..30}; do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
# Background jobs of a script ignore Ctrl-C, so the EXIT trap has to stop them.
trap 'exit 130' INT
trap 'exit 143' TERM

start_node() {
  echo "demo: starting rack-agg node on 127.0.0.1 (a free port)"
  "$build/apps/rw-node" --role rack-agg --listen 127.0.0.1:0 --port-file "$tmp/port" \
    >"$tmp/node.log" 2>&1 &
  node_pid=$!
  pids+=("$node_pid")
  for _ in {1..100}; do
    [[ -s $tmp/port ]] && break
    if ! kill -0 "$node_pid" 2>/dev/null; then
      echo "demo: the node exited at start-up:" >&2
      cat "$tmp/node.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  if ! [[ -s $tmp/port ]]; then
    echo "demo: the node did not report its port within 10 s" >&2
    exit 1
  fi
  address=$(<"$tmp/port")
  echo "demo: node listening on $address (pid $node_pid)"
}

stop_node() {
  local rc=0
  kill -TERM "$node_pid"
  for _ in {1..50}; do
    kill -0 "$node_pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$node_pid" 2>/dev/null; then
    echo "demo: the node did not stop within 5 s of SIGTERM; its log (tail):" >&2
    tail -n 40 "$tmp/node.log" | sed 's/^/  /' >&2
    return 1 # the EXIT trap kills it
  fi
  wait "$node_pid" || rc=$?
  forget "$node_pid"
  if ((rc != 0)); then
    echo "demo: the node exited with $rc; its log (tail):" >&2
    tail -n 40 "$tmp/node.log" | sed 's/^/  /' >&2
    return 1
  fi
  echo "demo: node log (tail):"
  tail -n 8 "$tmp/node.log" | sed 's/^/  /'
}
