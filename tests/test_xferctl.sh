#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# xferctl against a real xferd on a private socket: file transfers both ways (bytes compared
# with cmp), every listing with and without --json, and the exit statuses (0 done, 1 failed,
# 2 usage). Prints "ok - " / "FAIL - " lines and a final "N passed, N failed".
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) BIN=$BUILD ;; *) BIN=$ROOT/$BUILD ;; esac
XFERD=${XFERD_BIN:-$BIN/xferd}
CTL=$BIN/xferctl
T=30 # seconds: "it ended at all"

passed=0
failed=0
bg_pids=()
DIR=$(mktemp -d /tmp/xferctl-test.XXXXXX)
SOCK=$DIR/xferd.sock
DPID=

ok() { echo "ok - $1"; passed=$((passed + 1)); }
fail() {
	echo "FAIL - $1 ($2)"
	failed=$((failed + 1))
}

cleanup() {
	for p in "${bg_pids[@]}" $DPID; do
		kill -9 "$p" 2>/dev/null
	done
	wait 2>/dev/null
	rm -rf "$DIR"
}
trap cleanup EXIT

ctl() { timeout $T "$CTL" --socket "$SOCK" "$@"; }

# Waits up to $T s for background job $1; returns its exit status (124 on timeout).
wait_bg() {
	local i
	for ((i = 0; i < T * 20; i++)); do
		if ! kill -0 "$1" 2>/dev/null; then
			wait "$1"
			return
		fi
		sleep 0.05
	done
	kill -9 "$1" 2>/dev/null
	wait "$1" 2>/dev/null
	return 124
}

# Waits until file $1 holds one complete line; prints it.
wait_line() {
	local i
	for ((i = 0; i < T * 20; i++)); do
		if [ -s "$1" ] && [ "$(tail -c 1 "$1" | od -An -c | tr -d ' ')" = '\n' ]; then
			head -n 1 "$1"
			return 0
		fi
		sleep 0.05
	done
	return 1
}

json_ok() { python3 -c 'import json,sys; json.load(sys.stdin)'; }

start_daemon() {
	local i
	if [ ! -x "$XFERD" ] || [ ! -x "$CTL" ]; then
		fail start_daemon "no $XFERD or $CTL: build first"
		return 1
	fi
	"$XFERD" --socket "$SOCK" --foreground --log-level warn 2>"$DIR/xferd.log" &
	DPID=$!
	for ((i = 0; i < 200; i++)); do
		if "$CTL" --socket "$SOCK" status >/dev/null 2>&1; then
			return 0
		fi
		kill -0 "$DPID" 2>/dev/null || break
		sleep 0.05
	done
	fail start_daemon "xferd did not come up: $(tail -n 5 "$DIR/xferd.log")"
	return 1
}

# ---- file transfers ----

test_readable_read() {
	local name=readable_read_$1 in=$DIR/rr-in-$1 out=$DIR/rr-out-$1 meta=$DIR/rr-meta-$1 pid m
	head -c "$1" /dev/urandom >"$in"
	ctl readable "$in" >"$meta" 2>"$DIR/rr-err" &
	pid=$!
	bg_pids+=("$pid")
	if ! m=$(wait_line "$meta"); then
		fail "$name" "readable printed no metadata: $(cat "$DIR/rr-err")"
		return
	fi
	if ! ctl read "$m" "$out" 2>"$DIR/rr-err2"; then
		fail "$name" "read exited $?: $(cat "$DIR/rr-err2")"
		return
	fi
	wait_bg "$pid"
	local rc=$?
	[ $rc -eq 0 ] || { fail "$name" "readable exited $rc: $(cat "$DIR/rr-err")"; return; }
	cmp -s "$in" "$out" || { fail "$name" "bytes differ"; return; }
	ok "$name"
}

