#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The peer connections' congestion control (config tcp_congestion, tcp.c set_tcp_options()),
# and their bound on unsent bytes (tcp_notsent_lowat, read back from list.peers):
# by default every connection between two daemons runs cubic whatever the host's default (here
# each namespace's default is set to reno, so a daemon that left its sockets alone shows reno);
# "tcp_congestion": "reno" gives reno, "" the host's default; a name the host has not built is
# logged once at start and the connections run the host's default. Each case moves bytes both
# ways between the two daemons first (xferbench_net check compares every byte), then reads the
# algorithm of each established connection between their two ports with ss(8), which node 0's
# list.peers must show too (tcp_info.c). In loopback mode (no namespaces) the host's default is
# whatever it is, and the "" case checks nothing.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
# shellcheck source=tests/cluster_suite.sh
. tests/cluster_suite.sh

T=30 # seconds for one xferctl call (lib.sh)

require_built
[ -x "$BUILD/xferbench_net" ] || abort_setup "$BUILD/xferbench_net is not built"
command -v ss >/dev/null || abort_setup "ss (iproute2) is not installed"
DATA=$(mktemp -d /tmp/xferd-cc.XXXXXX) || abort_setup "mktemp failed"
xn_up 2 >/dev/null || abort_setup "scripts/netns.sh could not make two nodes"
HOST_CC=$(sysctl -n net.ipv4.tcp_congestion_control)
if [ "$(xn_mode)" = netns ]; then
	for n in 0 1; do
		xn_exec "$n" sysctl -qw net.ipv4.tcp_congestion_control=reno ||
			abort_setup "sysctl in node $n failed"
	done
	HOST_CC=reno
fi

# conn_ccs: the congestion control of each established connection between the two daemons'
# listening ports, as node 0 sees them, one a line.
conn_ccs()
{
	local p0 p1
	p0=$(xn_port 0) p1=$(xn_port 1)
	xn_exec 0 ss -Htin state established \
		"( sport = :$p0 or dport = :$p0 or sport = :$p1 or dport = :$p1 )" |
		grep -oE ' [a-z0-9_]+ (wscale|rto):' | awk '{ print $1 }'
}

# start_and_move NAME CONFIG-EXTRA: both daemons started afresh with CONFIG-EXTRA, then bytes
# moved both ways between them and compared. Returns 1 after failing NAME (the daemons may run).
start_and_move()
{
	local name=$1 n out
	for n in 0 1; do
		rm -f "$(xc_config "$n")"
		XC_CONFIG_EXTRA=$2 xc_start "$n" || {
			fail "$name" "node $n did not start: $(logtail "$n")"
			return 1
		}
	done
	out=$("$BUILD/xferbench_net" check --passive "$(xc_sock 0)" --active "$(xc_sock 1)" \
		--max $((4 << 20)) 2>&1) && return 0
	fail "$name" "transfers failed: $(tail -n 2 <<<"$out" | tr '\n' '|') / $(logtail 0)"
	return 1
}

# listed_tcp FIELD: FIELD of each connection's "tcp" in node 0's list.peers ("conns"), one a
# line; "cc", the congestion control, is what an operator sees there and must be what ss sees.
listed_tcp()
{
	"$BUILD/xferctl" --socket "$(xc_sock 0)" --json peers |
		"$XN_PY" -c 'import json, sys
for p in json.load(sys.stdin)["peers"]:
    for c in p.get("conns", []):
        print(c.get("tcp", {}).get(sys.argv[1], "(none)"))' "$1"
}

# case NAME WANT CONFIG-EXTRA: both daemons with CONFIG-EXTRA, bytes moved, every connection WANT
# in ss and in list.peers.
case_cc()
{
	local name=$1 want=$2 got listed
	if start_and_move "$name" "$3"; then
		got=$(conn_ccs | sort | uniq -c | tr -s ' \n' ' ')
		listed=$(listed_tcp cc | sort | uniq -c | tr -s ' \n' ' ')
		if [ -z "$got" ]; then
			fail "$name" "no connection between the daemons' ports in ss -tin"
		elif [ -n "$want" ] && [ "$got" != " $(conn_ccs | wc -l) $want " ]; then
			fail "$name" "connections run:$got(want $want)"
		elif [ "$listed" != "$got" ]; then
			fail "$name" "list.peers shows:$listed, ss:$got"
		else
			ok "$name: bytes checked both ways, connections run:$got(ss and list.peers)"
		fi
	fi
	stop_both_nodes
}

case_cc "the default config: cubic, not the host's $HOST_CC" cubic ''
case_cc '"tcp_congestion": "reno"' reno '"tcp_congestion": "reno"'
if [ "$(xn_mode)" = netns ]; then
	case_cc "\"tcp_congestion\": \"\": the host's default" "$HOST_CC" '"tcp_congestion": ""'
