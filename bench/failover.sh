#!/usr/bin/env bash
# Failures during training, on this machine: a cluster on 127.0.0.1 (a --role
# coordinator with a state database, rack-agg nodes n0 in rack a, n1 in rack b and n2
# in rack c, which only the drain and the join use), one
# BSP job of W workers over both nodes (flat), the test fixture's tensors plus one of
# --bytes, --steps steps. First a fault-free run; then one run per fault, each a fresh
# job, whose every worker's final parameters must be bitwise those of the fault-free
# run (cmp of the raw float32 files):
#   worker        kill -9 a worker at clock --at, start it again with the same rank
#   shard         rw.inject{kill = 'shard'} on n0 at clock --at
#   link          rw.inject{kill = 'link', rank = 1} on n0 at clock --at: n0 closes rank
#                 1's connections as a cut link would; the worker says hello again
#   coordinator   kill -9 the coordinator at clock --at, start it again (same state db)
#   restore       rw.checkpoint at clock --at, then restore it on one node (not two) and
#                 run the rest of the steps there
#   drain         rw.node_drain('n2') at clock --at, the job over all three nodes: n2's
#                 chunks move with their state to n0 and n1; no worker restarts
#   join          rw.node_join('n2') at clock --at (after the drain), the job over n0 and
#                 n1: the chunks the ring with n2 homes there (and their replicas) move
#                 onto it with their state; the workers connect to n2, no restarts
#   node          kill -9 node n1 at clock --at: the coordinator starts the job again on
#                 n0 from its newest periodic checkpoint (checkpoint_every 5); the
#                 workers are started again there (as a launcher would)
#   takeover      n1 started again, then kill -9 n1 at clock --at under a job with
#                 replicas = 1: the replicas on n0 take over; no worker restarts
# recovery_ms: from the kill (shard, link: the shell's clock as it asks for the fault)
# to the first step every rank completed after it (the step in flight, i.e. every rank's
# clock past the highest clock any rank had; worker, shard, link and takeover: the
# fault lands mid-step at rank 0's hold, timed by the workers' --clock-file); for the
# coordinator, to the restarted coordinator answering rw.job_status for the job; for
# restore, from rw.job_create{restore = ...} to the restored job's first step done.
# Also the cost of what node failover needs when nothing fails: the fault-free job
# (replicas = 0) with checkpoint_every 5, and with replicas = 1, against without.
# Prints one JSON line per fault with --json (the table on stderr), and one per cost
# ({"cost":"replicas","ratio":...}, {"cost":"checkpoint_every",...}); writes
# bench/RESULTS.md (the failover section).
#
#   bash bench/failover.sh [--workers 4] [--bytes 16MiB] [--steps 40] [--at 10]
#                          [--chunk-bytes 262144] [--repeat 3] [--cost-only]
#                          [--hog N] [--faults F,...] [--keep-above MS] [--json] [--smoke]
#                          [--build-dir DIR]
#
# --chunk-bytes: the jobs' chunk size (default: a job's default, 256 KiB).
# --repeat N: how many pairs of fault-free runs, without and with replicas, in turn.
# --cost-only: the fault-free runs alone (what checkpoints and replicas cost), printed,
# bench/RESULTS.md left as it is.
# --hog N: N busy processes beside the whole run (one per core: recovery under load, as
# tests/stress.sh runs the tests); its own section, failover-hog.
# --faults F,...: only those faults (after the fault-free runs); bench/RESULTS.md left
# alone. join runs the drain first (it takes the drained node).
# --keep-above MS: a fault whose recovery took longer than MS keeps the run's logs (the
# nodes', the coordinator's, the workers'; files over 1 MiB removed), named at the end:
# an outlier that passes otherwise leaves nothing to find its cause in.
# --smoke (see lib/common.sh): 3 workers, 64 KiB, 12 steps, fault at clock 4.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/.."
common_options "$@"
set -- ${rest[@]+"${rest[@]}"}

