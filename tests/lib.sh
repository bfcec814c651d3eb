# shellcheck shell=bash
# SPDX-License-Identifier: MIT
#
# tests/lib.sh: what the cross-node shell suites share, sourced by tests/test_cross.sh (TCP
# between network namespaces) and tests/rdma/run.sh (RDMA in a VM). It offers:
#   - results: ok, fail, skip, note, want GROUP, summary (the final "N passed, N failed[, N
#     skipped]" line that tests/run.sh adds up), abort_setup, require_built
#   - time: now_ms, elapsed T0, to_ms SECONDS
#   - clients: ctl (bounded xferctl), bg (xferctl in the background), alive, wait_bg, kill9,
#     kill_children, wait_line, firstline, mkdata, jfield (a field of flat JSON), logtail
#   - transfers, KIND read or write: next_prefix, passive_of, offer, claim, xfer_begin,
#     xfer_outcome, check_xfer, check_sizes; xfer itself is the suite's
#   - baselines: snapshot, take_baseline, check_baseline, warm, node_running, after_failure
#   - failures mid-transfer: offer_pair, claim_pair, end_pair, signal_daemons, wake_daemons,
#     expect_end, no_file, survivor_ends, client_case, kill_client
#   - refusals: refused, refuse_mismatches, claim_after_refusals, told_of_shutdown
#
# The suite sets, before using these: BUILD, DATA (a scratch directory), NODES (the node
# numbers, e.g. "0 1"), T (seconds one client may take), WAIT (seconds to wait for metadata and
# for a passive client to end), POLL (seconds between polls), ONLY (a regex of groups to run, or
# empty), FAILSRC and FAIL_SIZE (the failure cases' source); and defines the node functions
#   node_sock N, node_pid N (empty if none), node_start N, node_log N,
#   xfer KIND OWNER ACTIVE SRC DST (one transfer; 1 with WHY set on failure, SEEN optional).
# Every wait is bounded; clients are reaped by wait_bg or kill9.

passed=0
failed=0
skipped=0

# ---------------------------------------------------------------------------------------------
# Results

ok() { echo "ok - $1"; passed=$((passed + 1)); }
fail() { echo "FAIL - $1 ($2)"; failed=$((failed + 1)); }
skip() { echo "SKIP - $1 ($2)"; skipped=$((skipped + 1)); }
note() { echo "# $*"; }

summary()
{
	if [ "$skipped" -gt 0 ]; then
		echo "$passed passed, $failed failed, $skipped skipped"
	else
		echo "$passed passed, $failed failed"
	fi
}

# abort_setup WHY: one FAIL line for the setup, the summary, and exit 1.
abort_setup()
{
	fail setup "$1"
	summary
	exit 1
}

# require_built: xferd and xferctl are built, or abort_setup.
require_built()
{
	local b
	for b in xferd xferctl; do
		[ -x "$BUILD/$b" ] || abort_setup "$BUILD/$b is missing: build first"
	done
}

# want GROUP: true if GROUP is to run (all are unless ONLY names some); notes the time taken.
want()
{
	[ -z "${ONLY:-}" ] || [[ $1 =~ $ONLY ]] || return 1
	note "--- $1 (at ${SECONDS} s)"
}

# ---------------------------------------------------------------------------------------------
# Time, in milliseconds without forking (process starts are what costs in a VM under TCG).

