#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `make bench`: start a private xferd, measure its local transport against memcpy and the latency
# of a small operation with xferbench, stop the daemon. Extra arguments go to xferbench
# (e.g. --max 64M, --iters 3). PY_REF=1: the Python bench also times the C library's own calls
# interleaved with its rounds (xferbench.py --ref).
#
# The Python client (client/python) is compared with the C one over PY_ROUNDS rounds (default 5)
# on the same daemon. In each round both processes run at once but in lockstep: two pipes pass
# a turn between them (`--turns`), a process works only while it holds it and passes it after
# every round of every size, so the two never run at the same time, yet their transfers of a
# size come within milliseconds of each other. Who starts swaps every round. The summary gives
# per client the median of the rounds' medians, their ratio and the spread of the per-round
# ratios. Why lockstep: one 16 MiB copy runs at 11-18 GB/s from one second to the next on the
# 2-vCPU VM (same buffers), so two processes run one after the other drifted apart by more than
# the 5% target (single rounds' ratios 0.66-1.48, nine rounds' medians still 0.88-0.97x);
# turns put that drift on both alike. What is timed is unchanged.
#
# PY_LOOP (comma-separated, default asyncio): the event loops the Python client runs on, each
# with rounds and a summary of its own (the C client runs its rounds again beside each):
# asyncio's own loop, the default of any asyncio program, and uvloop (Debian python3-uvloop),
# what the servers of vLLM and SGLang run. PY_LOOP=asyncio,uvloop measures both.
#
# Both clients also print in-flight rows, a separate measure beside (never instead of) the
# sequential ones above: --depth N (default 4; give it here, it goes to both) pairings of a size
# at once, a new one started as one ends, 2N per round on slices of their own, time = the
# round's first offer to its last end. C takes the library's events on one thread, Python one
# event loop with N tasks. They take turns like the sequential rounds, and the summary gives
# them their own ratios and per-round spreads (xferbench.py --summary).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/xferd-tmp.sh

ROUNDS=${PY_ROUNDS:-5}
case $ROUNDS in '' | *[!0-9]* | 0) echo "$0: PY_ROUNDS must be a number >= 1, not '$ROUNDS'" >&2; exit 2 ;; esac
IFS=, read -ra LOOPS <<<"${PY_LOOP:-asyncio}"
for loop in "${LOOPS[@]}"; do
	case $loop in asyncio | uvloop) ;; *) echo "$0: PY_LOOP names asyncio or uvloop, not '$loop'" >&2; exit 2 ;; esac
done

xferd_tmp_start
echo "bench: $BUILD/xferd (pid $XFERD_PID) on $XFERD_SOCK"

PY_BENCH=client/python/examples/xferbench.py
have_py=0
/usr/bin/python3 -c 'import numpy' 2>/dev/null && have_py=1

# c_alone: the C bench by itself (no Python with numpy here).
c_alone()
{
	"$BUILD/xferbench" bench --socket "$XFERD_SOCK" "${ARGS[@]}"
}

# lockstep_round LOOP ROUND: the C and the Python client (on event loop LOOP) at once, taking
# turns (see the top); their outputs go to $XFERD_TMP/c.LOOP.ROUND and py.LOOP.ROUND(.json).
# Returns non-zero if either failed.
# (Opening order: C opens to_c for reading, Python for writing, then both open to_py; a FIFO
# open waits for the other end, and the opposite order would wait forever. Either one's exit
# is EOF to the other, which then runs on alone.)
lockstep_round()
{
	local loop=$1 r=$2 cfirst=() pyfirst=() cpid pypid rc=0
	if ((r % 2)); then cfirst=(--turn-first); else pyfirst=(--turn-first); fi
	rm -f "$XFERD_TMP/to_c" "$XFERD_TMP/to_py"
	mkfifo "$XFERD_TMP/to_c" "$XFERD_TMP/to_py"
	"$BUILD/xferbench" bench --socket "$XFERD_SOCK" --turns 3,4 "${cfirst[@]}" "${ARGS[@]}" \
		3<"$XFERD_TMP/to_c" 4>"$XFERD_TMP/to_py" >"$XFERD_TMP/c.$loop.$r" &
	cpid=$!
	XFERD_LIBRARY="$BUILD/libxferclient.so.1" /usr/bin/python3 "$PY_BENCH" --socket "$XFERD_SOCK" \
		--loop "$loop" --json "$XFERD_TMP/py.$loop.$r.json" ${PY_REF:+--ref} --turns 3,4 \
		"${pyfirst[@]}" "${ARGS[@]}" 4>"$XFERD_TMP/to_c" 3<"$XFERD_TMP/to_py" >"$XFERD_TMP/py.$loop.$r" &
	pypid=$!
	wait "$cpid" || rc=1
	wait "$pypid" || rc=1
	return "$rc"
}

# show_round LOOP ROUND: the first round whole, later rounds only their size rows (the in-flight
# ones end "in flight").
show_round()
{
	local loop=$1 r=$2
	if [ "$r" -eq 1 ]; then
		echo
		echo "== the Python client on $loop's event loop"
		cat "$XFERD_TMP/c.$loop.1"
		echo
		cat "$XFERD_TMP/py.$loop.1"
	else
		echo
		# (|| true: with --max below 1 MiB a round has no size rows, only latency.)
		{ grep -E '^ +[0-9]+ [KMG]iB ' "$XFERD_TMP/c.$loop.$r" || true; } |
			sed "s/^/round $r C: /"
		{ grep -E '^ +[0-9]+[KMG] ' "$XFERD_TMP/py.$loop.$r" || true; } |
			sed "s/^/round $r Python ($loop): /"
	fi
}

# summarize LOOP: the rounds of LOOP side by side (xferbench.py --summary).
summarize()
{
	local loop=$1 cs=() pys=() r
	for ((r = 1; r <= ROUNDS; r++)); do
		cs+=("$XFERD_TMP/c.$loop.$r")
		pys+=("$XFERD_TMP/py.$loop.$r.json")
	done
	/usr/bin/python3 "$PY_BENCH" --summary --c "${cs[@]}" --py "${pys[@]}"
}

ARGS=("$@")
rc=0
if [ "$have_py" -eq 0 ]; then
	echo "bench: no numpy for /usr/bin/python3: the C client alone"
	c_alone || rc=1
fi
for loop in "${LOOPS[@]}"; do
	for ((r = 1; rc == 0 && have_py == 1 && r <= ROUNDS; r++)); do
		lockstep_round "$loop" "$r" || rc=1
		show_round "$loop" "$r"
	done
done
for loop in "${LOOPS[@]}"; do
	if [ "$rc" -eq 0 ] && [ "$have_py" -eq 1 ]; then
		summarize "$loop" || rc=1
	fi
done

if ! xferd_tmp_stop && [ "$rc" -eq 0 ]; then
	rc=1
fi
exit "$rc"
