# SPDX-License-Identifier: MIT
"""
Windows through the package (PROTOCOL.md §5.1) on one daemon: puts with notify tags delivered
once and in order, gets byte-exact, batches (put_many/get_many over op.batch, more than one
request's worth), revocation by the owner, an opener that dies, and the errors (out of range,
wrong access, bad tags, a one-opener window opened twice) raising XferError with the errno
name. Across nodes: tests/python/test_cross.py.
"""
import asyncio
import errno
import os
import signal
import textwrap
import time
import warnings

import numpy as np
import pytest

import xferd
from conftest import census, run_python, settle
from xferd import Descriptor, OperationStatus, XferError


def run(coro):
    return asyncio.run(coro)


def pattern(n, seed):
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)


async def drain_notes(win, n, timeout=10):
    return [await win.next_notification(timeout) for _ in range(n)]


def test_puts_notify_once_and_in_order(pair):
    owner, peer = pair

    async def main():
        cache = xferd.empty(1 << 20)
        cache[:] = 0
        async with await owner.create_window(Descriptor(cache), access="write") as win:
            async with await peer.open_window(win.metadata()) as rw:
                assert (rw.length, rw.access) == (1 << 20, "write")
                src = xferd.empty(64 * 4096)
                want = pattern(src.nbytes, 1)
                src[:] = want
                # One by one, then many in one request; both notify in posting order.
                for i in range(16):
                    op = await rw.put(i * 4096, Descriptor(src[i * 4096:(i + 1) * 4096]),
                                      notify=b"req-%d" % i)
                    assert op.status == OperationStatus.COMPLETE and op.bytes == 4096
                blocks = [(i * 4096, Descriptor(src[i * 4096:(i + 1) * 4096]), "blk-%d" % i)
                          for i in range(16, 64)]
                ops = await rw.put_many(blocks)
                assert all(o.status == OperationStatus.COMPLETE for o in ops)
                notes = await drain_notes(win, 64)
                assert [n.tag for n in notes] == [b"req-%d" % i for i in range(16)] + [
                    b"blk-%d" % i for i in range(16, 64)]
                assert [n.offset for n in notes] == [i * 4096 for i in range(64)]
                assert all(n.kind == "put" and n.bytes == 4096 and n.peer == "local" for n in notes)
                assert all(n.handle == rw.handle for n in notes)
                # Once: nothing more arrives (an untagged put notifies nothing).
                await rw.put(0, Descriptor(src[:4096]))
                assert win.pending() == 0
                assert np.array_equal(cache[:64 * 4096], want)

    run(main())


def test_gets_are_byte_exact_at_unaligned_offsets(pair):
    owner, peer = pair

    async def main():
        pool = owner.pool(1 << 20)
        cache = pool.empty(1 << 20)
        want = pattern(cache.nbytes, 2)
        cache[:] = want
        async with await owner.create_window(Descriptor(cache), access="read", openers="one") as win:
            async with await peer.open_window(win.metadata()) as rw:
                a, b = xferd.empty(10007), xferd.empty(3)
                op = await rw.get(12345, [Descriptor(a), Descriptor(b)])  # gather into two
                assert op.kind == "get" and op.bytes == 10010
                assert np.array_equal(np.concatenate([a, b]), want[12345:12345 + 10010])
                dst = [xferd.empty(777) for _ in range(8)]
                offs = [1 + 4099 * i for i in range(8)]
                await rw.get_many([(o, Descriptor(d)) for o, d in zip(offs, dst)])
                for o, d in zip(offs, dst):
                    assert np.array_equal(d, want[o:o + 777])

    run(main())


def test_batches_larger_than_one_request(pair):
    owner, peer = pair

    async def main():
        n = 1500  # op.batch carries 1024: two requests
        cache = xferd.empty(n * 256)
        async with await owner.create_window(Descriptor(cache)) as win:
            async with await peer.open_window(win.metadata()) as rw:
                src = xferd.empty(n * 256)
                src[:] = pattern(src.nbytes, 3)
                blocks = [(i * 256, Descriptor(src[i * 256:(i + 1) * 256]), b"%d" % i) for i in range(n)]
                await rw.put_many(blocks)
                assert np.array_equal(cache, src)
                notes = await drain_notes(win, n)
                assert [int(x.tag) for x in notes] == list(range(n))

    run(main())


