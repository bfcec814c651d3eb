# SPDX-License-Identifier: MIT
"""
Fixtures of the Python suite: real xferd daemons on temporary sockets (one per module, and a
fresh one where a test counts what the daemon holds), and a census of what a daemon holds
(clients, regions, operations, its own fds) to check that nothing leaks.
tests/test_python.sh sets XFERD_BUILD (the build directory) and XFERD_LIBRARY.
"""
import json
import os
import signal
import socket as _socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

SRC = Path(os.environ.get("XFER_SRCDIR", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("XFERD_BUILD", SRC / "build"))
sys.path.insert(0, str(SRC / "client" / "python"))
os.environ.setdefault("XFERD_LIBRARY", str(BUILD / "libxferclient.so.1"))

# XFERD_TEST_LOOP=uvloop runs the suite on uvloop's event loop (what vLLM's and SGLang's
# servers run) instead of asyncio's own: every asyncio.run() below then makes a uvloop loop.
if os.environ.get("XFERD_TEST_LOOP", "asyncio") == "uvloop":
    import uvloop

    uvloop.install()
elif os.environ.get("XFERD_TEST_LOOP", "asyncio") != "asyncio":
    raise RuntimeError("XFERD_TEST_LOOP is asyncio or uvloop, not %r" % os.environ["XFERD_TEST_LOOP"])


class Daemon:
    def __init__(self, extra=()):
        self.dir = tempfile.mkdtemp(prefix="xferd-py.")
        self.sock = os.path.join(self.dir, "xferd.sock")
        self.log = open(os.path.join(self.dir, "xferd.log"), "w+")
        self.proc = subprocess.Popen(
            [str(BUILD / "xferd"), "--socket", self.sock, "--foreground", "--log-level", "warn", *extra],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        self.pid = self.proc.pid
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("xferd exited %d: %s" % (self.proc.returncode, self.log_text()))
            s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
            try:
                s.connect(self.sock)
                break
            except OSError:
                time.sleep(0.02)
            finally:
                s.close()
        else:
            raise RuntimeError("xferd did not listen on %s" % self.sock)

    def log_text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-2000:]

    def nfds(self):
        return len(os.listdir("/proc/%d/fd" % self.pid))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            rc = self.proc.wait(10)
            assert rc == 0, "xferd exited %d after SIGTERM: %s" % (rc, self.log_text())
        self.log.close()
        for f in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, f))
        os.rmdir(self.dir)


def census(sock):
    """What the daemon at @sock holds beside the asking connection: clients, regions, ops."""
    import xferd

    with xferd.Connector(sock, "census") as c:
        st = c._call_json("stats")
    return {"clients": st["clients"] - 1, "regions": st["regions"], "ops": st["ops"]}


def steady_fds(read, seconds=5):
    """@read()'s value (a daemon's fd count, or a list of them) once two readings 100 ms apart
    agree: a baseline taken right after census() may otherwise count the census connection,
    whose fd the daemon closes a loop turn after the client hung up (seen: [17, 18] before a
    test, [17, 17] after it, reported as a change)."""
    deadline = time.monotonic() + seconds
    last = read()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = read()
        if now == last:
            return now
        last = now
    raise AssertionError("fd counts never held still for 100 ms: %s" % (last,))


def settle(daemon, want, fds=None, seconds=5):
    """Waits until the daemon's census equals @want (and its fd count @fds); asserts. The fds
    are counted before the census asks: the daemon closes the census connection's fd a loop
    turn after it hung up, so counted right after, they include it whenever the daemon is slower
    than this process (CI: 14 for 13 in every poll of 5 s)."""
    deadline = time.monotonic() + seconds
    while True:
        n = daemon.nfds()
        now = census(daemon.sock)
        if now == want and (fds is None or n == fds):
            return
        if time.monotonic() > deadline:
            raise AssertionError("daemon holds %s with %d fds; want %s with %s fds" % (now, n, want, fds))
        time.sleep(0.05)


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture
def fresh_daemon():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture
def pair(daemon):
    """Two connectors on one daemon (two processes' worth of state in one)."""
    import xferd

    a = xferd.Connector(daemon.sock, "owner")
    b = xferd.Connector(daemon.sock, "peer")
    yield a, b
    a.close()
    b.close()


def run_python(code, *args, **kw):
    """Runs @code in a child /usr/bin/python3 with this suite's environment."""
    env = dict(os.environ, PYTHONPATH=str(SRC / "client" / "python"))
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, **kw)
