#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Pairings across two daemons whose sockets have tiny buffers (tcp_wmem/tcp_rmem of 4-16 KiB
# set inside each namespace), so nearly every write of a DATA frame stops short, inside its
# header or its payload, and must resume at exactly that byte (tcp.c tx_sent), with the control
# frames of the other pairings (CLAIM, CLAIM_OK, DONE) waiting for the frame's end, never cut
# into it. Many pairings at once (32 in flight, 4 KiB .. 300 KiB), both directions, one call each
# and in batches of 8; xferbench_net stamps every operation and compares every slot byte for byte
# at the end, and a stream resumed at a wrong byte breaks the framing (the set fails, and the
# run with it: a coalescing writev that resumed one byte early, tried on branch pairs4-coalesce,
# failed here so). Then window gets and puts (PROTOCOL.md §10.7: WPUT, WGET, their DATA replies
# and WACKs, queued window frames written several to a writev) both ways at once over the same
# small buffers, bytes compared, and neither daemon may have logged a protocol error. Then both
# daemons hold no operation, region or fd more than before. In
# loopback mode (no namespaces) the buffers stay as they are (the host's): the run still
# passes through partial writes, less often.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
# shellcheck source=tests/cluster_suite.sh
. tests/cluster_suite.sh

NODES="0 1"
SIZES=4K,64K,100K,300K
T=30 # seconds for one xferctl call (lib.sh)

require_built
[ -x "$BUILD/xferbench_net" ] || abort_setup "$BUILD/xferbench_net is not built"
DATA=$(mktemp -d /tmp/xferd-partial.XXXXXX) || abort_setup "mktemp failed"
xn_up 2 >/dev/null || abort_setup "scripts/netns.sh could not make two nodes"
small=no
if [ "$(xn_mode)" = netns ]; then
	for n in $NODES; do
		xn_exec "$n" sysctl -qw net.ipv4.tcp_wmem="4096 8192 16384" \
			net.ipv4.tcp_rmem="4096 8192 16384" || abort_setup "sysctl in node $n failed"
	done
	small=yes
fi
for n in $NODES; do
	xc_start "$n" || abort_setup "node $n did not start"
done
take_baseline || abort_setup "no baseline"

# pipe NAME ARGS...: xferbench_net pipe from node 0's owner to node 1's claimer over SIZES.
pipe()
{
	local name=$1 out
	shift
	if ! out=$("$BUILD/xferbench_net" pipe --passive "$(xc_sock 0)" --active "$(xc_sock 1)" \
		--sizes "$SIZES" --depths 32 --seconds 0.4 "$@" 2>&1); then
		fail "$name" "$(tail -n 2 <<<"$out" | tr '\n' '|') / $(logtail 0) / $(logtail 1)"
	elif [ "$(grep -cE '^(read|write) ' <<<"$out")" -ne 8 ]; then
		fail "$name" "not every size and kind ran: $(tr '\n' '|' <<<"$out")"
	else
		ok "$name (socket buffers small: $small)"
	fi
}

pipe "32 pairings in flight, 4K..300K, one call each, bytes checked"
pipe "32 pairings in flight, 4K..300K, batches of 8, bytes checked" --batch 8 --batch-end
check_baseline "after the pairings"

# wins NAME ARGS...: xferbench_net win both ways at once (node 1 opens node 0's window and node 0
# node 1's), so that each connection carries WPUTs and WGETs one way and the DATA replies, WACKs
# and CANCELs the other, cut anywhere by the small buffers (tcp.c pconn_write_wframe() coalesces
# queued frames into one writev and resumes inside any of them; a reply's pieces and a put's
# stripes of 2 MiB go on every data connection). Every slot's bytes are compared at the end.
wins()
{
	local name=$1 out0 out1 rc0=0 rc1=0
	shift
	"$BUILD/xferbench_net" win --passive "$(xc_sock 0)" --active "$(xc_sock 1)" \
		--sizes "$WSIZES" --seconds 0.2 "$@" >"$DATA/win0" 2>&1 &
	local p0=$!
	"$BUILD/xferbench_net" win --passive "$(xc_sock 1)" --active "$(xc_sock 0)" \
		--sizes "$WSIZES" --seconds 0.2 "$@" >"$DATA/win1" 2>&1 || rc1=$?
	wait "$p0" || rc0=$?
	out0=$(<"$DATA/win0") out1=$(<"$DATA/win1")
	if [ "$rc0" -ne 0 ] || [ "$rc1" -ne 0 ]; then
		fail "$name" "exits $rc0 $rc1: $(tail -n 2 <<<"$out0$out1" | tr '\n' '|') / $(logtail 0) / $(logtail 1)"
	elif [ "$(cat "$DATA/win0" "$DATA/win1" | grep -cE '^(get|put) ')" -ne 12 ]; then
		fail "$name" "not every size and kind ran: $(tr '\n' '|' <<<"$out0$out1")"
	else
		ok "$name (socket buffers small: $small)"
	fi
}

WSIZES=4K,100K,1536K
wins "window gets and puts both ways, 16 in flight in batches of 8, bytes checked" \
	--depths 16 --batch 8
# (16 in flight rounded up to 18, three posted batches of 6: the tool's buffers hold 18 slots)
wins "window gets and puts both ways, posted batches of 6, bytes checked" \
	--depths 16 --batch 6 --post
# A frame resumed at a wrong byte, or one cut into by another, fails the set with a protocol
# error (and the runs above with it, unless it hit a frame whose transfer had ended).
if grep -q "protocol error" "$(xc_log 0)" "$(xc_log 1)"; then
	fail "no protocol error in either daemon's log" \
		"$(grep -h "protocol error" "$(xc_log 0)" "$(xc_log 1)" | head -n 2 | tr '\n' '|')"
else
	ok "no protocol error in either daemon's log"
fi
check_baseline "after the window frames"

stop_both_nodes
summary
[ "$failed" -eq 0 ]