def test_errors_name_their_errno(pair):
    owner, peer = pair

    async def main():
        cache = xferd.empty(65536)
        src = Descriptor(xferd.empty(4096))
        ro = await owner.create_window(Descriptor(cache), access="read")
        wo = await owner.create_window(Descriptor(cache), access="write", openers="one")
        r, w = await peer.open_window(ro.metadata()), await peer.open_window(wo.metadata())
        with pytest.raises(XferError) as e:
            await r.put(0, src)
        assert e.value.errno_name == "EACCES"
        with pytest.raises(XferError) as e:
            await w.get(0, src)
        assert e.value.errno_name == "EACCES"
        with pytest.raises(XferError) as e:
            await w.put(65536 - 4095, src)
        assert e.value.errno_name == "EINVAL" and "passes the end" in e.value.message
        with pytest.raises(XferError) as e:
            await w.put(-1, src)
        assert e.value.errno_name == "EINVAL"
        for bad in (b"", b"x" * 257, b"a\0b", b"\xff\xfe"):
            with pytest.raises(XferError) as e:
                await w.put(0, src, notify=bad)
            assert e.value.errno_name == "EINVAL" and "tag" in e.value.message
        with pytest.raises(XferError) as e:  # one opener at a time
            await peer.open_window(wo.metadata())
        assert e.value.errno_name == "EBUSY"
        with pytest.raises(XferError) as e:
            await peer.open_window("xfer1.garbage")
        assert e.value.errno_name in ("EBADMSG", "EINVAL")
        with pytest.raises(XferError) as e:
            await owner.create_window(Descriptor(cache), access="all")
        assert e.value.errno_name == "EINVAL"
        # A refused entry stops the batch; the ones before it stand and complete.
        with pytest.raises(XferError) as e:
            w.begin_many([("put", 0, src), ("put", 65536, src), ("put", 0, src)])
        assert e.value.errno_name == "EINVAL" and e.value.failed == 1 and len(e.value.ops) == 1
        await e.value.ops[0].wait_for_completion(10)
        for x in (r, w, ro, wo):
            x.close()

    run(main())


def test_revocation_by_the_owner(daemon):
    owner = xferd.Connector(daemon.sock, "owner")
    peer = xferd.Connector(daemon.sock, "peer")

    async def main():
        cache = xferd.empty(1 << 20)
        win = await owner.create_window(Descriptor(cache))
        rw = await peer.open_window(win.metadata())
        src = Descriptor(xferd.empty(1 << 20))
        inflight = [rw.begin_put(0, src, notify="x") for _ in range(32)]
        win.close()  # returns once none of them is in flight any more
        ends = [await asyncio.gather(op.wait_for_completion(10), return_exceptions=True) for op in inflight]
        for op, (res,) in zip(inflight, ends):
            assert op.status in (OperationStatus.COMPLETE, OperationStatus.CANCELLED)
            if op.status == OperationStatus.CANCELLED:
                assert isinstance(res, XferError) and res.errno_name == "ECANCELED"
                assert "closed by its owner" in res.message
        assert rw.closed and rw.error.errno_name == "ECANCELED"
        with pytest.raises(XferError) as e:
            await rw.put(0, src)
        assert e.value.errno_name == "ECANCELED"
        with pytest.raises(XferError) as e:
            await peer.open_window(win.metadata())
        assert e.value.errno_name in ("ENOENT", "ECANCELED")
        rw.close()

    run(main())
    owner.close()
    peer.close()
    settle(daemon, {"clients": 0, "regions": 0, "ops": 0})


def test_opener_death(fresh_daemon):
    """An opener killed with its handle open: the owner's window outlives it, a one-opener
    window can be opened again, and nothing is left in the daemon."""
    owner = xferd.Connector(fresh_daemon.sock, "owner")

    async def main():
        cache = xferd.empty(65536)
        win = await owner.create_window(Descriptor(cache), openers="one")
        child = run_python(textwrap.dedent("""
            import os, signal, sys, xferd
            c = xferd.Connector(sys.argv[1], "doomed")
            rw = c.remote_window(sys.argv[2])
            buf = xferd.empty(4096)
            buf[:] = 42
            rw.begin_put(0, xferd.Descriptor(buf), notify=b"last words").wait(10)
            print("put", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        """), fresh_daemon.sock, win.metadata(), stdout=-1, text=True)
        out, _ = child.communicate(timeout=30)
        assert out.strip() == "put" and child.returncode == -signal.SIGKILL
        note = await win.next_notification(10)
        assert note.tag == b"last words" and (cache[:4096] == 42).all()
        # Its handle goes with its connection: one opener may open again.
        for _ in range(100):
            try:
                rw = await owner.open_window(win.metadata())
                break
            except XferError as e:
                assert e.errno_name == "EBUSY"
                await asyncio.sleep(0.05)
        buf = xferd.empty(4096)
        await rw.get(0, Descriptor(buf))
        assert (buf == 42).all()
        rw.close()
        win.close()

    run(main())
    owner.close()
    settle(fresh_daemon, {"clients": 0, "regions": 0, "ops": 0})


