#!/usr/bin/env bash
# shellcheck shell=bash
# SPDX-License-Identifier: MIT
#
# cluster.sh: one xferd per node of scripts/netns.sh, for cross-node tests, benchmarks and demos.
#
# Node i's daemon runs inside node i's namespace (or plainly, in loopback mode) with
#   --socket $XN_DIR/n<i>.sock --foreground --log-level $XC_LOG_LEVEL --config $XN_DIR/n<i>.json
#   --listen <node address>:<node port>
# and logs to $XN_DIR/n<i>.log (appended across restarts). The Unix socket is a file, so clients
# (xferctl, benchmarks) can run in any namespace; only the daemons' TCP lives in the nodes.
#
# The config (written once per node, kept across restarts so a restart keeps the same port):
#   {"keepalive_ms": 300, "keepalive_timeout_ms": 1500, "peer_connections": $XC_PEER_CONNECTIONS}
# plus the JSON members in $XC_CONFIG_EXTRA (e.g. '"default_timeout_ms": 20000'). A 1.5 s
# keepalive timeout keeps the failure tests quick.
#
# Used two ways:
#   sourced:  . scripts/netns.sh; . scripts/cluster.sh; xn_up 2; xc_start_all; xc_ctl 0 status;
#             xc_kill 1; xc_start 1; xc_stop_all; xn_down
#   command:  scripts/cluster.sh up N            prints XN_DIR=...: export it, then
#             scripts/cluster.sh ctl NODE ARGS... | sock NODE | stop NODE | start NODE |
#                                restart NODE | kill NODE | pid NODE | log NODE | down
#             In command mode the daemons are not children of the later calls, so `stop` can
#             check that a daemon ended after SIGTERM, but not its exit status.
#
# Environment: BUILD (default build), XC_PEER_CONNECTIONS (default 2), XC_LOG_LEVEL (default
# warn), XC_CONFIG_EXTRA, XC_START_TIMEOUT (seconds, default 15), XC_KEEPALIVE_MS and
# XC_KEEPALIVE_TIMEOUT_MS (300 and 1500 instead of the config's values above).

_xc_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if ! declare -F xn_up >/dev/null; then
	# shellcheck source=scripts/netns.sh
	. "$_xc_here/netns.sh"
fi

BUILD=${BUILD:-build}

xc__err()
{
	echo "cluster.sh: $*" >&2
}

# xc_sock NODE / xc_log NODE / xc_config NODE / xc_pid NODE
xc_sock() { echo "$XN_DIR/n$1.sock"; }
xc_log() { echo "$XN_DIR/n$1.log"; }
xc_config() { echo "$XN_DIR/n$1.json"; }
xc_pid() { [ -f "$XN_DIR/n$1.pid" ] && cat "$XN_DIR/n$1.pid"; }

# xc_ctl NODE ARGS...: xferctl against node NODE's daemon (runs in the caller's namespace).
xc_ctl()
{
	local node=$1
	shift
	"$BUILD/xferctl" --socket "$(xc_sock "$node")" "$@"
}

# xc_log_tail NODE [LINES]: the end of a daemon's log, indented, on stderr.
xc_log_tail()
{
	local f
	f=$(xc_log "$1")
	[ -s "$f" ] || return 0
	echo "--- last lines of node $1's xferd log ($f) ---" >&2
	tail -n "${2:-15}" "$f" | sed 's/^/  /' >&2
}

