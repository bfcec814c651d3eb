#!/usr/bin/python3
# SPDX-License-Identifier: MIT
#
# A hostile "peer daemon" for tests/test_peer_hostile.sh, speaking the peer protocol by hand
# (proto/PROTOCOL.md §10.1: a 24-byte little-endian header, JSON control payloads). Stdlib only.
#
#   conns HOST PORT N NSRC HOLD [PARTIAL]   N connections from 127.0.0.2 .. 127.0.0.(NSRC+1)
#       that never say HELLO (PARTIAL=1: the first sends half a header); prints one line
#       "opened K failed F" once they are made, then holds them up to HOLD seconds and prints
#       one JSON line: {"opened", "failed", "closed": [seconds after opening, one per closed]}
#   pingflood HOST PORT MAXBYTES            says HELLO, then sends PINGs and never reads; prints
#       one JSON line: {"sent": bytes, "error": why it stopped or null, "seconds"}
#   hello HOST PORT WAIT                    says HELLO; exit 0 if a HELLO comes back in WAIT s
#   hellos HOST PORT N                      N connections saying HELLO, each as another node;
#       prints one JSON line {"answered": HELLOs that came back, "refused": connections closed}
#   unixhold PATH N HOLD                    N connections to a control socket; prints "opened K",
#       holds them HOLD seconds (or until killed)
#   garbage HOST PORT N                     N connections one after another, each sending a
#       header of no known type and closing; prints one JSON line {"sent": connections made}
#   unixbad PATH N                          N control connections one after another, each
#       sending a packet that is not JSON; prints one JSON line {"sent": packets sent}
#   sets HOST PORT NSETS PER HOLD           NSETS peer sets of PER connections each (every
#       connection of a set says HELLO as its node); prints "sets S conns C" once they are
#       answered, then keeps them alive (answers PINGs) HOLD seconds (or until killed)
import json
import os
import select
import socket
import struct
import sys
import time

HELLO, PING, PONG = 1, 9, 10
HDR = struct.Struct("<BBHIQQ")  # type, flags, credits, length, xfer, offset


def frame(ftype, payload=b""):
    return HDR.pack(ftype, 0, 0, len(payload), 0, 0) + payload


def hello_frame(node=None):
    # Our HELLO: the one place that knows the handshake (update it when the handshake changes).
    body = {"version": 1, "node": node or os.urandom(16).hex(), "epoch": int(time.time() * 1e6)}
    return frame(HELLO, json.dumps(body).encode())


