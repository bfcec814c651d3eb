# SPDX-License-Identifier: MIT
"""
Across nodes: two daemons in two network namespaces (scripts/cluster.sh; loopback ports where
namespaces cannot be made), moving arrays and tensors over TCP; claims answered by events
(begin_read returns before the owner's daemon answers), refusals, cancels from either side
and a peer process killed in the middle of a transfer (its link shaped so that it lasts).
"""
import asyncio
import os
import signal
import subprocess
import textwrap
import time

import numpy as np
import pytest
import torch

import xferd
from conftest import SRC, run_python
from xferd import Descriptor, OperationStatus, XferError
from test_ops import as_bytes, fill

SLOW = 16 << 20  # bytes of a transfer over the shaped link: ~3 s at 40 mbit


class Cluster:
    def __init__(self):
        env = dict(os.environ, BUILD=os.environ.get("XFERD_BUILD", str(SRC / "build")))
        out = subprocess.run(
            [str(SRC / "scripts" / "cluster.sh"), "up", "2"], env=env, capture_output=True,
            text=True, timeout=60,
        )
        if out.returncode != 0:
            raise RuntimeError("cluster.sh up failed: " + out.stderr[-2000:])
        line = [l for l in out.stdout.splitlines() if l.startswith("XN_DIR=")][-1]
        self.env = dict(env, XN_DIR=line.split("=", 1)[1])
        self.dir = self.env["XN_DIR"]
        self.mode = open(os.path.join(self.dir, "mode")).read().strip() if os.path.exists(
            os.path.join(self.dir, "mode")) else "?"

    def sock(self, i):
        return os.path.join(self.dir, "n%d.sock" % i)

    def pid(self, i):
        return int(open(os.path.join(self.dir, "n%d.pid" % i)).read())

    def netns(self, *args):
        return subprocess.run([str(SRC / "scripts" / "netns.sh"), *args], env=self.env).returncode

    def down(self):
        subprocess.run([str(SRC / "scripts" / "cluster.sh"), "down"], env=self.env, timeout=60)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    yield c
    c.down()


@pytest.fixture
def nodes(cluster):
    a = xferd.Connector(cluster.sock(0), "node0")
    b = xferd.Connector(cluster.sock(1), "node1")
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def shaped(cluster):
    """Node 0 sends at 40 mbit while the test runs (netns mode only)."""
    if cluster.netns("shape", "0", "40mbit") != 0:
        pytest.skip("loopback mode: no link to shape")
    yield
    cluster.netns("unshape", "0")


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("like", ["numpy", "torch"])
@pytest.mark.parametrize("kind", ["read", "write"])
def test_across_nodes(nodes, like, kind):
    a, b = nodes

    async def main():
        pa, pb = a.pool(8 << 20), b.pool(8 << 20)
        mine = [pa.empty((4, 65536), "float32", like=like) for _ in range(3)]
        theirs = [pb.empty((3, 4, 65536), "float32", like=like)]
        src = mine if kind == "read" else theirs
        want = np.concatenate([fill(s, i) for i, s in enumerate(src)])
        if kind == "read":
            p = await a.create_readable([Descriptor(m) for m in mine])
            act = await b.begin_read(p.metadata(), [Descriptor(t) for t in theirs])
        else:
            p = await a.create_writable([Descriptor(m) for m in mine])
            act = await b.begin_write(p.metadata(), [Descriptor(t) for t in theirs])
        await asyncio.gather(act.wait_for_completion(20), p.wait_for_completion(20))
        dst = theirs if kind == "read" else mine
        assert np.array_equal(np.concatenate([as_bytes(d) for d in dst]), want)
        assert act.transport == "tcp" and act.peer not in ("", "local")

    run(main())


def test_refusals_arrive_as_events(nodes):
    a, b = nodes

    async def main():
        room = xferd.empty(4096)
        w = await a.create_writable(Descriptor(room))
        rd = await b.begin_read(w.metadata(), Descriptor(xferd.empty(4096)))
        with pytest.raises(XferError) as e:
            await rd.wait_for_completion(10)
        assert e.value.errno_name == "EINVAL" and "writable" in e.value.message
        assert rd.status == OperationStatus.ERRORED
        r = await a.create_readable(Descriptor(room))
        rd = await b.begin_read(r.metadata(), Descriptor(xferd.empty(100)))
        with pytest.raises(XferError) as e:
            await rd.wait_for_completion(10)
        assert e.value.errno_name == "EMSGSIZE"
        assert r.status == OperationStatus.INITIALIZED  # still claimable
        w.release()
        r.release()

    run(main())


