#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""
A prefill process hands its KV cache to a decode process, as disaggregated inference engines do.

  prefill: carves one torch tensor per layer out of a registered pool (the KV cache), fills it,
           offers all layers as one readable operation (one descriptor per layer) and sends the
           metadata and a sha256 of the bytes down a pipe; then waits for the read to complete
           and for the decode process's sha256, and checks that it matches its own.
  decode:  reads metadata and sha256 from the pipe, begin_read()s into a KV cache of its own (a
           single tensor: descriptor boundaries need not match), checks the sha256 and sends it
           back.

  kv_transfer.py both [--socket A] [--decode-socket B]   both processes, joined by two pipes
  kv_transfer.py prefill --socket A [--send PATH] [--recv PATH]   (default stdout / stdin)
  kv_transfer.py decode  --socket B [--recv PATH] [--send PATH]

--decode-socket names another node's daemon (two nodes: the bytes go daemon to daemon).
Sizes: --layers 8 --tokens 512 --heads 8 --head-dim 128 (bfloat16; K and V per layer).
"""
import argparse
import asyncio
import hashlib
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import xferd  # noqa: E402  (the source tree's package when run from it, else the installed one)


def layer_shape(a):
    return (2, a.heads, a.tokens, a.head_dim)  # K and V


def layer_bytes(a):
    return 2 * a.heads * a.tokens * a.head_dim * 2  # bfloat16


def digest(tensors):
    import torch

    h = hashlib.sha256()
    for t in tensors:
        h.update(t.view(torch.uint8).reshape(-1).numpy().tobytes())
    return h.hexdigest()


def say(role, text):
    print("%-7s %s" % (role + ":", text), file=sys.stderr, flush=True)


async def prefill(a, send, recv):
    import torch

    async with xferd.Connector(a.socket, "prefill") as conn:
        pool = conn.pool(a.layers * layer_bytes(a))
        cache = [pool.empty(layer_shape(a), torch.bfloat16, like="torch") for _ in range(a.layers)]
        g = torch.Generator().manual_seed(1)
        for t in cache:
            t.copy_(torch.randn(layer_shape(a), generator=g, dtype=torch.float32).to(torch.bfloat16))
        mine = digest(cache)
        total = a.layers * layer_bytes(a)
        async with await conn.create_readable([xferd.Descriptor(t) for t in cache]) as op:
            say("prefill", "KV cache of %d layers x %s bfloat16 (%.1f MiB) in one pool region; "
                "readable op %d, metadata (%d chars) and sha256 %s... down the pipe"
                % (a.layers, list(layer_shape(a)), total / 2**20, op.id, len(op.metadata()), mine[:16]))
            send.write("%s %s\n" % (op.metadata(), mine))
            send.flush()
            status = await op.wait_for_completion(60)
            say("prefill", "%s (transport %s, peer %s)" % (status.name, op.transport, op.peer[:16]))
        theirs = (await asyncio.get_running_loop().run_in_executor(None, recv.readline)).strip()
        if theirs != mine:
            say("prefill", "decode's sha256 DIFFERS: %s" % theirs)
            return 1
        say("prefill", "decode's sha256 matches: the bytes arrived exactly")
        return 0


async def decode(a, send, recv):
    line = (await asyncio.get_running_loop().run_in_executor(None, recv.readline)).split()
    if len(line) != 2:
        say("decode", "no metadata on the pipe")
        return 1
    metadata, want = line
    import torch

    async with xferd.Connector(a.socket, "decode") as conn:
        shape = (a.layers,) + layer_shape(a)
        cache = conn.pool(a.layers * layer_bytes(a)).empty(shape, torch.bfloat16, like="torch")
        cache.zero_()
        t0 = time.monotonic()
        async with await conn.begin_read(metadata, xferd.Descriptor(cache)) as op:
            status = await op.wait_for_completion(60)
        ms = (time.monotonic() - t0) * 1000
        got = digest([cache])
        mib = cache.numel() * 2 / 2**20
        say("decode", "%s: %.1f MiB in %.1f ms (%.2f GB/s) over %s" % (
            status.name, mib, ms, mib * 2**20 / ms / 1e6, op.transport))
        send.write(got + "\n")
        send.flush()
        if got != want:
            say("decode", "sha256 DIFFERS: %s, prefill sent %s" % (got, want))
            return 1
        say("decode", "sha256 matches prefill's: %s" % got)
        return 0


def both(a):
    """Both roles as two processes, joined by a pipe each way."""
    p2d_r, p2d_w = os.pipe()
    d2p_r, d2p_w = os.pipe()
    me = os.path.abspath(__file__)
    common = ["--layers", str(a.layers), "--tokens", str(a.tokens), "--heads", str(a.heads),
              "--head-dim", str(a.head_dim)]
    sock = ["--socket", a.socket] if a.socket else []
    dsock = ["--socket", a.decode_socket or a.socket] if (a.decode_socket or a.socket) else []
    pre = subprocess.Popen([sys.executable, me, "prefill", *sock, *common,
                            "--send", "/dev/fd/%d" % p2d_w, "--recv", "/dev/fd/%d" % d2p_r],
                           pass_fds=(p2d_w, d2p_r))
    dec = subprocess.Popen([sys.executable, me, "decode", *dsock, *common,
                            "--recv", "/dev/fd/%d" % p2d_r, "--send", "/dev/fd/%d" % d2p_w],
                           pass_fds=(p2d_r, d2p_w))
    for fd in (p2d_r, p2d_w, d2p_r, d2p_w):
        os.close(fd)
    rc = pre.wait(120) | dec.wait(120)
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("role", choices=["both", "prefill", "decode"])
    ap.add_argument("--socket")
    ap.add_argument("--decode-socket")
    ap.add_argument("--send")
    ap.add_argument("--recv")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    a = ap.parse_args()
    if a.role == "both":
        return both(a)
    # Opened in the order that lets two FIFOs meet: prefill writes first, decode reads first.
    if a.role == "prefill":
        send = open(a.send, "w") if a.send else sys.stdout
        recv = open(a.recv) if a.recv else sys.stdin
    else:
        recv = open(a.recv) if a.recv else sys.stdin
        send = open(a.send, "w") if a.send else sys.stdout
    try:
        return asyncio.run((prefill if a.role == "prefill" else decode)(a, send, recv))
    except xferd.XferError as e:
        say(a.role, "failed: %s" % e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
