#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The daemon's messages to systemd without systemd: xferd --systemd with NOTIFY_SOCKET naming a
# datagram socket this test reads (tests/notify_listen.py), as systemd's would be.
#   - READY=1 once it serves; STOPPING=1 on SIGTERM, exit 0
#   - with WATCHDOG_USEC (WatchdogSec=): WATCHDOG=1 at half that interval, from the event loop:
#     none while the daemon is stopped (SIGSTOP: what the watchdog must notice), again after
#   - without it: no WATCHDOG=1
# Prints "ok - " / "FAIL - " lines and a final "N passed, N failed".
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) BIN=$BUILD ;; *) BIN=$ROOT/$BUILD ;; esac
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh" # ok, fail, summary, abort_setup

[ -x "$BIN/xferd" ] || abort_setup "$BIN/xferd is missing: build first"
if ! ldd "$BIN/xferd" | grep -q libsystemd; then # built with -DXD_NO_SYSTEMD
	skip "sd_notify" "xferd built without libsystemd"
	summary
	exit 0
fi
DIR=$(mktemp -d /tmp/xferd-notify.XXXXXX)
LPID=
DPID=
cleanup()
{
	for p in $DPID $LPID; do kill -CONT "$p" 2>/dev/null; kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$DIR"
}
trap cleanup EXIT

# start_daemon NAME [WATCHDOG_USEC]: the notify listener ($DIR/NAME.msgs: "SECONDS MESSAGE"
# lines) and xferd --systemd telling it; DPID, LPID.
start_daemon()
{
	local name=$1 i
	/usr/bin/python3 "$ROOT/tests/notify_listen.py" "$DIR/$name.notify" >"$DIR/$name.msgs" &
	LPID=$!
	for ((i = 0; i < 50; i++)); do
		[ -S "$DIR/$name.notify" ] && break
		sleep 0.1
	done
	env NOTIFY_SOCKET="$DIR/$name.notify" ${2:+WATCHDOG_USEC=$2} "$BIN/xferd" --systemd \
		--socket "$DIR/$name.sock" --log-level info 2>"$DIR/$name.log" &
	DPID=$!
}

# count NAME MESSAGE: how many MESSAGE lines the listener got.
count() { grep -c " $2\$" "$DIR/$1.msgs"; }
# wait_msg NAME MESSAGE SECONDS: until the listener got MESSAGE; 1 if not within SECONDS.
wait_msg()
{
	local end=$((SECONDS + $3))
	until grep -q " $2\$" "$DIR/$1.msgs"; do
		[ $SECONDS -lt $end ] || return 1
		sleep 0.05
	done
}

# stop_daemon NAME: SIGTERM; ok if STOPPING=1 came and the exit status is 0.
stop_daemon()
{
	local rc=0
	kill -TERM "$DPID"
	wait "$DPID" || rc=$?
	DPID=
	sleep 0.2
	if [ "$rc" -eq 0 ] && [ "$(count "$1" STOPPING=1)" -eq 1 ]; then
		ok "$1: SIGTERM: STOPPING=1, exit 0"
	else
		fail "$1: SIGTERM: STOPPING=1, exit 0" "exit $rc; $(tr '\n' '|' <"$DIR/$1.msgs")"
	fi
	kill "$LPID" 2>/dev/null
	wait "$LPID" 2>/dev/null
	LPID=
}

# WatchdogSec=0.6: pings every 0.3 s.
start_daemon wd 600000
if wait_msg wd READY=1 10; then
	ok "wd: READY=1 once the daemon serves"
else
	fail "wd: READY=1" "$(tail -n 3 "$DIR/wd.log" | tr '\n' '|')"
fi
sleep 2
n1=$(count wd WATCHDOG=1)
# The largest gap between two pings, in ms.
gap=$(awk '$2 == "WATCHDOG=1" { if (t) { g = ($1 - t) * 1000; if (g > m) m = g } t = $1 }
	END { printf "%d", m }' "$DIR/wd.msgs")
if [ "$n1" -ge 5 ] && [ "$n1" -le 10 ] && [ "$gap" -le 600 ]; then
	ok "wd: WATCHDOG_USEC=600000: WATCHDOG=1 about every 300 ms ($n1 in ~2 s, largest gap $gap ms)"
else
	fail "wd: WATCHDOG=1 at half of WATCHDOG_USEC" "$n1 in ~2 s, largest gap $gap ms"
fi
kill -STOP "$DPID"
sleep 0.2 # a ping the kernel had queued before the stop
n2=$(count wd WATCHDOG=1)
sleep 1.5
n3=$(count wd WATCHDOG=1)
kill -CONT "$DPID"
sleep 1
n4=$(count wd WATCHDOG=1)
if [ "$n3" -eq "$n2" ] && [ "$n4" -gt "$n3" ]; then
	ok "wd: no WATCHDOG=1 while the daemon is stopped (1.5 s), again after (+$((n4 - n3)) in 1 s)"
else
	fail "wd: pings stop with the loop and resume" "before $n2, stopped $n3, after $n4"
fi
if grep -q "systemd watchdog: WATCHDOG=1 every 300 ms" "$DIR/wd.log"; then
	ok "wd: the log says the interval"
else
	fail "wd: the log says the interval" "$(head -n 5 "$DIR/wd.log" | tr '\n' '|')"
fi
stop_daemon wd

start_daemon plain
wait_msg plain READY=1 10
sleep 1
if [ "$(count plain READY=1)" -eq 1 ] && [ "$(count plain WATCHDOG=1)" -eq 0 ]; then
	ok "plain: without WATCHDOG_USEC: READY=1, no WATCHDOG=1"
else
	fail "plain: READY=1 and no WATCHDOG=1" "$(tr '\n' '|' <"$DIR/plain.msgs")"
fi
stop_daemon plain
summary
[ "$failed" -eq 0 ]
