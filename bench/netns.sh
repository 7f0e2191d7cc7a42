#!/usr/bin/env bash
# An emulated cloud rack on this one machine: W worker hosts and one rack-agg host with
# K NICs, each a network namespace, joined by a bridge in a namespace of its own (the
# switch), every link rate-limited with tc tbf in both directions. Runs RackWeave
# (rw-node on the agg host, listening on every agg link; one rw-bench comm-worker per
# worker host) and Gloo's ring all-reduce (one gloo-allreduce per worker host) and puts
# each median step time next to its link-bound lower bound (b: a link's tbf bucket,
# which a step may find full):
#   Gloo ring   t >= (2(W-1)/W * S - b_worker) / B_worker
#   RackWeave   t >= max((S - b_worker) / B_worker, (W * S / K - b_agg) / B_agg)
# Prints a table and writes bench/RESULTS.md (the section between the netns-CC markers,
# CC the run's TCP congestion control).
#
#   bash bench/netns.sh [--workers W] [--bytes S] [--iters N] [--warmup K]
#                       [--rate R] [--agg-rate R] [--agg-links K] [--chunk-bytes C]
#                       [--verify] [--timeout S] [--json] [--smoke] [--build-dir DIR]
#                       [--congestion CC[,CC...]]   (TCP in every namespace: cubic,bbr,reno)
#                       [--compression none|bf16|fp16|topk:R]   (RackWeave's job; none)
#                       [--no-results]   (print only; bench/rack-bound.sh runs it so)
#   bash bench/netns.sh --racks R ...   several racks and a core: bench/netns-racks.sh
#
# Defaults: 4 workers, 16MiB, 10 timed iterations after 2 warm-up, worker links 1gbit,
# agg links as fast as worker links, 2 agg links, 32KiB chunks, 120 s per run. Rates
# are tc rates in bit/s (500mbit, 1gbit, 2.5gbit). Needs root. Every namespace is
# named rwb-<pid of this script>-*; addresses are in 10.77.0.0/16 and exist only inside
# them. Processes, namespaces and links are removed on exit, error or interrupt.
# --compression: RackWeave's job compresses its gradients (and, bf16 / fp16, its
# answers); its bound then takes the bytes its workers measured on the wire per step
# (each way, the larger) for S, and the JSON line says `compression` and `wire_bytes`.
# --verify has every RackWeave worker check every result bitwise (outside the timed
# step: the workers wait for each other before each step, as Gloo's do). With --json stdout carries
# only one JSON object per system. A run in which a system failed prints its table but
# leaves bench/RESULTS.md alone. --smoke (see lib/common.sh): 2 workers, 1MiB, 2
# iterations after 1 warm-up, verified; skipped where network namespaces cannot be
# made (not root, or ip netns add fails); Gloo left out when its packages are missing.
# --congestion: the whole run once per congestion control named, each in namespaces of
# its own with its own table, JSON objects ("congestion") and RESULTS.md section; one
# the kernel lacks is skipped with a note, one it has but does not allow in a namespace
# is added to net.ipv4.tcp_allowed_congestion_control for the run (put back at exit).
# Exits 1 if any run failed. Default: cubic,bbr,reno; --smoke: cubic alone (or the
# machine's default where cubic cannot be set).
set -euo pipefail
# --racks N (N >= 2): several racks and an oversubscribed core, bench/netns-racks.sh.
for ((i = 1; i <= $#; i++)); do
  if [[ ${!i} == --racks ]]; then
    j=$((i + 1))
    if [[ ${!j:-} != 1 ]]; then exec bash "$(dirname "$0")/netns-racks.sh" "$@"; fi
    set -- "${@:1:i-1}" "${@:j+1}" # --racks 1: this one rack
    break
  fi
done
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
# shellcheck source=lib/netns.sh
source "$(dirname "$0")/lib/netns.sh"
cd "$(dirname "$0")/.."

invocation=$(invocation_of "$@")
all_args=("$@")
common_options "$@"
set -- ${rest[@]+"${rest[@]}"}

workers=4
size=16MiB
iters=10
warmup=2
rate=1gbit
agg_rate=
agg_links=2
chunk=32KiB
run_timeout=120
json=0
verify=0
no_results=0
compression=none
if ((smoke)); then workers=2 size=1MiB iters=2 warmup=1 run_timeout=60 verify=1; fi
while (($#)); do
  case $1 in
    --workers) workers=$2; shift 2 ;;
    --bytes) size=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --agg-rate) agg_rate=$2; shift 2 ;;
    --agg-links) agg_links=$2; shift 2 ;;
    --congestion) congestion=$2; shift 2 ;;
    --no-results) no_results=1; shift ;;
    --chunk-bytes) chunk=$2; shift 2 ;;
    --verify) verify=1; shift ;;
    --compression) compression=$2; shift 2 ;;
    *) run_option 2,34 "$@"; shift "$shifted" ;; # --iters --warmup --timeout --json -h
  esac
