#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench-pairs.sh: pairings across two nodes (network namespaces, scripts/netns.sh) against UCX,
# and builds against each other, interleaved in one run (issue 14: 64 KiB pairings with 8 in
# flight >= 0.5x UCX tag_bw).
#
#   scripts/bench-pairs.sh [--rounds N] [--seconds S] [--size SIZE] [--depth N] [BUILD...]
#
# Each round measures ucx_perftest tag_bw at SIZE over TCP on the node's veth (UCX_TLS=tcp),
# then for every BUILD (default: build) starts its xferd on both nodes and runs
# `xferbench_net pipe` (readable on node 0, read on node 1, then writable / write) at SIZE with
# DEPTH pairs in flight, one call each, in groups of 8 (--batch 8), and in groups of 8 whose
# ends come as one op.batch_done per side (--batch 8 --batch-end), and the same with the
# active side's batches posted (--post: no reply waited for, its op.batch_done answers it; a
# build whose xferbench_net cannot has no such row). Each row gives GB/s (every
# slot's bytes are checked by the program), per-pair latency p50/p99, the ratio to UCX of the
# same round, and the CPU each process spent per pair (utime + stime of both daemons from
# /proc, of the client from time(1)). Defaults: 3 rounds, 2 s per cell, 64K, depth 8.
#
# Needs root (namespaces), ucx_perftest (Debian ucx-utils) and /usr/bin/time (Debian time).
# Run it under the shared lock on a shared machine: flock /tmp/xferd-bench.lock scripts/...
set -euo pipefail

ROUNDS=3
SECS=2
SIZE=64K
DEPTH=8
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) ROUNDS=$2; shift 2 ;;
	--seconds) SECS=$2; shift 2 ;;
	--size) SIZE=$2; shift 2 ;;
	--depth) DEPTH=$2; shift 2 ;;
	-h | --help)
		sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "$0"
		exit 0
		;;
	-*)
		echo "bench-pairs.sh: unknown option '$1' (try --help)" >&2
		exit 2
		;;
	*) break ;;
	esac
done
BUILDS=("$@")
[ ${#BUILDS[@]} -gt 0 ] || BUILDS=(build)
for b in "${BUILDS[@]}"; do
	for f in xferd xferctl xferbench_net; do
		[ -x "$b/$f" ] || {
			echo "bench-pairs.sh: $b/$f is missing (run make)" >&2
			exit 1
		}
	done
done
for c in ucx_perftest /usr/bin/time; do
	command -v "$c" >/dev/null 2>&1 || {
		echo "bench-pairs.sh: $c is not installed (Debian ucx-utils, time)" >&2
		exit 1
	}
done
bytes=$(numfmt --from=iec "$SIZE")

# shellcheck source=scripts/cluster.sh
. scripts/cluster.sh
xc_rig_up bench-pairs.sh
[ "$(xn_mode)" = netns ] || echo "(no network namespaces here: loopback numbers)"
A1=$(xn_addr 1)
UPORT=$(($(xn_port 1) + 2001))
UCX_DEV=eth0
[ "$(xn_mode)" = loopback ] && UCX_DEV=lo

# ucx_gbps: tag_bw at SIZE, node 0 -> node 1, GB/s (UCX's MB is 2^20 bytes); 0 if it failed.
ucx_gbps()
{
	local out
	xn_spawn 1 "$RUN/ucx-server.log" env UCX_TLS=tcp UCX_NET_DEVICES=$UCX_DEV \
		timeout 120 ucx_perftest -p "$UPORT"
	sleep 1 # (a probe connection would be taken for the test's client)
	out=$(xn_exec 0 env UCX_TLS=tcp UCX_NET_DEVICES=$UCX_DEV timeout 100 ucx_perftest "$A1" \
		-p "$UPORT" -t tag_bw -s "$bytes" -n $((1024 * 1024 * 1024 / bytes)) 2>&1) || true
	grep -q '^Final:' <<<"$out" || kill "$XN_PID" 2>/dev/null || true
	wait "$XN_PID" 2>/dev/null || true
	xn_forget "$XN_PID"
	awk '/^Final:/ { printf "%.3f", $7 * 1048576 / 1e9; f = 1 } END { if (!f) print 0 }' <<<"$out"
}

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# cell BUILD UCX [EXTRA...]: one pipe run, one line.
cell()
{
	local b=$1 ucx=$2 out a0 a1 b0 b1 ops cl
	shift 2
	rm -f "$XN_DIR"/n*.json
	BUILD=$b XC_KEEPALIVE_MS=1000 XC_KEEPALIVE_TIMEOUT_MS=5000 xc_start_all >/dev/null
	a0=$(ticks "$(xc_pid 0)")
	a1=$(ticks "$(xc_pid 1)")
	out=$({ /usr/bin/time -f "client %U %S" "$b/xferbench_net" pipe --passive "$(xc_sock 0)" \
		--active "$(xc_sock 1)" --sizes "$SIZE" --depths "$DEPTH" --seconds "$SECS" "$@"; } 2>&1) || {
		echo "bench-pairs.sh: $b: xferbench_net pipe failed:" >&2
		echo "$out" >&2
		exit 1
	}
	b0=$(ticks "$(xc_pid 0)")
	b1=$(ticks "$(xc_pid 1)")
	BUILD=$b xc_stop_all >/dev/null
	ops=$(awk '/^(read|write) / { s += $6 } END { print s }' <<<"$out")
	cl=$(awk '/^client/ { print $2 + $3 }' <<<"$out")
	awk -v b="$b" -v m="${*:-one call each}" -v u="$ucx" -v ops="$ops" -v o=$((b0 - a0)) \
		-v c=$((b1 - a1)) -v cl="$cl" '
		/^(read|write) / { r = r sprintf("%s %.3f GB/s (%.2fx) p50 %d p99 %d us; ", $1, $7,
			u > 0 ? $7 / u : 0, $8, $9) }
		END { printf "  %-22s %-14s %s CPU us/pair: owner %d, claimer %d, client %d\n", b, m,
			r, o * 10000 / ops, c * 10000 / ops, cl * 1e6 / ops }' <<<"$out"
}

echo "bench-pairs: $SIZE, $DEPTH in flight, ${SECS} s per cell, $ROUNDS rounds; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= ROUNDS; r++)); do
	u=$(ucx_gbps)
	echo "round $r: UCX tag_bw $SIZE $u GB/s"
	for b in "${BUILDS[@]}"; do
		cell "$b" "$u"
		cell "$b" "$u" --batch 8
		# (a build from before --batch-end has only the two rows above)
		if "$b/xferbench_net" --help 2>&1 | grep -q -- --batch-end; then
			cell "$b" "$u" --batch 8 --batch-end
		fi
		if "$b/xferbench_net" --help 2>&1 | grep -q -- 'pipe --batch-end: post'; then
			cell "$b" "$u" --batch 8 --batch-end --post
		fi
	done
done
