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


def test_kv_window_decode_gives_up_without_prefill(daemon, tmp_path):
    """A decode worker whose prefill never comes (died before its first put) ends after its
    --timeout with a clear line and exit status 1, instead of waiting forever."""
    out = subprocess.run(
        [sys.executable, str(WINDOW_EXAMPLE), "decode", "--socket", daemon.sock, "--requests", "3",
         "--send", str(tmp_path / "metadata"), "--timeout", "1"],
        capture_output=True, text=True, timeout=60, env=dict(os.environ),
    )
    assert out.returncode == 1, out.stderr
    assert "no notification for 1 s after 0 of 3 requests: giving up" in out.stderr
    assert (tmp_path / "metadata").read_text().startswith("xfer1.")
