#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# peer_allow and forged metadata endpoints (issue 12, item 8), tried as an attacker would:
# metadata whose endpoint names another address must not make the reader's daemon connect there
# (a listener on that address counts what reaches it), a connection from outside the list is
# closed at once with a rate-limited log line, and a reader is told the same thing whether the
# owner's port is closed, filtered, silent or hangs up: forged metadata is no port scanner.
# Each refusal is paired with a control case showing the same probe succeeds without it.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=/usr/bin/python3
PROBE=tests/peer_probe.py
# shellcheck source=tests/lib.sh
. tests/lib.sh

require_built
loopback_setup allow
mkkey "$D/key"

# start NAME PORT CONFIG: a keyed daemon on $D/NAME.sock, 127.0.0.1:PORT, config JSON CONFIG.
start()
{
	echo "$3" >"$D/$1.json"
	loopback_start "$1" "$2" --config "$D/$1.json" --peer-key "$D/key"
}

# offer NAME: a 1 MiB readable on owner A, left waiting; its metadata in $D/NAME.meta.
offer()
{
	local name=$1 i
	head -c $((1 << 20)) /dev/urandom >"$D/$name.src"
	"$BUILD/xferctl" --socket "$D/A.sock" readable "$D/$name.src" >"$D/$name.meta" \
		2>/dev/null &
	PIDS+=($!)
	for ((i = 0; i < 100; i++)); do
		[ -s "$D/$name.meta" ] && return 0
		sleep 0.05
	done
	return 1
}

# read_meta READER META NAME: xferctl read on READER; its stderr in $D/NAME.err; its status.
read_meta()
{
	echo "$2" >"$D/$3.in"
	timeout 20 "$BUILD/xferctl" --socket "$D/$1.sock" read "@$D/$3.in" "$D/$3.dst" \
		2>"$D/$3.err"
}

P_A=$((BASE + 1)) P_R=$((BASE + 2)) P_O=$((BASE + 3)) P_TRAP=$((BASE + 4))
ALLOW='{"peer_allow": ["10.0.0.0/8", "fd00::/8", "127.0.0.1/32"], "connect_timeout_ms": 1500}'
start A "$P_A" '{}' || abort_setup "owner A did not start: $(tail -n 3 "$D/A.log")"
start R "$P_R" "$ALLOW" || abort_setup "reader R (peer_allow) did not start: $(tail -n 3 "$D/R.log")"
start O "$P_O" '{"connect_timeout_ms": 1500}' || abort_setup "reader O (no peer_allow) did not start"

# --- the config: bad entries refuse to start
for bad in '"10.0.0.0/33"' '"10.0.0.0"' '"fd00::/129"' '"node1/8"' '7'; do
	echo "{\"peer_allow\": [$bad]}" >"$D/bad.json"
	rc=0
	timeout 10 "$BUILD/xferd" --socket "$D/bad.sock" --foreground --config "$D/bad.json" \
		>"$D/bad.out" 2>&1 || rc=$?
	if [ "$rc" -ne 0 ] && grep -q "peer_allow" "$D/bad.out"; then
		ok "config peer_allow [$bad] refused at start"
	else
		fail "config peer_allow [$bad] refused at start" "exit $rc: $(tail -n 1 "$D/bad.out")"
	fi
done

# --- an allowed owner still works
offer t1 || abort_setup "no metadata from A"
if read_meta R "$(cat "$D/t1.meta")" t1 && cmp -s "$D/t1.src" "$D/t1.dst"; then
	ok "an owner inside peer_allow (127.0.0.1/32): 1 MiB read, bytes identical"
else
	fail "an owner inside peer_allow" "$(cat "$D/t1.err")"
fi

# --- forged metadata pointing at 127.0.0.2: refused before any connect
$PY $PROBE listen 127.0.0.2 "$P_TRAP" "$D/trap.count" 30 &
PIDS+=($!)
sleep 0.3
offer t2 || abort_setup "no metadata from A"
FORGED=$($PY $PROBE forge "$(cat "$D/t2.meta")" 127.0.0.2 "$P_TRAP")
rc=0
read_meta R "$FORGED" t2 || rc=$?
sleep 0.5
if [ "$rc" -ne 0 ] && grep -q "the owner's address 127.0.0.2 is outside peer_allow" "$D/t2.err" &&
	[ "$(cat "$D/trap.count" 2>/dev/null || echo 0)" = 0 ]; then
	ok "metadata naming 127.0.0.2: refused with EACCES, no connection reached it: $(cat "$D/t2.err")"
else
	fail "metadata naming 127.0.0.2 refused before any connect" \
		"exit $rc, $(cat "$D/t2.err"), connections: $(cat "$D/trap.count" 2>/dev/null)"
fi
# The control: without peer_allow the same forgery makes O connect there.
read_meta O "$FORGED" t2o
sleep 0.3
if [ "$(cat "$D/trap.count" 2>/dev/null || echo 0)" -ge 1 ]; then
	ok "control: without peer_allow the forged endpoint is dialled (the trap counts it)"
else
	fail "control: without peer_allow the forged endpoint is dialled" "$(cat "$D/t2o.err")"
