#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `make bench`: start a private xferd, measure its local transport against memcpy and the latency
# of a small operation with xferbench, stop the daemon. Extra arguments go to xferbench
# (e.g. --max 64M, --iters 3). PY_REF=1: the Python bench also times the C library's own calls
# interleaved with its rounds (xferbench.py --ref).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/xferd-tmp.sh

xferd_tmp_start
echo "bench: $BUILD/xferd (pid $XFERD_PID) on $XFERD_SOCK"

rc=0
C_OUT=$XFERD_TMP/xferbench.out
"$BUILD/xferbench" bench --socket "$XFERD_SOCK" "$@" | tee "$C_OUT" || rc=$?

# The Python client (client/python) on the same daemon right after, compared with the C one.
if [ "$rc" -eq 0 ] && /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
	echo
	XFERD_LIBRARY="$BUILD/libxferclient.so.1" /usr/bin/python3 client/python/examples/xferbench.py \
		--socket "$XFERD_SOCK" --compare "$C_OUT" ${PY_REF:+--ref} "$@" || rc=1
fi

if ! xferd_tmp_stop && [ "$rc" -eq 0 ]; then
	rc=1
fi
exit "$rc"
