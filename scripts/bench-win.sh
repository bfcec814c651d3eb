#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench-win.sh: a short round of TCP window gets and puts (xferbench_net win) beside
# ucx_perftest -t tag_bw, in one run on the same two namespaces (scripts/netns.sh), for A/B
# comparisons of daemon builds (issue 14). Each BUILD directory given runs its own pair of
# daemons in turn (same client: the first BUILD:post's xferbench_net, else the first build's).
# BUILD:post runs that build's daemons with the client posting its batches (xferbench_net
# --post: XFER_OP_POST, no reply awaited; --batch 1 then posts one get or put per call).
#
#   scripts/bench-win.sh [--sizes 4K,64K,1M] [--depth 16] [--batch 8] [--seconds 1.5]
#                        [--rounds N] [--connections N] [--no-ucx] [--iperf3] [--idle-file]
#                        [BUILD...]
#
# Prints, per size: UCX tag_bw GB/s and msg/s, then each build's get and put GB/s and ops/s with
# the ratio to UCX (and the client's p50/p99 per op), and per build each daemon's read system
# calls per op of the whole run (/proc/PID/io syscr: read(2), readv(2) of any fd) and those of
# its peer set's sockets (list.peers socket_reads, read_ahead_fills; "-" from a daemon without
# them), and each daemon's CPU seconds (utime + stime) per GB the client moved, over the whole
# run (startup and registration included). Both rates count payload bytes only. --iperf3: also
# an iperf3 single stream node 0 -> node 1 per round (2 s), the peer of the large sizes' target,
# and one more with -C cubic (the daemons' default tcp_congestion; iperf3's row above runs the
# host's default).
# --idle-file: while each build runs, a 1 MiB file is registered on both daemons as a readable
# nobody claims (xferctl readable, the client's build), a file region no transfer uses (before
# per-peer read-ahead, it turned tcp.c's read-ahead off daemon-wide). Run it under the bench
# lock:
#   flock /tmp/xferd-bench.lock scripts/bench-win.sh build-base build
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=4K,64K,1M
DEPTH=16
BATCH=8
PIPE_SECS=1.5
ROUNDS=1
CONNS=2
UCX=1
IPERF=0
IDLE=0
BUILDS=()
while [ $# -gt 0 ]; do
	case $1 in
	--sizes) SIZES=$2; shift 2 ;;
	--depth) DEPTH=$2; shift 2 ;;
	--batch) BATCH=$2; shift 2 ;;
	--seconds) PIPE_SECS=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--connections) CONNS=$2; shift 2 ;;
	--no-ucx) UCX=0; shift ;;
	--iperf3) IPERF=1; shift ;;
	--idle-file) IDLE=1; shift ;;
	-h | --help)
		sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "$0"
		exit 0
		;;
	-*)
		echo "bench-win.sh: unknown option '$1' (try --help)" >&2
		exit 2
		;;
	*) BUILDS+=("$1"); shift ;;
	esac
done
[ ${#BUILDS[@]} -gt 0 ] || BUILDS=(build)
CLIENT=${BUILDS[0]%:post}/xferbench_net
for b in "${BUILDS[@]}"; do # (a BUILD:post's client knows --post: it runs every build's cells)
	[ "${b%:post}" != "$b" ] && CLIENT=${b%:post}/xferbench_net && break
done

# shellcheck source=scripts/cluster.sh
. scripts/cluster.sh
xc_rig_up bench-win.sh
A1=$(xn_addr 1)
UPORT=$(($(xn_port 1) + 2001))
UCX_DEV=eth0
[ "$(xn_mode)" = loopback ] && UCX_DEV=lo && UPORT=$(xn__free_port "$UPORT")

# ucx_run SIZE: "GB/s msg/s" of tag_bw node 0 -> node 1 (as bench-net.sh runs it).
ucx_run()
{
	local size=$1 iters out='' try
	iters=$((1024 * 1024 * 1024 / size))
	[ "$iters" -gt 200000 ] && iters=200000
	[ "$iters" -lt 100 ] && iters=100
	for try in 1 2 3; do
		xn_spawn 1 "$RUN/ucx-server.log" env UCX_TLS=tcp UCX_NET_DEVICES=$UCX_DEV \
			timeout 120 ucx_perftest -p "$UPORT"
		sleep "$try"
		out=$(xn_exec 0 env UCX_TLS=tcp UCX_NET_DEVICES=$UCX_DEV timeout 60 ucx_perftest \
			"$A1" -p "$UPORT" -t tag_bw -s "$size" -n "$iters" 2>&1) || true
		grep -q '^Final:' <<<"$out" || kill "$XN_PID" 2>/dev/null || true
		wait "$XN_PID" 2>/dev/null || true
		xn_forget "$XN_PID"
		grep -q '^Final:' <<<"$out" && break
	done
	awk '/^Final:/ { printf "%.3f %.0f\n", $7 * 1048576 / 1e9, $9; found = 1 }
	     END { if (!found) print "0 0" }' <<<"$out"
}

bytes()
{
	local s=$1
	case $s in
	*K) echo $((${s%K} * 1024)) ;;
	*M) echo $((${s%M} * 1024 * 1024)) ;;
	*) echo "$s" ;;
	esac
}

