#!/usr/bin/env bash
# All-reduce step time, RackWeave against peer systems, on this one machine: W worker
# processes each hold S bytes of float32 and all end with the elementwise sum. For each
# iteration the slowest rank's time counts; reported are the median and p90 over the
# timed iterations (after warm-up), as `rw-bench comm` does. Prints a table and writes
# bench/RESULTS.md (the section between the peers markers).
#
#   bash bench/peers.sh [--workers "2 4 8"] [--bytes "4MiB 64MiB"] [--iters N]
#                       [--warmup K] [--systems "rackweave-tcp rackweave-shm
#                       rackweave-fabric gloo torch-gloo mpi-shm mpi-tcp"] [--timeout S]
#                       [--json]
#                       [--smoke] [--build-dir DIR] [--no-results]
#                       [--section NAME --title TEXT] [--node-args "ARGS"]
#                       [--bench-args "ARGS"]
#
# Systems:
#   rackweave-tcp  rw-bench comm through one rw-node --role rack-agg on 127.0.0.1
#   rackweave-shm  the same with --transport shm
#   rackweave-fabric  the same with --transport fabric, the node started with --fabric tcp
#                  (libfabric's tcp provider over loopback: software overhead, not RDMA)
# For each rackweave-* run the node's CPU time (user + sys, from /proc) is read before
# and after: "node_cpu_ns_per_byte" divides it by the bytes through the node (2 x W x S
# per iteration, warm-up included).
#   gloo           build/peers/gloo-allreduce: Gloo TCP transport, FileStore rendezvous
#   torch-gloo     bench/peers/torch_allreduce.py: torch.distributed, gloo backend
#   mpi-shm        build/peers/mpi-allreduce under mpirun, OpenMPI defaults
#   mpi-tcp        the same with --mca pml ob1 --mca btl tcp,self, loopback only
# Beside them, the loopback ceiling: one iperf3 TCP stream on 127.0.0.1 (3 s; 1 s in
# smoke mode), measured once when rackweave-tcp runs and iperf3 is installed
# (bench/setup-peers.sh installs it), against which rackweave-tcp's bytes through the
# node (2 x W x S per step: every push in, every update out) are put.
# --no-results: print only, bench/RESULTS.md left alone (bench/scaling.sh runs it so).
# --bench-args "ARGS": more `rw-bench comm` options for the rackweave-* runs (e.g.
# "--chunk-bytes 256KiB --push-window 2MiB").
# --node-args "ARGS": more rw-node options for the node (e.g. "--pollers 8"); the
# node's placement (pollers, shards) is logged either way, and after each rackweave run
# its threads' CPU time (bench/lib/node_threads.py): which poller or shard was busy.
# --section NAME, --title TEXT: the RESULTS.md section written (default peers) and its
# heading; bench/scale.sh writes "scale", with rackweave-tcp's ratio to Gloo's ring,
# and with --json ends with a line per (W, S): {"system":"cell", best_rackweave(_ms),
# best_peer(_ms), ratio, tcp_vs_gloo}.
# --build-dir may name a bundle (bench/bundle.sh: a build packed to run on a machine
# without our packages): Gloo's program comes from it, MPI's is compiled there with the
# machine's mpicc (the mpi-* systems are left out, said so, where it has no MPI, unless
# --systems names them), nothing is installed or built.
# --iters defaults to 10 at every size (a 64 MiB run of every system at W = 8 takes
# well under a minute here). Every run is bounded by --timeout seconds (default 300);
# a system that fails or times out is reported on stderr and marked in its row.
# With --json stdout carries only one JSON object per (system, W, S).
# --smoke (see lib/common.sh): W = 2 at 1MiB, 2 iterations after 1 warm-up, every
# system that can run here, and a failed one fails the script. It never installs the
# peers' packages (hundreds of MiB; bench/setup-peers.sh --no-install only builds): a
# peer whose packages are missing is left out with a "smoke: partly skipped:" line.
set -uo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh" || exit 1
cd "$(dirname "$0")/.." || exit 1

# bench/scale.sh runs this script and names its own command line.
invocation=${RW_BENCH_INVOCATION:-$(invocation_of "$@")}
common_options "$@"
set -- ${rest[@]+"${rest[@]}"}

