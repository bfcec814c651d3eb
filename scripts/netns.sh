#!/usr/bin/env bash
# shellcheck shell=bash
# SPDX-License-Identifier: MIT
#
# netns.sh: N private "nodes" for cross-node tests, benchmarks and demos of xferd.
#
# netns mode (root, iproute2): one network namespace per node, "xf<run>-n0" .. "xf<run>-n<N-1>",
# each with a veth "eth0" (address 10.99.<R>.<i+1>/24, R derived from the run id) whose peer
# "n<i>" sits on bridge "br0" in a hub namespace "xf<run>-hub". Every interface, address and
# route lives inside those namespaces: nothing is added to the host's own network.
#
# loopback mode (fallback when namespaces cannot be made, or XN_MODE=loopback): every node is
# 127.0.0.1 with its own TCP port; `exec` just runs the command; link-down/link-up are not
# available (they return 2, callers skip what needs them).
#
# Used two ways:
#   sourced:  . scripts/netns.sh; xn_up 3; xn_exec 0 CMD...; xn_link_down 1; xn_down
#             (xn_up installs no trap; callers put xn_down, which is idempotent, in theirs)
#   command:  scripts/netns.sh up 3          prints XN_DIR=/tmp/xn.XXXX: export it, then
#             scripts/netns.sh exec 0 CMD... | link-down 1 | link-up 1 | shape 1 800mbit |
#                              unshape 1 | addr 1 | check | info | down
#
# State lives in $XN_DIR (a fresh temporary directory): mode, run id, node count, addresses,
# ports, and a pids file of every process started through xn_spawn (the cluster helpers start
# daemons with it). Teardown kills exactly those pids (and, in netns mode, any process still
# inside this run's own namespaces, which only this run can have started), deletes the
# namespaces and the directory. It is safe to call twice and after a failed or partial `up`.
#
# MTU: the veths keep the default 1500 unless XN_MTU is set. scripts/bench-net.sh measured both
# (see its header); 1500 is the MTU an Ethernet-attached node without jumbo frames has, and the
# benchmark compares xferd with iperf3 on the same veth whatever the MTU is.
#
# TCP after an idle pause: each node has net.ipv4.tcp_slow_start_after_idle at 0, as a node set
# up by the README has (systemd/60-xferd.conf; the kernel's default, 1, restarts a connection that
# paused for 200 ms from slow start); XN_SLOW_START_AFTER_IDLE=1 gives a node the kernel's
# default. Loopback mode leaves the host's setting alone.
#
# Environment: XN_MODE=auto|netns|loopback (default auto), XN_MTU (default 1500),
# XN_BASE_PORT (loopback mode: first port to try, default random in 20000..59999),
# XN_PORT (netns mode: the port every node's daemon listens on, default 7700),
# XN_SLOW_START_AFTER_IDLE (netns mode: 0 or 1, default 0).

XN_DIR=${XN_DIR:-}
# Debian's own python3 starts in a third of the time of a pyenv shim; polling loops notice.
if [ -z "${XN_PY:-}" ]; then
	if [ -x /usr/bin/python3 ]; then XN_PY=/usr/bin/python3; else XN_PY=python3; fi
fi

# xn__get KEY: prints a value of the state.
xn__get()
{
	[ -n "$XN_DIR" ] && [ -f "$XN_DIR/$1" ] && cat "$XN_DIR/$1"
}

xn__err()
{
	echo "netns.sh: $*" >&2
}

# xn_mode: prints netns or loopback (nothing before xn_up).
xn_mode() { xn__get mode; }
# xn_count: number of nodes.
xn_count() { xn__get count; }
# xn_id: the run id ("xf12345").
xn_id() { xn__get id; }
# xn_ns NODE: namespace of node NODE (empty in loopback mode).
xn_ns()
{
	[ "$(xn_mode)" = netns ] && echo "$(xn_id)-n$1"
}
# xn_hub: the hub namespace.
xn_hub() { echo "$(xn_id)-hub"; }
# xn_addr NODE: the node's IPv4 address.
xn_addr() { xn__get "addr.$1"; }
# xn_port NODE: the TCP port the node's daemon should listen on.
xn_port() { xn__get "port.$1"; }
# xn_endpoint NODE: ADDR:PORT.
xn_endpoint() { echo "$(xn_addr "$1"):$(xn_port "$1")"; }

