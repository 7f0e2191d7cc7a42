#!/usr/bin/python3
"""Plots bench/sweep.sh's results.

    /usr/bin/python3 bench/plot_sweep.py RESULTS_JSONL CHUNK_PNG CORES_PNG [--note TEXT]

RESULTS_JSONL holds one JSON object per run, as sweep.sh writes them: sweep ("chunk" or
"cores"), shards, workers, bytes, size, chunk_bytes, chunk, median_ms, p90_ms (null for
a failed run). CHUNK_PNG: step time against chunk size (log x), one line per workers x
bytes, median solid and p90 dashed. CORES_PNG: step time per shard count, one panel per
size, grouped by worker count, p90 as a whisker. A failed run leaves a gap. NOTE goes
under each title (date, machine).
"""
import argparse
import itertools
import json
import math

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)
from matplotlib.ticker import FixedLocator, NullLocator  # noqa: E402


def value(r, key):
    v = r.get(key)
    return math.nan if v is None else v


def label_bytes(n):
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m}{unit}"
    return f"{n}B"


def plot_chunks(recs, path, note):
    fig, ax = plt.subplots(figsize=(8, 5))
    cases = list(dict.fromkeys((r["workers"], r["bytes"]) for r in recs))
    colors = itertools.cycle(plt.rcParams["axes.prop_cycle"].by_key()["color"])
    for (w, b), color in zip(cases, colors):
        rs = sorted((r for r in recs if (r["workers"], r["bytes"]) == (w, b)),
                    key=lambda r: r["chunk_bytes"])
        x = [r["chunk_bytes"] for r in rs]
        ax.plot(x, [value(r, "median_ms") for r in rs], "o-", color=color,
                label=f"W={w}, {label_bytes(b)}: median")
        ax.plot(x, [value(r, "p90_ms") for r in rs], "^--", color=color, alpha=0.6,
                label=f"W={w}, {label_bytes(b)}: p90")
    ticks = sorted({r["chunk_bytes"] for r in recs})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([label_bytes(t) for t in ticks])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("chunk size (--chunk-bytes, log scale)")
    ax.set_ylabel("step time (ms)")
    ax.set_title(f"RackWeave step time against chunk size\n{note}", fontsize=11)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_cores(recs, path, note):
    sizes = sorted({r["bytes"] for r in recs})
    shards = list(dict.fromkeys(r["shards"] for r in recs))
    workers = sorted({r["workers"] for r in recs})
    by = {(r["bytes"], r["workers"], r["shards"]): r for r in recs}
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.5 * len(sizes) + 1, 5), squeeze=False)
    width = 0.8 / len(shards)
    for ax, b in zip(axes[0], sizes):
        for i, n in enumerate(shards):
            xs = [j + (i - (len(shards) - 1) / 2) * width for j in range(len(workers))]
            med = [value(by.get((b, w, n), {}), "median_ms") for w in workers]
            p90 = [value(by.get((b, w, n), {}), "p90_ms") for w in workers]
            up = [p - m if not (math.isnan(p) or math.isnan(m)) else 0 for m, p in zip(med, p90)]
            bars = ax.bar(xs, med, width, yerr=[[0] * len(up), up], capsize=4,
                          label=f"{n} shard{'s' if n != '1' else ''}")
            ax.bar_label(bars, labels=["" if math.isnan(m) else f"{m:.0f}" for m in med],
                         label_type="center", fontsize=8, color="white")
        ax.set_xticks(range(len(workers)))
        ax.set_xticklabels([f"W={w}" for w in workers])
        ax.set_xlabel("workers")
        ax.set_ylabel("step time, median (ms); whisker: p90")
        ax.set_title(f"{label_bytes(b)} per worker", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8, title="rw-node shards", title_fontsize=8)
    chunk = label_bytes(recs[0]["chunk_bytes"])
    fig.suptitle(f"RackWeave step time against serving cores ({chunk} chunks)\n{note}",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results")
    ap.add_argument("chunk_png")
    ap.add_argument("cores_png")
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    recs = [json.loads(line) for line in open(a.results) if line.strip()]
    chunk = [r for r in recs if r["sweep"] == "chunk"]
    cores = [r for r in recs if r["sweep"] == "cores"]
    if not chunk or not cores:
        raise SystemExit("plot_sweep.py: need results of both sweeps (chunk and cores)")
    plot_chunks(chunk, a.chunk_png, a.note)
    plot_cores(cores, a.cores_png, a.note)


if __name__ == "__main__":
    main()
