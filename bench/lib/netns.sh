# shellcheck shell=bash
# Helpers shared by the network-namespace benchmarks (netns.sh: one rack;
# netns-racks.sh: several racks and a core). Sourced after lib/common.sh, never run.
# They use the calling script's globals: namespaces (created so far, deleted on exit),
# run_pids (ranks started and not yet reaped), run_timeout, iters, warmup and verify.

rate_bps() { # a tc rate (1gbit, 2.5gbit, 800mbit, 1gibit) -> bit/s
  local r=${1,,}
  [[ $r =~ ^([0-9]+(\.[0-9]+)?)([kmgt]i?)?bit$ ]] || return 1
  awk -v n="${BASH_REMATCH[1]}" -v u="${BASH_REMATCH[3]}" 'BEGIN {
    m["k"] = 1e3; m["m"] = 1e6; m["g"] = 1e9; m["t"] = 1e12
    m["ki"] = 2^10; m["mi"] = 2^20; m["gi"] = 2^30; m["ti"] = 2^40
    v = n * (u == "" ? 1 : m[u]); if (v < 1) exit 1; printf "%.0f\n", v }'
}


# The rack. tbf: a bucket of 2 ms at the rate but at least four 64 KiB GSO packets; 10 ms
# of queue before it drops. The report's bounds leave out one full bucket.
# A bucket that holds only one GSO packet (64 KiB: what 1 ms is at 500 Mbit/s) must fill
# up completely before each packet leaves, so every late wake-up of the qdisc's timer on
# a busy machine is lost link time: plain iperf3 across the 0.5 Gbit/s core of
# netns-racks.sh reached 386-403 Mbit/s with it, 474-478 with a bucket of 128-384 KiB
# (478 is the line rate less Ethernet, IP and TCP headers).
burst_of() { # BPS -> bucket bytes
  local b=$(($1 / 4000)) min=$((4 * 65536))
  echo $((b > min ? b : min))
}
shape() { # NS DEV BPS
  local burst
  burst=$(burst_of "$3")
  tc -n "$1" qdisc replace dev "$2" root tbf rate "${3}bit" burst "$burst" latency 10ms
}
# TCP congestion control in every namespace (--congestion): set, not inherited, so a
# run measures the same TCP whatever the machine's default. cubic, Linux's default,
# unless asked otherwise: under BBR (this machine's default) RackWeave's step on the
# 4 x 1 Gbit/s rack took 1.37 x its bound against 1.13 x under cubic before the
# worker's push window, 1.09 x under both with it (bench/RESULTS.md, rack-bound).
congestion=${congestion:-} # "" until check_congestion: cubic where a namespace may set it
settable_in_ns() { # CC: whether a new namespace may set it (outside the machine's
  # net.ipv4.tcp_allowed_congestion_control that needs privileges a container may lack)
  local probe=rwcc-probe-$$ ok=0
  ip netns add "$probe" 2>/dev/null || return 1
  ip netns exec "$probe" sysctl -q -w net.ipv4.tcp_congestion_control="$1" >/dev/null 2>&1 || ok=1
  ip netns del "$probe" 2>/dev/null || true
  return $ok
}
# allow_congestion CC: adds CC to the machine's net.ipv4.tcp_allowed_congestion_control
# (global, not per namespace: root may) when the kernel has it and a namespace may not set
# it yet (Debian's default list is "reno bbr" here, where cubic is built in). Says so;
# restore_congestion puts the list back at exit. Fails where it cannot be written.
allowed_before=
allow_congestion() {
  local now
  now=$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control 2>/dev/null) || return 1
  [[ " $now " == *" $1 "* ]] && return 0
  ((EUID == 0)) || return 1
  sysctl -q -w net.ipv4.tcp_allowed_congestion_control="$now $1" >/dev/null 2>&1 || return 1
  [[ -n $allowed_before ]] || allowed_before=$now
  trap restore_congestion EXIT # until set_exit_traps, whose cleanup calls it too
  note "$1 added to net.ipv4.tcp_allowed_congestion_control ($now) for this run; put back at exit"
}
restore_congestion() {
  [[ -n $allowed_before ]] || return 0
  sysctl -q -w net.ipv4.tcp_allowed_congestion_control="$allowed_before" >/dev/null 2>&1 ||
    note "could not put net.ipv4.tcp_allowed_congestion_control back to: $allowed_before"
  allowed_before=
}
check_congestion() { # usage error unless a namespace here may use $congestion
  local available default_cc
  available=$(cat /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null)
  if [[ -z $congestion ]]; then
    congestion=cubic
    if ! settable_in_ns cubic && ! { [[ " $available " == *" cubic "* ]] &&
      allow_congestion cubic && settable_in_ns cubic; }; then
      restore_congestion
      default_cc=$(cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null || echo reno)
      note "cubic cannot be set in a network namespace here (available: ${available:-?}; net.ipv4.tcp_allowed_congestion_control: $(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control 2>/dev/null)); every namespace uses the machine's default, $default_cc"
      congestion=$default_cc
    fi
    return 0
  fi
  [[ " $available " == *" $congestion "* ]] ||
    usage_error "--congestion $congestion: this kernel offers ${available:-none} (modprobe tcp_$congestion to add it)"
  settable_in_ns "$congestion" || { allow_congestion "$congestion" && settable_in_ns "$congestion"; } ||
    usage_error "--congestion $congestion: a network namespace here may not set it (net.ipv4.tcp_allowed_congestion_control: $(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control 2>/dev/null); root may add it)"
}
# run_each_congestion ARG...: with --congestion A,B,... (by default, outside smoke mode,
# cubic,bbr,reno) runs this script once per congestion control, each in namespaces of its
# own and writing its own section of bench/RESULTS.md (NAME-CC), then exits: 0 if every
# run passed, 1 if any failed. One the kernel does not have is skipped with a note, as
# "where the kernel allows" (modprobe tcp_CC adds it). ARG...: the script's arguments.
# Returns at once when $congestion names one (or none: smoke mode's cubic or default).
run_each_congestion() {
  if [[ -z $congestion ]] && ((!smoke)); then congestion=cubic,bbr,reno; fi
  [[ $congestion == *,* ]] || return 0
  local cc available rc=0 ran=() failed=() skipped=()
  available=$(cat /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null)
  for cc in ${congestion//,/ }; do
    [[ $cc =~ ^[a-z0-9_]+$ ]] || usage_error "--congestion takes names, e.g. cubic,bbr,reno; not $cc"
  done
  for cc in ${congestion//,/ }; do
    if [[ " $available " != *" $cc "* ]]; then
      note "--congestion $cc: skipped, this kernel offers ${available:-none}"
      skipped+=("$cc")
      continue
    fi
    say "== TCP congestion control $cc"
    if bash "$0" "$@" --congestion "$cc"; then ran+=("$cc"); else failed+=("$cc"); rc=1; fi
  done
  say "congestion controls: ran ${ran[*]:-none}; failed ${failed[*]:-none}; skipped ${skipped[*]:-none}"
  ((${#ran[@]} + ${#failed[@]} > 0)) || { note "no congestion control of --congestion $congestion could run"; exit 1; }
  exit "$rc"
}
add_ns() {
  ip netns add "$1"
  namespaces+=("$1")
  ip -n "$1" link set lo up
  ip netns exec "$1" sysctl -q -w net.ipv4.tcp_congestion_control="$congestion" >/dev/null
}

# launch OUT NS CMD...: CMD in namespace NS, in the background, bounded by --timeout.
launch() {
  local out=$1 ns=$2; shift 2
  timeout -k 5 "$run_timeout" ip netns exec "$ns" "$@" >"$out" 2>"$out.err" </dev/null &
  run_pids+=($!)
}
# wait_ranks: waits for every run_pids entry; the first to fail stops the others.
# Returns that first failure's status.
wait_ranks() {
  local rc=0 st pid left=("${run_pids[@]}") keep p
  while ((${#left[@]})); do
    st=0 pid=
    wait -n -p pid "${left[@]}" || st=$?
    [[ -n $pid ]] || break
    keep=()
    for p in "${left[@]}"; do [[ $p == "$pid" ]] || keep+=("$p"); done
    left=("${keep[@]}")
    if ((st)); then
      rc=$st
      stop_pids "${left[@]}"
      break
    fi
  done
  run_pids=()
  return "$rc"
}
# step_stats TAG FILE...: per iteration the slowest rank, then "median p90" over the
# iterations (percentiles as rw-bench computes them). Each FILE is one rank's stdout:
#   RESULT: rw-bench comm-worker, "RESULT verified iterations max_staleness t_1 .. t_N"
#           (verified is 1 only under --verify; iterations counts the warm-up ones)
#   RANK:   gloo-allreduce, "RANK r t_1 .. t_N" then "VERIFIED 1"
# Fails, saying why, unless every rank timed exactly N iterations (and ran warm-up + N)
# and, for Gloo, and for RackWeave when verify is 1, checked its results.
step_stats() {
  python3 - "$iters" "$warmup" "$verify" "$@" <<'PY'
import math, sys
n, warm, verify = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
tag, paths = sys.argv[4], sys.argv[5:]
ranks = []
for p in paths:
    lines = [l.split() for l in open(p)]
    found = [f for f in lines if f[:1] == [tag]]
    if len(found) != 1:
        sys.exit(f"{p}: expected one {tag} line, found {len(found)}")
    f = found[0]
    try:
        if tag == "RESULT":
            ok, ran, times = f[1] == "1", int(f[2]), [float(t) for t in f[4:]]
            if ran != warm + n:
                sys.exit(f"{p}: ran {ran} iterations, not {warm} + {n}")
            if verify and not ok:
                sys.exit(f"{p}: the results were not verified")
        else:
            times = [float(t) for t in f[2:]]
            if ["VERIFIED", "1"] not in lines:
                sys.exit(f"{p}: no VERIFIED 1 line")
    except (IndexError, ValueError) as e:
        sys.exit(f"{p}: cannot read {' '.join(f)!r}: {e}")
    if len(times) != n or not all(t > 0 for t in times):
        sys.exit(f"{p}: expected {n} positive times, got {times}")
    ranks.append(times)
steps = sorted(max(r[i] for r in ranks) for i in range(n))
pct = lambda q: steps[min(max(math.ceil(q * n) - 1, 0), n - 1)]
print(f"{pct(0.5):.3f} {pct(0.9):.3f}")
PY
}
failed() { # SYSTEM STATUS FILES...: says why a run failed, with the end of each log
  local sys=$1 st=$2 f; shift 2
  if ((st == 124 || st == 137)); then note "$sys: timed out after ${run_timeout}s"; fi
  if ((st)); then note "$sys failed (exit $st):"; else note "$sys: its output is unreadable:"; fi
  for f; do
    if [[ -s $f ]]; then tail -n 5 "$f" | sed "s|^|    ${f##*/}: |" >&2; fi
  done
}

# delete_namespaces: deletes every namespace in `namespaces` (newest first; a veth goes
# with either end) and fails, saying which, if any named $prefix* is left behind.
delete_namespaces() {
  local i ns
  for ((i = ${#namespaces[@]} - 1; i >= 0; i--)); do
    ip netns del "${namespaces[i]}" 2>/dev/null || true
  done
  restore_congestion
  if ns=$(ip netns list | grep "^$prefix"); then
    note "namespaces left behind: $ns"
    return 1
  fi
}

# first_namespace NAME: makes the run's first namespace; where namespaces cannot be made
# (a container), says so at once (a skip in smoke mode).
first_namespace() {
  if ! ip netns add "$1" 2>"$tmp/netns.err"; then
    skip_smoke "network namespaces are not permitted here (ip netns add: $(<"$tmp/netns.err"))"
  fi
  namespaces+=("$1")
  ip -n "$1" link set lo up
}
