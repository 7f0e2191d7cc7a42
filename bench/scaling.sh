#!/usr/bin/env bash
# How RackWeave and Gloo's ring scale on this one machine: bench/peers.sh (rackweave-tcp
# through one rw-node, gloo-allreduce) over W workers x S bytes, plotted (step time
# against W per S, and the bytes moved per second per core: 2 x W x S per step through
# RackWeave's node, 2 (W-1) x S for the ring's W ranks) into bench/scaling.png, with a
# table in bench/RESULTS.md (the section between the scaling markers) saying, per size,
# where the step stops growing linearly with W.
#
#   bash bench/scaling.sh [--workers "2 4 8 16"] [--bytes "4MiB 16MiB 64MiB 256MiB"]
#                         [--iters N] [--warmup K] [--systems "rackweave-tcp gloo"]
#                         [--timeout S] [--json] [--smoke] [--build-dir DIR]
#
# --json: stdout carries only bench/peers.sh's JSON lines, one per (system, W, S), and
# its loopback ceiling (iperf3).
# Defaults: 3 timed iterations after 1 warm-up per cell (a 16 x 256 MiB step moves
# 8 GiB). --smoke (see lib/common.sh): W = 2 and 3 at 1MiB, 2 iterations after 1,
# plotted into a scratch directory, RESULTS.md and the plot left alone.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/.."

invocation=$(invocation_of "$@")
common_options "$@"
set -- ${rest[@]+"${rest[@]}"}

workers="2 4 8 16"
sizes="4MiB 16MiB 64MiB 256MiB"
systems="rackweave-tcp gloo"
iters=3 warmup=1 run_timeout=300 json=0
if ((smoke)); then workers="2 3" sizes=1MiB iters=2 warmup=1 run_timeout=120; fi
while (($#)); do
  case $1 in
    --workers) workers=$2; shift 2 ;;
    --bytes) sizes=$2; shift 2 ;;
    --systems) systems=$2; shift 2 ;;
    *) run_option 2,17 "$@"; shift "$shifted" ;; # --iters --warmup --timeout --json -h
  esac
done
check_run_counts "$iters" "$warmup" "$run_timeout"
plot_python=/usr/bin/python3
plot=1
if ! "$plot_python" -c 'import matplotlib' 2>/dev/null; then
  ((smoke)) || usage_error "$plot_python has no matplotlib (apt-get install python3-matplotlib)"
  note "smoke: partly skipped: the plot: $plot_python has no matplotlib"
  plot=0
fi
build_tree
open_report "$json"

tmp=$(mktemp -d)
run_pid=
cleanup() { release ${run_pid:+"$run_pid"}; }
set_exit_traps cleanup
started=$(date +%s)
smoke_arg=()
((smoke)) && smoke_arg=(--smoke)
st=0
bash bench/peers.sh --workers "$workers" --bytes "$sizes" --systems "$systems" \
  --iters "$iters" --warmup "$warmup" --timeout "$run_timeout" --json --no-results \
  --build-dir "$build" "${smoke_arg[@]}" >"$tmp/results.jsonl" 2>"$tmp/peers.err" &
run_pid=$!
wait "$run_pid" || st=$?
run_pid=
if ((st)); then note "bench/peers.sh failed (exit $st):"; tail -n 15 "$tmp/peers.err" >&2; exit 1; fi
elapsed=$(($(date +%s) - started))
((json)) && grep '^{' "$tmp/results.jsonl"