test_writable_write() {
	local name=writable_write_$1 in=$DIR/ww-in-$1 out=$DIR/ww-out-$1 meta=$DIR/ww-meta-$1 pid m
	head -c "$1" /dev/urandom >"$in"
	ctl writable "$1" "$out" >"$meta" 2>"$DIR/ww-err" &
	pid=$!
	bg_pids+=("$pid")
	if ! m=$(wait_line "$meta"); then
		fail "$name" "writable printed no metadata: $(cat "$DIR/ww-err")"
		return
	fi
	if ! ctl write "$m" "$in" 2>"$DIR/ww-err2"; then
		fail "$name" "write exited $?: $(cat "$DIR/ww-err2")"
		return
	fi
	wait_bg "$pid"
	local rc=$?
	[ $rc -eq 0 ] || { fail "$name" "writable exited $rc: $(cat "$DIR/ww-err")"; return; }
	cmp -s "$in" "$out" || { fail "$name" "bytes differ"; return; }
	ok "$name"
}

test_read_metadata_from_stdin() {
	local name=read_metadata_from_stdin in=$DIR/si-in out=$DIR/si-out meta=$DIR/si-meta pid
	head -c 70000 /dev/urandom >"$in"
	ctl readable "$in" >"$meta" 2>/dev/null &
	pid=$!
	bg_pids+=("$pid")
	wait_line "$meta" >/dev/null || { fail "$name" "no metadata"; return; }
	ctl read - "$out" <"$meta" 2>"$DIR/si-err" || {
		fail "$name" "read - exited $?: $(cat "$DIR/si-err")"
		return
	}
	wait_bg "$pid" || { fail "$name" "readable failed"; return; }
	cmp -s "$in" "$out" || { fail "$name" "bytes differ"; return; }
	ok "$name"
}

# A size mismatch is refused (exit 1) and leaves the writable claimable by the right size.
test_size_mismatch() {
	local name=size_mismatch_exits_1 meta=$DIR/sm-meta out=$DIR/sm-out pid m rc
	head -c 8192 /dev/urandom >"$DIR/sm-8k"
	head -c 4096 /dev/urandom >"$DIR/sm-4k"
	ctl writable 4096 "$out" >"$meta" 2>/dev/null &
	pid=$!
	bg_pids+=("$pid")
	m=$(wait_line "$meta") || { fail "$name" "no metadata"; return; }
	ctl write "$m" "$DIR/sm-8k" 2>"$DIR/sm-err"
	rc=$?
	[ $rc -eq 1 ] || { fail "$name" "write of 8192 into 4096 exited $rc"; return; }
	[ -s "$DIR/sm-err" ] || { fail "$name" "no message on stderr"; return; }
	ctl write "$m" "$DIR/sm-4k" 2>/dev/null || { fail "$name" "the right size failed after"; return; }
	wait_bg "$pid" || { fail "$name" "writable failed"; return; }
	cmp -s "$DIR/sm-4k" "$out" || { fail "$name" "bytes differ"; return; }
	ok "$name"
}

# ---- listings ----

test_listings() {
	local c out rc
	for c in status regions ops clients peers devices stats; do
		out=$(ctl "$c" 2>&1)
		rc=$?
		if [ $rc -ne 0 ]; then
			fail "listing_$c" "exit $rc: $out"
			continue
		fi
		out=$(ctl --json "$c" 2>&1)
		rc=$?
		if [ $rc -ne 0 ]; then
			fail "listing_${c}_json" "exit $rc: $out"
			continue
		fi
		if ! printf '%s' "$out" | json_ok 2>/dev/null; then
			fail "listing_${c}_json" "not JSON: ${out:0:200}"
			continue
		fi
		ok "listing_$c"
	done
}