now_ms() { local t=${EPOCHREALTIME/./}; echo "${t:0:-3}"; }
# elapsed T0: seconds since T0 (from now_ms), 2 decimals.
elapsed() { local ms=$(($(now_ms) - $1)); printf '%d.%02d' $((ms / 1000)) $((ms % 1000 / 10)); }
# to_ms SECONDS: SECONDS (e.g. 3 or 3.5) in milliseconds.
to_ms()
{
	local whole=${1%.*} frac=
	[[ $1 == *.* ]] && frac=${1#*.}
	frac=${frac}000
	echo $((10#${whole:-0} * 1000 + 10#${frac:0:3}))
}

# ---------------------------------------------------------------------------------------------
# Clients

# ctl NODE ARGS...: xferctl against NODE's daemon, bounded.
ctl()
{
	local n=$1
	shift
	timeout -k 2 "$T" "$BUILD/xferctl" --socket "$(node_sock "$n")" "$@"
}

# bg OUT ERR NODE ARGS...: xferctl in the background; BG is its own pid (no wrapper, so kill -9
# hits the client itself). OUT and ERR are emptied before the fork, so that no one reads an
# earlier run's line.
bg()
{
	local out=$1 err=$2 n=$3
	shift 3
	: >"$out"
	: >"$err"
	"$BUILD/xferctl" --socket "$(node_sock "$n")" "$@" >"$out" 2>"$err" &
	BG=$!
}

# alive PID: PID is a live (or stopped) child of this shell that has not been reaped, so that
# signalling it cannot hit anybody else's process.
alive()
{
	local j
	kill -0 "$1" 2>/dev/null || return 1
	j=$(jobs -pr)
	[[ $'\n'$j$'\n' == *$'\n'$1$'\n'* ]]
}

# wait_bg PID [SECONDS]: its exit status, or 124 after killing it when it outlived SECONDS.
wait_bg()
{
	local pid=$1 end=$((SECONDS + ${2:-$T})) rc=0
	while alive "$pid"; do
		if [ $SECONDS -ge "$end" ]; then
			kill9 "$pid"
			return 124
		fi
		sleep "$POLL"
	done
	{ wait "$pid"; } 2>/dev/null || rc=$?
	return $rc
}

# kill9 PID: SIGKILL a background client (if it still runs) without bash's "Killed" report;
# reaps it.
kill9()
{
	[ -n "$1" ] || return 0
	{
		alive "$1" && kill -CONT "$1" && kill -KILL "$1"
		wait "$1"
	} 2>/dev/null
	return 0
}

# kill_children: SIGKILL every child still running (stopped ones are woken first), and reap.
kill_children()
{
	local p
	for p in $(jobs -pr); do
		kill -CONT "$p" 2>/dev/null
		kill -KILL "$p" 2>/dev/null
	done
	{ wait; } 2>/dev/null
}

# wait_line FILE [SECONDS]: prints FILE's first line once it is complete (read fails on a line
# that has no newline yet).
wait_line()
{
	local f=$1 end=$((SECONDS + ${2:-60})) l
	while [ $SECONDS -lt "$end" ]; do
		if [ -s "$f" ] && IFS= read -r l <"$f"; then
			echo "$l"
			return 0
		fi
		sleep "$POLL"
	done
	return 1
}

# firstline FILE: the first line of FILE, or "(empty)".
firstline() { local l=; [ -f "$1" ] && IFS= read -r l <"$1"; echo "${l:-(empty)}"; }
# lastline FILE: its last line, where a failing client says why (warnings come first).
lastline() { local l=; [ -f "$1" ] && l=$(tail -n 1 "$1"); echo "${l:-(empty)}"; }

# mkdata NAME SIZE: a file of SIZE random bytes in $DATA (made once); prints its path.
mkdata()
{
	local f=$DATA/$1
	if [ ! -f "$f" ]; then
		head -c "$2" /dev/urandom >"$f.tmp" && mv "$f.tmp" "$f"
	fi
	echo "$f"
}

# jfield JSON KEY: the value of "KEY" (a string's contents or a number) in flat JSON.
jfield()
{
	[[ $1 =~ \"$2\":(\"([^\"]*)\"|(-?[0-9]+)|(true|false)) ]] || return 1
	echo "${BASH_REMATCH[2]}${BASH_REMATCH[3]}${BASH_REMATCH[4]}"
}

# logtail N [LINES]: the last lines of node N's daemon log, on one line, for a FAIL reason.
logtail() { tail -n "${2:-3}" "$(node_log "$1")" 2>/dev/null | tr '\n' '|'; }

# ---------------------------------------------------------------------------------------------
# Transfers. KIND read: readable SRC on the owner, read into DST on the active node. KIND
# write: writable (SRC's size) on the owner saved to DST, write of SRC from the active node.
# Client output goes to PREFIX.out and PREFIX.err.

XN=0
# next_prefix VAR LETTER: sets VAR to a new prefix in DATA for one transfer's files.
next_prefix() { XN=$((XN + 1)); printf -v "$1" '%s' "$DATA/$2$XN"; }

# passive_of KIND: the passive verb of KIND (readable or writable).
passive_of() { if [ "$1" = read ]; then echo readable; else echo writable; fi; }

# offer KIND NODE SRC DST PREFIX: the passive client on NODE, in the background. Sets PP.
offer()
{
	local kind=$1 n=$2 src=$3 dst=$4 p=$5
	if [ "$kind" = read ]; then
		bg "$p.out" "$p.err" "$n" readable "$src"
	else
		bg "$p.out" "$p.err" "$n" writable "$(stat -c %s "$src")" "$dst"
	fi
	PP=$BG
}

# claim KIND NODE META SRC DST PREFIX: the active client on NODE, in the background. Sets AP.
claim()
{
	local kind=$1 n=$2 meta=$3 src=$4 dst=$5 p=$6
	if [ "$kind" = read ]; then
		bg "$p.out" "$p.err" "$n" read "$meta" "$dst"
	else
		bg "$p.out" "$p.err" "$n" write "$meta" "$src"
	fi
	AP=$BG
}

# xfer_begin KIND OWNER SRC DST PREFIX: clears WHY, SEEN and DST, offers on OWNER and waits for
# the metadata (META). 1 with WHY when none came (the passive client is killed then).
xfer_begin()
{
	local kind=$1 p=$5
	WHY='' SEEN='' AP=''
	rm -f "$4"
	offer "$kind" "$2" "$3" "$4" "$p"
	if ! META=$(wait_line "$p.out" "$WAIT"); then
		kill9 "$PP"
		WHY="$(passive_of "$kind") printed no metadata: $(lastline "$p.err")"
		return 1
	fi
}

# xfer_outcome KIND SRC DST PREFIX ACTIVE_RC PASSIVE_RC: WHY = what went wrong (the active
# client's exit, the passive client's, or differing bytes), empty if nothing; removes PREFIX.*.
xfer_outcome()
{
	local kind=$1 src=$2 dst=$3 w=$4 arc=$5 prc=$6
	WHY=''
	if [ "$arc" -ne 0 ]; then
		WHY="$kind exited $arc: $(lastline "$w.a.err")"
	elif [ "$prc" -ne 0 ]; then
		WHY="$(passive_of "$kind") exited $prc: $(lastline "$w.p.err")"
	elif ! cmp -s "$src" "$dst"; then
		WHY="bytes differ: $(cmp "$src" "$dst" 2>&1 | head -n 1)"
	fi
	rm -f "$w".*
	[ -z "$WHY" ]
}

# xfer_name KIND OWNER ACTIVE: how a check names the transfer.
xfer_name()
{
	if [ "$1" = read ]; then
		echo "readable on node $2, read on node $3"
	else
		echo "writable on node $2, write from node $3"
	fi
}

# check_xfer KIND OWNER ACTIVE SRC: one xfer of SRC; one ok/FAIL line.
check_xfer()
{
	local kind=$1 o=$2 a=$3 src=$4 name t0
	name="$(xfer_name "$kind" "$o" "$a"): $(stat -c %s "$src") bytes"
	t0=$(now_ms)
	if xfer "$kind" "$o" "$a" "$src" "$DATA/out"; then
		ok "$name identical in $(elapsed "$t0") s${SEEN:+ ($SEEN)}"
	else
		fail "$name" "$WHY"
	fi
	rm -f "$DATA/out"
}

# check_sizes ONE_WAY_ABOVE SIZE...: per size, a read and a write moving the bytes from node 0
# to node 1 and, for sizes up to ONE_WAY_ABOVE, from node 1 to node 0 as well (the larger
# sources are removed afterwards).
check_sizes()
{
	local above=$1 s src p pairs
	shift
	for s in "$@"; do
		src=$(mkdata "size.$s" "$s")
		pairs="0:1 1:0"
		[ "$s" -gt "$above" ] && pairs=0:1
		for p in $pairs; do
			check_xfer read "${p%:*}" "${p#*:}" "$src"
			check_xfer write "${p#*:}" "${p%:*}" "$src"
		done
		[ "$s" -gt "$above" ] && rm -f "$src"
	done
	return 0
}

# ---------------------------------------------------------------------------------------------
# Baselines: what an idle daemon holds. fds are counted without the peer connections (the
# `connections` of `xferctl peers`), which come and go with peers and are not leaks.

declare -A BASE

# snapshot N: "regions=.. ops=.. ops_active=.. fds=.. clients=.." of node N's daemon.
snapshot()
{
	local s p c=0
	s=$(ctl "$1" --json stats) || return 1
	p=$(ctl "$1" --json peers) || return 1
	while [[ $p =~ \"connections\":([0-9]+) ]]; do
		c=$((c + BASH_REMATCH[1]))
		p=${p#*"${BASH_REMATCH[0]}"}
	done
	echo "regions=$(jfield "$s" regions) ops=$(jfield "$s" ops) ops_active=$(jfield "$s" ops_active) fds=$(($(jfield "$s" fds) - c)) clients=$(jfield "$s" clients)"
}

take_baseline()
{
	local n
	for n in $NODES; do
		BASE[$n]=$(snapshot "$n") || return 1
		note "baseline node $n: ${BASE[$n]}"
	done
}

# check_baseline NAME [NODES]: the daemons (all, or NODES) back to their baseline within 10 s;
# one ok/FAIL line.
check_baseline()
{
	local name="$1: back to baseline (regions, ops, active ops, fds, clients)" n cur bad='' end
	for n in ${2:-$NODES}; do
		end=$((SECONDS + 10))
		while :; do
			cur=$(snapshot "$n") || cur="(stats failed)"
			[ "$cur" = "${BASE[$n]}" ] || [ $SECONDS -ge "$end" ] && break
			sleep 0.1
		done
		[ "$cur" = "${BASE[$n]}" ] || bad+="node $n: $cur, baseline ${BASE[$n]}; "
	done
	if [ -z "$bad" ]; then
		ok "$name"
	else
		fail "$name" "${bad%; }"
	fi
}

# warm: a 4 KiB read between every ordered pair of nodes, so that every connection set exists.
warm()
{
	local f o a
	f=$(mkdata warm 4096)
	for o in $NODES; do
		for a in $NODES; do
			[ "$o" != "$a" ] || continue
			xfer read "$o" "$a" "$f" "$DATA/warm.out" || {
				note "warm-up $o -> $a: $WHY"
				return 1
			}
		done
	done
}

# node_running N: node N's daemon process exists.
node_running() { local pid; pid=$(node_pid "$1") && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }

# after_failure NAME [SURVIVORS]: starts the daemons that died, transfers between every pair
# again and compares with the baseline: every daemon's, or only the SURVIVORS' (then takes a
# new baseline, the others being new processes).
after_failure()
{
	local name=$1 survivors=${2:-$NODES} n
	for n in $NODES; do
		node_running "$n" || node_start "$n" || {
			fail "$name: node $n starts again" "$(logtail "$n")"
			return
		}
	done
	if ! warm; then
		fail "$name: the nodes transfer again afterwards" "$WHY"
	elif [ "$survivors" = "$NODES" ]; then
		check_baseline "$name"
	else
		check_baseline "$name (surviving node $survivors)" "$survivors"
		take_baseline >/dev/null
	fi
}

# ---------------------------------------------------------------------------------------------
# Failures mid-transfer: a FAIL_SIZE transfer of FAILSRC, the owner node 0, the active node 1.

# offer_pair KIND: the passive client on node 0; sets PP, FW (file prefix), META; or WHY.
offer_pair()
{
	next_prefix FW f
	PP='' AP=''
	xfer_begin "$1" 0 "$FAILSRC" "$FW.dst" "$FW.p"
}
# claim_pair KIND: the active client on node 1; sets AP.
claim_pair() { claim "$1" 1 "$META" "$FAILSRC" "$FW.dst" "$FW.a"; }

# signal_daemons SIGNAL N...: sends SIGNAL to the named nodes' daemons (those running, ours).
signal_daemons()
{
	local sig=$1 n pid
	shift
	for n in "$@"; do
		pid=$(node_pid "$n")
		[ -n "$pid" ] && alive "$pid" && kill -"$sig" "$pid"
	done
	return 0
}

# wake_daemons: SIGCONT to every node's daemon (a suite may have stopped some).
# shellcheck disable=SC2086 # NODES is a list
wake_daemons() { signal_daemons CONT $NODES; }

# end_pair: wakes the daemons and kills what is left of a pair.
end_pair()
{
	wake_daemons
	kill9 "$PP"
	kill9 "$AP"
}

# expect_end NAME PID ERRFILE SECONDS STATES ERRNOS T0: the client PID must exit 1 within
# SECONDS (may have decimals) of T0 (from now_ms), its error line naming one of STATES (e.g.
# ERRORED|CANCELLED) and of ERRNOS.
expect_end()
{
	local name=$1 pid=$2 err=$3 secs=$4 states=$5 errnos=$6 t0=$7 rc=0 took ms line
	wait_bg "$pid" $((${secs%.*} + 30)) || rc=$?
	ms=$(($(now_ms) - t0))
	took=$(elapsed "$t0")
	line=$(lastline "$err")
	if [ "$rc" -ne 1 ]; then
		fail "$name" "exit $rc after ${took} s, expected 1: $line"
	elif [ "$ms" -gt "$(to_ms "$secs")" ]; then
		fail "$name" "ended after ${took} s, bound ${secs} s: $line"
	elif ! grep -Eq "($states)" "$err" || ! grep -Eq "\\(($errnos)\\)" "$err"; then
		fail "$name" "expected ($states) and ($errnos): $line"
	else
		ok "$name: after ${took} s: $line"
	fi
}

# survivor_ends NAME KIND VICTIM BOUND ERRNOS T0: node VICTIM's daemon died mid-transfer; the
# client on the other node (the active one on node 1, or the passive one on node 0) ends ERRORED
# within BOUND naming one of ERRNOS, and a writable on node 0 saved nothing.
survivor_ends()
{
	local name=$1 kind=$2 victim=$3 bound=$4 errnos=$5 t0=$6
	if [ "$victim" = 0 ]; then
		expect_end "$name: the $kind on node 1 ends ERRORED" "$AP" "$FW.a.err" "$bound" ERRORED "$errnos" "$t0"
	else
		expect_end "$name: the $(passive_of "$kind") on node 0 ends ERRORED" "$PP" "$FW.p.err" "$bound" ERRORED "$errnos" "$t0"
		[ "$kind" = write ] && no_file "$name: the writable saved nothing" "$FW.dst"
	fi
	return 0
}

# client_case VICTIM: KIND and NAME of the case where client VICTIM (reader, owner-read, writer,
# owner-write) is SIGKILLed mid-transfer.
client_case()
{
	case $1 in
	reader) KIND=read NAME="reader client (xferctl read, node 1) SIGKILL mid-read" ;;
	owner-read) KIND=read NAME="owner client (xferctl readable, node 0) SIGKILL mid-read" ;;
	writer) KIND=write NAME="writer client (xferctl write, node 1) SIGKILL mid-write" ;;
	owner-write) KIND=write NAME="owner client (xferctl writable, node 0) SIGKILL mid-write" ;;
	esac
}

# kill_client VICTIM BOUND: SIGKILLs client VICTIM of the pair (after client_case), wakes the
# daemons, and expects the other side's client to end ERRORED or CANCELLED within BOUND; a
# writable saved nothing.
kill_client()
{
	local t0 states="ERRORED|CANCELLED" errnos="ECONNRESET|ECANCELED"
	t0=$(now_ms)
	case $1 in
	reader | writer)
		kill9 "$AP"
		wake_daemons
		expect_end "$NAME: the $(passive_of "$KIND") on node 0 ends" "$PP" "$FW.p.err" "$2" "$states" "$errnos" "$t0"
		[ "$KIND" = write ] && no_file "$NAME: the writable saved nothing" "$FW.dst"
		;;
	*)
		kill9 "$PP"
		wake_daemons
		expect_end "$NAME: the $KIND on node 1 ends" "$AP" "$FW.a.err" "$2" "$states" "$errnos" "$t0"
		;;
	esac
	return 0
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

# refused NAME NODE VERB META FILE ERRNO: `xferctl VERB META FILE` on NODE must exit 1 naming
# ERRNO (a |-separated list of accepted names).
refused()
{
	local name=$1 n=$2 verb=$3 meta=$4 file=$5 want=$6 rc=0
	ctl "$n" "$verb" "$meta" "$file" >"$DATA/ref.out" 2>"$DATA/ref.err" || rc=$?
	if [ "$rc" -eq 1 ] && grep -Eq "\\(($want)\\)" "$DATA/ref.err"; then
		ok "$name: refused: $(lastline "$DATA/ref.err")"
	else
		fail "$name" "exit $rc, expected 1 and ($want): $(lastline "$DATA/ref.err")"
	fi
}

# refuse_mismatches RMETA WMETA SRC LARGER: node 1 is refused a read with writable metadata, a
# write with readable metadata, and a write of LARGER (65537 bytes) into the 65536-byte writable.
refuse_mismatches()
{
	refused "read with writable metadata (node 1)" 1 read "$2" "$DATA/ref.out1" EINVAL
	refused "write with readable metadata (node 1)" 1 write "$1" "$3" EINVAL
	refused "write of 65537 bytes into a 65536-byte writable (node 1)" 1 write "$2" "$4" EMSGSIZE
}

# claim_after_refusals KIND META SRC DST ERRFILE [PASSIVE_PID PASSIVE_ERRFILE]: node 1's KIND
# (read into DST, or write of SRC) with META succeeds after the refusals, the passive client (if
# given) exits 0, and the bytes are identical.
claim_after_refusals()
{
	local kind=$1 meta=$2 src=$3 dst=$4 err=$5 ppid=${6:-} perr=${7:-} rc=0 prc=0 file=$3
	[ "$kind" = read ] && file=$4
	ctl 1 "$kind" "$meta" "$file" >/dev/null 2>"$err" || rc=$?
	[ -z "$ppid" ] || wait_bg "$ppid" "$WAIT" || prc=$?
	if [ "$rc" -eq 0 ] && [ "$prc" -eq 0 ] && cmp -s "$src" "$dst"; then
		ok "$kind from node 1 after the refusals: bytes identical"
	else
		fail "$kind from node 1 after the refusals" \
			"$kind $rc ($(lastline "$err")), $(passive_of "$kind") $prc ($(firstline "${perr:-/dev/null}"))"
	fi
}

# told_of_shutdown PID ERRFILE SECONDS: the passive client PID, whose daemon was stopped, exits 1
# naming ESHUTDOWN.
told_of_shutdown()
{
	local rc=0
	wait_bg "$1" "$3" || rc=$?
	if [ "$rc" -eq 1 ] && grep -q ESHUTDOWN "$2"; then
		ok "readable's client told of the shutdown: $(firstline "$2")"
	else
		fail "readable's client told of the shutdown" "exit $rc: $(firstline "$2")"
	fi
}

# ---------------------------------------------------------------------------------------------
# Daemons on 127.0.0.1 ports, for the suites that play a hostile peer against them
# (test_peer_auth.sh, test_peer_allow.sh)

# loopback_setup TAG: a scratch directory $D (removed at exit unless KEEP is set), the list
# PIDS of what to kill then, and BASE, a random first port.
loopback_setup()
{
	D=$(mktemp -d "/tmp/xferd-$1.XXXXXX") || abort_setup "mktemp failed"
	PIDS=()
	trap loopback_cleanup EXIT
	[ -n "${KEEP:-}" ] && trap - EXIT
	# Below the kernel's ephemeral range (ip_local_port_range, 32768 up by default): a port
	# there may be held by any process's outgoing connection, and a listener then cannot bind.
	BASE=$((10000 + RANDOM % 20000))
}

loopback_cleanup()
{
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$D"
}

# mkkey FILE [BYTES]: a cluster key of BYTES (32) random bytes as hex, mode 0600.
mkkey() { (umask 077 && od -An -tx1 -N"${2:-32}" /dev/urandom | tr -d ' \n' >"$1"); }

# loopback_start NAME PORT ARGS...: xferd on $D/NAME.sock listening on 127.0.0.1:PORT (log
# $D/NAME.log, pid in PID_NAME); 1 if it does not answer within 10 s.
loopback_start()
{
	local name=$1 port=$2 i
	shift 2
	"$BUILD/xferd" --socket "$D/$name.sock" --foreground --log-level info \
		--listen "127.0.0.1:$port" "$@" 2>"$D/$name.log" &
	PIDS+=($!)
	printf -v "PID_$name" '%s' "$!"
	for ((i = 0; i < 100; i++)); do
		"$BUILD/xferctl" --socket "$D/$name.sock" status >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	note "xferd $name (127.0.0.1:$port) did not answer within 10 s; its log ends:"
	tail -n 5 "$D/$name.log" | sed 's/^/#   /'
	return 1
}

# loopback_transfer OWNER READER NAME: a 1 MiB readable on daemon OWNER (of loopback_start) read
# by READER; 0 when the bytes match. The reader's stderr goes to $D/NAME.err.
loopback_transfer()
{
	local owner=$1 reader=$2 name=$3 rp i rc=0
	head -c $((1 << 20)) /dev/urandom >"$D/$name.src"
	"$BUILD/xferctl" --socket "$D/$owner.sock" readable "$D/$name.src" >"$D/$name.meta" \
		2>"$D/$name.oerr" &
	rp=$!
	for ((i = 0; i < 100; i++)); do
		[ -s "$D/$name.meta" ] && break
		sleep 0.05
	done
	timeout 20 "$BUILD/xferctl" --socket "$D/$reader.sock" read "$(head -n 1 "$D/$name.meta")" \
		"$D/$name.dst" 2>"$D/$name.err" || rc=$?
	if [ "$rc" -ne 0 ]; then
		kill "$rp" 2>/dev/null
		wait "$rp" 2>/dev/null
		return 1
	fi
	wait "$rp" && cmp -s "$D/$name.src" "$D/$name.dst"
}

# metrics_current URL FILE: GET URL (an xferd /metrics) into FILE, with a snapshot that reflects
# everything the daemon did before this call, for comparing counters: the reply says
# "X-Xferd-Snapshot: fresh", or its xferd_metrics_snapshot_age_seconds shows that it was
# rendered after the first try began (a busy or slow event loop answers a scrape's ask after
# that reply went; a later scrape gets it). 1 after 50 tries.
metrics_current()
{
	local url=$1 f=$2 t0 tn i age
	t0=$EPOCHREALTIME
	for ((i = 0; i < 50; i++)); do
		tn=$EPOCHREALTIME
		if curl -s --max-time 10 -D "$f.head" -o "$f" "$url" && grep -q '^HTTP/1.1 200' "$f.head"; then
			grep -qi '^X-Xferd-Snapshot: fresh' "$f.head" && return 0
			age=$(awk '$1 == "xferd_metrics_snapshot_age_seconds" { print $2 }' "$f")
			[ -n "$age" ] && awk -v a="$age" -v t0="$t0" -v tn="$tn" 'BEGIN { exit !(a < tn - t0) }' &&
				return 0
		fi
		sleep 0.1
	done
	return 1
}