fi
case_cc '"tcp_congestion": "nosuchcc" (not built here): the host'"'"'s default' \
	"$([ "$(xn_mode)" = netns ] && echo "$HOST_CC")" '"tcp_congestion": "nosuchcc"'
for n in 0 1; do
	warned=$(grep -c 'tcp_congestion "nosuchcc" cannot be set here' "$(xc_log "$n")")
	if [ "$warned" = 1 ]; then
		ok "node $n logged the unusable tcp_congestion once"
	else
		fail "node $n's log on the unusable tcp_congestion" "$warned lines, want 1"
	fi
done

# The bound on bytes written but not yet sent (config tcp_notsent_lowat, TCP_NOTSENT_LOWAT):
# each connection's own setting, read back by list.peers with getsockopt (ss does not show it).
# 0 leaves the sockets alone (getsockopt then says 0: the host's net.ipv4.tcp_notsent_lowat).

# case_lowat NAME WANT CONFIG-EXTRA: both daemons with CONFIG-EXTRA, bytes moved both ways,
# every connection's notsent_lowat in node 0's list.peers WANT.
case_lowat()
{
	local name=$1 want=$2 got n
	if start_and_move "$name" "$3"; then
		got=$(listed_tcp notsent_lowat | sort | uniq -c | tr -s ' \n' ' ')
		n=$(listed_tcp notsent_lowat | wc -l)
		if [ "$n" -gt 1 ] && [ "$got" = " $n $want " ]; then
			ok "$name: bytes checked both ways, every connection's notsent_lowat $want"
		else
			fail "$name" "list.peers shows notsent_lowat:${got:- nothing} (want $want)"
		fi
	fi
	stop_both_nodes
}

case_lowat "tcp_notsent_lowat by default: 128 KiB" 131072 ''
case_lowat '"tcp_notsent_lowat": 65536' 65536 '"tcp_notsent_lowat": 65536'
case_lowat '"tcp_notsent_lowat": 0: the sockets left alone' 0 '"tcp_notsent_lowat": 0'
for bad in 1000 134217728 -1; do
	printf '{"tcp_notsent_lowat": %s}\n' "$bad" >"$DATA/lowat.json"
	out=$("$BUILD/xferd" --check-config --config "$DATA/lowat.json" 2>&1) && rc=0 || rc=$?
	if [ "$rc" != 0 ] && grep -q 'tcp_notsent_lowat 0 or 16384..67108864' <<<"$out"; then
		ok "\"tcp_notsent_lowat\": $bad refused, the rule named"
	else
		fail "\"tcp_notsent_lowat\": $bad" "exit $rc: $(tr '\n' '|' <<<"$out")"
	fi
done

# The warning on net.ipv4.tcp_slow_start_after_idle (tcp.c idle_restart_check()): once per
# daemon, at its first peer connection, where the sysctl is 1 and the connections run anything
# but BBR (which the kernel exempts); never where it is 0, as on the rig's nodes (scripts/netns.sh)
# and on a node set up as the README says (systemd/60-xferd.conf). Netns mode only: in loopback
# mode the host's own setting decides.
idle_warnings() { grep -c 'tcp_slow_start_after_idle is 1' "$(xc_log "$1")"; }

# case_idle NAME SYSCTL WANT CONFIG-EXTRA: both nodes' sysctl at SYSCTL, both daemons with
# CONFIG-EXTRA, bytes moved both ways, then each daemon's log must hold WANT new warnings.
case_idle()
{
	local name=$1 want=$3 n before=() moved=yes
	for n in 0 1; do
		xn_exec "$n" sysctl -qw net.ipv4.tcp_slow_start_after_idle="$2"
		before[n]=$(idle_warnings "$n")
	done
	start_and_move "$name" "$4" || moved=no
	stop_both_nodes
	[ "$moved" = yes ] || return
	for n in 0 1; do
		if [ $(($(idle_warnings "$n") - before[n])) -eq "$want" ]; then
			ok "$name: node $n logged $want warning(s) on tcp_slow_start_after_idle"
		else
			fail "$name" "node $n logged $(($(idle_warnings "$n") - before[n])), want $want"
		fi
	done
}

if [ "$(xn_mode)" = netns ]; then
	case_idle "tcp_slow_start_after_idle 1, cubic: warned once" 1 1 ''
	case_idle "tcp_slow_start_after_idle 0, cubic: no warning" 0 0 ''
	if xn_exec 0 sysctl -qw net.ipv4.tcp_congestion_control=bbr 2>/dev/null; then
		xn_exec 0 sysctl -qw net.ipv4.tcp_congestion_control=reno
		case_idle "tcp_slow_start_after_idle 1, bbr (exempt): no warning" 1 0 \
			'"tcp_congestion": "bbr"'
	else
		skip "tcp_slow_start_after_idle 1, bbr: no warning" "bbr is not built here"
	fi
fi

summary
[ "$failed" -eq 0 ]