def test_blocking_forms(pair):
    owner, peer = pair
    cache = xferd.empty(8192)
    with owner.window(Descriptor(cache)) as win, peer.remote_window(win.metadata()) as rw:
        src = xferd.empty(8192)
        src[:] = pattern(8192, 5)
        rw.begin_put(0, Descriptor(src), notify="done").wait(10)
        assert win.wait_notification(10).tag == b"done"
        assert np.array_equal(cache, src)
    assert win.closed and rw.closed


async def put_tagged(rw, src, first, count):
    """@count tagged 1-byte puts at offset 0, tags first.., in op.batch requests of 1024 (the
    daemon's in-flight bound per opener is 4096: each request is awaited before the next)."""
    for lo in range(first, first + count, 1024):
        hi = min(first + count, lo + 1024)
        await rw.put_many([(0, src, b"%d" % i) for i in range(lo, hi)])


async def arrived(win, total, seconds=120):
    """Waits until @total notifications reached @win, kept or dropped, without taking any (the
    last ones may still be on their way when the opener sees its puts end). The deadline only
    guards against a hang: 16k notifications take seconds on a loaded 2-vCPU host."""
    deadline = time.monotonic() + seconds
    while win.pending() + getattr(win, "dropped", 0) < total:
        assert time.monotonic() < deadline, "%d of %d notifications arrived" % (
            win.pending() + getattr(win, "dropped", 0), total)
        await asyncio.sleep(0.01)


def test_unread_notifications_are_bounded(pair):
    # An owner that never iterates its window: the notifications it does not take must not grow
    # its process without bound. The window keeps the newest MAX_PENDING, drops the oldest,
    # counts them in ``dropped`` and warns once.
    owner, peer = pair
    bound, extra = 16384, 100

    async def main():
        cache = xferd.empty(4096)
        src = Descriptor(xferd.empty(4096)[:1])
        async with await owner.create_window(Descriptor(cache), access="write") as win:
            async with await peer.open_window(win.metadata()) as rw:
                with warnings.catch_warnings(record=True) as warned:
                    warnings.simplefilter("always")
                    # Unpaced: an owner slower than the puts slows them, it is not cut
                    # (PROTOCOL.md §10.9; tests/python/test_notify_flow.py).
                    await put_tagged(rw, src, 0, bound + extra)
                    await arrived(win, bound + extra)
                    assert win.pending() == bound
                assert win.dropped == extra
                assert win.max_pending == bound == xferd.Window.MAX_PENDING
                drops = [w for w in warned if issubclass(w.category, xferd.XferNotificationsDropped)]
                assert len(drops) == 1 and "dropped" in str(drops[0].message)  # once, not per drop
                note = await win.next_notification(10)  # the oldest kept: the first ones went
                assert note.tag == b"%d" % extra
                assert win.pending() == bound - 1

    run(main())


def test_notification_bound_is_per_window_and_checked(pair):
    owner, peer = pair

    async def main():
        cache = xferd.empty(4096)
        src = Descriptor(xferd.empty(4096)[:1])
        for bad in (0, -1, 1.5, "8", True):
            with pytest.raises(XferError) as e:
                await owner.create_window(Descriptor(cache), max_pending=bad)
            assert e.value.errno_name == "EINVAL" and "max_pending" in e.value.message
        async with await owner.create_window(Descriptor(cache), access="write", max_pending=4) as win:
            async with await peer.open_window(win.metadata()) as rw:
                with pytest.warns(xferd.XferNotificationsDropped):
                    await put_tagged(rw, src, 0, 10)
                    await arrived(win, 10)
                    assert win.pending() == 4
                assert win.dropped == 6
                assert [n.tag for n in await drain_notes(win, 4)] == [b"6", b"7", b"8", b"9"]
                # Taken as they come, nothing more is dropped.
                for i in range(10, 20):
                    await put_tagged(rw, src, i, 1)
                    assert (await win.next_notification(10)).tag == b"%d" % i
                assert win.dropped == 6 and win.pending() == 0

    run(main())