done
agg_rate=${agg_rate:-$rate}

bytes=$(to_bytes "$size") && ((bytes > 0 && bytes % 4 == 0)) ||
  usage_error "bad --bytes $size (a positive multiple of 4 bytes, e.g. 16MiB)"
to_bytes "$chunk" >/dev/null || usage_error "bad --chunk-bytes $chunk (e.g. 32KiB)"
worker_bps=$(rate_bps "$rate") || usage_error "bad --rate $rate (e.g. 1gbit)"
agg_bps=$(rate_bps "$agg_rate") || usage_error "bad --agg-rate $agg_rate"
# Worker hosts are 10.77.1.1.., agg links 10.77.0.1..: one /24 each.
[[ $workers =~ ^[1-9][0-9]*$ ]] && ((workers >= 2 && workers <= 254)) ||
  usage_error "--workers takes 2..254"
[[ $agg_links =~ ^[1-9][0-9]*$ ]] && ((agg_links <= 254)) ||
  usage_error "--agg-links takes 1..254"
check_run_counts "$iters" "$warmup" "$run_timeout"
open_report "$json"
run_each_congestion "${all_args[@]}"
check_congestion
export RW_CONGESTION=$congestion
[[ $compression =~ ^(none|bf16|fp16|topk:(0?\.[0-9]+|1(\.0*)?))$ ]] ||
  usage_error "bad --compression $compression (none, bf16, fp16 or topk:RATIO, 0 < RATIO <= 1)"
if ((EUID != 0)); then
  ((smoke)) && skip_smoke "needs root (ip netns, tc)"
  usage_error "needs root (ip netns, tc)"
fi

# Everything but the --json lines goes to stdout only without --json.

prefix="rwb-$$-"
switch_ns=${prefix}sw
agg_ns=${prefix}agg
port=7700 # the agg host is a namespace of its own: no other listener there
agg_addr() { echo "10.77.0.$(($1 + 1))"; }
worker_addr() { echo "10.77.1.$(($1 + 1))"; }
worker_ns() { echo "${prefix}w$1"; }

started=$(date +%s)
tmp=$(mktemp -d)
namespaces=() # created so far, deleted on exit
run_pids=()   # ranks started and not yet reaped, stopped on exit
node_pid=     # the same for rw-node

cleanup() {
  local rc=$?
  release "${run_pids[@]}" ${node_pid:+"$node_pid"}
  delete_namespaces || rc=1
  exit "$rc"
}
set_exit_traps cleanup

first_namespace "$switch_ns" # the switch

snapshot_rackweave "$tmp/bin" comm-worker
gloo=$build/peers/gloo-allreduce
run_gloo=1
if ((smoke)); then
  # Build the peers if their packages are here (incremental, seconds); never install them.
  peers_rc=0
  bash bench/setup-peers.sh --no-install "$build" >"$tmp/setup-peers.log" 2>&1 || peers_rc=$?
  if ((peers_rc == 3)); then
    note "smoke: partly skipped: gloo-ring: $(tail -n 1 "$tmp/setup-peers.log")"
    run_gloo=0
  elif ((peers_rc)); then
    note "bench/setup-peers.sh failed (exit $peers_rc):"; tail -n 15 "$tmp/setup-peers.log" >&2; exit 1
  fi
fi
if ((run_gloo)); then
  [[ -x $gloo ]] || { note "$gloo is missing: run bash bench/setup-peers.sh"; exit 1; }
  if [[ $("$gloo" --host 127.0.0.1 2>&1 || true) == *"unknown argument"* ]]; then
    note "$gloo has no --host option: rebuild it (cmake --build $build/peers)"; exit 1
  fi
