#!/usr/bin/env python3
"""Per-thread CPU time of a running process, from /proc/PID/task: where a node's time
goes without a profiler (the node names its threads: rw-shard-N, rw-poll-N, rw-poll-shm).

  node_threads.py snap PID FILE     writes {tid: [name, cpu_seconds]} as JSON to FILE
  node_threads.py diff BEFORE AFTER WALL_S
      prints one line: each thread's CPU seconds between the snapshots and its share of
      WALL_S (busiest first), threads of one kind summed (rw-shard-* as "shards"), e.g.
      "rw-poll-0 0.91 s (88%), shards 2.10 s (12 threads, 17% each on average), other 0.2 s"
"""
import json
import os
import sys


def snap(pid):
    hz = os.sysconf("SC_CLK_TCK")
    out = {}
    base = f"/proc/{pid}/task"
    for tid in os.listdir(base):
        try:
            name = open(f"{base}/{tid}/comm").read().strip()
            stat = open(f"{base}/{tid}/stat").read()
        except OSError:
            continue  # the thread ended meanwhile
        fields = stat[stat.rindex(")") + 2:].split()
        out[tid] = [name, (int(fields[11]) + int(fields[12])) / hz]
    return out


def diff(before, after, wall):
    threads = []
    for tid, (name, cpu) in after.items():
        d = cpu - before.get(tid, [name, 0.0])[1]
        threads.append((name, d))
    polls = sorted((t for t in threads if t[0].startswith("rw-poll")), key=lambda t: -t[1])
    shards = [t for t in threads if t[0].startswith("rw-shard")]
    other = sum(d for n, d in threads if not n.startswith(("rw-poll", "rw-shard")))
    parts = [f"{n} {d:.2f} s ({100 * d / wall:.0f}%)" for n, d in polls]
    if shards:
        s = sum(d for _, d in shards)
        top = max(d for _, d in shards)
        parts.append(f"shards {s:.2f} s ({len(shards)} threads, {100 * s / len(shards) / wall:.0f}% "
                     f"each on average, busiest {100 * top / wall:.0f}%)")
    parts.append(f"other {other:.2f} s")
    return ", ".join(parts)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "snap":
        try:
            data = snap(sys.argv[2])
        except OSError as e:
            sys.exit(f"node_threads.py: {e}")
        json.dump(data, open(sys.argv[3], "w"))
    elif len(sys.argv) == 5 and sys.argv[1] == "diff":
        wall = float(sys.argv[4])
        print(diff(json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), max(wall, 1e-9)))
    else:
        sys.exit(__doc__)
