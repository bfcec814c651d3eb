#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench-serving.sh (`make bench-serving`): disaggregated prefill -> decode between two daemons in
# two network namespaces (scripts/netns.sh), the KV cache of each request moved as one pairing
# (client/xferbench_serve.c): Poisson arrivals at --load (0.6) of the link, prompt lengths
# log-normal (median 128 tokens, sigma 1.2, cut at 2048), per-layer K and V descriptors of a
# 7B-class model (32 layers, 8 KiB per token per layer for each of K and V: 512 KiB a token).
# The link is iperf3's single stream on the same veth, measured in the same run (before and
# after; the mean). Prints p50/p99 latency (arrival to the decode side's COMPLETE) beside the
# bytes/link time and beside a perfectly shared link simulated on the same arrivals; target:
# p99 within 1.2x the shared link's p99. Every request's bytes are checked (stamps on every
# block, every 8th request in full).
# Two models, the same arrivals and sizes, one after the other on the same daemons: pairing (a
# writable + write per request) and windows (the decode buffer exposed once as a window that the
# prefill side opened once; each request one batch of puts, one per block, tagged; done when the
# decode side has been notified of every block).
#
# Beside the shared link it prints the same link serving one request at a time (FIFO): what one
# window handle's in-order notifications allow at best.
#
# Options: --seconds S (arrivals for S s, 60, per model), --load F (0.6), --connections N
# (peer_connections, 2), --model pairing|windows|both (both), --handles N[,N...] (windows: the
# prefill side's handles of the window, a run per value, 1), --builds DIR[,DIR...] (each build's
# daemons in turn on the same rig and arrivals: an A/B in one run; default $BUILD), --trace
# PREFIX (a line per request in PREFIX.RUN.MODEL.HANDLES), --json FILE.
# Needs root (namespaces), iperf3.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build}
export BUILD

SECS=60
LOAD=0.6
CONNS=2
MODELS="pairing windows"
HANDLES=1
BUILDS=
TRACE=
JSON_OUT=
while [ $# -gt 0 ]; do
	case $1 in
	--seconds) SECS=$2; shift 2 ;;
	--load) LOAD=$2; shift 2 ;;
	--connections) CONNS=$2; shift 2 ;;
	--model)
		case $2 in
		both) MODELS="pairing windows" ;;
		pairing | windows) MODELS=$2 ;;
		*) echo "bench-serving.sh: --model is pairing, windows or both" >&2; exit 2 ;;
		esac
		shift 2
		;;
	--handles) HANDLES=$2; shift 2 ;;
	--builds) BUILDS=$2; shift 2 ;;
	--trace) TRACE=$2; shift 2 ;;
	--json) JSON_OUT=$2; shift 2 ;;
	-h | --help)
		sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "$0"
		exit 0
		;;
	*)
		echo "bench-serving.sh: unknown option '$1' (try --help)" >&2
		exit 2
		;;
	esac
done