# xn__free_port START: prints a TCP port >= START that nothing on 127.0.0.1 listens on now.
xn__free_port()
{
	"$XN_PY" - "$1" <<'PY'
import socket, sys
p = int(sys.argv[1])
while p < 65000:
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        s.close()
        print(p)
        sys.exit(0)
    except OSError:
        s.close()
        p += 1
sys.exit(1)
PY
}

# xn__can_netns: true if we may create namespaces (tried with a throwaway one).
xn__can_netns()
{
	local probe="xfprobe$$-$RANDOM"
	[ "$(id -u)" -eq 0 ] || return 1
	command -v ip >/dev/null 2>&1 || return 1
	ip netns add "$probe" 2>/dev/null || return 1
	ip netns del "$probe" 2>/dev/null || true
	return 0
}

# xn__up_netns N: builds the hub, the bridge and N nodes. Returns 1 on any failure (the caller
# tears down what was made).
xn__up_netns()
{
	local n=$1 id hub i ns sub mtu=${XN_MTU:-1500}
	id=$(xn_id)
	hub="$id-hub"
	sub=$(($$ % 250 + 1))
	echo "$mtu" >"$XN_DIR/mtu"
	ip netns add "$hub" || return 1
	echo "$hub" >>"$XN_DIR/namespaces"
	ip -n "$hub" link set lo up || return 1
	ip -n "$hub" link add br0 type bridge || return 1
	# No STP and no forwarding delay: ports forward as soon as they are up.
	ip -n "$hub" link set br0 type bridge stp_state 0 forward_delay 0 2>/dev/null || true
	ip -n "$hub" link set br0 mtu "$mtu" up || return 1
	for ((i = 0; i < n; i++)); do
		ns="$id-n$i"
		ip netns add "$ns" || return 1
		echo "$ns" >>"$XN_DIR/namespaces"
		ip -n "$ns" link set lo up || return 1
		ip netns exec "$ns" sysctl -qw \
			net.ipv4.tcp_slow_start_after_idle="${XN_SLOW_START_AFTER_IDLE:-0}" || return 1
		# Made inside the hub, one end moved straight into the node: the host's namespace never
		# sees either end, so concurrent runs cannot clash on interface names.
		ip -n "$hub" link add "n$i" mtu "$mtu" type veth peer name eth0 mtu "$mtu" \
			netns "$ns" || return 1
		ip -n "$hub" link set "n$i" master br0 up || return 1
		ip -n "$ns" addr add "10.99.$sub.$((i + 1))/24" dev eth0 || return 1
		ip -n "$ns" link set eth0 up || return 1
		echo "10.99.$sub.$((i + 1))" >"$XN_DIR/addr.$i"
		echo "${XN_PORT:-7700}" >"$XN_DIR/port.$i"
	done
	return 0
}

xn__up_loopback()
{
	local n=$1 i p
	p=${XN_BASE_PORT:-$((20000 + RANDOM % 40000))}
	for ((i = 0; i < n; i++)); do
		p=$(xn__free_port "$p") || return 1
		echo 127.0.0.1 >"$XN_DIR/addr.$i"
		echo "$p" >"$XN_DIR/port.$i"
		p=$((p + 1))
	done
	return 0
}

# xn_up N: creates N nodes (netns mode if possible, else loopback). Sets and exports XN_DIR.
# Returns 0, or 1 after cleaning up whatever it made.
xn_up()
{
	local n=${1:-2} mode=${XN_MODE:-auto}
	if ! [[ $n =~ ^[0-9]+$ ]] || [ "$n" -lt 1 ] || [ "$n" -gt 200 ]; then
		xn__err "up: node count must be 1..200, not '$n'"
		return 1
	fi
	if [ -n "$XN_DIR" ] && [ -f "$XN_DIR/count" ]; then
		xn__err "up: $XN_DIR is already up; call down first"
		return 1
	fi
	XN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/xn.XXXXXX") || return 1
	export XN_DIR
	: >"$XN_DIR/pids"
	: >"$XN_DIR/namespaces"
	echo "xf$$" >"$XN_DIR/id"
	case $mode in
	auto)
		if xn__can_netns; then mode=netns; else mode=loopback; fi
		;;
	netns | loopback) ;;
	*)
		xn__err "XN_MODE must be auto, netns or loopback, not '$mode'"
		xn_down
		return 1
		;;
	esac
	echo "$mode" >"$XN_DIR/mode"
	if [ "$mode" = netns ]; then
		# Leftovers of an earlier run with the same pid (a crash before its teardown).
		local old
		for old in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^xf$$-(hub|n[0-9]+)\$"); do
			ip netns del "$old" 2>/dev/null || true
		done
		if ! xn__up_netns "$n"; then
			xn__err "up: could not build $n namespaces"
			xn_down
			return 1
		fi
	elif ! xn__up_loopback "$n"; then
		xn__err "up: no free loopback ports"
		xn_down
		return 1
	fi
	echo "$n" >"$XN_DIR/count"
	return 0
}

