#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench-rdma.sh: xferd's RDMA throughput beside perftest's, between the same two Soft-RoCE
# devices, in one boot. Runs INSIDE the VM of scripts/rxe-vm.sh (`make bench-rdma`):
#
#   1. ib_read_bw and ib_write_bw, client on rxe0 (10.77.0.1), server on rxe1 (10.77.0.2),
#      -x <RoCE v2 GID index> -F, DUR seconds per size;
#   2. two xferd (node 0: rxe0, node 1: rxe1, --transport rdma, "require_rdma": true) and
#      $BUILD/tests/rdma_bench: readable/writable on node 1, read/write from node 0, so that
#      node 0 issues the RDMA READs and WRITEs exactly as perftest's client does; buffers
#      registered once, each transfer the full API round (create, claim, move, both COMPLETE,
#      release); once with one transfer at a time, once with DEPTH workers each running its own
#      transfers, so that DEPTH are in flight (as several requests of an engine move KV blocks
#      at once; perftest itself keeps up to 128 requests in flight);
#   the two alternate per size (perftest read, xferd read, next size, ...), so that a drift in
#   host load hits both alike; both measure the steady rate the same way: perftest's -D mode
#   leaves out the first and last DUR/4 seconds (whole seconds, as perftest computes it), and
#   rdma_bench -m leaves out the same margins (its start, all workers claiming at once, and its
#   drain, fewer than DEPTH in flight after the end; see tests/rdma/rdma_bench.c);
#   3. windows (PROTOCOL.md §5.1): $BUILD/xferbench_net win, a window of node 1's buffer opened
#      on node 0, WIN_DEPTH (16) one-sided gets (beside read) and puts (beside write) in flight
#      for DUR seconds (its rate over the whole run, no margins: a little pessimistic), once
#      with one request per op and once WIN_BATCH (8) per op.batch request (one end event each);
#      with WIN_DEPTHS (e.g. "1 8 32") also at those depths: MiB/s and each op's p50/p99 (us,
#      from its submission to its end event) and us/op, to show whether per-op cost stays flat;
#   4. with CLAIM_LOAD=1, the claim round trip of a 4 KiB pairing (xferbench_net lat, LAT_ITERS
#      of each kind) while 16 MiB pairings, 4 in flight, load the queue pairs (xferbench_net
#      pipe), beside the same with the link idle;
#   5. a table: MiB/s of each and the ratio xferd / perftest.
#
# Soft-RoCE under TCG is a functional test bed: absolute numbers are low (5-30 MiB/s) and vary
# with host load by 2x; only the ratios measured in one boot mean anything.
# perftest busy-polls its completion queue (its -e event mode works neither with -D nor for
# WRITE); on the guest's 2 vCPUs the two polling processes compete with rdma_rxe's own
# tasklets, while xferd sleeps on its completion channel. Read its numbers with that in mind.
# Environment: BUILD (default build), SIZES (bytes, default 64K..16M), DUR (seconds per
# measurement, default 5: 3 s measured between 1 s margins), DEPTH (concurrent transfers of the
# second xferd run, default 8), REPS (rounds over every size, default 3: the table shows each
# figure's median, and each ratio is the median of the ratios within a round), PERFTEST_ARGS
# (extra perftest options, default none), WIN_DEPTHS, CLAIM_LOAD and LAT_ITERS (above), ROWS
# (all, or win: perftest and the window rows only, e.g. to compare two builds' per-op costs in
# one boot), WIN_BATCH (8).
# MODE=files runs only the comparison of file regions with memory (below; FILE_SIZES, default
# 16, 64 and 256 MiB; FILE_KINDS, default "read write"); STAGING_SIZE sets both daemons'
# rdma_staging_size (default: theirs, 4 MiB); BASE_BUILD (a build directory the guest can see,
# e.g. one of main's) adds that build's daemons, measured alternating with this one's (A/B):
# with MODE=files in the file rows, otherwise in every xferd row (base-read, base-write).
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
BUILD=${BUILD:-build}
SIZES=${SIZES:-65536 262144 1048576 4194304 16777216}
DUR=${DUR:-5}
MARGIN=$((DUR / 4)) # perftest's own margin for -D DUR (integer seconds)
DEPTH=${DEPTH:-8}
REPS=${REPS:-3}
WIN_DEPTH=${WIN_DEPTH:-16}
WIN_DEPTHS=${WIN_DEPTHS:-}
WIN_BATCH=${WIN_BATCH:-8} # the batched window column and the WIN_DEPTHS rows: ops per op.batch
CLAIM_LOAD=${CLAIM_LOAD:-0}
LAT_ITERS=${LAT_ITERS:-50}
PERFTEST_ARGS=${PERFTEST_ARGS:-}
ROWS=${ROWS:-all} # win: perftest and the window rows only
: "${RXE_DEV0:?run inside scripts/rxe-vm.sh (make bench-rdma)}"
for b in xferd xferctl xferbench_net tests/rdma_bench; do
	[ -x "$BUILD/$b" ] || { echo "bench-rdma: $BUILD/$b is missing: build first" >&2; exit 1; }
