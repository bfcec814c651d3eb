#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Cross-node tests: one xferd per network namespace ("node"), joined by veths on a bridge
# (scripts/netns.sh, scripts/cluster.sh), or on separate 127.0.0.1 ports where namespaces
# cannot be made. Clients are xferctl processes; data is compared byte for byte with cmp.
#
#   - readable/read and writable/write across nodes, both directions, 1 B .. 1 GiB
#     (the largest is 64 MiB under sanitizers or with XFER_TEST_LARGE=0)
#   - multi-descriptor operations (scatter/gather with unaligned boundaries) through
#     $BUILD/xferbench_net when it is built; xferctl makes one descriptor per operation
#   - xferctl ops/peers: transport tcp, the peer's node id, byte counts
#   - refusals across nodes, decided before any byte moves: EINVAL (pairing), EACCES (token),
#     EMSGSIZE, EALREADY, ESTALE (owner restarted), EHOSTUNREACH; the passive op stays usable
#   - 3 nodes, all-to-all at once; 20 concurrent clients per node
#   - failures: peer daemon SIGKILL / SIGTERM / frozen mid-transfer, link cut (netns only),
#     owner, reader and writer clients killed -9 mid-transfer; after each, every daemon's
#     regions, active operations and fds are back to their baseline
#
# Prints "ok - NAME", "FAIL - NAME (why)", "SKIP - NAME (why)" and a final
# "N passed, N failed[, N skipped]"; exits non-zero if anything failed.
# Environment: BUILD (default build), SANITIZE, XFER_TEST_LARGE=0 (smaller sizes), XN_MODE
# (auto|netns|loopback), XFER_CROSS_KEEP=1 (keep the run's directory and logs on failure),
# XFER_CROSS_ONLY=REGEX (run only the test groups whose name matches).
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
# shellcheck source=tests/cluster_suite.sh
. tests/cluster_suite.sh

KA_TIMEOUT=1.5 # keepalive_timeout_ms of scripts/cluster.sh's config, in seconds
SLACK=2.0      # scheduling slack on top of a bound (2 cores, sanitizers)
T=60           # seconds: "it ended at all" for one client
WAIT=30        # seconds for metadata, and for a passive client to end after its transfer
POLL=0.02      # seconds between polls
NODES="0 1 2"
ONLY=${XFER_CROSS_ONLY:-}

SMALL=0
if [ -n "${SANITIZE:-}" ] || [[ $BUILD == *san* ]] || [ "${XFER_TEST_LARGE:-1}" = 0 ]; then
	SMALL=1
fi
MIB=$((1024 * 1024))
GIB=$((1024 * MIB))
if [ "$SMALL" = 1 ]; then
	BIG=$((64 * MIB))
	FAIL_SIZE=$((256 * MIB))
	A2A_SIZE=$((16 * MIB))
else
	BIG=$GIB
	FAIL_SIZE=$((256 * MIB))
	A2A_SIZE=$((64 * MIB))

fi

NODE_IDS=()

before_teardown()
{
	if [ "$failed" -gt 0 ] && [ "${XFER_CROSS_KEEP:-0}" = 1 ] && [ -n "$XN_DIR" ]; then
		cp -a "$XN_DIR" "$XN_DIR.kept" 2>/dev/null && note "logs kept in $XN_DIR.kept"
	fi
}

# pyj PYTHON < JSON: evaluates PYTHON with the parsed input as d; prints the result.
pyj()
{
	"$XN_PY" -c '
import json, sys
d = json.load(sys.stdin)
r = eval(sys.argv[1])
print(json.dumps(r) if isinstance(r, (dict, list)) else r)
' "$1"
}

# meta_edit META PYTHON: decodes metadata to the dict m, runs PYTHON on it, re-encodes it.
meta_edit()
{
	"$XN_PY" -c '
import base64, json, sys
meta, code = sys.argv[1], sys.argv[2]
assert meta.startswith("xfer1.")
b = meta[6:]
m = json.loads(base64.urlsafe_b64decode(b + "=" * (-len(b) % 4)))
exec(code)
s = json.dumps(m, separators=(",", ":")).encode()
print("xfer1." + base64.urlsafe_b64encode(s).decode().rstrip("="))
' "$1" "$2"
}

# meta_field META KEY: a field of decoded metadata.
meta_field()
{
	"$XN_PY" -c '
import base64, json, sys
b = sys.argv[1][6:]
m = json.loads(base64.urlsafe_b64decode(b + "=" * (-len(b) % 4)))
print(json.dumps(m[sys.argv[2]]))
' "$1" "$2"
}

# op_json NODE KIND: the first operation of KIND on NODE's daemon as JSON, or nothing.
op_json()
{
	ctl "$1" --json ops 2>/dev/null | pyj "next((o for o in d['ops'] if o['kind'] == '$2'), '')"
}

# peer_bytes NODE PEER KEY: counter KEY (bytes_sent, bytes_received) of NODE's connection set
# with node PEER, 0 if it has none. (`xferctl peers` shows every set to any client; `xferctl ops`
# shows a non-root client only its own connection's operations, so progress is read here.)
peer_bytes()
{
	ctl "$1" --json peers 2>/dev/null |
		pyj "sum(p['$3'] for p in d['peers'] if p['node'] == '${NODE_IDS[$2]}')" 2>/dev/null || echo 0
}

