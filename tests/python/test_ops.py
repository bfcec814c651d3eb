# SPDX-License-Identifier: MIT
"""
The package on one daemon: the four operations with numpy and torch, scatter/gather, pools,
wrong pairing, cancel, deadlines, events before an operation's object exists, the blocking API,
foreign memory, and a client that exits without releasing anything.
"""
import asyncio
import errno
import os
import signal
import sys
import textwrap

import numpy as np
import pytest
import torch

import xferd
from conftest import census, run_python, settle, steady_fds
from xferd import Descriptor, OperationStatus, XferError


def fill(x, seed):
    """Fills array or tensor @x with bytes from @seed; returns them as a numpy uint8 copy."""
    raw = np.random.default_rng(seed).integers(0, 256, size=x.nbytes if hasattr(x, "nbytes") and not
                                              isinstance(x, torch.Tensor) else x.numel() * x.element_size(), dtype=np.uint8)
    as_bytes(x)[:] = raw
    return raw.copy()


def as_bytes(x):
    if isinstance(x, torch.Tensor):
        return x.view(torch.uint8).reshape(-1).numpy()
    return x.reshape(-1).view(np.uint8)


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("like", ["numpy", "torch"])
@pytest.mark.parametrize("kind", ["read", "write"])
def test_four_operations(pair, like, kind):
    a, b = pair
    dtype = "float16" if like == "numpy" else torch.bfloat16

    async def main():
        mine = xferd.empty((64, 1024), dtype, like=like)
        theirs = xferd.empty((64, 1024), dtype, like=like)
        src = mine if kind == "read" else theirs
        want = fill(src, 7)
        fill(theirs if kind == "read" else mine, 8)
        if kind == "read":
            passive = await a.create_readable(Descriptor(mine))
            assert passive.status == OperationStatus.INITIALIZED
            active = await b.begin_read(passive.metadata(), Descriptor(theirs))
        else:
            passive = await a.create_writable(Descriptor(mine))
            active = await b.begin_write(passive.metadata(), Descriptor(theirs))
        assert active.status in (OperationStatus.IN_PROGRESS, OperationStatus.COMPLETE)  # local
        assert await active.wait_for_completion(10) == OperationStatus.COMPLETE
        assert await passive.wait_for_completion(10) == OperationStatus.COMPLETE
        assert active.transport == "local" and passive.transport == "local"
        dst = theirs if kind == "read" else mine
        assert np.array_equal(as_bytes(dst), want)
        assert active.error is None and passive.error is None

    run(main())


def test_scatter_gather_boundaries_differ(pair):
    a, b = pair

    async def main():
        src = [xferd.empty(n, "uint8") for n in (1000, 70000, 3)]
        wants = [fill(s, i) for i, s in enumerate(src)]
        pool = b.pool(1 << 20)
        dst = [pool.empty(n, "uint8") for n in (40000, 31003)]
        for d in dst:
            d[:] = 0
        r = await a.create_readable([Descriptor(s) for s in src])
        rd = await b.begin_read(r.metadata(), [Descriptor(d) for d in dst])
        await rd.wait_for_completion(10)
        await r.wait_for_completion(10)
        assert np.array_equal(np.concatenate(dst), np.concatenate(wants))

    run(main())


def test_pool_carves_tensors_from_one_region(daemon, pair):
    a, _ = pair
    before = census(daemon.sock)["regions"]
    pool = a.pool(1 << 20)
    layers = [pool.empty((16, 256), torch.float16, like="torch") for _ in range(8)]
    descs = [Descriptor(t).register_memory(a) for t in layers]
    for d in descs:
        d.register_memory(a)  # idempotent
    assert census(daemon.sock)["regions"] == before + 1
    assert {d._desc_for(a)[0] for d in descs} == {pool.region}
    offsets = sorted(d.offset for d in descs)
    assert offsets == sorted(set(offsets)) and offsets[-1] + 16 * 256 * 2 <= pool.nbytes
    used = pool.used
    del descs, layers
    assert pool.used < used  # ranges went back to the pool with their tensors
    again = pool.empty((16, 256), torch.float16, like="torch")
    assert Descriptor(again).offset < pool.nbytes


def test_wrong_pairing_refused_with_errno_and_sentence(pair):
    a, b = pair

    async def main():
        mine = xferd.empty(4096)
        theirs = xferd.empty(4096)
        w = await a.create_writable(Descriptor(mine))
        with pytest.raises(XferError) as e:
            await b.begin_read(w.metadata(), Descriptor(theirs))
        assert e.value.errno_name == "EINVAL" and e.value.errno == errno.EINVAL
        assert "writable" in e.value.message and "readable" in e.value.message
        r = await a.create_readable(Descriptor(mine))
        with pytest.raises(XferError) as e:  # lengths differ
            await b.begin_read(r.metadata(), Descriptor(theirs[:100]))
        assert e.value.errno_name == "EMSGSIZE"
        with pytest.raises(XferError) as e:
            await b.begin_read("xfer1.garbage", Descriptor(theirs))
        assert e.value.errno_name == "EBADMSG"
        # The refusals left the passive side claimable.
        rd = await b.begin_read(r.metadata(), Descriptor(theirs))
        await rd.wait_for_completion(10)
        w.release()

    run(main())


