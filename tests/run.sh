#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Runs every test program ($BUILD/tests/test_*) and every tests/test_*.sh, streaming their
# output, and adds up each one's final "N passed, N failed[, N skipped]" line. A program that
# crashes, prints no final line, or exits non-zero with no failure counted counts as one failure.
# Ends with one line "N passed, N failed[, N skipped]"; exits non-zero if anything failed.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) BDIR=$BUILD ;; *) BDIR=$ROOT/$BUILD ;; esac
export BUILD XFER_SRCDIR=${XFER_SRCDIR:-$ROOT}
# XFER_TEST_LARGE=0 shrinks the biggest cases (1 GiB -> 256 MiB) on a slow or small machine.
# Every program is bounded on its own too; its tests have their own alarm() timeouts.
LIMIT=${XFER_TEST_PROGRAM_LIMIT:-900}

total_pass=0
total_fail=0
total_skip=0
LOG=$(mktemp /tmp/xferd-run.XXXXXX)
trap 'rm -f "$LOG"' EXIT

# Adds the counts of one program's output ($LOG) and exit status $2 for program $1.
tally() {
	local name=$1 rc=$2 last p f s
	last=$(grep -E '^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$LOG" | tail -n 1)
	if [ -z "$last" ]; then
		echo "FAIL - $name (exit status $rc and no summary line: crashed?)"
		total_fail=$((total_fail + 1))
		return
	fi
	p=$(echo "$last" | sed -E 's/^([0-9]+) passed.*/\1/')
	f=$(echo "$last" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
	s=0
	case $last in *skipped) s=$(echo "$last" | sed -E 's/.*, ([0-9]+) skipped$/\1/') ;; esac
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "FAIL - $name (exit status $rc after \"$last\": sanitizer report at exit?)"
		f=1
	fi
	total_pass=$((total_pass + p))
	total_fail=$((total_fail + f))
	total_skip=$((total_skip + s))
}

run_one() {
	local name=$1
	shift
	echo "# ---- $name ----"
	timeout -k 10 "$LIMIT" "$@" 2>&1 | tee "$LOG"
	tally "$name" "${PIPESTATUS[0]}"
}

found=0
for t in "$BDIR"/tests/test_*; do
	case $t in *.o | *.d) continue ;; esac
	[ -x "$t" ] && [ -f "$t" ] || continue
	found=1
	run_one "$(basename "$t")" "$t"
done
for t in "$ROOT"/tests/test_*.sh; do
	[ -f "$t" ] || continue
	found=1
	run_one "$(basename "$t")" bash "$t"
done
if [ $found -eq 0 ]; then
	echo "FAIL - run.sh (no test programs in $BDIR/tests: build first)"
	total_fail=$((total_fail + 1))
fi

if [ $total_skip -gt 0 ]; then
	echo "$total_pass passed, $total_fail failed, $total_skip skipped"
else
	echo "$total_pass passed, $total_fail failed"
fi
[ $total_fail -eq 0 ]
