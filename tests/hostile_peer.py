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
  hostile_peer.py windows HOST PORT KEYFILE META a member node misusing the window frames
                                                 (PROTOCOL.md §10.6) on read-only window META:
                                                 refusals answered, the set kept; misuse cut
  hostile_peer.py wframes HOST PORT KEYFILE META PID
                                                 a member node misusing the one-sided window
                                                 frames (PROTOCOL.md §10.7) on read-write
                                                 window META of daemon PID: out-of-range and
                                                 forged puts and gets, puts on a second
                                                 connection of the set (WACKs count per
                                                 connection), a get flood it never
                                                 reads, a notify flood against an owner client
                                                 that never reads, puts after the revocation;
                                                 refusals answered, memory bounded, misuse cut
  hostile_peer.py wcycle HOST PORT KEYFILE META PID
                                                 a member node that opens read-write window
                                                 META of daemon PID, whose owner client never
                                                 reads, puts 1024 tagged bytes, closes the
                                                 handle and opens a new one, 100 times: each
                                                 closed opener's notifications wait (§10.9),
                                                 so an open past 64 openers, closed ones with
                                                 notifications due included, must be refused
                                                 EDQUOT (by the 66th: the first one's went to
                                                 the owner client's queue), the set kept
  hostile_peer.py wframes_cut HOST PORT KEYFILE META
                                                 malformed window frames (a forged window id
                                                 for an open handle, bad lengths, flags, tags):
                                                 each cuts the set
  hostile_peer.py binpair HOST PORT KEYFILE META1 META2 META3
                                                 the binary pairing frames (PROTOCOL.md §10.8)
                                                 from a member node, on three 64 KiB readables
                                                 whose bytes are i % 256: a wrong proof and a
                                                 token in clear refused, a claim from a peer
                                                 that did not offer them answered in JSON, one
                                                 from a peer that did in binary, one from a
                                                 peer that offered read_ok_in_data with the
                                                 short end by DATA alone (no CLAIM_OK), the
                                                 bytes right; every malformed layout cuts the
                                                 set
  hostile_peer.py earlyfile HOST PORT KEYFILE META PID
                                                 a member node claiming writable META (a file
                                                 on daemon PID) and sending DATA for it at
                                                 once, before CLAIM_OK: all of it waits in the
                                                 daemon's socket (PID stopped meanwhile), so
                                                 the DATA is read ahead with the CLAIM and
                                                 must be refused (the set cut), never spliced
                                                 into the file from the read-ahead buffer
  hostile_peer.py xferidx SOCKET HOST PORT KEYFILE N
                                                 a member node's frames about transfers cost
                                                 the same beside 1 or N of its transfers: a
                                                 local client on SOCKET makes N writables of
                                                 one byte, the member claims them (held, no
                                                 DATA sent) and times refused CLAIMs (a wrong
                                                 proof, fresh transfer ids) after the first and
                                                 after the last; prints both times
  hostile_peer.py owner SOCKET METAFILE [ACCESS] (helper) a local client owning a window
                                                 (ACCESS: read, the default, or readwrite) of
                                                 64 KiB whose bytes are i % 256; writes its
                                                 metadata, stays until killed, reads nothing
  hostile_peer.py relay LPORT HOST PORT LOG      forwards one connection, writing both
                                                 directions to LOG, until either side closes
  hostile_peer.py wack_relay LPORT HOST PORT     (a rogue owner) forwards a set's connections
                                                 to the owner daemon at HOST PORT, but raises
                                                 the count of the first WACK it carries by 5:
                                                 it acknowledges puts never sent (§10.7)
  hostile_peer.py claimok_relay LPORT HOST PORT [json]
                                                 (a rogue owner) forwards a set's connections
                                                 to the owner daemon at HOST PORT, but passes
                                                 each CLAIM_OK twice, back to back: a transfer
                                                 has one (§10.3); with json, each HELLO loses
                                                 its binary_pairing, so that every CLAIM_OK is
                                                 JSON (as to and from an older daemon)
  hostile_peer.py wack_opener SOCKET METAFILE    (helper) a local client opening the window
                                                 METAFILE names and putting 4 KiB twice; exit
                                                 0 when both puts end ERRORED, none COMPLETE,
                                                 with a cause naming the WACK rule
  hostile_peer.py stall_relay LPORT HOST PORT LOG [doneack]
                                                 (a rogue owner) forwards a set's connections
                                                 to the owner daemon at HOST PORT, writing what
                                                 the opener sends to LOG, but stops reading the
                                                 opener for 3 s at its first WPUT: its frames
                                                 queue at the opener meanwhile; with doneack,
                                                 it also answers that WPUT's op at once with a
                                                 DONE_ACK (no pairing frame is about a window
                                                 frame's op, §10.7)
  hostile_peer.py stall_putter SOCKET METAFILE   (helper) a local client putting 64 MiB of "a"
                                                 into the window METAFILE names with a 500 ms
                                                 deadline; once told the put ended, it writes
                                                 LEAKED!! all over its buffer, as a client free
                                                 to reuse it may; exit 0 when the put ended
  hostile_peer.py wopen_mute_relay LPORT HOST PORT
                                                 (a rogue owner) forwards a set's connections
                                                 to the owner daemon at HOST PORT, but drops
                                                 every WOPEN_OK and WOPEN_ERR: window opens
                                                 are never answered, PINGs still are (§10.6)
  hostile_peer.py mute_opener SOCKET METAFILE    (helper) a local client: three window.opens of
                                                 METAFILE whose clients leave before any
                                                 answer, then one that waits; exit 0 when it
                                                 fails ETIMEDOUT within 20 s, naming the bound
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
CLAIM_OK, CLAIM_ERR, DATA, DONE, DONE_ACK = 3, 4, 5, 6, 7
WOPEN, WOPEN_OK, WOPEN_ERR, WCLOSE, WCLAIM = 13, 14, 15, 16, 17
CANCEL, WPUT, WGET, WACK = 8, 18, 19, 20
WNOTIFY, WNOTIFY_ACK = 23, 24
FROM_ACTIVE = 1
BINARY = 2  # flags: the binary layout of §10.8 (CLAIM, CLAIM_OK, DONE, DONE_ACK only)
CLAIM = 2
BCLAIM = struct.Struct("<QQQIBBBB16s")  # op, epoch, length, stage_max, kind, meta kind, flags,
# zero, node; then the proof (32 bytes, flags bit 0) or the token (16)
KIND_READABLE, KIND_WRITABLE, KIND_READ, KIND_WRITE = 0, 1, 2, 3
WPRE = struct.Struct("<QQIHH")  # window, handle, length, tag length, flags (XP_WIN_LAST = 1)
TIMEOUT = 5.0


def frame(msg_type, payload=None, flags=0, xfer=0):
    body = json.dumps(payload, separators=(",", ":")).encode() if payload is not None else b""
    return HDR.pack(msg_type, flags, 0, len(body), xfer, 0) + body


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


def recv_any(sock):
    """(type, flags, xfer, offset, body bytes) of the next frame, or None once closed."""
    try:
        hdr = recv_exact(sock, HDR.size)
        if hdr is None:
            return None
        msg_type, flags, _, length, xfer, offset = HDR.unpack(hdr)
        body = recv_exact(sock, length) if length else b""
        return None if body is None else (msg_type, flags, xfer, offset, body)
    except (ConnectionResetError, socket.timeout):
        return None


def frames_whole(pending):
    """The frames whole in @pending (a bytearray read off a socket), taken out of it: what
    stays is the first bytes of the next frame."""
    frames = []
    while len(pending) >= HDR.size:
        msg_type, flags, _, length, xfer, offset = HDR.unpack_from(pending)
        if len(pending) < HDR.size + length:
            break
        frames.append((msg_type, flags, xfer, offset, bytes(pending[HDR.size:HDR.size + length])))
        del pending[:HDR.size + length]
    return frames


def frames_finish(sock, pending):
    """Reads the rest of the frame begun in @pending, so that the next read starts a frame."""
    while pending:
        if len(pending) < HDR.size:
            need = HDR.size - len(pending)
        else:
            need = HDR.size + HDR.unpack_from(pending)[3] - len(pending)
        try:
            more = recv_exact(sock, need)
        except (ConnectionResetError, socket.timeout):
            more = None
        if more is None:
            return
        pending += more
        frames_whole(pending)


def expect(sock, want_type, want_errno=None):
    """The next frame that is not a PING, if of @want_type (and errno); else None."""
    while True:
        got = recv_any(sock)
        if got is None or got[0] != PING:
            break
        sock.sendall(frame(PONG))
    if got is None or got[0] != want_type:
        print(f"expected type {want_type}, got {got and got[:4]}", file=sys.stderr)
        return None
    if want_errno and json.loads(got[4]).get("errno") != want_errno:
        print(f"expected {want_errno}, got {got[4]!r}", file=sys.stderr)
        return None
    return got


def member(host, port, key):
    """An authenticated connection as a new node: (sock, the daemon's HELLO, our node, epoch)."""
    node, epoch, nonce = secrets.token_hex(16), 9, secrets.token_bytes(16)
    sock, hello, _, theirs = handshake(host, port, key, node, epoch, nonce)
    if hello is None or theirs is None or theirs[0] != AUTH:
        raise OSError("handshake failed")
    return sock, hello, node, epoch


def claim_proof(key, owner, owner_epoch, claimer, claimer_epoch, op, xfer, token):
    msg = (b"xferd-claim-v1\0" + ident(owner, owner_epoch) + ident(claimer, claimer_epoch) +
           struct.pack("<QQ", op, xfer) + token)
    return hmac.new(key, msg, hashlib.sha256).digest()


def mode_windows(host, port, keyfile, metafile):
    key = read_key(keyfile)
    meta = read_meta(metafile)
    sock, hello, node, epoch = member(host, port, key)
    owner, oep, win = hello["node"], hello["epoch"], meta["op"]
    wc = {"window": win, "handle": 7, "kind": "get", "offset": 0, "length": 16,
          "node": owner, "epoch": oep}
    # a get before opening: refused, not a protocol error
    sock.sendall(frame(WCLAIM, wc, FROM_ACTIVE, 101))
    ok = expect(sock, CLAIM_ERR, "EACCES") is not None
    # an open with a proof made for another handle: refused
    proof = claim_proof(key, owner, oep, node, epoch, win, 8, bytes.fromhex(meta["token"]))
    sock.sendall(frame(WOPEN, {"window": win, "node": owner, "epoch": oep, "proof": proof.hex()},
                       FROM_ACTIVE, 7))
    ok = ok and expect(sock, WOPEN_ERR, "EACCES") is not None
    # the right proof: open as handle 7
    proof = claim_proof(key, owner, oep, node, epoch, win, 7, bytes.fromhex(meta["token"]))
    sock.sendall(frame(WOPEN, {"window": win, "node": owner, "epoch": oep, "proof": proof.hex()},
                       FROM_ACTIVE, 7))
    ok = ok and expect(sock, WOPEN_OK) is not None
    # a one-sided put into the read-only window (§10.7): refused EACCES, then acknowledged
    sock.sendall(wput(win, 7, 150, 0, b"abcd"))
    ok = ok and expect(sock, CANCEL, "EACCES") is not None
    ok = ok and expect(sock, WACK) is not None
    # a put into the read-only window, a get past its end, a get of a handle never opened
    sock.sendall(frame(WCLAIM, dict(wc, kind="put"), FROM_ACTIVE, 102))
    ok = ok and expect(sock, CLAIM_ERR, "EACCES") is not None
    sock.sendall(frame(WCLAIM, dict(wc, offset=meta["lengths"][0] - 8), FROM_ACTIVE, 103))
    ok = ok and expect(sock, CLAIM_ERR, "EINVAL") is not None
    sock.sendall(frame(WCLAIM, dict(wc, offset=2**62, length=2**62), FROM_ACTIVE, 104))
    ok = ok and expect(sock, CLAIM_ERR, "EINVAL") is not None
    sock.sendall(frame(WCLAIM, dict(wc, handle=8), FROM_ACTIVE, 105))
    ok = ok and expect(sock, CLAIM_ERR, "EACCES") is not None
    sock.sendall(frame(WCLAIM, dict(wc, epoch=oep + 1), FROM_ACTIVE, 106))
    ok = ok and expect(sock, CLAIM_ERR, "ESTALE") is not None
    # a good get: the window's first 16 bytes come as DATA, DONE is acknowledged
    sock.sendall(frame(WCLAIM, wc, FROM_ACTIVE, 107))
    ok = ok and expect(sock, CLAIM_OK) is not None
    data = expect(sock, DATA) if ok else None
    ok = ok and data is not None and data[4] == bytes(range(16))
    sock.sendall(frame(DONE, {"bytes": 16}, FROM_ACTIVE, 107))
    ok = ok and expect(sock, DONE_ACK) is not None
    # answers for handles it never asked about, and a close of an unknown one: ignored
    note = {"window": win, "kind": "get", "offset": 0, "bytes": 16, "tag": "t"}
    sock.sendall(frame(WOPEN_OK, {}, 0, 999) + frame(WCLOSE, {"errno": "EIO", "message": "x"}, 0, 998)
                 + frame(WCLOSE, {"window": win}, FROM_ACTIVE, 997)
                 + frame(WNOTIFY, note, FROM_ACTIVE, 996)
                 + frame(WNOTIFY_ACK, {"count": 5}, 0, 995) + frame(PING))
    ok = ok and expect(sock, PONG) is not None
    # the opener lets go: a get on the handle is refused afterwards
    sock.sendall(frame(WCLOSE, {"window": win}, FROM_ACTIVE, 7))
    sock.sendall(frame(WCLAIM, wc, FROM_ACTIVE, 108))
    ok = ok and expect(sock, CLAIM_ERR, "EACCES") is not None
    # misuse: opening a handle twice, then a WOPEN without FROM_ACTIVE: the set is cut
    sock.sendall(frame(WOPEN, {"window": win, "node": owner, "epoch": oep, "proof": proof.hex()},
                       FROM_ACTIVE, 7))
    ok = ok and expect(sock, WOPEN_OK) is not None
    sock.sendall(frame(WOPEN, {"window": win, "node": owner, "epoch": oep, "proof": proof.hex()},
                       FROM_ACTIVE, 7))
    ok = ok and closed_soon(sock)
    for bad in (frame(WOPEN, {"window": win, "node": owner, "epoch": oep, "proof": proof.hex()},
                      0, 1),
                frame(WCLAIM, dict(wc, tag="x" * 257), FROM_ACTIVE, 1),
                frame(WCLAIM, dict(wc, kind="read"), FROM_ACTIVE, 1),
                frame(WCLOSE, {"window": "x"}, FROM_ACTIVE, 1),
                frame(WNOTIFY, note, 0, 1),
                frame(WNOTIFY, dict(note, tag="x" * 257), FROM_ACTIVE, 1),
                # a credit acknowledgement comes from an owner, with a count (§10.9)
                frame(WNOTIFY_ACK, {"count": 1}, FROM_ACTIVE, 1),
                frame(WNOTIFY_ACK, {}, 0, 1)):
        sock, _, _, _ = member(host, port, key)
        sock.sendall(bad)
        if not closed_soon(sock):
            print(f"not cut off after {bad!r}", file=sys.stderr)
            ok = False
    # a WNOTIFY from an opener that holds no key of its own (TCP: each get is claimed) would
    # be a tag for bytes it never moved: the set is cut (PROTOCOL.md §10.6)
    sock, _, node, epoch = member(host, port, key)
    proof = claim_proof(key, owner, oep, node, epoch, win, 7, bytes.fromhex(meta["token"]))
    sock.sendall(frame(WOPEN, {"window": win, "node": owner, "epoch": oep, "proof": proof.hex()},
                       FROM_ACTIVE, 7))
    ok = ok and expect(sock, WOPEN_OK) is not None
    sock.sendall(frame(WNOTIFY, note, FROM_ACTIVE, 7))
    if not closed_soon(sock):
        print("not cut off after a WNOTIFY from a keyless opener", file=sys.stderr)
        ok = False
    return ok


def wput(win, handle, op, offset, data, tag=b"", flags=1, window_len=None):
    pre = WPRE.pack(win, handle, len(data) if window_len is None else window_len, len(tag), flags)
    body = pre + tag + data
    return HDR.pack(WPUT, FROM_ACTIVE, 0, len(body), op, offset) + body


def wput_seq(win, handle, op, offset, data, tag, seq):
    """A WPUT with XP_WIN_SEQ (4): the handle's count of its tagged ops after the prefix."""
    body = WPRE.pack(win, handle, len(data), len(tag), 5) + struct.pack("<Q", seq) + tag + data
    return HDR.pack(WPUT, FROM_ACTIVE, 0, len(body), op, offset) + body


def wget(win, handle, op, offset, length, tag=b""):
    body = WPRE.pack(win, handle, length, len(tag), 0) + tag
    return HDR.pack(WGET, FROM_ACTIVE, 0, len(body), op, offset) + body


def vm_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def collect(sock, want, limit=64):
    """Frames until @want(frames) holds (PINGs answered); None once closed or after @limit."""
    got = []
    for _ in range(limit):
        f = recv_any(sock)
        if f is None:
            return None
        if f[0] == PING:
            sock.sendall(frame(PONG))
            continue
        got.append(f)
        if want(got):
            return got
    return None


def cancel_of(frames, op, errno_name):
    return any(f[0] == CANCEL and f[2] == op and json.loads(f[4]).get("errno") == errno_name
               for f in frames)


def wack_at_least(frames, n):
    return any(f[0] == WACK and f[3] >= n for f in frames)


def wframes_open(host, port, key, meta, handle):
    sock, hello, node, epoch = member(host, port, key)
    owner, oep, win = hello["node"], hello["epoch"], meta["op"]
    proof = claim_proof(key, owner, oep, node, epoch, win, handle, bytes.fromhex(meta["token"]))
    sock.sendall(frame(WOPEN, {"window": win, "node": owner, "epoch": oep, "proof": proof.hex()},
                       FROM_ACTIVE, handle))
    if expect(sock, WOPEN_OK) is None:
        raise OSError("open refused")
    return sock, win, node, epoch


def member_again(host, port, key, node, epoch):
    """Another authenticated connection of the same node (so of the same set)."""
    sock, hello, _, theirs = handshake(host, port, key, node, epoch, secrets.token_bytes(16))
    if hello is None or theirs is None or theirs[0] != AUTH:
        raise OSError("handshake failed")
    return sock


def cut_after(host, port, key, meta, bad):
    """Whether a fresh member that opened the window is cut off after sending @bad(win)."""
    sock, win, _, _ = wframes_open(host, port, key, meta, 7)
    sock.sendall(bad(win))
    if closed_soon(sock):
        return True
    print(f"not cut off after {bad(win)[:64]!r}", file=sys.stderr)
    return False


def mode_wframes(host, port, keyfile, metafile, pid):
    import time
    key = read_key(keyfile)
    meta = read_meta(metafile)
    wlen = meta["lengths"][0]
    orig = bytes(i % 256 for i in range(wlen))
    # ASan's quarantine keeps freed memory resident: there the cut-offs are the checks
    sanitized = os.environ.get("XFER_SANITIZE") or "san" in os.environ.get("BUILD", "")
    rss_bound = 1 << 40 if sanitized else 64 * 1024
    sock, win, node, epoch = wframes_open(host, port, key, meta, 7)
    check = Checks("wframes")

    # a get: one request, one DATA of the window's bytes
    sock.sendall(wget(win, 7, 201, 0, 16))
    got = collect(sock, lambda fs: any(f[0] == DATA for f in fs))
    check(got and got[-1][2] == 201 and got[-1][4] == orig[:16], f"get 0+16: {got}")
    # a put lands, is acknowledged (count 1), and a get after it sees it
    sock.sendall(wput(win, 7, 202, 100, b"ABCD") + wget(win, 7, 203, 96, 12))
    got = collect(sock, lambda fs: any(f[0] == DATA for f in fs) and wack_at_least(fs, 1))
    data = [f for f in got or [] if f[0] == DATA]
    check(data and data[0][4] == orig[96:100] + b"ABCD" + orig[104:108], f"put then get: {got}")
    # out of range, both ways, and past 2^64: refused (CANCEL naming the rule), the frame counted
    sock.sendall(wput(win, 7, 204, wlen - 2, b"WXYZ") + wget(win, 7, 205, wlen - 8, 16) +
                 wput(win, 7, 206, 2**64 - 2, b"WXYZ"))
    got = collect(sock, lambda fs: cancel_of(fs, 204, "EINVAL") and cancel_of(fs, 205, "EINVAL")
                  and cancel_of(fs, 206, "EINVAL") and wack_at_least(fs, 3))
    check(got is not None, "out-of-range put/get not refused EINVAL")
    sock.sendall(wget(win, 7, 207, wlen - 16, 16))
    got = collect(sock, lambda fs: any(f[0] == DATA for f in fs))
    check(got and got[-1][4] == orig[wlen - 16:], "bytes near the end changed by a refused put")
    # a second connection of the set carries puts of the same handle (striping): its WACKs
    # count only what it carried, a refusal comes on it ahead of the WACK covering it there
    sock2 = member_again(host, port, key, node, epoch)
    sock2.sendall(wput(win, 7, 301, 200, b"EFGH") + wput(win, 7, 302, wlen, b"X") +
                  wput(win, 7, 303, 204, b"IJ"))
    got = collect(sock2, lambda fs: wack_at_least(fs, 3))
    wacks = [f[3] for f in got or [] if f[0] == WACK]
    first_cancel = next((i for i, f in enumerate(got or []) if f[0] == CANCEL), None)
    last_wack = max((i for i, f in enumerate(got or []) if f[0] == WACK), default=None)
    check(got is not None and wacks[-1] == 3 and max(wacks) == 3 and cancel_of(got, 302, "EINVAL")
          and first_cancel is not None and first_cancel < last_wack,
          f"second connection: WACKs {wacks} (want its own count, 3), frames {got}")
    sock.sendall(wget(win, 7, 304, 200, 6))
    got = collect(sock, lambda fs: any(f[0] == DATA for f in fs))
    check(got and got[-1][4] == b"EFGHIJ", f"puts of the second connection did not land: {got}")
    # a handle never opened (8): dropped, no answer, the set kept
    sock.sendall(wput(win, 8, 208, 0, b"NOPE") + wget(win, 8, 209, 0, 4) + frame(PING))
    got = collect(sock, lambda fs: any(f[0] == PONG for f in fs))
    check(got and all(f[0] in (PONG, WACK) and (f[0] != WACK or f[3] == 3) for f in got),
          f"frames of an unopened handle answered: {got}")
    # a get flood it never reads: the owner's queue of replies stays bounded
    rss0 = vm_rss_kib(pid)
    flood = b"".join(wget(win, 7, 1000 + i, 0, 65536) for i in range(30000))
    sock.setblocking(False)
    sent = 0
    deadline = time.monotonic() + 20
    while sent < len(flood) and time.monotonic() < deadline:
        try:
            sent += sock.send(flood[sent:])
        except BlockingIOError:
            time.sleep(0.01)
    time.sleep(1)
    rss1 = vm_rss_kib(pid)
    check(rss1 - rss0 < rss_bound, f"get flood grew the daemon by {rss1 - rss0} KiB")
    print(f"# wframes: {sent // len(wget(win, 7, 0, 0, 1))} gets sent unread: daemon +{rss1 - rss0} KiB",
          file=sys.stderr)
    check(os.path.exists(f"/proc/{pid}"), "daemon gone after the get flood")
    sock.close()
    # a notify flood that ignores its credit (WACKs), against an owner client that never
    # reads: the notifications wait at the daemon, bounded (past 4096 of this opener's, its puts
    # are refused EDQUOT), and the owner stays connected (PROTOCOL.md §10.9)
    sock, win, _, _ = wframes_open(host, port, key, meta, 9)
    rss0 = vm_rss_kib(pid)
    tag = b"t" * 256
    chunk = b"".join(wput(win, 9, 5000 + i, i % 1024, b"x", tag) for i in range(2000))
    sock.settimeout(TIMEOUT)
    refused = closed = False
    pending = bytearray()  # what was read of the frames, a partial last one included
    for rounds in range(200):
        sock.sendall(chunk)
        sock.setblocking(False)
        try:
            while True:
                f = sock.recv(65536)
                if not f:
                    break
                pending += f
                for t, _, _, _, body in frames_whole(pending):
                    refused = refused or (t == CANCEL and b"EDQUOT" in body)
                    closed = closed or (t == WCLOSE and b"ECONNRESET" in body)
        except BlockingIOError:
            pass
        sock.settimeout(TIMEOUT)
        if refused or closed:
            break
    frames_finish(sock, pending)  # (the frames after it start at a frame's first byte)
    rss1 = vm_rss_kib(pid)
    check(not closed, "the owner client that never reads was cut off (window revoked)")
    check(refused, "puts past what waits for a slow owner were not refused EDQUOT")
    check(rss1 - rss0 < rss_bound, f"notify flood grew the daemon by {rss1 - rss0} KiB")
    print(f"# wframes: refused EDQUOT after {(rounds + 1) * 2000} tagged puts sent, the owner "
          f"kept: daemon +{rss1 - rss0} KiB", file=sys.stderr)
    # the set is kept
    sock.sendall(frame(PING))
    got = collect(sock, lambda fs: any(f[0] == PONG for f in fs), 100000)
    check(got is not None, "the flooding member's set was cut")
    sock.close()
    return check.ok


def mode_wcycle(host, port, keyfile, metafile, pid):
    key = read_key(keyfile)
    meta = read_meta(metafile)
    sock, hello, node, epoch = member(host, port, key)
    owner, oep, win = hello["node"], hello["epoch"], meta["op"]
    check = Checks("wcycle")
    tag = b"t" * 256
    rss0 = vm_rss_kib(pid)
    answer = None
    for cycle in range(100):
        handle = 100 + cycle
        proof = claim_proof(key, owner, oep, node, epoch, win, handle,
                            bytes.fromhex(meta["token"]))
        sock.sendall(frame(WOPEN, {"window": win, "node": owner, "epoch": oep,
                                   "proof": proof.hex()}, FROM_ACTIVE, handle))
        got = collect(sock, lambda fs: any(f[0] in (WOPEN_OK, WOPEN_ERR) for f in fs), 100000)
        if not check(got is not None, f"cut off at open {cycle + 1}"):
            return False
        answer = got[-1]
        if answer[0] == WOPEN_ERR:
            break
        puts = b"".join(wput(win, handle, 1000000 * cycle + i, i, b"x", tag)
                        for i in range(1024))
        sock.sendall(puts + frame(WCLOSE, {"window": win}, FROM_ACTIVE, handle))
    rss1 = vm_rss_kib(pid)
    refused = answer is not None and answer[0] == WOPEN_ERR
    # (the first opener's notifications fill the owner client's queue, XD_NOTIFY_HIGH: they
    # went, and that opener with them; the 64 after it are kept)
    check(refused and json.loads(answer[4]).get("errno") == "EDQUOT" and cycle <= 65,
          f"{cycle + 1} opens, each closed with 1024 notifications due, the last answered "
          f"{answer and answer[:3]} {answer and answer[4]!r}: want EDQUOT by the 66th")
    print(f"# wcycle: {cycle + 1} opens, the last answered "
          f"{json.loads(answer[4]) if refused else 'WOPEN_OK'}: daemon +{rss1 - rss0} KiB",
          file=sys.stderr)
    sock.sendall(frame(PING))
    check(collect(sock, lambda fs: any(f[0] == PONG for f in fs), 100000) is not None,
          "the member's set was cut")
    sock.close()
    return check.ok


def mode_wtrickle(host, port, keyfile, metafile):
    """
    WPUTs of 768 KiB into a 1 MiB read-write window, sent in pieces with pauses: the receiver
    wakes only once 256 KiB of a payload are queued while that much is still due (tcp.c
    pconn_lowat()), at one byte otherwise. The bytes must land whole (the last 168 KiB, below
    the mark, wake it), a payload trickling below the mark for longer than the keepalive timeout
    keeps the set, and one that stops below it is cut by keepalive as a silent peer is.
    """
    import time
    key = read_key(keyfile)
    meta = read_meta(metafile)
    n = 768 * 1024
    check = Checks("wtrickle")

    def landed(sock, op, data, puts):
        """The put's WACK (the connection's count, @puts) comes, then a get returns its bytes."""
        sock.settimeout(TIMEOUT)
        if collect(sock, lambda fs: wack_at_least(fs, puts)) is None:
            return False
        sock.sendall(wget(win, 7, op + 1, 0, n))
        got = collect(sock, lambda fs: sum(len(f[4]) for f in fs if f[0] == DATA) >= n)
        frames = sorted((f[3], f[4]) for f in got or [] if f[0] == DATA)
        return b"".join(b for _, b in frames) == data

    sock, win, _, _ = wframes_open(host, port, key, meta, 7)
    # pieces of 100 KiB, 200 KiB (above the mark after it), 300 KiB (168 KiB left: below it)
    data = bytes((i * 7 + 3) % 251 for i in range(n))
    body = wput(win, 7, 401, 0, data)
    head = len(body) - n
    sent = 0
    for cut in (head + 100 * 1024, head + 300 * 1024, head + 600 * 1024, len(body)):
        sock.sendall(body[sent:cut])
        sent = cut
        time.sleep(0.3)
    check(landed(sock, 401, data, 1), "a put sent in pieces did not land whole")
    # 1 KiB every 0.5 s for 7 s, below the mark (the keepalive timeout is 5 s): the set is kept
    data = bytes((i * 13 + 1) % 253 for i in range(n))
    body = wput(win, 7, 403, 0, data)
    sent = head + 100 * 1024
    sock.sendall(body[:sent])
    for _ in range(14):
        time.sleep(0.5)
        sock.sendall(body[sent:sent + 1024])
        sent += 1024
    sock.sendall(body[sent:])
    check(landed(sock, 403, data, 2), "a put trickling below the mark was cut (or did not land)")
    # a payload that stops below the mark (its last byte queued, unread): cut as silent, within
    # the keepalive timeout and a bit
    body = wput(win, 7, 405, 0, data)
    sock.sendall(body[:head + 100 * 1024])
    time.sleep(0.3)  # (read: the mark is set)
    sock.sendall(body[head + 100 * 1024:head + 100 * 1024 + 1])
    sock.settimeout(1)
    t0 = time.monotonic()
    cut = False
    while not cut and time.monotonic() < t0 + 12:
        try:
            cut = not sock.recv(65536)  # (else PINGs, unanswered)
        except ConnectionResetError:
            cut = True  # (closed with our unread bytes in its socket)
        except socket.timeout:
            pass
    check(cut, f"a payload stopped below the mark kept the set for {time.monotonic() - t0:.1f} s")
    sock.close()
    return check.ok


class Checks:
    """A mode's checks: a failed one prints "<mode>: <what>" and clears ok; each returns @cond."""

    def __init__(self, mode):
        self.mode, self.ok = mode, True

    def __call__(self, cond, what):
        if not cond:
            print(f"{self.mode}: {what}", file=sys.stderr)
            self.ok = False
        return cond


def read_meta(metafile):
    import base64
    with open(metafile) as f:
        m = f.read().strip().split("\n")[0][len("xfer1."):]
    return json.loads(base64.urlsafe_b64decode(m + "=" * (-len(m) % 4)))


def bin_claim(meta, cred, xfer, flags=1, kind=KIND_READ, meta_kind=KIND_READABLE, pad=0,
              op=None, length=None, stage_max=0, hdr_flags=FROM_ACTIVE | BINARY):
    """A binary CLAIM frame (§10.8) of @meta's op; @flags bit 0: @cred is a proof."""
    body = BCLAIM.pack(meta["op"] if op is None else op, meta["epoch"],
                       sum(meta["lengths"]) if length is None else length, stage_max, kind,
                       meta_kind, flags, pad, bytes.fromhex(meta["node"])) + cred
    return HDR.pack(CLAIM, hdr_flags, 0, len(body), xfer, 0) + body


def bin_frame(msg_type, body, xfer, flags=FROM_ACTIVE | BINARY):
    return HDR.pack(msg_type, flags, 0, len(body), xfer, 0) + body


def member_hello(host, port, key, extra):
    """member() whose HELLO carries @extra keys ({"binary_pairing": True})."""
    node, epoch, nonce = secrets.token_hex(16), 9, secrets.token_bytes(16)
    sock = connect(host, port)
    sock.sendall(frame(HELLO, dict({"version": 1, "node": node, "epoch": epoch,
                                    "nonce": nonce.hex()}, **extra)))
    hello = recv_frame(sock)
    theirs = recv_frame(sock)
    if hello is None or theirs is None or theirs[0] != AUTH:
        raise OSError("handshake failed")
    them = ident(hello[1]["node"], hello[1]["epoch"])
    mac = auth_mac(key, b"C", ident(node, epoch), them, bytes.fromhex(hello[1]["nonce"]), nonce)
    sock.sendall(frame(AUTH, {"mac": mac.hex()}))
    return sock, hello[1], node, epoch


def read_pair_rest(sock, xfer, got, n):
    """The rest of transfer @xfer's DATA into @got from @n bytes: whether it came."""
    while n < len(got):
        f = expect(sock, DATA)
        if f is None or f[2] != xfer or f[3] + len(f[4]) > len(got):
            return False
        got[f[3]:f[3] + len(f[4])] = f[4]
        n += len(f[4])
    return True


def read_pair_bytes(sock, xfer, total):
    """The DATA of transfer @xfer until @total bytes: whether they are i % 256."""
    got = bytearray(total)
    n = 0
    while n < total:
        f = expect(sock, DATA)
        if f is None or f[2] != xfer or f[3] + len(f[4]) > total:
            return False
        got[f[3]:f[3] + len(f[4])] = f[4]
        n += len(f[4])
    return bytes(got) == bytes(i % 256 for i in range(total))


def mode_binpair(host, port, keyfile, meta1file, meta2file, meta3file):
    key = read_key(keyfile)
    m1, m2, m3 = read_meta(meta1file), read_meta(meta2file), read_meta(meta3file)
    if not hello_offers_binary(host, port, key):
        return False
    # A peer that did not offer binary frames may still send them; it hears JSON.
    sock, hello, node, epoch = member(host, port, key)
    sock.sendall(bin_claim(m1, secrets.token_bytes(32), 201))
    ok = expect(sock, CLAIM_ERR, "EACCES") is not None  # a wrong proof; the op stays claimable
    sock.sendall(bin_claim(m1, bytes.fromhex(m1["token"]), 202, flags=0))
    ok = ok and expect(sock, CLAIM_ERR, "EACCES") is not None  # a keyed owner takes no token
    proof = claim_proof(key, m1["node"], m1["epoch"], node, epoch, m1["op"], 203,
                        bytes.fromhex(m1["token"]))
    sock.sendall(bin_claim(m1, proof, 203, flags=1 | 2))  # with the short end
    f = expect(sock, CLAIM_OK)
    ok = ok and f is not None and f[1] & BINARY == 0 and json.loads(f[4]) == {"quick_end": True}
    ok = ok and read_pair_bytes(sock, 203, sum(m1["lengths"]))
    sock.sendall(bin_frame(DONE, struct.pack("<Q", sum(m1["lengths"])), 203) + frame(PING))
    ok = ok and expect(sock, PONG) is not None  # the short end of a read: no DONE_ACK
    # A peer that offered them hears binary frames: CLAIM_OK, then DONE_ACK.
    sock, hello, node, epoch = member_hello(host, port, key, {"binary_pairing": True})
    proof = claim_proof(key, m2["node"], m2["epoch"], node, epoch, m2["op"], 204,
                        bytes.fromhex(m2["token"]))
    sock.sendall(bin_claim(m2, proof, 204))
    f = expect(sock, CLAIM_OK)
    ok = ok and f is not None and f[1] & BINARY and f[4] == struct.pack("<I", 0)
    ok = ok and read_pair_bytes(sock, 204, sum(m2["lengths"]))
    sock.sendall(bin_frame(DONE, struct.pack("<Q", sum(m2["lengths"])), 204))
    f = expect(sock, DONE_ACK)
    ok = ok and f is not None and f[1] & BINARY and f[4] == b""
    # A peer that offered read_ok_in_data too: a read with the short end is answered by its
    # DATA alone (the first frame about it is DATA, no CLAIM_OK), and ends with its DONE.
    sock, hello, node, epoch = member_hello(host, port, key, {"binary_pairing": True,
                                                              "read_ok_in_data": True})
    ok = ok and hello.get("read_ok_in_data") is True
    proof = claim_proof(key, m3["node"], m3["epoch"], node, epoch, m3["op"], 205,
                        bytes.fromhex(m3["token"]))
    sock.sendall(bin_claim(m3, proof, 205, flags=1 | 2))
    f = recv_any(sock)
    while f is not None and f[0] == PING:
        sock.sendall(frame(PONG))
        f = recv_any(sock)
    ok = ok and f is not None and f[0] == DATA and f[2] == 205 and f[3] == 0
    total = sum(m3["lengths"])
    got = bytearray(total)
    if f is not None and f[0] == DATA and f[3] + len(f[4]) <= total:
        got[f[3]:f[3] + len(f[4])] = f[4]
        n = len(f[4])
        ok = ok and (n == total or read_pair_rest(sock, 205, got, n))
        ok = ok and bytes(got) == bytes(i % 256 for i in range(total))
    sock.sendall(bin_frame(DONE, struct.pack("<Q", total), 205) + frame(PING))
    ok = ok and expect(sock, PONG) is not None  # no CLAIM_OK, no DONE_ACK came in between
    if not ok:
        print("binary pairing frames: the good cases failed", file=sys.stderr)
        return False
    # Every malformed layout is a protocol error: the set is cut.
    good = claim_proof(key, m1["node"], m1["epoch"], node, epoch, m1["op"], 1,
                       bytes.fromhex(m1["token"]))
    claim = bin_claim(m1, good, 1)
    bad = {
        "short": bin_frame(CLAIM, claim[HDR.size:-1], 1), "proof flag, token length": bin_claim(m1, good[:16], 1),
        "token flag, proof length": bin_claim(m1, good, 1, flags=0),
        "pad byte": bin_claim(m1, good, 1, pad=1),
        "unknown flag": bin_claim(m1, good, 1, flags=1 | 4),
        "kind readable": bin_claim(m1, good, 1, kind=KIND_READABLE),
        "kind 9": bin_claim(m1, good, 1, kind=9), "metadata kind 7": bin_claim(m1, good, 1, meta_kind=7),
        "op 2^63": bin_claim(m1, good, 1, op=2**63), "length 0": bin_claim(m1, good, 1, length=0),
        "length 2^63": bin_claim(m1, good, 1, length=2**63),
        "stage_max 5": bin_claim(m1, good, 1, stage_max=5),
        "not FROM_ACTIVE": bin_claim(m1, good, 1, hdr_flags=BINARY),
        "PING": bin_frame(PING, b"", 0), "CANCEL": bin_frame(CANCEL, b"{}", 1),
        "DATA": bin_frame(DATA, b"x", 1), "HELLO": bin_frame(HELLO, b"", 0),
        "CLAIM_OK flag 2": bin_frame(CLAIM_OK, struct.pack("<I", 2), 77, 0),
        "CLAIM_OK short": bin_frame(CLAIM_OK, b"\0\0\0", 77, 0),
        "DONE short": bin_frame(DONE, b"\0" * 4, 77), "DONE_ACK long": bin_frame(DONE_ACK, b"\0", 77, 0),
    }
    for name, raw in bad.items():
        sock, _, _, _ = member(host, port, key)
        sock.sendall(raw)
        if not closed_soon(sock):
            print(f"not cut off after a binary frame: {name}", file=sys.stderr)
            ok = False
    return ok


def hello_offers_binary(host, port, key):
    """Whether the daemon's HELLO offers the binary pairing frames."""
    sock, hello, _, _ = member(host, port, key)
    sock.close()
    if hello.get("binary_pairing") is not True:
        print(f"the daemon's HELLO does not offer binary_pairing: {hello}", file=sys.stderr)
        return False
    return True


def mode_wframes_cut(host, port, keyfile, metafile):
    key = read_key(keyfile)
    meta = read_meta(metafile)
    ok = True
    # (a SEQ frame before the bad one lands: it writes the window's own bytes, which mode_wframes
    # checks later)
    for bad in (lambda w: wput(w + 1000, 7, 1, 0, b"x"),  # forged window id, an open handle
                lambda w: wput(w, 7, 1, 0, b"x", b"y" * 257),  # tag over 256
                lambda w: wput(w, 7, 1, 0, b"xyz", window_len=2),  # lengths disagree
                lambda w: wput(w, 7, 1, 0, b"x", b"tag", flags=0),  # a tag not on the last
                lambda w: wput(w, 7, 1, 0, b"x", flags=0x11),  # unknown flags
                lambda w: wput_seq(w, 7, 1, 0, b"\0", b"", 1),  # SEQ without a tag
                lambda w: wput_seq(w, 7, 1, 0, b"\0", b"t", 0),  # SEQ: no count is 0
                lambda w: wput_seq(w, 7, 1, 0, b"\0", b"t", 2) +  # SEQ: a count twice
                wput_seq(w, 7, 2, 1, b"\1", b"u", 2),
                lambda w: wput_seq(w, 7, 1, 0, b"\0", b"t", 1) +  # SEQ: a count again, notified
                wput_seq(w, 7, 2, 1, b"\1", b"u", 1),
                lambda w: wput_seq(w, 7, 1, 0, b"\0", b"t", 4097),  # SEQ: past 4096 waiting
                lambda w: HDR.pack(WGET, FROM_ACTIVE, 0, 33, 1, 0) +  # SEQ: a get's count 0
                WPRE.pack(w, 7, 1, 1, 4) + struct.pack("<Q", 0) + b"t",
                lambda w: wput(w, 7, 1, 0, b"x", flags=2),  # PIECE without LAST
                lambda w: wput(w, 7, 1, 0, b"x", b"tag", flags=3),  # PIECE on a tagged put
                lambda w: HDR.pack(WGET, FROM_ACTIVE, 0, 24, 1, 0) + WPRE.pack(w, 7, 1, 0, 2),
                lambda w: wget(w, 7, 1, 0, 0),  # an empty get
                lambda w: HDR.pack(WPUT, 0, 0, 25, 1, 0) + WPRE.pack(w, 7, 1, 0, 1) + b"x",
                lambda w: HDR.pack(WACK, 0, 0, 4, 7, 0) + b"abcd",
                # tags the owner's client could not be told in JSON (window.notified)
                lambda w: wput(w, 7, 1, 0, b"x", b"a\0b"),  # a NUL
                lambda w: wput(w, 7, 1, 0, b"x", b"\xff\xfe"),  # not UTF-8
                lambda w: wput(w, 7, 1, 0, b"x", b"\xc0\xaf"),  # an overlong '/'
                lambda w: wput(w, 7, 1, 0, b"x", b"\xed\xa0\x80"),  # a surrogate
                lambda w: wput(w, 7, 1, 0, b"x", b"ok\xe2\x82"),  # a cut sequence
                lambda w: wget(w, 7, 1, 0, 4, b"\x80")):  # a get's, not UTF-8
        ok = cut_after(host, port, key, meta, bad) and ok
    return ok


def rx_queue_of(lport, rport):
    """Bytes waiting in the receive queue of the 127.0.0.1 socket LPORT <- RPORT, or -1."""
    want = f"0100007F:{lport:04X} 0100007F:{rport:04X}"
    with open("/proc/net/tcp") as f:
        for line in f:
            fields = line.split()
            if " ".join(fields[1:3]) == want:
                return int(fields[4].split(":")[1], 16)
    return -1


def mode_earlyfile(host, port, keyfile, metafile, pid):
    import signal
    key = read_key(keyfile)
    m = read_meta(metafile)
    sock, _, node, epoch = member(host, port, key)
    xfer = 301
    proof = claim_proof(key, m["node"], m["epoch"], node, epoch, m["op"], xfer,
                        bytes.fromhex(m["token"]))
    payload = bytes(i % 251 for i in range(16384))
    raw = (bin_claim(m, proof, xfer, kind=KIND_WRITE, meta_kind=KIND_WRITABLE) +
           HDR.pack(DATA, FROM_ACTIVE, 0, len(payload), xfer, 0) + payload)
    sock.sendall(frame(PING))
    if expect(sock, PONG) is None:  # (the daemon has read our AUTH and all before it)
        print("no PONG after the handshake", file=sys.stderr)
        return False
    os.kill(int(pid), signal.SIGSTOP)
    try:
        sock.sendall(raw)
        # Wait (not for a time: for the state) until every byte is in the daemon's socket.
        lport = sock.getsockname()[1]
        for _ in range(1000):
            if rx_queue_of(int(port), lport) >= len(raw):
                break
            threading.Event().wait(0.01)
        else:
            print("the bytes never all reached the daemon's socket", file=sys.stderr)
            return False
    finally:
        os.kill(int(pid), signal.SIGCONT)
    sock.settimeout(20)
    try:
        while sock.recv(65536):  # (a CLAIM_OK may come first) until the daemon cuts the set
            pass
    except ConnectionResetError:
        pass
    except socket.timeout:
        print("the set was not cut after early file DATA", file=sys.stderr)
        return False
    return True


def mode_readable_owner(path, metafile, size):
    """A readable of @size bytes i % 256; once told its end, the client writes LEAKED!! over
    the buffer (it is the client's again) and prints the end; then keeps the region 10 s."""
    import time
    size = int(size)
    cl = RawClient(path, timeout=60)
    fd = sealed_memfd("src", size, pattern(size))
    cl.call(1, "hello", {"version": 1, "client": "readable_owner"})
    region = cl.call(2, "region.register", {}, [fd])["region"]
    r = cl.call(3, "op.readable", {"descs": [{"region": region, "offset": 0, "length": size}],
                                   "timeout_ms": 30000})
    write_secret(metafile, r["metadata"])
    cl.wait_ends([r["op"]])
    os.pwrite(fd, b"LEAKED!!" * (size // 8), 0)
    end = cl.ends[r["op"]]
    print(f"readable_owner: {end['state']} {end.get('cause', '')}", flush=True)
    time.sleep(10)
    return True


def mode_earlydone(host, port, keyfile, metafile):
    """A reader that says DONE after its first MiB, stops reading for a second, then reads on:
    the owner's frames must all come, each byte as it was, none after the client's end."""
    import time
    key = read_key(keyfile)
    m = read_meta(metafile)
    total = sum(m["lengths"])
    sock, _, node, epoch = member(host, port, key)
    xfer = 401
    proof = claim_proof(key, m["node"], m["epoch"], node, epoch, m["op"], xfer,
                        bytes.fromhex(m["token"]))
    sock.sendall(bin_claim(m, proof, xfer))
    got = bytearray(total)
    n = 0
    said_done = False
    want = pattern(total)
    until = time.monotonic() + 20  # (keepalive PINGs come for ever: the wait has its own end)
    while n < total and time.monotonic() < until:
        f = recv_any(sock)
        if f is None:
            break
        if f[0] == PING:
            sock.sendall(frame(PONG))
        if f[0] != DATA:
            continue
        if f[2] != xfer or f[3] + len(f[4]) > total:
            print(f"earlydone: DATA of transfer {f[2]} at {f[3]}+{len(f[4])}", file=sys.stderr)
            return False
        got[f[3]:f[3] + len(f[4])] = f[4]
        n += len(f[4])
        if n >= (1 << 20) and not said_done:
            said_done = True
            sock.sendall(bin_frame(DONE, struct.pack("<Q", total), xfer) + frame(PING))
            time.sleep(1)  # (the owner's frames fill the sockets; told COMPLETE, its client
            sock.sendall(frame(PING))  # would write LEAKED!! into what they still read)
    bad = sum(1 for i in range(0, total, 4096) if got[i:i + 4096] != want[i:i + 4096])
    if n < total or bad:
        print(f"earlydone: {n} of {total} bytes came, {bad} pages of 4 KiB differ "
              f"({got.count(b'LEAKED!!')} LEAKED!!)", file=sys.stderr)
        return False
    return True


def mode_owner(path, metafile, access="read", size="65536"):
    import time
    cl = RawClient(path)
    fd = sealed_memfd("win", int(size), pattern(int(size)))
    cl.call(1, "hello", {"version": 1, "client": "owner"})
    region = cl.call(2, "region.register", {}, [fd])["region"]
    write_secret(metafile, cl.call(3, "window.create", {"region": region,
                                                        "access": access})["metadata"])
    while True:
        time.sleep(60)


def shut_both(*socks):
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def relay_pairs(lport, host, port):
    """Yields (client, server) for each connection to 127.0.0.1:@lport, until 30 s pass without
    one: the accepted socket and a new one to @host:@port."""
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", int(lport)))
    lsock.listen(8)
    lsock.settimeout(30)
    while True:
        try:
            client, _ = lsock.accept()
        except socket.timeout:
            return
        yield client, socket.create_connection((host, int(port)))


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
    shut_both(src, dst)


def mode_relay(lport, host, port, logpath):
    lock = threading.Lock()
    with open(logpath, "wb") as log:
        threads = []
        for client, server in relay_pairs(lport, host, port):
            for a, b in ((client, server), (server, client)):
                t = threading.Thread(target=pump, args=(a, b, log, lock), daemon=True)
                t.start()
                threads.append(t)
            log.flush()
    return True


def pump_frames(src, dst, tamper):
    """Forwards whole frames from @src to @dst: what @tamper(header fields, body) returns (the
    bytes to send in the frame's place)."""
    try:
        while True:
            hdr = recv_exact(src, HDR.size)
            if hdr is None:
                break
            fields = list(HDR.unpack(hdr))
            body = recv_exact(src, fields[3]) if fields[3] else b""
            if body is None:
                break
            dst.sendall(tamper(fields, body))
    except OSError:
        pass
    shut_both(src, dst)


def mode_wack_relay(lport, host, port):
    lock = threading.Lock()
    done = []

    def inflate(fields, body):  # type, flags, credits, length, xfer, offset
        with lock:
            if fields[0] == WACK and not done:
                done.append(fields[5])
                fields[5] += 5
        return HDR.pack(*fields) + body

    for client, server in relay_pairs(lport, host, port):
        threading.Thread(target=pump, args=(client, server, open(os.devnull, "wb"), lock),
                         daemon=True).start()
        threading.Thread(target=pump_frames, args=(server, client, inflate), daemon=True).start()
    return True


def mode_claimok_relay(lport, host, port, json_only=None):
    def tamper(fields, body):
        if fields[0] == HELLO and json_only:
            hello = json.loads(body)
            hello.pop("binary_pairing", None)
            body = json.dumps(hello, separators=(",", ":")).encode()
            fields[3] = len(body)
        out = HDR.pack(*fields) + body
        if fields[0] == CLAIM_OK:
            fields[2] = 0  # (the copy returns no credits)
            out += HDR.pack(*fields) + body
        return out

    for client, server in relay_pairs(lport, host, port):
        for a, b in ((client, server), (server, client)):
            threading.Thread(target=pump_frames, args=(a, b, tamper), daemon=True).start()
    return True


def pattern(size):
    """@size bytes whose byte i is i % 256."""
    return (bytes(range(256)) * (size // 256 + 1))[:size]


def sealed_memfd(name, size, data=b""):
    """A memfd of @size bytes starting with @data, sealed against shrinking and growing: what
    the daemon registers."""
    import fcntl
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if data:
        os.pwrite(fd, data, 0)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd


def write_secret(path, text):
    """@text and a newline into a new file @path readable by its owner only (metadata)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, text.encode() + b"\n")
    os.close(fd)


class RawClient:
    """A control-socket client by hand: call() sends a request (its fds by SCM_RIGHTS) and
    returns its result; the ends op.changed reports meanwhile are kept in .ends (op -> params)."""

    def __init__(self, path, timeout=30):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(path)
        self.sock.settimeout(timeout)
        self.ends = {}

    def take(self, msg):
        if msg.get("method") == "op.changed" and msg["params"]["state"] in (
                "COMPLETE", "CANCELLED", "ERRORED"):
            self.ends[msg["params"]["op"]] = msg["params"]

    def call(self, i, method, params, fds=()):
        import array
        msg = json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}).encode()
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        self.sock.sendmsg([msg], anc)
        while True:
            reply = json.loads(self.sock.recv(65536))
            if reply.get("id") == i:
                if "result" not in reply:
                    raise OSError(f"{method}: {reply}")
                return reply["result"]
            self.take(reply)

    def wait_ends(self, ops):
        """Reads until every op of @ops has ended."""
        while not all(op in self.ends for op in ops):
            self.take(json.loads(self.sock.recv(65536)))


def mode_wack_opener(path, metafile):
    cl = RawClient(path)
    call, ends = cl.call, cl.ends

    fd = sealed_memfd("src", 65536, b"x" * 65536)
    call(1, "hello", {"version": 1, "client": "wack_opener"})
    region = call(2, "region.register", {}, [fd])["region"]
    meta = open(metafile).read().strip()
    handle = call(3, "window.open", {"metadata": meta})["window"]
    # Both puts in one op.batch: their WPUTs leave in one loop turn, before the inflated WACK of
    # the first can fail the set (posted one by one, the second could be refused instead).
    puts = [["put", handle, 4096 * i, [[region, 0, 4096]]] for i in range(2)]
    ops = [r["op"] for r in call(4, "op.batch", {"ops": puts})["results"]]
    cl.wait_ends(ops)
    good = all(ends[op]["state"] == "ERRORED" and "acknowledged" in ends[op].get("cause", "")
               for op in ops)
    if not good:
        print(f"wack_opener: want both puts ERRORED naming the WACK rule, got {ends}",
              file=sys.stderr)
    else:
        print(f"wack_opener: {ends[ops[0]]['errno']}: {ends[ops[0]]['cause']}")
    return good


def mode_stall_relay(lport, host, port, logpath, inject=None):
    import time
    lock = threading.Lock()
    stall = []  # when the stall ends, once begun
    log = open(logpath, "wb")

    def opener_to_owner(src, dst, back, back_lock):
        try:
            while True:
                with lock:
                    until = stall[0] if stall else 0
                if time.monotonic() < until:
                    time.sleep(until - time.monotonic())
                hdr = recv_exact(src, HDR.size)
                body = recv_exact(src, HDR.unpack(hdr)[3]) if hdr else None
                if body is None:
                    break
                with lock:
                    log.write(hdr + body)
                    log.flush()
                    first = HDR.unpack(hdr)[0] == WPUT and not stall
                    if first:
                        stall.append(time.monotonic() + 3)
                if first and inject:  # (the owner's word that the put is all in)
                    with back_lock:
                        back.sendall(frame(DONE_ACK, {}, 0, HDR.unpack(hdr)[4]))
                dst.sendall(hdr + body)
        except OSError:
            pass
        shut_both(src, dst)

    def owner_to_opener(src, dst, dst_lock):
        try:
            while True:
                hdr = recv_exact(src, HDR.size)
                body = recv_exact(src, HDR.unpack(hdr)[3]) if hdr else None
                if body is None:
                    break
                with dst_lock:
                    dst.sendall(hdr + body)
        except OSError:
            pass
        shut_both(src, dst)

    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # (the opener's frames queue
    lsock.bind(("127.0.0.1", int(lport)))                          # at the opener, not here)
    lsock.listen(8)
    lsock.settimeout(30)
    while True:
        try:
            client, _ = lsock.accept()
        except socket.timeout:
            return True
        server = socket.create_connection((host, int(port)))
        back_lock = threading.Lock()
        threading.Thread(target=opener_to_owner, args=(client, server, client, back_lock),
                         daemon=True).start()
        threading.Thread(target=owner_to_opener, args=(server, client, back_lock),
                         daemon=True).start()


def mode_stall_putter(path, metafile):
    import time
    size = 64 << 20
    cl = RawClient(path)
    call, ends = cl.call, cl.ends

    fd = sealed_memfd("src", size, b"a" * size)
    call(1, "hello", {"version": 1, "client": "stall_putter"})
    region = call(2, "region.register", {}, [fd])["region"]
    handle = call(3, "window.open", {"metadata": open(metafile).read().strip()})["window"]
    t0 = time.monotonic()
    op = call(4, "op.put", {"window": handle, "offset": 0,
                            "descs": [{"region": region, "offset": 0, "length": size}],
                            "timeout_ms": 500})["op"]
    cl.wait_ends([op])
    took = time.monotonic() - t0
    os.pwrite(fd, b"LEAKED!!" * (size // 8), 0)  # (told the end: the buffer is the client's)
    print(f"stall_putter: the put ended {ends[op]['state']} after {took:.1f} s "
          f"({ends[op].get('cause', '')})")
    time.sleep(5)  # (the relay's stall ends: what the opener still had queued goes)
    return ends[op]["state"] != "COMPLETE"


def mode_wopen_mute_relay(lport, host, port):
    def mute(fields, body):  # type, flags, credits, length, xfer, offset
        return b"" if fields[0] in (WOPEN_OK, WOPEN_ERR) else HDR.pack(*fields) + body

    for client, server in relay_pairs(lport, host, port):
        threading.Thread(target=pump, args=(client, server, open(os.devnull, "wb"),
                                            threading.Lock()), daemon=True).start()
        threading.Thread(target=pump_frames, args=(server, client, mute), daemon=True).start()
    return True


def client_open(path, name, timeout=20):
    """A client of the daemon at @path, said hello as @name: (socket, call(i, method, params)),
    call returning the whole reply (result or error)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.connect(path)
    sock.settimeout(timeout)

    def call(i, method, params):
        sock.send(json.dumps({"jsonrpc": "2.0", "id": i, "method": method,
                              "params": params}).encode())
        while True:
            reply = json.loads(sock.recv(65536))
            if reply.get("id") == i:
                return reply

    call(1, "hello", {"version": 1, "client": name})
    return sock, call


def mode_mute_opener(path, metafile):
    import time
    meta = open(metafile).read().strip()
    for i in range(3):  # clients gone while their open waits: their handles must not stay
        sock, _ = client_open(path, f"leaver{i}")
        sock.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "window.open",
                              "params": {"metadata": meta}}).encode())
        time.sleep(0.2)
        sock.close()
    sock, call = client_open(path, "waiter")
    t0 = time.monotonic()
    try:
        reply = call(2, "window.open", {"metadata": meta})
    except socket.timeout:
        print("mute_opener: window.open had no answer in 20 s", file=sys.stderr)
        return False
    took = time.monotonic() - t0
    err = reply.get("error", {})
    good = (err.get("data", {}).get("errno") == "ETIMEDOUT" and
            "keepalive_timeout_ms" in err.get("message", ""))
    print(f"mute_opener: after {took:.1f} s: {json.dumps(reply)}",
          file=sys.stdout if good else sys.stderr)
    return good


def local_writables(path, n, per_conn=4000):
    """@n writables of one byte each, made by local clients on @path (per_conn a connection,
    under the per-connection limit): (their metadata, the connections, which keep them)."""
    import array
    fd = sealed_memfd("xferidx", n)
    metas, socks = [], []
    for base in range(0, n, per_conn):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.connect(path)
        socks.append(sock)
        sock.sendmsg([json.dumps({"jsonrpc": "2.0", "id": 0, "method": "hello",
                                  "params": {"version": 1, "client": "xferidx"}}).encode()])
        sock.recv(65536)
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
        sock.sendmsg([json.dumps({"jsonrpc": "2.0", "id": 1, "method": "region.register",
                                  "params": {}}).encode()], anc)
        region = json.loads(sock.recv(65536))["result"]["region"]
        count = min(per_conn, n - base)
        for start in range(0, count, 64):  # pipelined, under the socket's buffer
            burst = min(64, count - start)
            for i in range(burst):
                off = base + start + i
                sock.send(json.dumps({"jsonrpc": "2.0", "id": 2 + off, "method": "op.writable",
                                      "params": {"descs": [{"region": region, "offset": off,
                                                            "length": 1}]}}).encode())
            for _ in range(burst):
                rep = json.loads(sock.recv(65536))
                while "id" not in rep:  # (a notification)
                    rep = json.loads(sock.recv(65536))
                metas.append(rep["result"]["metadata"])
    os.close(fd)
    return metas, socks


def meta_of(text):
    import base64
    m = text[len("xfer1."):]
    return json.loads(base64.urlsafe_b64decode(m + "=" * (-len(m) % 4)))


def held_claims(sock, key, node, epoch, metas, first_xfer):
    """Claims every writable of @metas (transfers @first_xfer on) and sends no DATA: each
    transfer is held open on the owner. Whether each was accepted (CLAIM_OK)."""
    ok = True
    for start in range(0, len(metas), 256):
        burst = metas[start:start + 256]
        out = b""
        for i, text in enumerate(burst):
            m, xfer = meta_of(text), first_xfer + start + i
            proof = claim_proof(key, m["node"], m["epoch"], node, epoch, m["op"], xfer,
                                bytes.fromhex(m["token"]))
            out += bin_claim(m, proof, xfer, kind=KIND_WRITE, meta_kind=KIND_WRITABLE)
        sock.sendall(out)
        for _ in burst:
            ok = expect(sock, CLAIM_OK) is not None and ok
    return ok


def time_refused_claims(sock, meta, first_xfer, count=4096, burst=128, rounds=3):
    """Seconds for @count CLAIMs with a wrong proof under fresh transfer ids, each answered
    CLAIM_ERR (the fastest of @rounds): each one is looked up among the set's transfers."""
    import time
    best, xfer = None, first_xfer
    for _ in range(rounds):
        t0 = time.monotonic()
        for _ in range(count // burst):
            out = b"".join(bin_claim(meta, b"\0" * 32, xfer + i, kind=KIND_WRITE,
                                     meta_kind=KIND_WRITABLE) for i in range(burst))
            xfer += burst
            sock.sendall(out)
            for _ in range(burst):
                if expect(sock, CLAIM_ERR, "EACCES") is None:
                    return None
        t = time.monotonic() - t0
        best = t if best is None or t < best else best
    return best


def mode_xferidx(path, host, port, keyfile, n):
    key = read_key(keyfile)
    metas, socks = local_writables(path, int(n))
    sock, hello, node, epoch = member(host, port, key)
    ok = held_claims(sock, key, node, epoch, metas[:1], 1)
    fast = ok and time_refused_claims(sock, meta_of(metas[0]), 1 << 40)
    ok = ok and fast is not None and held_claims(sock, key, node, epoch, metas[1:], 2)
    slow = ok and time_refused_claims(sock, meta_of(metas[0]), 1 << 41)
    if not ok or fast is None or slow is None:
        print("xferidx: a claim was not answered as expected", file=sys.stderr)
        return False
    print(f"{fast * 1e6:.0f} {slow * 1e6:.0f}")
    return True


def main(argv):
    modes = {"noauth": mode_noauth, "auth": mode_auth, "wrongkey": mode_wrongkey,
             "replay": mode_replay, "pose": mode_pose, "relay": mode_relay,
             "windows": mode_windows, "owner": mode_owner, "wframes": mode_wframes,
             "wframes_cut": mode_wframes_cut, "wack_relay": mode_wack_relay,
             "claimok_relay": mode_claimok_relay, "wack_opener": mode_wack_opener,
             "binpair": mode_binpair,
             "earlyfile": mode_earlyfile, "earlydone": mode_earlydone,
             "readable_owner": mode_readable_owner, "wtrickle": mode_wtrickle, "wcycle": mode_wcycle,
             "wopen_mute_relay": mode_wopen_mute_relay, "stall_relay": mode_stall_relay,
             "stall_putter": mode_stall_putter, "mute_opener": mode_mute_opener,
             "xferidx": mode_xferidx}
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
