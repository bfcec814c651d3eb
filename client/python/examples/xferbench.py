#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""
The Python client beside the C one (client/xferbench.c), on the same daemon in the same run of
`make bench`: time per operation from the claim (begin_read / begin_write) to the active side's
COMPLETE for 1 MiB .. --max, read and write, every transfer checked in full; and the latency of
a small operation (64 B: create_readable + begin_read + both ends seen, one whole round).

  xferbench.py --socket PATH [--max SIZE] [--iters N] [--compare XFERBENCH_OUTPUT] [--ref]
               [--json OUT] [--turns IN,OUT [--turn-first]] [--loop asyncio|uvloop] [--depth N]
  xferbench.py --summary --c C_OUTPUT... --py OUT...

Each round is the C client's, step for step (the same pattern filled and checked, the same
memcpy after), so both leave the caches alike for the timed transfers; the pattern is filled and
checked by the C client's own code (--pattern c, libxferbenchutil.so from the build), so the
untimed work between two transfers also takes as long (--pattern numpy: 3.5x as long, and the
next 16 MiB transfers, even the C library's own calls, took 8-30% longer on this 2-vCPU VM in
an in-process A/B). --compare reads what
`xferbench bench` printed in the same run and prints Python/C ratios with the targets (latency
within 1.3x of C, throughput at >= 1 MiB within 5%). --ref also runs every round through the C
library's own blocking calls (ctypes, no Python on their wake path), interleaved with the
Python rounds in this process: what the package adds, without the drift between two processes
run one after the other (`PY_REF=1 scripts/bench.sh` passes it). --json writes this run's
medians for --summary, which takes the outputs of several C and Python runs that
`scripts/bench.sh` made on one daemon (PY_ROUNDS=N) and prints, per size and direction, the
median over the rounds of each client's median, their ratio, and the spread of the per-round
ratios (Python and C of the same round). --turns runs in lockstep with `xferbench bench
--turns` (class Turns): the two processes pass a turn after every round, so they never run at
once yet measure within milliseconds of each other: one pair of processes run minutes apart,
one after the other, drifted by more than the 5% target on this shared machine. --loop uvloop
runs the package on uvloop's event loop (Debian python3-uvloop; what vLLM's and SGLang's servers
run) instead of asyncio's own; --json records which, and --summary says it.

