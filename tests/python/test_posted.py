# SPDX-License-Identifier: MIT
"""
Posted requests (xfer_post_op()): create_* / begin_* that write their request and suspend until
the reply comes through the fd the loop watches. Many at once from one loop with the bytes
compared; refusals delivered to the task that made them with the errno name and the sentence;
an event that comes before its operation's reply; a task cancelled before its reply came; a
connector closed and a daemon killed with requests outstanding (every task gets an error, the
daemon keeps nothing); which path "auto" takes.
"""
import asyncio
import errno
import os
import signal

import numpy as np
import pytest

import xferd
from conftest import census, settle, steady_fds
from xferd import Descriptor, OperationStatus, XferError
from xferd import _clib


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def posts(monkeypatch):
    """Counts xfer_post_op() calls (the posted path taken)."""
    real = _clib.lib.xfer_post_op
    count = [0]

    def counted(*args):
        count[0] += 1
        return real(*args)

    monkeypatch.setattr(_clib.lib, "xfer_post_op", counted)
    return count


def pattern(n, seed):
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)


async def pairing(a, b, i, write, pa, pb):
    """One pairing of 4096 + i bytes, a offering, b claiming; returns after comparing bytes."""
    src, dst = pa.empty(4096 + i, "uint8"), pb.empty(4096 + i, "uint8")
    if write:
        src, dst = dst, src  # b's buffer goes into a's
    want = pattern(src.size, i)
    src[:] = want
    if write:
        p = await a.create_writable(Descriptor(dst))
        act = await b.begin_write(p.metadata(), Descriptor(src))
    else:
        p = await a.create_readable(Descriptor(src))
        act = await b.begin_read(p.metadata(), Descriptor(dst))
    await asyncio.gather(p.wait_for_completion(20), act.wait_for_completion(20))
    assert np.array_equal(dst, want), "pairing %d: bytes differ" % i


@pytest.mark.parametrize("write", [False, True])
def test_many_posted_pairings_from_one_loop(daemon, posts, write):
    n = 100

    async def main():
        with xferd.Connector(daemon.sock, "a", posting="always") as a, \
                xferd.Connector(daemon.sock, "b", posting="always") as b:
            pa, pb = a.pool(2 << 20), b.pool(2 << 20)
            await asyncio.gather(*(pairing(a, b, i, write, pa, pb) for i in range(n)))
            assert a._ops == {} and b._ops == {} and a._pending == {} and b._pending == {}
            assert a._early == {} and b._early == {}

    run(main())
    assert posts[0] == 2 * n


def test_auto_posts_only_while_others_wait(daemon, posts):
    """A lone pairing makes blocking calls; pairings in flight together post."""

    async def main():
        with xferd.Connector(daemon.sock, "a") as a, xferd.Connector(daemon.sock, "b") as b:
            pa, pb = a.pool(1 << 20), b.pool(1 << 20)
            await pairing(a, b, 0, False, pa, pb)
            assert posts[0] == 0
            await asyncio.gather(*(pairing(a, b, i, False, pa, pb) for i in range(8)))
            assert posts[0] > 0
            lone = posts[0]
            await pairing(a, b, 9, True, pa, pb)
            assert posts[0] == lone

    run(main())
    assert xferd.connector._tasks == {}


