#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""
The Python package's window row beside `xferbench_net win` (scripts/bench-net.sh, same run,
same daemons): the same work through xferd.Connector.create_window/open_window. The owner
(--passive) exposes its buffer as a readwrite window; the opener (--active) keeps N gets (bytes
owner -> opener) or puts (opener -> owner) in flight for --seconds (at least 64): slot k moves
the opener's slice k to or from window slice k; a slot is awaited oldest first, its stamp (the
op's sequence number in its first and last 8 bytes, as the C bench writes them) checked, and
started again. Every slot is compared in full at the end. Prints one JSON line per cell, the
fields of the C bench's plus "py": true.

  xferbench_win.py --passive SOCK --active SOCK [--sizes 4K,64K,1M] [--depths 16] [--seconds 1.5]
"""
import argparse
import asyncio
import json
import os
import struct
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import xferd  # noqa: E402


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def stamp_put(buf, k, size, seq):
    raw = struct.pack("<Q", seq)
    base = k * size
    buf[base:base + min(size, 8)] = np.frombuffer(raw[:min(size, 8)], np.uint8)
    if size >= 16:
        buf[base + size - 8:base + size] = np.frombuffer(raw, np.uint8)


def stamp_ok(buf, k, size, seq):
    base = k * size
    n = min(size, 8)
    a = int.from_bytes(buf[base:base + n].tobytes(), "little")
    want = seq & ((1 << (8 * n)) - 1)
    z = int.from_bytes(buf[base + size - 8:base + size].tobytes(), "little") if size >= 16 else seq
    return a == want and z == seq


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, len(v) * p // 100)]


async def cell(rw, owner_buf, opener_buf, descs, put, size, depth, seconds):
    src, dst = (opener_buf, owner_buf) if put else (owner_buf, opener_buf)
    src[:size * depth] = np.random.default_rng(size * 17 + put).integers(0, 256, size * depth, np.uint8)
    dst[:size * depth] = 0
    begin = rw.begin_put if put else rw.begin_get
    ops, t0s, seqs, lat = [None] * depth, [0] * depth, [0] * depth, []
    started = done = 0
    t0 = time.perf_counter_ns()

    def submit(k):
        nonlocal started
        started += 1
        seqs[k] = started
        stamp_put(src, k, size, started)
        t0s[k] = time.perf_counter_ns()
        ops[k] = begin(k * size, descs[k])

    for k in range(depth):
        submit(k)
    k = 0
    while done < started:
        op = ops[k]
        await op.wait_for_completion()
        lat.append(time.perf_counter_ns() - t0s[k])
        done += 1
        if op.bytes != size or not stamp_ok(dst, k, size, seqs[k]):
            raise SystemExit("xferbench_win.py: %s %d bytes: slot %d has stale bytes" % (
                "put" if put else "get", size, k))
        if started < 64 or time.perf_counter_ns() - t0 < seconds * 1e9:
            submit(k)
        k = (k + 1) % depth
    elapsed = time.perf_counter_ns() - t0
    if not np.array_equal(src[:size * depth], dst[:size * depth]):
        raise SystemExit("xferbench_win.py: a slot differs at the end")
    return {"win": True, "py": True, "kind": "put" if put else "get", "size": size, "depth": depth,
            "ops": done, "gbps": round(size * done / elapsed, 4), "us_p50": round(pct(lat, 50) / 1e3, 1),
            "us_p99": round(pct(lat, 99) / 1e3, 1), "us_per_op": round(elapsed / 1e3 / done, 2)}


async def main_async(a):
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    depths = [int(d) for d in a.depths.split(",")]
    span = max(sizes) * max(depths)
    async with xferd.Connector(a.passive, "xferbench-win-owner") as own, xferd.Connector(
        a.active, "xferbench-win-opener"
    ) as opener:
        owner_buf = own.pool(span).empty(span)
        opener_buf = opener.pool(span).empty(span)
        async with await own.create_window(xferd.Descriptor(owner_buf), access="readwrite") as win:
            async with await opener.open_window(win.metadata()) as rw:
                for put in (False, True):
                    for size in sizes:
                        for depth in depths:
                            descs = [xferd.Descriptor(opener_buf[k * size:(k + 1) * size]) for k in range(depth)]
                            r = await cell(rw, owner_buf, opener_buf, descs, put, size, depth, a.seconds)
                            print(json.dumps(r), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passive", required=True)
    ap.add_argument("--active", required=True)
    ap.add_argument("--sizes", default="4K,64K,1M")
    ap.add_argument("--depths", default="16")
    ap.add_argument("--seconds", type=float, default=1.5)
    asyncio.run(main_async(ap.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
