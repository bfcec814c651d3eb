#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Peer authentication with the cluster key (PROTOCOL.md §10.2), tried as an attacker would:
# daemons on 127.0.0.1 ports, a hostile peer speaking the handshake by hand
# (tests/hostile_peer.py: no nonce, a wrong key, a replayed AUTH, posing as a known node) and a
# relay in the middle that records the wire. Each case checks that the daemon refuses, names
# why in its log, keeps serving, and gives nothing away: transfers still move the right bytes,
# the token never crosses the wire, fds return to their baseline.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=/usr/bin/python3
# shellcheck source=tests/lib.sh
. tests/lib.sh

require_built
loopback_setup auth

mkkey "$D/key"
mkkey "$D/other.key"

start() { loopback_start "$@"; }

pid_of() { eval "echo \$PID_$1"; }
nfds() { ls "/proc/$(pid_of "$1")/fd" 2>/dev/null | wc -l; }

# refused_start WHAT PATTERN ARGS...: xferd with ARGS exits 1 and its log says PATTERN.
refused_start()
{
	local what=$1 pattern=$2 rc=0
	shift 2
	timeout 10 "$BUILD/xferd" --socket "$D/refused.sock" --foreground "$@" 2>"$D/refused.log" ||
		rc=$?
	if [ "$rc" -eq 1 ] && grep -q "$pattern" "$D/refused.log"; then
		ok "refused to start: $what"
	else
		fail "refused to start: $what" "exit $rc, log: $(tr '\n' '|' <"$D/refused.log")"
	fi
}

# --- starting
chmod 644 "$D/other.key"
refused_start "key file readable by others" "readable by its owner only" \
	--listen 127.0.0.1:$((BASE + 9)) --peer-key "$D/other.key"
chmod 600 "$D/other.key"
mkkey "$D/short.key" 16
refused_start "key shorter than 32 bytes" "at least 32 (at most 64) random bytes" \
	--listen 127.0.0.1:$((BASE + 9)) --peer-key "$D/short.key"
refused_start "listening without a key" "needs the cluster key" --listen 127.0.0.1:$((BASE + 9))

start A $((BASE + 1)) --peer-key "$D/key" || abort_setup "daemon A did not start: $(tail -n 3 "$D/A.log")"
start B $((BASE + 2)) --peer-key "$D/key" || abort_setup "daemon B did not start"
if start I $((BASE + 3)) --insecure-peers && grep -q "not authenticated" "$D/I.log"; then
	ok "--insecure-peers starts without a key, and says what it exposes"
else
	fail "--insecure-peers starts without a key" "$(tail -n 2 "$D/I.log")"
fi
if loopback_transfer A B t1; then
	ok "A and B (same key) move 1 MiB, bytes identical"
else
	fail "A and B (same key) move 1 MiB" "$(cat "$D/t1.err")"
fi
FDS_A=$(nfds A) # with B's set up

# --- the hostile peer against A
PA=$((BASE + 1))
if $PY tests/hostile_peer.py auth 127.0.0.1 "$PA" "$D/key"; then
	ok "a peer with the key completes the handshake, and A's own proof verifies"
else
	fail "a peer with the key completes the handshake" "see above"
fi
if $PY tests/hostile_peer.py noauth 127.0.0.1 "$PA" &&
	grep -q "offers no authentication" "$D/A.log"; then
	ok "a HELLO without a challenge is cut off, and the log says why"
else
	fail "a HELLO without a challenge is cut off" "$(tail -n 2 "$D/A.log")"
fi
if $PY tests/hostile_peer.py wrongkey 127.0.0.1 "$PA" &&
	grep -q "failed authentication" "$D/A.log"; then
	ok "a peer with another key is cut off before any message, and the log says why"
else
	fail "a peer with another key is cut off" "$(tail -n 2 "$D/A.log")"
fi
if $PY tests/hostile_peer.py replay 127.0.0.1 "$PA" "$D/key"; then
	ok "an AUTH replayed from an earlier connection is cut off (the challenge is new)"
else
	fail "a replayed AUTH is cut off" "see above"
fi

