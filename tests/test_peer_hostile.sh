#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# A hostile peer against the TCP transport (issue 12, "bounded everything on the network side"),
# driven by tests/flood_peer.py, which speaks the peer protocol by hand. Three daemons on
# 127.0.0.1 ports (scripts/cluster.sh in loopback mode, so that the attacker can connect from
# many source addresses, 127.0.0.2 and up); node 2 runs under `ulimit -n 64`.
#
#   a. connections that never say HELLO (and one that sends half a header) are closed after
#      handshake_timeout_ms, with a log line naming the address; the fd count returns
#   b. a flood of 500 connections from 50 addresses: the excess is closed at once, the fd count
#      stays bounded, and cross-node transfers and local clients are served during and after
#   c. a PING flood from a peer that never reads: the daemon's RSS stays bounded and the set is
#      cut with a cause
#   e. HELLOs under new node ids beyond max_peer_sets are refused
#   g. list.peers with 24 sets of 17 connections (the cap) and their TCP: in pages, each within
#      one control packet; without the connections ("conns": false), every set in one page
#   f. out-of-range values of the new config keys are refused at start
#   h. a log flood: 600 peer connections that send garbage and 600 local clients that send a
#      packet that is not JSON leave at most 100 lines per function in the log, the daemon
#      serves on, and at its exit it says how many lines it dropped
#   d. at the fd limit: peers cannot take the last fds (a local client registers a region during
#      the flood), the daemon does not spin (CPU time over 2 s) even when local connections take
#      every fd, and it accepts peers and clients again afterwards
#
# Prints "ok - NAME", "FAIL - NAME (why)" and a final "N passed, N failed"; exits non-zero if
# anything failed. Environment: BUILD (default build), XFER_CROSS_ONLY=REGEX (groups to run).
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
# shellcheck source=tests/cluster_suite.sh
. tests/cluster_suite.sh

T=30
WAIT=15
POLL=0.02
NODES="0 1 2"
ONLY=${XFER_CROSS_ONLY:-}
HANDSHAKE_MS=1000 # handshake_timeout_ms of these daemons
LOW_NOFILE=64     # node 2's ulimit -n
MAX_SETS=4        # node 2's max_peer_sets
HOSTILE=tests/flood_peer.py

