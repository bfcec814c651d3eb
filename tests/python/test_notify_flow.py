# SPDX-License-Identifier: MIT
"""
Flow control of window notifications (PROTOCOL.md §10.9). Openers flood tagged puts, in batches
as fast as they can, at a window whose owner's client (a process of its own) reads nothing
until told, then drains: the owner stays connected and receives every tag exactly once and in
order per opener, every put completes, the bytes are all there, the daemon's queue to the owner
stays bounded, and nothing is left behind. Over TCP between the namespaced daemons (a remote
opener must not get the owner cut: WACKs wait with the notifications), and locally. An owner
that never reads: the openers' puts end at their deadline (ETIMEDOUT), what waits at the
daemon stays bounded, and closing either side frees everything.
"""
import asyncio
import collections
import json
import os
import subprocess
import textwrap
import time

import pytest

import xferd
from conftest import census, run_python, settle, steady_fds
from xferd import Descriptor, OperationStatus, XferError
from test_cross import Cluster

NOTIFY_HIGH = 1024  # daemon/xferd.h XD_NOTIFY_HIGH: queued packets past which notes wait
MAX_QUEUED = 4096  # XD_MAX_QUEUED: a client with this many queued is cut
MAX_INFLIGHT = 4096  # XD_WINDOW_MAX_INFLIGHT
SPAN = 1 << 14  # window bytes per opener: each of its puts writes one byte of its own

# The owner: makes the window, prints its metadata, reads nothing until "go" on stdin, then
# takes every notification (slowly), checks order per opener and the bytes, prints a summary
# and waits for "bye" (so that the test sees it still connected).
OWNER = textwrap.dedent("""
    import json, sys, time, xferd
    sock, openers, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    c = xferd.Connector(sock, "slow-owner")
    cache = xferd.empty(openers * %d)
    cache[:] = 0
    win = c.window(xferd.Descriptor(cache), access="write", max_pending=1 << 20)
    print(win.metadata(), flush=True)
    if sys.stdin.readline().strip() != "go":
        sys.exit(3)
    nxt = [0] * openers
    for k in range(openers * per):
        n = win.wait_notification(120)
        o, i = (int(v) for v in n.tag.split(b"-"))
        assert i == nxt[o], "opener %%d: tag %%d came where %%d was due" %% (o, i, nxt[o])
        assert n.offset == o * %d + i %% %d and n.bytes == 1, n
        nxt[o] += 1
        if k %% 512 == 0:
            time.sleep(0.002)  # slower than the puts come
    bad = [j for j in range(openers * %d) if cache[j] != (j * 7 + j // %d + 1) %% 256
           and j %% %d < per]
    print(json.dumps({"got": nxt, "bad_bytes": len(bad), "extra": win.pending()}), flush=True)
    sys.stdin.readline()
""" % (SPAN, SPAN, SPAN, SPAN, SPAN, SPAN))


def run(coro):
    return asyncio.run(coro)


def source():
    """A 256-byte buffer holding 0..255: a put of byte v takes [v, +1)."""
    buf = xferd.empty(256)
    buf[:] = range(256)
    return buf


def value(k, i):
    j = k * SPAN + i
    return (j * 7 + k + 1) % 256


async def settled(ops):
    """Awaits every op of @ops; failures stay on the ops (op.error)."""
    for op in ops:
        try:
            await op.wait_for_completion()
        except XferError:
            pass
    return ops


async def flood(rw, k, per, src, timeout=None, batch=1024, ahead=3):
    """Opener @k's @per tagged 1-byte puts, in op.batch requests of @batch, @ahead requests in
    flight (as fast as the credit lets), posted in order: returns their ops, ended."""
    ops, pending = [], collections.deque()
    for lo in range(0, per, batch):
        if len(pending) == ahead:
            ops += await settled(pending.popleft())
        blocks = [("put", k * SPAN + i, Descriptor(src[value(k, i):value(k, i) + 1]),
                   b"%d-%d" % (k, i)) for i in range(lo, min(per, lo + batch))]
        pending.append(rw.begin_many(blocks, timeout))
        await asyncio.sleep(0)
    while pending:
        ops += await settled(pending.popleft())
    return ops


def owner_client(sock):
    with xferd.Connector(sock, "census") as c:
        for e in c._call_json("list.clients", {"limit": 1000})["clients"]:
            if e["name"] == "slow-owner":
                return e
    return None


def waiting(sock):
    with xferd.Connector(sock, "census") as c:
        wins = [w for w in c._call_json("list.windows")["windows"] if w["role"] == "owner"]
    return sum(o.get("waiting", 0) for w in wins for o in w["openers"])


def start_owner(sock, openers, per):
    child = run_python(OWNER, sock, str(openers), str(per), stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, text=True)
    meta = child.stdout.readline().strip()
    assert meta.startswith("xfer1."), "the owner did not start"
    return child, meta


