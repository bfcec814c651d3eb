#!/usr/bin/python3
# SPDX-License-Identifier: MIT
#
# notify_listen.py PATH: binds an AF_UNIX datagram socket at PATH, as systemd's NOTIFY_SOCKET,
# and prints each message it receives as "SECONDS MESSAGE" (CLOCK_MONOTONIC; one line per
# assignment of a message of several lines), flushed, until killed. For tests/test_sd_notify.sh.
import socket
import sys
import time

s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
while True:
    msg = s.recv(4096).decode("utf-8", "replace")
    now = time.monotonic()
    for line in msg.splitlines():
        print("%.3f %s" % (now, line), flush=True)
