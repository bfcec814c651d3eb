#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""
The Python client beside the C one (client/xferbench.c), on the same daemon in the same run of
`make bench`: time per operation from the claim (begin_read / begin_write) to the active side's
COMPLETE for 1 MiB .. --max, read and write, every transfer checked in full; and the latency of
a small operation (64 B: create_readable + begin_read + both ends seen, one whole round).

  xferbench.py --socket PATH [--max SIZE] [--iters N] [--compare XFERBENCH_OUTPUT]

--compare reads what `xferbench bench` printed in the same run and prints Python/C ratios with
the targets (latency within 1.3x of C, throughput at >= 1 MiB within 5%).
"""
import argparse
import asyncio
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import xferd  # noqa: E402

MIB, GIB = 1 << 20, 1 << 30
LAT_SIZE, LAT_ITERS = 64, 1000


def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMG]?)", s.upper())
    if not m:
        raise argparse.ArgumentTypeError("bad size %r" % s)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def fmt_size(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d%s" % (n >> shift, unit)
    return str(n)


async def pair(pas, act, pbuf, abuf, write):
    """One passive + active pair over the whole buffers. Returns (start, offered, done) ns."""
    t0 = time.perf_counter_ns()
    if write:
        p = await pas.create_writable(pbuf)
        t1 = time.perf_counter_ns()
        a = await act.begin_write(p.metadata(), abuf)
    else:
        p = await pas.create_readable(pbuf)
        t1 = time.perf_counter_ns()
        a = await act.begin_read(p.metadata(), abuf)
    await a.wait_for_completion()  # no deadline, as the C client's xfer_wait(-1)
    t2 = time.perf_counter_ns()
    await p.wait_for_completion()
    return t0, t1, t2


async def bench_size(pas, act, size, iters):
    src, dst = xferd.empty(size), xferd.empty(size)
    ps, ds = xferd.Descriptor(src), xferd.Descriptor(dst)
    ps.register_memory(pas)
    ds.register_memory(act)
    reads, writes = [], []
    for i in range(-1, iters):
        seed = 1000 + 2 * (i + 1)
        src[:: 4096] = seed & 0xFF
        src[-1] = (seed >> 3) & 0xFF
        _, t1, t2 = await pair(pas, act, ps, ds, False)
        if not np.array_equal(src, dst):
            raise SystemExit("xferbench.py: read of %d bytes: bytes differ" % size)
        dst[:: 4096] = (seed + 1) & 0xFF
        _, u1, u2 = await pair(pas, act, ps, ds, True)
        if not np.array_equal(src, dst):
            raise SystemExit("xferbench.py: write of %d bytes: bytes differ" % size)
        if i >= 0:
            reads.append(t2 - t1)
            writes.append(u2 - u1)
    return pct(reads, 50), pct(writes, 50), pct(reads, 99), pct(writes, 99)


def pct(v, p):
    """The @p-th percentile of @v as the C client computes it (bench_percentile)."""
    v = sorted(v)
    return v[min(len(v) - 1, len(v) * p // 100)]


async def bench_latency(pas, act):
    src, dst = xferd.empty(4096), xferd.empty(4096)
    ps = xferd.Descriptor(src[:LAT_SIZE]).register_memory(pas)
    ds = xferd.Descriptor(dst[:LAT_SIZE]).register_memory(act)
    rounds = []
    for i in range(-10, LAT_ITERS):
        t0, _, t2 = await pair(pas, act, ps, ds, False)
        if i >= 0:
            rounds.append(t2 - t0)
    return pct(rounds, 50), pct(rounds, 99)


def iters_for(size, forced):
    return forced or max(5, min(200, GIB // size))


async def main_async(a):
    sizes = [s for s in (MIB, 16 * MIB, 64 * MIB, 256 * MIB, GIB) if s <= a.max]
    results = {}
    async with xferd.Connector(a.socket, "xferbench-py-passive") as pas, xferd.Connector(
        a.socket, "xferbench-py-active"
    ) as act:
        print("xferbench.py: the Python package on the same daemon; time per op = claim to "
              "active-side COMPLETE, median")
        print("%9s %5s %8s %8s %9s %9s %9s %9s  %s" % (
            "size", "iters", "read", "write", "read us", "write us", "read p99", "write p99", "verified"))
        print("%9s %5s %8s %8s %9s %9s %9s %9s" % ("", "", "GB/s", "GB/s", "p50", "p50", "us", "us"))
        for size in sizes:
            r, w, r99, w99 = await bench_size(pas, act, size, iters_for(size, a.iters))
            results[size] = (r, w)
            print("%9s %5d %8.2f %8.2f %9.1f %9.1f %9.1f %9.1f  yes" % (
                fmt_size(size), iters_for(size, a.iters), size / r, size / w, r / 1e3, w / 1e3,
                r99 / 1e3, w99 / 1e3), flush=True)
        med, p99 = await bench_latency(pas, act)
        print("\nsmall-op latency, %d B, %d rounds after 10 warm-up: create_readable + begin_read + "
              "both ends seen:\n  median %.1f us, p99 %.1f us" % (LAT_SIZE, LAT_ITERS, med / 1e3, p99 / 1e3))
    return results, med


def compare(path, results, lat_ns):
    """Python/C for what `xferbench bench` printed in the same run. Returns 0, or 1 if missed."""
    text = open(path).read()
    c = {}
    for m in re.finditer(r"^\s*(\d+) ([KMG])iB\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+x\s+[\d.]+\s+"
                         r"[\d.]+x\s+([\d.]+)\s+([\d.]+)\s+yes", text, re.M):
        c[parse_size(m.group(1) + m.group(2))] = (float(m.group(3)) * 1e3, float(m.group(4)) * 1e3)
    m = re.search(r"readable \+ read \+ wait \(one whole round\)\s+([\d.]+) us", text)
    missed = 0
    print("\nPython client / C client, same daemon, same run (targets: latency <= 1.30x C, "
          "throughput >= 0.95x C):")
    if m:
        ratio = lat_ns / 1e3 / float(m.group(1))
        ok = ratio <= 1.3
        missed |= not ok
        print("  64 B op latency: Python %.1f us, C %.1f us: %.2fx %s" % (
            lat_ns / 1e3, float(m.group(1)), ratio, "(met)" if ok else "(MISSED)"))
    for size, (r, w) in results.items():
        if size not in c:
            continue
        for what, py, cc in (("read", r, c[size][0]), ("write", w, c[size][1])):
            ratio = cc / py  # throughput of Python relative to C
            ok = ratio >= 0.95
            missed |= not ok
            print("  %5s %-5s: Python %.2f GB/s, C %.2f GB/s: %.2fx %s" % (
                fmt_size(size), what, size / py, size / cc, ratio, "(met)" if ok else "(MISSED)"))
    return 1 if missed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket")
    ap.add_argument("--max", type=parse_size, default=GIB)
    ap.add_argument("--iters", type=int, default=0)
    ap.add_argument("--compare")
    a = ap.parse_args()
    results, lat = asyncio.run(main_async(a))
    if a.compare:
        compare(a.compare, results, lat)  # reported, not failed: timings on a shared machine
    return 0


if __name__ == "__main__":
    sys.exit(main())