done
command -v ib_write_bw >/dev/null || { echo "bench-rdma: perftest is not installed" >&2; exit 1; }

D=$(mktemp -d /dev/shm/xfbench.XXXXXX)
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$D"
}
trap cleanup EXIT

# wait_tcp PORT PID: until something listens on TCP PORT (perftest's out-of-band exchange);
# 1 if PID exits first or 30 s pass.
wait_tcp() {
	local hex l i pid=$2
	printf -v hex ':%04X' "$1"
	for ((i = 0; i < 300; i++)); do
		kill -0 "$pid" 2>/dev/null || return 1
		while read -r l; do
			# shellcheck disable=SC2086
			set -- $l
			[[ $2 == *"$hex" && $4 == 0A ]] && return 0
		done </proc/net/tcp
		sleep 0.1
	done
	return 1
}

# counters: rdma_rxe's loss and retry counters of both devices (they explain slow runs: each
# retry waits for a timer or a NAK round trip).
counters() {
	local d f v out=
	for d in "$RXE_DEV0" "$RXE_DEV1"; do
		for f in /sys/class/infiniband/"$d"/ports/1/hw_counters/{send_err,rcvd_seq_err,completer_retry_err,retry_exceeded_err,out_of_seq_request,duplicate_request}; do
			read -r v <"$f" 2>/dev/null || continue
			[ "$v" = 0 ] || out+=" $d.${f##*/}=$v"
		done
	done
	echo "${out:- none}"
}

# retries: the sum of both devices' retry counters (completer retries and duplicate requests),
# printed per measurement as the growth since the last call: a run that lost packets shows it.
LAST_RETRIES=0
retries() {
	local d f v sum=0 delta
	for d in "$RXE_DEV0" "$RXE_DEV1"; do
		for f in /sys/class/infiniband/"$d"/ports/1/hw_counters/{completer_retry_err,duplicate_request}; do
			read -r v <"$f" 2>/dev/null && sum=$((sum + v))
		done
	done
	delta=$((sum - LAST_RETRIES))
	LAST_RETRIES=$sum
	echo "$delta retries"
}