# iperf3_gbps [ARGS...]: GB/s of one iperf3 stream node 0 -> node 1 for 2 s (1 s omitted), to
# the server started below (a one-off server would take xn_wait_tcp's probe for its client).
iperf3_gbps()
{
	local out
	out=$(xn_exec 0 timeout 30 iperf3 -c "$A1" -p "$IPORT" -t 2 -O 1 -J "$@" 2>/dev/null) ||
		out='{}'
	"$XN_PY" -c 'import json,sys
d = json.load(sys.stdin)
print("%.3f" % (d.get("end", {}).get("sum_received", {}).get("bits_per_second", 0) / 8e9))' <<<"$out"
}
if [ "$IPERF" = 1 ]; then
	IPORT=$(($(xn_port 1) + 2002))
	[ "$(xn_mode)" = loopback ] && IPORT=$(xn__free_port "$IPORT")
	xn_spawn 1 "$RUN/iperf3-server.log" iperf3 -s -B "$A1" -p "$IPORT"
	xn_wait_tcp 0 "$A1" "$IPORT" 10 || IPERF=0
fi

# idle_files_start TAG: on each daemon a readable over a 1 MiB file that nobody claims.
IDLE_PIDS=()
idle_files_start()
{
	local n meta
	[ "$IDLE" = 1 ] || return 0
	[ -f "$RUN/idle.file" ] || head -c $((1 << 20)) /dev/zero >"$RUN/idle.file"
	for n in 0 1; do
		meta="$RUN/idle.$1.$n.meta"
		"$(dirname "$CLIENT")/xferctl" --socket "$(xc_sock "$n")" --timeout 600000 readable \
			--meta-file "$meta" "$RUN/idle.file" >/dev/null 2>&1 &
		IDLE_PIDS+=($!)
		for _ in $(seq 200); do [ -s "$meta" ] && break; sleep 0.05; done
		[ -s "$meta" ] || { echo "bench-win.sh: no idle file region on node $n" >&2; exit 1; }
	done
}
idle_files_stop()
{
	[ ${#IDLE_PIDS[@]} -gt 0 ] || return 0
	kill "${IDLE_PIDS[@]}" 2>/dev/null || true
	wait "${IDLE_PIDS[@]}" 2>/dev/null || true
	IDLE_PIDS=()
}

declare -A UCXR IPR IPRC
for r in $(seq 1 "$ROUNDS"); do
	[ "$IPERF" = 1 ] && IPR[$r]=$(iperf3_gbps) && IPRC[$r]=$(iperf3_gbps -C cubic)
	if [ "$UCX" = 1 ]; then
		for s in ${SIZES//,/ }; do
			UCXR["$r,$s"]=$(ucx_run "$(bytes "$s")")
		done
	fi
	for b in "${BUILDS[@]}"; do
		post=()
		[ "${b%:post}" != "$b" ] && post=(--post)
		BUILD=${b%:post} XC_KEEPALIVE_MS=1000 XC_KEEPALIVE_TIMEOUT_MS=5000 \
			XC_PEER_CONNECTIONS=$CONNS xc_start_all || exit 1
		idle_files_start "$r.${b//\//_}"
		"$CLIENT" win --passive "$(xc_sock 0)" --active "$(xc_sock 1)" --sizes "$SIZES" \
			--depths "$DEPTH" --batch "$BATCH" --seconds "$PIPE_SECS" --json "${post[@]}" \
			>"$RUN/win.$r.${b//\//_}.json"
		for n in 0 1; do # (the peer sets' read counts, where the daemon has them)
			"$(dirname "$CLIENT")/xferctl" --socket "$(xc_sock "$n")" --json peers \
				>"$RUN/peers.$r.${b//\//_}.$n.json" 2>/dev/null || true
			awk '/^syscr/ { print $2 }' "/proc/$(xc_pid "$n")/io" \
				>"$RUN/syscr.$r.${b//\//_}.$n" 2>/dev/null || true
			awk '{ print $14 + $15 }' "/proc/$(xc_pid "$n")/stat" \
				>"$RUN/cpu.$r.${b//\//_}.$n" 2>/dev/null || true
		done
		idle_files_stop
		xc_stop_all >/dev/null
	done
done

echo "bench-win: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), peer_connections $CONNS," \
	"depth $DEPTH, batch $BATCH$([ "$IDLE" = 1 ] && echo ", an idle file region on each daemon")," \
	"$(date -u +%H:%M) UTC"
printf '%-5s %-6s %-22s %9s %10s %7s\n' round size what GB/s ops/s xUCX
for r in $(seq 1 "$ROUNDS"); do
	[ "$IPERF" = 1 ] && printf '%-5s %-6s %-22s %9s\n' "$r" "" "iperf3 1 stream" "${IPR[$r]}" \
		"$r" "" "iperf3 -C cubic" "${IPRC[$r]}"
	for s in ${SIZES//,/ }; do
		read -r ugb urate <<<"${UCXR["$r,$s"]:-0 0}"
		printf '%-5s %-6s %-22s %9s %10s %7s\n' "$r" "$s" "ucx tag_bw" "$ugb" "$urate" ""
		for b in "${BUILDS[@]}"; do
			"$XN_PY" - "$RUN/win.$r.${b//\//_}.json" "$(bytes "$s")" "$b" "$ugb" "$urate" \
				"$r" "$s" <<'EOF'
import json, sys
path, size, b, ugb, urate, r, s = sys.argv[1:]
for line in open(path):
    d = json.loads(line)
    if d["size"] != int(size):
        continue
    ops = d["gbps"] * 1e9 / d["size"]
    ratio = d["gbps"] / float(ugb) if float(ugb) else 0
    print("%-5s %-6s %-22s %9.3f %10.0f %7.2f  p50 %.0f p99 %.0f us" % (
        r, s, b[-14:] + " " + d["kind"], d["gbps"], ops, ratio, d["us_p50"], d["us_p99"]))
EOF
		done
	done
	for b in "${BUILDS[@]}"; do
		"$XN_PY" - "$RUN/win.$r.${b//\//_}.json" "$RUN/peers.$r.${b//\//_}".{0,1}.json \
			"$RUN/syscr.$r.${b//\//_}".{0,1} "$b" "$r" "$RUN/cpu.$r.${b//\//_}".{0,1} \
			"$(getconf CLK_TCK)" <<'EOF'
import json, sys
win, p0, p1, s0, s1, b, r, c0, c1, hz = sys.argv[1:]
rows = [json.loads(line) for line in open(win)]
ops = sum(d.get("ops", 0) for d in rows) or 1
gb = sum(d.get("ops", 0) * d["size"] for d in rows) / 1e9
try:
    cpu = [int(open(c).read()) / float(hz) for c in (c0, c1)]
    print("%-5s %-6s %-22s owner %.3f, opener %.3f CPU s per GB moved (%.2f GB)" % (
        r, "", b[-14:] + " cpu/GB", cpu[0] / gb, cpu[1] / gb, gb))
except (OSError, ValueError, ZeroDivisionError):
    pass
out = []
for name, path, spath in (("owner", p0, s0), ("opener", p1, s1)):
    try:
        syscr = "%.2f" % (int(open(spath).read()) / ops)
    except (OSError, ValueError):
        syscr = "-"
    try:
        p = json.load(open(path))["peers"][0]
        peer = "%.2f (%.2f fills)" % (p["socket_reads"] / ops, p["read_ahead_fills"] / ops)
    except (OSError, ValueError, KeyError, IndexError):
        peer = "-"
    out.append("%s %s, peer sockets %s" % (name, syscr, peer))
print("%-5s %-6s %-22s %s" % (r, "", b[-14:] + " reads/op", "; ".join(out)))
EOF
	done
done