def test_auto_does_not_walk_every_task_per_call(daemon, monkeypatch):
    """A server holds many idle tasks: "auto" must not walk them all on every call (uvloop,
    which shows no ready queue: asyncio.all_tasks() once, its answer kept a while; asyncio's
    own loop never walks them)."""
    real, walks = asyncio.all_tasks, [0]

    def counted(*args):
        walks[0] += 1
        return real(*args)

    monkeypatch.setattr(asyncio, "all_tasks", counted)
    calls = 20

    async def main():
        idle = [asyncio.create_task(asyncio.sleep(60)) for _ in range(300)]
        await asyncio.sleep(0)
        with xferd.Connector(daemon.sock, "a") as a, xferd.Connector(daemon.sock, "b") as b:
            pa, pb = a.pool(1 << 20), b.pool(1 << 20)
            t0 = asyncio.get_running_loop().time()
            for i in range(calls // 2):
                await pairing(a, b, i, False, pa, pb)
            elapsed = asyncio.get_running_loop().time() - t0
        for t in idle:
            t.cancel()
        await asyncio.gather(*idle, return_exceptions=True)
        return elapsed

    elapsed = run(main())
    # one walk per _OTHERS_KEEP_S at most (and one more for the boundary), not one per call
    assert walks[0] <= 2 + int(elapsed / xferd.connector._OTHERS_KEEP_S), \
        "%d walks of every task for %d calls in %.3f s" % (walks[0], calls, elapsed)


def test_posting_must_be_known(daemon):
    with pytest.raises(XferError) as e:
        xferd.Connector(daemon.sock, posting="sometimes")
    assert e.value.errno_name == "EINVAL" and "posting is one of auto, always, never" in e.value.message


def test_refusals_reach_the_task_that_posted(daemon):
    """A readable over a region the daemon no longer has, and claims on garbage metadata and of
    the wrong length, posted among good pairings: each task gets its own refusal."""

    async def bad_region(a):
        d = Descriptor(xferd.empty(4096))
        region = d._desc_for(a)[0]
        a._c_call(_clib.lib.xfer_region_deregister, region, 0)  # behind the package's back
        with pytest.raises(XferError) as e:
            await a.create_readable(d)
        assert e.value.errno_name == "ENOENT" and "no region %d" % region in e.value.message

    async def garbage(b):
        with pytest.raises(XferError) as e:
            await b.begin_read("xfer1.garbage", Descriptor(xferd.empty(4096)))
        assert e.value.errno_name == "EBADMSG"

    async def too_short(a, b):
        r = await a.create_readable(Descriptor(xferd.empty(4096)))
        with pytest.raises(XferError) as e:
            await b.begin_read(r.metadata(), Descriptor(xferd.empty(100)))
        assert e.value.errno_name == "EMSGSIZE" and e.value.message
        r.release()

    async def main():
        with xferd.Connector(daemon.sock, "a", posting="always") as a, \
                xferd.Connector(daemon.sock, "b", posting="always") as b:
            pa, pb = a.pool(1 << 20), b.pool(1 << 20)
            await asyncio.gather(
                pairing(a, b, 1, False, pa, pb), bad_region(a), pairing(a, b, 2, True, pa, pb),
                garbage(b), too_short(a, b), pairing(a, b, 3, False, pa, pb))
            assert a._pending == {} and b._pending == {}

    run(main())


def test_event_before_its_reply_is_kept(daemon, monkeypatch):
    """The library delivers events in arrival order, so an op's end may come before the reply
    naming it (test_post_op.c shows that order from the library): simulated here at the
    package's boundary, the end comes first and the operation still sees it."""

    async def main():
        with xferd.Connector(daemon.sock, "a", posting="always") as a, \
                xferd.Connector(daemon.sock, "b", posting="always") as b:
            real = b._on_reply

            def end_first(reply):
                ev = _clib.XferOpInfo(op=reply.op, state=5, error=-errno.EHOSTUNREACH)
                ev.cause = b"simulated: ended before the reply"
                b._on_event(xferd.connector._Event(ev))
                real(reply)

            r = await a.create_readable(Descriptor(xferd.empty(4096)))
            monkeypatch.setattr(b, "_on_reply", end_first)
            rd = await b.begin_read(r.metadata(), Descriptor(xferd.empty(4096)))
            monkeypatch.undo()
            assert rd.status == OperationStatus.ERRORED
            assert rd.error.errno_name == "EHOSTUNREACH" and "simulated" in rd.error.message
            assert b._early == {} and rd.id not in b._ops
            r.release()

    run(main())


def stopped(d):
    """The daemon stopped (SIGSTOP): it reads no request until resumed."""
    os.kill(d.pid, signal.SIGSTOP)


def resumed(d):
    os.kill(d.pid, signal.SIGCONT)


def test_events_of_released_ops_are_not_kept(daemon):
    """With requests always outstanding, an event of an op whose reply came already (released
    since) is not kept for a reply that will never name it: _early stays bounded."""

    async def main():
        with xferd.Connector(daemon.sock, "a", posting="always") as a:
            pool = a.pool(1 << 20)
            ops = [await a.create_readable(Descriptor(pool.empty(4096, "uint8"))) for _ in range(3)]
            for op in ops:
                op.release()
            a._pending[1 << 62] = None  # as if another task's request were outstanding
            try:
                for op in ops:  # (the shape of a CANCELLED op.changed for each)
                    a._on_event(xferd.connector._Event.local(op, OperationStatus.CANCELLED,
                                                             errno.ECANCELED, "released"))
                assert a._early == {}, "events of released ops kept: %r" % list(a._early)
            finally:
                del a._pending[1 << 62]

    run(main())


def test_cancel_before_the_reply_releases_the_op(fresh_daemon):
    base = census(fresh_daemon.sock)
    fds = steady_fds(fresh_daemon.nfds)

    async def main():
        with xferd.Connector(fresh_daemon.sock, "a", posting="always") as a:
            buf = xferd.empty(4096)
            Descriptor(buf).register_memory(a)
            stopped(fresh_daemon)
            try:
                t = asyncio.ensure_future(a.create_readable(Descriptor(buf)))
                await asyncio.sleep(0)  # the task posts and suspends
                assert len(a._pending) == 1
                t.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await t
            finally:
                resumed(fresh_daemon)
            deadline = asyncio.get_running_loop().time() + 10
            while a._pending:  # the reply comes; its op is released, no task sees it
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.01)
            assert a._ops == {}
            assert census(fresh_daemon.sock)["ops"] == 0

    run(main())
    settle(fresh_daemon, base, fds)