# With an operation pending, ops --json shows it and regions --json its region.
test_listings_show_pending_op() {
	local name=listings_show_pending_op meta=$DIR/lp-meta pid m
	head -c 5000 /dev/urandom >"$DIR/lp-in"
	ctl readable "$DIR/lp-in" >"$meta" 2>/dev/null &
	pid=$!
	bg_pids+=("$pid")
	m=$(wait_line "$meta") || { fail "$name" "no metadata"; return; }
	if ! ctl --json ops | python3 -c '
import json, sys
ops = json.load(sys.stdin)["ops"]
sys.exit(0 if any(o["kind"] == "readable" and o["state"] == "INITIALIZED" and
                  o["length"] == 5000 for o in ops) else 1)'; then
		fail "$name" "ops --json does not list the pending readable"
		return
	fi
	if ! ctl --json regions | python3 -c '
import json, sys
sys.exit(0 if any(r["length"] == 5000 for r in json.load(sys.stdin)["regions"]) else 1)'; then
		fail "$name" "regions --json does not list its region"
		return
	fi
	ctl read "$m" "$DIR/lp-out" 2>/dev/null || { fail "$name" "read failed"; return; }
	wait_bg "$pid" || { fail "$name" "readable failed"; return; }
	cmp -s "$DIR/lp-in" "$DIR/lp-out" || { fail "$name" "bytes differ"; return; }
	ok "$name"
}

# ---- exit statuses ----

test_usage_errors() {
	local args rc
	while IFS= read -r args; do
		# shellcheck disable=SC2086
		ctl $args >/dev/null 2>&1
		rc=$?
		if [ $rc -eq 2 ]; then
			ok "usage_exit_2: xferctl $args"
		else
			fail "usage_exit_2: xferctl $args" "exit $rc"
		fi
	done <<'EOF'

no-such-command
read onlyonearg
readable
writable abc out
writable 0 out
--timeout 0 status
--no-such-option status
EOF
}

# Bad metadata: exit 1 with exactly one line on stderr.
test_bad_metadata() {
	local m rc lines
	head -c 100 /dev/urandom >"$DIR/bm-in"
	for m in xfer1.garbage not-metadata xfer1.eyJ2IjoxLCJraW5kIjoicmVhZGFibGUifQ; do
		ctl read "$m" "$DIR/bm-out" >/dev/null 2>"$DIR/bm-err"
		rc=$?
		lines=$(wc -l <"$DIR/bm-err")
		if [ $rc -ne 1 ] || [ "$lines" -ne 1 ]; then
			fail "bad_metadata_read: $m" "exit $rc, $lines stderr lines: $(cat "$DIR/bm-err")"
		else
			ok "bad_metadata_read: $m"
		fi
		ctl write "$m" "$DIR/bm-in" >/dev/null 2>"$DIR/bm-err"
		rc=$?
		lines=$(wc -l <"$DIR/bm-err")
		if [ $rc -ne 1 ] || [ "$lines" -ne 1 ]; then
			fail "bad_metadata_write: $m" "exit $rc, $lines stderr lines: $(cat "$DIR/bm-err")"
		else
			ok "bad_metadata_write: $m"
		fi
	done
}

test_no_daemon() {
	local rc lines
	timeout $T "$CTL" --socket "$DIR/nobody-here.sock" status >/dev/null 2>"$DIR/nd-err"
	rc=$?
	lines=$(wc -l <"$DIR/nd-err")
	if [ $rc -eq 1 ] && [ "$lines" -eq 1 ]; then
		ok no_daemon_exits_1
	else
		fail no_daemon_exits_1 "exit $rc, $lines stderr lines"
	fi
}

test_daemon_stops_cleanly() {
	local rc
	kill -TERM "$DPID"
	wait_bg "$DPID"
	rc=$?
	DPID=
	if [ $rc -eq 0 ]; then
		ok daemon_sigterm_exit_0
	else
		fail daemon_sigterm_exit_0 "exit $rc: $(tail -n 5 "$DIR/xferd.log")"
	fi
}

if start_daemon; then
	test_readable_read 1
	test_readable_read 1048576
	test_readable_read 3000017
	test_writable_write 1
	test_writable_write 1048576
	test_writable_write 3000017
	test_read_metadata_from_stdin
	test_size_mismatch
	test_listings
	test_listings_show_pending_op
	test_usage_errors
	test_bad_metadata
	test_no_daemon
	test_daemon_stops_cleanly
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
