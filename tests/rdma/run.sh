#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# tests/rdma/run.sh: cross-node tests of xferd over RDMA. Runs INSIDE the VM of
# scripts/rxe-vm.sh (`make test-rdma`), which provides two Soft-RoCE devices on a veth pair:
#   node 0: xferd --rdma-device $RXE_DEV0 (rxe0) --listen $RXE_IP0 (10.77.0.1):7700
#   node 1: xferd --rdma-device $RXE_DEV1 (rxe1) --listen $RXE_IP1 (10.77.0.2):7700
# both with --transport rdma and "require_rdma": true, so a fallback to TCP is an error.
#
#   - devices: each daemon uses its rxe device, port ACTIVE, Ethernet, MTU, RoCE v2 GID
#   - the four operations byte-exact (cmp) at 4 KiB .. 32 MiB, both directions; each passive op
#     (and each active op seen while it ran) lists transport "rdma"; peers list transport rdma;
#     the devices count RDMA READ/WRITE bytes; regions list per-device keys
#   - multi-descriptor ops with mismatched boundaries (tests/rdma/rdma_sg.c)
#   - concurrency: 8 readable/read pairs each direction plus 4 writable/write pairs each
#     direction, all at once
#   - refusals before any byte moves: EINVAL (pairing), EMSGSIZE, EALREADY (second claim while
#     the first runs), ESTALE (owner restarted); the passive op stays claimable
#   - failures mid-transfer: either daemon SIGKILLed (the survivor's op ends ERRORED within the
#     keepalive bound), and each of the four clients SIGKILLed (the other side's op ends, and
#     the connection set between the daemons, shared by every client, survives)
#   - after each group: regions, ops, active ops, fds and clients back to their baseline
#
# Prints "ok - NAME" / "FAIL - NAME (why)" and a final "N passed, N failed". Every wait is
# bounded; nothing asserts on speed (Soft-RoCE under TCG moves ~10-20 MB/s).
#
# Environment: BUILD (default build); XFER_RDMA_TRANSPORT=tcp runs the same cases over TCP
# between the two addresses (expects transport "tcp"; the veths are slowed to 100 Mbit/s with
# tc for the failure cases, or they end before they are caught under way); XFER_RDMA_FAIL_SIZE (bytes moved in
# the failure cases, default 64 MiB); XFER_RDMA_LOG (daemon log level, default warn);
# XFER_RDMA_KEEP=DIR copies the daemon logs there at the end (DIR must be outside the guest's
# tmpfs, e.g. under the repository); XFER_RDMA_ONLY=REGEX runs only the matching groups of
# sizes, regions, multi, concurrency, refusals, failures (setup and shutdown always run).
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
BUILD=${BUILD:-build}
TRANSPORT=${XFER_RDMA_TRANSPORT:-rdma}
MIB=$((1024 * 1024))
FAIL_SIZE=${XFER_RDMA_FAIL_SIZE:-$((64 * MIB))}
PORT=7700
KA_MS=3000     # keepalive_timeout_ms of the daemons
BOUND=8        # seconds a survivor may take to see a failure: keepalive 3 s + TCG slack
T=180          # seconds: "it ended at all" for one client
DEV=("${RXE_DEV0:-}" "${RXE_DEV1:-}")
IP=("${RXE_IP0:-}" "${RXE_IP1:-}")

passed=0 failed=0
PID=("" "")
declare -A BASE
START=$SECONDS

ok() { echo "ok - $1"; passed=$((passed + 1)); }
fail() { echo "FAIL - $1 ($2)"; failed=$((failed + 1)); }
note() { echo "# $*"; }
summary() { echo "$passed passed, $failed failed"; }

D=$(mktemp -d /dev/shm/xfrdma.XXXXXX) || exit 1
DATA=$D/data
mkdir -p "$DATA"
sock() { echo "$D/n$1.sock"; }