# --- a member node misusing the window frames (PROTOCOL.md §10.6)
$PY tests/hostile_peer.py owner "$D/A.sock" "$D/w.meta" &
OWNER=$!
for _ in $(seq 100); do [ -s "$D/w.meta" ] && break; sleep 0.05; done
if $PY tests/hostile_peer.py windows 127.0.0.1 "$PA" "$D/key" "$D/w.meta" &&
	kill -0 "$(pid_of A)" 2>/dev/null; then
	ok "window frames: refusals (access, range, proof, stale, unopened) answered; misuse cut off"
else
	fail "window frames from a hostile member" "$(tail -n 3 "$D/A.log")"
fi
kill "$OWNER" 2>/dev/null
wait "$OWNER" 2>/dev/null

# --- one-sided window frames (PROTOCOL.md §10.7) from a hostile member, on a read-write window
# whose owner client never reads
$PY tests/hostile_peer.py owner "$D/A.sock" "$D/rw.meta" readwrite &
OWNER=$!
for _ in $(seq 100); do [ -s "$D/rw.meta" ] && break; sleep 0.05; done
if $PY tests/hostile_peer.py wframes_cut 127.0.0.1 "$PA" "$D/key" "$D/rw.meta" &&
	kill -0 "$(pid_of A)" 2>/dev/null; then
	ok "window frames: a forged window id, bad lengths, flags or tags cut the set"
else
	fail "malformed window frames cut the set" "$(tail -n 3 "$D/A.log")"
fi
if $PY tests/hostile_peer.py wframes 127.0.0.1 "$PA" "$D/key" "$D/rw.meta" "$(pid_of A)" &&
	kill -0 "$(pid_of A)" 2>/dev/null; then
	ok "window frames: out-of-range puts and gets refused before a byte lands, unopened handles\
 dropped, a get flood bounded, a notify flood ignoring its credit bounded (refused EDQUOT) with\
 the owner kept"
else
	fail "one-sided window frames from a hostile member" "$(tail -n 3 "$D/A.log")"
fi
kill "$OWNER" 2>/dev/null
wait "$OWNER" 2>/dev/null

# --- a member that closes each handle with notifications due and opens another, on a window
# whose owner client never reads: the closed openers' notifications wait (§10.9), and each new
# handle brought another opener's bound of them; the openers a window keeps, closed ones with
# notifications due included, are bounded (XD_WINDOW_MAX_OPENERS)
$PY tests/hostile_peer.py owner "$D/A.sock" "$D/cyc.meta" readwrite &
OWNER=$!
for _ in $(seq 100); do [ -s "$D/cyc.meta" ] && break; sleep 0.05; done
if $PY tests/hostile_peer.py wcycle 127.0.0.1 "$PA" "$D/key" "$D/cyc.meta" "$(pid_of A)" \
	2>"$D/cyc.err" && kill -0 "$(pid_of A)" 2>/dev/null; then
	ok "handles closed with notifications due and opened again: refused EDQUOT past the\
 openers a window takes, the set kept ($(grep '^#' "$D/cyc.err" | cut -c 3-))"
else
	fail "handles closed with notifications due and opened again" \
		"$(cat "$D/cyc.err"); $(tail -n 3 "$D/A.log")"
fi
kill "$OWNER" 2>/dev/null
wait "$OWNER" 2>/dev/null

# --- a WPUT's payload in pieces with pauses, above and below the receiver's SO_RCVLOWAT mark
# (tcp.c pconn_lowat()), into a 1 MiB window: bytes checked, a trickle kept, a stall cut
$PY tests/hostile_peer.py owner "$D/A.sock" "$D/big.meta" readwrite 1048576 &
OWNER=$!
for _ in $(seq 100); do [ -s "$D/big.meta" ] && break; sleep 0.05; done
if $PY tests/hostile_peer.py wtrickle 127.0.0.1 "$PA" "$D/key" "$D/big.meta" &&
	kill -0 "$(pid_of A)" 2>/dev/null; then
	ok "a window put in pieces around the read wake-up mark lands whole; a trickle below the\
 mark keeps the set past keepalive_timeout_ms, a stall below it is cut as silent"
else
	fail "a window put in pieces around the read wake-up mark" "$(tail -n 3 "$D/A.log")"