workers="2 4 8"
sizes="4MiB 64MiB"
iters=10
warmup=2
systems="rackweave-tcp rackweave-shm rackweave-fabric gloo torch-gloo mpi-shm mpi-tcp"
run_timeout=300
json=0
no_results=0
systems_given=0
node_args=()
bench_args=()
section=peers
title="All-reduce against peer systems (bench/peers.sh)"
if ((smoke)); then workers=2 sizes=1MiB iters=2 warmup=1 run_timeout=120; fi
while (($#)); do
  case $1 in
    --workers) workers=$2; shift 2 ;;
    --bytes) sizes=$2; shift 2 ;;
    --systems) systems=$2 systems_given=1; shift 2 ;;
    --default-systems) systems=$2; shift 2 ;; # bench/scale.sh's list, MPI where installed
    --no-results) no_results=1; shift ;;
    --node-args) read -ra node_args <<<"$2"; shift 2 ;;
    --bench-args) read -ra bench_args <<<"$2"; shift 2 ;;
    --section) section=$2; shift 2 ;;   # bench/scale.sh: its own RESULTS.md section
    --title) title=$2; shift 2 ;;
    *) run_option 2,45 "$@"; shift "$shifted" ;; # --iters --warmup --timeout --json -h
  esac
done
for s in $systems; do
  case $s in
    rackweave-tcp|rackweave-shm|rackweave-fabric|gloo|torch-gloo|mpi-shm|mpi-tcp) ;;
    *) usage_error "unknown system $s" ;;
  esac
done
check_run_counts "$iters" "$warmup" "$run_timeout"

# Everything but the --json lines goes to stdout only without --json.
open_report "$json"

# shellcheck disable=SC2086 # a word list
check_sizes $sizes
for w in $workers; do
  [[ $w =~ ^[1-9][0-9]*$ ]] || usage_error "bad worker count $w"
done

tmp=$(mktemp -d)
node_pid=
run_pids=()
iperf_server=
cleanup() { release "${run_pids[@]}" ${node_pid:+"$node_pid"} ${iperf_server:+"$iperf_server"}; }
set_exit_traps cleanup

# run OUT ERR CMD...: runs CMD bounded by the timeout (run_limit seconds, default
# --timeout), in the background so that the traps can stop it (timeout forwards the
# signal to CMD's whole process group); returns its exit status.
run() {
  local out=$1 err=$2; shift 2
  timeout -k 10 "${run_limit:-$run_timeout}" "$@" >"$out" 2>"$err" </dev/null &
  local pid=$!
  run_pids=("$pid")
  wait "$pid"
  local rc=$?
  run_pids=()
  return $rc
}

started=$(date +%s)
load_start=$(load_avg)
# A broken RackWeave build fails the rackweave-* systems (their rows say so), not the
# whole run; stale binaries are never measured.
rw_built=1 peers_built=1 peers_missing=""
if ((!build_given)); then
  note "building RackWeave (apps/scripts/setup.sh)"
  if ! run_limit=3600 run "$tmp/setup.log" "$tmp/setup.err" bash apps/scripts/setup.sh; then
    tail -n 15 "$tmp/setup.log" "$tmp/setup.err" >&2
    note "apps/scripts/setup.sh failed: the rackweave-* systems are marked failed"
    rw_built=0
  fi
fi
gloo_bin=$build/peers/gloo-allreduce mpi_bin=$build/peers/mpi-allreduce
gloo_missing="" mpi_missing=""
if [[ -f $build/BUNDLE ]]; then
  # A bundle (bench/bundle.sh) on a machine without our packages: Gloo's program comes
  # with it; MPI's is built here by the machine's own mpicc, for its own mpirun.
  note "$(head -1 "$build/BUNDLE")"
  [[ -x $gloo_bin ]] || gloo_missing="the bundle has no peers/gloo-allreduce"
  mpi_bin=$tmp/mpi-allreduce
  if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    mpi_missing="no mpicc and mpirun on this machine"
  elif ! mpicc -O2 -o "$mpi_bin" bench/peers/mpi_allreduce.c 2>"$tmp/mpicc.err"; then
    tail -n 5 "$tmp/mpicc.err" >&2
    mpi_missing="mpicc failed to build bench/peers/mpi_allreduce.c"
  fi
else
  peer_setup=(bash bench/setup-peers.sh "$build")
  ((smoke)) && peer_setup=(bash bench/setup-peers.sh --no-install "$build")
  note "building the peers (${peer_setup[*]})"
  run_limit=3600 run "$tmp/setup-peers.log" "$tmp/setup-peers.err" "${peer_setup[@]}"
  peers_rc=$?
  if ((smoke && peers_rc == 3)); then
    peers_missing=$(tail -n 1 "$tmp/setup-peers.err")
  elif ((peers_rc)); then
    tail -n 15 "$tmp/setup-peers.log" "$tmp/setup-peers.err" >&2
    note "bench/setup-peers.sh failed: gloo, mpi-shm and mpi-tcp are marked failed"
    peers_built=0
  fi
