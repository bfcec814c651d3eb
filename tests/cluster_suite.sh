# shellcheck shell=bash
# SPDX-License-Identifier: MIT
#
# tests/cluster_suite.sh: the prologue of the shell suites that run xferd daemons with
# scripts/cluster.sh (test_cross, test_files, test_looplag, test_peer_hostile). Sourced from the
# repository root after `cd "$ROOT"`. It
#   - exports BUILD (default build) and sources scripts/cluster.sh and tests/lib.sh;
#   - maps tests/lib.sh's node functions (node_sock, node_pid, node_start, node_log) onto the
#     cluster's daemons;
#   - defines xfer KIND OWNER ACTIVE SRC DST: one transfer between two nodes with xferctl (lib.sh's
#     offer and claim); 1 with WHY when the clients' exits or the bytes say it went wrong;
#   - installs the exit trap: the suite's before_teardown (if defined; the daemons' logs still
#     exist), the daemons (by pid) and namespaces, the clients still running, the suite's
#     after_teardown (if defined; nothing holds its files any more), then DATA.

BUILD=${BUILD:-build}
export BUILD
# shellcheck source=scripts/cluster.sh
. scripts/cluster.sh
# shellcheck source=tests/lib.sh
. tests/lib.sh

DATA=

node_sock() { xc_sock "$1"; }
node_pid() { xc_pid "$1"; }
node_start() { xc_start "$1"; }
node_log() { xc_log "$1"; }

xfer()
{
	local kind=$1 src=$4 dst=$5 w arc=0 prc=0
	next_prefix w x
	xfer_begin "$kind" "$2" "$src" "$dst" "$w.p" || return 1
	claim "$kind" "$3" "$META" "$src" "$dst" "$w.a"
	wait_bg "$AP" || arc=$?
	wait_bg "$PP" "$WAIT" || prc=$?
	xfer_outcome "$kind" "$src" "$dst" "$w" "$arc" "$prc"
}

# stop_both_nodes: SIGTERM to nodes 0 and 1, which must exit 0 (ok or fail, with their logs).
stop_both_nodes()
{
	if xc_stop 0 && xc_stop 1; then
		ok "both daemons stopped on SIGTERM"
	else
		fail "both daemons stopped on SIGTERM" "$(logtail 0) / $(logtail 1)"
	fi
}

# run_hook NAME: the suite's function NAME, if it defines one.
run_hook() { if declare -F "$1" >/dev/null; then "$1"; fi; }

cluster_suite_cleanup()
{
	run_hook before_teardown
	xn_down # the daemons, by pid, and the namespaces
	kill_children
	run_hook after_teardown
	[ -n "$DATA" ] && rm -rf "$DATA"
}
trap cluster_suite_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