def connect(host, port, src=None, timeout=3.0, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    if src:
        s.bind((src, 0))
    s.settimeout(timeout)
    s.connect((host, port))
    return s


def closed_by_peer(s):
    try:
        return s.recv(4096) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def conns(host, port, n, nsrc, hold, partial=0):
    socks, failed = [], 0
    for i in range(n):
        try:
            socks.append(connect(host, port, "127.0.0.%d" % (2 + i % nsrc)))
        except OSError:
            failed += 1
    t0 = time.monotonic()
    if partial and socks:
        socks[0].send(frame(HELLO, b"{}")[:10])
    print("opened %d failed %d" % (len(socks), failed), flush=True)
    for s in socks:
        s.setblocking(False)
    open_, closed = set(socks), []
    while time.monotonic() - t0 < hold:  # closes nothing itself before HOLD is over
        if not open_:
            time.sleep(0.05)
            continue
        ready, _, _ = select.select(list(open_), [], [], 0.05)
        for s in ready:
            if closed_by_peer(s):
                closed.append(round(time.monotonic() - t0, 3))
                open_.discard(s)
    print(json.dumps({"opened": len(socks), "failed": failed, "closed": closed}), flush=True)


def pingflood(host, port, maxbytes):
    # A small receive buffer: the daemon's PONGs back up after a few KiB instead of megabytes.
    s = connect(host, port, rcvbuf=4096, timeout=10.0)
    s.sendall(hello_frame())
    chunk = frame(PING) * (1 << 15)  # 768 KiB of PINGs
    sent, err, t0 = 0, None, time.monotonic()
    try:
        while sent < maxbytes and time.monotonic() - t0 < 20:
            s.sendall(chunk)
            sent += len(chunk)
    except OSError as e:
        err = e.strerror or str(e)
    print(json.dumps({"sent": sent, "error": err, "seconds": round(time.monotonic() - t0, 2)}))


def hello(host, port, wait):
    s = connect(host, port, timeout=wait)
    s.sendall(hello_frame())
    got = b""
    while len(got) < HDR.size:
        more = s.recv(HDR.size - len(got))
        if not more:
            sys.exit(1)
        got += more
    sys.exit(0 if HDR.unpack(got)[0] == HELLO else 1)


def hellos(host, port, n):
    # N connections, each saying HELLO under a node id of its own; all held until the end.
    socks, answered, refused = [], 0, 0
    for _ in range(n):
        s = connect(host, port, timeout=3.0)
        s.sendall(hello_frame())
        socks.append(s)
        try:
            got = s.recv(HDR.size, socket.MSG_WAITALL)
        except OSError:
            got = b""
        if len(got) == HDR.size and got[0] == HELLO:
            answered += 1
        else:
            refused += 1
    print(json.dumps({"answered": answered, "refused": refused}))


def hello_answered(s):
    # Whether a whole HELLO frame (header and payload) comes back on s.
    try:
        got = s.recv(HDR.size, socket.MSG_WAITALL)
        if len(got) != HDR.size or got[0] != HELLO:
            return False
        length = HDR.unpack(got)[3]
        return len(s.recv(length, socket.MSG_WAITALL)) == length
    except OSError:
        return False


def pong_pings(s, buf):
    # Reads what s has; answers each whole PING in buf + it with a PONG. Returns what is left,
    # None once the daemon closed s.
    try:
        more = s.recv(65536)
    except BlockingIOError:
        return buf
    except OSError:
        return None
    if not more:
        return None
    buf += more
    while len(buf) >= HDR.size:
        ftype, length = buf[0], HDR.unpack(buf[:HDR.size])[3]
        if len(buf) < HDR.size + length:
            break
        if ftype == PING:
            s.sendall(frame(PONG))
        buf = buf[HDR.size + length:]
    return buf


def sets(host, port, nsets, per, hold):
    # nsets sets of per connections, each set one node (one epoch: HELLO's time, the same
    # for a set's connections, which are made within a second), kept alive by PONGs.
    socks, answered = [], 0
    for _ in range(nsets):
        node = os.urandom(16).hex()
        hello = hello_frame(node)
        for _ in range(per):
            s = connect(host, port, timeout=3.0)
            s.sendall(hello)
            answered += hello_answered(s)
            s.setblocking(False)
            socks.append(s)
    print("sets %d conns %d" % (nsets, answered), flush=True)
    bufs, t0 = {s: b"" for s in socks}, time.monotonic()
    while time.monotonic() - t0 < hold:
        ready, _, _ = select.select(socks, [], [], 0.05)
        for s in ready:
            bufs[s] = pong_pings(s, bufs[s])
            if bufs[s] is None:
                socks.remove(s)
        if not socks:
            time.sleep(0.05)


def unixhold(path, n, hold):
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.settimeout(0.5)
        try:
            s.connect(path)
            socks.append(s)
        except OSError:
            s.close()
    print("opened %d" % len(socks), flush=True)
    time.sleep(hold)


def garbage(host, port, n):
    sent = 0
    for _ in range(n):
        try:
            with socket.create_connection((host, port), timeout=5) as s:
                s.sendall(HDR.pack(0xEE, 0, 0, 0, 0, 0))
            sent += 1
        except OSError:
            pass
    print(json.dumps({"sent": sent}), flush=True)


def unixbad(path, n):
    sent = 0
    for _ in range(n):
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
                s.settimeout(5)
                s.connect(path)
                s.send(b"not json")
                s.recv(4096)  # the daemon's one error before it closes
            sent += 1
        except OSError:
            pass
    print(json.dumps({"sent": sent}), flush=True)


def main(argv):
    cmd, args = argv[1], argv[2:]
    if cmd == "conns":
        conns(args[0], int(args[1]), int(args[2]), int(args[3]), float(args[4]),
              int(args[5]) if len(args) > 5 else 0)
    elif cmd == "pingflood":
        pingflood(args[0], int(args[1]), int(args[2]))
    elif cmd == "hello":
        hello(args[0], int(args[1]), float(args[2]))
    elif cmd == "hellos":
        hellos(args[0], int(args[1]), int(args[2]))
    elif cmd == "sets":
        sets(args[0], int(args[1]), int(args[2]), int(args[3]), float(args[4]))
    elif cmd == "unixhold":
        unixhold(args[0], int(args[1]), float(args[2]))
    elif cmd == "garbage":
        garbage(args[0], int(args[1]), int(args[2]))
    elif cmd == "unixbad":
        unixbad(args[0], int(args[1]))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main(sys.argv)
