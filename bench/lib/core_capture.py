#!/usr/bin/env python3
"""How the connections across a core link shared it (bench/netns-racks.sh --capture DIR).

   python3 bench/lib/core_capture.py [--rate-bps B] [--bin-ms 10] [--stall-ms 20]
                                     [--timeline] FILE.pcap

FILE is tcpdump's capture of one rack's core link (TCP headers only). Over the time
from its first to its last payload byte, prints per direction (out of the rack, into
it) the bytes and mean rate, against the link's rate B when given; per connection its
bytes; and the stalls: stretches of at least --stall-ms in which neither direction
carried a payload byte. A step of the hierarchical job keeps both directions busy from
its first chunk to its last, so a stall inside the run is time the job lost (the gaps
between steps are a few ms: the workers' barrier). --timeline prints every bin: the
Mbit/s of each direction and of the four busiest connections.
"""
import argparse
import struct
import sys
from collections import defaultdict


def packets(path):
    """Yields (t, src, dst, payload_bytes) per TCP packet (src and dst "ip:port")."""
    with open(path, "rb") as f:
        head = f.read(24)
        if len(head) < 24:
            return
        end = "<" if struct.unpack("<I", head[:4])[0] in (0xA1B2C3D4, 0xA1B23C4D) else ">"
        magic = struct.unpack(end + "I", head[:4])[0]
        if magic not in (0xA1B2C3D4, 0xA1B23C4D):
            raise ValueError(f"{path}: not a pcap file")
        scale = 1e9 if magic == 0xA1B23C4D else 1e6
        linktype = struct.unpack(end + "I", head[20:24])[0]
        off = {1: 14, 113: 16}.get(linktype, 0)  # Ethernet, Linux cooked
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            sec, frac, incl, _ = struct.unpack(end + "IIII", rec)
            data = f.read(incl)
            if linktype == 1 and data[12:14] != b"\x08\x00":
                continue  # not IPv4
            ip = data[off:]
            if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
                continue
            ihl = (ip[0] & 15) * 4
            tcp = ip[ihl:]
            if len(tcp) < 20:
                continue
            total = struct.unpack(">H", ip[2:4])[0]
            sport, dport = struct.unpack(">HH", tcp[:4])
            yield (sec + frac / scale, "%d.%d.%d.%d:%d" % (*ip[12:16], sport),
                   "%d.%d.%d.%d:%d" % (*ip[16:20], dport),
                   max(0, total - ihl - (tcp[12] >> 4) * 4))


def rack_of(addr):
    """The rack of a 10.78.K.x address (bench/netns-racks.sh's plan)."""
    return addr.split(".")[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pcap")
    ap.add_argument("--rate-bps", type=float, default=0.0, help="the link's rate")
    ap.add_argument("--bin-ms", type=float, default=10.0)
    ap.add_argument("--stall-ms", type=float, default=20.0)
    ap.add_argument("--timeline", action="store_true")
    a = ap.parse_args()

    pkts = [p for p in packets(a.pcap) if p[3] > 0]
    if not pkts:
        print(f"no payload in {a.pcap}")
        return 1
    t0, t1 = pkts[0][0], pkts[-1][0]
    span = max(t1 - t0, 1e-9)
    nbins = int(span * 1e3 / a.bin_ms) + 1
    dirs = defaultdict(lambda: [0] * nbins)
    conns = defaultdict(lambda: [0] * nbins)
    for t, src, dst, n in pkts:
        b = int((t - t0) * 1e3 / a.bin_ms)
        dirs[f"rack {rack_of(src)} -> rack {rack_of(dst)}"][b] += n
        conns[f"{src} -> {dst}"][b] += n
    mbit = lambda nbytes, secs: nbytes * 8 / secs / 1e6
    print(f"{a.pcap}: {span:.2f} s from the first payload byte to the last")
    for name, bins in sorted(dirs.items()):
        total = sum(bins)
        share = f", {mbit(total, span) * 1e6 / a.rate_bps:.2f} of the link" if a.rate_bps else ""
        print(f"  {name}: {total / 1e6:.1f} MB, {mbit(total, span):.0f} Mbit/s{share}")
    top = sorted(conns, key=lambda k: -sum(conns[k]))[:4]
    for k in top:
        print(f"    {k}: {sum(conns[k]) / 1e6:.1f} MB")
    quiet = [all(bins[b] == 0 for bins in dirs.values()) for b in range(nbins)]
    stalls, run = [], 0
    for q in quiet + [False]:
        if q:
            run += 1
        elif run:
            if run * a.bin_ms >= a.stall_ms:
                stalls.append(run * a.bin_ms)
            run = 0
    print(f"  stalls of {a.stall_ms:g} ms or more with nothing either way: {len(stalls)}, "
          f"{sum(stalls):.0f} ms in all ({sum(stalls) / 1e3 / span:.0%} of the run)"
          + (f", the longest {max(stalls):.0f} ms" if stalls else ""))
    if a.timeline:
        names = sorted(dirs)
        print("  ms      " + "  ".join(names) + "  |  " + "  ".join(top))
        for b in range(nbins):
            secs = a.bin_ms / 1e3
            print(f"  {b * a.bin_ms:7.0f} "
                  + " ".join(f"{mbit(dirs[n][b], secs):6.0f}" for n in names) + "  | "
                  + " ".join(f"{mbit(conns[k][b], secs):6.0f}" for k in top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
