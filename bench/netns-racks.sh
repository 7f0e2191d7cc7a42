#!/usr/bin/env bash
# Emulated racks on this one machine: R racks, each a switch (a bridge in a namespace of
# its own) with W/R worker hosts on links of rate B and one rack-agg host on a link of
# W/R x B (its workers' total), and a core switch joining the racks' switches, each by a
# link oversubscribed O:1 (C = W/R x B / O). Every host is a namespace; every link is a
# veth pair shaped with tc tbf on both ends. Runs, in one go:
#   rackweave-hierarchical  a job over every rack's agg, reduction = "hierarchical"
#   rackweave-flat          the same job, reduction = "flat" (each chunk to its home),
#                           replicas = 0 (as hierarchical jobs have none: a replica's sums
#                           would cross the core too, S/2 more per rack link each way)
#   gloo-ring               Gloo's ring all-reduce, ranks in rack order
#   torch-gloo              torch.distributed all_reduce, gloo backend
# and puts each median step time beside its link bound, the busiest link's bytes at its
# rate (less a full tbf bucket), over worker links, agg links and core links:
#   hierarchical  the core carries S each way per rack link            -> S / C
#   flat          a rack's link carries its workers' chunks homed elsewhere and its
#                 node's updates for other racks' workers: 2S at W = 4, R = 2
#   ring          one ring edge per rack link each way: 2(W-1)/W x S (1.5S at W = 4)
# A system that cannot run (this version refuses hierarchical reduction; torch missing)
# is reported as unavailable with the reason, not measured.
#
#   bash bench/netns.sh --racks R [--workers W] [--bytes S] [--rate B] [--oversub O]
#                       [--chunk-bytes C] [--verify] [--iters N] [--warmup K]
#                       [--timeout S] [--json] [--smoke] [--build-dir DIR]
#                       [--only SYSTEM,...] [--congestion CC[,CC...]]
#                       [--capture DIR]
#
# (netns.sh hands --racks 2 and more to this script.) Defaults: 2 racks, 4 workers,
# 16MiB, 1gbit, 4:1, 32KiB chunks, 10 iterations after 2 warm-up, 120 s per run. Needs
# root. Namespaces are named rwr-<pid>-*, addresses are in 10.78.0.0/16 inside them only;
# everything is removed on exit. --json: one object per system on stdout (system,
# median_ms, bound_ms, verified, congestion, ...). Writes the netns-racks-CC section of
# bench/RESULTS.md unless a system failed or --only left some out (for quick
# comparisons: --only rackweave-hierarchical,gloo-ring). --smoke: 1MiB, 2 iterations after 1, verified.
# --congestion (default cubic,bbr,reno; --smoke: cubic): the whole run once per TCP
# congestion control, as bench/netns.sh does (see there); exits 1 if any run failed.
# --capture DIR: during each run, the TCP headers crossing each rack's core link
# (tcpdump, 96 bytes a packet) into DIR/SYSTEM.coreK.pcap: how the connections across
# the core share it, step by step (python3 bench/lib/core_capture.py sums it up); after
# it, every namespace's TCP counters (nstat -a) and links (ip -s link), cumulative, into
# DIR/SYSTEM.nstat.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/netns.sh
source "$(dirname "$0")/lib/netns.sh"
cd "$(dirname "$0")/.."

invocation=$(invocation_of "$@")
all_args=("$@")
common_options "$@"
set -- ${rest[@]+"${rest[@]}"}

racks=2
workers=4
size=16MiB
rate=1gbit
oversub=4
chunk=32KiB
iters=10
warmup=2
run_timeout=120
json=0
verify=0
only=
capture_dir=
if ((smoke)); then size=1MiB iters=2 warmup=1 run_timeout=60 verify=1; fi
while (($#)); do
  case $1 in
    --racks) racks=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --bytes) size=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --congestion) congestion=$2; shift 2 ;;
    --oversub) oversub=$2; shift 2 ;;
    --chunk-bytes) chunk=$2; shift 2 ;;
    --verify) verify=1; shift ;;
    --only) only=$2; shift 2 ;;
    --capture) capture_dir=$2; shift 2 ;;
    *) run_option 2,33 "$@"; shift "$shifted" ;; # --iters --warmup --timeout --json -h
  esac
done
[[ $racks =~ ^[0-9]+$ ]] && ((racks >= 2 && racks <= 9)) || usage_error "--racks takes 2..9"
[[ $workers =~ ^[0-9]+$ ]] && ((workers >= racks && workers % racks == 0 && workers <= 90)) ||
  usage_error "--workers must be a multiple of --racks ($racks), at most 90"