workers=4 bytes=16MiB steps=40 at=10 json=0 delay=0 chunk_bytes=262144 cost_only=0 repeat=3 hog=0 faults=
keep_above=
# (Smoke steps are paced, so a fault lands while the job still runs.)
if ((smoke)); then workers=3 bytes=64KiB steps=12 at=4 delay=100 repeat=1; fi
while (($#)); do
  case $1 in
    --workers) workers=$2; shift 2 ;;
    --bytes) bytes=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --at) at=$2; shift 2 ;;
    --chunk-bytes) chunk_bytes=$2; shift 2 ;;
    --json) json=1; shift ;;
    --cost-only) cost_only=1; shift ;;
    --repeat) repeat=$2; shift 2 ;;
    --hog) hog=$2; shift 2 ;;
    --faults) faults=$2; shift 2 ;;
    --keep-above) keep_above=$2; shift 2 ;;
    -h|--help) sed -n 2,54p "$0"; exit 0 ;;
    *) usage_error "unknown option $1" ;;
  esac
done
[[ -z $keep_above || $keep_above =~ ^[0-9]+$ ]] ||
  usage_error "--keep-above takes a number of milliseconds, not $keep_above"
for f in ${faults//,/ }; do
  case $f in worker|shard|link|coordinator|restore|drain|join|node|takeover) ;;
    *) usage_error "--faults takes worker, shard, link, coordinator, restore, drain, join, node, takeover; not $f" ;;
  esac
done
# wants FAULT: --faults names it (or there is no --faults).
wants() { [[ -z $faults || ",$faults," == *",$1,"* ]]; }
[[ $hog =~ ^[0-9]+$ ]] && ((hog <= 64)) || usage_error "--hog takes 0 to 64 busy processes, not '$hog'"
for v in workers steps at chunk_bytes repeat; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || usage_error "--$v must be a positive integer, not '${!v}'"
done
((workers >= 2)) || usage_error "--workers must be at least 2 (a step waits for the others)"
((at + 2 < steps)) || usage_error "--at $at leaves no steps after the fault (--steps $steps)"
check_sizes "$bytes"
elements=$(($(to_bytes "$bytes") / 4))
open_report "$json"

build_tree
tmp=$(mktemp -d)
pids=()
cleanup() { release ${pids[@]+"${pids[@]}"}; }
set_exit_traps cleanup
# --hog N: N busy processes for the whole run, as tests/stress.sh's (recovery under load).
for ((k = 0; k < hog; k++)); do
  python3 -c 'while True: pass' </dev/null >/dev/null 2>&1 &
  pids+=("$!")
done
((hog == 0)) || note "beside $hog busy process(es) (--hog)"
section=failover # in bench/RESULTS.md; a run under --hog has its own
hog_arg=()
((hog == 0)) || { section=failover-hog; hog_arg=(--hog "$hog"); }