fi

# torch lives in Debian's python3 (python3-torch); another python3 may come first in PATH.
torch_python=
for py in /usr/bin/python3 python3; do
  if "$py" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
    torch_python=$py; break
  fi
done

# Which systems run at all.
active=()
skipped=""
for s in $systems; do
  case $s in
    torch-gloo)
      if [[ -n $torch_python ]]; then active+=("$s")
      elif ((smoke)); then
        note "smoke: partly skipped: torch-gloo: no python3 with torch.distributed (gloo) found"
        skipped+="torch-gloo (no python3 with torch.distributed gloo); "
      elif ((systems_given)); then
        active+=("$s") # asked for by name: its rows fail, saying why
      else
        note "skipping torch-gloo: no python3 with torch.distributed (gloo) found"
        skipped+="torch-gloo (no python3 with torch.distributed gloo); "
      fi ;;
    gloo|mpi-shm|mpi-tcp)
      if [[ -n $peers_missing ]]; then
        note "smoke: partly skipped: $s: $peers_missing"
        skipped+="$s (its packages are not installed); "
      elif [[ $s == gloo && -n $gloo_missing ]] && ((smoke)); then
        note "smoke: partly skipped: $s: $gloo_missing"
        skipped+="$s ($gloo_missing); "
      elif [[ $s == mpi-* && -n $mpi_missing ]] && ((!systems_given || smoke)); then
        # From a bundle, MPI runs where the machine has it; named in --systems, it fails.
        note "skipping $s: $mpi_missing"
        skipped+="$s ($mpi_missing); "
      else active+=("$s"); fi ;;
    *) active+=("$s") ;;
  esac