The in-flight rows (--depth N, default 4; `xferbench bench --depth` prints the C client's) are
a separate measure: N pairings of a size at once on one event loop, N tasks each starting its
next pairing as its last one ended (create_readable, begin_read, both ends awaited: what an
engine writes), 2N per round, each between slices of its own of two buffers so that every
pairing's bytes are checked after the round; time = the round's first offer to its last end,
GB/s = the round's bytes / its time. --summary gives them their own ratios and spreads.
"""
import argparse
import asyncio
import ctypes
import json
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import xferd  # noqa: E402
from xferd import _clib  # noqa: E402  (--ref: the C library's own calls)

MIB, GIB = 1 << 20, 1 << 30
LAT_SIZE, LAT_ITERS = 64, 1000
# The in-flight rows, as client/xferbench.c's (IFL_SLICES_PER_SLOT, IFL_SIDE_MAX, DEPTH_MAX):
# pairings of a round per pairing in flight, and the most one side's slices may take.
INFLIGHT_SLICES_PER_SLOT, INFLIGHT_SIDE_MAX, DEPTH_MAX = 2, 512 * MIB, 64


class Turns:
    """--turns IN,OUT: lockstep with the C client (xferbench bench --turns, struct turns in
    client/xferbench.c; scripts/bench.sh joins them with two pipes). This process works only
    while it holds the turn, a byte passed over a pipe after every round, so the two clients
    never run at once yet take their rounds within milliseconds of each other: the VM's drift
    from one second to the next falls on both alike. EOF on IN (the other ended): alone."""

    def __init__(self, spec=None, first=False):
        self.fds = tuple(int(x) for x in spec.split(",")) if spec else None
        self.held, self.alone = first, False

    def take(self):
        while self.fds and not self.held and not self.alone:
            if os.read(self.fds[0], 1):
                self.held = True
            else:
                self.alone = True

    def give(self):
        if not self.fds or not self.held or self.alone:
            return
        self.held = False
        try:
            os.write(self.fds[1], b"t")
        except BrokenPipeError:  # the other process ended
            self.held = self.alone = True

    def between(self):
        """Ends a round: lets the other process run one, then takes the turn back."""
        self.give()
        self.take()


NO_TURNS = Turns()


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


class RefClient:
    """--ref: libxferclient's own blocking sequence (bench_pair_run in client/benchutil.c:
    xfer_readable, xfer_read, xfer_wait) through ctypes, in this process, on two connections of
    its own with no event callback (no Python runs on its wake path), over the same memfds."""

    def __init__(self, socket, name):
        self.c = ctypes.c_void_p()
        rc = _clib.lib.xfer_connect(socket.encode(), name.encode(), ctypes.byref(self.c))
        if rc < 0:
            raise SystemExit("xferbench.py: --ref: xfer_connect: %s" % _clib.strerror(rc))

    def desc(self, d):
        """A struct xfer_desc for Descriptor @d, its memfd registered on this connection."""
        region = ctypes.c_uint64()
        rc = _clib.lib.xfer_region_register(self.c, d._block.fd, 0, 0, b"ref", ctypes.byref(region))
        if rc < 0:
            raise SystemExit("xferbench.py: --ref: register: %s" % _clib.strerror(rc))
        return _clib.XferDesc(region.value, d.offset, d.nbytes)

    def drop(self, desc):
        """Deregisters the region of struct xfer_desc @desc (made by desc())."""
        rc = _clib.lib.xfer_region_deregister(self.c, desc.region, 0)
        if rc < 0:
            raise SystemExit("xferbench.py: --ref: deregister: %s" % _clib.strerror(rc))

    def close(self):
        _clib.lib.xfer_close(self.c)


def ref_pair(pas, act, pd, ad, write):
    """One pair as the C client runs it. Returns (start, offered, done) ns as pair() does."""
    lib, u64 = _clib.lib, ctypes.c_uint64
    pop, aop, md = u64(), u64(), ctypes.c_void_p()
    t0 = time.perf_counter_ns()
    rc = (lib.xfer_writable if write else lib.xfer_readable)(
        pas.c, ctypes.byref(pd), 1, None, ctypes.byref(pop), ctypes.byref(md))
    t1 = time.perf_counter_ns()
    if rc == 0:
        rc = (lib.xfer_write if write else lib.xfer_read)(
            act.c, ctypes.cast(md, ctypes.c_char_p), ctypes.byref(ad), 1, None, ctypes.byref(aop))
        if rc == 0:
            rc = lib.xfer_wait(act.c, aop.value, -1, None)
    t2 = time.perf_counter_ns()
    _clib.take_string(md.value)
    if rc == 0:
        rc = lib.xfer_wait(pas.c, pop.value, -1, None)
    lib.xfer_release(act.c, aop.value)
    lib.xfer_release(pas.c, pop.value)
    if rc < 0:
        raise SystemExit("xferbench.py: --ref pair: %s" % _clib.strerror(rc))
    return t0, t1, t2


class Pattern:
    """The C client's test pattern (client/benchutil.c): word i of a buffer is
    splitmix64(seed + (i + 1) * K1). Filled and checked 64 KiB at a time through two small
    scratch arrays, so that around each timed transfer this touches the buffers as the C client
    does (one pass writing the source, one reading the target) and nothing else: no
    buffer-sized temporaries to push the buffers out of the caches the copy then runs from."""

    K1, K2, K3 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
    CHUNK = 8192  # words

    def __init__(self):
        self.steps = np.arange(1, self.CHUNK + 1, dtype=np.uint64) * np.uint64(self.K1)
        self.z = np.empty(self.CHUNK, np.uint64)
        self.t = np.empty(self.CHUNK, np.uint64)

    def words(self, seed, first, n):
        z, t = self.z[:n], self.t[:n]
        np.add(self.steps[:n], np.uint64((seed + first * self.K1) & (2**64 - 1)), out=z)
        for shift, mult in ((30, self.K2), (27, self.K3), (31, None)):
            np.right_shift(z, np.uint64(shift), out=t)
            np.bitwise_xor(z, t, out=z)
            if mult:
                np.multiply(z, np.uint64(mult), out=z)
        return z

    def chunks(self, buf):
        w = buf.view(np.uint64)
        for lo in range(0, len(w), self.CHUNK):
            hi = min(len(w), lo + self.CHUNK)
            yield lo, w[lo:hi]

    def fill(self, buf, seed):
        for lo, w in self.chunks(buf):
            w[:] = self.words(seed, lo, len(w))

    def check(self, buf, seed):
        return all(np.array_equal(w, self.words(seed, lo, len(w))) for lo, w in self.chunks(buf))


class CPattern:
    """The same pattern through the C client's own code (bench_pattern_fill/check of
    client/benchutil.c, built as libxferbenchutil.so beside the library): the round's untimed
    work then takes as long as in the C client. With numpy it took 3.5x as long (16 MiB: fill
    8.4 vs 2.6 ms, check 9.0 vs 1.9 ms), and the transfers after it were slower on this 2-vCPU
    VM whichever code made the calls (the C library's own, in one process, alternating, 16 MiB
    medians of three runs: 1.82/2.10/2.05 ms after numpy's pattern, 1.40/1.95/1.82 ms after
    C's, 1.38/1.99/1.84 ms in the C round)."""

    def __init__(self, lib):
        lib.bench_pattern_fill.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64]
        lib.bench_pattern_fill.restype = None
        lib.bench_pattern_check.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64,
                                            ctypes.POINTER(ctypes.c_size_t)]
        lib.bench_pattern_check.restype = ctypes.c_bool
        self.lib = lib

    def fill(self, buf, seed):
        self.lib.bench_pattern_fill(buf.ctypes.data, buf.nbytes, seed)

    def check(self, buf, seed):
        # (the C function stores the first bad offset through its last argument, never NULL:
        # passing None crashed the bench on the first mismatch instead of reporting it)
        bad = ctypes.c_size_t()
        return self.lib.bench_pattern_check(buf.ctypes.data, buf.nbytes, seed, ctypes.byref(bad))


