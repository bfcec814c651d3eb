#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The Python package's suite (tests/python, pytest) against the build's library and daemon, with
# Debian's /usr/bin/python3 (the one with python3-pytest, -numpy, -torch). Prints pytest's counts
# as the "N passed, N failed[, N skipped]" line tests/run.sh adds up. Under SANITIZE the library
# is built with ASan/UBSan: the interpreter then runs with their runtimes preloaded (the
# interpreter's own allocations are not ours, so leak detection is off there).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) BDIR=$BUILD ;; *) BDIR=$ROOT/$BUILD ;; esac
PY=/usr/bin/python3

if ! $PY -c 'import pytest, numpy, torch' 2>/dev/null; then
	echo "SKIP - python suite (python3-pytest, python3-numpy, python3-torch not installed: make deps)"
	echo "0 passed, 0 failed, 1 skipped"
	exit 0
fi
if [ ! -x "$BDIR/tests/python/layout" ]; then
	echo "FAIL - python suite ($BDIR/tests/python/layout missing: build first)"
	echo "0 passed, 1 failed"
	exit 1
fi

export XFERD_BUILD=$BDIR XFERD_LIBRARY=$BDIR/libxferclient.so.1 XFER_SRCDIR=$ROOT
export PYTHONDONTWRITEBYTECODE=1
if readelf -d "$BDIR/libxferclient.so.1" 2>/dev/null | grep -q 'libasan'; then
	pre=
	for rt in libasan.so libubsan.so; do
		f=$(${CC:-cc} -print-file-name=$rt)
		[ -f "$f" ] && pre="$pre $f"
	done
	export LD_PRELOAD="${pre# }" ASAN_OPTIONS=detect_leaks=0:abort_on_error=0
fi

OUT=$(mktemp /tmp/xferd-pytest.XXXXXX)
trap 'rm -f "$OUT"' EXIT
cd "$ROOT/tests/python" || exit 1
timeout -k 10 300 $PY -m pytest -q -p no:cacheprovider -o console_output_style=classic \
	"${@:-.}" 2>&1 | tee "$OUT"
rc=${PIPESTATUS[0]}

# pytest's last line: "== 3 failed, 40 passed, 2 skipped in 12.3s ==" (any order, any subset).
last=$(grep -E '(passed|failed|error|skipped)' "$OUT" | tail -n 1)
count() { echo "$last" | grep -oE "[0-9]+ $1" | grep -oE '^[0-9]+' || echo 0; }
p=$(count passed)
f=$(($(count failed) + $(count error)))
s=$(count skipped)
if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
	echo "FAIL - pytest exited $rc with no failure counted"
	f=1
fi
if [ "$s" -gt 0 ]; then
	echo "$p passed, $f failed, $s skipped"
else
	echo "$p passed, $f failed"
fi
[ "$f" -eq 0 ]