def test_cancel_by_owner_before_claim(pair):
    a, b = pair

    async def main():
        buf, dst = xferd.empty(8192), xferd.empty(8192)
        r = await a.create_readable(Descriptor(buf))
        r.cancel()
        assert r.status == OperationStatus.CANCELLED
        assert r.error.errno_name == "ECANCELED" and "cancelled by its owner" in r.error.message
        with pytest.raises(XferError) as e:
            await r.wait_for_completion(1)
        assert e.value.errno_name == "ECANCELED"
        with pytest.raises(XferError) as e:
            await b.begin_read(r.metadata(), Descriptor(dst))
        assert e.value.errno_name in ("ECANCELED", "ENOENT")
        r.cancel()  # an ended op stays as it was
        assert r.status == OperationStatus.CANCELLED

    run(main())


def test_cancel_by_claimer_tells_owner(pair):
    """The writable's owner cancels from its side; then a claimer's cancel of its own op."""
    a, b = pair

    async def main():
        room, data = xferd.empty(1 << 20), xferd.empty(1 << 20)
        w = await a.create_writable(Descriptor(room))
        w.cancel()
        with pytest.raises(XferError):
            await b.begin_write(w.metadata(), Descriptor(data))
        # A claimer that cancels after it finished changes nothing on either side.
        r = await a.create_readable(Descriptor(room))
        rd = await b.begin_read(r.metadata(), Descriptor(data))
        await rd.wait_for_completion(10)
        rd.cancel()
        assert rd.status == OperationStatus.COMPLETE
        assert await r.wait_for_completion(10) == OperationStatus.COMPLETE

    run(main())


def test_deadline_ends_errored_etimedout(pair):
    a, _ = pair

    async def main():
        r = await a.create_readable(Descriptor(xferd.empty(4096)), timeout=0.2)
        with pytest.raises(XferError) as e:
            await r.wait_for_completion(5)
        assert e.value.errno_name == "ETIMEDOUT" and "deadline of 200 ms" in e.value.message
        assert r.status == OperationStatus.ERRORED and r.error is e.value

    run(main())


def test_wait_timeout_leaves_the_operation_going(pair):
    a, _ = pair

    async def main():
        r = await a.create_readable(Descriptor(xferd.empty(4096)))
        with pytest.raises(TimeoutError):
            await r.wait_for_completion(0.05)
        assert r.status == OperationStatus.INITIALIZED
        async with r:
            pass
        assert r.status == OperationStatus.CANCELLED

    run(main())


def test_blocking_api_for_scripts(pair):
    a, b = pair
    src, dst = xferd.empty(300000), xferd.empty(300000)
    want = fill(src, 3)
    with a.readable(Descriptor(src)) as r:
        rd = b.read(r.metadata(), Descriptor(dst))
        assert rd.wait(10) == OperationStatus.COMPLETE
        assert r.wait(10) == OperationStatus.COMPLETE
    assert np.array_equal(dst, want)
    w = a.writable(Descriptor(dst), timeout=0.1)
    with pytest.raises(XferError) as e:
        w.wait(5)
    assert e.value.errno_name == "ETIMEDOUT"
    r = a.readable(Descriptor(src))
    with pytest.raises(TimeoutError):
        r.wait(0.05)
    r.release()


def test_events_before_the_object_exists_are_kept(pair, monkeypatch):
    """
    An operation's end may be delivered inside the very call that creates it (the library
    delivers queued events before it returns). Simulated at the library boundary: the event
    for the new id arrives before the call returns; the object must still see it.
    """
    a, b = pair
    real = xferd._clib.lib.xfer_read

    def early_end(c, *args):
        rc = real(c, *args)
        op_id = args[-1]._obj.value
        ev = xferd._clib.XferOpInfo(op=op_id, state=5, error=-errno.EHOSTUNREACH)
        ev.cause = b"simulated: refused before the reply"
        b._on_event(xferd.connector._Event(ev))
        return rc

    async def main():
        r = await a.create_readable(Descriptor(xferd.empty(4096)))
        monkeypatch.setattr(xferd._clib.lib, "xfer_read", early_end)
        rd = await b.begin_read(r.metadata(), Descriptor(xferd.empty(4096)))
        monkeypatch.undo()
        assert rd.status == OperationStatus.ERRORED
        assert rd.error.errno_name == "EHOSTUNREACH" and "simulated" in rd.error.message
        assert b._early == {}
        r.release()

    run(main())


