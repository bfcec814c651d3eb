#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The registration part of `make bench` on its own (issue 14): start a private xferd, time
# register+deregister of a resident 1 MiB and 4 KiB memfd (xferbench_net reg, one client), print
# the AF_UNIX round trips of the same moment (xferbench baseline: the floor of each of the two
# control round trips), ROUNDS times (default 3). SECONDS_PER=N: seconds per size (default 2).
# Extra arguments go to xferbench_net reg (e.g. --json, --pool 4G). XFER_SPIN_US applies.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/xferd-tmp.sh

ROUNDS=${ROUNDS:-3}
SECONDS_PER=${SECONDS_PER:-2}
[ -x "$BUILD/xferbench_net" ] || {
	echo "$0: $BUILD/xferbench_net is missing: run 'make' first" >&2
	exit 1
}
xferd_tmp_start
echo "bench-reg: $BUILD/xferd (pid $XFERD_PID) on $XFERD_SOCK, XFER_SPIN_US=${XFER_SPIN_US:-unset}"
for ((i = 1; i <= ROUNDS; i++)); do
	echo "round $i:"
	"$BUILD/xferbench_net" reg --passive "$XFERD_SOCK" --active "$XFERD_SOCK" \
		--seconds "$SECONDS_PER" "$@" | grep -v '^#'
	"$BUILD/xferbench" baseline
done
xferd_tmp_stop