node_bin=$build/apps/rw-node
shell_bin=$build/apps/rw-shell
worker_bin=$build/tests/rw-test-worker
# The system clock in ms (the workers' --clock-file lines use it), from bash itself: a
# `date` forked under the CPU hog took tens of ms, inside the time it was measuring.
now_ms() { local us=${EPOCHREALTIME//[!0-9]/}; echo $((us / 1000)); }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

coord_port=$(free_port)
coord=127.0.0.1:$coord_port
coord_pid=
start_coordinator() {
  "$node_bin" --role coordinator --name coord --listen "$coord" --state-db "$tmp/state.db" \
    --checkpoint-root "$tmp" --log-level info >>"$tmp/coord.log" 2>&1 &
  coord_pid=$!
  pids+=("$coord_pid")
}
start_coordinator
node_addr=() node_pid=()
racks=(a b c) # n2 (rack c) serves the drain's job only, and is drained
# start_node I: node nI in its rack (again, after a kill: a new process, a new port).
start_node() {
  local i=$1
  rm -f "$tmp/port$i"
  "$node_bin" --role rack-agg --name "n$i" --rack "${racks[i]}" --listen 127.0.0.1:0 \
    --port-file "$tmp/port$i" --coordinator "$coord" --checkpoint-root "$tmp" --log-level info \
    >>"$tmp/n$i.log" 2>&1 &
  pids+=("$!")
  node_pid[i]=$!
  wait_for_port "$tmp/port$i" "$!" || { note "node n$i did not start"; cat "$tmp/n$i.log" >&2; exit 1; }
  node_addr[i]=$(<"$tmp/port$i")
}
for i in 0 1 2; do start_node "$i"; done
shell() { timeout -k 5 120 "$shell_bin" --connect "$coord" -c "$1"; }
for _ in {1..100}; do
  [[ $(shell 'print(#rw.nodes())' 2>/dev/null) == 3 ]] && break
  sleep 0.1
done
[[ $(shell 'print(#rw.nodes())') == 3 ]] || { note "the nodes did not join"; exit 1; }

# create NAME WHERE: creates the job (the fixture's hyper-parameters); prints the token.
create() {
  shell "print(rw.job_create{name = '$1', workers = $workers, optimizer = 'adam',
         lr = 0.05, momentum = 0.9, weight_decay = 0, chunk_bytes = $chunk_bytes, $2}.token)"
}
# start_worker NAME TOKEN RANK [ARG...]: rank RANK of job NAME, in the background; its
# pid in worker_pid. Ranks alternate between the nodes they say hello to (all at
# $at_node when it is set: the node left after a node fault).
at_node=
start_worker() {
  local name=$1 token=$2 rank=$3; shift 3
  timeout -k 5 600 "$worker_bin" --connect "${at_node:-${node_addr[rank % 2]}}" --job "$name" \
    --rank "$rank" --workers "$workers" --optimizer adam --steps "$steps" --token "$token" \
    --transport tcp --extra-elements "$elements" --chunk-bytes "$chunk_bytes" \
    --out "$tmp/$name.$rank.bin" --clock-file "$tmp/$name.$rank.clocks" \
    --step-delay-ms "$delay" "$@" \
    >>"$tmp/$name.$rank.out" 2>&1 &
  worker_pid=$!
  pids+=("$worker_pid")
}
# wait_workers NAME PID...: every worker ends 0, else its output and fail.
wait_workers() {
  local name=$1 p r=0 rc; shift
  for p; do
    rc=0
    wait "$p" || rc=$?
    if ((rc != 0)); then
      note "$name: a worker (pid $p) ended $rc:"; cat "$tmp/$name".*.out >&2; return 1
    fi
    r=$((r + 1))
  done
}
# clock_max NAME: the highest clock any rank of the job has reached.
clock_max() {
  shell "local m = 0; for _, r in ipairs(rw.job_status('$1').ranks) do
           if r.clock > m then m = r.clock end end; print(m)"
}
# steady_ms NAME: the job's step time once it runs, from clock 2 to the last: the
# slowest rank's, as each worker timed its own steps (rw-test-worker prints it).
steady_ms() {
  local ms
  ms=$(sed -n 's/^rank [0-9]*: steps [0-9]*\.\.[0-9]* took \([0-9.e+]*\) ms per step$/\1/p' \
    "$tmp/$1".*.out | sort -g | tail -n 1)
  [[ -n $ms ]] || { note "$1: no worker printed its step time"; return 1; }
  awk -v m="$ms" 'BEGIN {printf "%.1f", m}'
}
# same_as_baseline NAME: every rank's final parameters bitwise the fault-free run's.
# Says which rank differs, if one does (a bitwise mismatch is never noise).
same_as_baseline() {
  local r
  for ((r = 0; r < workers; r++)); do
    if ! cmp -s "$tmp/$1.$r.bin" "$tmp/baseline.0.bin"; then
      note "$1: rank $r's parameters differ from the fault-free run's: $(cmp "$tmp/$1.$r.bin" "$tmp/baseline.0.bin" 2>&1)"
      return 1
    fi
  done
}

results=()
# report FAULT VERIFIED RECOVERY_MS STEPS: one result line.
report() {
  results+=("$1 $2 $3 $4")
  if [[ -n $keep_above && $3 =~ ^[0-9]+$ ]] && (($3 > keep_above)); then
    keep_logs_because="${keep_logs_because:+$keep_logs_because; }$1 recovered in $3 ms (over --keep-above $keep_above)"
  fi
  if ((json)); then
    printf '{"fault":"%s","verified":%s,"recovery_ms":%s,"steps":%s,"workers":%s,"bytes":%s}\n' \
      "$1" "$2" "$3" "$4" "$workers" "$((elements * 4))"
  fi
  say "$(printf '%-12s verified=%-5s recovery_ms=%-6s steps=%s' "$1" "$2" "$3" "$4")"
}

