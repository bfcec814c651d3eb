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
BUILD=${BUILD:-build}
export BUILD
# shellcheck source=scripts/cluster.sh
. scripts/cluster.sh

KA_TIMEOUT=1.5 # keepalive_timeout_ms of scripts/cluster.sh's config, in seconds
SLACK=2.0      # scheduling slack on top of a bound (2 cores, sanitizers)
T=60           # seconds: "it ended at all" for one client

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

passed=0
failed=0
skipped=0
DATA=
NODE_IDS=()
declare -A BASE

ok()
{
	echo "ok - $1"
	passed=$((passed + 1))
}
fail()
{
	echo "FAIL - $1 ($2)"
	failed=$((failed + 1))
}
skip()
{
	echo "SKIP - $1 ($2)"
	skipped=$((skipped + 1))
}
note()
{
	echo "# $*"
}

summary()
{
	if [ "$skipped" -gt 0 ]; then
		echo "$passed passed, $failed failed, $skipped skipped"
	else
		echo "$passed passed, $failed failed"
	fi
}

cleanup()
{
	local p
	if [ "$failed" -gt 0 ] && [ "${XFER_CROSS_KEEP:-0}" = 1 ] && [ -n "$XN_DIR" ]; then
		cp -a "$XN_DIR" "$XN_DIR.kept" 2>/dev/null && note "logs kept in $XN_DIR.kept"
	fi
	xn_down # the daemons, by pid, and the namespaces
	# Clients still running: only live children of this shell (pids are not reused before they
	# are reaped, and `jobs -pr` lists exactly the unreaped ones).
	for p in $(jobs -pr); do
		kill -CONT "$p" 2>/dev/null
		kill -KILL "$p" 2>/dev/null
	done
	{ wait; } 2>/dev/null
	[ -n "$DATA" ] && rm -rf "$DATA"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now() { date +%s.%N; }
# elapsed T0: seconds since T0, 2 decimals.
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
# le A B: A <= B (decimals).
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

# ctl NODE ARGS...: xferctl against NODE's daemon, bounded.
ctl() {
	local node=$1
	shift
	timeout -k 2 $T "$BUILD/xferctl" --socket "$(xc_sock "$node")" "$@"
}

# bg OUT ERR NODE ARGS...: xferctl in the background (no wrapper: BG is xferctl's own pid, so
# kill -9 hits the client itself). Every bg process is waited for with a deadline by wait_bg.
bg()
{
	local out=$1 err=$2 node=$3
	shift 3
	"$BUILD/xferctl" --socket "$(xc_sock "$node")" "$@" >"$out" 2>"$err" &
	BG=$!
}

# ours PID: PID is a live (or stopped, not yet reaped) child of this shell, so signalling it
# cannot hit anybody else's process.
ours()
{
	jobs -pr | grep -qx "$1"
}

# wait_bg PID [SECONDS]: its exit status, or 124 after killing it when it outlived SECONDS.
wait_bg()
{
	local pid=$1 secs=${2:-$T} i rc
	for ((i = 0; i < secs * 50; i++)); do
		if ! ours "$pid"; then
			rc=0
			{ wait "$pid"; } 2>/dev/null || rc=$?
			return $rc
		fi
		sleep 0.02
	done
	kill9 "$pid"
	return 124
}

# kill9 PID: SIGKILL a background client (if it still runs) without bash's "Killed" report;
# reaps it.
kill9()
{
	[ -n "$1" ] || return 0
	{
		if ours "$1"; then
			kill -CONT "$1"
			kill -KILL "$1"
		fi
		wait "$1"
	} 2>/dev/null
	return 0
}

# wait_line FILE [SECONDS]: waits for FILE to hold one complete line and prints it.
wait_line()
{
	local f=$1 secs=${2:-$T} i
	for ((i = 0; i < secs * 50; i++)); do
		if [ -s "$f" ] && [ "$(tail -c 1 "$f" | od -An -c | tr -d ' ')" = '\n' ]; then
			head -n 1 "$f"
			return 0
		fi
		sleep 0.02
	done
	return 1
}

# firstline FILE: the first line of FILE, or "(empty)".
firstline()
{
	local l
	l=$(head -n 1 "$1" 2>/dev/null)
	echo "${l:-(empty)}"
}

# mkdata NAME SIZE: a file of SIZE random bytes in $DATA; prints its path.
mkdata()
{
	local f="$DATA/$1"
	if [ ! -f "$f" ]; then
		head -c "$2" /dev/urandom >"$f.tmp" && mv "$f.tmp" "$f"
	fi
	echo "$f"
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

# ---------------------------------------------------------------------------------------------
# One transfer between two nodes with xferctl. Sets R_PASSIVE, R_ACTIVE (exit statuses), the
# files $W/p.out $W/p.err $W/a.out $W/a.err, and R_WHY (what went wrong, for the FAIL line).

# xfer_read OWNER READER SRCFILE DSTFILE: readable on OWNER, read on READER.
xfer_read()
{
	local owner=$1 reader=$2 src=$3 dst=$4 meta ppid
	W=$(mktemp -d "$DATA/x.XXXXXX")
	R_WHY=
	R_PASSIVE=
	R_ACTIVE=
	rm -f "$dst"
	bg "$W/p.out" "$W/p.err" "$owner" readable "$src"
	ppid=$BG
	if ! meta=$(wait_line "$W/p.out" 30); then
		kill9 "$ppid"
		R_WHY="readable printed no metadata: $(firstline "$W/p.err")"
		return 1
	fi
	R_ACTIVE=0
	ctl "$reader" read "$meta" "$dst" >"$W/a.out" 2>"$W/a.err" || R_ACTIVE=$?
	R_PASSIVE=0
	wait_bg "$ppid" 30 || R_PASSIVE=$?
	if [ "$R_ACTIVE" -ne 0 ]; then
		R_WHY="read exited $R_ACTIVE: $(firstline "$W/a.err")"
	elif [ "$R_PASSIVE" -ne 0 ]; then
		R_WHY="readable exited $R_PASSIVE: $(firstline "$W/p.err")"
	elif ! cmp -s "$src" "$dst"; then
		R_WHY="bytes differ: $(cmp "$src" "$dst" 2>&1 | head -n 1)"
	fi
	[ -z "$R_WHY" ]
}

# xfer_write OWNER WRITER SRCFILE DSTFILE: writable on OWNER (saved to DSTFILE), write from
# WRITER.
xfer_write()
{
	local owner=$1 writer=$2 src=$3 dst=$4 meta ppid size
	W=$(mktemp -d "$DATA/x.XXXXXX")
	R_WHY=
	R_PASSIVE=
	R_ACTIVE=
	rm -f "$dst"
	size=$(stat -c %s "$src")
	bg "$W/p.out" "$W/p.err" "$owner" writable "$size" "$dst"
	ppid=$BG
	if ! meta=$(wait_line "$W/p.out" 30); then
		kill9 "$ppid"
		R_WHY="writable printed no metadata: $(firstline "$W/p.err")"
		return 1
	fi
	R_ACTIVE=0
	ctl "$writer" write "$meta" "$src" >"$W/a.out" 2>"$W/a.err" || R_ACTIVE=$?
	R_PASSIVE=0
	wait_bg "$ppid" 30 || R_PASSIVE=$?
	if [ "$R_ACTIVE" -ne 0 ]; then
		R_WHY="write exited $R_ACTIVE: $(firstline "$W/a.err")"
	elif [ "$R_PASSIVE" -ne 0 ]; then
		R_WHY="writable exited $R_PASSIVE: $(firstline "$W/p.err")"
	elif ! cmp -s "$src" "$dst"; then
		R_WHY="bytes differ: $(cmp "$src" "$dst" 2>&1 | head -n 1)"
	fi
	[ -z "$R_WHY" ]
}

# ---------------------------------------------------------------------------------------------
# Baselines: what an idle daemon holds. fds are counted without the peer connections (the
# `connections` of `xferctl peers`), which come and go with peers and are not leaks.

# snapshot NODE: "regions ops ops_active fds-minus-peer-connections clients"
snapshot()
{
	local s p
	s=$(ctl "$1" --json stats) || return 1
	p=$(ctl "$1" --json peers) || return 1
	"$XN_PY" -c '
import json, sys
s = json.loads(sys.argv[1]); p = json.loads(sys.argv[2])
conns = sum(int(x.get("connections", 0)) for x in p.get("peers", []))
print(s["regions"], s["ops"], s["ops_active"], s["fds"] - conns, s["clients"])
' "$s" "$p"
}

take_baseline()
{
	local i n
	n=$(xn_count)
	for ((i = 0; i < n; i++)); do
		BASE[$i]=$(snapshot "$i") || return 1
		note "baseline node $i (regions ops ops_active fds clients): ${BASE[$i]}"
	done
}

# check_baseline NAME: every daemon back to its baseline within 5 s; one ok/FAIL line.
check_baseline()
{
	local name=$1 i n t cur bad=
	n=$(xn_count)
	for ((i = 0; i < n; i++)); do
		cur=
		for ((t = 0; t < 100; t++)); do
			cur=$(snapshot "$i") || cur="(stats failed)"
			[ "$cur" = "${BASE[$i]}" ] && break
			sleep 0.05
		done
		[ "$cur" = "${BASE[$i]}" ] ||
			bad+="node $i: '$cur' (regions ops ops_active fds clients), baseline '${BASE[$i]}'; "
	done
	if [ -z "$bad" ]; then
		ok "$name: every daemon back to baseline (regions, ops, fds)"
	else
		fail "$name: every daemon back to baseline (regions, ops, fds)" "${bad%; }"
	fi
}

# warm: a 4 KiB read between every ordered pair of nodes, so that every connection set exists.
warm()
{
	local i j n f
	n=$(xn_count)
	f=$(mkdata warm 4096)
	for ((i = 0; i < n; i++)); do
		for ((j = 0; j < n; j++)); do
			[ "$i" -ne "$j" ] || continue
			xfer_read "$i" "$j" "$f" "$DATA/warm.out" || {
				note "warm-up $i -> $j: $R_WHY"
				return 1
			}
		done
	done
	return 0
}

# revive NODE...: starts the named daemons again if they are not running.
revive()
{
	local i
	for i in "$@"; do
		if [ -z "$(xc_pid "$i")" ] || ! kill -0 "$(xc_pid "$i")" 2>/dev/null; then
			xc_start "$i" || return 1
		fi
	done
}

# after_failure NAME: revive every daemon, re-warm, compare with the baseline.
after_failure()
{
	local i n
	n=$(xn_count)
	for ((i = 0; i < n; i++)); do
		revive "$i" || {
			fail "$1: every daemon back to baseline (regions, ops, fds)" "node $i's xferd did not start again"
			return
		}
	done
	if ! warm; then
		fail "$1: the nodes transfer again afterwards" "$R_WHY"
		return
	fi
	check_baseline "$1"
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
			if ! ours "$p"; then
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

# want GROUP: true if GROUP is to run (XFER_CROSS_ONLY); notes the time the suite has taken.
want()
{
	[ -z "${XFER_CROSS_ONLY:-}" ] || [[ $1 =~ $XFER_CROSS_ONLY ]] || return 1
	note "--- $1 (at ${SECONDS} s)"
}

# =============================================================================================
# Setup

DATA=$(mktemp -d /dev/shm/xfcross.XXXXXX 2>/dev/null || mktemp -d "${TMPDIR:-/tmp}/xfcross.XXXXXX")

for b in xferd xferctl; do
	if [ ! -x "$BUILD/$b" ]; then
		fail setup "$BUILD/$b is missing: build first"
		summary
		exit 1
	fi
done
if ! "$BUILD/xferd" --help 2>&1 | grep -q -- --listen; then
	fail setup "$BUILD/xferd has no --listen option: the TCP transport is not built in"
	summary
	exit 1
fi

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

if ! xc_start_all; then
	fail setup "the daemons did not start (see above)"
	summary
	exit 1
fi
for i in 0 1 2; do
	NODE_IDS[$i]=$(xc_node_id "$i") || NODE_IDS[$i]=
done
note "node ids: ${NODE_IDS[*]}"

if warm; then
	ok "setup: 3 daemons up, every pair of nodes has transferred 4 KiB"
else
	fail setup "warm-up transfers between the nodes failed: $R_WHY"
	summary
	exit 1
fi
take_baseline || {
	fail setup "xferctl stats failed"
	summary
	exit 1
}

# =============================================================================================
# The four operations, byte-exact, across sizes

if want sizes; then
	sizes=(1 4095 4096 $((MIB + 1)) $((4 * MIB + 1)) $((64 * MIB)))
	[ "$BIG" -gt $((64 * MIB)) ] && sizes+=("$BIG")
	for s in "${sizes[@]}"; do
		src=$(mkdata "size.$s" "$s")
		# Both directions for the smaller sizes; the big ones once each way round.
		pairs="0:1 1:0"
		[ "$s" -gt $((4 * MIB + 1)) ] && pairs="0:1"
		for p in $pairs; do
			o=${p%:*}
			a=${p#*:}
			if xfer_read "$o" "$a" "$src" "$DATA/out"; then
				ok "readable on node $o, read on node $a: $s bytes identical"
			else
				fail "readable on node $o, read on node $a: $s bytes" "$R_WHY"
			fi
			if xfer_write "$a" "$o" "$src" "$DATA/out"; then
				ok "writable on node $a, write from node $o: $s bytes identical"
			else
				fail "writable on node $a, write from node $o: $s bytes" "$R_WHY"
			fi
			rm -f "$DATA/out"
			rm -rf "$DATA"/x.*
		done
		[ "$s" -gt $((64 * MIB)) ] && rm -f "$src"
	done
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
	else
		skip "multi-descriptor operations across nodes" \
			"$BUILD/xferbench_net is not built; xferctl offers one descriptor per operation"
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
		xfer_read 0 1 "$src" "$DATA/listing.out" || fail "listing transfer" "$R_WHY"
	fi
	# Both clients are stopped (SIGSTOP) while the daemons move the bytes, so both operations
	# stay listed after the transfer. To stop the reader after it asked for the read but before
	# the transfer ends, node 0's daemon is frozen for that moment (well under the keepalive
	# timeout): the claim waits for it.
	[ "$(id -u)" = 0 ] && bg "$W/p.out" "$W/p.err" 0 readable "$src" && ppid=$BG
	if [ "$(id -u)" != 0 ]; then
		: # done above
	elif meta=$(wait_line "$W/p.out" 30); then
		ours "$ppid" && kill -STOP "$ppid"
		kill -STOP "$(xc_pid 0)"
		bg "$W/a.out" "$W/a.err" 1 read "$meta" "$DATA/listing.out"
		apid=$BG
		seen=
		# At most ~1 s frozen: node 1's keepalive timeout is 1.5 s.
		for ((i = 0; i < 35; i++)); do
			if ctl 1 --json ops | grep -q '"kind":"read"'; then
				ours "$apid" && kill -STOP "$apid"
				seen=1
				break
			fi
			ours "$apid" || break
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
			fail "xferctl ops: transport tcp, peer node id, bytes" "the read was not listed within 1 s: $(firstline "$W/a.err")"
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
			ours "$p" && kill -CONT "$p"
		done
		ra=0
		wait_bg "$apid" 30 || ra=$?
		rp=0
		wait_bg "$ppid" 30 || rp=$?
		if [ "$ra" -eq 0 ] && [ "$rp" -eq 0 ] && cmp -s "$src" "$DATA/listing.out"; then
			ok "stopped clients resumed: both exit 0, bytes identical"
		else
			fail "stopped clients resumed" "read $ra ($(firstline "$W/a.err")), readable $rp ($(firstline "$W/p.err"))"
		fi
	else
		kill9 "$ppid"
		fail "xferctl ops: transport tcp" "readable printed no metadata: $(firstline "$W/p.err")"
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

# refused NAME NODE VERB META FILE ERRNO: `xferctl VERB META FILE` on NODE must exit 1 naming
# ERRNO (a |-separated list of accepted names).
refused()
{
	local name=$1 node=$2 verb=$3 meta=$4 file=$5 want=$6 rc=0
	ctl "$node" "$verb" "$meta" "$file" >"$DATA/ref.out" 2>"$DATA/ref.err" || rc=$?
	if [ "$rc" -eq 1 ] && grep -Eq "\\(($want)\\)" "$DATA/ref.err"; then
		ok "$name: refused with $(grep -Eo "\\(($want)\\)" "$DATA/ref.err" | head -n 1)"
	else
		fail "$name" "exit $rc, expected 1 and ($want): $(firstline "$DATA/ref.err")"
	fi
}

if want refusals; then
	src=$(mkdata ref 65536)
	other=$(mkdata ref2 65537)
	W=$(mktemp -d "$DATA/x.XXXXXX")
	bg "$W/r.out" "$W/r.err" 0 readable "$src"
	rpid=$BG
	bg "$W/w.out" "$W/w.err" 0 writable 65536 "$DATA/ref.writable"
	wpid=$BG
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
		refused "read with writable metadata (node 1)" 1 read "$wmeta" "$DATA/ref.out1" EINVAL
		refused "write with readable metadata (node 1)" 1 write "$rmeta" "$src" EINVAL
		refused "write of 65537 bytes into a 65536-byte writable (node 1)" 1 write "$wmeta" "$other" EMSGSIZE
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
		ours "$rpid" && kill -STOP "$rpid" # keeps the completed readable listed for a second claim
		rc=0
		ctl 1 read "$rmeta" "$DATA/ref.out1" >/dev/null 2>"$W/a.err" || rc=$?
		if [ "$rc" -eq 0 ] && cmp -s "$src" "$DATA/ref.out1"; then
			ok "read from node 1 after the refusals: bytes identical"
		else
			fail "read from node 1 after the refusals" "exit $rc: $(firstline "$W/a.err")"
		fi
		refused "second read of the same readable (node 2)" 2 read "$rmeta" "$DATA/ref.out2" "EALREADY|ECANCELED"
		ours "$rpid" && kill -CONT "$rpid"
		rc=0
		ctl 1 write "$wmeta" "$src" >/dev/null 2>"$W/a.err" || rc=$?
		rw=0
		wait_bg "$wpid" 30 || rw=$?
		if [ "$rc" -eq 0 ] && [ "$rw" -eq 0 ] && cmp -s "$src" "$DATA/ref.writable"; then
			ok "write from node 1 after the refusals: bytes identical"
		else
			fail "write from node 1 after the refusals" "write $rc ($(firstline "$W/a.err")), writable $rw ($(firstline "$W/w.err"))"
		fi
		refused "second write of the same writable (node 2, after it ended)" 2 write "$wmeta" "$src" "ENOENT|EALREADY|ECANCELED"
		rr=0
		wait_bg "$rpid" 30 || rr=$?
		[ "$rr" -eq 0 ] || fail "readable after the refusals" "exit $rr: $(firstline "$W/r.err")"
	else
		kill9 "$rpid"
		kill9 "$wpid"
		fail "refusals" "readable/writable printed no metadata: $(firstline "$W/r.err") $(firstline "$W/w.err")"
	fi

	# Owner restarted between metadata creation and read: the claim is refused ESTALE.
	W=$(mktemp -d "$DATA/x.XXXXXX")
	bg "$W/r.out" "$W/r.err" 0 readable "$src"
	rpid=$BG
	if rmeta=$(wait_line "$W/r.out" 30); then
		restart_ok=1
		xc_restart 0 || restart_ok=0
		rr=0
		wait_bg "$rpid" 10 || rr=$?
		if [ "$restart_ok" = 1 ]; then
			ok "node 0's xferd stopped with SIGTERM (exit 0) and started again"
		else
			fail "node 0's xferd stopped with SIGTERM (exit 0) and started again" "see above"
		fi
		if [ "$rr" -eq 1 ] && grep -q ESHUTDOWN "$W/r.err"; then
			ok "readable's client told of the shutdown: $(firstline "$W/r.err")"
		else
			fail "readable's client told of the shutdown" "exit $rr: $(firstline "$W/r.err")"
		fi
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
		fail "ESTALE" "readable printed no metadata: $(firstline "$W/r.err")"
	fi
	rm -f "$DATA"/ref.*
	after_failure "refusals and restarts"
fi

# =============================================================================================
# 3 nodes, all-to-all at once: each node reads from both others and writes into both others.

if want all-to-all; then
	pids=()
	names=()
	W=$(mktemp -d "$DATA/a2a.XXXXXX")
	for i in 0 1 2; do
		mkdata "a2a.$i" "$A2A_SIZE" >/dev/null
	done
	# Offers: node i makes one readable and one writable for each other node j.
	good=1
	for i in 0 1 2; do
		for j in 0 1 2; do
			[ "$i" -ne "$j" ] || continue
			bg "$W/r$i$j.out" "$W/r$i$j.err" "$i" readable "$DATA/a2a.$i"
			pids+=("$BG")
			names+=("readable on $i for $j")
			bg "$W/w$i$j.out" "$W/w$i$j.err" "$i" writable "$A2A_SIZE" "$W/w$i$j.data"
			pids+=("$BG")
			names+=("writable on $i for $j")
		done
	done
	for i in 0 1 2; do
		for j in 0 1 2; do
			[ "$i" -ne "$j" ] || continue
			wait_line "$W/r$i$j.out" 30 >/dev/null && wait_line "$W/w$i$j.out" 30 >/dev/null || good=0
		done
	done
	if [ "$good" = 1 ]; then
		t0=$(now)
		# Node j reads node i's readable and writes its own file into node i's writable, all
		# twelve transfers at once.
		for i in 0 1 2; do
			for j in 0 1 2; do
				[ "$i" -ne "$j" ] || continue
				bg "$W/ra$i$j.out" "$W/ra$i$j.err" "$j" read "$(head -n 1 "$W/r$i$j.out")" "$W/ra$i$j.data"
				pids+=("$BG")
				names+=("read by $j from $i")
				bg "$W/wa$i$j.out" "$W/wa$i$j.err" "$j" write "$(head -n 1 "$W/w$i$j.out")" "$DATA/a2a.$j"
				pids+=("$BG")
				names+=("write by $j into $i")
			done
		done
	fi
	bad=
	for k in "${!pids[@]}"; do
		rc=0
		wait_bg "${pids[$k]}" 120 || rc=$?
		[ "$rc" -eq 0 ] || bad+="${names[$k]} exited $rc; "
	done
	if [ "$good" = 1 ]; then
		secs=$(elapsed "$t0")
		for i in 0 1 2; do
			for j in 0 1 2; do
				[ "$i" -ne "$j" ] || continue
				cmp -s "$DATA/a2a.$i" "$W/ra$i$j.data" || bad+="read by $j from $i: bytes differ; "
				cmp -s "$DATA/a2a.$j" "$W/w$i$j.data" || bad+="write by $j into $i: bytes differ; "
			done
		done
		if [ -z "$bad" ]; then
			ok "3 nodes all-to-all: 6 reads + 6 writes of $A2A_SIZE bytes at once, identical (${secs} s)"
		else
			fail "3 nodes all-to-all" "${bad%; }; first error: $(cat "$W"/*.err 2>/dev/null | head -n 1)"
		fi
	else
		fail "3 nodes all-to-all" "not every offer printed metadata: $(cat "$W"/*.err 2>/dev/null | head -n 1)"
	fi
	rm -rf "$W" "$DATA"/a2a.*
	check_baseline "all-to-all"
fi

# =============================================================================================
# 20 concurrent clients per node: 20 pairs between node 0 and node 1 at once (10 reads, 10
# writes, sizes differing per pair).

if want clients; then
	W=$(mktemp -d "$DATA/c20.XXXXXX")
	pids=()
	names=()
	good=1
	for k in $(seq 0 19); do
		s=$((MIB / 2 + k * 4097))
		head -c "$s" /dev/urandom >"$W/src$k"
		if [ $((k % 2)) -eq 0 ]; then
			bg "$W/p$k.out" "$W/p$k.err" 0 readable "$W/src$k"
		else
			bg "$W/p$k.out" "$W/p$k.err" 0 writable "$s" "$W/dst$k"
		fi
		pids+=("$BG")
		names+=("passive $k")
	done
	for k in $(seq 0 19); do
		wait_line "$W/p$k.out" 30 >/dev/null || good=0
	done
	if [ "$good" = 1 ]; then
		t0=$(now)
		for k in $(seq 0 19); do
			if [ $((k % 2)) -eq 0 ]; then
				bg "$W/a$k.out" "$W/a$k.err" 1 read "$(head -n 1 "$W/p$k.out")" "$W/dst$k"
			else
				bg "$W/a$k.out" "$W/a$k.err" 1 write "$(head -n 1 "$W/p$k.out")" "$W/src$k"
			fi
			pids+=("$BG")
			names+=("active $k")
		done
	fi
	bad=
	for k in "${!pids[@]}"; do
		rc=0
		wait_bg "${pids[$k]}" 60 || rc=$?
		[ "$rc" -eq 0 ] || bad+="${names[$k]} exited $rc; "
	done
	if [ "$good" = 1 ]; then
		secs=$(elapsed "$t0")
		for k in $(seq 0 19); do
			cmp -s "$W/src$k" "$W/dst$k" || bad+="pair $k: bytes differ; "
		done
		if [ -z "$bad" ]; then
			ok "20 concurrent clients per node: 10 reads + 10 writes between node 0 and node 1, identical (${secs} s)"
		else
			fail "20 concurrent clients per node" "${bad%; }; first error: $(cat "$W"/*.err 2>/dev/null | head -n 1)"
		fi
	else
		fail "20 concurrent clients per node" "not every offer printed metadata: $(cat "$W"/*.err 2>/dev/null | head -n 1)"
	fi
	rm -rf "$W"
	check_baseline "20 clients"
fi

# =============================================================================================
# Failures mid-transfer. Each starts a FAIL_SIZE transfer between node 0 (owner) and node 1
# (active), waits until it is under way, freezes both daemons (SIGSTOP) so that it surely is
# still under way when the failure lands (on loopback a transfer ends in a fraction of a second),
# injects the failure, thaws the daemons that are left, and checks how each side ended, and how
# fast. The freeze lasts milliseconds, far below the keepalive timeout.

# freeze / thaw: SIGSTOP / SIGCONT the daemons of node 0 and node 1 (those running).
freeze()
{
	local n pid
	for n in 0 1; do
		pid=$(xc_pid "$n")
		[ -n "$pid" ] && ours "$pid" && kill -STOP "$pid"
	done
	return 0
}
thaw()
{
	local n pid
	[ $# -gt 0 ] || set -- 0 1
	for n in "$@"; do
		pid=$(xc_pid "$n")
		[ -n "$pid" ] && ours "$pid" && kill -CONT "$pid"
	done
	return 0
}

# start_pair KIND: KIND read or write. Starts the passive client on node 0 and the active one on
# node 1, and waits until the transfer is under way. Sets PP (passive pid), AP (active pid), W.
# Returns 1 (with FAIL_WHY) when the transfer never got under way.
start_pair()
{
	local kind=$1 meta key base
	W=$(mktemp -d "$DATA/f.XXXXXX")
	FAIL_WHY=
	PP=
	AP=
	if [ "$kind" = read ]; then
		bg "$W/p.out" "$W/p.err" 0 readable "$FAILSRC"
	else
		bg "$W/p.out" "$W/p.err" 0 writable "$FAIL_SIZE" "$W/dst"
	fi
	PP=$BG
	if ! meta=$(wait_line "$W/p.out" 30); then
		FAIL_WHY="passive client printed no metadata: $(firstline "$W/p.err")"
		return 1
	fi
	if [ "$kind" = read ]; then
		key=bytes_received
	else
		key=bytes_sent
	fi
	base=$(peer_bytes 1 0 "$key")
	if [ "$kind" = read ]; then
		bg "$W/a.out" "$W/a.err" 1 read "$meta" "$W/dst"
	else
		bg "$W/a.out" "$W/a.err" 1 write "$meta" "$FAILSRC"
	fi
	AP=$BG
	if ! wait_mid 1 0 "$key" "$base" "$FAIL_SIZE" 30 "$PP" "$AP"; then
		FAIL_WHY="the transfer was never seen under way on node 1 (last seen: ${MID_LAST:-nothing}; passive: $(firstline "$W/p.err"); active: $(firstline "$W/a.err"))"
		return 1
	fi
	freeze
	return 0
}

# end_pair: kills what is left of a pair (after a failed start or check).
end_pair()
{
	local p
	thaw
	for p in $PP $AP; do
		kill9 "$p"
	done
}

# expect_end NAME PID ERRFILE SECONDS STATES ERRNOS T0: the client PID must exit 1 within SECONDS
# of T0, its error line naming one of STATES (e.g. ERRORED|CANCELLED) and of ERRNOS.
expect_end()
{
	local name=$1 pid=$2 err=$3 secs=$4 states=$5 errnos=$6 t0=$7 rc=0 took line
	wait_bg "$pid" 30 || rc=$?
	took=$(elapsed "$t0")
	line=$(firstline "$err")
	if [ "$rc" -ne 1 ]; then
		fail "$name" "exit $rc after ${took} s, expected 1: $line"
	elif ! le "$took" "$secs"; then
		fail "$name" "ended after ${took} s, bound ${secs} s: $line"
	elif ! grep -Eq "($states)" "$err" || ! grep -Eq "\\(($errnos)\\)" "$err"; then
		fail "$name" "expected ($states) and ($errnos): $line"
	else
		ok "$name: ${took} s: $line"
	fi
}

# no_file NAME FILE: a writable that did not get every byte must not have saved anything.
no_file()
{
	if [ -e "$2" ]; then
		fail "$1" "$2 exists ($(stat -c %s "$2") bytes): a partial writable was reported COMPLETE"
	else
		ok "$1"
	fi
}

BOUND_RESET=$(awk -v a="$KA_TIMEOUT" -v b="$SLACK" 'BEGIN { print a + b }')
BOUND_KA=$(awk -v a="$KA_TIMEOUT" -v b="$SLACK" 'BEGIN { print a + b }')

if want failures; then
	FAILSRC=$(mkdata failsrc "$FAIL_SIZE")
	shape_all

	# --- peer daemon SIGKILL mid-transfer, each role ---
	for kind in read write; do
		for victim in 0 1; do
			[ "$victim" = 0 ] && role=owner || role=active
			name="$role daemon (node $victim) SIGKILL mid-$kind"
			if start_pair "$kind"; then
				t0=$(now)
				xc_kill "$victim"
				thaw
				if [ "$victim" = 0 ]; then
					# The survivor is the active client on node 1; the owner's client lost its daemon.
					expect_end "$name: $kind on node 1 ends" "$AP" "$W/a.err" "$BOUND_RESET" "ERRORED" "ECONNRESET" "$t0"
					wait_bg "$PP" 10 >/dev/null
				else
					expect_end "$name: $( [ "$kind" = read ] && echo readable || echo writable) on node 0 ends" \
						"$PP" "$W/p.err" "$BOUND_RESET" "ERRORED" "ECONNRESET" "$t0"
					wait_bg "$AP" 10 >/dev/null
				fi
				[ "$kind" = write ] && [ "$victim" = 1 ] && no_file "$name: the writable saved nothing" "$W/dst"
			else
				fail "$name" "$FAIL_WHY"
			fi
			end_pair
			after_failure "$name"
			shape_all
		done
	done

	# --- owner daemon SIGTERM mid-read: it drains, tells the peer, exits 0 ---
	name="owner daemon (node 0) SIGTERM mid-read"
	if start_pair read; then
		t0=$(now)
		thaw
		if xc_stop 0; then
			ok "$name: xferd exited 0 after SIGTERM ($(elapsed "$t0") s)"
		else
			fail "$name: xferd exits 0 after SIGTERM" "see above"
		fi
		expect_end "$name: read on node 1 ends" "$AP" "$W/a.err" "$BOUND_RESET" "ERRORED|CANCELLED" "ESHUTDOWN|ECONNRESET" "$t0"
		expect_end "$name: readable's client on node 0 ends" "$PP" "$W/p.err" "$BOUND_RESET" "CANCELLED|ERRORED|xferd" "ESHUTDOWN|ECONNRESET" "$t0"
	else
		fail "$name" "$FAIL_WHY"
	fi
	end_pair
	after_failure "$name"
	shape_all

	# --- link cut mid-transfer (netns only) ---
	for kind in read write; do
		name="link of node 1 cut mid-$kind"
		if [ "$(xn_mode)" != netns ]; then
			skip "$name" "loopback mode: no link to cut"
			continue
		fi
		if start_pair "$kind"; then
			t0=$(now)
			xn_link_down 1
			thaw
			expect_end "$name: $kind on node 1 ends" "$AP" "$W/a.err" "$BOUND_KA" "ERRORED" "ETIMEDOUT|ECONNRESET" "$t0"
			expect_end "$name: $( [ "$kind" = read ] && echo readable || echo writable) on node 0 ends" \
				"$PP" "$W/p.err" "$BOUND_KA" "ERRORED" "ETIMEDOUT|ECONNRESET" "$t0"
			[ "$kind" = write ] && no_file "$name: the writable saved nothing" "$W/dst"
		else
			fail "$name" "$FAIL_WHY"
		fi
		xn_link_up 1
		end_pair
		after_failure "$name"
		shape_all
	done

	# --- frozen peer daemon (SIGSTOP longer than the keepalive timeout) ---
	name="reader's daemon (node 1) frozen mid-read"
	if start_pair read; then
		t0=$(now)
		thaw 0 # node 1 stays frozen
		expect_end "$name: readable on node 0 ends" "$PP" "$W/p.err" "$BOUND_KA" "ERRORED" "ETIMEDOUT" "$t0"
		thaw 1
		expect_end "$name: read on node 1 ends once thawed" "$AP" "$W/a.err" 10 "ERRORED|CANCELLED" "ETIMEDOUT|ECONNRESET|ECANCELED" "$t0"
	else
		fail "$name" "$FAIL_WHY"
	fi
	end_pair
	after_failure "$name"
	shape_all

	# --- an operation's deadline passes mid-transfer (needs a slowed link to be mid-transfer) ---
	name="read's deadline (500 ms) passes mid-transfer"
	if [ "$(xn_mode)" != netns ]; then
		skip "$name" "loopback mode: transfers cannot be slowed down"
	else
		W=$(mktemp -d "$DATA/f.XXXXXX")
		bg "$W/p.out" "$W/p.err" 0 readable "$FAILSRC"
		PP=$BG
		AP=
		if meta=$(wait_line "$W/p.out" 30); then
			t0=$(now)
			bg "$W/a.out" "$W/a.err" 1 --timeout 500 read "$meta" "$W/dst"
			AP=$BG
			expect_end "$name: read on node 1 ends" "$AP" "$W/a.err" 3 "ERRORED" "ETIMEDOUT" "$t0"
			expect_end "$name: readable on node 0 is told" "$PP" "$W/p.err" 3.5 "ERRORED|CANCELLED" "ETIMEDOUT" "$t0"
		else
			fail "$name" "readable printed no metadata: $(firstline "$W/p.err")"
		fi
		end_pair
		after_failure "$name"
		shape_all
	fi

	# --- clients killed -9 mid-transfer ---
	for victim in owner-read reader writer owner-write; do
		case $victim in
		owner-read)
			kind="read"
			name="owner client (xferctl readable, node 0) killed -9 mid-read"
			;;
		reader)
			kind="read"
			name="reader client (xferctl read, node 1) killed -9 mid-read"
			;;
		writer)
			kind="write"
			name="writer client (xferctl write, node 1) killed -9 mid-write"
			;;
		owner-write)
			kind="write"
			name="owner client (xferctl writable, node 0) killed -9 mid-write"
			;;
		esac
		if start_pair "$kind"; then
			t0=$(now)
			case $victim in
			owner-read | owner-write)
				kill9 "$PP"
				thaw
				expect_end "$name: $kind on node 1 ends" "$AP" "$W/a.err" "$BOUND_RESET" "ERRORED|CANCELLED" "ECONNRESET|ECANCELED" "$t0"
				;;
			reader)
				kill9 "$AP"
				thaw
				expect_end "$name: readable on node 0 ends" "$PP" "$W/p.err" "$BOUND_RESET" "ERRORED|CANCELLED" "ECONNRESET|ECANCELED" "$t0"
				;;
			writer)
				kill9 "$AP"
				thaw
				expect_end "$name: writable on node 0 ends, not COMPLETE" "$PP" "$W/p.err" "$BOUND_RESET" "ERRORED|CANCELLED" "ECONNRESET|ECANCELED" "$t0"
				no_file "$name: the writable saved nothing" "$W/dst"
				;;
			esac
		else
			fail "$name" "$FAIL_WHY"
		fi
		end_pair
		after_failure "$name"
		shape_all
	done
	unshape_all

	# The nodes still move data correctly after all that.
	src=$(mkdata after 3000001)
	if xfer_read 1 0 "$src" "$DATA/out" && xfer_write 2 1 "$src" "$DATA/out"; then
		ok "after the failures: read 1 -> 0 and write 1 -> 2 still identical"
	else
		fail "after the failures: transfers still work" "$R_WHY"
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