# perf TOOL SIZE: one perftest run; appends to PERF[TOOL.SIZE] (MiB/s; "-" if it failed). The
# line says how busy the guest's vCPUs were, as xferd's lines do (one boot at host load 3-4:
# ib_write_bw 50-74%, ib_read_bw 72-90%, xferd's window rows 60-76%): a run that left a vCPU
# idle was not bound by the guest's CPU.
perf() {
	local tool=$1 s=$2 sp rc v c0
	retries >/dev/null
	# shellcheck disable=SC2086
	"$tool" -d "$RXE_DEV1" -x "$RXE_GID1" -F $PERFTEST_ARGS -s "$s" -D "$DUR" >"$D/srv" 2>&1 &
	sp=$!
	if ! wait_tcp 18515 "$sp"; then
		echo "bench-rdma: $tool server did not start: $(tail -n 3 "$D/srv" | tr '\n' ' ')" >&2
		kill "$sp" 2>/dev/null
		wait "$sp"
		return
	fi
	c0=$(cpu_ticks)
	# shellcheck disable=SC2086
	timeout 120 "$tool" -d "$RXE_DEV0" -x "$RXE_GID0" -F $PERFTEST_ARGS -s "$s" -D "$DUR" "$RXE_IP1" >"$D/cli" 2>&1
	rc=$?
	wait "$sp"
	# the line after "#bytes ...": bytes iterations peak average msgrate (MB/sec = 2^20 B/s)
	v=$(awk 'f { print $4; exit } /^ *#bytes/ { f = 1 }' "$D/cli")
	if [ "$rc" = 0 ] && [ -n "$v" ]; then
		PERF[$tool.$s]+=" $v"
		echo "# $tool $s: $v MiB/s ($(retries), vCPUs $(busy_between "$c0" "$(cpu_ticks)")% busy)"
	else
		PERF[$tool.$s]+=" -"
		echo "bench-rdma: $tool -s $s failed (exit $rc): $(tail -n 3 "$D/cli" | tr '\n' ' ')" >&2
	fi
}

# cpu_ticks: the guest's busy and total CPU ticks so far ("BUSY TOTAL", from /proc/stat).
cpu_ticks() {
	local _cpu u n s idle iow irq sirq rest
	read -r _cpu u n s idle iow irq sirq rest </proc/stat
	echo "$((u + n + s + irq + sirq)) $((u + n + s + idle + iow + irq + sirq))"
}

# busy_between TICKS0 TICKS1: the percentage of CPU time the guest was busy between two cpu_ticks.
busy_between() {
	awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ");
		t = y[2] - x[2]; printf "%.0f", (t > 0 ? 100 * (y[1] - x[1]) / t : 0) }'
}

# xf KIND SIZE DEPTH [-f DIR]: one rdma_bench run; appends to XF[KIND.SIZE.DEPTH] (MiB/s; "-" if
# failed); with -f DIR the source is a file there and KIND is recorded as KIND-file. The line
# also says how busy the guest's vCPUs were over the whole run (rxe's tasklets, both daemons, the
# copies): a run that is CPU-bound under TCG shows ~100%.
xf() {
	local l k=$XF_TAG$1 c0 c1 busy
	[ $# -gt 3 ] && k=$XF_TAG$1-file
	retries >/dev/null
	c0=$(cpu_ticks)
	if ! l=$(timeout 600 "$BUILD/tests/rdma_bench" -d "$3" -m "$MARGIN" "${@:4}" "$D/${XF_NODE}1.sock" "$D/${XF_NODE}0.sock" "$DUR" "$1" "$2" 2>"$D/xf.err"); then
		echo "bench-rdma: rdma_bench -d $3 ${*:4} $1 $2 failed: $(tail -n 3 "$D/xf.err" | tr '\n' ' ')" >&2
		XF[$k.$2.$3]+=" -"
		return
	fi
	c1=$(cpu_ticks)
	busy=$(busy_between "$c0" "$c1")
	# xferd KIND SIZE depth D iters N seconds S MiB/s X transport T
	# shellcheck disable=SC2086
	set -- $l
	XF[$XF_TAG$2.$3.$5]+=" ${11}"
	echo "# ${XF_TAG}xferd $2 $3 depth $5: ${11} MiB/s ($7 transfers, rate over a $9 s window, transport ${13}, $(retries), vCPUs ${busy}% busy)"
	[ "${13}" = rdma ] || echo "bench-rdma: xferd $2 $3 went over '${13}', not rdma" >&2
}

# xw SIZE [BATCH]: one xferbench_net win run (gets, then puts), WIN_DEPTH in flight, one request
# per op or BATCH per op.batch request; appends to XW[get|put.SIZE.BATCH] (MiB/s). With XF_NODE=b
# (BASE_BUILD's daemons) to XW[base-get|base-put...]. The line says how busy the guest's vCPUs
# were and how many retries both devices counted meanwhile.
xw() {
	local l k b=${2:-1} t=${XF_TAG} c0 c1
	retries >/dev/null
	c0=$(cpu_ticks)
	if ! l=$(timeout 300 "$BUILD/xferbench_net" win --passive "$D/${XF_NODE}1.sock" --active "$D/${XF_NODE}0.sock" \
		--sizes "$1" --depths "$WIN_DEPTH" --batch "$b" --seconds "$DUR" --json 2>"$D/xw.err"); then
		echo "bench-rdma: xferbench_net win $1 --batch $b failed: $(tail -n 3 "$D/xw.err" | tr '\n' ' ')" >&2
		XW[${t}get.$1.$b]+=" -" XW[${t}put.$1.$b]+=" -"
		return
	fi
	c1=$(cpu_ticks)
	for k in get put; do
		XW[$t$k.$1.$b]+=" $(grep "\"kind\":\"$k\"" <<<"$l" | sed 's/.*"gbps":\([0-9.]*\).*/\1/' |
			awk '{ printf "%.1f", $1 * 1e9 / 1048576 }')"
	done
	echo "# ${t}xferd window get/put $1 depth $WIN_DEPTH batch $b: ${XW[${t}get.$1.$b]##* } / ${XW[${t}put.$1.$b]##* } MiB/s ($(retries), vCPUs $(busy_between "$c0" "$c1")% busy)"
}