# run_job NAME WHERE FAULT: the job with FAULT at clock --at (FAULT "none": fault-free);
# sets recovery (ms). Not in a subshell: the processes it starts are this shell's.
# A fault must land while its job still runs: on a loaded machine the job (a smoke's
# 12 steps of 100 ms) once ended before the shell had injected it, and the run then
# tested nothing (a join that moved no job: "join verified=false"). So rank 0 holds
# before step --at + 2 until the fault is in: the others train on up to that step, and
# the job cannot end first. Its hold adds at most one poll (20 ms) to the recovery
# measured. A drain or a join holds every rank there: their move first settles the job
# at a clock boundary (no step begun), which a step the other ranks had begun without
# rank 0 would never reach.
# recovered_at NAME CLOCK: when every rank of job NAME had ended a step of clock CLOCK
# or later (ms, the system clock), from the workers' --clock-file lines (each rank's
# first such line: a restarted worker goes on after the step it had pushed, so its first
# is the first step it pushed again); empty if a rank never did.
recovered_at() {
  local r latest=0 t
  for ((r = 0; r < workers; r++)); do
    t=$(awk -v c="$2" '$1 >= c { print $2; exit }' "$tmp/$1.$r.clocks" 2>/dev/null)
    [[ $t =~ ^[0-9]+$ ]] || return 0
    ((t > latest)) && latest=$t
  done
  echo "$latest"
}
recovery=0
run_job() {
  local name=$1 where=$2 fault=$3 token ps=() r t0 high hold=() next= waiter=0 injected=0
  recovery=0
  token=$(create "$name" "$where")
  if [[ $fault != none ]]; then
    hold=(--pause-at $((at + 2 < steps ? at + 2 : steps - 1)) --resume-file "$tmp/$name.go"
          --pause-limit-ms 300000)
  fi
  for ((r = 0; r < workers; r++)); do
    if ((r == 0)) || [[ $fault == drain || $fault == join ]]; then
      start_worker "$name" "$token" "$r" ${hold[@]+"${hold[@]}"}
    else
      start_worker "$name" "$token" "$r"
    fi
    ps+=("$worker_pid")
  done
  if [[ $fault != none ]]; then

    case $fault in worker|shard|link|takeover) waiter=1 ;; esac
    if ((waiter)); then
      # The fault lands mid-step at a known clock: every rank has done the steps up to
      # rank 0's hold, the others have pushed the next step, which cannot end without
      # rank 0, held until the fault is in. Recovery: to that step ended on every rank,
      # as the workers wrote it (--clock-file; no shell's start or polling in it).
      shell "rw.wait('$name', ${hold[1]}, {timeout = 300, interval = 0.02})" >/dev/null
      next=$((hold[1] + 1))
    else
      shell "rw.wait('$name', $at, {timeout = 300, interval = 0.02})" >/dev/null
      high=$(clock_max "$name")
      # The next clock after the fault; on a loaded machine the shell may only have
      # seen the clock once the last step was done (then there is none to wait for).
      next=$((high + 1))
      ((next > steps)) && next=$steps
    fi
    if [[ $fault == node ]]; then
      # The node is killed once a periodic checkpoint is whole (its MANIFEST written,
      # every node's part in): under a CPU hog the checkpoints lagged the steps by
      # seconds, n1 died before any was whole, and the job failed, rightly, with
      # nothing to start again from (rank 0's hold keeps the job from ending meanwhile).
      local _
      for _ in {1..1200}; do
        compgen -G "$tmp/periodic-node/clock-*/MANIFEST" >/dev/null && break
        sleep 0.1
      done
      compgen -G "$tmp/periodic-node/clock-*/MANIFEST" >/dev/null ||
        { note "node: no periodic checkpoint of job $name was whole after 120 s"; exit 1; }
    fi
    # The worker fault kills rank 1 and timeout, its parent. Found before t0: that search
    # (a pgrep, forked under the hog) is the bench's, not the recovery's.
    local victims=
    [[ $fault == worker ]] && victims="$(pgrep -P "${ps[1]}" || true) ${ps[1]}"
    t0=$(now_ms)
    case $fault in
      worker)
        kill -KILL $victims 2>/dev/null || true
        wait "${ps[1]}" 2>/dev/null || true
        : >"$tmp/$name.go" # no forked touch: rank 0 polls for it
        start_worker "$name" "$token" 1
        ps[1]=$worker_pid ;;
      shard|link)
        # t0 is the shell's time just before it asks (not its start); the fault is in
        # once answered, and rank 0 goes on at once.
        local what="kill = 'shard', node = 'n0', shard = 0"
        [[ $fault == shard ]] || what="kill = 'link', node = 'n0', rank = 1"
        shell "print(rw.time_ms()); print(rw.inject{job = '$name', $what});
               io.open('$tmp/$name.go', 'w'):close()" >"$tmp/$fault.out"
        t0=$(head -n 1 "$tmp/$fault.out")
        injected=1 ;;
      drain)
        # Synchronous: answered once the job's chunks have moved off n2.
        shell "print(rw.node_drain('n2'))" >"$tmp/drain.out" ;;
      join)
        # Synchronous: answered once the job's chunks have moved onto n2.
        shell "print(rw.node_join('n2'))" >"$tmp/join.out" ;;
      takeover)
        # The replicas of n1's chunks (on n0) take over; the workers go on.
        kill -KILL "${node_pid[1]}"; wait "${node_pid[1]}" 2>/dev/null || true ;;
      node)
        kill -KILL "${node_pid[1]}"; wait "${node_pid[1]}" 2>/dev/null || true
        touch "$tmp/$name.go" # rank 0 too must hear that its node is gone
        # Told why, the workers stop; a launcher starts them again, at the node left,
        # once the coordinator has started the job there from its checkpoint.
        for r in "${ps[@]}"; do wait "$r" 2>/dev/null || true; done
        for _ in {1..300}; do
          [[ $(shell "print(#rw.job_status('$name').nodes)" 2>/dev/null) == 1 ]] && break
          sleep 0.05
        done
        at_node=${node_addr[0]} ps=()
        for ((r = 0; r < workers; r++)); do start_worker "$name" "$token" "$r"; ps+=("$worker_pid"); done ;;
      coordinator)
        kill -KILL "$coord_pid"; wait "$coord_pid" 2>/dev/null || true
        start_coordinator
        for _ in {1..300}; do
          shell "rw.job_status('$name')" >/dev/null 2>&1 && break
          sleep 0.05
        done ;;
    esac
    ((injected)) || : >"$tmp/$name.go" # the fault is in: rank 0 goes on
    if [[ $fault == coordinator ]]; then
      recovery=$(($(now_ms) - t0))
    elif ((waiter)); then
      : # timed below, from the workers' clock files, once they are done
    else
      shell "rw.wait('$name', $next, {timeout = 300, interval = 0.01})" >/dev/null
      recovery=$(($(now_ms) - t0))
    fi
  fi
  wait_workers "$name" "${ps[@]}"
  if ((waiter)); then
    local done_ms
    done_ms=$(recovered_at "$name" "$next")
    [[ -n $done_ms ]] || { note "$fault: a rank never ended step $next (its --clock-file)"; exit 1; }
    recovery=$((done_ms - t0))
  fi
}