fi
FORGED=$($PY $PROBE forge "$(cat "$D/t2.meta")" localhost "$P_A")
if ! read_meta R "$FORGED" t3 && grep -q "not a numeric IP address" "$D/t3.err"; then
	ok "a host name in metadata is refused under peer_allow (not resolved): $(cat "$D/t3.err")"
else
	fail "a host name in metadata is refused under peer_allow" "$(cat "$D/t3.err")"
fi

# --- a connection from outside peer_allow is closed at once; one from inside is not
res=$($PY $PROBE dial 127.0.0.2 127.0.0.1 "$P_R" 2)
# (the daemon logs the refusal after the close the probe saw: its line may come a moment later)
for _ in $(seq 100); do
	grep -q "from 127.0.0.2 refused: outside peer_allow" "$D/R.log" && break
	sleep 0.05
done
if [ "$res" = closed ] && grep -q "from 127.0.0.2 refused: outside peer_allow" "$D/R.log"; then
	ok "a connection from 127.0.0.2 is closed at once, and the log says why"
else
	fail "a connection from 127.0.0.2 is closed at once" "$res; $(tail -n 2 "$D/R.log")"
fi
res=$($PY $PROBE dial 127.0.0.1 127.0.0.1 "$P_R" 2)
if [ "$res" = open ]; then
	ok "control: a connection from 127.0.0.1 is kept (waits for its HELLO)"
else
	fail "control: a connection from 127.0.0.1 is kept" "$res"
fi
res=$($PY $PROBE dial 127.0.0.2 127.0.0.1 "$P_O" 2)
if [ "$res" = open ]; then
	ok "control: without peer_allow a connection from 127.0.0.2 is kept"
else
	fail "control: without peer_allow a connection from 127.0.0.2 is kept" "$res"
fi
sleep 1.1 # past the last refusal's log second
before=$(grep -c "outside peer_allow" "$D/R.log")
t0=$(date +%s)
for ((i = 0; i < 30; i++)); do $PY $PROBE dial 127.0.0.2 127.0.0.1 "$P_R" 1 >/dev/null; done
# At most one line a second, whatever the 30 dials took on a loaded machine (each a python).
secs=$(($(date +%s) - t0 + 1))
after=$(grep -c "outside peer_allow" "$D/R.log")
if [ $((after - before)) -ge 1 ] && [ $((after - before)) -le "$secs" ] &&
	[ $((after - before)) -lt 30 ]; then
	ok "30 refused connections in <= $secs s: $((after - before)) log lines (at most one a second)"
else
	fail "refused connections log at most once a second" \
		"$((after - before)) lines for 30 in <= $secs s"
fi

# --- one text for every way the owner cannot be reached
# closed: nothing listens; filtered: a full accept queue drops the SYN; silent: accepts and says
# nothing; hangup: accepts and closes. Reader O has no peer_allow and connect_timeout_ms 1500.
P_CLOSED=$((BASE + 5)) P_FILT=$((BASE + 6)) P_SILENT=$((BASE + 7)) P_HANG=$((BASE + 8))
$PY $PROBE blackhole 127.0.0.1 "$P_FILT" 60 &
PIDS+=($!)
$PY $PROBE listen 127.0.0.1 "$P_SILENT" "$D/silent.count" 60 silent &
PIDS+=($!)
$PY $PROBE listen 127.0.0.1 "$P_HANG" "$D/hang.count" 60 hangup &
PIDS+=($!)
sleep 0.3
offer t4 || abort_setup "no metadata from A"
texts=()
for kind in CLOSED FILT SILENT HANG; do
	port_var=P_$kind
	FORGED=$($PY $PROBE forge "$(cat "$D/t4.meta")" 127.0.0.1 "${!port_var}")
	read_meta O "$FORGED" "u$kind"
	texts+=("$(sed "s/127\.0\.0\.1:${!port_var}/ADDR/g" "$D/u$kind.err")")
done
distinct=$(printf '%s\n' "${texts[@]}" | sort -u | wc -l)
if [ "$distinct" = 1 ] && grep -q "cannot reach the owner at ADDR" <<<"${texts[0]}"; then
	ok "closed, filtered, silent and hang-up ports: one text to the client: ${texts[0]}"
else
	fail "one text for closed, filtered, silent and hang-up ports" \
		"$(printf '[%s] ' "${texts[@]}")"
fi
if grep -q "127.0.0.1:$P_CLOSED.*Connection refused" "$D/O.log" &&
	grep -q "127.0.0.1:$P_FILT.*no HELLO" "$D/O.log"; then
	ok "the daemon's log keeps the precise reasons (refused, no HELLO)"
else
	fail "the daemon's log keeps the precise reasons" "$(grep "127.0.0.1:$P_CLOSED\|127.0.0.1:$P_FILT" "$D/O.log" | tail -n 4)"
fi
if grep -q "Connection refused\|timed out\|closed the connection\|no HELLO" "$D"/u*.err; then
	fail "no client text tells why" "$(cat "$D"/u*.err)"
else
	ok "no client text says refused, timed out or closed"
fi

# --- both daemons keep serving
offer t5 || abort_setup "no metadata from A"
if read_meta R "$(cat "$D/t5.meta")" t5 && cmp -s "$D/t5.src" "$D/t5.dst"; then
	ok "R still reads from A afterwards"
else
	fail "R still reads from A afterwards" "$(cat "$D/t5.err")"
fi
summary
[ "$failed" -eq 0 ]