fi
ip -n "$switch_ns" link add br0 type bridge
ip -n "$switch_ns" link set br0 up
# add_link NS PORT DEV ADDR BPS: a veth from the switch (PORT, on the bridge) to host NS
# (DEV, with ADDR), shaped on both ends' egress.
add_link() {
  ip -n "$switch_ns" link add "$2" type veth peer name "$3" netns "$1"
  ip -n "$switch_ns" link set "$2" master br0
  ip -n "$switch_ns" link set "$2" up
  ip -n "$1" addr add "$4/16" dev "$3"
  ip -n "$1" link set "$3" up
  shape "$switch_ns" "$2" "$5"
  shape "$1" "$3" "$5"
}
add_ns "$agg_ns"
# Several NICs in one subnet: answer ARP only on the NIC that has the address, and send
# from each address out of its own NIC (source-based routes), or every reply would
# leave through the first NIC.
ip netns exec "$agg_ns" sysctl -q -w net.ipv4.conf.all.arp_ignore=1 \
  net.ipv4.conf.all.arp_announce=2 net.ipv4.conf.all.rp_filter=0
for ((k = 0; k < agg_links; k++)); do
  add_link "$agg_ns" "a$k" "eth$k" "$(agg_addr "$k")" "$agg_bps"
  ip -n "$agg_ns" rule add from "$(agg_addr "$k")" table $((100 + k))
  ip -n "$agg_ns" route add 10.77.0.0/16 dev "eth$k" src "$(agg_addr "$k")" table $((100 + k))
done
for ((i = 0; i < workers; i++)); do
  add_ns "$(worker_ns "$i")"
  add_link "$(worker_ns "$i")" "w$i" eth0 "$(worker_addr "$i")" "$worker_bps"
done


say "rack: $workers worker hosts on $rate links, 1 rack-agg host on $agg_links x $agg_rate links, one bridge; $size per worker, $iters iterations after $warmup warm-up"
: >"$tmp/results"

# RackWeave: the node listens on every agg link; workers reach the first and attach to
# the others as its welcome tells them.
listens=()
for ((k = 0; k < agg_links; k++)); do listens+=(--listen "$(agg_addr "$k"):$port"); done
# --insecure: the node listens on veth addresses inside this script's own namespaces,
# with no cluster secret (rw-node refuses that otherwise).
node_args=(--role rack-agg --open-jobs --insecure "${listens[@]}" --log-level warn)
# Rank 0 paces the run (rw-bench comm-worker): it runs warm-up + --iters iterations and
# then creates the stop file; the other ranks run until they see it. Without one they
# would push a step rank 0 never joins and fail when it leaves. --barrier: a step starts
# once every worker's gradient is ready, as Gloo's harness barriers before each
# all-reduce, so both time the exchange alone.
worker_args=(--connect "$(agg_addr 0):$port" --workers "$workers" --bytes "$bytes"
  --iters "$iters" --warmup "$warmup" --chunk-bytes "$chunk" --job "netns-$$"
  --stop-file "$tmp/rw.stop" --barrier)
((verify)) && worker_args+=(--verify)
[[ $compression != none ]] && worker_args+=(--compression "$compression")
timeout -k 5 $((2 * run_timeout)) ip netns exec "$agg_ns" "$tmp/bin/rw-node" "${node_args[@]}" \
  --port-file "$tmp/port" >"$tmp/node.log" 2>&1 </dev/null &
node_pid=$!
wait_for_port "$tmp/port" "$node_pid" || { note "rw-node did not start:"; cat "$tmp/node.log" >&2; exit 1; }
t0=$(date +%s)
for ((r = 0; r < workers; r++)); do
  launch "$tmp/rw.$r" "$(worker_ns "$r")" "$tmp/bin/rw-bench" comm-worker "${worker_args[@]}" \
    --rank "$r"
done
st=0
wait_ranks || st=$?
stop_pids "$node_pid"
node_pid=
rw_files=()
for ((r = 0; r < workers; r++)); do rw_files+=("$tmp/rw.$r"); done
if ((st == 0)) && res=$(step_stats RESULT "${rw_files[@]}" 2>"$tmp/rw.stats"); then
  echo "rackweave $res" >>"$tmp/results"
  # Each worker's "WIRE sent received" (data bytes per timed iteration).
  awk '$1 == "WIRE" {s += $2; r += $3; n++} END {if (n) printf "%.0f %.0f %d\n", s, r, n}' \
    "${rw_files[@]}" >"$tmp/wire"
  note "rackweave: median/p90 ms $res ($(($(date +%s) - t0)) s)"