done
if ((!${#active[@]})); then
  ((smoke)) && skip_smoke "none of the systems ($systems) can run here: ${skipped%; }"
  note "no system to run"; exit 1
fi

need_node=0
for s in "${active[@]}"; do [[ $s == rackweave-* ]] && ((rw_built)) && need_node=1; done
address=
node_fabric=() fabric_said=0
[[ " ${active[*]} " == *" rackweave-fabric "* ]] && node_fabric=(--fabric tcp)
if ((need_node)); then
  "$build/apps/rw-node" --role rack-agg --open-jobs --listen 127.0.0.1:0 --port-file "$tmp/port" \
    --log-level info "${node_fabric[@]}" ${node_args[@]+"${node_args[@]}"} 2>"$tmp/node.log" &
  node_pid=$!
  wait_for_port "$tmp/port" "$node_pid" ||
    { note "rw-node did not start"; cat "$tmp/node.log" >&2; exit 1; }
  address=$(<"$tmp/port")
  # How the node placed itself (pollers, shards): the figures depend on it.
  note "node: $(grep -m1 -o 'pollers: .*' "$tmp/node.log"); $(grep -m1 -o 'shards=[0-9]*' "$tmp/node.log")"
fi


# stats FILE W: reads "RANK r t1 .. tN" lines (and VERIFIED) and prints "median p90",
# the slowest rank per iteration, percentiles as rw-bench computes them.
stats() {
  python3 - "$1" "$2" "$iters" <<'PY'
import math, sys
path, w, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ranks, verified = {}, 0
for line in open(path):
    f = line.split()
    if f and f[0] == "RANK":
        ranks[int(f[1])] = [float(x) for x in f[2:]]
    elif f[:2] == ["VERIFIED", "1"]:
        verified += 1
if sorted(ranks) != list(range(w)) or any(len(t) != n for t in ranks.values()) or not verified:
    sys.exit(f"expected {w} ranks x {n} times and VERIFIED 1, got ranks {sorted(ranks)}")
if not all(math.isfinite(x) and x > 0 for t in ranks.values() for x in t):
    sys.exit(f"a time is not a positive number: {ranks}")
steps = sorted(max(t[i] for t in ranks.values()) for i in range(n))
pct = lambda p: steps[min(max(math.ceil(p * n) - 1, 0), n - 1)]
print(f"{pct(0.5):.3f} {pct(0.9):.3f}")
PY
}

# node_cpu: the node's user + sys CPU time so far, in clock ticks.
node_cpu() { awk '{print $14 + $15}' "/proc/$node_pid/stat" 2>/dev/null || echo 0; }

# measure SYSTEM W BYTES LABEL: sets res="median p90" on success; on failure returns non-zero
# after saying why on stderr. (Not called in a subshell, so the traps see run_pids.)
measure() {
  local sys=$1 w=$2 b=$3 label=$4 out=$tmp/$1.$2.$3.out err=$tmp/$1.$2.$3.err rc=0 line st
  res='' cpu='' threads=''
  if ((!peers_built)) && [[ $sys == gloo || $sys == mpi-* ]]; then
    echo "not measured: bench/setup-peers.sh (the peer build) failed" >"$err"
    note "$sys W=$w S=$label failed: $(<"$err")"
    return 1
  fi
  if [[ ($sys == gloo && -n $gloo_missing) || ($sys == mpi-* && -n $mpi_missing) ||
        ($sys == torch-gloo && -z $torch_python) ]]; then
    local why=$gloo_missing
    [[ $sys == mpi-* ]] && why=$mpi_missing
    [[ $sys == torch-gloo ]] && why="no python3 with torch.distributed (gloo) found"
    echo "not measured: $why" >"$err"
    note "$sys W=$w S=$label failed: $(<"$err")"
    return 1
  fi
  case $sys in
    rackweave-tcp|rackweave-shm|rackweave-fabric)
      if ((!rw_built)); then
        echo "not measured: apps/scripts/setup.sh (the RackWeave build) failed" >"$err"
        rc=1
      else
        local extra=() cpu0
        [[ $sys == rackweave-shm ]] && extra=(--transport shm)
        if [[ $sys == rackweave-fabric ]]; then
          extra=(--transport fabric)
          ((fabric_said++)) || note "node: $(grep -m1 -o 'fabric endpoints: .*' "$tmp/node.log")"
        fi
        cpu0=$(node_cpu)
        python3 bench/lib/node_threads.py snap "$node_pid" "$tmp/threads.0" 2>/dev/null
        local wall0=$EPOCHREALTIME
        run "$out" "$err" "$build/apps/rw-bench" comm --connect "$address" --workers "$w" \
          --bytes "$b" --iters "$iters" --warmup "$warmup" --json \
          --timeout-s $((run_timeout - 10 > 0 ? run_timeout - 10 : run_timeout)) "${extra[@]}" \
          ${bench_args[@]+"${bench_args[@]}"} || rc=$?
        if ((rc == 0)); then
          line=$(grep -m1 '^{' "$out")
          res=$(python3 -c 'import json, math, sys
d = json.loads(sys.argv[1]); m, p = d["median_ms"], d["p90_ms"]
assert all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in (m, p)), d
print("%.3f %.3f %s" % (m, p, "true" if d.get("verified") is True else "false"))' "$line" 2>>"$err") || rc=1
          # Where the node's time went, thread by thread (pollers, shards), for the log.
          python3 bench/lib/node_threads.py snap "$node_pid" "$tmp/threads.1" 2>/dev/null &&
            threads=$(python3 bench/lib/node_threads.py diff "$tmp/threads.0" "$tmp/threads.1" \
              "$(python3 -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' \
                 "$wall0" "$EPOCHREALTIME")")
          # CPU ns per byte through the node: 2 x W x S per iteration, warm-up included.
          ((rc == 0)) && cpu=$(python3 -c 'import sys, os
t0, t1, w, b, n = map(int, sys.argv[1:6]); hz = os.sysconf("SC_CLK_TCK")
print("%.3f" % ((t1 - t0) / hz * 1e9 / (2 * w * b * n)))' "$cpu0" "$(node_cpu)" "$w" "$b" \
            $((iters + warmup)))
        fi
      fi ;;
    gloo)
      mkdir -p "$tmp/store.$w.$b"
      local pids=() r
      for ((r = 0; r < w; r++)); do
        timeout -k 10 "$run_timeout" "$gloo_bin" --rank "$r" --size "$w" \
          --bytes "$b" --iters "$iters" --warmup "$warmup" --store "$tmp/store.$w.$b" \
          >"$out.$r" 2>"$err.$r" </dev/null &
        pids+=($!)
      done
      run_pids=("${pids[@]}")
      for r in "${!pids[@]}"; do
        wait "${pids[$r]}"; st=$?
        if ((st && !rc)); then
          rc=$st
          kill -TERM "${pids[@]}" 2>/dev/null   # one rank failed: stop the rest
        fi
      done
      run_pids=()
      cat "$out".* >"$out"; cat "$err".* >"$err"
      rm -rf "$tmp/store.$w.$b" ;;
    torch-gloo)
      run "$out" "$err" env OMP_NUM_THREADS=1 "$torch_python" bench/peers/torch_allreduce.py \
        --size "$w" --bytes "$b" --iters "$iters" --warmup "$warmup" \
        --timeout-s $((run_timeout - 10 > 0 ? run_timeout - 10 : run_timeout)) || rc=$? ;;
    mpi-shm|mpi-tcp)
      local mca=()
      # shellcheck disable=SC2054 # tcp,self is one MCA value
      [[ $sys == mpi-tcp ]] &&
        mca=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo)
      run "$out" "$err" mpirun --allow-run-as-root --oversubscribe -np "$w" "${mca[@]}" \
        "$mpi_bin" --bytes "$b" --iters "$iters" --warmup "$warmup" || rc=$? ;;
  esac
  if ((rc == 0)) && [[ $sys != rackweave-* ]]; then
    res=$(stats "$out" "$w" 2>>"$err") || rc=1
  fi
  if ((rc != 0)); then
    ((rc == 124 || rc == 137)) && note "$sys W=$w S=$label: timed out after ${run_timeout}s"
    note "$sys W=$w S=$label failed (exit $rc):"
    tail -5 "$err" | sed 's/^/    /' >&2
    return 1
  fi
}