# wait_mid NODE PEER KEY BASE LENGTH SECONDS PID...: waits until KEY of NODE's set with PEER has
# grown by more than 2 MiB (data, not just keepalives and the claim) and less than LENGTH/2
# bytes since BASE: a transfer of LENGTH bytes is under way and not half done. 1 if that was never seen (MID_LAST says what was), or one of the
# client PIDs exited first.
wait_mid()
{
	local node=$1 peer=$2 key=$3 base=$4 len=$5 secs=$6 v p t_end
	shift 6
	MID_LAST=
	t_end=$((SECONDS + secs))
	while [ "$SECONDS" -lt "$t_end" ]; do
		for p in "$@"; do
			if ! alive "$p"; then
				MID_LAST="${MID_LAST:-nothing}; client $p exited first"
				return 1
			fi
		done
		v=$(peer_bytes "$node" "$peer" "$key")
		MID_LAST="$key $((v - base)) of $len bytes"
		if [ $((v - base)) -gt $((2 * MIB)) ] && [ $((v - base)) -lt $((len / 2)) ]; then
			return 0
		fi
		sleep 0.01
	done
	return 1
}

# shape_all / unshape_all: in netns mode, limit every node's sending rate so that a
# FAIL_SIZE transfer lasts seconds (a failure then surely lands in its middle).
SHAPE_RATE=${XFER_CROSS_SHAPE:-1gbit}
shape_all()
{
	local i n
	[ "$(xn_mode)" = netns ] || return 0
	n=$(xn_count)
	for ((i = 0; i < n; i++)); do
		xn_shape "$i" "$SHAPE_RATE" || note "tc tbf on node $i failed: transfers run at full speed"
	done
}
unshape_all()
{
	local i n
	[ "$(xn_mode)" = netns ] || return 0
	n=$(xn_count)
	for ((i = 0; i < n; i++)); do
		xn_unshape "$i"
	done
}

# =============================================================================================
# Setup

DATA=$(mktemp -d /dev/shm/xfcross.XXXXXX 2>/dev/null || mktemp -d "${TMPDIR:-/tmp}/xfcross.XXXXXX")

require_built
"$BUILD/xferd" --help 2>&1 | grep -q -- --listen ||
	abort_setup "$BUILD/xferd has no --listen option: the TCP transport is not built in"

if ! xn_up 3; then
	if [ "${XN_MODE:-auto}" != loopback ] && XN_MODE=loopback xn_up 3; then
		note "network namespaces failed; falling back to loopback ports"
	else
		skip cross-node "neither network namespaces nor loopback ports could be set up"
		summary
		exit 0
	fi
fi
if ! xn_check; then
	if [ "$(xn_mode)" = netns ]; then
		xn_down
		if XN_MODE=loopback xn_up 3 && xn_check; then
			note "namespaces do not reach each other; falling back to loopback ports"
		else
			skip cross-node "neither network namespaces nor loopback ports carry TCP"
			summary
			exit 0
		fi
	else
		skip cross-node "loopback ports do not carry TCP"
		summary
		exit 0
	fi
fi
# Loopback cannot be slowed down: a transfer that lasts long enough to be seen under way.
[ "$(xn_mode)" = loopback ] && FAIL_SIZE=$GIB
note "mode $(xn_mode): $(for ((i = 0; i < 3; i++)); do printf '%s ' "$(xn_endpoint $i)"; done)"
note "sizes: largest $BIG bytes, failure transfers $FAIL_SIZE bytes$([ "$(xn_mode)" = netns ] && echo " at $SHAPE_RATE")"

xc_start_all || abort_setup "the daemons did not start (see above)"
for i in 0 1 2; do
	NODE_IDS[$i]=$(xc_node_id "$i") || NODE_IDS[$i]=
done
note "node ids: ${NODE_IDS[*]}"

warm || abort_setup "warm-up transfers between the nodes failed: $WHY"
ok "setup: 3 daemons up, every pair of nodes has transferred 4 KiB"
take_baseline || abort_setup "xferctl stats failed"

# =============================================================================================
# The four operations, byte-exact, across sizes

if want sizes; then
	sizes=(1 4095 4096 $((MIB + 1)) $((4 * MIB + 1)) $((64 * MIB)))
	[ "$BIG" -gt $((64 * MIB)) ] && sizes+=("$BIG")
	# Both directions for the smaller sizes; the big ones once each way round.
	check_sizes $((4 * MIB + 1)) "${sizes[@]}"
	check_baseline "sizes"
fi

# =============================================================================================
# Multi-descriptor operations: xferctl uses one descriptor per operation; xferbench_net does
# scatter/gather with different boundaries on the two sides.

