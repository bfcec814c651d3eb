#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# `make test-valgrind`: the real daemon under valgrind's memcheck, driven by process-level
# suites (VG_SUITES, default: xferctl's, and the cross-node one over TCP between namespaces).
# A second check beside AddressSanitizer, for what it cannot see: bytes read before they were
# written (a branch on them, or sent to a client or peer: uninitialised memory leaving the
# daemon is an information leak), and fds still open when a daemon exits. Every xferd a suite
# starts runs as `valgrind ... build/xferd` (a build directory of symlinks whose xferd is that
# wrapper), with one log per process; after the suites, each log is one test:
#   ok   - no memcheck error, no definitely or indirectly lost block, and, if the daemon exited
#          (not SIGKILLed by a test), no fd open at exit but what it inherited.
# The suites' own results count too (they run slower under valgrind: ~20x CPU per operation).
# Prints "ok - " / "FAIL - " lines and a final "N passed, N failed".
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) BDIR=$BUILD ;; *) BDIR=$ROOT/$BUILD ;; esac
SUITES=${VG_SUITES:-test_xferctl.sh test_cross.sh}
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh" # ok, fail, summary, abort_setup

command -v valgrind >/dev/null ||
	abort_setup "valgrind is not installed (scripts/install-deps.sh installs it)"
[ -x "$BDIR/xferd" ] || abort_setup "$BDIR/xferd is missing: build first"

WORK=$(mktemp -d /tmp/xferd-valgrind.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/build" "$WORK/logs"
# (mktemp -d makes it 0700: suites that run clients as nobody (test_live's watch, the Python
# suite's unwritable file) must reach the wrapper build's xferctl and library through it)
chmod 755 "$WORK" "$WORK/build"

# The wrapper build directory: every entry of $BDIR but xferd, which is valgrind running it.
# (Syscall 451 is cachestat(2), newer than this valgrind: it answers ENOSYS, which the daemon
# takes as "residency unknown"; its warning lines are dropped from the logs' checks below.)
for f in "$BDIR"/*; do
	[ "$(basename "$f")" = xferd ] || ln -s "$f" "$WORK/build/"
done
cat >"$WORK/build/xferd" <<EOF
#!/bin/sh
exec valgrind -q --track-fds=yes --leak-check=full --show-leak-kinds=definite,indirect \\
	--num-callers=30 --log-file="$WORK/logs/xferd.%p.log" "$BDIR/xferd" "\$@"
EOF
chmod +x "$WORK/build/xferd"

# run_suite NAME: tests/NAME with the wrapper build; its summary line adds to the counts.
run_suite()
{
	local name=$1 out="$WORK/$1.out" last p f log
	echo "# ---- $name under valgrind ----"
	BUILD="$WORK/build" XFER_SRCDIR=$ROOT timeout -k 10 1200 bash "$ROOT/tests/$name" 2>&1 |
		tee "$out"
	for log in "$WORK"/logs/xferd.*.log; do
		[ -f "$log" ] && mv "$log" "${log%.log}.$name"
	done
	last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1)
	if [ -z "$last" ]; then
		fail "$name under valgrind" "no summary line: crashed or timed out?"
		return
	fi
	p=${last%% passed*}
	f=${last#*passed, }
	f=${f%% failed*}
	passed=$((passed + p))
	failed=$((failed + f))
}

# check_log FILE: one test per daemon process (see the top).
check_log()
{
	local log=$1 pid suite body errs fds
	pid=${log##*/xferd.}
	suite=${pid#*.}
	pid=${pid%%.*}
	body=$(grep -v -e '^--[0-9]*-- ' "$log")
	errs=$(grep -E '== (Invalid|Conditional jump|Use of uninitialised|Syscall param|Mismatched|Source and destination overlap|[0-9,]+ bytes in [0-9,]+ blocks are (definitely|indirectly) lost)' <<<"$body" | head -n 3)
	# An fd open at exit is reported as "Open file descriptor N: WHAT" followed by where it was
	# opened; those the daemon inherited (stdio, the log file) say "<inherited from parent>".
	fds=$(awk '/Open (file descriptor|AF_[A-Z0-9]+ socket)/ { what = $0; getline
		if ($0 !~ /inherited from parent/) print what }' <<<"$body" | head -n 3)
	if [ -n "$errs" ]; then
		fail "xferd pid $pid ($suite): memcheck" "$(tr '\n' '|' <<<"$errs")see the log below"
		grep -v -e '^--[0-9]*-- ' "$log" | sed 's/^/#   /' | head -n 60
	elif [ -n "$fds" ]; then
		fail "xferd pid $pid ($suite): fds left open at exit" "$(tr '\n' '|' <<<"$fds")"
	else
		ok "xferd pid $pid ($suite): no memcheck error, no leak, no fd left open"
	fi
}

for s in $SUITES; do
	run_suite "$s"
done
nlogs=0
for log in "$WORK"/logs/xferd.*.*; do
	[ -f "$log" ] || continue
	nlogs=$((nlogs + 1))
	check_log "$log"
done
[ "$nlogs" -gt 0 ] || fail "daemon logs" "no xferd ran under valgrind: did the suites use \$BUILD/xferd?"
summary
[ "$failed" -eq 0 ]