say "peers: ${active[*]}; workers: $workers; bytes: $sizes; $iters iterations after $warmup warm-up"
: >"$tmp/results.jsonl"

# The loopback ceiling: one iperf3 stream, client and server on 127.0.0.1.
iperf_free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
if [[ " ${active[*]} " == *" rackweave-tcp "* ]]; then
  if command -v iperf3 >/dev/null; then
    iperf_port=$(iperf_free_port)
    iperf_secs=3
    ((smoke)) && iperf_secs=1
    timeout -k 5 60 iperf3 --server --one-off --bind 127.0.0.1 --port "$iperf_port" \
      >"$tmp/iperf3-server.log" 2>&1 </dev/null &
    iperf_server=$!
    gbps=
    for _ in {1..50}; do # until the server listens
      if run_limit=60 run "$tmp/iperf3.json" "$tmp/iperf3.err" iperf3 --client 127.0.0.1 \
           --port "$iperf_port" --time "$iperf_secs" --json; then
        gbps=$(python3 -c 'import json, math, sys
d = json.load(open(sys.argv[1])); g = d["end"]["sum_received"]["bits_per_second"] / 1e9
assert math.isfinite(g) and g > 0, g
print("%.3f" % g)' "$tmp/iperf3.json" 2>>"$tmp/iperf3.err") && break
      fi
      grep -q "Connection refused" "$tmp/iperf3.json" "$tmp/iperf3.err" 2>/dev/null || break
      sleep 0.1
    done
    stop_pids "$iperf_server"
    iperf_server=
    if [[ -n $gbps ]]; then
      note "iperf3: one loopback TCP stream, ${iperf_secs} s: $gbps Gbit/s"
      line="{\"system\":\"iperf3\",\"gbps\":$gbps}"
    else
      note "iperf3 failed:"; tail -n 5 "$tmp/iperf3.err" "$tmp/iperf3.json" >&2
      line="{\"system\":\"iperf3\",\"gbps\":null,\"error\":\"failed\"}"
    fi
    echo "$line" >>"$tmp/results.jsonl"
    ((json)) && echo "$line"
  elif ((smoke)); then
    note "smoke: partly skipped: iperf3 (not installed; bash bench/setup-peers.sh installs it)"
    skipped+="iperf3 (not installed); "
  else
    note "skipping the loopback ceiling: iperf3 is not installed (bash bench/setup-peers.sh)"
    skipped+="iperf3 (not installed); "
  fi
fi
for w in $workers; do
  for s in $sizes; do
    b=$(to_bytes "$s")
    for sys in "${active[@]}"; do
      t0=$(date +%s)
      if measure "$sys" "$w" "$b" "$s"; then
        read -r med p90 verified <<<"$res"
        # rackweave rows: whether rw-bench checked every result bitwise (--bench-args
        # --verify; a mismatch fails the row); the peers check theirs always.
        line="{\"system\":\"$sys\",\"workers\":$w,\"bytes\":$b,\"median_ms\":$med,\"p90_ms\":$p90${cpu:+,\"node_cpu_ns_per_byte\":$cpu}${verified:+,\"verified\":$verified}}"
        note "$sys W=$w S=$s: median $med ms, p90 $p90 ms${cpu:+, node CPU $cpu ns/byte} ($(($(date +%s) - t0)) s)"
        [[ -n $threads ]] && note "  node threads (CPU s over the run, % of its wall time): $threads"
      else
        line="{\"system\":\"$sys\",\"workers\":$w,\"bytes\":$b,\"median_ms\":null,\"p90_ms\":null,\"error\":\"failed\"}"
      fi
      echo "$line" >>"$tmp/results.jsonl"
      ((json)) && echo "$line"
    done
  done
done
elapsed=$(($(date +%s) - started))

machine="$(machine_facts); load average $load_start at the start, $(load_avg) at the end"
python3 - "$tmp/results.jsonl" "$tmp/table.txt" "$tmp/section.md" "${active[*]}" "$workers" \
  "$sizes" "$invocation" "$machine" "$iters" "$warmup" "$elapsed" "$skipped" "$section" \
  "$title" <<'PY'
import datetime, json, sys
(res_path, txt_path, md_path, systems, workers, sizes, invocation, machine, iters, warmup,
 elapsed, skipped, section, title) = sys.argv[1:]
systems, workers, sizes = systems.split(), workers.split(), sizes.split()

def to_bytes(t):
    for suffix, m in (("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("K", 1 << 10),
                      ("M", 1 << 20), ("G", 1 << 30), ("B", 1)):
        if t.endswith(suffix):
            return int(t[: -len(suffix)]) * m
    return int(t)

res = {}
iperf_gbps = None
for line in open(res_path):
    d = json.loads(line)
    if d["system"] == "iperf3":
        iperf_gbps = d.get("gbps")
        continue
    res[(d["system"], d["workers"], d["bytes"])] = d
rw = [s for s in systems if s.startswith("rackweave-")]
peers = [s for s in systems if not s.startswith("rackweave-")]
ratio_cols = [f"{p}/rw" for p in peers]
if "rackweave-tcp" in systems and "mpi-tcp" in systems:
    ratio_cols.append("rw-tcp/mpi-tcp")
head = ["workers", "bytes"] + [f"{s} ms" for s in systems] + ratio_cols + ["notes"]
rows, target_lines, cell_lines, ceiling_lines, cell_json = [], [], [], [], []
for w in workers:
    for s in sizes:
        b = to_bytes(s)
        med = {x: (res.get((x, int(w), b)) or {}).get("median_ms") for x in systems}
        failed = [x for x in systems if med[x] is None]
        rw_ok = [med[x] for x in rw if med[x] is not None]
        best_rw = min(rw_ok) if rw_ok else None
        row = [w, s] + [f"{med[x]:.3f}" if med[x] is not None else "FAIL" for x in systems]
        for p in peers:
            row.append(f"{med[p] / best_rw:.2f}" if med[p] is not None and best_rw else "-")
        if "rw-tcp/mpi-tcp" in ratio_cols:
            a, m = med["rackweave-tcp"], med["mpi-tcp"]
            row.append(f"{a / m:.2f}" if a is not None and m else "-")
        row.append("FAILED: " + ", ".join(failed) if failed else "")
        rows.append(row)
        peer_ok = [med[p] for p in peers if med[p] is not None]
        if best_rw and peer_ok:
            best_peer = min(peer_ok)
            bp = [p for p in peers if med[p] == best_peer][0]
            cell = {"system": "cell", "workers": int(w), "bytes": b,
                    "best_rackweave": [x for x in rw if med[x] == best_rw][0],
                    "best_rackweave_ms": best_rw, "best_peer": bp, "best_peer_ms": best_peer,
                    "ratio": round(best_rw / best_peer, 4)}
            if med.get("rackweave-tcp") is not None and med.get("gloo"):
                cell["tcp_vs_gloo"] = round(med["rackweave-tcp"] / med["gloo"], 4)
            cell_json.append(json.dumps(cell))
            cell_lines.append(
                f"- W = {w}, {s}: {best_rw / best_peer:.3f} ({best_rw:.3f} ms against {bp}'s "
                f"{best_peer:.3f} ms): **{'met' if best_rw <= 0.8 * best_peer else 'not met'}**")
        if w == "4" and b == 64 << 20:
            a = med.get("rackweave-tcp")
            if a is not None and iperf_gbps:
                g = 2 * int(w) * b * 8 / (a / 1e3) / 1e9
                ceiling_lines.append(
                    f"- rackweave-tcp >= 0.85 x one iperf3 loopback stream: 2 x W x S = "
                    f"{2 * int(w) * b >> 20} MiB through the node in {a:.3f} ms, {g:.2f} Gbit/s, "
                    f"against {iperf_gbps:.2f} Gbit/s: {g / iperf_gbps:.2f}x: "
                    f"**{'met' if g >= 0.85 * iperf_gbps else 'not met'}**")
            else:
                ceiling_lines.append("- rackweave-tcp >= 0.85 x one iperf3 loopback stream: "
                                     "not measured (rackweave-tcp or iperf3 did not run)")
            peer_ok = [med[p] for p in peers if med[p] is not None]
            if best_rw and peer_ok:
                best_peer = min(peer_ok)
                bp = [p for p in peers if med[p] == best_peer][0]
                ok = best_rw <= 0.8 * best_peer
                target_lines.append(
                    f"- RackWeave's best <= 0.8 x best peer: {best_rw:.3f} ms vs 0.8 x "
                    f"{best_peer:.3f} ms ({bp}) = {0.8 * best_peer:.3f} ms, ratio "
                    f"{best_rw / best_peer:.2f}: **{'met' if ok else 'not met'}**")
            else:
                target_lines.append("- RackWeave's best <= 0.8 x best peer: not measured "
                                    "(a RackWeave system or every peer failed)")
            a, m = med.get("rackweave-tcp"), med.get("mpi-tcp")
            if a is not None and m is not None:
                ok = a <= m
                target_lines.append(
                    f"- rackweave-tcp <= 1.0 x mpi-tcp: {a:.3f} ms vs {m:.3f} ms, ratio "
                    f"{a / m:.2f}: **{'met' if ok else 'not met'}**")
            else:
                target_lines.append("- rackweave-tcp <= 1.0 x mpi-tcp: not measured "
                                    "(not run or failed)")
if not target_lines:
    target_lines = ["- not measured in this run (needs W = 4 at 64MiB)"]

cpu_head = ["workers", "bytes"] + [f"{x} node CPU ns/B" for x in rw]
cpu_rows = []
for w in workers:
    for s in sizes:
        d = [(res.get((x, int(w), to_bytes(s))) or {}).get("node_cpu_ns_per_byte") for x in rw]
        cpu_rows.append([w, s] + [f"{v:.3f}" if v is not None else "-" for v in d])

p90_head = ["workers", "bytes"] + [f"{x} p90" for x in systems]
p90_rows = []
for w in workers:
    for s in sizes:
        d = [(res.get((x, int(w), to_bytes(s))) or {}).get("p90_ms") for x in systems]
        p90_rows.append([w, s] + [f"{v:.3f}" if v is not None else "FAIL" for v in d])

def text_table(head, rows, last_left):
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    return "".join("  ".join(str(c).ljust(widths[i]) if last_left and i == len(head) - 1
                             else str(c).rjust(widths[i]) for i, c in enumerate(r)).rstrip()
                   + "\n" for r in [head] + rows)

with open(txt_path, "w") as f:
    f.write(text_table(head, rows, True))
    f.write("\np90 ms per system (slowest rank per iteration):\n")
    f.write(text_table(p90_head, p90_rows, False))

def md_table(head, rows):
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + \
        ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
md = [f"<!-- {section}:begin -->",
      f"## {title}",
      "",
      f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {machine}; every process on this "
      "one machine, over loopback (or shared memory where a system says so).",
      "",
      f"Command: `{invocation}` ({iters} timed iterations after {warmup} warm-up per run; "
      f"the whole run took {elapsed} s).",
      "",
      "W processes each hold S bytes of float32 and all end with the elementwise sum. Per "
      "iteration the slowest rank's time counts; the table gives the median over the "
      "iterations (ms), as `rw-bench comm` does, and each peer's median divided by "
      "RackWeave's best median (`peer/rw`: above 1 means RackWeave is faster). Peers verify "
      "every element of every result (exact small-integer sums). A load average above the "
      "core count means other work competed for the cores; the MPI rows move most under "
      "such load (MPI ranks poll for progress, yielding when oversubscribed).",
      "",
      "- `rackweave-tcp`: `rw-bench comm --connect ADDR --workers W --bytes S --iters N "
      "--warmup K --json` through one `rw-node --role rack-agg` on 127.0.0.1 (optimizer "
      "`sum`)",
      "- `rackweave-shm`: the same with `--transport shm`",
      "- `rackweave-fabric`: the same with `--transport fabric`, the node started with "
      "`--fabric tcp`: libfabric's tcp provider (ofi_rxm over sockets) on loopback, so "
      "this measures the fabric path's software overhead beside rackweave-tcp, not RDMA",
      "- RackWeave rows run without `--verify` (rw-bench checks outside the timed call but "
      "with no barrier, so a checking worker would delay the others' next step; "
      "`bench/comm.sh` verifies the same path bitwise) and with no barrier between "
      "iterations (each worker's time starts once its own gradient is ready)",
      "- `gloo`: `build/peers/gloo-allreduce`, Gloo (Debian 0.0~git20220518) TCP transport "
      "on 127.0.0.1, FileStore rendezvous, ring all-reduce, barrier before each iteration",
      "- `torch-gloo`: `bench/peers/torch_allreduce.py`, torch.distributed gloo backend "
      "(tcp:// init), `dist.all_reduce(SUM)`, 1 thread per process, barrier before each "
      "iteration",
      "- `mpi-shm`: `mpirun --allow-run-as-root --oversubscribe -np W "
      "build/peers/mpi-allreduce`, OpenMPI 4.1 defaults (here pml ob1 over the vader "
      "shared-memory btl), MPI_Barrier before each MPI_Allreduce",
      "- `mpi-tcp`: the same with `--mca pml ob1 --mca btl tcp,self --mca "
      "btl_tcp_if_include lo`",
      "",
      *([f"Not run: {skipped.strip().rstrip(';')}.", ""] if skipped.strip() else []),
      "Median ms:", ""]
md += md_table(head, rows)
md += ["", "p90 ms:", ""] + md_table(p90_head, p90_rows)
if rw:
    md += ["", "The node's CPU time (user + sys, /proc) per byte through it (2 x W x S per "
           "iteration, warm-up included; every process shares the same cores):", ""]
    md += md_table(cpu_head, cpu_rows)
if iperf_gbps:
    md += ["", f"Loopback ceiling: one iperf3 TCP stream (`iperf3 --client 127.0.0.1 --json`, "
           f"same run) carried {iperf_gbps:.2f} Gbit/s."]
md += ["", "RackWeave's best against the best peer, every cell (target: <= 0.8):", "",
       *(cell_lines or ["- not measured (a RackWeave system or every peer failed)"])]
if section == "scale":
    # Issue 36's targets for a many-core host: rackweave-tcp against Gloo's ring.
    scale_lines = []
    for w, limit in (("4", 1.0), ("8", 1.0), ("14", 1.3)):
        if w not in workers or "64MiB" not in sizes:
            continue
        d = lambda x: (res.get((x, int(w), 64 << 20)) or {}).get("median_ms")
        a, g = d("rackweave-tcp"), d("gloo")
        if a is not None and g is not None:
            scale_lines.append(f"- W = {w}, 64MiB: rackweave-tcp / gloo = {a:.3f} / {g:.3f} ms = "
                               f"{a / g:.2f} (target <= {limit}): "
                               f"**{'met' if a <= limit * g else 'not met'}**")
        else:
            scale_lines.append(f"- W = {w}, 64MiB: rackweave-tcp / gloo: not measured")
    md += ["", "rackweave-tcp against Gloo's ring:", "",
           *(scale_lines or ["- not measured in this run (needs W = 4, 8 or 14 at 64MiB)"])]
else:
    md += ["", "Targets at W = 4, S = 64MiB:", "", *target_lines, *ceiling_lines]
md += [f"<!-- {section}:end -->"]
open(md_path, "w").write("\n".join(md) + "\n")
if section == "scale":  # scale.sh --json: a line per (W, S) with its ratios, after the runs'
    open(md_path + ".cells", "w").write("".join(c + "\n" for c in cell_json))
PY
report_rc=$?
((json)) && [[ -f $tmp/section.md.cells ]] && cat "$tmp/section.md.cells"

say ""
say "command: $invocation"
say "settings: workers \"$workers\", bytes \"$sizes\", iters $iters, warmup $warmup, systems \"${active[*]}\", timeout ${run_timeout}s per run"
say "median ms per system (slowest rank per iteration); peer/rw = peer median / RackWeave's best median"
if ((report_rc == 0)); then
  cat "$tmp/table.txt" >&3
  say ""
  say "targets:"
  sed -n "/^Targets at/,/$section:end/{/^- /p}" "$tmp/section.md" >&3
  sed -n "/^rackweave-tcp against Gloo/,/$section:end/{/^- /p}" "$tmp/section.md" >&3
  say "RackWeave's best against the best peer (target <= 0.8):"
  sed -En "/^RackWeave's best against/,/^(Targets at|rackweave-tcp against)/{/^- /p}" "$tmp/section.md" >&3
else
  note "could not build the report"; exit 1
fi
say "took ${elapsed} s"

if ((smoke)) && grep -q '"error"' "$tmp/results.jsonl"; then
  note "smoke: a system failed (see above)"; exit 1
fi
((no_results)) && exit 0
results=bench/RESULTS.md
update_results "$section" "$tmp/section.md" || { note "could not write $results"; exit 1; }
((smoke)) || say "written: $results"
