#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""
Prefill writes KV blocks straight into a decode worker's registered KV cache through a window,
with one notify tag per request, as NIXL-based engines do (no pairing per transfer).

  decode:  carves its KV cache (slots of --layers K/V blocks) from one registered pool, exposes
           it as a write window, sends the window's metadata down a pipe, then iterates the
           window's notifications: each "req-N" says request N's blocks are in place in slot N;
           it checks them against what prefill must have computed, and stops after --requests.
  prefill: opens the window once, then for each request computes its per-layer K/V tensors and
           puts them (one descriptor per layer, gathered into the request's slot) with the
           request's tag; --batch requests at a time go in one op.batch request (put_many).

  kv_window.py both [--socket A] [--decode-socket B]   both processes, joined by a pipe
  kv_window.py decode  --socket B [--send PATH]
  kv_window.py prefill --socket A [--recv PATH]

--decode-socket names another node's daemon (the puts then go daemon to daemon).
"""
import argparse
import asyncio
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import xferd  # noqa: E402


def block_shape(a):
    return (2, a.heads, a.tokens, a.head_dim)  # K and V of one layer for one request


def block_bytes(a):
    return 2 * a.heads * a.tokens * a.head_dim * 2  # bfloat16


def slot_bytes(a):
    return a.layers * block_bytes(a)


def request_kv(a, req, layer):
    """What prefill computes for @req's @layer (decode recomputes it to check)."""
    import torch

    g = torch.Generator().manual_seed(req * 1000 + layer)
    return torch.randn(block_shape(a), generator=g, dtype=torch.float32).to(torch.bfloat16)


def say(role, text):
    print("%-7s %s" % (role + ":", text), file=sys.stderr, flush=True)


async def decode(a, send):
    import torch

    async with xferd.Connector(a.socket, "decode") as conn:
        pool = conn.pool(a.requests * slot_bytes(a))
        cache = pool.empty((a.requests, a.layers) + block_shape(a), torch.bfloat16, like="torch")
        cache.zero_()
        async with await conn.create_window(xferd.Descriptor(cache), access="write") as win:
            say("decode", "KV cache of %d slots x %d layers (%.1f MiB, one pool region) exposed "
                "as write window %d; metadata down the pipe" % (
                    a.requests, a.layers, a.requests * slot_bytes(a) / 2**20, win.id))
            send.write(win.metadata() + "\n")
            send.flush()
            seen, bad = [], 0
            while len(seen) < a.requests:
                try:  # (bounded: a prefill that died never hangs the decode worker)
                    note = await win.next_notification(timeout=a.timeout)
                except TimeoutError:
                    say("decode", "no notification for %g s after %d of %d requests: giving up"
                        % (a.timeout, len(seen), a.requests))
                    return 1
                req = int(note.tag.decode().split("-")[1])
                ok = note.offset == req * slot_bytes(a) and note.bytes == slot_bytes(a) and all(
                    torch.equal(cache[req, layer], request_kv(a, req, layer)) for layer in range(a.layers))
                bad += not ok
                seen.append(req)
            in_order = seen == sorted(seen)
            say("decode", "%d notifications (one per request, %s), via %s; every block checked: %s"
                % (len(seen), "in posting order" if in_order else "OUT OF ORDER",
                   "local" if note.peer == "local" else "node " + note.peer[:16],
                   "all match" if not bad else "%d requests DIFFER" % bad))
            return 0 if not bad and in_order and len(set(seen)) == a.requests else 1


async def prefill(a, recv):
    import torch

    metadata = (await asyncio.get_running_loop().run_in_executor(None, recv.readline)).strip()
    if not metadata:
        say("prefill", "no metadata on the pipe")
        return 1
    async with xferd.Connector(a.socket, "prefill") as conn:
        pool = conn.pool(a.batch * slot_bytes(a))
        async with await conn.open_window(metadata) as rw:
            say("prefill", "opened the decode worker's window (%.1f MiB, %s); %d requests, %d per "
                "op.batch" % (rw.length / 2**20, rw.access, a.requests, a.batch))
            # (putting: the time inside put_many(), the rest builds each request's blocks)
            t0, putting, moved, transport = time.monotonic(), 0.0, 0, "?"
            for first in range(0, a.requests, a.batch):
                reqs = range(first, min(first + a.batch, a.requests))
                kv = {}
                for req in reqs:  # this batch's K/V, layer by layer, in memory xferd can move
                    for layer in range(a.layers):
                        t = kv[req, layer] = pool.empty(block_shape(a), torch.bfloat16, like="torch")
                        t.copy_(request_kv(a, req, layer))
                entries = [(req * slot_bytes(a),
                            [xferd.Descriptor(kv[req, layer]) for layer in range(a.layers)],
                            "req-%d" % req) for req in reqs]
                t1 = time.monotonic()
                ops = await rw.put_many(entries)
                putting += time.monotonic() - t1
                moved += sum(op.bytes for op in ops)
                transport = ops[0].transport
                del kv, ops, entries  # (the pool's blocks go back for the next batch)
            s = time.monotonic() - t0
            say("prefill", "put %d requests (%.1f MiB), each with its tag, over %s: %.1f ms in "
                "put_many (%.2f GB/s), %.1f ms in all with building the blocks"
                % (a.requests, moved / 2**20, transport, putting * 1e3,
                   moved / max(putting, 1e-9) / 1e9, s * 1e3))
    return 0


def both(a):
    r, w = os.pipe()
    me = os.path.abspath(__file__)
    common = ["--layers", str(a.layers), "--tokens", str(a.tokens), "--heads", str(a.heads),
              "--head-dim", str(a.head_dim), "--requests", str(a.requests), "--batch", str(a.batch)]
    dsock = a.decode_socket or a.socket
    dec = subprocess.Popen([sys.executable, me, "decode", *(["--socket", dsock] if dsock else []), *common,
                            "--send", "/dev/fd/%d" % w], pass_fds=(w,))
    pre = subprocess.Popen([sys.executable, me, "prefill", *(["--socket", a.socket] if a.socket else []),
                            *common, "--recv", "/dev/fd/%d" % r], pass_fds=(r,))
    os.close(r)
    os.close(w)
    return pre.wait(120) | dec.wait(120)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("role", choices=["both", "prefill", "decode"])
    ap.add_argument("--socket")
    ap.add_argument("--decode-socket")
    ap.add_argument("--send")
    ap.add_argument("--recv")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--timeout", type=float, default=60,
                    help="decode: seconds to wait for each notification (default 60)")
    a = ap.parse_args()
    if a.role == "both":
        return both(a)
    try:
        if a.role == "decode":
            return asyncio.run(decode(a, open(a.send, "w") if a.send else sys.stdout))
        return asyncio.run(prefill(a, open(a.recv) if a.recv else sys.stdin))
    except xferd.XferError as e:
        say(a.role, "failed: %s" % e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