def make_pattern(kind):
    """@kind "c": CPattern from libxferbenchutil.so in the library's directory (the build tree);
    "numpy": Pattern. Returns (pattern, what it is)."""
    if kind == "c":
        path = os.path.join(os.path.dirname(_clib.lib._name), "libxferbenchutil.so")
        try:
            return CPattern(ctypes.CDLL(path)), "the C client's (%s)" % path
        except OSError as e:
            raise SystemExit("xferbench.py: --pattern c needs %s (make builds it): %s; "
                             "--pattern numpy runs without it" % (path, e))
    return Pattern(), "numpy"


async def bench_size(pas, act, size, iters, ref=None, pattern="c", turns=NO_TURNS):
    """The C client's round (bench_round in client/xferbench.c), step for step: fill the
    source, read, check the target in full; fill the target, write, check the source; a memcpy
    of the same size (the C client times it for its memcpy column; here it only leaves the
    caches as the C round leaves them for the next one). With @ref (two RefClients), every
    iteration also runs that round through the C library's calls, after the Python one, on
    buffers of its own (ref_round_buffers). With @turns, one turn makes the buffers, each
    iteration ends with a turn of the other process.
    Returns {"py": (read p50, write p50, read p99, write p99), "ref": (...)} in ns."""
    turns.take()
    src, dst = zeroed(size), zeroed(size)
    ps, ds = xferd.Descriptor(src), xferd.Descriptor(dst)
    ps.register_memory(pas)
    ds.register_memory(act)
    pat = make_pattern(pattern)[0]
    ways = {"py": (lambda write: pair(pas, act, ps, ds, write), src, dst)}
    if ref:
        rsrc, rdst = zeroed(size), zeroed(size)
        pd, ad = ref[0].desc(xferd.Descriptor(rsrc)), ref[1].desc(xferd.Descriptor(rdst))

        async def ref_way(write):
            return ref_pair(ref[0], ref[1], pd, ad, write)

        ways["ref"] = (ref_way, rsrc, rdst)
    times = {k: ([], []) for k in ways}
    for i in range(-1, iters):
        seed = 1000 + 2 * (i + 1)
        for k, (way, s, d) in ways.items():  # (py first, then ref: see ref_round_buffers)
            r, w = await bench_round(way, pat, s, d, seed, size)
            if i >= 0:
                times[k][0].append(r)
                times[k][1].append(w)
        turns.between()
    if ref:  # as the C client's reg_buf_destroy(): this size's regions go before the next's
        ref[0].drop(pd)
        ref[1].drop(ad)
    result = {k: (pct(r, 50), pct(w, 50), pct(r, 99), pct(w, 99)) for k, (r, w) in times.items()}
    del ways, ps, ds, src, dst  # (unmapped in this turn; the daemon lets go at the next call)
    if ref:
        del rsrc, rdst
    turns.give()
    return result


