# SPDX-License-Identifier: MIT
"""
xferd.File as a descriptor on one daemon: a file range served by a readable (no copy into
memory) and read into a tensor, a tensor written straight into a file range, at offsets and
lengths not aligned to pages, files mixed with memory in one operation, a window over a file,
and refusals: a read-only File as a target (the daemon's EBADF), a file this user may not
write (EACCES when it is opened, as nobody), ranges past a source's end. Across nodes:
tests/python/test_cross.py.
"""
import asyncio
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import xferd
from conftest import SRC, census, settle
from xferd import Descriptor, File, OperationStatus, XferError
from test_ops import as_bytes


def run(coro):
    return asyncio.run(coro)


def pattern(n, seed):
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)


@pytest.fixture
def datafile(tmp_path):
    path = tmp_path / "weights.bin"
    data = pattern((3 << 20) + 5, 11)
    path.write_bytes(data.tobytes())
    return path, data


async def pair_ends(*ops):
    for op in ops:
        assert await op.wait_for_completion(20) == OperationStatus.COMPLETE


@pytest.mark.parametrize("offset,length", [(0, 1), (4097, 300001), (1 << 20, (2 << 20) + 5)])
def test_file_to_tensor(pair, datafile, offset, length):
    """load: a readable over the file itself, read into a torch tensor."""
    a, b = pair
    path, data = datafile

    async def main():
        with File(path, "r", offset=offset, length=length) as f:
            r = await a.create_readable(f)
            t = xferd.empty(length, torch.uint8, like="torch")
            rd = await b.begin_read(r.metadata(), Descriptor(t))
            await pair_ends(rd, r)
            assert np.array_equal(as_bytes(t), data[offset:offset + length])

    run(main())


@pytest.mark.parametrize("offset,length", [(0, 4096), (12345, 70001)])
def test_tensor_to_file(pair, tmp_path, offset, length):
    """save: a writable over a file range; the tensor's bytes land there, the rest untouched."""
    a, b = pair
    path = tmp_path / "ckpt.bin"
    path.write_bytes(b"\xee" * (offset + length + 100))

    async def main():
        t = xferd.empty(length, torch.uint8, like="torch")
        want = pattern(length, 12)
        as_bytes(t)[:] = want
        with File(path, "w", offset=offset, length=length) as f:
            w = await a.create_writable(f)
            wr = await b.begin_write(w.metadata(), Descriptor(t))
            await pair_ends(wr, w)
        got = np.frombuffer(path.read_bytes(), np.uint8)
        assert np.array_equal(got[offset:offset + length], want)
        assert (got[:offset] == 0xEE).all() and (got[offset + length:] == 0xEE).all()

    run(main())


def test_read_into_a_new_file_and_mixed_descriptors(pair, tmp_path, datafile):
    """begin_read straight into a File (created, sized by File) and memory in one operation."""
    a, b = pair
    _, data = datafile

    async def main():
        src = xferd.empty(200000)
        src[:] = data[:200000]
        r = await a.create_readable(Descriptor(src))
        head = xferd.empty(1000)
        out = tmp_path / "new.bin"
        with File(out, "w", offset=7, length=199000) as f:
            rd = await b.begin_read(r.metadata(), [Descriptor(head), f])
            await pair_ends(rd, r)
        assert np.array_equal(head, data[:1000])
        got = out.read_bytes()
        assert len(got) == 7 + 199000 and got[7:] == data[1000:200000].tobytes()

    run(main())


def test_window_over_a_file(pair, datafile):
    """A read window over a file range: openers get from the file itself."""
    a, b = pair
    path, data = datafile

    async def main():
        with File(path, "r", offset=3, length=1 << 20) as f:
            async with await a.create_window(f, access="read") as win:
                async with await b.open_window(win.metadata()) as rw:
                    dst = xferd.empty(50001)
                    await rw.get(99, Descriptor(dst))
                    assert np.array_equal(dst, data[3 + 99:3 + 99 + 50001])

    run(main())


def test_refusals(pair, datafile, tmp_path):
    a, b = pair
    path, data = datafile

    async def main():
        with File(path, "r") as f:
            assert f.nbytes == len(data)
            with pytest.raises(XferError) as e:  # read-only: never a target
                await a.create_writable(f)
            assert e.value.errno_name == "EBADF" and "read-only" in e.value.message
            r = await b.create_readable(Descriptor(xferd.empty(4096)))
            with pytest.raises(XferError) as e:
                rd = await a.begin_read(r.metadata(), File(path, "r", length=4096))
                await rd.wait_for_completion(10)
            assert e.value.errno_name == "EBADF"
            r.release()
        with pytest.raises(XferError) as e:  # past a source's end
            File(path, "r", offset=len(data) - 10, length=11)
        assert e.value.errno_name == "EINVAL" and "past its end" in e.value.message
        with pytest.raises(XferError) as e:
            File(tmp_path / "missing.bin", "r")
        assert e.value.errno_name == "ENOENT" and "cannot open" in e.value.message
        with pytest.raises(XferError) as e:
            File(path, "a")
        assert e.value.errno_name == "EINVAL"

    run(main())


def test_a_file_nobody_may_write_is_refused(tmp_path):
    """As nobody, a root-owned 0644 file cannot become a target: File says so at open."""
    path = tmp_path / "root-owned.bin"
    path.write_bytes(b"\0" * 4096)
    os.chmod(path, 0o644)
    os.chmod(tmp_path, 0o755)
    code = textwrap.dedent("""
        import sys, xferd
        try:
            xferd.File(sys.argv[1], "w")
        except xferd.XferError as e:
            print(e.errno_name, e.message)
    """)
    env = dict(os.environ, PYTHONPATH=str(SRC / "client" / "python"))
    out = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--",
                          sys.executable, "-c", code, str(path)], env=env, capture_output=True,
                         text=True, timeout=30)
    if out.returncode != 0 and "setpriv" in out.stderr:
        pytest.skip("setpriv cannot become nobody here: " + out.stderr)
    assert out.stdout.startswith("EACCES cannot open %s for write" % path), out.stdout + out.stderr
    assert "permissions apply" in out.stdout


def test_closing_a_file_deregisters_it(fresh_daemon, datafile):
    path, _ = datafile
    c = xferd.Connector(fresh_daemon.sock, "files")
    f = File(path, "r").register_memory(c)
    f.register_memory(c)  # idempotent
    assert census(fresh_daemon.sock)["regions"] == 1
    f.close()
    settle(fresh_daemon, {"clients": 1, "regions": 0, "ops": 0})
    with pytest.raises(XferError) as e:
        f.register_memory(c)
    assert e.value.errno_name == "EBADF"
    c.close()