cleanup() {
	local p
	for p in "${PID[@]}" $(jobs -p); do
		[ -n "$p" ] && kill -CONT "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
	done
	{ wait; } 2>/dev/null
	if [ -n "${XFER_RDMA_KEEP:-}" ]; then
		mkdir -p "$XFER_RDMA_KEEP" && cp "$D"/n*.log "$XFER_RDMA_KEEP"/ 2>/dev/null
	fi
	rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------------------------
# Small helpers. Process starts are what costs under TCG (0.1-0.5 s each), so JSON is read with
# bash regexes where the object is flat, and nothing forks that need not.

# jfield JSON KEY: the value of "KEY" (a string's contents or a number) in flat JSON.
jfield() {
	[[ $1 =~ \"$2\":(\"([^\"]*)\"|(-?[0-9]+)|(true|false)) ]] || return 1
	echo "${BASH_REMATCH[2]}${BASH_REMATCH[3]}${BASH_REMATCH[4]}"
}

# op_of LISTING KIND: the first operation object of KIND in an `xferctl --json ops` listing.
op_of() {
	local s=$1
	while [[ $s =~ \{\"op\":[^{}]*\} ]]; do
		s=${s#*"${BASH_REMATCH[0]}"}
		if [[ ${BASH_REMATCH[0]} == *\"kind\":\"$2\"* ]]; then
			echo "${BASH_REMATCH[0]}"
			return 0
		fi
	done
	return 1
}

# ctl NODE ARGS...: xferctl against NODE's daemon, bounded.
ctl() {
	local n=$1
	shift
	timeout -k 2 $T "$BUILD/xferctl" --socket "$(sock "$n")" "$@"
}

# bg OUT ERR NODE ARGS...: xferctl in the background; BG is its own pid (so kill -9 hits the
# client itself). Every one is reaped by wait_bg or kill9.
bg() {
	local out=$1 err=$2 n=$3
	shift 3
	: >"$out"
	: >"$err" # truncated here, before the fork, so that no one reads an earlier run's line
	"$BUILD/xferctl" --socket "$(sock "$n")" "$@" >"$out" 2>"$err" &
	BG=$!
}
# alive PID: PID is a live (or stopped) child of this shell that has not been reaped, so that
# signalling it cannot hit anybody else's process.
alive() {
	local j
	kill -0 "$1" 2>/dev/null || return 1
	j=$(jobs -pr)
	[[ $'\n'$j$'\n' == *$'\n'$1$'\n'* ]]
}
# wait_bg PID [SECONDS]: its exit status, or 124 after killing it when it outlived SECONDS.
wait_bg() {
	local pid=$1 end=$((SECONDS + ${2:-$T})) rc=0
	while alive "$pid"; do
		if [ $SECONDS -ge "$end" ]; then
			kill9 "$pid"
			return 124
		fi
		sleep 0.05
	done
	{ wait "$pid"; } 2>/dev/null || rc=$?
	return $rc
}
kill9() {
	[ -n "$1" ] || return 0
	{ alive "$1" && kill -CONT "$1" && kill -KILL "$1"; wait "$1"; } 2>/dev/null
	return 0
}
# wait_line FILE [SECONDS]: prints FILE's first line once it is complete (read fails on a line
# that has no newline yet).
wait_line() {
	local f=$1 end=$((SECONDS + ${2:-60})) l
	while [ $SECONDS -lt "$end" ]; do
		if [ -s "$f" ] && IFS= read -r l <"$f"; then
			echo "$l"
			return 0
		fi
		sleep 0.05
	done
	return 1
}
firstline() { local l=; [ -f "$1" ] && IFS= read -r l <"$1"; echo "${l:-(empty)}"; }
# mkdata NAME SIZE: a file of random bytes (made once); prints its path.
mkdata() {
	local f=$DATA/$1
	[ -f "$f" ] || head -c "$2" /dev/urandom >"$f"
	echo "$f"
}
# elapsed T0: seconds since T0 (from now_s), 1 decimal.
now_s() { local t=${EPOCHREALTIME/./}; echo "${t:0:-3}"; }   # milliseconds
elapsed() { local ms=$(($(now_s) - $1)); printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100)); }

# ---------------------------------------------------------------------------------------------
# Daemons

HAS_TRANSPORT=0
"$BUILD/xferd" --help 2>&1 | grep -q -- --transport && HAS_TRANSPORT=1

write_config() {
	local extra=
	[ "$TRANSPORT" = rdma ] && extra=', "require_rdma": true'
	printf '{"keepalive_ms": 500, "keepalive_timeout_ms": %s, "default_timeout_ms": 300000%s}\n' \
		"$KA_MS" "$extra" >"$D/n$1.json"
}

# start N: starts node N's daemon (log appended to $D/nN.log) and waits until it answers.
start() {
	local n=$1 args i
	args=(--socket "$(sock "$n")" --foreground --log-level "${XFER_RDMA_LOG:-warn}"
		--config "$D/n$n.json" --listen "${IP[$n]}:$PORT")
	if [ "$HAS_TRANSPORT" = 1 ]; then
		args+=(--transport "$TRANSPORT")
		[ "$TRANSPORT" = tcp ] || args+=(--rdma-device "${DEV[$n]}")
	fi
	echo "=== $(date +%T) start: xferd ${args[*]}" >>"$D/n$n.log"
	"$BUILD/xferd" "${args[@]}" 2>>"$D/n$n.log" &
	PID[$n]=$!
	for ((i = 0; i < 300; i++)); do
		[ -S "$(sock "$n")" ] && timeout 10 "$BUILD/xferctl" --socket "$(sock "$n")" status \
			>/dev/null 2>&1 && return 0
		if ! kill -0 "${PID[$n]}" 2>/dev/null; then
			note "node $n: xferd exited before it answered; its log:"
			tail -n 15 "$D/n$n.log" | sed 's/^/#   /'
			PID[$n]=
			return 1
		fi
		sleep 0.1
	done
	note "node $n: xferd did not answer within 30 s"
	return 1
}
# stop N: SIGTERM; 0 if it exited 0 within 10 s.
stop() {
	local n=$1 rc=0
	[ -n "${PID[$n]}" ] || return 1
	kill -TERM "${PID[$n]}" 2>/dev/null
	wait_bg "${PID[$n]}" 10 || rc=$?
	PID[$n]=
	rm -f "$(sock "$n")"
	return $rc
}
# crash N: SIGKILL.
crash() {
	kill9 "${PID[$1]}"
	PID[$1]=
	rm -f "$(sock "$1")"
}
running() { [ -n "${PID[$1]}" ] && kill -0 "${PID[$1]}" 2>/dev/null; }
# peer_failures: how many connection-set failures each daemon has logged so far ("N0 N1").
peer_failures() { echo "$(grep -c peer_fail "$D/n0.log") $(grep -c peer_fail "$D/n1.log")"; }
# new_peer_failures "N0 N1": the failures logged since peer_failures said "N0 N1".
new_peer_failures() {
	local c0=${1% *} c1=${1#* }
	{ grep peer_fail "$D/n0.log" | tail -n +$((c0 + 1)) | sed 's/^/node 0: /'
	  grep peer_fail "$D/n1.log" | tail -n +$((c1 + 1)) | sed 's/^/node 1: /'; } | tr '\n' '|'
}
# want GROUP: GROUP runs (all do unless XFER_RDMA_ONLY, a regex, names some).
want() { [ -z "${XFER_RDMA_ONLY:-}" ] || [[ $1 =~ $XFER_RDMA_ONLY ]]; }
# logtail N: the last lines of node N's log, on one line, for a FAIL reason.
logtail() { tail -n "${2:-3}" "$D/n$1.log" 2>/dev/null | tr '\n' '|'; }

# ---------------------------------------------------------------------------------------------
# Transfers with xferctl. xfer KIND OWNER ACTIVE SRC DST: KIND read (readable on OWNER, read on
# ACTIVE into DST) or write (writable on OWNER saved to DST, write of SRC from ACTIVE).
# The passive client is stopped once it printed its metadata, so that its operation is still
# listed after the transfer; the active node's listing is polled while the active client runs.
# Sets WHY (empty on success) and SEEN (what the listings said).
XN=0
xfer() {
	local kind=$1 o=$2 a=$3 src=$4 dst=$5 w pk meta pp ap rc l op at="" pt="" ps="" pb="" size
	XN=$((XN + 1))
	w=$DATA/x$XN
	WHY='' SEEN=''
	size=$(stat -c %s "$src")
	rm -f "$dst"
	if [ "$kind" = read ]; then
		pk=readable
		bg "$w.p.out" "$w.p.err" "$o" readable "$src"
	else
		pk=writable
		bg "$w.p.out" "$w.p.err" "$o" writable "$size" "$dst"
	fi
	pp=$BG
	if ! meta=$(wait_line "$w.p.out" 60); then
		kill9 "$pp"
		WHY="$pk printed no metadata: $(firstline "$w.p.err")"
		return 1
	fi
	kill -STOP "$pp"
	if [ "$kind" = read ]; then
		bg "$w.a.out" "$w.a.err" "$a" read "$meta" "$dst"
	else
		bg "$w.a.out" "$w.a.err" "$a" write "$meta" "$src"
	fi
	ap=$BG
	while [ -z "$at" ] && alive "$ap"; do
		l=$(ctl "$a" --json ops 2>/dev/null) && op=$(op_of "$l" "$kind") && at=$(jfield "$op" transport)
	done
	rc=0
	wait_bg "$ap" $T || rc=$?
	l=$(ctl "$o" --json ops 2>/dev/null)
	if op=$(op_of "$l" "$pk"); then
		pt=$(jfield "$op" transport) ps=$(jfield "$op" state) pb=$(jfield "$op" bytes)
	fi
	kill -CONT "$pp"
	local prc=0
	wait_bg "$pp" 60 || prc=$?
	SEEN="$pk: ${ps:-not listed} transport '${pt}'; $kind: transport '${at:-(ended before it was listed)}'"
	if [ "$rc" -ne 0 ]; then
		WHY="$kind exited $rc: $(firstline "$w.a.err")"
	elif [ "$prc" -ne 0 ]; then
		WHY="$pk exited $prc: $(firstline "$w.p.err")"
	elif ! cmp -s "$src" "$dst"; then
		WHY="bytes differ: $(cmp "$src" "$dst" 2>&1 | head -n 1)"
	elif [ "$ps" != COMPLETE ] || [ "$pt" != "$TRANSPORT" ] || [ "$pb" != "$size" ]; then
		WHY="owner's listing: $pk state '$ps' transport '$pt' bytes '$pb', expected COMPLETE $TRANSPORT $size"
	elif [ -n "$at" ] && [ "$at" != "$TRANSPORT" ]; then
		WHY="active node's listing: $kind transport '$at', expected $TRANSPORT"
	fi
	rm -f "$w".*
	[ -z "$WHY" ]
}

# ---------------------------------------------------------------------------------------------
# Baselines: what an idle daemon holds. fds are counted without the peer connections, which
# come and go with peers and are not leaks.

snapshot() {
	local s p c=0
	s=$(ctl "$1" --json stats) || return 1
	p=$(ctl "$1" --json peers) || return 1
	while [[ $p =~ \"connections\":([0-9]+) ]]; do
		c=$((c + BASH_REMATCH[1]))
		p=${p#*"${BASH_REMATCH[0]}"}
	done
	echo "regions=$(jfield "$s" regions) ops=$(jfield "$s" ops) ops_active=$(jfield "$s" ops_active) fds=$(($(jfield "$s" fds) - c)) clients=$(jfield "$s" clients)"
}
take_baseline() {
	local n
	for n in 0 1; do
		BASE[$n]=$(snapshot "$n") || return 1
		note "baseline node $n: ${BASE[$n]}"
	done
}
# check_baseline NAME [NODES]: the (surviving) daemons back to baseline within 10 s.
check_baseline() {
	local name=$1 n cur bad='' end
	for n in ${2:-0 1}; do
		end=$((SECONDS + 10))
		while :; do
			cur=$(snapshot "$n") || cur="(stats failed)"
			[ "$cur" = "${BASE[$n]}" ] || [ $SECONDS -ge "$end" ] && break
			sleep 0.2
		done
		[ "$cur" = "${BASE[$n]}" ] || bad+="node $n: $cur, baseline ${BASE[$n]}; "
	done
	if [ -z "$bad" ]; then
		ok "$name: back to baseline (regions, ops, active ops, fds, clients)"
	else
		fail "$name: back to baseline" "${bad%; }"
	fi
}
# warm: a 4 KiB read each way, so that both connection sets exist.
warm() {
	local f
	f=$(mkdata warm 4096)
	xfer read 0 1 "$f" "$DATA/warm.out" && xfer read 1 0 "$f" "$DATA/warm.out"
}

# ---------------------------------------------------------------------------------------------
# Setup

for b in xferd xferctl; do
	if [ ! -x "$BUILD/$b" ]; then
		fail setup "$BUILD/$b is missing: build first"
		summary
		exit 1
	fi
done
if [ -z "${DEV[0]}" ] || [ -z "${DEV[1]}" ] || [ -z "${IP[0]}" ] || [ -z "${IP[1]}" ]; then
	fail setup "RXE_DEV0/1 and RXE_IP0/1 are not set: run inside scripts/rxe-vm.sh (make test-rdma)"
	summary
	exit 1
fi
if [ "$HAS_TRANSPORT" = 0 ] && [ "$TRANSPORT" != tcp ]; then
	fail setup "$BUILD/xferd has no --transport option: the RDMA transport is not built in"
	summary
	exit 1
fi
read -r up _ </proc/uptime
note "VM: kernel $(uname -r), $(nproc) vCPUs, up ${up} s when the tests started"
note "transport $TRANSPORT; node 0 ${DEV[0]} ${IP[0]}:$PORT, node 1 ${DEV[1]} ${IP[1]}:$PORT; failure size $FAIL_SIZE"
write_config 0
write_config 1
if ! start 0 || ! start 1; then
	fail setup "the daemons did not start"
	summary
	exit 1
fi

# Devices: each daemon uses its own rxe device (RDMA mode), port ACTIVE, RoCE GID of its address.
if [ "$TRANSPORT" = rdma ]; then
	for n in 0 1; do
		j=$(ctl "$n" --json devices 2>&1)
		why=
		[[ $j == *\"name\":\"${DEV[$n]}\"* ]] || why+="${DEV[$n]} not listed; "
		[[ $j =~ \"state\":\"(PORT_)?(ACTIVE|active)\" ]] || why+="no ACTIVE port; "
		[[ $j == *\"link_layer\":\"Ethernet\"* ]] || why+="link layer not Ethernet; "
		[[ $j =~ \"active_mtu\":[1-9] ]] || why+="no active MTU; "
		[[ $j == *\"gid\":\"::ffff:${IP[$n]}\"* ]] || why+="GID in use is not ::ffff:${IP[$n]}; "
		[[ $j == *\"name\":\"${DEV[1 - n]}\"* ]] && why+="also uses ${DEV[1 - n]} (--rdma-device ${DEV[$n]}); "
		if [ -z "$why" ]; then
			ok "node $n lists ${DEV[$n]}: port ACTIVE, Ethernet, MTU $(jfield "$j" active_mtu), GID ::ffff:${IP[$n]} (index $(jfield "$j" gid_index))"
		else
			fail "node $n devices" "${why%; }: $j"
		fi
	done
fi

if warm; then
	ok "setup: both daemons up, 4 KiB read each way ($SEEN)"
else
	fail setup "warm-up transfers failed: $WHY; node 0 log: $(logtail 0) node 1 log: $(logtail 1)"
	summary
	exit 1
fi
take_baseline || {
	fail setup "xferctl stats failed"
	summary
	exit 1
}

# ---------------------------------------------------------------------------------------------
# The four operations, byte-exact. 4 KiB and 1 MiB (+1: a tail that fits no page or segment)
# both ways round; 32 MiB one way round for each kind.

if want sizes; then
	sizes_t0=$SECONDS
	for s in 4096 $MIB $((MIB + 1)) $((32 * MIB)); do
		src=$(mkdata "size.$s" "$s")
		pairs="0:1 1:0"
		[ "$s" -gt $((2 * MIB)) ] && pairs="0:1"
		for p in $pairs; do
			o=${p%:*} a=${p#*:}
			t0=$(now_s)
			if xfer read "$o" "$a" "$src" "$DATA/out"; then
				ok "readable on node $o, read on node $a: $s bytes identical in $(elapsed "$t0") s ($SEEN)"
			else
				fail "readable on node $o, read on node $a: $s bytes" "$WHY"
			fi
			t0=$(now_s)
			if xfer write "$a" "$o" "$src" "$DATA/out"; then
				ok "writable on node $a, write from node $o: $s bytes identical in $(elapsed "$t0") s ($SEEN)"
			else
				fail "writable on node $a, write from node $o: $s bytes" "$WHY"
			fi
			rm -f "$DATA/out"
		done
		[ "$s" -gt $((2 * MIB)) ] && rm -f "$src"
	done
	note "sizes took $((SECONDS - sizes_t0)) s"

	# The data really went by RDMA: the devices counted READ and WRITE bytes, the connection sets
	# say rdma. (Reads pull with RDMA READ, writes push with RDMA WRITE, both ways round above.)
	for n in 0 1; do
		if [ "$TRANSPORT" = rdma ]; then
			j=$(ctl "$n" --json devices 2>&1)
			rb=$(jfield "$j" rdma_read_bytes) wb=$(jfield "$j" rdma_write_bytes) ce=$(jfield "$j" completion_errors)
			if [ "${rb:-0}" -ge $MIB ] && [ "${wb:-0}" -ge $MIB ] && [ "${ce:-1}" = 0 ]; then
				ok "node $n ${DEV[$n]} counters: $rb bytes by RDMA READ, $wb by RDMA WRITE, 0 completion errors"
			else
				fail "node $n ${DEV[$n]} counters" "rdma_read_bytes '$rb' rdma_write_bytes '$wb' completion_errors '$ce': $j"
			fi
		fi
		j=$(ctl "$n" --json peers 2>&1)
		if [[ $j == *\"transport\":\"$TRANSPORT\"* && $j == *\"state\":\"connected\"* ]]; then
			ok "node $n's peer listing: connected, transport $TRANSPORT"
		else
			fail "node $n's peer listing: connected, transport $TRANSPORT" "$j"
		fi
	done
	check_baseline "sizes"
fi

# Registrations: while an operation holds a region, `xferctl regions` shows its keys per device.
if [ "$TRANSPORT" = rdma ] && want regions; then
	src=$(mkdata size.4096 4096)
	bg "$DATA/r.out" "$DATA/r.err" 0 readable "$src"
	rp=$BG
	if wait_line "$DATA/r.out" 60 >/dev/null; then
		j=$(ctl 0 --json regions 2>&1)
		if [[ $j =~ \"devices\":\[\{\"device\":\"${DEV[0]}\",\"lkey\":[0-9]+,\"rkey\":[0-9]+\}\] ]]; then
			ok "node 0 lists the region's ${DEV[0]} lkey and rkey ($(jfield "$j" register_us) us to register)"
		else
			fail "node 0 lists the region's keys per device" "$j"
		fi
	else
		fail "node 0 lists the region's keys per device" "readable printed no metadata: $(firstline "$DATA/r.err")"
	fi
	kill9 "$rp"
	check_baseline "regions listing"
fi

# ---------------------------------------------------------------------------------------------
# Multi-descriptor operations (xferctl makes one descriptor per operation).

if want multi; then
	if [ -x "$BUILD/tests/rdma_sg" ]; then
		for p in "0 1" "1 0"; do
			set -- $p
			out=$(timeout -k 2 300 "$BUILD/tests/rdma_sg" "$(sock "$1")" "$(sock "$2")" "$TRANSPORT" 2>&1)
			rc=$?
			while IFS= read -r l; do
				case $l in
				"ok - "*) ok "passive node $1, active node $2: ${l#ok - }" ;;
				"FAIL - "*) fail "passive node $1, active node $2: ${l#FAIL - }" "see above" ;;
				*) echo "# $l" ;;
				esac
			done <<<"$out"
			[[ $out == *"ok - "* || $out == *"FAIL - "* ]] || fail "rdma_sg passive $1 active $2" "exit $rc, no result: $out"
		done
		check_baseline "multi-descriptor"
	else
		fail "multi-descriptor operations" "$BUILD/tests/rdma_sg is not built (make test-rdma builds it)"
	fi
fi

# ---------------------------------------------------------------------------------------------
# Concurrency: 8 readable/read pairs each direction and 4 writable/write pairs each direction,
# all 24 at once. Passive clients are stopped after their metadata so that the owners'
# listings show every passive op's final state and transport.

if want concurrency; then
	conc_t0=$(now_s)
	k=0 good=1
	for o in 0 1; do
		for i in $(seq 0 11); do
			s=$((256 * 1024 + k * 4097))
			head -c "$s" /dev/urandom >"$DATA/c$k.src"
			if [ "$i" -lt 8 ]; then
				bg "$DATA/c$k.p.out" "$DATA/c$k.p.err" "$o" readable "$DATA/c$k.src"
			else
				bg "$DATA/c$k.p.out" "$DATA/c$k.p.err" "$o" writable "$s" "$DATA/c$k.dst"
			fi
			CP[$k]=$BG CO[$k]=$o CK[$k]=$([ "$i" -lt 8 ] && echo read || echo write)
			k=$((k + 1))
		done
	done
	for ((k = 0; k < 24; k++)); do
		if wait_line "$DATA/c$k.p.out" 60 >/dev/null; then
			kill -STOP "${CP[$k]}"
		else
			good=0
		fi
	done
	if [ "$good" = 1 ]; then
		conc_t0=$(now_s)
		for ((k = 0; k < 24; k++)); do
			a=$((1 - CO[k]))
			meta=$(firstline "$DATA/c$k.p.out")
			if [ "${CK[$k]}" = read ]; then
				bg "$DATA/c$k.a.out" "$DATA/c$k.a.err" "$a" read "$meta" "$DATA/c$k.dst"
			else
				bg "$DATA/c$k.a.out" "$DATA/c$k.a.err" "$a" write "$meta" "$DATA/c$k.src"
			fi
			CA[$k]=$BG
		done
		bad=
		for ((k = 0; k < 24; k++)); do
			rc=0
			wait_bg "${CA[$k]}" $T || rc=$?
			[ "$rc" -eq 0 ] || bad+="${CK[$k]} $k on node $((1 - CO[k])) exited $rc: $(firstline "$DATA/c$k.a.err"); "
		done
		secs=$(elapsed "$conc_t0")
		# every passive op: COMPLETE with the transport
		for o in 0 1; do
			l=$(ctl "$o" --json ops 2>&1)
			n_ok=0
			while [[ $l =~ \{\"op\":[^{}]*\} ]]; do
				l=${l#*"${BASH_REMATCH[0]}"}
				[[ ${BASH_REMATCH[0]} == *\"state\":\"COMPLETE\"* && ${BASH_REMATCH[0]} == *\"transport\":\"$TRANSPORT\"* ]] && n_ok=$((n_ok + 1))
			done
			[ "$n_ok" -eq 12 ] || bad+="node $o lists $n_ok of 12 passive ops COMPLETE with transport $TRANSPORT; "
		done
		for ((k = 0; k < 24; k++)); do
			kill -CONT "${CP[$k]}"
			rc=0
			wait_bg "${CP[$k]}" 60 || rc=$?
			[ "$rc" -eq 0 ] || bad+="passive $k on node ${CO[$k]} exited $rc: $(firstline "$DATA/c$k.p.err"); "
			cmp -s "$DATA/c$k.src" "$DATA/c$k.dst" || bad+="pair $k (${CK[$k]}): bytes differ; "
		done
		if [ -z "$bad" ]; then
			ok "24 transfers at once (8 reads + 4 writes each direction, 256 KiB+): identical, every passive op COMPLETE over $TRANSPORT (${secs} s)"
		else
			fail "24 transfers at once" "${bad%; }"
		fi
	else
		for ((k = 0; k < 24; k++)); do kill9 "${CP[$k]}"; done
		fail "24 transfers at once" "not every passive client printed metadata: $(cat "$DATA"/c*.p.err | head -n 1)"
	fi
	rm -f "$DATA"/c*
	check_baseline "concurrency"
fi

FAILSRC=$(mkdata failsrc "$FAIL_SIZE")
# Over TCP the veth moves hundreds of MB/s even under TCG: slow both directions down so that a
# FAIL_SIZE transfer lasts seconds and can be caught under way. (RDMA is slow enough as it is,
# and RoCE over a shaped link would only see drops and retransmissions.)
if [ "$TRANSPORT" = tcp ]; then
	for v in veth0 veth1; do
		tc qdisc replace dev $v root tbf rate 100mbit burst 256kb latency 200ms 2>/dev/null ||
			note "tc tbf on $v failed: TCP transfers may end before they are caught under way"
	done
fi

# ---------------------------------------------------------------------------------------------
# Refusals across nodes, decided before any byte moves; the passive op stays claimable.

# refused NAME NODE VERB META FILE ERRNO: `xferctl VERB META FILE` on NODE exits 1 naming ERRNO.
refused() {
	local name=$1 n=$2 verb=$3 meta=$4 file=$5 want=$6 rc=0
	ctl "$n" "$verb" "$meta" "$file" >"$DATA/ref.out" 2>"$DATA/ref.err" || rc=$?
	if [ "$rc" -eq 1 ] && grep -Eq "\\(($want)\\)" "$DATA/ref.err"; then
		ok "$name: refused: $(firstline "$DATA/ref.err")"
	else
		fail "$name" "exit $rc, expected 1 and ($want): $(firstline "$DATA/ref.err")"
	fi
}

if want refusals; then
	src=$(mkdata ref 65536)
	other=$(mkdata ref2 65537)
	bg "$DATA/rr.out" "$DATA/rr.err" 0 readable "$src"
	rp=$BG
	bg "$DATA/rw.out" "$DATA/rw.err" 0 writable 65536 "$DATA/ref.writable"
	wp=$BG
	if rmeta=$(wait_line "$DATA/rr.out" 60) && wmeta=$(wait_line "$DATA/rw.out" 60); then
		refused "read with writable metadata (node 1)" 1 read "$wmeta" "$DATA/ref.o1" EINVAL
		refused "write with readable metadata (node 1)" 1 write "$rmeta" "$src" EINVAL
		refused "write of 65537 bytes into a 65536-byte writable (node 1)" 1 write "$wmeta" "$other" EMSGSIZE
		l=$(ctl 0 --json ops 2>&1)
		if [ "$(jfield "$(op_of "$l" readable)" state)" = INITIALIZED ] &&
			[ "$(jfield "$(op_of "$l" writable)" state)" = INITIALIZED ]; then
			ok "the refused claims left both passive ops INITIALIZED"
		else
			fail "the refused claims left both passive ops INITIALIZED" "$l"
		fi
		rc=0
		ctl 1 write "$wmeta" "$src" >/dev/null 2>"$DATA/ref.err" || rc=$?
		prc=0
		wait_bg "$wp" 60 || prc=$?
		if [ "$rc" -eq 0 ] && [ "$prc" -eq 0 ] && cmp -s "$src" "$DATA/ref.writable"; then
			ok "write from node 1 after the refusals: bytes identical"
		else
			fail "write from node 1 after the refusals" "write $rc ($(firstline "$DATA/ref.err")), writable $prc ($(firstline "$DATA/rw.err"))"
		fi
		rc=0
		ctl 1 read "$rmeta" "$DATA/ref.o1" >/dev/null 2>"$DATA/ref.err" || rc=$?
		prc=0
		wait_bg "$rp" 60 || prc=$?
		if [ "$rc" -eq 0 ] && [ "$prc" -eq 0 ] && cmp -s "$src" "$DATA/ref.o1"; then
			ok "read from node 1 after the refusals: bytes identical"
		else
			fail "read from node 1 after the refusals" "read $rc ($(firstline "$DATA/ref.err")), readable $prc ($(firstline "$DATA/rr.err"))"
		fi
	else
		kill9 "$rp"
		kill9 "$wp"
		fail "refusals" "readable/writable printed no metadata: $(firstline "$DATA/rr.err") $(firstline "$DATA/rw.err")"
	fi

	# A second claim while the first one's bytes are moving: EALREADY; the first completes.
	big=$FAILSRC
	bg "$DATA/rr.out" "$DATA/rr.err" 0 readable "$big"
	rp=$BG
	if rmeta=$(wait_line "$DATA/rr.out" 60); then
		kill -STOP "$rp"
		bg "$DATA/ra.out" "$DATA/ra.err" 1 read "$rmeta" "$DATA/ref.o1"
		ap=$BG
		st=
		while alive "$ap"; do
			st=$(jfield "$(op_of "$(ctl 0 --json ops 2>/dev/null)" readable)" state)
			[ "$st" = INITIALIZED ] || [ -z "$st" ] || break
		done
		if [ "$st" = IN_PROGRESS ]; then
			refused "second read of a readable whose first read is under way (node 0, local)" 0 read "$rmeta" "$DATA/ref.o2" EALREADY
			refused "second read of a readable whose first read is under way (node 1)" 1 read "$rmeta" "$DATA/ref.o2" EALREADY
		else
			fail "second read while the first is under way" "the first read was not seen IN_PROGRESS (last state '$st')"
		fi
		rc=0
		wait_bg "$ap" $T || rc=$?
		if [ "$rc" -eq 0 ] && cmp -s "$big" "$DATA/ref.o1"; then
			ok "the first read completed, bytes identical"
		else
			fail "the first read completes" "exit $rc: $(firstline "$DATA/ra.err")"
		fi
		refused "read of a readable that already completed (node 1)" 1 read "$rmeta" "$DATA/ref.o2" "EALREADY|ECANCELED"
		kill -CONT "$rp"
		wait_bg "$rp" 60 || fail "readable of the EALREADY case" "exit $?: $(firstline "$DATA/rr.err")"
	else
		kill9 "$rp"
		fail "EALREADY" "readable printed no metadata: $(firstline "$DATA/rr.err")"
	fi

	# The owner restarts between making metadata and the read: ESTALE.
	bg "$DATA/rr.out" "$DATA/rr.err" 0 readable "$src"
	rp=$BG
	if rmeta=$(wait_line "$DATA/rr.out" 60); then
		if stop 0; then ok "node 0's xferd exited 0 on SIGTERM"; else fail "node 0's xferd exits 0 on SIGTERM" "$(logtail 0)"; fi
		rc=0
		wait_bg "$rp" 20 || rc=$?
		if [ "$rc" -eq 1 ] && grep -q ESHUTDOWN "$DATA/rr.err"; then
			ok "readable's client told of the shutdown: $(firstline "$DATA/rr.err")"
		else
			fail "readable's client told of the shutdown" "exit $rc: $(firstline "$DATA/rr.err")"
		fi
		if start 0; then
			refused "read of metadata from before node 0 restarted (node 1)" 1 read "$rmeta" "$DATA/ref.o1" ESTALE
		else
			fail "node 0 starts again" "$(logtail 0)"
		fi
	else
		kill9 "$rp"
		fail "ESTALE" "readable printed no metadata: $(firstline "$DATA/rr.err")"
	fi
	rm -f "$DATA"/ref* "$DATA"/r?.*
	if warm; then
		take_baseline # node 0 is a new process: new baseline for both
		ok "after the refusals and the restart, both directions transfer again"
	else
		fail "transfers after node 0 restarted" "$WHY; node 0 log: $(logtail 0)"
	fi
fi

# ---------------------------------------------------------------------------------------------
# Failures mid-transfer: a FAIL_SIZE transfer between node 0 (owner) and node 1 (active); once
# node 1 lists it under way, a daemon or a client is killed, and the survivors must end within
# a bound, naming the cause.

# start_pair KIND: passive on node 0, active on node 1, waits until it is under way. Sets PP,
# AP, FW (file prefix) or WHY.
start_pair() {
	local kind=$1 meta l op b
	XN=$((XN + 1))
	FW=$DATA/f$XN
	PP='' AP='' WHY=''
	if [ "$kind" = read ]; then
		bg "$FW.p.out" "$FW.p.err" 0 readable "$FAILSRC"
	else
		bg "$FW.p.out" "$FW.p.err" 0 writable "$FAIL_SIZE" "$FW.dst"
	fi
	PP=$BG
	if ! meta=$(wait_line "$FW.p.out" 60); then
		WHY="passive client printed no metadata: $(firstline "$FW.p.err")"
		return 1
	fi
	if [ "$kind" = read ]; then
		bg "$FW.a.out" "$FW.a.err" 1 read "$meta" "$FW.dst"
	else
		bg "$FW.a.out" "$FW.a.err" 1 write "$meta" "$FAILSRC"
	fi
	AP=$BG
	while alive "$AP"; do
		l=$(ctl 1 --json ops 2>/dev/null) && op=$(op_of "$l" "$kind") || continue
		b=$(jfield "$op" bytes)
		if [ "$(jfield "$op" state)" = IN_PROGRESS ] && [ "${b:-0}" -gt 0 ] && [ "$b" -lt "$FAIL_SIZE" ]; then
			MID="$b of $FAIL_SIZE bytes moved"
			return 0
		fi
	done
	WHY="the transfer was never seen under way on node 1 (last listing: ${op:-none}; active exit: $(firstline "$FW.a.err"))"
	return 1
}
end_pair() { kill9 "$PP"; kill9 "$AP"; }

# expect_end NAME PID ERRFILE SECONDS STATES ERRNOS T0: PID exits 1 within SECONDS of T0 (ms),
# its error naming one of STATES and of ERRNOS.
expect_end() {
	local name=$1 pid=$2 err=$3 secs=$4 states=$5 errnos=$6 t0=$7 rc=0 took ms line
	wait_bg "$pid" $((secs + 30)) || rc=$?
	ms=$(($(now_s) - t0))
	took=$(elapsed "$t0")
	line=$(firstline "$err")
	if [ "$rc" -ne 1 ]; then
		fail "$name" "exit $rc after ${took} s, expected 1: $line"
	elif [ "$ms" -gt $((secs * 1000)) ]; then
		fail "$name" "ended after ${took} s, bound ${secs} s: $line"
	elif ! grep -Eq "($states)" "$err" || ! grep -Eq "\\(($errnos)\\)" "$err"; then
		fail "$name" "expected ($states) and ($errnos): $line"
	else
		ok "$name: after ${took} s: $line"
	fi
}
no_file() {
	if [ -e "$2" ]; then
		fail "$1" "$2 exists: a partial writable was reported COMPLETE"
	else
		ok "$1"
	fi
}
# after NAME SURVIVORS: restart what died, transfer again, compare with the baseline.
after() {
	local n
	for n in 0 1; do
		running "$n" || start "$n" || { fail "$1: node $n starts again" "$(logtail "$n")"; return; }
	done
	if ! warm; then
		fail "$1: both directions transfer again afterwards" "$WHY"
		return
	fi
	if [ "$2" = "0 1" ]; then
		check_baseline "$1"
	else
		check_baseline "$1 (surviving node $2)" "$2"
		take_baseline >/dev/null
	fi
}

if want failures; then
	for kind in read write; do
		for victim in 1 0; do
			[ "$victim" = 0 ] && role=owner || role=active
			[ "$kind" = read ] && pk=readable || pk=writable
			name="$role daemon (node $victim) SIGKILL mid-$kind"
			if start_pair "$kind"; then
				note "$name: $MID"
				t0=$(now_s)
				crash "$victim"
				if [ "$victim" = 0 ]; then
					expect_end "$name: the $kind on node 1 ends ERRORED" "$AP" "$FW.a.err" $BOUND ERRORED "ECONNRESET|ETIMEDOUT" "$t0"
				else
					expect_end "$name: the $pk on node 0 ends ERRORED" "$PP" "$FW.p.err" $BOUND ERRORED "ECONNRESET|ETIMEDOUT" "$t0"
					[ "$kind" = write ] && no_file "$name: the writable saved nothing" "$FW.dst"
				fi
			else
				fail "$name" "$WHY"
			fi
			end_pair
			after "$name" "$((1 - victim))"
		done
	done

	for victim in reader owner-read writer owner-write; do
		case $victim in
		reader) kind=read name="reader client (xferctl read, node 1) SIGKILL mid-read" ;;
		owner-read) kind=read name="owner client (xferctl readable, node 0) SIGKILL mid-read" ;;
		writer) kind=write name="writer client (xferctl write, node 1) SIGKILL mid-write" ;;
		owner-write) kind=write name="owner client (xferctl writable, node 0) SIGKILL mid-write" ;;
		esac
		if start_pair "$kind"; then
			note "$name: $MID"
			pf0=$(peer_failures)
			t0=$(now_s)
			case $victim in
			reader | writer)
				kill9 "$AP"
				expect_end "$name: the passive op on node 0 ends" "$PP" "$FW.p.err" $BOUND "ERRORED|CANCELLED" "ECONNRESET|ECANCELED" "$t0"
				[ "$kind" = write ] && no_file "$name: the writable saved nothing" "$FW.dst"
				;;
			*)
				kill9 "$PP"
				expect_end "$name: the $kind on node 1 ends" "$AP" "$FW.a.err" $BOUND "ERRORED|CANCELLED" "ECONNRESET|ECANCELED" "$t0"
				;;
			esac
			# One client's death ends its own transfer only: the daemons' connection set (shared by
			# every client) must survive it.
			sleep 1
			if [ "$(peer_failures)" = "$pf0" ]; then
				ok "$name: the connection set between the daemons survived"
			else
				fail "$name: the connection set between the daemons survived" "$(new_peer_failures "$pf0")"
			fi
		else
			fail "$name" "$WHY"
		fi
		end_pair
		after "$name" "0 1"
	done
	rm -f "$DATA"/f*
fi

# ---------------------------------------------------------------------------------------------
for n in 0 1; do
	if stop "$n"; then ok "node $n's xferd exited 0 on SIGTERM"; else fail "node $n's xferd exits 0 on SIGTERM" "$(logtail "$n")"; fi
done
if [ "$failed" -gt 0 ]; then
	for n in 0 1; do
		note "node $n's log (warnings and errors, last 25 lines):"
		grep -v '^===' "$D/n$n.log" | tail -n 25 | sed 's/^/#   /'
	done
fi
note "took $((SECONDS - START)) s"
summary
[ "$failed" -eq 0 ]