hostile() { timeout -k 2 40 "$XN_PY" "$HOSTILE" "$@"; }
fds() { local f=(/proc/"$(node_pid "$1")"/fd/*); echo "${#f[@]}"; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' /proc/"$(node_pid "$1")"/status; }
# cpu_ms NODE: user + system CPU time of NODE's daemon so far.
cpu_ms()
{
	local f
	read -r -a f <"/proc/$(node_pid "$1")/stat"
	echo $(((f[13] + f[14]) * 1000 / CLK_TCK))
}
# cpu_over NODE SECONDS: CPU ms NODE's daemon used over the next SECONDS.
cpu_over()
{
	local c0
	c0=$(cpu_ms "$1")
	sleep "$2"
	echo $(($(cpu_ms "$1") - c0))
}
# peak_fds NODE FILE: the most fds NODE's daemon had, sampled every 20 ms from now until FILE
# (a hostile conns run's output) has its opening line and 0.3 s more have passed.
peak_fds()
{
	local max=0 n end=$((SECONDS + 30)) stop=
	while [ $SECONDS -lt "$end" ]; do
		n=$(fds "$1")
		[ "$n" -gt "$max" ] && max=$n
		if [ -z "$stop" ] && [ -s "$2" ]; then
			stop=$(($(now_ms) + 300))
		elif [ -n "$stop" ] && [ "$(now_ms)" -ge "$stop" ]; then
			break
		fi
		sleep 0.02
	done
	echo "$max"
}
# wait_fds NODE MAX SECONDS: until NODE's fd count is <= MAX; 1 if it is not within SECONDS.
wait_fds()
{
	local end=$((SECONDS + $3))
	while [ "$(fds "$1")" -gt "$2" ]; do
		[ $SECONDS -ge "$end" ] && return 1
		sleep 0.05
	done
}
# log_has NODE REGEX: NODE's log has a line matching REGEX.
log_has() { grep -Eq "$2" "$(node_log "$1")"; }
# registers NODE: a local client on NODE registers a region (xferctl readable prints metadata).
registers()
{
	local p=$DATA/reg.$1 rc=0
	bg "$p.out" "$p.err" "$1" readable "$SMALL_SRC"
	wait_line "$p.out" 5 >/dev/null || rc=1
	kill9 "$BG"
	[ "$rc" = 0 ] || WHY="xferctl readable printed no metadata: $(lastline "$p.err")"
	return "$rc"
}
port_of() { xn_port "$1"; }

DATA=$(mktemp -d /dev/shm/xfhostile.XXXXXX 2>/dev/null || mktemp -d "${TMPDIR:-/tmp}/xfhostile.XXXXXX")
require_built
CLK_TCK=$(getconf CLK_TCK)
SMALL_SRC=$(mkdata small 100001)
SRC=$(mkdata mid 3000001)
# Unkeyed (XC_INSECURE): these cases are about what the daemon bounds before and besides
# authentication, which tests/test_peer_auth.sh covers; flood_peer.py speaks no AUTH.
export XN_MODE=loopback XC_INSECURE=1 XC_CONFIG_EXTRA="\"handshake_timeout_ms\": $HANDSHAKE_MS"
xn_up 3 || abort_setup "no loopback ports"
# Node 0 logs at info, the daemon's default (what a flood of bad peers and clients provokes is
# logged there: h).
XC_LOG_LEVEL=info xc_start 0 && xc_start 1 || abort_setup "daemons did not start"
(ulimit -n "$LOW_NOFILE" && XC_CONFIG_EXTRA="$XC_CONFIG_EXTRA, \"max_peer_sets\": $MAX_SETS" xc_start 2) || abort_setup "node 2 (ulimit -n $LOW_NOFILE) did not start"
# A set between nodes 0 and 1 exists before the floods, as in a running cluster.
xfer read 0 1 "$SMALL_SRC" "$DATA/out" || abort_setup "first transfer: $WHY"
P0=$(port_of 0)

# =============================================================================================
if want "a. silent connections"; then
	base=$(fds 0)
	out=$DATA/silent
	: >"$out" # (emptied before the fork: a wait must not read an earlier run's line)
	hostile conns 127.0.0.1 "$P0" 6 1 $((HANDSHAKE_MS / 1000 + 3)) 1 >"$out" &
	hp=$!
	wait_line "$out" 10 >/dev/null
	sleep 0.2
	held=$(($(fds 0) - base))
	# The attacker still holds its ends: only the daemon can have closed its own.
	sleep $((HANDSHAKE_MS / 1000 + 1)).3
	after=$(fds 0)
	wait "$hp"
	res=$(tail -n 1 "$out")
	note "silent: fds $base -> +$held while held; $res"
	if [ "$held" -ge 6 ]; then
		ok "a: 6 silent connections are accepted and held (fds +$held)"
	else
		fail "a: 6 silent connections are accepted and held" "fds +$held: $res"
	fi
	if "$XN_PY" -c "
import json, sys
r = json.loads(sys.argv[1]); c = r['closed']
sys.exit(not (len(c) == r['opened'] == 6 and min(c) >= $HANDSHAKE_MS / 1000 * 0.9
              and max(c) <= $HANDSHAKE_MS / 1000 + 1.5))" "$res"; then
		ok "a: all closed by the daemon after handshake_timeout_ms ($HANDSHAKE_MS ms)"
	else
		fail "a: all closed by the daemon after handshake_timeout_ms" "$res"
	fi
	if [ "$after" -le "$base" ]; then
		ok "a: fd count back to baseline ($base) while the attacker still holds its ends"
	else
		fail "a: fd count back to baseline while the attacker holds its ends" \
			"$after fds, baseline $base"
	fi
	if log_has 0 "from 127\.0\.0\.2:[0-9]+ closed .*no HELLO within $HANDSHAKE_MS ms"; then
		ok "a: the log names the address"
	else
		fail "a: the log names the address" "$(logtail 0)"
	fi
fi

# =============================================================================================
if want "b. connection flood"; then
	base=$(fds 0)
	out=$DATA/flood
	: >"$out"
	hostile conns 127.0.0.1 "$P0" 500 50 4 >"$out" &
	hp=$!
	peak=$(peak_fds 0 "$out")
	note "flood: fds $base -> $peak; $(head -n 1 "$out")"
	if [ $((peak - base)) -le 70 ]; then
		ok "b: fd count bounded during a 500-connection flood (+$((peak - base)), cap 64)"
	else
		fail "b: fd count bounded during a 500-connection flood" "+$((peak - base))"
	fi
	during=0
	if xfer read 1 0 "$SRC" "$DATA/out" && xfer read 0 1 "$SRC" "$DATA/out" && registers 0; then
		during=1
	fi
	wait "$hp"
	res=$(tail -n 1 "$out")
	if [ "$during" = 1 ]; then
		ok "b: during the flood: transfers both ways identical, a local client registers"
	else
		fail "b: during the flood: transfers and a local client are served" "$WHY"
	fi
	if "$XN_PY" -c "
import json, sys
r = json.loads(sys.argv[1])
early = sum(1 for t in r['closed'] if t < 0.5)
print('#', r['opened'], 'opened,', early, 'closed within 0.5 s,', len(r['closed']), 'closed')
sys.exit(not (r['opened'] >= 400 and early >= r['opened'] - 64 and len(r['closed']) == r['opened']))
" "$res"; then
		ok "b: the excess is closed at once, the rest after the deadline"
	else
		fail "b: the excess is closed at once, the rest after the deadline" "$res"
	fi
	if log_has 0 "refused: too many connections before HELLO"; then
		ok "b: refusals are logged"
	else
		fail "b: refusals are logged" "$(logtail 0)"
	fi
	n=$(grep -c "refused: too many connections" "$(node_log 0)")
	if [ "$n" -le 10 ]; then
		ok "b: refusals are logged at most once a second ($n lines)"
	else
		fail "b: refusals are logged at most once a second" "$n lines"
	fi
	if xfer write 0 1 "$SRC" "$DATA/out" && wait_fds 0 "$base" 10; then
		ok "b: after the flood: a write is identical, fds back to baseline ($base)"
	else
		fail "b: after the flood: a write is identical, fds back to baseline" \
			"${WHY:-$(fds 0) fds, baseline $base}"
	fi
fi

# =============================================================================================
if want "h. log flood"; then
	log=$(node_log 0)
	before=$(wc -l <"$log")
	t0=$SECONDS
	peers=$(hostile garbage 127.0.0.1 "$P0" 600)
	clients=$(hostile unixbad "$(node_sock 0)" 600)
	sleep 0.3
	# Each function may write 100 lines in each 10 s window the flood touched.
	limit=$((100 * ((SECONDS - t0) / 10 + 2)))
	most=$(tail -n +"$((before + 1))" "$log" | awk '{ n[$3]++ } END { for (f in n) if (n[f] > m) { m = n[f]; w = f }
		print m + 0, w }')
	note "log flood: peers $peers, clients $clients in $((SECONDS - t0)) s: $(($(wc -l <"$log") - before)) new log lines, at most ${most% *} from ${most#* }"
	if [ "$peers" = '{"sent": 600}' ] && [ "$clients" = '{"sent": 600}' ] && [ "${most% *}" -le "$limit" ]; then
		ok "h: 600 garbage peer connections and 600 bad client packets: at most ${most% *} log lines from one function (limit $limit)"
	else
		fail "h: a flood of bad peers and clients leaves a bounded log" \
			"peers $peers, clients $clients, ${most% *} lines from ${most#* } (limit $limit); $(logtail 0)"
	fi
	if xfer read 1 0 "$SRC" "$DATA/out" && registers 0; then
		ok "h: after the log flood: a read is identical, a local client registers"
	else
		fail "h: after the log flood: transfers and local clients are served" "$WHY"
	fi
fi

# =============================================================================================
if want "c. PING flood"; then
	rss0=$(rss_kib 0)
	res=$(hostile pingflood 127.0.0.1 "$P0" $((160 * 1024 * 1024)))
	rss1=$(rss_kib 0)
	grow=$(((rss1 - rss0) / 1024))
	note "PING flood: $res; RSS $((rss0 / 1024)) -> $((rss1 / 1024)) MiB"
	if [ "$grow" -lt 64 ]; then
		ok "c: RSS grows by $grow MiB (< 64) under a PING flood from a peer that never reads"
	else
		fail "c: RSS stays bounded under a PING flood" "+$grow MiB"
	fi
	if [[ $res == *'"error": null'* ]]; then
		fail "c: the daemon cuts the peer that does not read" "all sent: $res"
	else
		ok "c: the daemon cuts the peer that does not read"
	fi
	if log_has 0 "does not read: [0-9]+ bytes of control messages queued"; then
		ok "c: the set fails with a cause ($(grep -Eo 'does not read: [0-9]+ bytes' \
			"$(node_log 0)" | tail -n 1))"
	else
		fail "c: the set fails with a cause" "$(logtail 0)"
	fi
	if xfer read 1 0 "$SMALL_SRC" "$DATA/out"; then
		ok "c: transfers still work afterwards"
	else
		fail "c: transfers still work afterwards" "$WHY"
	fi
fi

# =============================================================================================
if want "e. peer sets"; then
	res=$(hostile hellos 127.0.0.1 "$(port_of 2)" $((MAX_SETS + 4)))
	note "$((MAX_SETS + 4)) HELLOs, each as another node, to node 2 (max_peer_sets $MAX_SETS): $res"
	if [[ $res == "{\"answered\": $MAX_SETS, \"refused\": 4}" ]] &&
		log_has 2 "refused: $MAX_SETS peer sets \(max_peer_sets\)"; then
		ok "e: HELLOs beyond max_peer_sets are refused and logged"
	else
		fail "e: HELLOs beyond max_peer_sets are refused and logged" "$res; $(logtail 2)"
	fi
	# Their sets end by keepalive (they never answer a PING) before the fd-limit cases.
	sleep 2
fi

# =============================================================================================
# list.peers with each set's connections and their TCP (PROTOCOL.md §7): sets at the cap of
# connections (17: peer_connections' 16 and the control lane) still come back in pages that
# each fit one control packet, and together list every set and connection.
if want "g. listing"; then
	NSETS=24 PER=17
	out=$DATA/sets
	: >"$out"
	"$XN_PY" "$HOSTILE" sets 127.0.0.1 "$(port_of 1)" $NSETS $PER 30 >"$out" & # (kill9 reaches it)
	hp=$!
	opened=$(wait_line "$out" 20)
	res=$("$XN_PY" - "$(node_sock 1)" <<'PY'
import json, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.settimeout(10)
s.connect(sys.argv[1])
def call(i, method, params):
    s.send(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}).encode())
    data = s.recv(1 << 20)
    return len(data), json.loads(data)["result"]
call(1, "hello", {"version": 1, "client": "pages"})
after, sizes, peers = None, [], []
t0 = time.monotonic()
while True:
    n, r = call(len(sizes) + 2, "list.peers", {"limit": 10000, **({"after": after} if after is not None else {})})
    sizes.append(n)
    peers += r["peers"]
    if "next" not in r:
        break
    after = r["next"]
full = [p for p in peers if len(p.get("conns", [])) == 17 and
        all(c["tcp"]["state"] == "established" and c["role"] in ("control", "data") for c in p["conns"])]
t1 = time.monotonic()
# without the connections ("conns": false, what xferctl's tables ask): every set in one page
n, brief = call(len(sizes) + 2, "list.peers", {"limit": 10000, "conns": False})
t2 = time.monotonic()
print(json.dumps({"pages": len(sizes), "largest": max(sizes), "sets": len(peers), "full": len(full),
                  "brief": {"sets": len(brief["peers"]), "next": "next" in brief,
                            "conns": sum("conns" in p for p in brief["peers"]), "bytes": n},
                  "ms": [round((t1 - t0) * 1e3, 1), round((t2 - t1) * 1e3, 1)]}))
PY
)
	note "$opened; list.peers on node 1 by pages: $res"
	if [[ $opened == "sets $NSETS conns $((NSETS * PER))" ]] &&
		[[ $res =~ \"pages\":\ ([0-9]+),\ \"largest\":\ ([0-9]+),\ \"sets\":\ $((NSETS + 1)),\ \"full\":\ $NSETS, ]] &&
		[[ $res == *'"brief": {"sets": '$((NSETS + 1))', "next": false, "conns": 0,'* ]] &&
		[ "${BASH_REMATCH[1]}" -gt 1 ] && [ "${BASH_REMATCH[2]}" -le 65536 ]; then
		ok "g: $NSETS sets of $PER connections listed with their TCP in ${BASH_REMATCH[1]} pages of at most ${BASH_REMATCH[2]} bytes; without (conns false) in one"
	else
		fail "g: sets of $PER connections listed in pages within a packet" "$opened; $res"
	fi
	rows=$(ctl 1 peers --tcp | grep -c ' estab ')
	if [ "$rows" -ge $((NSETS * PER)) ]; then
		ok "g: xferctl peers --tcp shows a row per connection ($rows)"
	else
		fail "g: xferctl peers --tcp shows a row per connection" "$rows rows: $(ctl 1 peers --tcp 2>&1 | head -n 3)"
	fi
	kill9 "$hp"
fi

# =============================================================================================
if want "f. configuration"; then
	bad=$DATA/bad.json
	for kv in '"handshake_timeout_ms": 99' '"handshake_timeout_ms": 60001' \
		'"max_pending_peer_conns": 0' '"max_peer_sets": 0'; do
		echo "{$kv}" >"$bad"
		if timeout 10 "$BUILD/xferd" --socket "$DATA/bad.sock" --foreground --config "$bad" \
			>"$DATA/bad.out" 2>&1; then
			fail "f: config {$kv} is refused" "xferd started"
		elif grep -q "out of range: handshake_timeout_ms" "$DATA/bad.out"; then
			ok "f: config {$kv} is refused"
		else
			fail "f: config {$kv} is refused" "$(firstline "$DATA/bad.out")"
		fi
	done
fi

# =============================================================================================
if want "d. fd limit"; then
	P2=$(port_of 2)
	base=$(fds 2)
	note "node 2: ulimit -n $LOW_NOFILE, $base fds at rest"
	out=$DATA/fdflood
	: >"$out"
	hostile conns 127.0.0.1 "$P2" 200 40 4 >"$out" &
	hp=$!
	peak=$(peak_fds 2 "$out")
	cpu=$(cpu_over 2 2)
	note "peer flood at the fd limit: $base -> $peak fds; $cpu ms CPU over 2 s"
	# +2: a sample may catch the connection accepted only to be closed at once, and the spare
	# fd reopened in the same instant (seen once in CI at 50 of 64, bound 49).
	if [ "$peak" -le $((LOW_NOFILE - LOW_NOFILE / 4 + 2)) ] && [ "$peak" -gt $((base + 20)) ] &&
		registers 2; then
		ok "d: peers leave the last quarter of the fds: $peak of $LOW_NOFILE, a client registers"
	else
		fail "d: peers leave the last fds to local clients" "$peak fds; ${WHY:-}"
	fi
	if [ "$cpu" -lt 400 ]; then
		ok "d: no spinning during the peer flood ($cpu ms CPU over 2 s)"
	else
		fail "d: no spinning during the peer flood" "$cpu ms CPU over 2 s"
	fi
	wait "$hp"
	# Now local connections take every fd: both listeners meet EMFILE.
	uout=$DATA/unixhold
	: >"$uout"
	hostile unixhold "$(node_sock 2)" 80 8 >"$uout" &
	up=$!
	wait_line "$uout" 10 >/dev/null
	: >"$out"
	hostile conns 127.0.0.1 "$P2" 20 20 3 >"$out" &
	hp=$!
	wait_line "$out" 20 >/dev/null
	full=$(fds 2)
	cpu=$(cpu_over 2 2)
	note "every fd taken: $full fds; $cpu ms CPU over 2 s"
	if [ "$full" -ge $((LOW_NOFILE - 1)) ] && [ "$cpu" -lt 400 ] &&
		log_has 2 "accepting peer connections: Too many open files; pausing"; then
		ok "d: at EMFILE ($full fds) the listeners pause instead of spinning ($cpu ms CPU)"
	else
		fail "d: at EMFILE the listeners pause instead of spinning" \
			"$full fds, $cpu ms CPU over 2 s; $(logtail 2)"
	fi
	kill9 "$up"
	wait "$hp"
	wait_fds 2 "$base" 5
	if hostile hello 127.0.0.1 "$P2" 5 && registers 2; then
		ok "d: afterwards a peer's HELLO is answered and a client registers a region"
	else
		fail "d: afterwards peers and clients are served" "${WHY:-no HELLO back}; $(logtail 2)"
	fi
fi

if xc_stop_all; then
	ok "every daemon exited 0 on SIGTERM"
else
	fail "every daemon exits 0 on SIGTERM" "see above"
fi
if want "h. log flood"; then
	if log_has 0 "[0-9]+ more lines from here suppressed over the last [0-9]+ s"; then
		ok "h: at exit the daemon says how many lines it dropped"
	else
		fail "h: at exit the daemon says how many lines it dropped" "$(logtail 0)"
	fi
fi
summary
[ "$failed" -eq 0 ]