# xc__write_config NODE
# xc_key: the cluster key every node of this cluster shares (made once, mode 0600), printed.
xc_key()
{
	local key="$XN_DIR/peer.key"
	if [ ! -f "$key" ]; then
		(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$key") || return 1
	fi
	echo "$key"
}

xc__write_config()
{
	local extra=${XC_CONFIG_EXTRA:-} auth key
	# XC_INSECURE=1: no cluster key, peers unauthenticated (tests of what comes before it).
	if [ -n "${XC_INSECURE:-}" ]; then
		auth='"insecure_peers": true'
	else
		key=$(xc_key) || return 1
		auth="\"peer_key_file\": \"$key\""
	fi
	printf '{"keepalive_ms": %s, "keepalive_timeout_ms": %s, "peer_connections": %s, %s%s}\n' \
		"${XC_KEEPALIVE_MS:-300}" "${XC_KEEPALIVE_TIMEOUT_MS:-1500}" \
		"${XC_PEER_CONNECTIONS:-2}" "$auth" "${extra:+, $extra}" >"$(xc_config "$1")"
}

# xc_wait_ready NODE: waits until the daemon answers `xferctl status`; 1 if it died or did not.
xc_wait_ready()
{
	local node=$1 pid i rc limit
	pid=$(xc_pid "$node")
	limit=$((${XC_START_TIMEOUT:-15} * 20))
	for ((i = 0; i < limit; i++)); do
		if [ -S "$(xc_sock "$node")" ] &&
			timeout 5 "$BUILD/xferctl" --socket "$(xc_sock "$node")" status >/dev/null 2>&1; then
			return 0
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			rc=0
			wait "$pid" 2>/dev/null || rc=$?
			xn_forget "$pid"
			rm -f "$XN_DIR/n$node.pid"
			xc__err "node $node: xferd exited (status $rc) before it answered"
			xc_log_tail "$node"
			return 1
		fi
		sleep 0.05
	done
	xc__err "node $node: xferd (pid $pid) did not answer status within ${XC_START_TIMEOUT:-15} s"
	xc_log_tail "$node"
	return 1
}

# xc_start NODE [EXTRA XFERD ARGS...]: starts node NODE's daemon and waits until it answers.
xc_start()
{
	local node=$1 b
	shift
	[ -n "$XN_DIR" ] && [ -f "$XN_DIR/count" ] || {
		xc__err "start: no nodes (xn_up first)"
		return 1
	}
	for b in xferd xferctl; do
		[ -x "$BUILD/$b" ] || {
			xc__err "$BUILD/$b is missing: run 'make' first (BUILD=$BUILD)"
			return 1
		}
	done
	if [ -n "$(xc_pid "$node")" ] && kill -0 "$(xc_pid "$node")" 2>/dev/null; then
		xc__err "start: node $node's xferd already runs (pid $(xc_pid "$node"))"
		return 1
	fi
	[ -f "$(xc_config "$node")" ] || xc__write_config "$node"
	rm -f "$(xc_sock "$node")"
	echo "=== $(date +%T.%N | cut -c1-12) start" >>"$(xc_log "$node")"
	xn_spawn "$node" "$(xc_log "$node")" "$BUILD/xferd" --socket "$(xc_sock "$node")" \
		--foreground --log-level "${XC_LOG_LEVEL:-warn}" --config "$(xc_config "$node")" \
		--listen "$(xn_endpoint "$node")" "$@"
	echo "$XN_PID" >"$XN_DIR/n$node.pid"
	xc_wait_ready "$node"
}

# xc_start_all [EXTRA XFERD ARGS...]
xc_start_all()
{
	local i n
	n=$(xn_count)
	for ((i = 0; i < n; i++)); do
		xc_start "$i" "$@" || return 1
	done
}

# xc__reap NODE PID: waits for PID to end (it was signalled) up to 10 s; sets XC_RC to its exit
# status ("" when it is not our child, 137 after a forced kill). Returns 1 if it had to be killed.
xc__reap()
{
	local node=$1 pid=$2 i
	XC_RC=
	for ((i = 0; i < 200; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$pid" 2>/dev/null; then
		xc__err "node $node: xferd (pid $pid) still runs 10 s after the signal; SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		XC_RC=137
		xn_forget "$pid"
		rm -f "$XN_DIR/n$node.pid"
		return 1
	fi
	if jobs -p | grep -qx "$pid"; then
		XC_RC=0
		wait "$pid" || XC_RC=$?
	fi
	xn_forget "$pid"
	rm -f "$XN_DIR/n$node.pid"
	return 0
}

# xc_stop NODE: SIGTERM, then checks the daemon exited 0 within 10 s (exit status only when it
# is a child of this shell). Returns 1 otherwise, with the log's end on stderr.
xc_stop()
{
	local node=$1 pid
	pid=$(xc_pid "$node")
	[ -n "$pid" ] || {
		xc__err "stop: node $node's xferd is not running"
		return 1
	}
	kill -TERM "$pid" 2>/dev/null || true
	xc__reap "$node" "$pid" || {
		xc_log_tail "$node"
		return 1
	}
	if [ -n "$XC_RC" ] && [ "$XC_RC" -ne 0 ]; then
		xc__err "node $node: xferd exited with status $XC_RC after SIGTERM (expected 0)"
		xc_log_tail "$node"
		return 1
	fi
	return 0
}

# xc_kill NODE: SIGKILL (a crash); reaps it.
xc_kill()
{
	local node=$1 pid
	pid=$(xc_pid "$node")
	[ -n "$pid" ] || return 0
	# In braces with stderr closed: bash reports a child killed by a signal ("Killed") when it
	# reaps it, which is exactly what is wanted here.
	{
		kill -KILL "$pid"
		xc__reap "$node" "$pid"
	} 2>/dev/null || true
	return 0
}

# xc_restart NODE: stop (SIGTERM, exit 0 checked) and start again on the same socket and port.
xc_restart()
{
	local rc=0
	xc_stop "$1" || rc=1
	xc_start "$1" || return 1
	return $rc
}

# xc_stop_all: SIGTERM to every running daemon; 1 if any did not exit 0.
xc_stop_all()
{
	local i n rc=0
	n=$(xn_count)
	for ((i = 0; i < n; i++)); do
		[ -n "$(xc_pid "$i")" ] || continue
		xc_stop "$i" || rc=1
	done
	return $rc
}

# xc_rig_up PROG: what every two-node benchmark starts with: a scratch directory in $RUN, two
# nodes that reach each other, and traps that stop the daemons, take the nodes down and remove
# $RUN on exit (also after INT/TERM). Exits with a message naming PROG if the nodes cannot
# reach each other.
xc_rig_up()
{
	RUN=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
	trap xc__rig_down EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	xn_up 2 || exit 1
	xn_check || {
		echo "$1: the two nodes cannot reach each other" >&2
		exit 1
	}
}

xc__rig_down()
{
	xc_stop_all >/dev/null 2>&1 || true
	xn_down
	rm -rf "$RUN"
}

# xc_node_id NODE: the daemon's node id (32 hex), from `xferctl --json stats`.
xc_node_id()
{
	xc_ctl "$1" --json stats | "$XN_PY" -c 'import json,sys; print(json.load(sys.stdin)["node"])'
}

# Command mode.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -u
	cd "$_xc_here/.." || exit 1
	cmd=${1:-help}
	shift || true
	case $cmd in
	up)
		xn_up "${1:-2}" || exit 1
		if ! xc_start_all; then
			xn_down
			exit 1
		fi
		echo "XN_DIR=$XN_DIR"
		;;
	down)
		rc=0
		xc_stop_all || rc=1
		xn_down
		exit $rc
		;;
	ctl)
		node=${1:?node}
		shift
		xc_ctl "$node" "$@"
		;;
	start | stop | restart | kill | sock | pid | log | node-id)
		[ $# -ge 1 ] || {
			echo "usage: cluster.sh $cmd NODE" >&2
			exit 2
		}
		case $cmd in
		node-id) xc_node_id "$1" ;;
		*) "xc_$cmd" "$@" ;;
		esac
		;;
	*)
		sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2
		exit 2
		;;
	esac
fi