else
  failed rackweave "$st" "$tmp/rw.stats" "$tmp/node.log" "${rw_files[@]/%/.err}"
  echo "rackweave FAIL FAIL" >>"$tmp/results"
fi

# Gloo: a ring over the worker hosts, each rank on its own host's address.
gloo_args=(--size "$workers" --bytes "$bytes" --iters "$iters" --warmup "$warmup")
if ((run_gloo)); then
  mkdir "$tmp/gloo-store"
  t0=$(date +%s)
  for ((r = 0; r < workers; r++)); do
    launch "$tmp/gloo.$r" "$(worker_ns "$r")" "$gloo" "${gloo_args[@]}" --store "$tmp/gloo-store" \
      --rank "$r" --host "$(worker_addr "$r")"
  done
  st=0
  wait_ranks || st=$?
  gloo_files=()
  for ((r = 0; r < workers; r++)); do gloo_files+=("$tmp/gloo.$r"); done
  if ((st == 0)) && res=$(step_stats RANK "${gloo_files[@]}" 2>"$tmp/gloo.stats"); then
    echo "gloo-ring $res" >>"$tmp/results"
    note "gloo-ring: median/p90 ms $res ($(($(date +%s) - t0)) s)"
  else
    failed gloo-ring "$st" "$tmp/gloo.stats" "${gloo_files[@]/%/.err}"
    echo "gloo-ring FAIL FAIL" >>"$tmp/results"
  fi
fi
elapsed=$(($(date +%s) - started))

machine="$(machine_facts), load average $(load_avg) at the end; TCP congestion control $congestion in every namespace (--congestion)"
commands=(
  "ip netns exec $agg_ns rw-node ${node_args[*]} --port-file FILE"
  "ip netns exec ${prefix}wR rw-bench comm-worker ${worker_args[*]/#$tmp\/rw.stop/FILE} --rank R   (R = 0..$((workers - 1)), all at once)"
)
((run_gloo)) && commands+=(
  "ip netns exec ${prefix}wR gloo-allreduce ${gloo_args[*]} --store DIR --rank R --host 10.77.1.<R+1>   (R = 0..$((workers - 1)), all at once)")
report_rc=0
python3 - "$tmp/results" "$tmp/table.txt" "$tmp/section.md" "$workers" "$bytes" "$size" "$worker_bps" "$agg_bps" \
  "$agg_links" "$rate" "$agg_rate" "$iters" "$warmup" "$chunk" "$invocation" "$machine" \
  "$elapsed" "$json" "$(burst_of "$worker_bps")" "$(burst_of "$agg_bps")" \
  "$compression" "$(cat "$tmp/wire" 2>/dev/null || true)" \
  "${commands[@]}" <<'PY' || report_rc=$?
import datetime, json, os, sys
# The run's TCP congestion control: in every JSON object, and the section's name.
cc = os.environ.get("RW_CONGESTION", "")
section = "netns-" + cc if cc else "netns"
(res_path, txt_path, md_path, w, s, size, bw, ba, k, rate, agg_rate, iters, warmup, chunk,
 invocation, machine, elapsed, as_json, bucket_w, bucket_a, compression, wire), commands = \
    sys.argv[1:23], sys.argv[23:]