def test_begin_read_does_not_wait_for_the_owner(cluster, nodes):
    """The owner's daemon is frozen: begin_read returns INITIALIZED at once, cancellable."""
    a, b = nodes

    async def main():
        r = await a.create_readable(Descriptor(xferd.empty(4096)))
        await (await b.begin_read(r.metadata(), Descriptor(xferd.empty(4096)))).wait_for_completion(10)
        r = await a.create_readable(Descriptor(xferd.empty(4096)))
        os.kill(cluster.pid(0), signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            rd = await b.begin_read(r.metadata(), Descriptor(xferd.empty(4096)))
            took = time.monotonic() - t0
            assert rd.status == OperationStatus.INITIALIZED
            rd.cancel()
            assert rd.status == OperationStatus.CANCELLED
        finally:
            os.kill(cluster.pid(0), signal.SIGCONT)
        assert took < 0.5, "begin_read took %.2f s with the owner frozen" % took
        # The owner hears the claimer's CANCEL (or never saw the claim): either way not stuck.
        r.release()

    run(main())


@pytest.mark.parametrize("side", ["owner", "claimer"])
def test_cancel_mid_transfer(nodes, shaped, side):
    a, b = nodes

    async def main():
        r = await a.create_readable(Descriptor(xferd.empty(SLOW)))
        rd = await b.begin_read(r.metadata(), Descriptor(xferd.empty(SLOW)))
        while rd.status != OperationStatus.IN_PROGRESS:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        (r if side == "owner" else rd).cancel()
        for op in (r, rd):
            with pytest.raises(XferError) as e:
                await op.wait_for_completion(10)
            assert e.value.errno_name == "ECANCELED" and "cancelled by its owner" in e.value.message
            assert op.status == OperationStatus.CANCELLED

    run(main())


def test_peer_process_killed_mid_transfer(cluster, nodes, shaped):
    _, b = nodes
    code = textwrap.dedent(
        """
        import sys, time, xferd
        c = xferd.Connector(sys.argv[1], "prefill")
        r = c.readable(xferd.Descriptor(xferd.empty(int(sys.argv[2]))))
        print(r.metadata(), flush=True)
        time.sleep(60)
        """
    )
    p = run_python(code, cluster.sock(0), str(SLOW), stdout=-1, text=True)
    try:
        meta = p.stdout.readline().strip()

        async def main():
            rd = await b.begin_read(meta, Descriptor(xferd.empty(SLOW)))
            while rd.status != OperationStatus.IN_PROGRESS:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)
            p.send_signal(signal.SIGKILL)
            with pytest.raises(XferError) as e:
                await rd.wait_for_completion(10)
            assert rd.status == OperationStatus.ERRORED
            assert e.value.errno_name == "ECONNRESET" and "disconnected" in e.value.message

        run(main())
    finally:
        p.kill()
        p.wait()


def test_many_concurrent_across_nodes(nodes):
    a, b = nodes

    async def main():
        pa, pb = a.pool(2 << 20), b.pool(2 << 20)

        async def one(i):
            src, dst = pa.empty(10000 + i), pb.empty(10000 + i)
            want = fill(src, i)
            w = await b.create_writable(Descriptor(dst))
            wr = await a.begin_write(w.metadata(), Descriptor(src))
            await asyncio.gather(w.wait_for_completion(20), wr.wait_for_completion(20))
            assert np.array_equal(dst, want)

        await asyncio.gather(*(one(i) for i in range(50)))

    run(main())


def test_kv_example_across_nodes(cluster):
    from test_example import run_example

    assert "over tcp" in run_example(cluster.sock(0), cluster.sock(1))


def test_kv_window_example_across_nodes(cluster):
    from test_example import run_window_example

    assert "over tcp" in run_window_example(cluster.sock(0), cluster.sock(1))


