#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `make bench`: start a private xferd, measure its local transport against memcpy and the latency
# of a small operation with xferbench, stop the daemon. Extra arguments go to xferbench
# (e.g. --max 64M, --iters 3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/xferd-tmp.sh

xferd_tmp_start
echo "bench: $BUILD/xferd (pid $XFERD_PID) on $XFERD_SOCK"

rc=0
"$BUILD/xferbench" bench --socket "$XFERD_SOCK" "$@" || rc=$?

if ! xferd_tmp_stop && [ "$rc" -eq 0 ]; then
	rc=1
fi
exit "$rc"