# The fault-free run (no replicas) and, in turn with it, the same job with replicas = 1
# (each chunk's home sends the step's sum to the chunk's replica and waits for its ack):
# --repeat pairs, each pair's ratio; the cost is their median (the machine is shared).
flat="racks = {'a', 'b'}, reduction = 'flat'"
plain_runs=() replicated_runs=() pair_costs=() replicated_ok=true
for ((i = 1; i <= repeat; i++)); do
  plain=baseline replicated=replicated
  ((i == 1)) || plain=baseline$i replicated=replicated$i
  t0=$(now_ms)
  run_job "$plain" "$flat, replicas = 0" none
  ((i > 1)) || run_ms=$(awk -v d=$(($(now_ms) - t0)) -v n="$steps" 'BEGIN {printf "%.1f", d / n}')
  same_as_baseline "$plain" || { note "$plain: not bitwise the first fault-free run"; exit 1; }
  run_job "$replicated" "$flat, replicas = 1" none
  same_as_baseline "$replicated" || replicated_ok=false
  plain_runs+=("$(steady_ms "$plain")")
  replicated_runs+=("$(steady_ms "$replicated")")
  pair_costs+=("$(awk -v a="${replicated_runs[-1]}" -v b="${plain_runs[-1]}" 'BEGIN {printf "%.3f", a / b}')")
  say "pair $i: replicas = 0 ${plain_runs[-1]} ms per step, replicas = 1 ${replicated_runs[-1]}: ${pair_costs[-1]}x"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
