#!/usr/bin/env python3
"""The report of bench/netns-racks.sh: each system's step time beside its link bound.

    racks_report.py RESULTS TABLE SECTION R W S SIZE B_W B_AGG B_CORE O RATE CHUNK
                    ITERS WARMUP INVOCATION MACHINE ELAPSED JSON b_W b_AGG b_CORE
                    AUTO_RACKS AUTO_ONE AUTO_PROBED

RESULTS has one line per system: "NAME MEDIAN P90 VERIFIED [NOTE...]", MEDIAN and P90
in ms, or FAIL (it failed), or NA (it cannot run here; NOTE says why). Writes the text
table to TABLE and the netns-racks section of bench/RESULTS.md to SECTION; with JSON
= 1 prints one JSON object per system. Exits 1 if a measured median is below its bound
(the bound or the shaping would be wrong).

The bound is the busiest link's bytes (per direction) at its rate, less what a full
tbf bucket lets through at once (b), over worker links, rack-agg links and the racks'
links into the core. Per step, with p = W/R workers per rack:
  worker link    ring 2(W-1)/W S; flat and hierarchical S
  rack-agg link  flat W S/R (every worker's chunks homed there, and their updates);
                 hierarchical p S + 2(R-1)/R S (its workers, the partials it gets and
                 sends, the updates it gets and sends); ring none
  core link      flat p S (R-1)/R + (W-p) S/R; hierarchical 2(R-1)/R S; ring one ring
                 edge, 2(W-1)/W S
"""
import datetime
import json
import os
import sys

# The TCP congestion control of the run (bench/netns-racks.sh exports it): its JSON
# objects carry it and its section of bench/RESULTS.md is its own, netns-racks-CC.
CONGESTION = os.environ.get("RW_CONGESTION", "")
SECTION = "netns-racks-" + CONGESTION if CONGESTION else "netns-racks"