fi
kill "$OWNER" 2>/dev/null
wait "$OWNER" 2>/dev/null

# --- the binary pairing frames (PROTOCOL.md §10.8) from a hostile member: three readables of
# 64 KiB whose bytes are i % 256
$PY -c 'import sys; sys.stdout.buffer.write(bytes(i % 256 for i in range(65536)))' >"$D/bp.src"
BP=()
for i in 1 2 3; do
	"$BUILD/xferctl" --socket "$D/A.sock" readable --meta-file "$D/bp$i.meta" "$D/bp.src" \
		>/dev/null 2>&1 &
	BP+=($!)
done
for i in 1 2 3; do
	for _ in $(seq 100); do [ -s "$D/bp$i.meta" ] && break; sleep 0.05; done
done
if $PY tests/hostile_peer.py binpair 127.0.0.1 "$PA" "$D/key" "$D/bp1.meta" "$D/bp2.meta" \
	"$D/bp3.meta" && kill -0 "$(pid_of A)" 2>/dev/null && wait "${BP[0]}" && wait "${BP[1]}" &&
	wait "${BP[2]}"; then
	ok "binary pairing frames: refusals answered, JSON to a peer that did not offer them, binary to one that did, a read answered by its DATA alone to one that offered read_ok_in_data, bytes right; every malformed layout cuts the set"
else
	fail "binary pairing frames from a hostile member" "$(tail -n 3 "$D/A.log")"
fi
kill "${BP[@]}" 2>/dev/null
wait "${BP[@]}" 2>/dev/null

# --- file DATA sent with its CLAIM, before CLAIM_OK, by a hostile member: read ahead together
# with the CLAIM (the file is no other transfer's), it must be refused, never spliced into
# the file from the read-ahead buffer (tcp.c, ra_allowed())
"$BUILD/xferctl" --socket "$D/A.sock" writable --meta-file "$D/ef.meta" 65536 "$D/ef.out" \
	>/dev/null 2>&1 &
EF=$!
for _ in $(seq 100); do [ -s "$D/ef.meta" ] && break; sleep 0.05; done
EPROTO_DATA="protocol error on a connection (message type DATA)"
N0=$(grep -c "$EPROTO_DATA" "$D/A.log")
if $PY tests/hostile_peer.py earlyfile 127.0.0.1 "$PA" "$D/key" "$D/ef.meta" "$(pid_of A)" &&
	kill -0 "$(pid_of A)" 2>/dev/null && [ "$(grep -c "$EPROTO_DATA" "$D/A.log")" -gt "$N0" ]; then
	ok "file DATA sent with its CLAIM (read ahead with it) is refused: the set cut, the daemon serving"
else
	fail "file DATA sent with its CLAIM is refused" "$(tail -n 3 "$D/A.log")"
fi
kill "$EF" 2>/dev/null
wait "$EF" 2>/dev/null

# --- a reader's DONE after its first MiB of 64, then a second without reading (§10.3): the
# owner's frames still read its client's buffer, so the readable ends only once they are out
# (ended at the DONE, it was COMPLETE with 8 of 64 MiB sent, the rest never came, and its
# client, told so, was free to write over a buffer that a frame under way still read)
$PY tests/hostile_peer.py readable_owner "$D/A.sock" "$D/ed.meta" $((64 << 20)) >"$D/ed.out" 2>&1 &
ED=$!
for _ in $(seq 100); do [ -s "$D/ed.meta" ] && break; sleep 0.05; done
if timeout 60 $PY tests/hostile_peer.py earlydone 127.0.0.1 "$PA" "$D/key" "$D/ed.meta" &&
	kill -0 "$(pid_of A)" 2>/dev/null; then
	ok "a reader's DONE before it took every byte: the readable ends once its frames are out, every byte as it was"
else
	fail "a reader's early DONE" "owner: $(lastline "$D/ed.out"); $(tail -n 2 "$D/A.log" | tr '\n' '|')"
fi
kill "$ED" 2>/dev/null
wait "$ED" 2>/dev/null