step_ms=$(median "${plain_runs[@]}")
replicated_ms=$(median "${replicated_runs[@]}")
replica_cost=$(median "${pair_costs[@]}")
check_numbers "the fault-free step time" "$run_ms" "$step_ms"
check_numbers "the replicas' cost" "$replicated_ms" "$replica_cost"
say "fault-free: $step_ms ms per step from clock 2 on, the median of $repeat runs (the first: $run_ms over its whole run: processes, join, $steps steps, bye)"
say "replicas = 1: $replicated_ms ms per step, ${replica_cost}x the run without (the median of $repeat pairs' ratios); verified=$replicated_ok"
# What node failover costs when nothing fails without replicas: periodic checkpoints.
every=$((smoke ? 2 : 5))
run_job periodic "$flat, replicas = 0, checkpoint_every = $every,
                  checkpoint_dir = '$tmp/periodic'" none
periodic_ms=$(steady_ms periodic)
cost=$(awk -v a="$periodic_ms" -v b="$step_ms" 'BEGIN {printf "%.3f", a / b}')
check_numbers "the periodic-checkpoint cost" "$periodic_ms" "$cost"
periodic_ok=false
if same_as_baseline periodic; then periodic_ok=true; fi
say "checkpoint_every = $every: $periodic_ms ms per step, ${cost}x the median run without; verified=$periodic_ok"
if ((json)); then
  printf '{"cost":"replicas","ratio":%s,"ms":%s,"baseline_ms":%s,"runs":%s,"verified":%s,"chunk_bytes":%s}\n' \
    "$replica_cost" "$replicated_ms" "$step_ms" "$repeat" "$replicated_ok" "$chunk_bytes"
  printf '{"cost":"checkpoint_every","every":%s,"ratio":%s,"ms":%s,"baseline_ms":%s,"runs":1,"verified":%s,"chunk_bytes":%s}\n' \
    "$every" "$cost" "$periodic_ms" "$step_ms" "$periodic_ok" "$chunk_bytes"
fi
if ((cost_only)); then
  [[ $periodic_ok == true && $replicated_ok == true ]] || { note "a fault-free run was not verified"; exit 1; }
  exit 0
fi
for fault in worker shard link coordinator; do
  wants "$fault" || continue
  run_job "$fault" "racks = {'a', 'b'}, reduction = 'flat'" "$fault"
  verified=false
  if same_as_baseline "$fault"; then verified=true; fi
  # A cut that closed nothing tested nothing.
  if [[ $fault == link ]] && ! grep -q "closed [1-9]" "$tmp/link.out"; then
    note "link: the cut closed no connection: $(<"$tmp/link.out")"
    verified=false
  fi
  report "$fault" "$verified" "$recovery" "$steps"
done

# Checkpoint at clock --at while the job runs (its workers held there until it is
# taken, then on to the end), then the rest of the steps again from that checkpoint on
# one node.
if wants restore; then
token=$(create ckpt "racks = {'a', 'b'}, reduction = 'flat'")
ps=()
for ((r = 0; r < workers; r++)); do
  start_worker ckpt "$token" "$r" --pause-at "$at" --resume-file "$tmp/resume"
  ps+=("$worker_pid")
done
shell "rw.wait('ckpt', $at, {timeout = 300, interval = 0.02})
       rw.checkpoint('ckpt', '$tmp/ckpt', {clock = $at})" >/dev/null
touch "$tmp/resume"
wait_workers ckpt "${ps[@]}"
t0=$(now_ms)
token=$(create restored "node = 'n1', restore = '$tmp/ckpt'")
ps=()
for ((r = 0; r < workers; r++)); do start_worker restored "$token" "$r"; ps+=("$worker_pid"); done
shell "rw.wait('restored', $((at + 1)), {timeout = 300, interval = 0.01})" >/dev/null
recovery=$(($(now_ms) - t0))
wait_workers restored "${ps[@]}"
verified=false
if same_as_baseline ckpt && same_as_baseline restored; then verified=true; fi
report restore "$verified" "$recovery" "$steps"
fi