# ref_round_buffers: why --ref rounds have buffers of their own and a fixed place. A 16 MiB
# copy's time hangs on what the cache still holds of its two buffers, so every timed round must
# find its buffers as the other client's rounds find theirs. In lockstep the C process runs one
# round per turn, on its buffers, and the Python rounds of a turn run between two of its rounds.
# When the --ref round shared the Python round's buffers and the two swapped places every
# iteration, half the Python rounds came straight after a round over the same buffers (hot),
# while every C round came after another process's rounds over others: with the daemon's
# streaming stores (from 8 MiB then) the Python 16 MiB write was 0.74-0.83x C with --ref and
# 0.93x without, and with memmove at 16 MiB the bias turned, Python 1.12-1.25x C with --ref,
# 0.92-0.98x without; C against C and Python against Python in lockstep were within 3%. Now
# each of the three has buffers of its own, in a fixed order (C, Python, ref, C, ...): between
# two rounds of any of them run exactly one round of each of the other two.


def zeroed(size):
    """A buffer as the C client's bench_buf_create() makes one: a sealed memfd zeroed by this
    process before it is registered, so its pages are this process's writes, not the daemon's
    populate (xferd.empty() leaves them untouched, and the daemon then faults them in itself)."""
    buf = xferd.empty(size)
    buf.fill(0)
    return buf


async def bench_round(way, pat, src, dst, seed, size):
    """One round (see bench_size) through @way(write). Returns (read ns, write ns)."""
    pat.fill(src, seed)
    _, t1, t2 = await way(False)
    if not pat.check(dst, seed):
        raise SystemExit("xferbench.py: read of %d bytes: bytes differ" % size)
    pat.fill(dst, seed + 1)
    _, u1, u2 = await way(True)
    if not pat.check(src, seed + 1):
        raise SystemExit("xferbench.py: write of %d bytes: bytes differ" % size)
    np.copyto(dst, src)
    return t2 - t1, u2 - u1


def pct(v, p):
    """The @p-th percentile of @v exactly as the C client computes it (bench_percentile)."""
    v = sorted(v)
    i = (len(v) * p + 99) // 100
    return v[i - 1 if i else 0]


async def bench_latency(pas, act, ref=None, turns=NO_TURNS):
    """Medians and p99 of whole 64 B rounds: {"py": (p50, p99)} and, with @ref, the C library's
    calls interleaved round by round: "ref". All of it is one turn of @turns."""
    turns.take()
    src, dst = zeroed(4096), zeroed(4096)
    ps = xferd.Descriptor(src[:LAT_SIZE]).register_memory(pas)
    ds = xferd.Descriptor(dst[:LAT_SIZE]).register_memory(act)
    ways = {"py": lambda: pair(pas, act, ps, ds, False)}
    if ref:
        pd, ad = ref[0].desc(ps), ref[1].desc(ds)

        async def ref_way():
            return ref_pair(ref[0], ref[1], pd, ad, False)

        ways["ref"] = ref_way
    rounds = {k: [] for k in ways}
    for i in range(-10, LAT_ITERS):
        for k in sorted(ways, reverse=i % 2 == 1):
            t0, _, t2 = await ways[k]()
            if i >= 0:
                rounds[k].append(t2 - t0)
    if ref:
        ref[0].drop(pd)
        ref[1].drop(ad)
    turns.give()
    return {k: (pct(v, 50), pct(v, 99)) for k, v in rounds.items()}


def inflight_sizes(sizes, depth):
    """The sizes of the in-flight rows: those whose slices fit INFLIGHT_SIDE_MAX a side (the C
    client's ifl_size_ok())."""
    return [s for s in sizes if s * depth * INFLIGHT_SLICES_PER_SLOT <= INFLIGHT_SIDE_MAX]