png=bench/scaling.png
((smoke)) && png=$tmp/scaling.png
if ((plot)); then
  "$plot_python" bench/plot_scaling.py "$tmp/results.jsonl" "$png" --cores "$(nproc)" \
    --note "$(date -u +%Y-%m-%d), $(nproc) cores, loopback; $iters iterations after $warmup warm-up"
  [[ $(head -c 8 "$png" 2>/dev/null | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
    { note "plot_scaling.py wrote no PNG to $png"; exit 1; }
fi

machine="$(machine_facts), load average $(load_avg) at the end"
python3 - "$tmp/results.jsonl" "$tmp/table.txt" "$tmp/section.md" "$invocation" "$machine" \
  "$elapsed" "$(nproc)" <<'PY'
import datetime, json, sys
res_path, txt_path, md_path, invocation, machine, elapsed, cores = sys.argv[1:]
cores = int(cores)
recs = [json.loads(l) for l in open(res_path) if l.startswith("{")]
recs = [r for r in recs if "workers" in r]
if not recs:
    sys.exit("no figures from bench/peers.sh")
systems = list(dict.fromkeys(r["system"] for r in recs))
ws = sorted(set(r["workers"] for r in recs))
sizes = sorted(set(r["bytes"] for r in recs))
by = {(r["system"], r["workers"], r["bytes"]): r.get("median_ms") for r in recs}
def lb(n):
    for u, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m}{u}"
    return f"{n}B"
def gbps_core(sys_, w, s, ms):
    moved = 2 * w * s if sys_.startswith("rackweave") else 2 * (w - 1) * s
    return moved * 8 / (ms / 1e3) / 1e9 / cores
head = ["bytes", "workers"] + [f"{x} ms" for x in systems] + [f"{x} Gbit/s/core" for x in systems]
rows = []
for s in sizes:
    for w in ws:
        row = [lb(s), str(w)]
        row += [f"{by[(x, w, s)]:.1f}" if by.get((x, w, s)) else "FAIL" for x in systems]
        row += [f"{gbps_core(x, w, s, by[(x, w, s)]):.2f}" if by.get((x, w, s)) else "-" for x in systems]
        rows.append(row)
# Where the step stops growing linearly with W: RackWeave's node moves 2 x W x S per
# step, so linear means a constant rate per core; the first W whose rate falls below
# 85 % of the best so far at that size is where it stops.
knees = []
for x in systems:
    for s in sizes:
        rates = [(w, gbps_core(x, w, s, by[(x, w, s)])) for w in ws if by.get((x, w, s))]
        best, knee = 0.0, None
        for w, r in rates:
            if best and r < 0.85 * best and knee is None:
                knee = w
            best = max(best, r)
        knees.append(f"- {x}, {lb(s)}: " + (f"linear (rate per core within 15 %) up to W = {max(w for w, _ in rates)}"
                                            if knee is None else
                                            f"stops being linear at W = {knee} (its rate per core "
                                            f"falls below 85 % of the best, {best:.2f} Gbit/s)"))
widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
with open(txt_path, "w") as f:
    for r in [head] + rows:
        f.write("  ".join(c.rjust(widths[i]) for i, c in enumerate(r)) + "\n")
    f.write("\n" + "\n".join(knees) + "\n")
md = ["<!-- scaling:begin -->",
      "## Scaling with workers and bytes (bench/scaling.sh)",
      "",
      f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {machine}; every process on this "
      "one machine, loopback TCP.",
      "",
      f"Command: `{invocation}` (the whole run took {elapsed} s): `bench/peers.sh` over the "
      "grid (rackweave-tcp through one `rw-node --role rack-agg`, Gloo's ring with a barrier "
      "before each iteration; the median of the slowest rank per iteration). Gbit/s per "
      "core: RackWeave's node moves 2 x W x S per step (every push in, every update out); "
      "Gloo's W ranks move 2 (W-1) x S together; both over the machine's cores.",
      "",
      "| " + " | ".join(head) + " |",
      "|" + "---|" * len(head),
      *["| " + " | ".join(r) + " |" for r in rows],
      "",
      "Where it stops being linear:",
      "",
      *knees,
      "",
      "Why: every process (W workers, the node, or W Gloo ranks) shares this machine's "
      f"{cores} cores, and moving a byte over loopback TCP costs a copy into the kernel and "
      "one out of it on the sending and the receiving side; once the cores are busy, "
      "bytes per second per core is the ceiling, and a step that moves W times the bytes "
      "takes W times as long. What falls below that line is overhead that grows with W: "
      "more processes than cores (scheduling, cache), and at small S the fixed cost of a "
      "step.",
      "",
      "![step time and bytes per second per core against W](scaling.png)",
      "<!-- scaling:end -->"]
open(md_path, "w").write("\n".join(md) + "\n")
PY
cat "$tmp/table.txt" >&3
say "took ${elapsed} s"
update_results scaling "$tmp/section.md"
((smoke)) || say "written: bench/RESULTS.md, bench/scaling.png"