if want multi; then
	if [ -x "$BUILD/xferbench_net" ]; then
		if out=$(timeout -k 2 120 "$BUILD/xferbench_net" check --passive "$(xc_sock 0)" \
			--active "$(xc_sock 1)" --max $((SMALL ? 16 * MIB : 64 * MIB)) 2>&1); then
			ok "multi-descriptor read and write across nodes (xferbench_net check)"
		else
			fail "multi-descriptor read and write across nodes (xferbench_net check)" \
				"$(echo "$out" | grep -v '^#' | tail -n 3 | tr '\n' ' ')"
		fi
		check_baseline "multi-descriptor"
		# Pairings kept in flight, ends taken from notifications (release_on_end): each
		# operation's stamp and every slot's bytes are checked (xferbench_net pipe).
		if out=$(timeout -k 2 120 "$BUILD/xferbench_net" pipe --passive "$(xc_sock 0)" \
			--active "$(xc_sock 1)" --sizes 5,4K,1M --depths 1,8 --seconds 0.05 2>&1); then
			ok "pipelined pairings, 8 in flight, read and write (xferbench_net pipe)"
		else
			fail "pipelined pairings (xferbench_net pipe)" \
				"$(echo "$out" | grep -v '^#' | tail -n 3 | tr '\n' ' ')"
		fi
		# The same started 4 at a time with one op.batch on each side (--batch 4).
		if out=$(timeout -k 2 120 "$BUILD/xferbench_net" pipe --passive "$(xc_sock 0)" \
			--active "$(xc_sock 1)" --sizes 5,4K,1M --depths 8 --batch 4 \
			--seconds 0.05 2>&1); then
			ok "pipelined pairings in batches of 4 (xferbench_net pipe --batch 4)"
		else
			fail "pipelined pairings in batches (xferbench_net pipe --batch 4)" \
				"$(echo "$out" | grep -v '^#' | tail -n 3 | tr '\n' ' ')"
		fi
		# ... and their ends as one op.batch_done per side and batch (--batch-end).
		if out=$(timeout -k 2 120 "$BUILD/xferbench_net" pipe --passive "$(xc_sock 0)" \
			--active "$(xc_sock 1)" --sizes 5,4K,1M --depths 8 --batch 4 --batch-end \
			--seconds 0.05 2>&1); then
			ok "pipelined pairings in batches of 4, one end event per batch (--batch-end)"
		else
			fail "pipelined pairings in batches with one end event (--batch-end)" \
				"$(echo "$out" | grep -v '^#' | tail -n 3 | tr '\n' ' ')"
		fi
		# ... and the active side's batches posted: no reply, the op.batch_done answers.
		if out=$(timeout -k 2 120 "$BUILD/xferbench_net" pipe --passive "$(xc_sock 0)" \
			--active "$(xc_sock 1)" --sizes 5,4K,1M --depths 8 --batch 4 --batch-end \
			--post --seconds 0.05 2>&1); then
			ok "pipelined pairings in batches of 4, the active batches posted (--post)"
		else
			fail "pipelined pairings with the active batches posted (--post)" \
				"$(echo "$out" | grep -v '^#' | tail -n 3 | tr '\n' ' ')"
		fi
		check_baseline "pipelined pairings"
		# The serving workload in both models (xferbench_serve): KV blocks of many
		# requests as pairings, then as tagged puts into a window opened once; stamps of
		# every block and every 8th request in full are checked by the program.
		for model in pairing windows; do
			if out=$(timeout -k 2 120 "$BUILD/xferbench_serve" --model "$model" \
				--passive "$(xc_sock 0)" --active "$(xc_sock 1)" --link-Bps 2e8 \
				--seconds 1 --layers 4 --max-tokens 64 --pool 64M 2>&1); then
				ok "serving workload across nodes, $model model (xferbench_serve)"
			else
				fail "serving workload, $model model (xferbench_serve)" \
					"$(echo "$out" | tail -n 3 | tr '\n' ' ')"
			fi
		done
		check_baseline "serving workload"
	else
		skip "multi-descriptor operations across nodes" \
			"$BUILD/xferbench_net is not built; xferctl offers one descriptor per operation"
	fi
fi

# =============================================================================================
# The control lane (PROTOCOL.md §10): of node 1's connections to node 0, one carries control
# messages only, however many bytes the others moved (read from the kernel's counters, ss -ti).