@pytest.mark.parametrize("kind", ["read", "write"])
def test_end_only_pushes_only_the_end(pair, monkeypatch, kind):
    """
    end_only=True (XFER_OP_END_ONLY) on both sides: neither connector is sent IN_PROGRESS, only
    the end, and the bytes still arrive. The same pairing without it shows the passive side's
    IN_PROGRESS, so the check would see one if the flag did not reach the daemon.
    """
    a, b = pair
    seen = []
    real = xferd.connector.Operation._apply

    def record(op, info):
        seen.append((op.id, OperationStatus(info.state)))
        real(op, info)

    monkeypatch.setattr(xferd.connector.Operation, "_apply", record)

    async def move(end_only, seed):
        mine, theirs = xferd.empty(1 << 20), xferd.empty(1 << 20)
        src = mine if kind == "read" else theirs
        want = fill(src, seed)
        create, begin = ((a.create_readable, b.begin_read) if kind == "read" else
                         (a.create_writable, b.begin_write))
        seen.clear()
        passive = await create(Descriptor(mine), end_only=end_only)
        active = await begin(passive.metadata(), Descriptor(theirs), end_only=end_only)
        assert await active.wait_for_completion(10) == OperationStatus.COMPLETE
        assert await passive.wait_for_completion(10) == OperationStatus.COMPLETE
        assert np.array_equal(as_bytes(theirs if kind == "read" else mine), want)
        return {op: [st for i, st in seen if i == op.id] for op in (passive, active)}

    async def main():
        plain = await move(False, 11)
        ended = await move(True, 12)
        assert OperationStatus.IN_PROGRESS in next(iter(plain.values()))  # the passive side
        for states in ended.values():
            assert states == [OperationStatus.COMPLETE]

    run(main())


def test_end_only_must_be_a_bool(pair):
    a, _ = pair

    async def main():
        with pytest.raises(XferError) as e:
            await a.create_readable(Descriptor(xferd.empty(4096)), end_only="yes")
        assert e.value.errno_name == "EINVAL" and "end_only must be True or False" in e.value.message

    run(main())


def test_many_concurrent_operations_on_one_loop(pair):
    a, b = pair
    n = 200

    async def one(i, pool_a, pool_b):
        src = pool_a.empty(4096 + i, "uint8")
        want = fill(src, i)
        dst = pool_b.empty(4096 + i, "uint8")
        r = await a.create_readable(Descriptor(src))
        rd = await b.begin_read(r.metadata(), Descriptor(dst))
        await asyncio.gather(r.wait_for_completion(20), rd.wait_for_completion(20))
        assert np.array_equal(dst, want)

    async def main():
        pa, pb = a.pool(4 << 20), b.pool(4 << 20)
        await asyncio.gather(*(one(i, pa, pb) for i in range(n)))
        assert a._ops == {} and b._ops == {}

    run(main())


def test_foreign_memory_refused_unless_copy(pair):
    a, b = pair
    plain = np.arange(1000, dtype=np.int32)
    with pytest.raises(XferError) as e:
        Descriptor(plain)
    assert e.value.errno_name == "EINVAL"
    assert "xferd.empty" in e.value.message and "copy=True" in e.value.message
    with pytest.raises(XferError, match="not C-contiguous"):
        Descriptor(xferd.empty((10, 10))[:, 1])
    with pytest.raises(XferError, match="a Descriptor takes"):
        Descriptor(object())

    async def main():
        target = torch.zeros(1000, dtype=torch.int32)  # plain torch memory, staged both ways
        with pytest.warns(xferd.XferStagingWarning):
            src = Descriptor(plain, copy=True)
        with pytest.warns(xferd.XferStagingWarning):
            dst = Descriptor(target, copy=True)
        assert src.staged and dst.staged
        r = await a.create_readable(src)
        rd = await b.begin_read(r.metadata(), dst)
        await rd.wait_for_completion(10)
        assert torch.equal(target, torch.from_numpy(plain))
        with pytest.warns(xferd.XferStagingWarning):
            w = await a.create_writable(Descriptor(b"x" * 10, copy=True))
        with pytest.warns(xferd.XferStagingWarning):
            wr = await b.begin_write(w.metadata(), Descriptor(bytes(range(10)), copy=True))
        await wr.wait_for_completion(10)
        await w.wait_for_completion(10)

    run(main())