[[ $oversub =~ ^[1-9][0-9]*$ ]] || usage_error "--oversub takes a whole number (4 for 4:1)"
bytes=$(to_bytes "$size") && ((bytes > 0 && bytes % 4 == 0)) ||
  usage_error "bad --bytes $size (a positive multiple of 4 bytes, e.g. 16MiB)"
to_bytes "$chunk" >/dev/null || usage_error "bad --chunk-bytes $chunk (e.g. 32KiB)"
worker_bps=$(rate_bps "$rate") || usage_error "bad --rate $rate (e.g. 1gbit)"
check_run_counts "$iters" "$warmup" "$run_timeout"
open_report "$json"
run_each_congestion "${all_args[@]}"
check_congestion
export RW_CONGESTION=$congestion
if [[ -n $capture_dir ]]; then
  mkdir -p "$capture_dir" || usage_error "--capture $capture_dir: cannot make it"
  capture_dir=$(cd "$capture_dir" && pwd)
  command -v tcpdump >/dev/null || usage_error "--capture needs tcpdump (apt-get install tcpdump)"
fi
for sys_name in ${only//,/ }; do
  case $sys_name in
    rackweave-hierarchical|rackweave-flat|gloo-ring|torch-gloo) ;;
    *) usage_error "--only takes rackweave-hierarchical, rackweave-flat, gloo-ring, torch-gloo; not $sys_name" ;;
  esac
done
per_rack=$((workers / racks))
agg_bps=$((per_rack * worker_bps))
core_bps=$((per_rack * worker_bps / oversub))
if ((EUID != 0)); then
  ((smoke)) && skip_smoke "needs root (ip netns, tc)"
  usage_error "needs root (ip netns, tc)"
fi

prefix="rwr-$$-"
port=7700
rack_of() { echo $(($1 / per_rack)); }            # rank -> rack index
rack_name() { echo "rack$1"; }
agg_addr() { echo "10.78.$1.200"; }                # rack index -> its agg host
worker_addr() { echo "10.78.$(rack_of "$1").$(($1 % per_rack + 1))"; }
worker_ns() { echo "${prefix}w$1"; }
agg_ns() { echo "${prefix}a$1"; }
switch_ns() { echo "${prefix}s$1"; }
core_ns=${prefix}core

started=$(date +%s)
tmp=$(mktemp -d)
namespaces=()
run_pids=()
capture_pids=()
node_pids=()
cleanup() {
  local rc=$?
  release "${run_pids[@]}" "${node_pids[@]}" "${capture_pids[@]}"
  delete_namespaces || rc=1
  exit "$rc"
}
set_exit_traps cleanup

first_namespace "$core_ns" # the core switch

snapshot_rackweave "$tmp/bin" comm-worker
shell_bin=$build/apps/rw-shell
[[ -x $shell_bin ]] || { note "$shell_bin is missing: build RackWeave first"; exit 1; }
gloo=$build/peers/gloo-allreduce
if [[ ! -x $gloo ]] && ((smoke)); then
  bash bench/setup-peers.sh --no-install "$build" >"$tmp/setup-peers.log" 2>&1 || true
fi
torch_python=
if /usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
  torch_python=/usr/bin/python3
fi

# The fabric: a bridge per switch namespace; a veth from a switch port to each host.
bridge() { ip -n "$1" link add br0 type bridge && ip -n "$1" link set br0 up; }
# link_host SWITCH_NS PORT HOST_NS ADDR BPS: host HOST_NS (eth0, ADDR) on the switch.
link_host() {
  ip -n "$1" link add "$2" type veth peer name eth0 netns "$3"
  ip -n "$1" link set "$2" master br0
  ip -n "$1" link set "$2" up
  ip -n "$3" addr add "$4/16" dev eth0
  ip -n "$3" link set eth0 up
  shape "$1" "$2" "$5"
  shape "$3" eth0 "$5"
}
bridge "$core_ns"
for ((k = 0; k < racks; k++)); do
  add_ns "$(switch_ns "$k")"
  bridge "$(switch_ns "$k")"
  # The rack's uplink into the core, oversubscribed.
  ip -n "$core_ns" link add "c$k" type veth peer name up0 netns "$(switch_ns "$k")"
  ip -n "$core_ns" link set "c$k" master br0
  ip -n "$core_ns" link set "c$k" up
  ip -n "$(switch_ns "$k")" link set up0 master br0
  ip -n "$(switch_ns "$k")" link set up0 up
  shape "$core_ns" "c$k" "$core_bps"
  shape "$(switch_ns "$k")" up0 "$core_bps"
  add_ns "$(agg_ns "$k")"
  link_host "$(switch_ns "$k")" agg "$(agg_ns "$k")" "$(agg_addr "$k")" "$agg_bps"