# xn_exec NODE CMD...: runs CMD inside the node (netns mode) or plainly (loopback mode).
xn_exec()
{
	local node=$1 ns
	shift
	if [ "$(xn_mode)" = netns ]; then
		ns=$(xn_ns "$node")
		[ -n "$ns" ] && [ "$node" -lt "$(xn_count)" ] || {
			xn__err "exec: no node $node"
			return 2
		}
		ip netns exec "$ns" "$@"
	else
		"$@"
	fi
}

# xn_spawn NODE OUTFILE CMD...: starts CMD in the background inside NODE with stdout and stderr
# appended to OUTFILE, records its pid for teardown, and sets XN_PID. `ip netns exec` execs the
# command itself (no fork), so XN_PID is the command's own pid and a child of the calling shell.
xn_spawn()
{
	local node=$1 out=$2
	shift 2
	if [ "$(xn_mode)" = netns ]; then
		ip netns exec "$(xn_ns "$node")" "$@" >>"$out" 2>&1 &
	else
		"$@" >>"$out" 2>&1 &
	fi
	XN_PID=$!
	echo "$XN_PID" >>"$XN_DIR/pids"
}

# xn_forget PID: drops PID from the teardown list (it has been reaped).
xn_forget()
{
	[ -f "$XN_DIR/pids" ] || return 0
	grep -vx "$1" "$XN_DIR/pids" >"$XN_DIR/pids.tmp" || true
	mv -f "$XN_DIR/pids.tmp" "$XN_DIR/pids"
}

# xn_link_down NODE / xn_link_up NODE: takes the node's veth down (or up) inside its namespace:
# its packets stop, nothing tells the TCP stacks. Returns 2 in loopback mode.
xn_link_down()
{
	[ "$(xn_mode)" = netns ] || return 2
	ip -n "$(xn_ns "$1")" link set eth0 down
}
xn_link_up()
{
	[ "$(xn_mode)" = netns ] || return 2
	ip -n "$(xn_ns "$1")" link set eth0 up
}

# xn_shape NODE RATE / xn_unshape NODE: limits what the node sends to RATE (tc tbf, e.g. 800mbit)
# so that a transfer lasts long enough for a failure to land in its middle. Returns 2 in
# loopback mode.
xn_shape()
{
	[ "$(xn_mode)" = netns ] || return 2
	ip netns exec "$(xn_ns "$1")" tc qdisc replace dev eth0 root tbf rate "$2" burst 256k \
		latency 100ms
}
xn_unshape()
{
	[ "$(xn_mode)" = netns ] || return 2
	ip netns exec "$(xn_ns "$1")" tc qdisc del dev eth0 root 2>/dev/null || true
}

# xn_wait_tcp NODE ADDR PORT [SECONDS]: waits until a TCP connect from NODE to ADDR:PORT works.
xn_wait_tcp()
{
	local node=$1 addr=$2 port=$3 secs=${4:-5}
	xn_exec "$node" timeout "$((secs + 1))" "$XN_PY" - "$addr" "$port" "$secs" <<'PY'
import socket, sys, time
addr, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
end = time.monotonic() + secs
while True:
    try:
        socket.create_connection((addr, port), timeout=1).close()
        sys.exit(0)
    except OSError as e:
        if time.monotonic() > end:
            print(f"netns.sh: {addr}:{port} unreachable: {e}", file=sys.stderr)
            sys.exit(1)
        time.sleep(0.05)
PY
}

