# SPDX-License-Identifier: MIT
"""
How an awaited operation's end resumes its task (client/python/xferd/_waiter.py): inside the
connector's reader callback, after xfer_dispatch() returned, not a turn of the loop later; with
the task's own context; every waiter of the operation; a cancelled waiter cancelled and the
others resumed; an exception of a resumed task kept in that task.
"""
import asyncio
import contextvars
import sys

import numpy as np
import pytest

import xferd
from xferd import Descriptor, OperationStatus

WHO = contextvars.ContextVar("who", default="unset")


def resumed_in_reader_callback():
    """True when the calling code runs below Connector._on_readable on the stack."""
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "_on_readable":
            return True
        f = f.f_back
    return False


async def wait_where(r):
    """Awaits @r's end: its status, and whether the await resumed inside the reader callback."""
    status = await r.wait_for_completion(20)
    return status, resumed_in_reader_callback()


async def claim_later(b, r, dst, delay=0.05):
    """Reads readable @r into @dst after @delay s: the owner's waits begin before the end."""
    await asyncio.sleep(delay)
    rd = await b.begin_read(r.metadata(), Descriptor(dst))
    return await rd.wait_for_completion(20)


def test_end_resumes_the_waiting_task_in_the_reader_callback(pair):
    a, b = pair
    src, dst = xferd.empty(1 << 20), xferd.empty(1 << 20)
    src[:] = np.arange(src.size, dtype=np.uint64).view(np.uint8)[: src.size]

    async def main():
        r = await a.create_readable(Descriptor(src))
        (status, direct), _ = await asyncio.gather(wait_where(r), claim_later(b, r, dst))
        assert status == OperationStatus.COMPLETE
        assert direct, "the end was resumed through a later turn of the loop"
        assert np.array_equal(dst, src)

    asyncio.run(main())


def test_every_waiter_resumes_in_its_own_context(pair):
    a, b = pair
    src, dst = xferd.empty(65536), xferd.empty(65536)
    src[:] = 7

    async def waiter(r, name):
        WHO.set(name)
        await r.wait_for_completion(20)
        return WHO.get()

    async def main():
        r = await a.create_readable(Descriptor(src))
        got = await asyncio.gather(*(waiter(r, "w%d" % i) for i in range(3)), claim_later(b, r, dst))
        assert got[:3] == ["w0", "w1", "w2"]
        assert (dst == 7).all()

    asyncio.run(main())


def test_cancelled_waiter_is_cancelled_and_the_others_resume(pair):
    a, b = pair
    src, dst = xferd.empty(65536), xferd.empty(65536)
    src[:] = 9

    async def main():
        r = await a.create_readable(Descriptor(src))
        gone = asyncio.ensure_future(r.wait_for_completion())
        kept = asyncio.ensure_future(r.wait_for_completion(20))
        await asyncio.sleep(0)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert r.status == OperationStatus.INITIALIZED  # a cancelled wait leaves it going
        await claim_later(b, r, dst, 0)
        assert await kept == OperationStatus.COMPLETE
        assert (dst == 9).all()

    asyncio.run(main())


def test_an_exception_of_a_resumed_task_stays_in_that_task(pair):
    a, b = pair
    src, dst = xferd.empty(65536), xferd.empty(65536)
    src[:] = 5

    async def failing(r):
        await r.wait_for_completion(20)
        raise ValueError("raised after the wakeup")

    async def main():
        r = await a.create_readable(Descriptor(src))
        got = await asyncio.gather(failing(r), r.wait_for_completion(20), claim_later(b, r, dst),
                                   return_exceptions=True)
        assert isinstance(got[0], ValueError)
        assert got[1] == OperationStatus.COMPLETE and got[2] == OperationStatus.COMPLETE
        assert (dst == 5).all()

    asyncio.run(main())


def end_callers(connector):
    """Records, per event the connector applies, its state and who handed it over: "callback"
    (libxferclient's event callback, through ctypes) or "reader" (xfer_dispatch_end in the
    reader callback or an await's first look). Returns that list."""
    seen, apply = [], connector._on_event

    def on_event(info):
        caller = sys._getframe(1).f_code.co_name
        seen.append((int(info.state), "callback" if caller == "on_event" else "reader"))
        apply(info)

    connector._on_event = on_event
    return seen


def test_an_awaited_end_is_taken_without_the_event_callback(pair):
    """The reader takes an end with xfer_dispatch_end() and applies it itself: no ctypes
    callback for it (the library's callback still carries the events before an end)."""
    a, b = pair
    src, dst = xferd.empty(1 << 20), xferd.empty(1 << 20)
    src[:] = 3
    seen = end_callers(a)

    async def main():
        r = await a.create_readable(Descriptor(src))
        (status, direct), _ = await asyncio.gather(wait_where(r), claim_later(b, r, dst))
        assert status == OperationStatus.COMPLETE and direct
        assert (dst == 3).all()

    asyncio.run(main())
    assert (OperationStatus.COMPLETE, "reader") in seen, seen
    assert (OperationStatus.COMPLETE, "callback") not in seen, seen


def test_ends_that_arrive_together_resume_every_waiter(pair):
    """Eight ends queued in the owner's socket at once (the claims ran without yielding to the
    loop): the reader takes one per call, leaving the rest readable; every waiter resumes
    COMPLETE, and nothing is left unread afterwards."""
    a, b = pair
    n = 8
    src, dst = xferd.empty(n * 4096), xferd.empty(n * 4096)
    src[:] = np.arange(src.size, dtype=np.uint32).view(np.uint8)[: src.size]
    seen = end_callers(a)

    async def claim_all(ops):
        await asyncio.sleep(0.05)  # every owner waits before the first end is pushed
        for i, r in enumerate(ops):  # blocking: the owner's reader cannot run in between
            b.read(r.metadata(), Descriptor(dst[i * 4096:(i + 1) * 4096])).wait(20)

    async def main():
        ops = [await a.create_readable(Descriptor(src[i * 4096:(i + 1) * 4096])) for i in range(n)]
        got = await asyncio.gather(*(wait_where(r) for r in ops), claim_all(ops))
        assert got[:n] == [(OperationStatus.COMPLETE, True)] * n
        assert np.array_equal(dst, src)
        assert a.dispatch() == 0

    asyncio.run(main())
    ends = [who for state, who in seen if state == OperationStatus.COMPLETE]
    assert ends == ["reader"] * n, seen
