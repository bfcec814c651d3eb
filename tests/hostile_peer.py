#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A hostile peer daemon for tests/test_peer_auth.sh: speaks the peer protocol's handshake by
hand (PROTOCOL.md §10.1-10.2) to try what an attacker on the network would, and a relay that
records what crosses the wire. Exit status 0 when the daemon behaved as the mode expects.

  hostile_peer.py noauth HOST PORT               HELLO without a nonce: must be cut off
  hostile_peer.py auth HOST PORT KEYFILE         the whole handshake with the key: must pass
  hostile_peer.py wrongkey HOST PORT             the handshake under another key: must be cut
  hostile_peer.py replay HOST PORT KEYFILE       an AUTH recorded from an earlier connection,
                                                 replayed under the same nonce: must be cut
  hostile_peer.py pose HOST PORT NODEHEX         HELLO as an existing node, garbage AUTH: cut
  hostile_peer.py relay LPORT HOST PORT LOG      forwards one connection, writing both
                                                 directions to LOG, until either side closes
"""
import hashlib
import hmac
import json
import os
import secrets
import socket
import struct
import sys
import threading

HDR = struct.Struct("<BBHIQQ")  # type, flags, credits, length, xfer, offset
HELLO, PING, PONG, AUTH = 1, 9, 10, 12
TIMEOUT = 5.0


def frame(msg_type, payload=None):
    body = json.dumps(payload, separators=(",", ":")).encode() if payload is not None else b""
    return HDR.pack(msg_type, 0, 0, len(body), 0, 0) + body


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def recv_frame(sock):
    """(type, payload) of the next frame, or None when the daemon closed the connection."""
    try:
        hdr = recv_exact(sock, HDR.size)
        if hdr is None:
            return None
        msg_type, _, _, length, _, _ = HDR.unpack(hdr)
        body = recv_exact(sock, length) if length else b""
        if body is None:
            return None
        return msg_type, json.loads(body) if body else None
    except (ConnectionResetError, socket.timeout):
        return None


def closed_soon(sock):
    """Whether the daemon closes the connection (reads nothing more that matters) in time."""
    while True:
        got = recv_frame(sock)
        if got is None:
            return True
        if got[0] not in (HELLO, AUTH):
            return False


def ident(node_hex, epoch):
    return bytes.fromhex(node_hex) + struct.pack("<Q", epoch)


def auth_mac(key, role, frm, to, challenge, frm_nonce):
    """HMAC-SHA256 as daemon/frame.c computes it; the label includes its terminating NUL."""
    msg = b"xferd-auth-v1\0" + role + frm + to + challenge + frm_nonce
    return hmac.new(key, msg, hashlib.sha256).digest()


def read_key(path):
    with open(path) as f:
        return bytes.fromhex(f.read().strip())


def connect(host, port):
    sock = socket.create_connection((host, int(port)), timeout=TIMEOUT)
    sock.settimeout(TIMEOUT)
    return sock


def handshake(host, port, key, node, epoch, nonce, our_auth=None):
    """Connector's handshake. Returns (sock, the daemon's HELLO, our AUTH payload, its AUTH)."""
    sock = connect(host, port)
    sock.sendall(frame(HELLO, {"version": 1, "node": node, "epoch": epoch, "nonce": nonce.hex()}))
    hello = recv_frame(sock)
    if hello is None or hello[0] != HELLO or "nonce" not in hello[1]:
        return sock, None, None, None
    theirs = recv_frame(sock)
    if our_auth is None:
        them = ident(hello[1]["node"], hello[1]["epoch"])
        mac = auth_mac(key, b"C", ident(node, epoch), them, bytes.fromhex(hello[1]["nonce"]), nonce)
        our_auth = {"mac": mac.hex()}
    sock.sendall(frame(AUTH, our_auth))
    return sock, hello[1], our_auth, theirs


def mode_noauth(host, port):
    sock = connect(host, port)
    sock.sendall(frame(HELLO, {"version": 1, "node": secrets.token_hex(16), "epoch": 1}))
    return closed_soon(sock)


def mode_auth(host, port, keyfile):
    key = read_key(keyfile)
    node, epoch, nonce = secrets.token_hex(16), 7, secrets.token_bytes(16)
    sock, hello, _, theirs = handshake(host, port, key, node, epoch, nonce)
    if hello is None or theirs is None or theirs[0] != AUTH:
        print("no HELLO and AUTH from the daemon", file=sys.stderr)
        return False
    # The daemon's own proof must check out under the key: it is who it says it is.
    want = auth_mac(key, b"A", ident(hello["node"], hello["epoch"]), ident(node, epoch), nonce,
                    bytes.fromhex(hello["nonce"]))
    if not hmac.compare_digest(want.hex(), theirs[1]["mac"]):
        print("the daemon's AUTH does not verify", file=sys.stderr)
        return False
    sock.sendall(frame(PING))
    got = recv_frame(sock)
    return got is not None and got[0] == PONG


def mode_wrongkey(host, port):
    key = secrets.token_bytes(32)
    sock, hello, _, _ = handshake(host, port, key, secrets.token_hex(16), 7,
                                  secrets.token_bytes(16))
    if hello is None:
        return False
    sock.sendall(frame(PING))
    return closed_soon(sock)


def mode_replay(host, port, keyfile):
    key = read_key(keyfile)
    node, epoch, nonce = secrets.token_hex(16), 9, secrets.token_bytes(16)
    first, hello, recorded, _ = handshake(host, port, key, node, epoch, nonce)
    if hello is None:
        return False
    first.close()
    # Same identity, same nonce, the AUTH that passed before: the daemon's challenge is new.
    sock, hello, _, _ = handshake(host, port, key, node, epoch, nonce, our_auth=recorded)
    if hello is None:
        return False
    sock.sendall(frame(PING))
    return closed_soon(sock)


def mode_pose(host, port, node_hex):
    sock, hello, _, _ = handshake(host, port, secrets.token_bytes(32), node_hex, 2**50,
                                  secrets.token_bytes(16), our_auth={"mac": "00" * 32})
    if hello is None:
        return False
    return closed_soon(sock)


def pump(src, dst, log, lock):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            with lock:
                log.write(data)
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def mode_relay(lport, host, port, logpath):
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", int(lport)))
    lsock.listen(8)
    lock = threading.Lock()
    with open(logpath, "wb") as log:
        threads = []
        lsock.settimeout(30)
        while True:
            try:
                client, _ = lsock.accept()
            except socket.timeout:
                break
            server = socket.create_connection((host, int(port)))
            for a, b in ((client, server), (server, client)):
                t = threading.Thread(target=pump, args=(a, b, log, lock), daemon=True)
                t.start()
                threads.append(t)
            log.flush()
    return True


def main(argv):
    modes = {"noauth": mode_noauth, "auth": mode_auth, "wrongkey": mode_wrongkey,
             "replay": mode_replay, "pose": mode_pose, "relay": mode_relay}
    if len(argv) < 2 or argv[1] not in modes:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        return 0 if modes[argv[1]](*argv[2:]) else 1
    except OSError as e:
        print(f"hostile_peer: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