# xwd SIZE: window gets and puts at each of WIN_DEPTHS: MiB/s, p50/p99 per op, us per op.
xwd() {
	local l
	if ! l=$(timeout 600 "$BUILD/xferbench_net" win --passive "$D/n1.sock" --active "$D/n0.sock" \
		--sizes "$1" --depths "${WIN_DEPTHS// /,}" --batch "$WIN_BATCH" --seconds "$DUR" --json 2>"$D/xw.err"); then
		echo "bench-rdma: xferbench_net win $1 (depths $WIN_DEPTHS) failed: $(tail -n 3 "$D/xw.err" | tr '\n' ' ')" >&2
		return
	fi
	sed -n 's/.*"kind":"\([a-z]*\)","size":\([0-9]*\),"depth":\([0-9]*\),\("batch":[0-9]*,\)\{0,1\}"ops":\([0-9]*\),"gbps":\([0-9.]*\),"us_p50":\([0-9.]*\),"us_p99":\([0-9.]*\),"us_per_op":\([0-9.]*\).*/\1 \2 \3 \5 \6 \7 \8 \9/p' <<<"$l" |
		while read -r k sz dp ops gbps p50 p99 usop; do
			awk -v k="$k" -v s="$sz" -v d="$dp" -v o="$ops" -v g="$gbps" -v a="$p50" -v b="$p99" -v u="$usop" \
				'BEGIN { printf "win-depth %-4s %9s %5s %7s %9.1f %10.0f %10.0f %9.0f\n", k, s, d, o, g * 1e9 / 1048576, a, b, u }'
		done >"$D/wd.$1"
	sed 's/^/# /' "$D/wd.$1"
}

# claim_lat LABEL: the claim round trip of 4 KiB pairings (xferbench_net lat), medians and p99.
claim_lat() {
	local l
	if ! l=$(timeout 600 "$BUILD/xferbench_net" lat --passive "$D/n1.sock" --active "$D/n0.sock" \
		--lat-iters "$LAT_ITERS" --json 2>"$D/lat.err"); then
		echo "bench-rdma: xferbench_net lat ($1) failed: $(tail -n 3 "$D/lat.err" | tr '\n' ' ')" >&2
		return
	fi
	sed -n 's/.*"kind":"\([a-z]*\)".*"us_median":\([0-9.]*\),"us_p99":\([0-9.]*\),"us_claim_median":\([0-9.]*\),"us_claim_p99":\([0-9.]*\).*/\1 \2 \3 \4 \5/p' <<<"$l" |
		while read -r k med p99 cm cp; do
			printf 'claim %-10s %-5s claim p50 %8.0f us  p99 %8.0f us   (whole 4 KiB pairing p50 %8.0f us  p99 %8.0f us)\n' \
				"$1" "$k" "$cm" "$cp" "$med" "$p99"
		done | tee -a "$D/claims"
}

