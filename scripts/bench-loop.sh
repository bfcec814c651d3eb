#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench-loop.sh: how late the daemons' event loops run while 1 GiB files move between two
# namespaced nodes (issue 15: a >= 1.5 s stall once tripped the tests' keepalive). Each round is
# an `xferctl read` (node 0's file -> node 1's file) and an `xferctl write` (node 0's file ->
# node 1's file), bytes compared; then each daemon's xferd_event_loop_lag_seconds (max, and the
# ticks over 10/50/100/250 ms) and its "event loop ran ... late" log lines, which say where the
# time went (the longest callback; on a CPU, waiting for one, off-CPU).
#
#   scripts/bench-loop.sh [--size 1G] [--rounds 3] [--hogs N] [--direct]
#
# --hogs N runs N busy loops (at normal priority, in sessions of their own) during the rounds:
# the "CPUs busy" case. --direct opens both files O_DIRECT (xferctl --direct). Times are printed
# beside the loop lag (a lag is the loop's; what the transfer costs is the time). No pass/fail;
# a transfer that fails (bytes not all there) is reported with its clients' last lines.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SIZE=1G
ROUNDS=3
HOGS=0
DIRECT=()
while [ $# -gt 0 ]; do
	case $1 in
	--size) SIZE=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--hogs) HOGS=$2; shift 2 ;;
	--direct) DIRECT=(--direct); shift ;;
	*) echo "usage: $0 [--size 1G] [--rounds N] [--hogs N] [--direct]" >&2; exit 2 ;;
	esac
done
# shellcheck source=scripts/cluster.sh
. scripts/cluster.sh
RUN=$(mktemp -d /var/tmp/xferd-bench-loop.XXXXXX)
HOG_PIDS=()
cleanup()
{
	for p in "${HOG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	xc_stop_all >/dev/null 2>&1 || true
	xn_down >/dev/null 2>&1 || true
	rm -rf "$RUN"
}
trap cleanup EXIT
MPORT=9468
export XC_CONFIG_EXTRA="\"metrics_listen\": \"127.0.0.1:$MPORT\""
export XC_LOG_LEVEL=warn
xn_up 2 >/dev/null
[ "$(xn_mode)" = netns ] || { echo "bench-loop.sh: needs network namespaces (root)" >&2; exit 1; }
xc_start_all
BYTES=$(numfmt --from=iec "$SIZE")
head -c "$BYTES" /dev/urandom >"$RUN/src.bin"

# line_of FILE: waits until FILE has a line (the metadata).
line_of()
{
	for ((i = 0; i < 600; i++)); do
		[ -s "$1" ] && grep -q . "$1" && return 0
		sleep 0.05
	done
	return 1
}

# one KIND: one timed transfer; prints seconds.
one()
{
	local t0 pp
	: >"$RUN/m"
	if [ "$1" = read ]; then
		xc_ctl 0 "${DIRECT[@]}" readable "$RUN/src.bin" >"$RUN/m" 2>"$RUN/e0" &
		pp=$!
		line_of "$RUN/m"
		t0=$(date +%s%N)
		xc_ctl 1 "${DIRECT[@]}" read "@$RUN/m" "$RUN/dst" 2>"$RUN/e1" || true
	else
		xc_ctl 1 "${DIRECT[@]}" writable "$BYTES" "$RUN/dst" >"$RUN/m" 2>"$RUN/e1" &
		pp=$!
		line_of "$RUN/m"
		t0=$(date +%s%N)
		xc_ctl 0 "${DIRECT[@]}" write "@$RUN/m" "$RUN/src.bin" 2>"$RUN/e0" || true
	fi
	wait "$pp" || true
	echo "scale=3; ($(date +%s%N) - $t0) / 1000000000" | bc
	if ! cmp -s "$RUN/src.bin" "$RUN/dst"; then
		echo "bench-loop.sh: $1 failed: $(tail -n 1 "$RUN/e0") / $(tail -n 1 "$RUN/e1")" >&2
	fi
	rm -f "$RUN/dst"
}

for ((h = 0; h < HOGS; h++)); do
	setsid bash -c 'while :; do :; done' </dev/null &
	HOG_PIDS+=($!)
done
echo "bench-loop: $ROUNDS rounds of xferctl read + write of $SIZE${DIRECT:+ (O_DIRECT)}, $HOGS busy loops, load $(cut -d' ' -f1 /proc/loadavg)"
for ((r = 0; r < ROUNDS; r++)); do
	echo "  round $r: read $(one read) s, write $(one write) s"
done
for p in "${HOG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
HOG_PIDS=()
for n in 0 1; do
	xn_exec "$n" curl -s --max-time 10 "http://127.0.0.1:$MPORT/metrics" >"$RUN/metrics.$n"
	awk -v node="$n" '
		/^xferd_event_loop_lag_max_seconds / { max = $2 }
		/^xferd_event_loop_lag_seconds_count / { count = $2 }
		/^xferd_event_loop_lag_seconds_bucket/ {
			match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5)
			b[le] = $2
		}
		END {
			printf "  node %d loop: %d ticks, max lag %.3f s, ticks later than 10 ms %d, 50 ms %d, 100 ms %d, 250 ms %d\n",
				node, count, max, count - b["0.01"], count - b["0.05"], count - b["0.1"], count - b["0.25"]
		}' "$RUN/metrics.$n"
	grep -h "event loop ran" "$(xc_log "$n")" | sed "s/^/  node $n: /" || true
done
