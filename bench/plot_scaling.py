#!/usr/bin/python3
"""Plots bench/scaling.sh's results.

    /usr/bin/python3 bench/plot_scaling.py RESULTS_JSONL PNG [--cores N] [--note TEXT]

RESULTS_JSONL holds bench/peers.sh's JSON lines: system, workers, bytes, median_ms (null
for a failed run). PNG gets two panels: the step time against W (log-log), one line per
system and size; and the node's bytes per second per core for RackWeave (2 x W x S per
step through the node, over N cores) against W, one line per size, beside Gloo's
all-reduce bus bandwidth per core (2 (W-1)/W x S per rank per step, W ranks, over N
cores). A failed run leaves a gap. NOTE goes under the title (date, machine).
"""
import argparse
import json
import math

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)


def label_bytes(n):
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m}{unit}"
    return f"{n}B"


def per_core_gbps(system, w, s, ms, cores):
    if ms is None:
        return math.nan
    moved = 2 * w * s if system.startswith("rackweave") else 2 * (w - 1) * s
    return moved * 8 / (ms / 1e3) / 1e9 / cores


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("png")
    ap.add_argument("--cores", type=int, default=1)
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    recs = [json.loads(l) for l in open(a.results) if l.startswith("{")]
    recs = [r for r in recs if "workers" in r]
    systems = list(dict.fromkeys(r["system"] for r in recs))
    sizes = sorted(set(r["bytes"] for r in recs))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    styles = {s: st for s, st in zip(systems, ("-", "--", ":", "-."))}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, size in enumerate(sizes):
        for system in systems:
            rows = sorted((r for r in recs if r["system"] == system and r["bytes"] == size),
                          key=lambda r: r["workers"])
            ws = [r["workers"] for r in rows]
            ms = [math.nan if r["median_ms"] is None else r["median_ms"] for r in rows]
            label = f"{system} {label_bytes(size)}"
            left.plot(ws, ms, styles[system], marker="o", color=colors[i % len(colors)],
                      label=label)
            right.plot(ws, [per_core_gbps(system, r["workers"], size, r["median_ms"], a.cores)
                            for r in rows],
                       styles[system], marker="o", color=colors[i % len(colors)], label=label)
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xlabel("workers W")
    left.set_ylabel("median step ms")
    left.set_title("step time against W")
    right.set_xscale("log", base=2)
    right.set_xlabel("workers W")
    right.set_ylabel(f"Gbit/s per core ({a.cores} cores)")
    right.set_title("bytes moved per second per core")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    if a.note:
        fig.suptitle(a.note, fontsize=9)
    fig.tight_layout()
    fig.savefig(a.png, dpi=100)


if __name__ == "__main__":
    main()