# n2 drained while a job over all three nodes trains: the chunks it homed move, with
# their state, to n0 and n1; the workers keep running (no restart).
if wants drain || wants join; then # the join takes the drained n2
run_job drain "racks = {'a', 'b', 'c'}, reduction = 'flat'" drain
verified=false
if same_as_baseline drain; then
  if grep -q "moved 1 job(s)" "$tmp/drain.out"; then verified=true
  else note "drain: rw.node_drain moved no job: $(<"$tmp/drain.out")"; fi
fi
report drain "$verified" "$recovery" "$steps"
((smoke)) || say "$(<"$tmp/drain.out")"
fi

# n2 (drained above) joins a job over n0 and n1 while it trains: the chunks the ring
# with n2 homes there, and their replicas, move onto it; the workers say hello to n2.
if wants join; then
run_job join "$flat" join
verified=false
if same_as_baseline join; then
  if grep -q "moved 1 job(s) onto it" "$tmp/join.out"; then verified=true
  else note "join: rw.node_join moved no job: $(<"$tmp/join.out")"; fi
fi
report join "$verified" "$recovery" "$steps"
((smoke)) || say "$(<"$tmp/join.out")"
fi

# A node killed: the job starts again on the node left from its newest periodic
# checkpoint (last: the cluster has one node after it).
if wants node; then
run_job node "$flat, replicas = 0, checkpoint_every = $every,
              checkpoint_dir = '$tmp/periodic-node'" node
verified=false
if same_as_baseline node; then verified=true; fi
report node "$verified" "$recovery" "$steps"
fi

# n1 again (a new process), then killed under a job with replicas: the replicas on n0
# take over its chunks and the workers go on (they are not restarted).
if wants takeover; then
running "${node_pid[1]}" || start_node 1
for _ in {1..100}; do
  [[ $(shell 'print(#rw.nodes())' 2>/dev/null) == 3 ]] && break
  sleep 0.1
done
run_job takeover "$flat, replicas = 1" takeover
verified=false
if same_as_baseline takeover; then verified=true; fi
report takeover "$verified" "$recovery" "$steps"
fi

fails=0
[[ $periodic_ok == true ]] || fails=1
[[ $replicated_ok == true ]] || fails=$((fails + 1))
for line in "${results[@]}"; do
  read -r _ v rec _ <<<"$line"
  check_numbers "recovery_ms" "$rec"
  [[ $v == true ]] || fails=$((fails + 1))
done

if [[ -n $faults ]]; then
  note "--faults: a partial run; bench/RESULTS.md left alone"
  exit $((fails > 0))
