#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench-idle.sh: pairings across two nodes (network namespaces, scripts/netns.sh) that each
# come after an idle pause, as a node's sporadic KV-cache hand-offs do, under the kernel's
# default net.ipv4.tcp_slow_start_after_idle (1) and under xferd's recommended 0
# (systemd/60-xferd.conf), beside the same pairings back to back.
#
#   scripts/bench-idle.sh [--gap MS] [--iters N] [--min SIZE] [--max SIZE] [BUILD]
#
# For each setting it makes two fresh nodes with it, starts BUILD's (default build) xferd on
# both with the daemon's default keepalive (1 s) and congestion control, and runs `xferbench_net
# bench` (readable on node 0, read on node 1, then writable / write; sizes from MIN to MAX x4;
# every transfer's bytes are checked) twice: back to back, then with GAP ms of idle before each
# transfer (untimed). Each row: GB/s of the median transfer (claim to COMPLETE) and the best.
# Defaults: --gap 3000, --iters 5, 1M to 16M (about 3.5 minutes: 60 pauses of 3 s per setting).
#
# Needs root (namespaces). On a shared machine: flock /tmp/xferd-bench.lock scripts/bench-idle.sh
set -euo pipefail

GAP=3000
ITERS=5
MIN=1M
MAX=16M
while [ $# -gt 0 ]; do
	case $1 in
	--gap) GAP=$2; shift 2 ;;
	--iters) ITERS=$2; shift 2 ;;
	--min) MIN=$2; shift 2 ;;
	--max) MAX=$2; shift 2 ;;
	-h | --help)
		sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "$0"
		exit 0
		;;
	-*)
		echo "bench-idle.sh: unknown option '$1' (try --help)" >&2
		exit 2
		;;
	*) break ;;
	esac
done
BUILD=${1:-build}
cd "$(dirname "$0")/.." # (BUILD, like the default "build", is relative to the source tree)
for f in xferd xferctl xferbench_net; do
	[ -x "$BUILD/$f" ] || {
		echo "bench-idle.sh: $BUILD/$f is missing (run make)" >&2
		exit 1
	}
done
# shellcheck source=scripts/cluster.sh
. scripts/cluster.sh
export BUILD
# The daemon's own keepalive, not cluster.sh's quicker one for failure tests: keepalive frames
# are what a quiet connection still sends.
export XC_KEEPALIVE_MS=1000 XC_KEEPALIVE_TIMEOUT_MS=5000
trap 'xc_stop_all >/dev/null 2>&1 || true; xn_down' EXIT

echo "bench-idle: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%H:%M) UTC;" \
	"pairings after ${GAP} ms idle, $ITERS per size and kind"
for ssai in 1 0; do
	XN_SLOW_START_AFTER_IDLE=$ssai xn_up 2 >/dev/null
	if [ "$(xn_mode)" != netns ]; then
		echo "bench-idle.sh: needs network namespaces (root); loopback mode cannot set the sysctl" >&2
		exit 1
	fi
	xc_start_all
	for gap in 0 "$GAP"; do
		echo
		echo "net.ipv4.tcp_slow_start_after_idle=$ssai, $([ "$gap" = 0 ] && echo "back to back" ||
			echo "after $gap ms idle"):"
		"$BUILD/xferbench_net" bench --passive "$(xc_sock 0)" --active "$(xc_sock 1)" \
			--min "$MIN" --max "$MAX" --iters "$ITERS" --gap "$gap" --lat-iters 0
	done
	xc_stop_all
	xn_down
done