def test_address_and_size_inside_xferd_memory(pair):
    a, b = pair
    buf = xferd.empty(8192)
    fill(buf, 9)
    addr = buf.__array_interface__["data"][0]
    d = Descriptor((addr + 4096, 4096))
    assert d.offset == 4096
    out = xferd.empty(4096)
    with a.readable(d) as r:
        b.read(r.metadata(), Descriptor(out)).wait(10)
    assert np.array_equal(out, buf[4096:])
    with pytest.raises(XferError, match="not memfd-backed"):
        Descriptor((addr + 4096, 1 << 20))


def test_connector_errors(daemon, tmp_path):
    with pytest.raises(XferError) as e:
        xferd.Connector(str(tmp_path / "none.sock"))
    assert e.value.errno_name in ("ENOENT", "ECONNREFUSED")
    c = xferd.Connector(daemon.sock)
    c.close()
    with pytest.raises(XferError) as e:
        c.readable(Descriptor(xferd.empty(10)))
    assert e.value.errno_name == "ENOTCONN"


def test_close_ends_live_operations(daemon):
    async def main():
        async with xferd.Connector(daemon.sock) as c:
            r = await c.create_readable(Descriptor(xferd.empty(4096)))
        assert r.status == OperationStatus.CANCELLED and "connector was closed" in r.error.message

    run(main())


def test_daemon_gone_ends_operations_errored(fresh_daemon):
    async def main():
        c = xferd.Connector(fresh_daemon.sock)
        r = await c.create_readable(Descriptor(xferd.empty(4096)))
        os.kill(fresh_daemon.pid, signal.SIGTERM)
        with pytest.raises(XferError) as e:
            await r.wait_for_completion(10)
        assert e.value.errno_name in ("ESHUTDOWN", "ECONNRESET")
        c.close()

    run(main())


EXIT_WITHOUT_RELEASE = textwrap.dedent(
    """
    import asyncio, os, sys, xferd
    async def main():
        a = xferd.Connector(sys.argv[1], "leaver-a")
        b = xferd.Connector(sys.argv[1], "leaver-b")
        pool = a.pool(1 << 20)
        t = [pool.empty(1024, "uint8") for _ in range(4)]
        ops = [await a.create_readable(xferd.Descriptor(x)) for x in t]
        w = await b.create_writable(xferd.Descriptor(xferd.empty(4096)))
        big = xferd.empty(64 << 20)
        r = await a.create_readable(xferd.Descriptor(big))
        rd = await b.begin_read(r.metadata(), xferd.Descriptor(xferd.empty(64 << 20)))
        print("ready", flush=True)
        os._exit(0)   # no close, no release, a transfer maybe under way
    asyncio.run(main())
    """
)


def test_client_exit_without_release_leaks_nothing(fresh_daemon):
    base = census(fresh_daemon.sock)
    fds = steady_fds(fresh_daemon.nfds)
    p = run_python(EXIT_WITHOUT_RELEASE, fresh_daemon.sock, stdout=-1, text=True)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0 and "ready" in out
    settle(fresh_daemon, base, fds)


def test_killed_peer_process_ends_errored_with_cause(daemon):
    """The owner is killed (SIGKILL) holding a readable that its peer is about to claim."""
    code = textwrap.dedent(
        """
        import sys, time, xferd
        c = xferd.Connector(sys.argv[1], "victim")
        buf = xferd.empty(1 << 20)
        r = c.readable(xferd.Descriptor(buf))
        print(r.metadata(), flush=True)
        time.sleep(60)
        """
    )
    p = run_python(code, daemon.sock, stdout=-1, text=True)
    meta = p.stdout.readline().strip()
    w_code = textwrap.dedent(
        """
        import sys, time, xferd
        c = xferd.Connector(sys.argv[1], "victim-w")
        w = c.writable(xferd.Descriptor(xferd.empty(1 << 20)))
        print(w.metadata(), flush=True)
        time.sleep(60)
        """
    )
    q = run_python(w_code, daemon.sock, stdout=-1, text=True)
    wmeta = q.stdout.readline().strip()

    async def main():
        async with xferd.Connector(daemon.sock, "survivor") as c:
            # A readable whose owner is gone: the claim is refused, naming why.
            p.send_signal(signal.SIGKILL)
            p.wait()
            with pytest.raises(XferError) as e:
                for _ in range(100):
                    rd = await c.begin_read(meta, Descriptor(xferd.empty(1 << 20)))
                    await rd.wait_for_completion(10)
                    await asyncio.sleep(0.02)
            assert e.value.errno_name in ("ENOENT", "ECANCELED")
            # A write under way when the owner dies: ERRORED, or COMPLETE if it won the race.
            wr = await c.begin_write(wmeta, Descriptor(xferd.empty(1 << 20)))
            q.send_signal(signal.SIGKILL)
            q.wait()
            try:
                assert await wr.wait_for_completion(10) == OperationStatus.COMPLETE
            except XferError as err:
                assert err.errno_name == "ECONNRESET" and "disconnected" in err.message

    run(main())