# claim_under_load: the claim round trip idle, then while 16 MiB pairings (4 in flight) run.
claim_under_load() {
	local lp
	claim_lat idle
	"$BUILD/xferbench_net" pipe --passive "$D/n1.sock" --active "$D/n0.sock" --sizes 16M \
		--depths 4 --seconds 600 >"$D/load.out" 2>&1 &
	lp=$!
	sleep 3
	claim_lat loaded
	kill "$lp" 2>/dev/null
	wait "$lp" 2>/dev/null
}

declare -A PERF XF XW
echo "# $(nproc) vCPUs, kernel $(uname -r), RoCE MTU $(ibv_devinfo -d "$RXE_DEV0" | awk '/active_mtu/{print $2; exit}')"
echo "# perftest${PERFTEST_ARGS:+ $PERFTEST_ARGS}: client $RXE_DEV0 ($RXE_IP0) -> server $RXE_DEV1 ($RXE_IP1)"
echo "# xferd: readable/writable on node 1 ($RXE_DEV1), read/write from node 0 ($RXE_DEV0), 1 and $DEPTH in flight"
echo "# each measurement ~${DUR} s, the rate taken between ${MARGIN} s margins; perftest and xferd alternate per size, so that host load drifts hit both alike"

# rdma_ack_timeout 19: see tests/rdma/run.sh (spurious retransmissions under load stall rxe 6.1)
echo '{"keepalive_ms": 1000, "keepalive_timeout_ms": 10000, "require_rdma": true,
      "rdma_ack_timeout": 19'"${STAGING_SIZE:+, \"rdma_staging_size\": $STAGING_SIZE}"'}' >"$D/c.json"
# Both nodes share a cluster key, as a real deployment does: RDMA peers authenticate.
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$D/peer.key")
# start_pair NAME DIR PORT: the two daemons of DIR/xferd, sockets $D/NAME0.sock and NAME1.sock.
start_pair() {
	local n dev ip i
	for n in 0 1; do
		dev=RXE_DEV$n ip=RXE_IP$n
		"$2/xferd" --socket "$D/$1$n.sock" --foreground --log-level warn --config "$D/c.json" \
			--transport rdma --rdma-device "${!dev}" --listen "${!ip}:$3" \
			--peer-key "$D/peer.key" 2>"$D/$1$n.log" &
		PIDS+=($!)
	done
	for n in 0 1; do
		for ((i = 0; i < 300; i++)); do
			"$BUILD/xferctl" --socket "$D/$1$n.sock" status >/dev/null 2>&1 && break
			sleep 0.1
		done
	done
}
XF_NODE=n XF_TAG=
start_pair n "$BUILD" 7700
# MODE=files with BASE_BUILD (another build directory, e.g. of main): its daemons too, on port
# 7701, measured alternating with this build's in the same boot (A/B).
# Without MODE=files: BASE_BUILD's rows too, alternating with this build's.
[ -n "${BASE_BUILD:-}" ] && start_pair b "$BASE_BUILD" 7701