# --- someone posing as B
# A's one peer set so far is B's.
read -r NODE_B EPOCH_B < <("$BUILD/xferctl" --socket "$D/A.sock" --json peers |
	$PY -c 'import json,sys; p = json.load(sys.stdin)["peers"][0]; print(p["node"], p["epoch"])')
if $PY tests/hostile_peer.py pose 127.0.0.1 "$PA" "$NODE_B"; then
	ok "a HELLO posing as node B with a new epoch is cut off"
else
	fail "a HELLO posing as node B is cut off" "see above"
fi
PEERS=$("$BUILD/xferctl" --socket "$D/A.sock" --json peers)
if $PY -c '
import json, sys
peers = json.loads(sys.argv[1])["peers"]
b = [p for p in peers if p["node"] == sys.argv[2]]
sys.exit(0 if len(b) == 1 and str(b[0]["epoch"]) == sys.argv[3] and b[0]["authenticated"]
         and b[0]["state"] == "connected" else 1)' "$PEERS" "$NODE_B" "$EPOCH_B" &&
	loopback_transfer A B t2; then
	ok "B's set on A survives the impostor (same epoch, authenticated) and still moves bytes"
else
	fail "B's set on A survives the impostor" "peers: $PEERS; $(cat "$D/t2.err" 2>/dev/null)"
fi

sleep 0.5
FDS_A2=$(nfds A)
if [ "$FDS_A2" -le "$FDS_A" ]; then
	ok "A's fds back to their baseline after the hostile connections ($FDS_A2 <= $FDS_A)"
else
	fail "A's fds back to their baseline" "$FDS_A before, $FDS_A2 after"
fi

# --- wrong or no key on the other side
start K $((BASE + 4)) --peer-key "$D/other.key" || abort_setup "daemon K did not start"
if ! loopback_transfer A K t3 && grep -q "did not authenticate" "$D/t3.err"; then
	ok "a reader with another key is refused, and told why: $(lastline "$D/t3.err")"
else
	fail "a reader with another key is refused" "$(cat "$D/t3.err")"
fi
if ! loopback_transfer A I t4 && grep -q "cluster key" "$D/t4.err"; then
	ok "a reader without a key is refused by a keyed owner: $(lastline "$D/t4.err")"
else
	fail "a reader without a key is refused by a keyed owner" "$(cat "$D/t4.err")"
fi

# --- a relay in the middle: it can pass bytes along, but the token never crosses the wire
PR=$((BASE + 5))
start M $((BASE + 6)) --peer-key "$D/key" --advertise "127.0.0.1:$PR" ||
	abort_setup "daemon M did not start"