# xn_check: every node reaches every other node over TCP (a listener on each node, a connect
# from each other node). Returns 0 or 1 with what failed on stderr.
xn_check()
{
	local n i j port rc=0 pids=() lp
	n=$(xn_count)
	port=$(($(xn_port 0) + 1000))
	for ((i = 0; i < n; i++)); do
		lp=$port
		[ "$(xn_mode)" = loopback ] && lp=$(xn__free_port $((port + i * 7)))
		echo "$lp" >"$XN_DIR/check.$i"
		xn_spawn "$i" "$XN_DIR/check.$i.log" timeout 20 "$XN_PY" -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(64)
while True:
    c, _ = s.accept(); c.sendall(b"ok"); c.close()
' "$(xn_addr "$i")" "$lp"
		pids+=("$XN_PID")
	done
	for ((i = 0; i < n; i++)); do
		for ((j = 0; j < n; j++)); do
			[ "$i" -ne "$j" ] || continue
			if ! xn_wait_tcp "$i" "$(xn_addr "$j")" "$(cat "$XN_DIR/check.$j")" 5; then
				xn__err "check: node $i cannot reach node $j"
				rc=1
			fi
		done
	done
	for i in "${pids[@]}"; do
		kill "$i" 2>/dev/null || true
		wait "$i" 2>/dev/null || true
		xn_forget "$i"
	done
	rm -f "$XN_DIR"/check.*
	return $rc
}

# xn_down: kills every process this run started (by pid), deletes this run's namespaces and the
# state directory. Idempotent; never fails.
xn_down()
{
	local pid ns left i
	[ -n "$XN_DIR" ] && [ -d "$XN_DIR" ] || {
		XN_DIR=
		return 0
	}
	if [ -s "$XN_DIR/pids" ]; then
		while read -r pid; do
			[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
		done <"$XN_DIR/pids"
		for ((i = 0; i < 40; i++)); do
			left=0
			while read -r pid; do
				[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && left=1
			done <"$XN_DIR/pids"
			[ "$left" -eq 0 ] && break
			sleep 0.05
		done
		while read -r pid; do
			[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
		done <"$XN_DIR/pids"
		while read -r pid; do
			[ -n "$pid" ] && wait "$pid" 2>/dev/null || true
		done <"$XN_DIR/pids"
	fi
	if [ -s "$XN_DIR/namespaces" ]; then
		while read -r ns; do
			[ -n "$ns" ] || continue
			# Anything still inside a namespace of this run was started by this run.
			for pid in $(ip netns pids "$ns" 2>/dev/null); do
				kill -KILL "$pid" 2>/dev/null || true
			done
			ip netns del "$ns" 2>/dev/null || true
		done <"$XN_DIR/namespaces"
	fi
	rm -rf "$XN_DIR"
	XN_DIR=
	return 0
}

# xn_info: what is up.
xn_info()
{
	local i n
	n=$(xn_count)
	echo "XN_DIR=$XN_DIR mode=$(xn_mode) nodes=$n${XN_DIR:+ mtu=$(xn__get mtu)}"
	for ((i = 0; i < n; i++)); do
		echo "node $i: $(xn_endpoint "$i")${XN_DIR:+ $(xn_ns "$i")}"
	done
}

# Command mode.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -u
	cmd=${1:-help}
	shift || true
	case $cmd in
	up)
		xn_up "${1:-2}" || exit 1
		xn_check || {
			xn_down
			exit 1
		}
		echo "XN_DIR=$XN_DIR"
		;;
	down) xn_down ;;
	exec)
		[ $# -ge 2 ] || {
			echo "usage: netns.sh exec NODE CMD..." >&2
			exit 2
		}
		xn_exec "$@"
		;;
	link-down) xn_link_down "${1:?node}" ;;
	link-up) xn_link_up "${1:?node}" ;;
	shape) xn_shape "${1:?node}" "${2:?rate}" ;;
	unshape) xn_unshape "${1:?node}" ;;
	addr) xn_addr "${1:?node}" ;;
	check) xn_check ;;
	info) xn_info ;;
	*)
		sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2
		exit 2
		;;
	esac
fi