done
for ((r = 0; r < workers; r++)); do
  add_ns "$(worker_ns "$r")"
  link_host "$(switch_ns "$(rack_of "$r")")" "w$r" "$(worker_ns "$r")" "$(worker_addr "$r")" \
    "$worker_bps"
done

# link_counters: "CORE AGG WORKER RETRANS TIMEOUTS" now: packets the tbf qdiscs dropped on
# the core links, the rack-agg links and the worker links (both ends of each), and TCP
# segments retransmitted and retransmission timeouts over every host.
drops_of() { # NS DEV
  tc -n "$1" -s qdisc show dev "$2" | awk '/dropped/ { gsub(",", "", $7); print $7; exit }'
}
link_counters() {
  local core=0 agg=0 wrk=0 retr=0 tmo=0 k r ns
  for ((k = 0; k < racks; k++)); do
    core=$((core + $(drops_of "$core_ns" "c$k") + $(drops_of "$(switch_ns "$k")" up0)))
    agg=$((agg + $(drops_of "$(switch_ns "$k")" agg) + $(drops_of "$(agg_ns "$k")" eth0)))
  done
  for ((r = 0; r < workers; r++)); do
    wrk=$((wrk + $(drops_of "$(switch_ns "$(rack_of "$r")")" "w$r") + $(drops_of "$(worker_ns "$r")" eth0)))
  done
  for ns in "${namespaces[@]}"; do
    read -r k r < <(ip netns exec "$ns" nstat -asz TcpRetransSegs TcpExtTCPTimeouts |
      awk '/^TcpRetransSegs/ { a = $2 } /^TcpExtTCPTimeouts/ { b = $2 } END { print a + 0, b + 0 }')
    retr=$((retr + k)) tmo=$((tmo + r))
  done
  echo "$core $agg $wrk $retr $tmo"
}
# link_report SYSTEM BEFORE: what the run since BEFORE (link_counters) dropped and resent.
link_report() {
  local a b
  read -r -a a <<<"$2"
  read -r -a b <<<"$(link_counters)"
  note "$1: tbf drops core $((b[0] - a[0])), agg $((b[1] - a[1])), worker $((b[2] - a[2])); TCP retransmitted segments $((b[3] - a[3])), timeouts $((b[4] - a[4]))"
}

say "racks: $racks x ($per_rack worker hosts on $rate, 1 rack-agg host on $((per_rack)) x $rate), core links $oversub:1 ($core_bps bit/s); $size per worker, $iters iterations after $warmup warm-up"
: >"$tmp/results"
# record SYSTEM MEDIAN P90 VERIFIED [NOTE...]
record() { echo "$*" >>"$tmp/results"; }

# start_nodes rates|probe: the rack-aggs; rack 0's embeds the coordinator, the others
# join it. rates: each is given its links' rates, as an operator would configure them,
# and auto plans from them; probe: none, so auto probes the core between rack-aggs.
start_nodes() {
  local k args
  for ((k = 0; k < racks; k++)); do
    # --insecure: veth addresses inside this script's own namespaces, no cluster secret.
    args=(--role rack-agg --name "n$k" --rack "$(rack_name "$k")" --insecure
      --listen "$(agg_addr "$k"):$port" --log-level info --port-file "$tmp/port.$k")
    [[ $1 == probe ]] || args+=(
      --uplink-gbps "$(awk -v b="$agg_bps" 'BEGIN { print b / 1e9 }')"
      --core-gbps "$(awk -v b="$core_bps" 'BEGIN { print b / 1e9 }')")
    ((k == 0)) || args+=(--coordinator "$(agg_addr 0):$port")
    rm -f "$tmp/port.$k"
    timeout -k 5 $((4 * run_timeout)) ip netns exec "$(agg_ns "$k")" "$tmp/bin/rw-node" \
      "${args[@]}" >"$tmp/node.$k.log" 2>&1 </dev/null &
    node_pids+=($!)
    wait_for_port "$tmp/port.$k" "${node_pids[k]}" ||
      { note "rw-node n$k did not start:"; cat "$tmp/node.$k.log" >&2; exit 1; }
  done
  for _ in {1..100}; do
    grep -q "$racks node(s) live" "$tmp/node.0.log" && return 0
    sleep 0.1
  done
  note "the rack-aggs did not all join the coordinator:"; tail -n 5 "$tmp/node.0.log" >&2
  exit 1
}
shell_in_rack0() {
  timeout -k 5 60 ip netns exec "$(agg_ns 0)" "$shell_bin" --connect "$(agg_addr 0):$port" "$@"
}
rack_list() {
  local k out=""
  for ((k = 0; k < racks; k++)); do out+="${out:+, }'$(rack_name "$k")'"; done
  echo "$out"
}