$PY tests/hostile_peer.py relay "$PR" 127.0.0.1 $((BASE + 6)) "$D/wire" &
PIDS+=($!)
sleep 0.3
if loopback_transfer M B t5; then
	TOKEN=$($PY -c '
import base64, json, sys
m = sys.argv[1].strip().split(".", 1)[1]
print(json.loads(base64.urlsafe_b64decode(m + "=" * (-len(m) % 4)))["token"])' "$(head -n 1 "$D/t5.meta")")
	# Neither as hex (a CLAIM's JSON) nor as raw bytes (the exit status is whether found).
	if [ -s "$D/wire" ] && ! grep -qi "$TOKEN" "$D/wire" &&
		$PY -c 'import sys; sys.exit(bytes.fromhex(sys.argv[1]) in open(sys.argv[2], "rb").read())' \
			"$TOKEN" "$D/wire"; then
		ok "through a recording relay: bytes identical, the token ($TOKEN) not on the wire"
	else
		fail "the token does not cross the wire" "found $TOKEN in $(wc -c <"$D/wire") recorded bytes"
	fi
else
	fail "a transfer through a relay" "$(cat "$D/t5.err")"
fi

# --- a rogue owner: a relay that raises the first WACK's count by 5, acknowledging puts that
# were never sent (PROTOCOL.md §10.7): the opener must not complete them on its word
PW=$((BASE + 7))
start W $((BASE + 8)) --peer-key "$D/key" --advertise "127.0.0.1:$PW" ||
	abort_setup "daemon W did not start"
$PY tests/hostile_peer.py wack_relay "$PW" 127.0.0.1 $((BASE + 8)) &
PIDS+=($!)
$PY tests/hostile_peer.py owner "$D/W.sock" "$D/wack.meta" readwrite &
OWNER=$!
for _ in $(seq 100); do
	[ -s "$D/wack.meta" ] && [ -n "$(ss -Hltn "sport = :$PW")" ] && break
	sleep 0.05
done
if timeout 40 $PY tests/hostile_peer.py wack_opener "$D/B.sock" "$D/wack.meta" >"$D/wack.out" 2>&1 &&
	kill -0 "$(pid_of B)" 2>/dev/null && grep -q "the owner acknowledged" "$D/B.log" &&
	loopback_transfer A B t6; then
	ok "a WACK acknowledging puts never sent: the opener's puts end ERRORED, none COMPLETE,\
 and B keeps serving ($(cat "$D/wack.out"))"
else
	fail "a WACK acknowledging puts never sent" "$(cat "$D/wack.out"); $(tail -n 3 "$D/B.log")"
fi
kill "$OWNER" 2>/dev/null
wait "$OWNER" 2>/dev/null

# --- a rogue owner: a relay that passes each CLAIM_OK twice, back to back. A transfer has one
# (PROTOCOL.md §10.3): the claimer fails the set on the second, never takes it (one-sided, its
# ranges replaced the first ones under the requests in flight, whose memory was lost). Binary
# (§10.8) between these daemons; in JSON, as with an older daemon, when the relay also takes
# binary_pairing out of each HELLO.
# claimok_case NAME PORT [json]: daemon NAME on PORT + 1 behind the relay on PORT; a 1 MiB write
# from B into a writable on NAME must end ERRORED, naming the rule, and B serve on.
claimok_case()
{
	local name=$1 port=$2 how=${3:-binary} wp
	start "$name" $((port + 1)) --peer-key "$D/key" --advertise "127.0.0.1:$port" ||
		abort_setup "daemon $name did not start"
	$PY tests/hostile_peer.py claimok_relay "$port" 127.0.0.1 $((port + 1)) ${3:+"$3"} &
	PIDS+=($!)
	head -c $((1 << 20)) /dev/urandom >"$D/$name.src"
	"$BUILD/xferctl" --socket "$D/$name.sock" writable $((1 << 20)) "$D/$name.dst" \
		>"$D/$name.meta" 2>"$D/$name.oerr" &
	wp=$!
	for _ in $(seq 100); do
		[ -s "$D/$name.meta" ] && [ -n "$(ss -Hltn "sport = :$port")" ] && break
		sleep 0.05
	done
	if ! timeout 20 "$BUILD/xferctl" --socket "$D/B.sock" write "@$D/$name.meta" \
		"$D/$name.src" 2>"$D/$name.err" && grep -q "a second CLAIM_OK" "$D/$name.err" &&
		kill -0 "$(pid_of B)" 2>/dev/null && loopback_transfer A B "t$name"; then
		ok "a second CLAIM_OK ($how) for one transfer fails the claimer's set, and B keeps\
 serving: $(cat "$D/$name.err")"
	else
		fail "a second CLAIM_OK ($how) for one transfer" \
			"$(cat "$D/$name.err"); $(tail -n 3 "$D/B.log")"
	fi
	kill "$wp" 2>/dev/null
	wait "$wp" 2>/dev/null
}
claimok_case C $((BASE + 10))
claimok_case E $((BASE + 12)) json

# --- a rogue owner that stops reading the opener's WPUTs for 3 s (a relay): the opener's put of
# 64 MiB passes its 500 ms deadline with most of its frames still queued at the opener. Its
# client, told the end, may reuse the buffer at once (it writes LEAKED!! all over it): none of
# those bytes may go to the owner (the frames still queued then read them, and the owner took
# bytes the client never put)
# With doneack the relay also answers the first WPUT's op with a DONE_ACK at once, which would
# make the put COMPLETE with its frames still queued: a protocol error, the set fails.
# stall_case NAME PORT WHAT [doneack]: daemon NAME on PORT + 1 behind the relay on PORT.
stall_case()
{
	local name=$1 port=$2 what=$3 inject=${4:-}
	start "$name" $((port + 1)) --peer-key "$D/key" --advertise "127.0.0.1:$port" ||
		abort_setup "daemon $name did not start"
	$PY tests/hostile_peer.py stall_relay "$port" 127.0.0.1 $((port + 1)) "$D/$name.wire" \
		$inject &
	PIDS+=($!)
	$PY tests/hostile_peer.py owner "$D/$name.sock" "$D/$name.meta" readwrite $((64 << 20)) &
	OWNER=$!
	for _ in $(seq 400); do # (64 MiB to fill first)
		[ -s "$D/$name.meta" ] && [ -n "$(ss -Hltn "sport = :$port")" ] && break
		sleep 0.05
	done
	if timeout 60 $PY tests/hostile_peer.py stall_putter "$D/B.sock" "$D/$name.meta" \
		>"$D/$name.out" 2>&1 && [ -s "$D/$name.wire" ] &&
		! grep -q "LEAKED!!" "$D/$name.wire" && kill -0 "$(pid_of B)" 2>/dev/null; then
		ok "$what: no byte of the buffer after its end reaches the owner\
 ($(cat "$D/$name.out"))"
	else
		fail "$what" "$(grep -c "LEAKED!!" "$D/$name.wire") frames on the wire with bytes\
 written after the end; $(cat "$D/$name.out")"
	fi
	kill "$OWNER" 2>/dev/null
	wait "$OWNER" 2>/dev/null
}
stall_case S $((BASE + 18)) "a put whose deadline passes while the owner does not read"
stall_case T $((BASE + 20)) "a DONE_ACK for a put of window frames, its WPUTs still queued" \
	doneack

# --- a rogue owner that never answers a window open: a relay drops every WOPEN_OK and WOPEN_ERR
# and passes the rest (PINGs answered: the set stays up). The opener's window.open must fail
# ETIMEDOUT after keepalive_timeout_ms (it waited for ever), and the handles of clients that
# left while their open waited must go too (they stayed, uncharged, as long as the set: a client
# that retried grew the daemon without bound). O, the opener, reports its handles in /metrics.
PM=$((BASE + 14))
start M2 $((BASE + 15)) --peer-key "$D/key" --advertise "127.0.0.1:$PM" ||
	abort_setup "daemon M2 did not start"
start O $((BASE + 16)) --peer-key "$D/key" --metrics-listen "127.0.0.1:$((BASE + 17))" ||
	abort_setup "daemon O did not start"
$PY tests/hostile_peer.py wopen_mute_relay "$PM" 127.0.0.1 $((BASE + 15)) &
PIDS+=($!)
$PY tests/hostile_peer.py owner "$D/M2.sock" "$D/mute.meta" readwrite &
OWNER=$!
for _ in $(seq 100); do
	[ -s "$D/mute.meta" ] && [ -n "$(ss -Hltn "sport = :$PM")" ] && break
	sleep 0.05
done
handles_of_o() { curl -s --max-time 5 "http://127.0.0.1:$((BASE + 17))/metrics" |
	awk '$1 == "xferd_window_handles" { print $2 }'; }
if timeout 40 $PY tests/hostile_peer.py mute_opener "$D/O.sock" "$D/mute.meta" \
	>"$D/mute.out" 2>&1; then
	for _ in $(seq 40); do
		[ "$(handles_of_o)" = 0 ] && break
		sleep 0.1
	done
	if [ "$(handles_of_o)" = 0 ] && grep -q "did not answer the open" "$D/O.log" &&
		kill -0 "$(pid_of O)" 2>/dev/null; then
		ok "an owner that never answers a window open: ETIMEDOUT after keepalive_timeout_ms,\
 no handle left of the clients that left meanwhile ($(cat "$D/mute.out"))"
	else
		fail "an owner that never answers a window open" \
			"handles left on O: $(handles_of_o); $(tail -n 3 "$D/O.log")"
	fi
else
	fail "an owner that never answers a window open" "$(cat "$D/mute.out")"
fi
kill "$OWNER" 2>/dev/null
wait "$OWNER" 2>/dev/null

summary
[ "$failed" -eq 0 ]