BUILDS=${BUILDS:-$BUILD}
for bd in ${BUILDS//,/ }; do
	for b in xferd xferctl xferbench_serve; do
		[ -x "$bd/$b" ] || {
			echo "bench-serving.sh: missing $bd/$b; run 'make'" >&2
			exit 1
		}
	done
done
command -v iperf3 >/dev/null 2>&1 || {
	echo "bench-serving.sh: iperf3 is not installed (scripts/install-deps.sh)" >&2
	exit 1
}

# shellcheck source=scripts/cluster.sh
. scripts/cluster.sh
xc_rig_up bench-serving.sh
A1=$(xn_addr 1)
IPORT=$(($(xn_port 1) + 2000))
[ "$(xn_mode)" = loopback ] && IPORT=$(xn__free_port "$IPORT")
xn_spawn 1 "$RUN/iperf3.log" iperf3 -s -B "$A1" -p "$IPORT"
xn_wait_tcp 0 "$A1" "$IPORT" 10 || {
	echo "bench-serving.sh: iperf3 server did not come up" >&2
	exit 1
}

# iperf3 single stream node 0 -> node 1, bytes/s.
link_Bps()
{
	xn_exec 0 timeout 60 iperf3 -c "$A1" -p "$IPORT" -t 5 -O 1 -J |
		"$XN_PY" -c 'import json,sys; print("%.0f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8))'
}

echo "bench-serving: mode $(xn_mode), $(nproc) CPUs; iperf3 single stream (before) ..."
L1=$(link_Bps)
echo "peer_connections $CONNS; prefill = node 0, decode = node 1; link $L1 B/s;" \
	"$SECS s of arrivals at load $LOAD ..."
# One build's daemons on both nodes, each model (and windows per --handles) on them.
run_build()
{
	local m h hs n=0
	BUILD=$1
	XC_PEER_CONNECTIONS=$CONNS xc_start_all || exit 1
	for m in $MODELS; do
		hs=1
		[ "$m" = windows ] && hs=${HANDLES//,/ }
		for h in $hs; do
			n=$((n + 1))
			if ! "$BUILD/xferbench_serve" --passive "$(xc_sock 1)" \
				--active "$(xc_sock 0)" --link-Bps "$L1" --load "$LOAD" \
				--seconds "$SECS" --model "$m" --json --handles "$h" \
				${TRACE:+--trace "$TRACE.$2.$m.$h"} >"$RUN/one.json" \
				2>"$RUN/serve.err"; then
				echo "bench-serving.sh: $BUILD/xferbench_serve --model $m" \
					"--handles $h failed:" >&2
				cat "$RUN/serve.err" >&2
				exit 1
			fi
			sed "s|^{|{\"build\":\"$BUILD\",|" "$RUN/one.json" >>"$RUN/serve.json"
		done
	done
	xc_stop_all || {
		echo "bench-serving.sh: a daemon did not exit 0 on SIGTERM" >&2
		exit 1
	}
}
i=0
for bd in ${BUILDS//,/ }; do
	i=$((i + 1))
	echo "xferd of $bd on both nodes (run $i) ..."
	run_build "$bd" "$i"
done
echo "iperf3 (after) ..."
L2=$(link_Bps)

"$XN_PY" - "$RUN/serve.json" "$L1" "$L2" "$JSON_OUT" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]).read().split("\n") if l.strip()]
l1, l2 = float(sys.argv[2]), float(sys.argv[3])
print()
print(f"link (iperf3 1 stream): {l1 / 1e9:.3f} GB/s before, {l2 / 1e9:.3f} GB/s after; the runs used"
      f" the first")
out = {"link_Bps_before": l1, "link_Bps_after": l2, "runs": []}
for r in runs:
    print()
    how = f", {r['handles']} handle(s)" if r['model'] == 'windows' else ''
    print(f"{r['requests']} requests ({r['model']}{how}, {r['build']}), offered load {r['offered_load']:.2f},"
          f" KV sizes p50 {r['mib_p50']:.0f} MiB, p99 {r['mib_p99']:.0f} MiB")
    print(f"{'latency ms':<24} {'p50':>9} {'p99':>9}")
    print(f"{'xferd ' + r['model']:<24} {r['ms_p50']:9.1f} {r['ms_p99']:9.1f}")
    print(f"{'shared link (simulated)':<24} {r['shared_ms_p50']:9.1f} {r['shared_ms_p99']:9.1f}")
    print(f"{'bytes / link':<24} {r['size_ms_p50']:9.1f} {r['size_ms_p99']:9.1f}")
    print(f"{'one at a time (sim.)':<24} {r['fifo_ms_p50']:9.1f} {r['fifo_ms_p99']:9.1f}")
    print(f"{r['pool_waits']} requests were submitted more than 1 ms after they arrived (the 3 GiB"
          f" buffers full, or the client in an earlier request's call), {r['pool_wait_ms']:.0f} ms"
          f" in all: counted in their latency")
    ratio = r['ms_p99'] / r['shared_ms_p99'] if r['shared_ms_p99'] else 0
    print(f"p99 / shared-link p99: {ratio:.2f}x (target <= 1.2x); p50 / shared-link p50:"
          f" {r['ms_p50'] / r['shared_ms_p50'] if r['shared_ms_p50'] else 0:.2f}x")
    r["p99_over_shared"] = ratio
    out["runs"].append(r)
if sys.argv[4]:
    json.dump(out, open(sys.argv[4], "w"), indent=1)
PY