def main() -> int:
    (res_path, txt_path, md_path, racks, w, s, size, bw, ba, bc, oversub, rate, chunk, iters,
     warmup, invocation, machine, elapsed, as_json, bucket_w, bucket_a, bucket_c, auto_racks,
     auto_one, auto_probed) = sys.argv[1:26]
    r, w, s = int(racks), int(w), int(s)
    bw, ba, bc = float(bw), float(ba), float(bc)
    bucket_w, bucket_a, bucket_c = int(bucket_w), int(bucket_a), int(bucket_c)
    p = w // r

    def ms(bps, nbytes, bucket):
        return max(nbytes - bucket, 0) * 8 / bps * 1e3

    ring = 2 * (w - 1) / w * s
    links = {
        "rackweave-hierarchical": {"worker": s, "agg": p * s + 2 * (r - 1) / r * s,
                                   "core": 2 * (r - 1) / r * s},
        "rackweave-flat": {"worker": s, "agg": w * s / r,
                           "core": p * s * (r - 1) / r + (w - p) * s / r},
        "gloo-ring": {"worker": ring, "agg": 0, "core": ring},
        "torch-gloo": {"worker": ring, "agg": 0, "core": ring},
    }
    rates = {"worker": (bw, bucket_w), "agg": (ba, bucket_a), "core": (bc, bucket_c)}
    rows, below, out = [], [], {}
    for line in open(res_path):
        name, med, p90, verified, *note = line.split()
        per_link = {k: ms(*rates[k][:1], v, rates[k][1]) for k, v in links[name].items()}
        busiest = max(per_link, key=per_link.get)
        bound = per_link[busiest]
        measured = med not in ("FAIL", "NA")
        if measured and float(med) < bound:
            below.append(f"{name}: median {med} ms is below its link bound {bound:.3f} ms")
        ratio = f"{float(med) / bound:.2f}" if measured else ("unavailable" if med == "NA" else "FAIL")
        out[name] = float(med) if measured else None
        rows.append([name, med, p90, f"{bound:.3f}", ratio, verified, busiest,
                     " ".join(note)])
        if as_json == "1":
            print(json.dumps({"system": name, "congestion": CONGESTION,
                              "median_ms": out[name],
                              "p90_ms": float(p90) if measured else None,
                              "bound_ms": round(bound, 3), "bound_link": busiest,
                              "ratio": round(float(med) / bound, 3) if measured else None,
                              "verified": verified == "true", "available": med != "NA",
                              "note": " ".join(note), "racks": r, "workers": w, "bytes": s,
                              "oversubscription": int(oversub), "iters": int(iters)}))

    def vs(a, b, target):
        if out.get(a) is None or out.get(b) is None:
            return f"{a} / {b}: not measured (needs both), target <= {target}"
        x = out[a] / out[b]
        return f"{a} / {b} = {x:.2f}, target <= {target}: {'met' if x <= target else 'NOT met'}"

    bounded = ("rackweave-hierarchical / its bound: not measured, target <= 1.15"
               if out.get("rackweave-hierarchical") is None else
               "rackweave-hierarchical / its bound = {:.2f}, target <= 1.15: {}".format(
                   out["rackweave-hierarchical"] / next(float(x[3]) for x in rows
                                                       if x[0] == "rackweave-hierarchical"),
                   "met" if out["rackweave-hierarchical"] <= 1.15 * next(
                       float(x[3]) for x in rows if x[0] == "rackweave-hierarchical")
                   else "NOT met"))
    targets = [vs("rackweave-hierarchical", "gloo-ring", 0.7),
               vs("rackweave-hierarchical", "rackweave-flat", 0.55), bounded,
               f"auto over {r} racks picks {auto_racks}; target: hierarchical",
               f"auto over {r} racks with no rates configured (the core probed) picks "
               f"{auto_probed}; target: hierarchical",
               f"auto over one rack picks {auto_one}; target: flat"]
    head = ["system", "median ms", "p90 ms", "bound ms", "measured/bound", "verified",
            "busiest link", "note"]
    widths = [max(len(x[i]) for x in rows + [head]) for i in range(len(head))]
    with open(txt_path, "w") as f:
        for x in [head] + rows:
            f.write("  ".join(c.ljust(widths[i]) if i in (0, 5, 6, 7) else c.rjust(widths[i])
                              for i, c in enumerate(x)).rstrip() + "\n")
        f.write("\n" + "\n".join(targets) + "\n")
        f.write(f"\ncommand: {invocation}\ntook {elapsed} s\n")
    md = [f"<!-- {SECTION}:begin -->",
          "## Emulated racks and an oversubscribed core (bench/netns-racks.sh"
          + (f", TCP {CONGESTION})" if CONGESTION else ")"),
          "",
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {machine}. Every host is a "
          "network namespace on this one machine, so every process shares its cores.",
          "",
          f"Command: `{invocation}` ({iters} timed iterations after {warmup} warm-up per "
          f"system; the whole run took {elapsed} s). {r} racks of {p} worker hosts on "
          f"{rate} links and one rack-agg host on a {p} x {rate} link, a bridge per rack "
          f"and a core bridge joining them by links oversubscribed {oversub}:1 "
          f"({bc / 1e9:g} Gbit/s), every link shaped with `tc tbf` on both ends. "
          f"S = {size} of float32 per worker, RackWeave chunks of {chunk}, optimizer "
          "`sum`; RackWeave's job is created through the coordinator on every rack's agg, "
          "each worker says hello to its own rack's agg.",
          "",
          "| " + " | ".join(head) + " |",
          "|" + "---|" * len(head),
          *["| " + " | ".join(x) + " |" for x in rows],
          "",
          *[f"- {t}" for t in targets],
          "",
          "A step is the slowest worker's time for that iteration (median and p90). The "
          "bound is the busiest link's bytes per direction at its rate, less one full tbf "
          "bucket (bench/lib/racks_report.py gives each system's bytes per link): the core "
          "carries 2(R-1)/R x S per rack link for hierarchical reduction, p S (R-1)/R + "
          "(W-p) S/R for flat, one ring edge (2(W-1)/W x S) for a ring.",
          f"<!-- {SECTION}:end -->"]
    open(md_path, "w").write("\n".join(md) + "\n")
    for b in below:
        print(f"netns-racks: {b}: the bound or the shaping is wrong", file=sys.stderr)
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main())