def test_close_with_requests_outstanding(fresh_daemon):
    base = census(fresh_daemon.sock)
    fds = steady_fds(fresh_daemon.nfds)

    async def main():
        a = xferd.Connector(fresh_daemon.sock, "a", posting="always")
        buf = Descriptor(xferd.empty(4096))
        buf.register_memory(a)  # (a blocking call: not while the daemon is stopped)
        stopped(fresh_daemon)
        try:
            tasks = [asyncio.ensure_future(a.create_readable(buf)) for _ in range(8)]
            await asyncio.sleep(0)
            assert len(a._pending) == 8
            a.close()
            got = await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            resumed(fresh_daemon)
        for e in got:
            assert isinstance(e, XferError), e
            assert e.errno_name == "ENOTCONN"
            assert "closed before xferd answered op.readable" in e.message
        assert a._pending == {}

    run(main())
    settle(fresh_daemon, base, fds)


def test_daemon_killed_with_requests_outstanding(fresh_daemon):
    async def main():
        a = xferd.Connector(fresh_daemon.sock, "a", posting="always")
        b = xferd.Connector(fresh_daemon.sock, "b", posting="always")
        r = await a.create_readable(Descriptor(xferd.empty(4096)))
        mine, theirs = Descriptor(xferd.empty(4096)), Descriptor(xferd.empty(4096))
        mine.register_memory(a)  # (a blocking call: not while the daemon is stopped)
        theirs.register_memory(b)
        stopped(fresh_daemon)
        tasks = [asyncio.ensure_future(a.create_writable(mine)) for _ in range(4)]
        tasks.append(asyncio.ensure_future(b.begin_read(r.metadata(), theirs)))
        await asyncio.sleep(0)
        assert len(a._pending) == 4 and len(b._pending) == 1
        os.kill(fresh_daemon.pid, signal.SIGKILL)
        got = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        for e in got:
            assert isinstance(e, XferError), e
            assert e.errno_name == "ECONNRESET"
            assert "connection to xferd lost before it answered op." in e.message
        assert r.status == OperationStatus.ERRORED
        assert a._pending == {} and b._pending == {}
        a.close()
        b.close()

    run(main())
    fresh_daemon.proc.wait(10)