# capture_core K FILE: the headers of every packet on rack K's core link (its port on
# the core switch), until killed; tcpdump's own buffer, so the run pays one copy of
# 96 bytes per (GSO) packet.
capture_core() {
  exec timeout -k 2 "$run_timeout" ip netns exec "$core_ns" tcpdump -i "c$1" -s 96 -B 8192 \
    -U -w "$2" tcp 2>/dev/null
}
start_capture() { # SYSTEM: with --capture, every core link's packets until stop_capture
  [[ -n $capture_dir ]] || return 0
  local k
  for ((k = 0; k < racks; k++)); do
    capture_core "$k" "$capture_dir/$1.core$k.pcap" &
    capture_pids+=($!)
  done
  sleep 0.5 # tcpdump listening before the first packet
}
stop_capture() { # SYSTEM: and every namespace's TCP counters so far (nstat -a)
  [[ -n $capture_dir ]] || return 0
  ((${#capture_pids[@]} == 0)) || stop_pids "${capture_pids[@]}"
  capture_pids=()
  local ns
  for ns in "${namespaces[@]}"; do
    { echo "# $ns"; ip netns exec "$ns" nstat -asz; ip -n "$ns" -s link; } >>"$capture_dir/$1.nstat"
  done
}
# run_rackweave REDUCTION: one job over every rack's agg; each worker says hello to its
# own rack's agg.
run_rackweave() {
  local red=$1 sys="rackweave-$1" job="racks-$$-$1" r st res
  if ! shell_in_rack0 -c "local j = rw.job_create{name = '$job', workers = $workers, \
      racks = {$(rack_list)}, reduction = '$red', chunk_bytes = '$chunk', \
      $([[ $red == flat ]] && echo "replicas = 0,")}; print(j.token)" \
      >"$tmp/$sys.token" 2>"$tmp/$sys.create.err"; then
    local why
    why=$(sed -e 's/^rw-shell: //' -e 's/^(command line):1: //' "$tmp/$sys.create.err" | tail -n 1)
    note "$sys: unavailable: $why"
    record "$sys" NA NA false "$why"
    return 0
  fi
  chmod 600 "$tmp/$sys.token"
  rm -f "$tmp/$sys.stop"
  # --barrier: every worker's gradient is ready before a step starts, as the peers'
  # harnesses barrier before each all-reduce (a step is the exchange alone).
  local args=(--workers "$workers" --bytes "$bytes" --iters "$iters" --warmup "$warmup"
    --chunk-bytes "$chunk" --job "$job" --token-file "$tmp/$sys.token"
    --stop-file "$tmp/$sys.stop" --barrier)
  if ((verify)); then
    args+=(--verify)
    # A hierarchical sum adds each rack's ranks first: the workers check that order.
    if [[ $red == hierarchical ]]; then
      local order=() q
      for ((q = 0; q < workers; q++)); do order+=("$(rack_of "$q")"); done
      args+=(--rank-racks "$(IFS=,; echo "${order[*]}")")
    fi
  fi
  local t0 files=() before
  t0=$(date +%s)
  before=$(link_counters)
  start_capture "$sys"
  for ((r = 0; r < workers; r++)); do
    launch "$tmp/$sys.$r" "$(worker_ns "$r")" "$tmp/bin/rw-bench" comm-worker "${args[@]}" \
      --connect "$(agg_addr "$(rack_of "$r")"):$port" --rank "$r"
    files+=("$tmp/$sys.$r")
  done
  st=0
  wait_ranks || st=$?
  stop_capture "$sys"
  link_report "$sys" "$before"
  shell_in_rack0 -c "rw.job_delete('$job')" >/dev/null 2>&1 || true
  if ((st == 0)) && res=$(step_stats RESULT "${files[@]}" 2>"$tmp/$sys.stats"); then
    record "$sys" $res "$( ((verify)) && echo true || echo unchecked)"
    note "$sys: median/p90 ms $res ($(($(date +%s) - t0)) s)"
  else
    failed "$sys" "$st" "$tmp/$sys.stats" "$tmp/node.0.log" "${files[@]/%/.err}"
    record "$sys" FAIL FAIL false
  fi
}

# What auto picks, over every rack and over one rack (printed; recorded in the report).
auto_pick() { # NAME RACKS
  shell_in_rack0 -c "local j = rw.job_create{name = '$1', workers = $workers, racks = {$2}}; \
    print(j.reduction .. ' (' .. j.plan .. ')'); rw.job_delete('$1')" 2>&1 | tail -n 1
}
# First with no rates configured: the coordinator probes the core between the rack-aggs.
start_nodes probe
auto_probed=$(auto_pick "autop-$$" "$(rack_list)")
say "auto over $racks racks, no rates configured: $auto_probed"
stop_pids "${node_pids[@]}"
node_pids=()
start_nodes rates
auto_racks=$(auto_pick "auto-$$" "$(rack_list)")
auto_one=$(auto_pick "auto1-$$" "'$(rack_name 0)'")
say "auto over $racks racks: $auto_racks"
say "auto over one rack: $auto_one"
# wanted SYSTEM: --only names it (or there is no --only); else it is recorded as left out.
wanted() {
  [[ -z $only || ",$only," == *",$1,"* ]] && return 0
  record "$1" NA NA false "left out by --only"
  return 1
}
! wanted rackweave-hierarchical || run_rackweave hierarchical
! wanted rackweave-flat || run_rackweave flat
stop_pids "${node_pids[@]}"
node_pids=()

# run_peer SYSTEM TAG CMD...: one rank per worker host, all at once; CMD gets --rank R
# and, where it contains the word HOST, rank R's address in its place.
run_peer() {
  local sys=$1 r st res files=() cmd before; shift
  local t0
  t0=$(date +%s)
  before=$(link_counters)
  start_capture "$sys"
  for ((r = 0; r < workers; r++)); do
    cmd=("${@//HOST/$(worker_addr "$r")}")
    launch "$tmp/$sys.$r" "$(worker_ns "$r")" "${cmd[@]}" --rank "$r"
    files+=("$tmp/$sys.$r")
  done
  st=0
  wait_ranks || st=$?
  stop_capture "$sys"
  link_report "$sys" "$before"
  if ((st == 0)) && res=$(step_stats RANK "${files[@]}" 2>"$tmp/$sys.stats"); then
    record "$sys" $res true
    note "$sys: median/p90 ms $res ($(($(date +%s) - t0)) s)"
  else
    failed "$sys" "$st" "$tmp/$sys.stats" "${files[@]/%/.err}"
    record "$sys" FAIL FAIL false
  fi
}
peer_args=(--size "$workers" --bytes "$bytes" --iters "$iters" --warmup "$warmup")
if ! wanted gloo-ring; then
  :
elif [[ -x $gloo ]]; then
  mkdir "$tmp/gloo-store"
  run_peer gloo-ring "$gloo" "${peer_args[@]}" --store "$tmp/gloo-store" --host HOST
else
  note "gloo-ring: unavailable: $gloo is missing (bash bench/setup-peers.sh)"
  record gloo-ring NA NA false "$gloo is missing: run bash bench/setup-peers.sh"
fi
if ! wanted torch-gloo; then
  :
elif [[ -n $torch_python ]]; then
  run_peer torch-gloo env GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 "$torch_python" \
    bench/peers/torch_allreduce.py "${peer_args[@]}" --one-rank --master "$(worker_addr 0)" \
    --port 29533
else
  note "torch-gloo: unavailable: no python3 with torch.distributed (gloo)"
  record torch-gloo NA NA false "no python3 with torch.distributed (python3-torch)"
fi
elapsed=$(($(date +%s) - started))

machine="$(machine_facts), load average $(load_avg) at the end; TCP congestion control $congestion in every namespace (--congestion)"
report_rc=0
python3 bench/lib/racks_report.py "$tmp/results" "$tmp/table.txt" "$tmp/section.md" \
  "$racks" "$workers" "$bytes" "$size" "$worker_bps" "$agg_bps" "$core_bps" "$oversub" \
  "$rate" "$chunk" "$iters" "$warmup" "$invocation" "$machine" "$elapsed" "$json" \
  "$(burst_of "$worker_bps")" "$(burst_of "$agg_bps")" "$(burst_of "$core_bps")" \
  "$auto_racks" "$auto_one" "$auto_probed" ||
  report_rc=$?
cat "$tmp/table.txt" >&3
if ((report_rc)) || grep -q " FAIL " "$tmp/results"; then
  note "a system failed or measured below its bound: bench/RESULTS.md left alone"
  exit 1
fi
if [[ -n $only ]]; then
  note "--only: a partial run; bench/RESULTS.md left alone"
  exit 0
fi
update_results "netns-racks-$congestion" "$tmp/section.md"
((smoke)) || say "written: bench/RESULTS.md"