def test_window_across_nodes(nodes):
    """Node 1 puts KV blocks into node 0's window with a tag each (delivered once, in order)
    and gets them back byte-exact."""
    a, b = nodes

    async def main():
        cache = a.pool(4 << 20).empty(4 << 20)
        cache[:] = 0
        async with await a.create_window(Descriptor(cache)) as win:
            async with await b.open_window(win.metadata()) as rw:
                src = b.pool(1 << 20).empty(64 * 16384)
                want = fill(src, 9)
                blocks = [(i * 65536 + 3, Descriptor(src[i * 16384:(i + 1) * 16384]), "blk-%d" % i)
                          for i in range(64)]
                ops = await rw.put_many(blocks)
                assert all(o.transport == "tcp" for o in ops)
                notes = [await win.next_notification(20) for _ in range(64)]
                assert [n.tag for n in notes] == [b"blk-%d" % i for i in range(64)]
                assert notes[0].peer == b.node and notes[0].handle == rw.handle
                for i in range(64):
                    assert np.array_equal(cache[i * 65536 + 3:i * 65536 + 3 + 16384],
                                          want[i * 16384:(i + 1) * 16384])
                back = xferd.empty(64 * 16384)
                await rw.get_many([(i * 65536 + 3, Descriptor(back[i * 16384:(i + 1) * 16384]))
                                   for i in range(64)])
                assert np.array_equal(back, want)
                assert win.pending() == 0

    run(main())


def test_window_revoked_mid_get_across_nodes(nodes, shaped):
    """The owner closes its window while a get crawls over the shaped link (node 0 sends at
    40 mbit): the get ends CANCELLED with the owner's cause, the handle is revoked, later
    gets are refused."""
    a, b = nodes

    async def main():
        cache = xferd.empty(SLOW)
        win = await a.create_window(Descriptor(cache), access="read")
        rw = await b.open_window(win.metadata())
        get = rw.begin_get(0, Descriptor(xferd.empty(SLOW)), notify="never")
        while get.status != OperationStatus.IN_PROGRESS:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # bytes moving (16 MiB take ~3 s)
        win.close()
        with pytest.raises(XferError) as e:
            await get.wait_for_completion(20)
        assert get.status == OperationStatus.CANCELLED
        assert e.value.errno_name == "ECANCELED" and "closed by its owner" in e.value.message
        for _ in range(200):
            if rw.closed:
                break
            await asyncio.sleep(0.05)
        assert rw.closed and rw.error.errno_name == "ECANCELED"
        with pytest.raises(XferError) as e:
            await rw.get(0, Descriptor(xferd.empty(4096)))
        assert e.value.errno_name in ("ECANCELED", "ECONNRESET")
        assert win.pending() == 0  # a get that did not complete notifies nothing
        rw.close()

    run(main())


@pytest.mark.parametrize("way", ["file_to_remote_tensor", "tensor_to_remote_file"])
def test_files_across_nodes(nodes, tmp_path, way):
    """GdsFile's load/save through a peer: node 0's file range read into node 1's tensor
    (a readable over the file), and node 1's tensor read straight into node 0's file range
    (begin_read into a File), at unaligned offsets, byte-exact."""
    a, b = nodes
    n, off = (1 << 20) + 333, 4099
    path = tmp_path / "shard.bin"
    want = np.random.default_rng(21).integers(0, 256, size=n, dtype=np.uint8)

    async def main():
        t = xferd.empty(n, torch.uint8, like="torch")
        if way == "file_to_remote_tensor":
            path.write_bytes(b"\0" * off + want.tobytes() + b"\0" * 17)
            with xferd.File(path, "r", offset=off, length=n) as f:
                r = await a.create_readable(f)
                rd = await b.begin_read(r.metadata(), Descriptor(t))
                for op in (rd, r):
                    await op.wait_for_completion(30)
            assert rd.transport == "tcp" and np.array_equal(as_bytes(t), want)
        else:
            as_bytes(t)[:] = want
            r = await b.create_readable(Descriptor(t))
            with xferd.File(path, "w", offset=off, length=n) as f:
                rd = await a.begin_read(r.metadata(), f)
                for op in (rd, r):
                    await op.wait_for_completion(30)
            got = np.frombuffer(path.read_bytes(), np.uint8)
            assert rd.transport == "tcp" and len(got) == off + n
            assert np.array_equal(got[off:], want)

    run(main())
