#!/usr/bin/env bash
# Is a gap between rackweave-fabric and rackweave-tcp (bench/peers.sh) the provider's
# own cost? Runs rw-transport-ceiling (bench/transport_ceiling.cpp) several times: one
# connection moving 256 KiB frames over libfabric's provider (RackWeave's fabric
# transport, nothing else: no job, no shards) and over a plain loopback TCP socket, in
# one process and run; reports each path's Gbit/s and CPU seconds per GiB and the
# ratios. Writes the fabric-ceiling section of bench/RESULTS.md.
#
#   bash bench/fabric-ceiling.sh [--runs 3] [--bytes 2GiB] [--provider tcp] [--smoke]
#                                [--build-dir DIR]
#
# --smoke (see lib/common.sh): 1 run of 64MiB.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/.."

invocation=$(invocation_of "$@")
common_options "$@"
set -- ${rest[@]+"${rest[@]}"}
runs=3 bytes=2GiB provider=tcp
if ((smoke)); then runs=1 bytes=64MiB; fi
while (($#)); do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --bytes) bytes=$2; shift 2 ;;
    --provider) provider=$2; shift 2 ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) usage_error "unknown option $1" ;;
  esac
done
[[ $runs =~ ^[1-9][0-9]?$ ]] || usage_error "--runs must be 1..99"

build_tree
tmp=$(mktemp -d)
cleanup() { rm -rf "$tmp"; }
set_exit_traps cleanup
prog=$build/bench/rw-transport-ceiling
[[ -x $prog ]] || { note "$prog is not built"; exit 1; }

rows=()
for ((i = 1; i <= runs; i++)); do
  timeout -k 5 300 "$prog" --bytes "$bytes" --provider "$provider" --json >"$tmp/run.$i" ||
    { note "run $i failed"; cat "$tmp/run.$i" >&2; exit 1; }
  row=$(python3 - "$tmp/run.$i" <<'PY'
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {("tcp" if l["path"].startswith("tcp") else "fabric"): l for l in lines}
if set(by) != {"tcp", "fabric"}:
    sys.exit(f"expected a tcp and a fabric line, got {lines}")
for l in lines:
    if not all(math.isfinite(l[k]) and l[k] > 0 for k in ("gbps", "cpu_s_per_gib")):
        sys.exit(f"not a positive number: {l}")
t, f = by["tcp"], by["fabric"]
print(f'{t["gbps"]:.2f} {t["cpu_s_per_gib"]:.3f} {f["gbps"]:.2f} {f["cpu_s_per_gib"]:.3f} '
      f'{f["cpu_s_per_gib"] / t["cpu_s_per_gib"]:.2f} {t["gbps"] / f["gbps"]:.2f} '
      f'{f["path"].replace(" ", "_")}')
PY
  ) || exit 1
  rows+=("$row")
  read -r tg tc fg fc cpu_ratio rate_ratio path <<<"$row"
  note "run $i: tcp $tg Gbit/s, $tc CPU s/GiB; ${path//_/ } $fg Gbit/s, $fc CPU s/GiB: fabric costs ${cpu_ratio}x the CPU per byte, moves at 1/${rate_ratio} the rate"
done
read -r cpu_lo cpu_hi < <(printf '%s\n' "${rows[@]}" | python3 -c 'import sys
r = [float(l.split()[4]) for l in sys.stdin if l.strip()]
print(f"{min(r):.2f} {max(r):.2f}")')
echo "fabric / tcp CPU per byte, one connection, nothing else: $cpu_lo to $cpu_hi over $runs run(s)"
echo "command: $invocation"

{
  echo "<!-- fabric-ceiling:begin -->"
  echo "## One connection over libfabric's provider against a loopback TCP socket (bench/fabric-ceiling.sh)"
  echo
  echo "$(date -u +%Y-%m-%d), $(machine_facts). \`rw-transport-ceiling --bytes $bytes --provider"
  echo "$provider\`: one sender and one receiver thread per path, frames of 256 KiB. fabric:"
  echo "RackWeave's fabric transport alone (RMA writes with immediate data into the"
  echo "receiver's slots, 16 in flight, a credit back per slot), each endpoint polled by"
  echo "its own thread; tcp: writev of a 64-byte header and the payload, read into one"
  echo "buffer. CPU is the process's (both threads of both sides) per GiB of payload."
  echo
  echo "Command: \`$invocation\`"
  echo
  echo "| run | tcp Gbit/s | tcp CPU s/GiB | fabric Gbit/s | fabric CPU s/GiB | fabric / tcp CPU per byte |"
  echo "|---|---|---|---|---|---|"
  for ((i = 0; i < runs; i++)); do
    read -r tg tc fg fc cpu_ratio rate_ratio path <<<"${rows[i]}"
    echo "| $((i + 1)) | $tg | $tc | $fg | $fc | $cpu_ratio |"
  done
  echo
  echo "The provider (${path//_/ }) spends $cpu_lo to $cpu_hi times a plain socket's CPU per"
  echo "byte. Where the cores are the limit (this machine: node and workers share two),"
  echo "that is the floor under rackweave-fabric against rackweave-tcp in bench/peers.sh."
  echo "<!-- fabric-ceiling:end -->"
} >"$tmp/section.md"
update_results fabric-ceiling "$tmp/section.md"
