#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Hostile HTTP against xferd's metrics endpoint (tests/test_metrics.sh).

Usage: metrics_flood.py HOST PORT            (the flood below)
       metrics_flood.py HOST PORT --time STOP  (scrape every 100 ms until the file STOP
                                                 exists; print each scrape's milliseconds,
                                                 connect to last byte, or "bad")

1. 200 idle connections at once (more than the 16 the daemon serves): the daemon must keep
   at most 16 open, and a real scrape must succeed once the idle ones reach their deadline.
2. A slow sender (one header byte every 0.5 s): cut at the connection deadline (5 s).
3. An oversized request (64 KiB of headers) and a request with a body: refused, not served.
4. Garbage bytes: no crash (the later checks find the daemon alive).
5. 32 scrapes that hang up (RST) as soon as their request is sent, 8 at a time, while the
   HTTP thread may be waiting for the event loop's snapshot for them: a real scrape after
   them succeeds.
Prints one line of what it saw; exits 1 with the reason on the first broken expectation.
"""
import socket
import sys
import time

HOST, PORT = sys.argv[1], int(sys.argv[2])


def connect(timeout=2.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect((HOST, PORT))
    return s


def get(path="/metrics", timeout=15.0):
    """One GET; returns (status, body)."""
    s = socket.create_connection((HOST, PORT), timeout=timeout)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def die(why):
    print(why)
    sys.exit(1)


def metric(body, name):
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    die(f"no {name} in the scrape")


def idle_flood():
    socks = []
    for _ in range(200):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex((HOST, PORT))  # in progress: the daemon's backlog takes a few
        socks.append(s)
    time.sleep(0.5)
    t0 = time.monotonic()
    status, body = get()
    waited = time.monotonic() - t0
    if status != 200:
        die(f"scrape after the idle flood: HTTP {status}")
    open_now = metric(body, "xferd_metrics_http_connections")
    if open_now > 16:
        die(f"{open_now} connections open, more than 16")
    for s in socks:
        s.close()
    return len(socks), waited, open_now


def slow_sender():
    s = connect()
    t0 = time.monotonic()
    try:
        for b in b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 100:
            s.sendall(bytes([b]))
            time.sleep(0.5)
            if time.monotonic() - t0 > 12:
                die("a slow sender kept its connection for 12 s")
    except (BrokenPipeError, ConnectionResetError):
        pass
    s.close()
    return time.monotonic() - t0


def refused(request):
    s = connect(timeout=5)
    try:
        s.sendall(request)
        data = s.recv(4096)
    except (BrokenPipeError, ConnectionResetError):
        data = b""
    s.close()
    if data.startswith(b"HTTP/1.1 200"):
        die(f"served: {request[:40]!r}")
    return data.split(b"\r\n", 1)[0].decode(errors="replace") or "closed"


def hangups():
    import struct
    n = 0
    for _ in range(32 // 8):
        socks = []
        for _ in range(8):
            try:
                s = connect()
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                socks.append(s)
            except OSError:  # the listener paused while the previous ones drain: fine
                pass
        for s in socks:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
            n += 1
    status, _ = get()
    if status != 200:
        die(f"scrape after {n} hung-up scrapes: HTTP {status}")
    return n


def main():
    n, waited, open_now = idle_flood()
    slow = slow_sender()
    big = refused(b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n")
    body = refused(b"POST /metrics HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789")
    refused(b"\x00\xff garbage \r\n\r\n")
    status, _ = get("/nothing")
    if status != 404:
        die(f"/nothing: HTTP {status}")
    hung = hangups()
    print(f"{n} idle connections at once (at most {int(open_now)} held open, a scrape got through "
          f"after {waited:.1f} s); a slow sender cut after {slow:.1f} s; 64 KiB headers: {big}; "
          f"a body: {body}; other paths 404; {hung} scrapes hung up mid-request")


def timed(stop):
    import os
    while not os.path.exists(stop):
        t0 = time.monotonic()
        try:
            status, body = get(timeout=10)
            ms = (time.monotonic() - t0) * 1000
            ok = status == 200 and body.endswith(b"\n") and b"# TYPE xferd_clients gauge" in body
        except (OSError, IndexError, ValueError):  # no reply, or not HTTP: a bad scrape
            ok = False
        print(f"{ms:.3f}" if ok else "bad", flush=True)
        time.sleep(0.1)


if len(sys.argv) > 4 and sys.argv[3] == "--time":
    timed(sys.argv[4])
else:
    main()
