#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# What list.peers says of each TCP connection of a set (PROTOCOL.md §7, "conns": tcp.c
# tcp_conns_json(), tcp_info.c), on two daemons in two namespaces (scripts/netns.sh), after node
# 1 read a 24 MiB file from node 0 (bytes compared):
#   - each node lists the other's set with "connections" entries in "conns": one control lane,
#     the rest data, every one established, cubic (the daemons' default; each namespace's own
#     default is set to reno first, so a value read from anywhere but the socket shows), rtt_us,
#     snd_cwnd and snd_mss above 0;
#   - the sender's bytes_acked over the set's connections is at least the file's size, and so is
#     the receiver's bytes_received;
#   - the kernel agrees (ss -tin in the node): a socket with each connection's local port and
#     remote address, the same congestion control, and bytes_acked no lower than listed;
#   - xferctl peers stays within 100 columns; xferctl peers --tcp has a row per connection with
#     its congestion control, and the round trip, window and retransmit columns.
# In loopback mode (no namespaces) the same checks run, with the host's default left alone.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
# shellcheck source=tests/cluster_suite.sh
. tests/cluster_suite.sh

T=30
WAIT=30
POLL=0.02
SIZE=$((24 << 20))

require_built
command -v ss >/dev/null || abort_setup "ss (iproute2) is not installed"
DATA=$(mktemp -d /tmp/xferd-tcpinfo.XXXXXX) || abort_setup "mktemp failed"
xn_up 2 >/dev/null || abort_setup "scripts/netns.sh could not make two nodes"
if [ "$(xn_mode)" = netns ]; then
	for n in 0 1; do
		xn_exec "$n" sysctl -qw net.ipv4.tcp_congestion_control=reno ||
			abort_setup "sysctl in node $n failed"
	done
fi
xc_start 0 && xc_start 1 || abort_setup "the daemons did not start: $(logtail 0) / $(logtail 1)"
NODE_IDS=("$(xc_node_id 0)" "$(xc_node_id 1)")
SRC=$(mkdata src "$SIZE")
xfer read 0 1 "$SRC" "$DATA/out" || abort_setup "node 1 reading $SIZE bytes from node 0: $WHY"
ok "node 1 read $SIZE bytes from node 0, identical"

# CHECK: the checks of one node's listing (argv: its list.peers JSON, its ss -Htin text, the
# other node's id, the byte count that must show, which sum: bytes_acked or bytes_received).
# Prints "ok" and what it saw, or what is wrong.
CHECK=$(
	cat <<'PY'
import json, re, sys
peers, ss_text, other, size, key = json.loads(sys.argv[1])["peers"], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
sets = [p for p in peers if p["node"] == other]
if len(sets) != 1:
    sys.exit("%d sets with node %s" % (len(sets), other))
p = sets[0]
conns = p.get("conns", [])
if len(conns) != p["connections"] or len(conns) < 2:
    sys.exit("%d conns listed, connections %d" % (len(conns), p["connections"]))
roles = sorted(c["role"] for c in conns)
if roles != ["control"] + ["data"] * (len(conns) - 1):
    sys.exit("roles %s" % roles)
# ss -Htin: a line "ESTAB 0 0 LOCAL:PORT REMOTE:PORT", then the details (cc first).
kernel = {}
for head, info in re.findall(r"^(ESTAB.*)\n\s+(.*)$", ss_text, re.M):
    f = head.split()
    acked = re.search(r"bytes_acked:(\d+)", info)
    kernel[(int(f[3].rsplit(":", 1)[1]), f[4])] = (info.split()[0], int(acked.group(1)) if acked else 0)
total = 0
for c in conns:
    t = c.get("tcp")
    if not t:
        sys.exit("connection %d has no tcp: %s" % (c["id"], c))
    if t["cc"] != "cubic" or t["state"] != "established":
        sys.exit("connection %d: cc %s, state %s" % (c["id"], t["cc"], t["state"]))
    for k in ("rtt_us", "snd_cwnd", "snd_mss"):
        if not t.get(k, 0) > 0:
            sys.exit("connection %d: %s %s" % (c["id"], k, t.get(k)))
    k = kernel.get((c["local_port"], c["remote"]))
    if not k:
        sys.exit("connection %d (port %d, %s) is not in ss: %s" % (c["id"], c["local_port"], c["remote"], sorted(kernel)))
    if k[0] != t["cc"] or k[1] < t["bytes_acked"]:
        sys.exit("connection %d: ss says %s, bytes_acked %d; listed %s, %d" % (c["id"], k[0], k[1], t["cc"], t["bytes_acked"]))
    total += t[key]
if total < size:
    sys.exit("%s over the connections %d < %d" % (key, total, size))
print("ok %d connections (%s), cubic, established, %s %d >= %d, as ss sees them" % (len(conns), ", ".join(roles), key, total, size))
PY
)

# check_node N KEY: node N's listing of the other node's set, against ss in node N.
check_node()
{
	local n=$1 key=$2 j s out
	j=$(ctl "$n" --json peers) || {
		fail "node $n: xferctl --json peers" "$j"
		return
	}
	s=$(xn_exec "$n" ss -Htin)
	if out=$("$XN_PY" -c "$CHECK" "$j" "$s" "${NODE_IDS[1 - n]}" "$SIZE" "$key" 2>&1); then
		ok "node $n lists node $((1 - n))'s ${out#ok }"
	else
		fail "node $n's conns of node $((1 - n))" "$out"
	fi
}
check_node 0 bytes_acked
check_node 1 bytes_received

wide=$(ctl 0 peers | awk 'length > 100')
if [ -z "$wide" ] && ctl 0 peers | grep -q "^${NODE_IDS[1]:0:8}\.\."; then
	ok "xferctl peers: node 1's row, within 100 columns"
else
	fail "xferctl peers within 100 columns" "$(ctl 0 peers 2>&1 | head -n 3 | tr '\n' '|')"
fi
out=$(ctl 1 peers --tcp)
rows=$(grep -c "^${NODE_IDS[0]:0:8}\.\. .* cubic  estab " <<<"$out")
conns=$(jfield "$(ctl 1 --json peers)" connections)
if [[ $(head -n 1 <<<"$out") == *" CC "*" RTT/VAR_MS "*" CWND "*" RETRANS "* ]] &&
	[ "$rows" = "$conns" ]; then
	ok "xferctl peers --tcp: a row per connection ($rows), cubic, with rtt, cwnd and retransmits"
else
	fail "xferctl peers --tcp" "$rows rows of $conns connections: $(tr '\n' '|' <<<"$out")"
fi
if ctl 1 --tcp ops >/dev/null 2>&1; [ $? -eq 2 ]; then
	ok "xferctl --tcp ops: a usage error"
else
	fail "xferctl --tcp ops" "not refused with exit status 2"
fi

stop_both_nodes
summary
[ "$failed" -eq 0 ]