def inflight_seed(rnd, direction, total, j):
    """The pattern of slice @j in round @rnd's @direction (0 read, 1 write): ifl_seed() in C."""
    return 500000 + (2 * rnd + direction) * total + j


async def inflight_run(pas, act, pslices, aslices, write, depth):
    """One timed direction of an in-flight round: a pairing per slice (pair(): offer, claim,
    both ends awaited), @depth tasks at once, each taking the next slice as its pairing ends.
    Returns the ns from the first offer to the last end."""
    todo = iter(range(len(pslices)))  # shared: each task takes the next slice

    async def chain():
        for j in todo:
            await pair(pas, act, pslices[j], aslices[j], write)

    t0 = time.perf_counter_ns()
    await asyncio.gather(*[chain() for _ in range(depth)])
    return time.perf_counter_ns() - t0


async def inflight_round(pas, act, bufs, slices, size, depth, pat, rnd):
    """One in-flight round (ifl_round() in C): fill the passive slices, read them all in flight,
    check every active slice; fill the active slices, write, check the passive ones (untimed).
    Returns (read ns, write ns)."""
    total, ns = len(slices[0]), []
    for direction, what in enumerate(("read", "write")):
        src, dst = bufs[direction], bufs[1 - direction]
        for j in range(total):
            pat.fill(src[j * size:(j + 1) * size], inflight_seed(rnd, direction, total, j))
        ns.append(await inflight_run(pas, act, slices[0], slices[1], direction == 1, depth))
        for j in range(total):
            if not pat.check(dst[j * size:(j + 1) * size], inflight_seed(rnd, direction, total, j)):
                raise SystemExit("xferbench.py: in flight %s of %d bytes, pairing %d of %d: bytes "
                                 "differ" % (what, size, j, total))
    return ns


async def inflight_size(pas, act, size, iters, depth, pattern="c", turns=NO_TURNS):
    """The in-flight row of @size (ifl_size() in C): both sides' slices made in one turn, a
    warm-up round and @iters rounds, each followed by a turn of the other process.
    Returns (read p50, write p50) in ns."""
    turns.take()
    total = depth * INFLIGHT_SLICES_PER_SLOT
    bufs = (zeroed(size * total), zeroed(size * total))  # passive's, active's
    slices = tuple([xferd.Descriptor(b[j * size:(j + 1) * size]).register_memory(c)
                    for j in range(total)] for b, c in zip(bufs, (pas, act)))
    pat = make_pattern(pattern)[0]
    times = ([], [])
    for i in range(-1, iters):
        got = await inflight_round(pas, act, bufs, slices, size, depth, pat, i + 1)
        if i >= 0:
            times[0].append(got[0])
            times[1].append(got[1])
        turns.between()
    del slices, bufs  # (unmapped in this turn; the daemon lets go at the next call)
    turns.give()
    return pct(times[0], 50), pct(times[1], 50)