# median LIST: the median of the numbers in LIST ("-" entries left out), or "-" if none
median() {
	# shellcheck disable=SC2086 # the list is split on purpose
	printf '%s\n' $1 | grep -Ev '^(-|)$' | sort -g |
		awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# ratio XS PS: the median of the per-round ratios X/P as "0.93x" ("-" when no round has both)
ratio() {
	local -a xs ps
	local i r=
	read -ra xs <<<"$1"
	read -ra ps <<<"$2"
	for ((i = 0; i < ${#xs[@]} && i < ${#ps[@]}; i++)); do
		if [ "${xs[i]}" = - ] || [ "${ps[i]}" = - ]; then continue; fi
		r+=" $(awk -v x="${xs[i]}" -v p="${ps[i]}" 'BEGIN { if (p > 0) printf "%.3f", x / p }')"
	done
	r=$(median "$r")
	if [ "$r" = - ]; then echo -; return; fi
	awk -v r="$r" 'BEGIN { printf "%.2fx", r }'
}

# MODE=files: file regions over RDMA (PROTOCOL.md §10.5.1) beside memory, in this boot, one
# transfer at a time, alternating per size: "read" is a readable over node 1's file (the owner
# stages it: pread into a staging buffer, a window, node 0's RDMA READ) against one over
# node 1's memory; "write" is a write from node 0's file (node 0 stages: pread, RDMA WRITE)
# against one from its memory. Files are in /dev/shm (the page cache), destinations memory.
if [ "${MODE:-}" = files ]; then
	FILE_SIZES=${FILE_SIZES:-16777216 67108864 268435456}
	echo "# MODE=files: sizes $FILE_SIZES, each measurement ~${DUR} s (at least one transfer), $REPS round(s)"
	# Unmeasured: the first file transfer of each daemon maps and registers its staging pool
	# (once per daemon and device, like a connection's setup, not a transfer's cost).
	PAIRS=n
	[ -n "${BASE_BUILD:-}" ] && PAIRS="n b" && echo "# A/B: this build (new) and $BASE_BUILD (base), alternating per size, the first of each size taking turns"
	for p in $PAIRS; do
		"$BUILD/tests/rdma_bench" -f /dev/shm "$D/${p}1.sock" "$D/${p}0.sock" 1 both 1048576 >/dev/null 2>&1 ||
			echo "bench-rdma: the warm-up file transfers ($p) failed" >&2
	done
	for ((rep = 1; rep <= REPS; rep++)); do
		order=$PAIRS
		# shellcheck disable=SC2086 # split on purpose
		((rep % 2 == 0)) && order=$(printf '%s\n' $PAIRS | tac | xargs)
		for kind in ${FILE_KINDS:-read write}; do
			for s in $FILE_SIZES; do
				for p in $order; do
					XF_NODE=$p XF_TAG=
					[ "$p" = b ] && XF_TAG=base-
					xf "$kind" "$s" 1
					xf "$kind" "$s" 1 -f /dev/shm
				done
			done
		done
	done
	XF_NODE=n XF_TAG=
	echo "# rdma_rxe loss/retry counters (cumulative):$(counters)"
	for p in $PAIRS; do
		for n in 0 1; do
			[ -s "$D/$p$n.log" ] && sed "s/^/# node $n ($p) xferd log: /" "$D/$p$n.log"
			"$BUILD/xferctl" --socket "$D/$p$n.sock" --json devices | grep -o '"staging":{[^}]*}' | sed "s/^/# node $n ($p) /"
		done
	done
	printf '\n%-11s %10s %10s %10s %7s\n' "" size memory file ratio
	for tag in "" ${BASE_BUILD:+base-}; do
		for kind in ${FILE_KINDS:-read write}; do
			for s in $FILE_SIZES; do
				m=${XF[$tag$kind.$s.1]:-} f=${XF[$tag$kind-file.$s.1]:-}
				printf '%-11s %10s %10s %10s %7s\n' "$tag$kind" "$s" "$(median "$m")" "$(median "$f")" \
					"$(ratio "$f" "$m")"
			done
		done
	done
	echo "# MiB/s to remote memory, medians of $REPS round(s); file: the source is a file region${BASE_BUILD:+; base-: the daemons of $BASE_BUILD}"
	echo "# target (issue 15): file >= 0.9x memory at 16 MiB and above"
	exit 0
fi

for ((rep = 1; rep <= REPS; rep++)); do
	echo "# round $rep of $REPS"
	for kind in read write; do
		for s in $SIZES; do
			perf "ib_${kind}_bw" "$s"
			[ "$ROWS" = win ] && continue
			order=n
			[ -n "${BASE_BUILD:-}" ] && order="n b" && ((rep % 2 == 0)) && order="b n"
			for p in $order; do
				XF_NODE=$p XF_TAG=
				[ "$p" = b ] && XF_TAG=base-
				xf "$kind" "$s" 1
				xf "$kind" "$s" "$DEPTH"
			done
			XF_NODE=n XF_TAG=
		done
	done
	for s in $SIZES; do
		order=n
		[ -n "${BASE_BUILD:-}" ] && order="n b" && ((rep % 2 == 0)) && order="b n"
		for p in $order; do
			XF_NODE=$p XF_TAG=
			[ "$p" = b ] && XF_TAG=base-
			xw "$s"
			xw "$s" "$WIN_BATCH"
		done
		XF_NODE=n XF_TAG=
		[ -n "$WIN_DEPTHS" ] && xwd "$s"
	done
done
[ "$CLAIM_LOAD" = 1 ] && claim_under_load
echo "# rdma_rxe loss/retry counters (cumulative):$(counters)"
for n in 0 1; do
	[ -s "$D/n$n.log" ] && sed "s/^/# node $n xferd log: /" "$D/n$n.log"
done

printf '\n%-10s %9s %9s %9s %7s %9s %7s %9s %7s %9s %7s\n' "" size perftest "xferd d1" ratio \
	"xferd d$DEPTH" ratio "win d$WIN_DEPTH" ratio "b$WIN_BATCH" ratio
for kind in read write; do
	wk="put"
	[ "$kind" = read ] && wk="get"
	for s in $SIZES; do
		p=${PERF[ib_${kind}_bw.$s]:-} x1=${XF[$kind.$s.1]:-} xd=${XF[$kind.$s.$DEPTH]:-}
		w1=${XW[$wk.$s.1]:-} wb=${XW[$wk.$s.$WIN_BATCH]:-}
		printf '%-10s %9s %9s %9s %7s %9s %7s %9s %7s %9s %7s\n' "$kind" "$s" "$(median "$p")" \
			"$(median "$x1")" "$(ratio "$x1" "$p")" "$(median "$xd")" "$(ratio "$xd" "$p")" \
			"$(median "$w1")" "$(ratio "$w1" "$p")" "$(median "$wb")" "$(ratio "$wb" "$p")"
		[ -n "${BASE_BUILD:-}" ] || continue
		x1=${XF[base-$kind.$s.1]:-} xd=${XF[base-$kind.$s.$DEPTH]:-}
		w1=${XW[base-$wk.$s.1]:-} wb=${XW[base-$wk.$s.$WIN_BATCH]:-}
		printf '%-10s %9s %9s %9s %7s %9s %7s %9s %7s %9s %7s\n' "base-$kind" "$s" "$(median "$p")" \
			"$(median "$x1")" "$(ratio "$x1" "$p")" "$(median "$xd")" "$(ratio "$xd" "$p")" \
			"$(median "$w1")" "$(ratio "$w1" "$p")" "$(median "$wb")" "$(ratio "$wb" "$p")"
	done
done
echo "# MiB/s, medians of $REPS rounds; d1: one transfer at a time, d$DEPTH: $DEPTH in flight"
echo "# target (issue 4): at least 0.9x perftest for 1 MiB and larger"
echo "# win d$WIN_DEPTH: window gets beside read, puts beside write, $WIN_DEPTH in flight, one request each; b$WIN_BATCH: the same $WIN_BATCH per op.batch request"
echo "# target (issue 14): windows, 64 KiB with 16 in flight >= 0.8x perftest, 1 MiB and larger >= 0.95x"
[ -n "${BASE_BUILD:-}" ] && echo "# base-read / base-write: the same rows of $BASE_BUILD's daemons, alternating with this build's in the same boot"
if [ -n "$WIN_DEPTHS" ]; then
	printf '\n%-9s %-4s %9s %5s %7s %9s %10s %10s %9s\n' "" kind size depth ops MiB/s "p50 us" "p99 us" "us/op"
	cat "$D"/wd.* 2>/dev/null
	echo "# window ops at depths $WIN_DEPTHS (last round): p50/p99 from each op's submission to its end event"
fi
if [ -s "$D/claims" ]; then
	echo
	cat "$D/claims"
	echo "# claim: op.read/op.write call to the owner's CLAIM_OK (xferbench_net lat, $LAT_ITERS each); loaded: 16 MiB pairings, 4 in flight, on the same peer set"
fi
