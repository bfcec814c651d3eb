#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# Helpers for tests/test_peer_allow.sh, stdlib only:
#   forge META ADDR PORT        metadata META with every network endpoint moved to ADDR:PORT
#   listen ADDR PORT FILE SECS  accept on ADDR:PORT for SECS seconds; write the count to FILE
#                               ("silent": accept and hold; "hangup": accept and close at once)
#   blackhole ADDR PORT SECS    a listener whose accept queue is full: SYNs get no answer
#   dial SRC HOST PORT SECS     connect from SRC; print "closed" if the other side closes
#                               within SECS seconds, else "open"
import base64
import json
import socket
import sys
import time


def forge(meta, addr, port):
    prefix, b64 = meta.strip().split(".", 1)
    m = json.loads(base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)))
    for ep in m["endpoints"]:
        if ep["transport"] != "local":
            ep["addr"], ep["port"] = addr, int(port)
    body = json.dumps(m, separators=(",", ":")).encode()
    print(prefix + "." + base64.urlsafe_b64encode(body).decode().rstrip("="))
    return True


def listen(addr, port, path, secs, mode="silent"):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, int(port)))
    ls.listen(16)
    ls.settimeout(0.1)
    n, held = 0, []
    end = time.monotonic() + float(secs)
    while time.monotonic() < end:
        try:
            c, _ = ls.accept()
        except socket.timeout:
            continue
        n += 1
        with open(path, "w") as f:
            f.write(str(n))
        if mode == "hangup":
            c.close()
        else:
            held.append(c)
    with open(path, "w") as f:
        f.write(str(n))
    return True


def blackhole(addr, port, secs):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, int(port)))
    ls.listen(0)
    fill = []
    # Linux keeps backlog + 1 connections queued, then drops further SYNs: connect() hangs.
    for _ in range(3):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex((addr, int(port)))
        fill.append(s)
    time.sleep(float(secs))
    return True


def dial(src, host, port, secs):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((src, 0))
    s.connect((host, int(port)))
    s.settimeout(float(secs))
    try:
        data = s.recv(1)
        print("closed" if not data else "open")
    except socket.timeout:
        print("open")
    except ConnectionResetError:
        print("closed")
    return True


def main(argv):
    modes = {"forge": forge, "listen": listen, "blackhole": blackhole, "dial": dial}
    if len(argv) < 2 or argv[1] not in modes:
        print(__doc__ or "usage: see the file's head", file=sys.stderr)
        return 2
    return 0 if modes[argv[1]](*argv[2:]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