def iters_for(size, forced):
    return forced or max(5, min(200, GIB // size))


async def main_async(a):
    sizes = [s for s in (MIB, 16 * MIB, 64 * MIB, 256 * MIB, GIB) if s <= a.max]
    turns = Turns(a.turns, a.turn_first)
    results, ref_results = {}, {}
    async with xferd.Connector(a.socket, "xferbench-py-passive") as pas, xferd.Connector(
        a.socket, "xferbench-py-active"
    ) as act:
        print("xferbench.py: the Python package on the same daemon, on %s's event loop; time per "
              "op = claim to active-side COMPLETE, median; test pattern filled and checked by %s code"
              % (a.loop, make_pattern(a.pattern)[1]))
        print("%9s %5s %8s %8s %9s %9s %9s %9s  %s" % (
            "size", "iters", "read", "write", "read us", "write us", "read p99", "write p99", "verified"))
        print("%9s %5s %8s %8s %9s %9s %9s %9s" % ("", "", "GB/s", "GB/s", "p50", "p50", "us", "us"))
        ref = (RefClient(a.socket, "xferbench-ref-passive"),
               RefClient(a.socket, "xferbench-ref-active")) if a.ref else None
        for size in sizes:
            got = await bench_size(pas, act, size, iters_for(size, a.iters), ref, a.pattern, turns)
            r, w, r99, w99 = got["py"]
            results[size] = (r, w)
            if ref:
                ref_results[size] = got["ref"][:2]
            print("%9s %5d %8.2f %8.2f %9.1f %9.1f %9.1f %9.1f  yes" % (
                fmt_size(size), iters_for(size, a.iters), size / r, size / w, r / 1e3, w / 1e3,
                r99 / 1e3, w99 / 1e3), flush=True)
            if ref:
                cr, cw, cr99, cw99 = got["ref"]
                print("%9s %5s %8.2f %8.2f %9.1f %9.1f %9.1f %9.1f  yes  <- --ref: the C library's "
                      "calls, this process, interleaved: Python/ref %.2fx / %.2fx" % (
                          "", "", size / cr, size / cw, cr / 1e3, cw / 1e3, cr99 / 1e3, cw99 / 1e3,
                          cr / r, cw / w), flush=True)
        inflight = await inflight_rows(pas, act, sizes, a, turns)
        lat = await bench_latency(pas, act, ref, turns)
        med, p99 = lat["py"]
        print("\nsmall-op latency, %d B, %d rounds after 10 warm-up: create_readable + begin_read + "
              "both ends seen:\n  median %.1f us, p99 %.1f us" % (LAT_SIZE, LAT_ITERS, med / 1e3, p99 / 1e3))
        if ref:
            print("  --ref, the C library's calls interleaved: median %.1f us, p99 %.1f us: Python/ref "
                  "%.2fx" % (lat["ref"][0] / 1e3, lat["ref"][1] / 1e3, med / lat["ref"][0]))
        for c in ref or ():
            c.close()
    return results, med, lat, ref_results, inflight


async def inflight_rows(pas, act, sizes, a, turns):
    """The in-flight rows (see the top): {size: (read ns, write ns)} round medians."""
    out, total = {}, a.depth * INFLIGHT_SLICES_PER_SLOT
    for size in inflight_sizes(sizes, a.depth):
        if not out:
            print("\nin flight (--depth %d), a separate measure: %d pairings of a size at once on "
                  "one event loop (a task each, its next pairing\nstarted as one ends), %d per "
                  "round, each on slices of its own; time = the round's first offer to its last "
                  "end,\nmedian; GB/s = the round's bytes / its time; every slice checked in full"
                  % (a.depth, a.depth, total))
            print("%9s %5s %5s %5s %9s %9s %9s %9s  %s" % (
                "size", "iters", "depth", "pairs", "read", "write", "read us", "write us",
                "verified"))
        r, w = await inflight_size(pas, act, size, iters_for(size, a.iters), a.depth, a.pattern,
                                   turns)
        out[size] = (r, w)
        print("%9s %5d %5d %5d %9.2f %9.2f %9.1f %9.1f  yes  in flight" % (
            fmt_size(size), iters_for(size, a.iters), a.depth, total, size * total / r,
            size * total / w, r / 1e3, w / 1e3), flush=True)
    return out


def parse_c_inflight(path):
    """The in-flight rows `xferbench bench` printed: (depth or None, {size: (read ns, write ns)}
    round medians)."""
    rows, depth = {}, None
    for m in re.finditer(r"^\s*(\d+) ([KMG])iB\s+\d+\s+(\d+)\s+\d+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+"
                         r"([\d.]+)\s+yes\s+in flight$", open(path).read(), re.M):
        depth = int(m.group(3))
        rows[parse_size(m.group(1) + m.group(2))] = (float(m.group(4)) * 1e3,
                                                     float(m.group(5)) * 1e3)
    return depth, rows


def parse_c_output(path):
    """What `xferbench bench` printed: ({size: (read ns, write ns)} medians, 64 B round ns or
    None)."""
    text = open(path).read()
    c = {}
    for m in re.finditer(r"^\s*(\d+) ([KMG])iB\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+x\s+[\d.]+\s+"
                         r"[\d.]+x\s+([\d.]+)\s+([\d.]+)\s+yes", text, re.M):
        c[parse_size(m.group(1) + m.group(2))] = (float(m.group(3)) * 1e3, float(m.group(4)) * 1e3)
    m = re.search(r"readable \+ read \+ wait \(one whole round\)\s+([\d.]+) us", text)
    return c, float(m.group(1)) * 1e3 if m else None


def compare(path, results, lat_ns):
    """Python/C for what `xferbench bench` printed in the same run. Returns 0, or 1 if missed."""
    c, c_lat = parse_c_output(path)
    missed = 0
    print("\nPython client / C client, same daemon, same run (targets: latency <= 1.30x C, "
          "throughput >= 0.95x C):")
    if c_lat:
        ratio = lat_ns / c_lat
        ok = ratio <= 1.3
        missed |= not ok
        print("  64 B op latency: Python %.1f us, C %.1f us: %.2fx %s" % (
            lat_ns / 1e3, c_lat / 1e3, ratio, "(met)" if ok else "(MISSED)"))
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


def write_json(path, results, lat, ref_results, loop, depth, inflight):
    """This run's medians (ns) for --summary: sizes' (read, write) and the 64 B rounds; with
    --ref also the C library's calls of this process (ref_sizes); the event loop's name; the
    in-flight rounds' (read, write) and their depth."""
    with open(path, "w") as f:
        json.dump({"loop": loop, "sizes": {str(k): v for k, v in results.items()},
                   "depth": depth, "inflight": {str(k): v for k, v in inflight.items()},
                   "ref_sizes": {str(k): v for k, v in ref_results.items()},
                   "lat": lat["py"][0], "ref_lat": lat["ref"][0] if "ref" in lat else None}, f)


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def summary_row(what, c_ns, py_ns, target, higher_is_better, verdicts=("met", "MISSED")):
    """One --summary line: medians over the rounds, their ratio, the per-round ratios' spread,
    and @verdicts[0] or [1] as the ratio of the medians meets @target or not. Returns whether
    it met it."""
    per_round = sorted((c / p if higher_is_better else p / c) for c, p in zip(c_ns, py_ns))
    ratio = median(c_ns) / median(py_ns) if higher_is_better else median(py_ns) / median(c_ns)
    ok = ratio >= target if higher_is_better else ratio <= target
    print("  %-12s C %9.1f us  Python %9.1f us  %.2fx  (rounds %.2f..%.2f, median %.2f)  %s" % (
        what, median(c_ns) / 1e3, median(py_ns) / 1e3, ratio, per_round[0], per_round[-1],
        median(per_round), verdicts[0] if ok else verdicts[1]))
    return ok


def summary(c_paths, py_paths):
    """--summary over the rounds' outputs, paired in order (round i: c_paths[i], py_paths[i]).
    Returns 0, or 1 if a target is missed."""
    if not c_paths or len(c_paths) != len(py_paths):
        raise SystemExit("xferbench.py: --summary needs as many --c outputs as --py results")
    cs = [parse_c_output(p) for p in c_paths]
    pys = [json.load(open(p)) for p in py_paths]
    loops = sorted({p.get("loop", "asyncio") for p in pys})
    print("\nPython client (on %s's event loop) / C client over %d rounds on one daemon, C and "
          "Python processes taking turns round by round (bench.sh; who starts swapped every "
          "round); per client the median over the rounds of each run's median op time; targets: "
          "throughput >= 0.95x C, 64 B round <= 1.30x C:" % (" and ".join(loops), len(cs)))
    ok = True
    if all(c[1] for c in cs):
        ok &= summary_row("64 B round", [c[1] for c in cs], [p["lat"] for p in pys], 1.3, False)
    for key in sorted(pys[0]["sizes"], key=int):
        size = int(key)
        if not all(size in c[0] for c in cs):
            continue
        for k, what in enumerate(("read", "write")):
            ok &= summary_row("%5s %-5s" % (fmt_size(size), what), [c[0][size][k] for c in cs],
                              [p["sizes"][key][k] for p in pys], 0.95, True)
    inflight_summary(c_paths, pys)
    ref_summary(pys)
    return 0 if ok else 1


def inflight_summary(c_paths, pys):
    """The in-flight rows of every round, C and Python side by side: a separate measure, not
    the issue's target rows above, so compared with 0.95x but not called met or missed."""
    cs = [parse_c_inflight(p) for p in c_paths]
    depths = {c[0] for c in cs} | {p.get("depth") for p in pys}
    if not all(c[1] for c in cs) or not all(p.get("inflight") for p in pys):
        return
    if len(depths) != 1:
        raise SystemExit("xferbench.py: --summary: the rounds' in-flight rows have different "
                         "depths (%s): run both clients with the same --depth" % sorted(depths, key=str))
    print("In flight, a separate measure (--depth %d: %d pairings at once, %d per round; the "
          "round's bytes / its time, offers and claims included), per client the median over "
          "the rounds of each run's median round:" % (
              pys[0]["depth"], pys[0]["depth"], pys[0]["depth"] * INFLIGHT_SLICES_PER_SLOT))
    for key in sorted(pys[0]["inflight"], key=int):
        size = int(key)
        if not all(size in c[1] for c in cs):
            continue
        for k, what in enumerate(("read", "write")):
            summary_row("%5s %-5s" % (fmt_size(size), what), [c[1][size][k] for c in cs],
                        [p["inflight"][key][k] for p in pys], 0.95, True,
                        (">= 0.95x", "< 0.95x"))


def ref_summary(pys):
    """With --ref results in every round: Python against the C library's own calls made from the
    same process, interleaved iteration by iteration (no drift between two processes: what the
    package itself costs). Informative: the targets are against the C client's process."""
    if not all(p.get("ref_sizes") for p in pys):
        return
    print("Python / the C library's calls in the same process, interleaved (--ref), per round:")
    for key in sorted(pys[0]["ref_sizes"], key=int):
        for k, what in enumerate(("read", "write")):
            v = sorted(p["ref_sizes"][key][k] / p["sizes"][key][k] for p in pys)
            print("  %5s %-5s %.2fx  (rounds %.2f..%.2f)" % (
                fmt_size(int(key)), what, median(v), v[0], v[-1]))


def depth_arg(s):
    if not s.isdigit() or not 1 <= int(s) <= DEPTH_MAX:
        raise argparse.ArgumentTypeError("--depth takes 1 to %d, not %r" % (DEPTH_MAX, s))
    return int(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket")
    ap.add_argument("--max", type=parse_size, default=GIB)
    ap.add_argument("--iters", type=int, default=0)
    ap.add_argument("--compare")
    ap.add_argument("--ref", action="store_true",
                    help="also time the C library's own blocking calls through ctypes, interleaved "
                    "with the Python rounds in this process (what the asyncio package adds)")
    ap.add_argument("--pattern", choices=("c", "numpy"), default="c",
                    help="who fills and checks the buffers around each timed transfer: the C "
                    "client's code (default; libxferbenchutil.so) or numpy (3.5x slower)")
    ap.add_argument("--json", help="write this run's medians to this file (for --summary)")
    ap.add_argument("--turns", metavar="IN,OUT",
                    help="lockstep with `xferbench bench --turns` over two pipes (open fds): "
                    "a byte passed after every round, so the two never run at once")
    ap.add_argument("--turn-first", action="store_true", help="--turns: this process starts")
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio",
                    help="the event loop the package runs on: asyncio's own (default) or uvloop")
    ap.add_argument("--depth", type=depth_arg, default=4,
                    help="pairings in flight in the in-flight rows (1-%d; default 4)" % DEPTH_MAX)
    ap.add_argument("--summary", action="store_true",
                    help="no run: compare the --c outputs with the --py results, round by round")
    ap.add_argument("--c", nargs="+", default=[], help="--summary: `xferbench bench` outputs")
    ap.add_argument("--py", nargs="+", default=[], help="--summary: --json files, same order")
    a = ap.parse_args()
    if a.summary:
        summary(a.c, a.py)
        return 0  # reported, not failed: timings on a shared machine
    if not a.socket:
        ap.error("--socket is needed for a run")
    if a.loop == "uvloop":
        import uvloop  # Debian python3-uvloop

        uvloop.install()
    results, med, lat, ref_results, inflight = asyncio.run(main_async(a))
    if a.compare:
        compare(a.compare, results, med)  # reported, not failed: timings on a shared machine
    if a.json:
        write_json(a.json, results, lat, ref_results, a.loop, a.depth, inflight)
    return 0


if __name__ == "__main__":
    sys.exit(main())