fi
{
  echo "<!-- $section:begin -->"
  echo "## Failover: faults during training, bitwise against the fault-free run$( ((hog)) && echo ", under a CPU hog")"
  echo
  echo "$(date -u +%Y-%m-%d), $(machine_facts); a --role coordinator (state database) and"
  echo "rack-agg nodes n0 (rack a), n1 (rack b), n2 (rack c: the drain's and the join's jobs"
  echo "only) on 127.0.0.1;"
  echo "every process on this one machine$( ((hog)) && echo ", beside $hog busy processes (\`python3 -c 'while True: pass'\`, one per core, as tests/stress.sh's hog)")."
  echo
  echo "Command: \`$(invocation_of --workers "$workers" --bytes "$bytes" --steps "$steps" --at "$at" ${hog_arg[@]+"${hog_arg[@]}"})\`."
  echo "One BSP Adam job per fault, W = $workers over both nodes (flat, TCP), the test"
  echo "fixture's tensors plus $bytes, $steps steps; the fault at clock $at. Verified: every"
  echo "worker's final parameters are bitwise those of the fault-free run (\`cmp\`)."
  echo "Recovery: worker, shard, link and takeover: the fault lands mid-step (every rank"
  echo "has done the steps up to rank 0's hold, the others have pushed the next one), timed"
  echo "from the kill (shard, link: the shell's clock as it asks for the fault) to every rank"
  echo "having ended the first step it pushed after it, as the workers wrote it"
  echo "(\`rw-test-worker --clock-file\`); the others from the fault to every rank past the"
  echo "step in flight (coordinator: to it answering again; restore: from job_create to the"
  echo "restored job's first step)."
  echo "The fault-free run took $step_ms ms per step from clock 2 on, as its slowest worker"
  echo "timed it, the median of $repeat runs ($run_ms over the first's whole run: processes,"
  echo "joins, steps, byes); chunks of $chunk_bytes bytes."
  echo
  echo "| fault | verified | recovery ms | steps |"
  echo "|---|---|---|---|"
  for line in "${results[@]}"; do
    read -r f v rec s <<<"$line"
    echo "| $f | $([[ $v == true ]] && echo yes || echo FAIL) | $rec | $s |"
  done
  echo
  echo "Link: n0 closes rank 1's connections (\`rw.inject{kill = 'link'}\`), as a cut link"
  echo "would; the worker process, not restarted, says hello to n0 again as rank 1 and"
  echo "sends again what n0 had not answered (the node drops what it had counted)."
  echo
  echo "Node: the coordinator starts the job again on the node left from its newest"
  echo "periodic checkpoint (\`checkpoint_every = $every\`); the workers, told why, are started"
  echo "again by the script (as a launcher would) and recompute the steps since it."
  echo "What that costs without a fault: checkpoint_every = $every ran $periodic_ms ms per step,"
  echo "${cost}x the run without checkpoints (verified: $([[ $periodic_ok == true ]] && echo yes || echo FAIL))."
  echo
  echo "Drain: \`rw.node_drain('n2')\` while a job over n0, n1 and n2 trains (its recovery:"
  echo "from the call to every rank past the step in flight); n2's chunks settle at a clock"
  echo "boundary and move with their state to their homes on the ring of n0 and n1; the"
  echo "workers are not restarted. (n2 serves only that job.)"
  echo
  echo "Join: \`rw.node_join('n2')\` (n2 drained just before) while a job over n0 and n1 trains"
  echo "(default replicas = 1): n2 is granted the job, the chunks the ring of n0, n1 and n2"
  echo "homes on n2 (and each moved chunk's replica) move there with their state, and the"
  echo "workers, told the new ring, say hello to n2 and send again what was unanswered;"
  echo "none is restarted. Recovery: from the call to every rank past the step in flight."
  echo
  echo "Takeover: kill -9 n1 under a job created with \`replicas = 1\` (every chunk also"
  echo "served by the next node of the ring, to which its home sends each step's sum and"
  echo "whose ack it waits for before it runs the step): the replicas on n0 take over its"
  echo "chunks with their state, and the workers go on without a restart, sending again"
  echo "what was unanswered (the job then has no replicas, and gets them back a second later)."
  echo "What replicas cost without a fault: $replicated_ms ms per step against $step_ms,"
  echo "${replica_cost}x, the median of $repeat pairs of runs in turn ($(IFS=' '; echo "${pair_costs[*]}");"
  echo "verified: $([[ $replicated_ok == true ]] && echo yes || echo FAIL)). The issue's target is 1.15x: $(awk -v c="$replica_cost" 'BEGIN {print (c <= 1.15) ? "met" : "not met"}') in this run."
  echo "What limits it, measured (perf record -a over both runs, 1 MiB chunks): the"
  echo "machine is busy in both (3 to 4 % idle), so every CPU millisecond replication adds"
  echo "is step time: the replica's optimizer step (impl_step, twice the samples), the sum"
  echo "made whole (impl_add) and copied for the link, and the sum's bytes through the"
  echo "loopback stack once more (a quarter more bytes per node and step) - on the same"
  echo "two cores that run the workers and both nodes. Per chunk, each sum is a frame and a"
  echo "shard message; the replica's acks go out together, one system call per batch."
  echo
  echo "<!-- $section:end -->"
} >"$tmp/section.md"
update_results "$section" "$tmp/section.md"
((smoke)) || say "written: bench/RESULTS.md"
((fails == 0)) || { note "$fails fault(s) not verified"; exit 1; }
