# shellcheck shell=bash
# SPDX-License-Identifier: MIT
# Sourced by scripts/demo.sh and scripts/bench.sh: start $BUILD/xferd in the foreground on a
# socket in a fresh temporary directory, and stop exactly that process again (SIGTERM, then a
# check that it exited 0). The EXIT trap stops it and removes the directory even on failure.

BUILD=${BUILD:-build}
XFERD_PID=
XFERD_TMP=
XFERD_SOCK=

# xferd_tmp_cleanup: the EXIT trap. Stops the daemon if it still runs, removes the directory.
xferd_tmp_cleanup()
{
	if [ -n "$XFERD_PID" ] && kill -0 "$XFERD_PID" 2>/dev/null; then
		kill -TERM "$XFERD_PID" 2>/dev/null || true
		wait "$XFERD_PID" 2>/dev/null || true
	fi
	XFERD_PID=
	[ -n "$XFERD_TMP" ] && rm -rf "$XFERD_TMP"
	XFERD_TMP=
}

# xferd_tmp_log_tail: shows the end of the daemon's log, for failures.
xferd_tmp_log_tail()
{
	[ -n "$XFERD_TMP" ] && [ -s "$XFERD_TMP/xferd.log" ] || return 0
	echo "--- last lines of the xferd log ($XFERD_TMP/xferd.log) ---" >&2
	tail -n 20 "$XFERD_TMP/xferd.log" >&2
}

# xferd_tmp_start: starts the daemon and waits (up to 10 s) for its socket. Returns 1 on failure.
xferd_tmp_start()
{
	local i b
	for b in xferd xferbench; do
		if [ ! -x "$BUILD/$b" ]; then
			echo "$0: $BUILD/$b is missing: run 'make' first (BUILD=$BUILD)" >&2
			return 1
		fi
	done
	XFERD_TMP=$(mktemp -d "${TMPDIR:-/tmp}/xferd.XXXXXX")
	XFERD_SOCK="$XFERD_TMP/xferd.sock"
	trap xferd_tmp_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	"$BUILD/xferd" --foreground --socket "$XFERD_SOCK" >"$XFERD_TMP/xferd.log" 2>&1 &
	XFERD_PID=$!
	for ((i = 0; i < 200; i++)); do
		[ -S "$XFERD_SOCK" ] && return 0
		if ! kill -0 "$XFERD_PID" 2>/dev/null; then
			wait "$XFERD_PID" && i=0 || i=$?
			XFERD_PID=
			echo "$0: xferd exited (status $i) before its socket appeared" >&2
			xferd_tmp_log_tail
			return 1
		fi
		sleep 0.05
	done
	echo "$0: xferd (pid $XFERD_PID) did not create $XFERD_SOCK within 10 s" >&2
	xferd_tmp_log_tail
	return 1
}

# xferd_tmp_stop: SIGTERM to the daemon we started; returns 0 only if it exited 0 within 10 s.
xferd_tmp_stop()
{
	local pid=$XFERD_PID rc=0 i
	XFERD_PID=
	[ -n "$pid" ] || return 1
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 200; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "$0: xferd (pid $pid) still runs 10 s after SIGTERM; killing it" >&2
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		xferd_tmp_log_tail
		return 1
	fi
	wait "$pid" || rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "$0: xferd exited with status $rc after SIGTERM (expected 0)" >&2
		xferd_tmp_log_tail
		return 1
	fi
	return 0
}