async def go_when_behind(sock, child, floods):
    """Tells the owner to read once notifications wait at its daemon (fixed), or it was cut
    or every put ended (not fixed): whichever comes first; the timeout only guards a hang."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if waiting(sock) > 0 or owner_client(sock) is None or all(f.done() for f in floods):
            break
        await asyncio.sleep(0.05)
    e = owner_client(sock)
    child.stdin.write("go\n")
    child.stdin.flush()
    return e


def finish_owner(sock, child):
    line = child.stdout.readline()
    e = owner_client(sock)
    child.stdin.write("bye\n")
    child.stdin.flush()
    child.wait(30)
    assert line, "the owner died (cut by its daemon?): exit %s" % child.returncode
    assert child.returncode == 0
    return json.loads(line), e


def check_flood(sock, child, openers, per, ops, behind):
    out, e = finish_owner(sock, child)
    assert behind is not None, "the owner was cut while it did not read"
    assert out["got"] == [per] * openers and out["extra"] == 0
    assert out["bad_bytes"] == 0
    assert all(o.status == OperationStatus.COMPLETE and o.bytes == 1 for o in ops), [
        o.error for o in ops if o.error][:1]
    assert len(ops) == openers * per
    # What its daemon queued to it stayed under the client bound, near the high-water mark.
    assert e["queued_max"] < MAX_QUEUED and e["queued_max"] <= NOTIFY_HIGH + 64, e


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    warm_up(c)
    yield c
    c.down()


def warm_up(cluster):
    """One put from node 1 to node 0, so that the set between them (whose connections stay
    up) is there before the tests count the daemons' fds."""
    with xferd.Connector(cluster.sock(0), "warm-owner") as a, xferd.Connector(
            cluster.sock(1), "warm-opener") as b:
        win = a.window(Descriptor(xferd.empty(4096)), access="write")
        rw = b.remote_window(win.metadata())
        rw.begin_put(0, Descriptor(source()[:1]), notify=b"w").wait(30)
        assert win.wait_notification(30).tag == b"w"
        rw.close()
        win.close()


def test_remote_flood_at_a_slow_owner(cluster):
    """Two openers on the other node (TCP one-sided frames), 8192 tagged puts each, at an owner
    that reads nothing until notifications wait at its daemon: they stall, never refused."""
    openers, per = 2, 8192
    a, b = cluster.sock(0), cluster.sock(1)
    base = ([census(a), census(b)],
            steady_fds(lambda: [cluster_fds(cluster, 0), cluster_fds(cluster, 1)]))
    child, meta = start_owner(a, openers, per)
    conns = [xferd.Connector(b, "flood-1"), xferd.Connector(b, "flood-2")]
    src = source()

    async def main():
        rws = [await c.open_window(meta) for c in conns]
        floods = [asyncio.ensure_future(flood(rw, k, per, src)) for k, rw in enumerate(rws)]
        behind = await go_when_behind(a, child, floods)
        ops = [o for f in floods for o in await f]
        for rw in rws:
            rw.close()
        return ops, behind

    ops, behind = run(main())
    assert {o.transport for o in ops} == {"tcp"}
    check_flood(a, child, openers, per, ops, behind)
    for c in conns:
        c.close()
    settle_cluster(cluster, base)


def cluster_fds(cluster, i):
    return len(os.listdir("/proc/%d/fd" % cluster.pid(i)))


def settle_cluster(cluster, base, seconds=10):
    """conftest's settle() for both nodes: the fds are counted before the census asks (the
    daemon closes the census connection's fd a loop turn after it hung up; counted after, it
    was in the count whenever the daemon was slower than this process)."""
    deadline = time.monotonic() + seconds
    while True:
        fds = [cluster_fds(cluster, 0), cluster_fds(cluster, 1)]
        now = [census(cluster.sock(0)), census(cluster.sock(1))], fds
        if now == base:
            return
        assert time.monotonic() < deadline, "daemons hold %s; held %s before" % (now, base)
        time.sleep(0.05)


def test_local_flood_at_a_slow_owner(daemon):
    """Two local openers, 6144 tagged puts each: a put whose copy is done ends only once its
    notification went, so they stall with the owner, never refused."""
    openers, per = 2, 6144
    base = census(daemon.sock), steady_fds(daemon.nfds)
    child, meta = start_owner(daemon.sock, openers, per)
    conns = [xferd.Connector(daemon.sock, "flood-%d" % k) for k in range(openers)]
    src = source()

    async def main():
        rws = [await c.open_window(meta) for c in conns]
        floods = [asyncio.ensure_future(flood(rw, k, per, src)) for k, rw in enumerate(rws)]
        behind = await go_when_behind(daemon.sock, child, floods)
        ops = [o for f in floods for o in await f]
        for rw in rws:
            rw.close()
        return ops, behind

    ops, behind = run(main())
    check_flood(daemon.sock, child, openers, per, ops, behind)
    for c in conns:
        c.close()
    settle(daemon, base[0], base[1])


@pytest.mark.parametrize("side", ["remote", "local"])
def test_owner_that_never_reads(cluster, side):
    """The opener's puts past what waits end at their deadline with ETIMEDOUT; what waits at
    the owner's daemon stays bounded; closing the opener, then the owner, frees all."""
    a, b = cluster.sock(0), cluster.sock(1)
    base = ([census(a), census(b)],
            steady_fds(lambda: [cluster_fds(cluster, 0), cluster_fds(cluster, 1)]))
    child, meta = start_owner(a, 1, 1)
    opener = xferd.Connector(b if side == "remote" else a, "flood-deaf")
    src = source()

    async def main():
        rw = await opener.open_window(meta)
        ops = await flood(rw, 0, 3 * 1024, src, timeout=1.5)
        states = {}
        for o in ops:
            states[o.status] = states.get(o.status, 0) + 1
        held = waiting(a)
        rw.close()
        return ops, states, held

    ops, states, held = run(main())
    e = owner_client(a)
    assert e is not None, "the owner was cut"
    assert e["queued_max"] <= NOTIFY_HIGH + 64, e
    assert 0 < held <= MAX_INFLIGHT
    assert states.get(OperationStatus.COMPLETE, 0) >= 1 and states.get(OperationStatus.ERRORED, 0) >= 1
    failed = [o for o in ops if o.status == OperationStatus.ERRORED]
    assert all(o.error.errno_name == "ETIMEDOUT" for o in failed), failed[0].error
    opener.close()
    child.kill()
    child.wait(10)
    settle_cluster(cluster, base)