w, s, bw, ba, k = int(w), int(s), float(bw), float(ba), int(k)
bucket_w, bucket_a = int(bucket_w), int(bucket_a)
# The time a link needs for nbytes of payload, less what a full bucket lets through at once.
ms = lambda bits_per_s, nbytes, bucket: max(nbytes - bucket, 0) * 8 / bits_per_s * 1e3
# A compressed job's S: what its workers measured on the wire per step, each way (the
# larger), headers included.
wire_sent, wire_received, wire_workers = (float(x) for x in wire.split()) if wire else (0, 0, 0)
wire_bytes = wire_sent + wire_received
s_rw = max(wire_sent, wire_received) / wire_workers if compression != "none" and wire_workers else s
rw_worker, rw_agg = ms(bw, s_rw, bucket_w), ms(ba, w * s_rw / k, bucket_a)
bounds = {
    "rackweave": (max(rw_worker, rw_agg),
                  "max((S-b)/B_w, (W*S/K-b)/B_agg) = "
                  + ("(S-b)/B_w" if rw_worker >= rw_agg else "(W*S/K-b)/B_agg")),
    "gloo-ring": (ms(bw, 2 * (w - 1) / w * s, bucket_w), "(2(W-1)/W * S-b)/B_w"),
}
rows, below = [], []
for line in open(res_path):
    name, med, p90 = line.split()
    bound, formula = bounds[name]
    ok = med != "FAIL"
    if ok and float(med) < bound:
        below.append(f"{name}: median {med} ms is below its link bound {bound:.3f} ms")
    rows.append([name, med, p90, f"{bound:.3f}", f"{float(med) / bound:.2f}" if ok else "FAIL", formula])
    if as_json == "1":
        print(json.dumps({"system": name, "congestion": cc, "workers": w, "bytes": s, "agg_links": k,
                          "worker_rate_bps": bw, "agg_rate_bps": ba, "iters": int(iters),
                          "median_ms": float(med) if ok else None,
                          "p90_ms": float(p90) if ok else None,
                          "bound_ms": round(bound, 3),
                          "ratio": round(float(med) / bound, 3) if ok else None,
                          **({"compression": compression, "wire_bytes": round(wire_bytes)}
                             if name == "rackweave" else {})}))
head = ["system", "median ms", "p90 ms", "bound ms", "measured/bound", "bound"]
widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
with open(txt_path, "w") as f:
    for r in [head] + rows:
        f.write("  ".join(c.ljust(widths[i]) if i in (0, 5) else c.rjust(widths[i])
                          for i, c in enumerate(r)).rstrip() + "\n")
    f.write(f"\ncommand: {invocation}\nwhich runs:\n")
    f.writelines(f"  {c}\n" for c in commands)
    f.write(f"took {elapsed} s\n")
md = [f"<!-- {section}:begin -->",
      "## Emulated rack in network namespaces (bench/netns.sh"
      + (f", TCP {cc})" if cc else ")"),
      "",
      f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {machine}. Every host is a network "
      "namespace on this one machine, so every process shares its cores.",
      "",
      f"Command: `{invocation}` ({iters} timed iterations after {warmup} warm-up per system; "
      f"the whole run took {elapsed} s). Rack: {w} worker hosts, one link each at {rate}; one "
      f"rack-agg host with {k} links at {agg_rate}, one `--listen` per link; all links are veth "
      "pairs into one Linux bridge in a switch namespace, shaped with `tc tbf` on both ends. "
      f"S = {size} of float32 per worker, RackWeave chunks of {chunk}, optimizer `sum`"
      + (f"; RackWeave's job compresses with `{compression}` (its bound takes the bytes "
         f"its workers measured on the wire: {wire_bytes / w:.0f} per worker per step, "
         "both ways)." if compression != "none" else "."),
      "",
      "which runs:",
      "",
      *[f"- `{c}`" for c in commands],
      "",
      "| " + " | ".join(head) + " |",
      "|" + "---|" * len(head),
      *["| " + " | ".join(r) + " |" for r in rows],
      "",
      "A step is the slowest worker's time for that iteration (median and p90 over the "
      "iterations). The bounds are the time the shaped links need just to carry each "
      "system's bytes (a ring moves 2(W-1)/W x S through every worker link each way; "
      "RackWeave moves S each way through every worker link and W x S each way through the "
      "K agg links together, so at least W x S / K through one of them), less what a full "
      f"tbf bucket passes at once (b = {bucket_w} bytes on a worker link, {bucket_a} on an "
      "agg link: 2 ms at the rate, at least 256 KiB). So measured/bound cannot go below 1 "
      "— nor, with 1500-byte frames, below about 1.05, since tbf also counts Ethernet, IP "
      "and TCP headers.",
      f"<!-- {section}:end -->"]
open(md_path, "w").write("\n".join(md) + "\n")
for b in below:
    print(f"netns.sh: {b}: the bound or the shaping is wrong", file=sys.stderr)
sys.exit(1 if below else 0)
PY

cat "$tmp/table.txt" >&3
if ((report_rc)) || grep -q FAIL "$tmp/results"; then
  note "a system failed or measured below its bound: bench/RESULTS.md left alone"
  exit 1
fi
((no_results)) && exit 0
update_results "netns-$congestion" "$tmp/section.md"
((smoke)) || say "written: bench/RESULTS.md"
