# SPDX-License-Identifier: MIT
"""client/python/examples/kv_transfer.py on one daemon: both processes report and verify."""
import os
import subprocess
import sys

from conftest import SRC

EXAMPLE = SRC / "client" / "python" / "examples" / "kv_transfer.py"
WINDOW_EXAMPLE = SRC / "client" / "python" / "examples" / "kv_window.py"


def run_example(*sockets):
    args = ["--socket", sockets[0]] + (["--decode-socket", sockets[1]] if len(sockets) > 1 else [])
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "both", *args, "--layers", "4", "--tokens", "256"],
        capture_output=True, text=True, timeout=120, env=dict(os.environ),
    )
    assert out.returncode == 0, out.stderr
    assert "decode's sha256 matches" in out.stderr and "sha256 matches prefill's" in out.stderr
    return out.stderr


def test_kv_example_one_daemon(daemon):
    assert "over local" in run_example(daemon.sock)


def run_window_example(*sockets):
    args = ["--socket", sockets[0]] + (["--decode-socket", sockets[1]] if len(sockets) > 1 else [])
    out = subprocess.run(
        [sys.executable, str(WINDOW_EXAMPLE), "both", *args, "--requests", "12", "--batch", "5"],
        capture_output=True, text=True, timeout=120, env=dict(os.environ),
    )
    assert out.returncode == 0, out.stderr
    assert "12 notifications (one per request, in posting order)" in out.stderr
    assert "every block checked: all match" in out.stderr
    return out.stderr


def test_kv_window_example_one_daemon(daemon):
    assert "over local" in run_window_example(daemon.sock)
