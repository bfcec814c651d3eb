# SPDX-License-Identifier: MIT
"""
The lockstep of `make bench` (scripts/bench.sh): the C client (`xferbench bench --turns`) and
the Python one (client/python/examples/xferbench.py --turns) pass one turn between them over
pipes, so the two never run at once. Here the test sits between them and relays the turn: a
byte from the process that does not hold it is a broken lockstep. Both must finish with every
transfer checked, and one that dies must leave the other to finish alone. Their in-flight rows
(--depth N) take turns as well and are checked here the same way.
"""
import json
import os
import re
import select
import subprocess
import sys
import time

import pytest

from conftest import BUILD, SRC

PY_BENCH = SRC / "client" / "python" / "examples" / "xferbench.py"
ARGS = ["--max", "1M", "--iters", "2", "--depth", "3"]


def start(cmd, inp, out, first=False):
    """Starts @cmd with --turns: reads the turn from fd @inp, passes it on fd @out."""
    cmd = cmd + ["--turns", "%d,%d" % (inp, out)] + (["--turn-first"] if first else [])
    return subprocess.Popen(cmd, pass_fds=(inp, out), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def spawn_pair(sock):
    """The two benches, each on a pair of pipes whose other ends this test holds.
    Returns ({"c": proc, "py": proc}, {name: fd to give it the turn}, {fd it passes on: name})."""
    procs, give, passes = {}, {}, {}
    cmds = {
        "c": [str(BUILD / "xferbench"), "bench", "--socket", sock] + ARGS,
        "py": [sys.executable, str(PY_BENCH), "--socket", sock] + ARGS,
    }
    for name, cmd in cmds.items():
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        procs[name] = start(cmd, to_r, from_w)
        os.close(to_r)
        os.close(from_w)  # (its exit is then EOF here)
        give[name], passes[from_r] = to_w, name
    return procs, give, passes


def relay(procs, give, passes, kill_after=None, deadline_s=120):
    """Hands the turn to "c" first, then to whoever did not just pass it. Returns how many
    turns each passed; fails on a pass from the process that did not hold the turn.
    @kill_after: after that many passes of "c", kill it (SIGKILL) instead of going on."""
    holder, count, open_fds = "c", {"c": 0, "py": 0}, set(passes)

    def hand(name):
        """Gives @name the turn; one that ended (its pipe broken) leaves it to the other."""
        try:
            os.write(give[name], b"t")
            return name
        except BrokenPipeError:
            os.close(give.pop(name))
            if give:
                return hand(next(iter(give)))
            return None

    hand("c")
    deadline = time.monotonic() + deadline_s
    while open_fds:
        assert time.monotonic() < deadline, "the lockstep hung: %s" % count
        ready, _, _ = select.select(list(open_fds), [], [], 1.0)
        for fd in ready:
            name = passes[fd]
            if not os.read(fd, 1):  # it ended
                open_fds.discard(fd)
                if name in give:
                    os.close(give.pop(name))
                if name == holder and give:
                    holder = hand(next(iter(give)))  # the other runs on, alone
                continue
            assert name == holder, "%s passed a turn it did not hold (%s)" % (name, count)
            count[name] += 1
            if name == "c" and kill_after is not None and count["c"] == kill_after:
                procs["c"].kill()
                procs["c"].wait()
            other = "py" if name == "c" else "c"
            holder = hand(other if other in give else name)
    for fd in give.values():
        os.close(fd)
    return count


def finish(proc):
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def test_benches_take_turns_and_check_every_transfer(daemon):
    procs, give, passes = spawn_pair(daemon.sock)
    count = relay(procs, give, passes)
    rc_c, out_c, err_c = finish(procs["c"])
    rc_py, out_py, err_py = finish(procs["py"])
    assert rc_c == 0, err_c
    assert rc_py == 0, err_py
    # C: 4 KiB and 64 KiB are a turn each; 1 MiB: one per round (a warm-up and 2) and one to
    # let its buffers go, then as many for its in-flight rounds; the latency rounds one. Python
    # starts at 1 MiB: the same from there.
    assert count == {"c": 2 + 4 + 4 + 1, "py": 4 + 4 + 1}, count
    assert "   1 MiB     2 " in out_c and out_c.count("  yes") == 4, out_c
    assert "1M     2 " in out_py and out_py.count("  yes") == 2, out_py
    # the in-flight rows: depth 3, so 6 pairings a round, every slice checked
    assert re.search(r"^ +1 MiB +2 +3 +6 .*  yes  in flight$", out_c, re.M), out_c
    assert re.search(r"^ +1M +2 +3 +6 .*  yes  in flight$", out_py, re.M), out_py


def test_bench_left_alone_when_the_other_dies(daemon):
    procs, give, passes = spawn_pair(daemon.sock)
    count = relay(procs, give, passes, kill_after=3)
    finish(procs["c"])
    rc_py, out_py, err_py = finish(procs["py"])
    assert procs["c"].returncode == -9
    assert rc_py == 0, err_py
    assert "1M     2 " in out_py and out_py.count("  yes") == 2, out_py
    assert count["c"] == 3


def test_ref_rounds_have_buffers_of_their_own_after_the_python_round(daemon, monkeypatch):
    """With --ref, every iteration runs the Python round, then the C library's, each on buffers
    of its own (xferbench.py: ref_round_buffers): sharing the Python round's buffers, or
    swapping places, put half the Python rounds right after a round over the same buffers while
    the C client's rounds never were, and biased the 16 MiB comparison either way."""
    import asyncio
    import importlib.util

    spec = importlib.util.spec_from_file_location("xferbench_py", PY_BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rounds = []

    async def record(way, pat, src, dst, seed, size):
        rounds.append((way.__name__, src.ctypes.data, dst.ctypes.data))
        return 1, 1

    monkeypatch.setattr(bench, "bench_round", record)

    async def run():
        ref = (bench.RefClient(daemon.sock, "ref-passive"),
               bench.RefClient(daemon.sock, "ref-active"))
        async with bench.xferd.Connector(daemon.sock, "py-passive") as pas, \
                bench.xferd.Connector(daemon.sock, "py-active") as act:
            await bench.bench_size(pas, act, 1 << 20, 3, ref)
        for c in ref:
            c.close()

    asyncio.run(run())
    names = [r[0] for r in rounds]
    assert names == ["<lambda>", "ref_way"] * 4, names  # a warm-up and 3, Python first
    py_bufs, ref_bufs = set(r[1:] for r in rounds[0::2]), set(r[1:] for r in rounds[1::2])
    assert len(py_bufs) == 1 and len(ref_bufs) == 1, rounds
    assert not set(*py_bufs) & set(*ref_bufs), "the --ref rounds share the Python buffers"


def test_bench_runs_on_uvloop_and_says_so(daemon, tmp_path):
    """`xferbench.py --loop uvloop` (scripts/bench.sh PY_LOOP): every transfer checked, the
    loop named in its output and its --json, which --summary then names."""
    pytest.importorskip("uvloop")
    out_json = tmp_path / "py.json"
    r = subprocess.run([sys.executable, str(PY_BENCH), "--socket", daemon.sock, "--loop", "uvloop",
                        "--json", str(out_json)] + ARGS, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "on uvloop's event loop" in r.stdout and r.stdout.count("  yes") == 2, r.stdout
    assert json.loads(out_json.read_text())["loop"] == "uvloop"
    c = subprocess.run([str(BUILD / "xferbench"), "bench", "--socket", daemon.sock] + ARGS,
                       capture_output=True, text=True, timeout=120)
    assert c.returncode == 0, c.stderr
    c_out = tmp_path / "c.txt"
    c_out.write_text(c.stdout)
    s = subprocess.run([sys.executable, str(PY_BENCH), "--summary", "--c", str(c_out), "--py",
                        str(out_json)], capture_output=True, text=True, timeout=60)
    assert s.returncode == 0, s.stderr
    assert "Python client (on uvloop's event loop) / C client over 1 rounds" in s.stdout, s.stdout
    assert re.search(r"^In flight, a separate measure \(--depth 3: .*\n  +1M read .*x  \(rounds "
                     r".*\n  +1M write ", s.stdout, re.M), s.stdout


def load_bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("xferbench_py", PY_BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_inflight_keeps_depth_pairings_in_flight_each_on_its_own_slices(monkeypatch):
    """xferbench.py's in-flight round starts @depth pairings at once and a new one as one ends,
    each slice of the round exactly once."""
    import asyncio

    bench = load_bench()
    live, peak, seen = [0], [0], []

    async def fake_pair(pas, act, pbuf, abuf, write):
        seen.append((pbuf, abuf))
        live[0] += 1
        peak[0] = max(peak[0], live[0])
        for _ in range(1 + len(seen) % 3):  # ends in another order than they started
            await asyncio.sleep(0)
        live[0] -= 1

    monkeypatch.setattr(bench, "pair", fake_pair)
    slices = list(range(8))
    asyncio.run(bench.inflight_run(None, None, slices, [-j for j in slices], False, 4))
    assert peak[0] == 4, peak
    assert sorted(seen) == sorted((j, -j) for j in slices), seen


def test_inflight_round_fails_on_a_pairing_that_moved_nothing(daemon, monkeypatch):
    """A pairing of an in-flight round that ends COMPLETE but moved no bytes fails the round,
    naming it: every slice is checked against its own pattern."""
    import asyncio

    bench = load_bench()
    real = bench.pair

    async def skip_one(pas, act, pbuf, abuf, write):
        if pbuf is skipped[0]:
            return None
        return await real(pas, act, pbuf, abuf, write)

    skipped = [None]
    monkeypatch.setattr(bench, "pair", skip_one)

    async def run(size):
        async with bench.xferd.Connector(daemon.sock, "py-passive") as pas, \
                bench.xferd.Connector(daemon.sock, "py-active") as act:
            bufs = (bench.zeroed(size * 4), bench.zeroed(size * 4))
            slices = tuple([bench.xferd.Descriptor(b[j * size:(j + 1) * size]).register_memory(c)
                            for j in range(4)] for b, c in zip(bufs, (pas, act)))
            pat = bench.make_pattern("c")[0]
            ns = await bench.inflight_round(pas, act, bufs, slices, size, 2, pat, 1)
            assert len(ns) == 2
            skipped[0] = slices[0][2]
            await bench.inflight_round(pas, act, bufs, slices, size, 2, pat, 2)

    with pytest.raises(SystemExit, match="in flight read of 65536 bytes, pairing 2 of 4"):
        asyncio.run(run(65536))