if want lane; then
	if [ "$(xn_mode)" != netns ]; then
		skip "control lane carries no DATA" "needs network namespaces (ss in node 1's)"
	else
		size=$((64 * MIB))
		src=$(mkdata lane "$size")
		xfer read 0 1 "$src" "$DATA/lane.out" || fail "control lane: 64 MiB read" "$WHY"
		lane=$(xn_exec 1 ss -tinH state established dst "$(xn_addr 0)" | "$XN_PY" -c '
import re, sys
tot = [int(a or 0) + int(b or 0) for a, b in re.findall(
    r"bytes_acked:(\d+)(?:.*?bytes_received:(\d+))?", sys.stdin.read())]
tot.sort()
print(len(tot), tot[0] if tot else -1, sum(tot))')
		read -r nconn least total <<<"$lane"
		if [ "$nconn" -ge 3 ] && [ "$least" -lt $((size / 8)) ] && [ "$total" -gt "$size" ]; then
			ok "control lane: of $nconn connections to node 0 one moved $least bytes (all: $total)"
		else
			fail "control lane carries no DATA" "connections, least bytes, all: $lane"
		fi
		check_baseline "control lane"
	fi
fi

# =============================================================================================
# xferctl ops / peers: transport, peer, byte counts

if want listings; then
	size=$((16 * MIB))
	src=$(mkdata listing "$size")
	W=$(mktemp -d "$DATA/x.XXXXXX")
	if [ "$(id -u)" != 0 ]; then
		# xferctl ops shows a non-root client only its own connection's operations.
		skip "xferctl ops on both nodes: transport tcp, peer node id, bytes" \
			"not root: xferctl ops lists only its own connection's operations"
		xfer read 0 1 "$src" "$DATA/listing.out" || fail "listing transfer" "$WHY"
	fi
	# Both clients are stopped (SIGSTOP) while the daemons move the bytes, so both operations
	# stay listed after the transfer. To stop the reader after it asked for the read but before
	# the transfer ends, node 0's daemon is frozen for that moment (well under the keepalive
	# timeout): the claim waits for it.
	[ "$(id -u)" = 0 ] && bg "$W/p.out" "$W/p.err" 0 readable "$src" && ppid=$BG
	if [ "$(id -u)" != 0 ]; then
		: # done above
	elif meta=$(wait_line "$W/p.out" 30); then
		alive "$ppid" && kill -STOP "$ppid"
		kill -STOP "$(xc_pid 0)"
		bg "$W/a.out" "$W/a.err" 1 read "$meta" "$DATA/listing.out"
		apid=$BG
		seen=
		# At most ~1 s frozen: node 1's keepalive timeout is 1.5 s.
		for ((i = 0; i < 35; i++)); do
			if ctl 1 --json ops | grep -q '"kind":"read"'; then
				alive "$apid" && kill -STOP "$apid"
				seen=1
				break
			fi
			alive "$apid" || break
			sleep 0.01
		done
		kill -CONT "$(xc_pid 0)"
		# Let the transfer end with both clients stopped, then look at both daemons.
		t_end=$((SECONDS + 20))
		while [ "$SECONDS" -lt "$t_end" ]; do
			o=$(op_json 1 read)
			[[ -n $o && $(pyj "d['state']" <<<"$o") =~ ^(COMPLETE|ERRORED|CANCELLED)$ ]] && break
			sleep 0.02
		done
		ao=$(op_json 1 read)
		po=$(op_json 0 readable)
		chk=$("$XN_PY" -c '
import json, sys
ao, po, size, n0, n1 = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
bad = []
def check(name, o, peer):
    if not o:
        bad.append(f"{name}: not listed"); return
    o = json.loads(o)
    for k, v in (("state", "COMPLETE"), ("transport", "tcp"), ("peer", peer), ("bytes", size), ("length", size)):
        if o.get(k) != v:
            bad.append(f"{name}: {k} {o.get(k)!r}, expected {v!r}")
check("read op on node 1", ao, n0)
check("readable op on node 0", po, n1)
print("; ".join(bad))
' "$ao" "$po" "$size" "${NODE_IDS[0]}" "${NODE_IDS[1]}")
		if [ -z "$seen" ]; then
			fail "xferctl ops: transport tcp, peer node id, bytes" "the read was not listed within 1 s: $(lastline "$W/a.err")"
		elif [ -z "$chk" ]; then
			ok "xferctl ops on both nodes: COMPLETE, transport tcp, the other node's id, $size bytes"
		else
			fail "xferctl ops: transport tcp, peer node id, bytes" "$chk"
		fi
		# Human-readable listings name tcp too.
		if ctl 1 ops | grep -q tcp && ctl 0 ops | grep -q tcp; then
			ok "xferctl ops (table) shows transport tcp on both nodes"
		else
			fail "xferctl ops (table) shows transport tcp" "$(ctl 1 ops 2>&1 | head -n 3 | tr '\n' '|')"
		fi
		for p in "$apid" "$ppid"; do
			alive "$p" && kill -CONT "$p"
		done
		ra=0
		wait_bg "$apid" 30 || ra=$?
		rp=0
		wait_bg "$ppid" 30 || rp=$?
		if [ "$ra" -eq 0 ] && [ "$rp" -eq 0 ] && cmp -s "$src" "$DATA/listing.out"; then
			ok "stopped clients resumed: both exit 0, bytes identical"
		else
			fail "stopped clients resumed" "read $ra ($(lastline "$W/a.err")), readable $rp ($(lastline "$W/p.err"))"
		fi
	else
		kill9 "$ppid"
		fail "xferctl ops: transport tcp" "readable printed no metadata: $(lastline "$W/p.err")"
	fi
	rm -f "$DATA/listing.out" "$src"

	# peers: each node lists the other with its node id, connections and byte counts.
	for pair in 0:1 1:0; do
		me=${pair%:*}
		other=${pair#*:}
		pj=$(ctl "$me" --json peers)
		chk=$("$XN_PY" -c '
import json, sys
d, other, size, me = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
p = [x for x in d.get("peers", []) if x.get("node") == other]
if not p:
    print("no entry for node " + other); sys.exit()
p = p[0]
bad = []
for k in ("node", "epoch", "endpoint", "connections", "state", "bytes_sent", "bytes_received", "transfers", "age_ms", "idle_ms"):
    if k not in p:
        bad.append("no " + k)
moved = p.get("bytes_sent", 0) if me == "0" else p.get("bytes_received", 0)
if moved < size:
    bad.append(("bytes_sent" if me == "0" else "bytes_received") + f" {moved} < {size}")
if not (1 <= p.get("connections", 0) <= 16):
    bad.append("connections %r" % p.get("connections"))
if not isinstance(p.get("transfers"), int) or p["transfers"] < 0:
    bad.append(f"transfers {p.get('transfers')!r}")
print("; ".join(bad))
' "$pj" "${NODE_IDS[$other]}" "$size" "$me" 2>&1)
		if [ -z "$chk" ]; then
			ok "xferctl peers on node $me: node $other's id, $(pyj "[x for x in d['peers'] if x['node'] == '${NODE_IDS[$other]}'][0]['connections']" <<<"$pj") connections, byte counts"
		else
			fail "xferctl peers on node $me" "$chk: $pj"
		fi
	done
	if ctl 0 peers | grep -q "${NODE_IDS[1]:0:8}"; then
		ok "xferctl peers (table) names the peer node"
	else
		fail "xferctl peers (table) names the peer node" "$(ctl 0 peers 2>&1 | head -n 3 | tr '\n' '|')"
	fi
	check_baseline "listings"
fi

# =============================================================================================
# Refusals across nodes, before any byte moves; the passive operation stays claimable.

if want refusals; then
	src=$(mkdata ref 65536)
	other=$(mkdata ref2 65537)
	W=$(mktemp -d "$DATA/x.XXXXXX")
	offer read 0 "$src" "" "$W/r"
	rpid=$PP
	offer write 0 "$src" "$DATA/ref.writable" "$W/w"
	wpid=$PP
	if rmeta=$(wait_line "$W/r.out" 30) && wmeta=$(wait_line "$W/w.out" 30); then
		eps=$(meta_field "$rmeta" endpoints)
		note "readable metadata endpoints: $eps"
		if "$XN_PY" -c '
import json, sys
eps = json.loads(sys.argv[1])
sys.exit(0 if any(e.get("transport") == "tcp" and e.get("addr") == sys.argv[2] and e.get("port") == int(sys.argv[3]) for e in eps) else 1)
' "$eps" "$(xn_addr 0)" "$(xn_port 0)"; then
			ok "metadata names node 0's listen address $(xn_endpoint 0) as a tcp endpoint"
		else
			fail "metadata names node 0's listen address" "endpoints $eps"
		fi
		refuse_mismatches "$rmeta" "$wmeta" "$src" "$other"
		refused "read with a wrong token (node 1)" 1 read "$(meta_edit "$rmeta" 'm["token"] = "0" * 32')" "$DATA/ref.out1" EACCES
		refused "read of an unknown op id (node 1)" 1 read "$(meta_edit "$rmeta" 'm["op"] = m["op"] + 100000')" "$DATA/ref.out1" "ENOENT|EACCES"
		refused "read with a wrong epoch (node 1)" 1 read "$(meta_edit "$rmeta" 'm["epoch"] = m["epoch"] - 1')" "$DATA/ref.out1" ESTALE
		# A node this daemon has no connection set with, at an endpoint where nothing listens;
		# and at an endpoint where another node (node 2) answers. (For a node it already has a
		# set with, the daemon uses that set and never looks at the endpoints.)
		dead_port=$(($(xn_port 0) + 11))
		refused "read of an unknown node's metadata, nothing listening at its endpoint (node 1)" 1 read \
			"$(meta_edit "$rmeta" "m['node'] = 'ab' * 16; m['endpoints'] = [e if e.get('transport') != 'tcp' else dict(e, port=$dead_port) for e in m['endpoints']]")" \
			"$DATA/ref.out1" EHOSTUNREACH
		refused "read of an unknown node's metadata whose endpoint is node 2's (node 1)" 1 read \
			"$(meta_edit "$rmeta" "m['node'] = 'cd' * 16; m['endpoints'] = [e if e.get('transport') != 'tcp' else dict(e, addr='$(xn_addr 2)', port=$(xn_port 2)) for e in m['endpoints']]")" \
			"$DATA/ref.out1" EHOSTUNREACH
		# After all that, both passive operations are untouched and still claimable, once.
		st=$(ctl 0 --json ops | pyj "sorted((o['kind'], o['state']) for o in d['ops'])")
		if [ "$(id -u)" != 0 ]; then
			skip "refused claims left both passive operations INITIALIZED" \
				"not root: xferctl ops lists only its own connection's operations (the reads below show it)"
		elif [ "$st" = '[["readable", "INITIALIZED"], ["writable", "INITIALIZED"]]' ]; then
			ok "refused claims left both passive operations INITIALIZED"
		else
			fail "refused claims left both passive operations INITIALIZED" "node 0 ops: $st"
		fi
		alive "$rpid" && kill -STOP "$rpid" # keeps the completed readable listed for a second claim
		claim_after_refusals read "$rmeta" "$src" "$DATA/ref.out1" "$W/a.err"
		refused "second read of the same readable (node 2)" 2 read "$rmeta" "$DATA/ref.out2" "EALREADY|ECANCELED"
		alive "$rpid" && kill -CONT "$rpid"
		claim_after_refusals write "$wmeta" "$src" "$DATA/ref.writable" "$W/a.err" "$wpid" "$W/w.err"
		refused "second write of the same writable (node 2, after it ended)" 2 write "$wmeta" "$src" "ENOENT|EALREADY|ECANCELED"
		rr=0
		wait_bg "$rpid" 30 || rr=$?
		[ "$rr" -eq 0 ] || fail "readable after the refusals" "exit $rr: $(lastline "$W/r.err")"
	else
		kill9 "$rpid"
		kill9 "$wpid"
		fail "refusals" "readable/writable printed no metadata: $(lastline "$W/r.err") $(lastline "$W/w.err")"
	fi

	# Owner restarted between metadata creation and read: the claim is refused ESTALE.
	W=$(mktemp -d "$DATA/x.XXXXXX")
	bg "$W/r.out" "$W/r.err" 0 readable "$src"
	rpid=$BG
	if rmeta=$(wait_line "$W/r.out" 30); then
		if xc_restart 0; then
			ok "node 0's xferd stopped with SIGTERM (exit 0) and started again"
		else
			fail "node 0's xferd stopped with SIGTERM (exit 0) and started again" "see above"
		fi
		told_of_shutdown "$rpid" "$W/r.err" 10
		refused "read of metadata from before node 0 restarted (node 1)" 1 read "$rmeta" "$DATA/ref.out1" ESTALE
		# Same after a crash (SIGKILL) and restart.
		bg "$W/r2.out" "$W/r2.err" 0 readable "$src"
		rpid=$BG
		if rmeta=$(wait_line "$W/r2.out" 30); then
			xc_kill 0
			wait_bg "$rpid" 10
			xc_start 0 || fail "node 0 start after SIGKILL" "see above"
			refused "read of metadata from before node 0 crashed and restarted (node 2)" 2 read "$rmeta" "$DATA/ref.out1" ESTALE
		else
			kill9 "$rpid"
			fail "ESTALE after SIGKILL" "readable printed no metadata"
		fi
	else
		kill9 "$rpid"
		fail "ESTALE" "readable printed no metadata: $(lastline "$W/r.err")"
	fi
	rm -f "$DATA"/ref.*
	after_failure "refusals and restarts"
fi

# =============================================================================================
# Groups of clients at once: track PID NAME ERR records one (ERR: its stderr file); wait_tracked
# SECONDS waits for all of them, adding "NAME exited RC: its last line of ERR; " to BAD for each
# that failed; group_verdict NAME OK_NAME gives the group's one ok/FAIL line from GOOD (every offer
# printed its metadata) and BAD.

track()
{
	PIDS+=("$1")
	NAMES+=("$2")
	ERRS+=("$3")
}
wait_tracked()
{
	local k rc
	BAD=
	for k in "${!PIDS[@]}"; do
		rc=0
		wait_bg "${PIDS[$k]}" "$1" || rc=$?
		[ "$rc" -eq 0 ] || BAD+="${NAMES[$k]} exited $rc: $(lastline "${ERRS[$k]}"); "
	done
}
group_verdict()
{
	if [ "$GOOD" != 1 ]; then
		fail "$1" "not every offer printed metadata: ${BAD%; }"
	elif [ -z "$BAD" ]; then
		ok "$2"
	else
		fail "$1" "${BAD%; }"
	fi
}

# 3 nodes, all-to-all at once: each node reads from both others and writes into both others.

if want all-to-all; then
	PIDS=()
	ERRS=()
	NAMES=()
	W=$(mktemp -d "$DATA/a2a.XXXXXX")
	for i in 0 1 2; do
		mkdata "a2a.$i" "$A2A_SIZE" >/dev/null
	done
	# Offers: node i makes one readable and one writable for each other node j.
	GOOD=1
	for i in 0 1 2; do
		for j in 0 1 2; do
			[ "$i" -ne "$j" ] || continue
			offer read "$i" "$DATA/a2a.$i" "" "$W/r$i$j"
			track "$PP" "readable on $i for $j" "$W/r$i$j.err"
			offer write "$i" "$DATA/a2a.$i" "$W/w$i$j.data" "$W/w$i$j"
			track "$PP" "writable on $i for $j" "$W/w$i$j.err"
		done
	done
	for i in 0 1 2; do
		for j in 0 1 2; do
			[ "$i" -ne "$j" ] || continue
			wait_line "$W/r$i$j.out" 30 >/dev/null && wait_line "$W/w$i$j.out" 30 >/dev/null || GOOD=0
		done
	done
	if [ "$GOOD" = 1 ]; then
		t0=$(now_ms)
		# Node j reads node i's readable and writes its own file into node i's writable, all
		# twelve transfers at once.
		for i in 0 1 2; do
			for j in 0 1 2; do
				[ "$i" -ne "$j" ] || continue
				claim read "$j" "$(firstline "$W/r$i$j.out")" "" "$W/ra$i$j.data" "$W/ra$i$j"
				track "$AP" "read by $j from $i" "$W/ra$i$j.err"
				claim write "$j" "$(firstline "$W/w$i$j.out")" "$DATA/a2a.$j" "" "$W/wa$i$j"
				track "$AP" "write by $j into $i" "$W/wa$i$j.err"
			done
		done
	fi
	wait_tracked 120
	if [ "$GOOD" = 1 ]; then
		secs=$(elapsed "$t0")
		for i in 0 1 2; do
			for j in 0 1 2; do
				[ "$i" -ne "$j" ] || continue
				cmp -s "$DATA/a2a.$i" "$W/ra$i$j.data" || BAD+="read by $j from $i: bytes differ; "
				cmp -s "$DATA/a2a.$j" "$W/w$i$j.data" || BAD+="write by $j into $i: bytes differ; "
			done
		done
	fi
	group_verdict "3 nodes all-to-all" \
		"3 nodes all-to-all: 6 reads + 6 writes of $A2A_SIZE bytes at once, identical (${secs:-} s)"
	rm -rf "$W" "$DATA"/a2a.*
	check_baseline "all-to-all"
fi

# =============================================================================================
# 20 concurrent clients per node: 20 pairs between node 0 and node 1 at once (10 reads, 10
# writes, sizes differing per pair).

# kind_of_pair K: pair K of the 20 is a read when K is even, a write when odd.
kind_of_pair() { if [ $(($1 % 2)) -eq 0 ]; then echo read; else echo write; fi; }

if want clients; then
	W=$(mktemp -d "$DATA/c20.XXXXXX")
	PIDS=()
	ERRS=()
	NAMES=()
	GOOD=1
	for k in $(seq 0 19); do
		s=$((MIB / 2 + k * 4097))
		head -c "$s" /dev/urandom >"$W/src$k"
		offer "$(kind_of_pair "$k")" 0 "$W/src$k" "$W/dst$k" "$W/p$k"
		track "$PP" "passive $k" "$W/p$k.err"
	done
	for k in $(seq 0 19); do
		wait_line "$W/p$k.out" 30 >/dev/null || GOOD=0
	done
	if [ "$GOOD" = 1 ]; then
		t0=$(now_ms)
		for k in $(seq 0 19); do
			claim "$(kind_of_pair "$k")" 1 "$(firstline "$W/p$k.out")" "$W/src$k" "$W/dst$k" "$W/a$k"
			track "$AP" "active $k" "$W/a$k.err"
		done
	fi
	wait_tracked 60
	if [ "$GOOD" = 1 ]; then
		secs=$(elapsed "$t0")
		for k in $(seq 0 19); do
			cmp -s "$W/src$k" "$W/dst$k" || BAD+="pair $k: bytes differ; "
		done
	fi
	group_verdict "20 concurrent clients per node" \
		"20 concurrent clients per node: 10 reads + 10 writes between node 0 and node 1, identical (${secs:-} s)"
	rm -rf "$W"
	check_baseline "20 clients"
fi

# =============================================================================================
# Failures mid-transfer. Each starts a FAIL_SIZE transfer between node 0 (owner) and node 1
# (active), waits until it is under way, freezes both daemons (SIGSTOP) so that it surely is
# still under way when the failure lands (on loopback a transfer ends in a fraction of a second),
# injects the failure, thaws the daemons that are left, and checks how each side ended, and how
# fast. The freeze lasts milliseconds, far below the keepalive timeout.

# freeze / thaw [NODE...]: SIGSTOP / SIGCONT the daemons of node 0 and node 1 (or NODE...).
freeze() { signal_daemons STOP 0 1; }
thaw()
{
	[ $# -gt 0 ] || set -- 0 1
	signal_daemons CONT "$@"
}

# start_pair KIND: KIND read or write. Starts the passive client on node 0 and the active one on
# node 1 (lib.sh's offer_pair, claim_pair), waits until the transfer is under way, and freezes
# both daemons. Sets PP, AP, FW; 1 with WHY when the transfer never got under way.
start_pair()
{
	local kind=$1 key=bytes_sent base
	[ "$kind" = read ] && key=bytes_received
	offer_pair "$kind" || return 1
	base=$(peer_bytes 1 0 "$key")
	claim_pair "$kind"
	if ! wait_mid 1 0 "$key" "$base" "$FAIL_SIZE" 30 "$PP" "$AP"; then
		WHY="the transfer was never seen under way on node 1 (last seen: ${MID_LAST:-nothing}; passive: $(lastline "$FW.p.err"); active: $(lastline "$FW.a.err"))"
		return 1
	fi
	freeze
}

BOUND_RESET=$(awk -v a="$KA_TIMEOUT" -v b="$SLACK" 'BEGIN { print a + b }')
BOUND_KA=$(awk -v a="$KA_TIMEOUT" -v b="$SLACK" 'BEGIN { print a + b }')

# close_case NAME: ends what is left of the pair, checks the nodes, slows them down again.
close_case()
{
	end_pair
	after_failure "$1"
	shape_all
}

if want failures; then
	FAILSRC=$(mkdata failsrc "$FAIL_SIZE")
	shape_all

	# --- peer daemon SIGKILL mid-transfer, each role ---
	for kind in read write; do
		for victim in 0 1; do
			[ "$victim" = 0 ] && role=owner || role=active
			name="$role daemon (node $victim) SIGKILL mid-$kind"
			if start_pair "$kind"; then
				t0=$(now_ms)
				xc_kill "$victim"
				thaw
				survivor_ends "$name" "$kind" "$victim" "$BOUND_RESET" ECONNRESET "$t0"
				# The dead daemon's client ends too.
				{ wait_bg "$PP" 10; wait_bg "$AP" 10; } >/dev/null
			else
				fail "$name" "$WHY"
			fi
			close_case "$name"
		done
	done

	# --- owner daemon SIGTERM mid-read: it drains, tells the peer, exits 0 ---
	name="owner daemon (node 0) SIGTERM mid-read"
	if start_pair read; then
		t0=$(now_ms)
		thaw
		if xc_stop 0; then
			ok "$name: xferd exited 0 after SIGTERM ($(elapsed "$t0") s)"
		else
			fail "$name: xferd exits 0 after SIGTERM" "see above"
		fi
		expect_end "$name: read on node 1 ends" "$AP" "$FW.a.err" "$BOUND_RESET" "ERRORED|CANCELLED" "ESHUTDOWN|ECONNRESET" "$t0"
		expect_end "$name: readable's client on node 0 ends" "$PP" "$FW.p.err" "$BOUND_RESET" "CANCELLED|ERRORED|xferd" "ESHUTDOWN|ECONNRESET" "$t0"
	else
		fail "$name" "$WHY"
	fi
	close_case "$name"

	# --- link cut mid-transfer (netns only) ---
	for kind in read write; do
		name="link of node 1 cut mid-$kind"
		if [ "$(xn_mode)" != netns ]; then
			skip "$name" "loopback mode: no link to cut"
			continue
		fi
		if start_pair "$kind"; then
			t0=$(now_ms)
			xn_link_down 1
			thaw
			expect_end "$name: $kind on node 1 ends" "$AP" "$FW.a.err" "$BOUND_KA" "ERRORED" "ETIMEDOUT|ECONNRESET" "$t0"
			expect_end "$name: $(passive_of "$kind") on node 0 ends" \
				"$PP" "$FW.p.err" "$BOUND_KA" "ERRORED" "ETIMEDOUT|ECONNRESET" "$t0"
			[ "$kind" = write ] && no_file "$name: the writable saved nothing" "$FW.dst"
		else
			fail "$name" "$WHY"
		fi
		xn_link_up 1
		# Node 1's other sets lost their PINGs too, and TCP's retransmission backoff can
		# outlast the keepalive timeout after the link is back: such a set is declared dead
		# up to KA_TIMEOUT after it last heard its peer, and a warm-up transfer started on it
		# before then ends ETIMEDOUT (seen once under the sanitizers). Past that, each set
		# has recovered or is gone, and the next transfer must work.
		sleep "$BOUND_KA"
		close_case "$name"
	done

	# --- frozen peer daemon (SIGSTOP longer than the keepalive timeout) ---
	name="reader's daemon (node 1) frozen mid-read"
	if start_pair read; then
		t0=$(now_ms)
		thaw 0 # node 1 stays frozen
		expect_end "$name: readable on node 0 ends" "$PP" "$FW.p.err" "$BOUND_KA" "ERRORED" "ETIMEDOUT" "$t0"
		thaw 1
		expect_end "$name: read on node 1 ends once thawed" "$AP" "$FW.a.err" 10 "ERRORED|CANCELLED" "ETIMEDOUT|ECONNRESET|ECANCELED" "$t0"
	else
		fail "$name" "$WHY"
	fi
	close_case "$name"

	# --- an operation's deadline passes mid-transfer (needs a slowed link to be mid-transfer) ---
	name="read's deadline (500 ms) passes mid-transfer"
	if [ "$(xn_mode)" != netns ]; then
		skip "$name" "loopback mode: transfers cannot be slowed down"
	else
		if offer_pair read; then
			t0=$(now_ms)
			bg "$FW.a.out" "$FW.a.err" 1 --timeout 500 read "$META" "$FW.dst"
			AP=$BG
			expect_end "$name: read on node 1 ends" "$AP" "$FW.a.err" 3 "ERRORED" "ETIMEDOUT" "$t0"
			expect_end "$name: readable on node 0 is told" "$PP" "$FW.p.err" 3.5 "ERRORED|CANCELLED" "ETIMEDOUT" "$t0"
		else
			fail "$name" "$WHY"
		fi
		close_case "$name"
	fi

	# --- clients killed -9 mid-transfer ---
	for victim in owner-read reader writer owner-write; do
		client_case "$victim"
		if start_pair "$KIND"; then
			kill_client "$victim" "$BOUND_RESET"
		else
			fail "$NAME" "$WHY"
		fi
		close_case "$NAME"
	done
	unshape_all

	# The nodes still move data correctly after all that.
	src=$(mkdata after 3000001)
	if xfer read 1 0 "$src" "$DATA/out" && xfer write 2 1 "$src" "$DATA/out"; then
		ok "after the failures: read 1 -> 0 and write 1 -> 2 still identical"
	else
		fail "after the failures: transfers still work" "$WHY"
	fi
fi

# =============================================================================================
# Shutdown: every daemon exits 0 on SIGTERM.

if xc_stop_all; then
	ok "every daemon exited 0 on SIGTERM"
else
	fail "every daemon exits 0 on SIGTERM" "see above"
fi

summary
[ "$failed" -eq 0 ]
