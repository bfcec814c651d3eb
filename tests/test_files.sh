#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# File regions across nodes: two xferd in two network namespaces (scripts/cluster.sh; loopback
# ports where namespaces cannot be made), TCP between them. Every check compares bytes.
#
#   - xferctl, the six ways a file and memory pair up (readable FILE or -, read into OUTFILE or
#     -, writable into OUTFILE or -, write from FILE or -), 1 B .. 3 MiB + 5; OUTFILE 0600, no
#     landing file left behind
#   - xferbench_net check with a file on the passive side, the active side, both: scatter/gather
#     at unaligned offsets, read and write
#   - xferctl --direct: O_DIRECT files <-> memory and O_DIRECT file -> O_DIRECT file (DATA's file
#     system, or a loop-mounted ext4 image; skipped with the reason when neither does O_DIRECT)
#   - readable --readers 4: four reads of one file, each verified
#   - a source truncated mid-transfer: both clients fail naming the truncation, no OUTFILE
#   - a target on a full tmpfs: ENOSPC named, the partial file removed (read and writable)
#   - the owner daemon killed -9 mid-file: the read fails, nothing left behind
#   after each failure, both daemons are back to their baseline (regions, ops, fds, clients)
#
# Prints "ok - ", "FAIL - ", "SKIP - " lines and "N passed, N failed[, N skipped]".
# Environment: BUILD (default build), SANITIZE or XFER_TEST_LARGE=0 (smaller failure sizes).
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
# shellcheck source=tests/cluster_suite.sh
. tests/cluster_suite.sh

T=60
WAIT=30
POLL=0.02
NODES="0 1"
MIB=$((1024 * 1024))
FAIL_SIZE=$((256 * MIB))
SHAPE_RATE=1gbit
FULL=
FULL_DIO=

after_teardown()
{
	[ -n "$FULL" ] && umount "$FULL" 2>/dev/null
	[ -n "$FULL_DIO" ] && umount "$FULL_DIO" 2>/dev/null
}

# leftovers DIR: landing files (NAME.xferctl-XXXXXX) xferctl left in DIR, listed.
leftovers() { find "$1" -maxdepth 1 -name '*.xferctl-*' 2>/dev/null | tr '\n' ' '; }

# pass_case KIND OWNER_SRC ACTIVE_DST SRC NAME: one transfer with xferctl from node 0 (passive)
# and node 1 (active); "-" ends read from stdin or write to stdout. One ok/FAIL line.
pass_case()
{
	local kind=$1 psrc=$2 adst=$3 src=$4 name=$5 out=$DATA/out p=$DATA/pc arc=0 prc=0 meta
	local sync=${XFERCTL_SYNC:+--sync} pd='' ad=''
	# XFERCTL_DIRECT=1: the sides with a file open it O_DIRECT (--direct)
	if [ -n "${XFERCTL_DIRECT:-}" ]; then
		[ "$kind" = read ] && [ "$psrc" != - ] && pd=--direct
		[ "$kind" = write ] && [ "$adst" != - ] && pd=--direct
		[ "$kind" = read ] && [ "$adst" != - ] && ad=--direct
		[ "$kind" = write ] && [ "$psrc" != - ] && ad=--direct
	fi
	rm -f "$out"
	: >"$p.out" # emptied before the fork: wait_line must not see the last run's line
	if [ "$kind" = read ]; then
		if [ "$psrc" = - ]; then
			"$BUILD/xferctl" --socket "$(xc_sock 0)" readable - <"$src" >"$p.out" 2>"$p.err" &
		else
			# shellcheck disable=SC2086 # $pd is empty or one word
			"$BUILD/xferctl" --socket "$(xc_sock 0)" $pd readable "$src" >"$p.out" 2>"$p.err" &
		fi
	else
		# shellcheck disable=SC2086 # $sync and $pd are empty or one word
		"$BUILD/xferctl" --socket "$(xc_sock 0)" $sync $pd writable "$(stat -c %s "$src")" \
			"$([ "$adst" = - ] && echo - || echo "$out")" >"$p.out" 2>"$p.err" &
	fi
	local pp=$!
	if ! meta=$(wait_line "$p.out" "$WAIT"); then
		kill9 "$pp"
		fail "$name" "no metadata: $(lastline "$p.err")"
		return
	fi
	echo "$meta" >"$DATA/meta"
	if [ "$kind" = read ] && [ "$adst" = - ]; then
		ctl 1 read "@$DATA/meta" - >"$out" 2>"$p.aerr" || arc=$?
	elif [ "$kind" = read ]; then
		# shellcheck disable=SC2086 # $sync and $ad are empty or one word
		ctl 1 $sync $ad read "@$DATA/meta" "$out" 2>"$p.aerr" || arc=$?
	elif [ "$psrc" = - ]; then
		ctl 1 write "@$DATA/meta" - <"$src" 2>"$p.aerr" || arc=$?
	else
		# shellcheck disable=SC2086 # $ad is empty or one word
		ctl 1 $ad write "@$DATA/meta" "$src" 2>"$p.aerr" || arc=$?
	fi
	wait_bg "$pp" "$WAIT" || prc=$?
	if [ "$kind" = write ] && [ "$adst" = - ]; then
		tail -n +2 "$p.out" >"$out" # the bytes follow the metadata line on stdout
	fi
	if [ $arc -ne 0 ] || [ $prc -ne 0 ]; then
		fail "$name" "active exited $arc ($(lastline "$p.aerr")), passive $prc ($(lastline "$p.err"))"
	elif ! cmp -s "$src" "$out"; then
		fail "$name" "bytes differ: $(cmp "$src" "$out" 2>&1 | head -n 1)"
	elif [ "$adst" != - ] && [ "$(stat -c %a "$out")" != 600 ]; then
		fail "$name" "OUTFILE has mode $(stat -c %a "$out"), not 600"
	elif [ -n "$(leftovers "$DATA")" ]; then
		fail "$name" "landing files left: $(leftovers "$DATA")"
	else
		ok "$name"
	fi
}

# ---------------------------------------------------------------------------------------------
# Setup

DATA=$(mktemp -d "${TMPDIR:-/tmp}/xffiles.XXXXXX")
require_built
if ! xn_up 2; then
	XN_MODE=loopback xn_up 2 || {
		skip files "neither network namespaces nor loopback ports could be set up"
		summary
		exit 0
	}
fi
xn_check || abort_setup "the nodes do not reach each other"
note "mode $(xn_mode)"
xc_start_all || abort_setup "the daemons did not start"
take_baseline || abort_setup "xferctl stats failed"

# ---------------------------------------------------------------------------------------------
# The six pairings of file and memory, across nodes

for size in 1 4097 $((3 * MIB + 5)); do
	src=$(mkdata "src.$size" "$size")
	pass_case read "$src" "$DATA/out" "$src" "read $size B: file -> file"
	pass_case read "$src" - "$src" "read $size B: file -> memory"
	pass_case read - "$DATA/out" "$src" "read $size B: memory -> file"
	pass_case write "$src" "$DATA/out" "$src" "write $size B: file -> file"
	pass_case write - "$DATA/out" "$src" "write $size B: memory -> file"
	pass_case write "$src" - "$src" "write $size B: file -> memory"
done
src=$(mkdata synced $((2 * MIB + 1)))
XFERCTL_SYNC=1 pass_case read "$src" "$DATA/out" "$src" "read --sync: file -> file, fdatasynced"
XFERCTL_SYNC=1 pass_case write "$src" "$DATA/out" "$src" "writable --sync: file -> file, fdatasynced"
check_baseline "pairings"

# ---------------------------------------------------------------------------------------------
# O_DIRECT files (xferctl --direct): the same pairings with every file side opened O_DIRECT,
# sizes around the direct I/O block (the body O_DIRECT, the tail through the page cache), on
# DATA's file system if it does O_DIRECT, else on a loop-mounted ext4 image.

direct_ok() { dd if=/dev/zero of="$1/.dio" bs=4096 count=1 oflag=direct status=none 2>/dev/null && rm -f "$1/.dio"; }
DIO=$DATA
if ! direct_ok "$DIO"; then
	DIO=$DATA/dio
	mkdir -p "$DIO"
	if truncate -s 64M "$DATA/dio.img" && mkfs.ext4 -q -F "$DATA/dio.img" 2>/dev/null &&
		mount -o loop "$DATA/dio.img" "$DIO" 2>/dev/null; then
		FULL_DIO=$DIO
	else
		DIO=
	fi
fi
if [ -z "$DIO" ] || ! direct_ok "$DIO"; then
	skip "O_DIRECT files" "$DATA's file system does not do O_DIRECT and no ext4 image could be loop-mounted"
else
	saved=$DATA
	for size in 5000 $((3 * MIB + 5)); do
		src=$(mkdata "dsrc.$size" "$size")
		DATA=$DIO
		cp "$src" "$DIO/dsrc"
		XFERCTL_DIRECT=1 pass_case read "$DIO/dsrc" - "$DIO/dsrc" "--direct read $size B: O_DIRECT file -> memory"
		XFERCTL_DIRECT=1 pass_case read - "$DIO/out" "$DIO/dsrc" "--direct read $size B: memory -> O_DIRECT file"
		XFERCTL_DIRECT=1 pass_case write "$DIO/dsrc" "$DIO/out" "$DIO/dsrc" "--direct write $size B: O_DIRECT file -> O_DIRECT file"
		XFERCTL_DIRECT=1 pass_case write - "$DIO/out" "$DIO/dsrc" "--direct write $size B: memory -> O_DIRECT file"
		rm -f "$DIO/dsrc" "$DIO/out"
		DATA=$saved
	done
	check_baseline "O_DIRECT pairings"
fi

# ---------------------------------------------------------------------------------------------
# Scatter/gather at unaligned offsets, a file on either side or both (xferbench_net check)

for sides in "--passive-file $DATA" "--active-file $DATA" "--passive-file $DATA --active-file $DATA"; do
	# shellcheck disable=SC2086 # $sides is two or four words
	if out=$(timeout -k 2 120 "$BUILD/xferbench_net" check --passive "$(xc_sock 0)" \
		--active "$(xc_sock 1)" --max 16M $sides 2>&1); then
		ok "scatter/gather check, ${sides//$DATA/DIR}"
	else
		fail "scatter/gather check, ${sides//$DATA/DIR}" "$(echo "$out" | grep -v '^#' | tail -n 2 | tr '\n' '|')"
	fi
done
check_baseline "scatter/gather"

# ---------------------------------------------------------------------------------------------
# Fan-out: one file, four readers

src=$(mkdata fan $((5 * MIB + 3)))
: >"$DATA/fan.out"
"$BUILD/xferctl" --socket "$(xc_sock 0)" readable --readers 4 "$src" >"$DATA/fan.out" 2>"$DATA/fan.err" &
fp=$!
for ((i = 0; i < 200; i++)); do
	[ "$(wc -l <"$DATA/fan.out")" -ge 4 ] && break
	sleep 0.05
done
pids=()
for i in 1 2 3 4; do
	sed -n "${i}p" "$DATA/fan.out" >"$DATA/fan.meta$i"
	ctl 1 read "@$DATA/fan.meta$i" "$DATA/fan.dst$i" 2>"$DATA/fan.err$i" &
	pids+=($!)
done
bad=''
for i in 1 2 3 4; do
	wait_bg "${pids[$((i - 1))]}" || bad+="reader $i exited $?: $(firstline "$DATA/fan.err$i"); "
	cmp -s "$src" "$DATA/fan.dst$i" || bad+="reader $i's bytes differ; "
done
wait_bg "$fp" "$WAIT" || bad+="readable exited $?: $(lastline "$DATA/fan.err"); "
if [ -z "$bad" ]; then
	ok "readable --readers 4: four readers on node 1, each identical"
else
	fail "readable --readers 4" "$bad"
fi
check_baseline "fan-out"

# ---------------------------------------------------------------------------------------------
# Failures mid-file: the link slowed so that FAIL_SIZE bytes take seconds

shape()
{
	local i
	[ "$(xn_mode)" = netns ] || return 0
	for i in 0 1; do xn_shape "$i" "$SHAPE_RATE" || note "tc on node $i failed"; done
}
unshape()
{
	local i
	[ "$(xn_mode)" = netns ] || return 0
	for i in 0 1; do xn_unshape "$i"; done
}

# midway NODE: waits until NODE's daemon has an operation that moved bytes and is not done.
midway()
{
	local i j
	for ((i = 0; i < 400; i++)); do
		j=$(ctl "$1" --json ops 2>/dev/null | "$XN_PY" -c '
import json, sys
print(max([o["bytes"] for o in json.load(sys.stdin)["ops"] if o["state"] == "IN_PROGRESS"] or [0]))' 2>/dev/null)
		[ "${j:-0}" -gt $((2 * MIB)) ] && return 0
		sleep 0.02
	done
	return 1
}

# fail_read SRC NAME ACTION EXPECT: a read of SRC (node 0 readable, node 1 read into DATA/fo),
# ACTION run once bytes move; the read must fail with EXPECT in its message and leave nothing.
fail_read()
{
	local src=$1 name=$2 action=$3 expect=$4 pp ap arc=0 meta
	rm -f "$DATA/fo"
	: >"$DATA/f.out"
	"$BUILD/xferctl" --socket "$(xc_sock 0)" readable "$src" >"$DATA/f.out" 2>"$DATA/f.err" &
	pp=$!
	if ! meta=$(wait_line "$DATA/f.out" "$WAIT"); then
		kill9 "$pp"
		fail "$name" "no metadata: $(lastline "$DATA/f.err")"
		return
	fi
	echo "$meta" >"$DATA/fmeta"
	"$BUILD/xferctl" --socket "$(xc_sock 1)" read "@$DATA/fmeta" "$DATA/fo" 2>"$DATA/f.aerr" &
	ap=$!
	if ! midway 1; then
		fail "$name" "the transfer was never seen under way"
		kill9 "$ap"
		kill9 "$pp"
		return
	fi
	eval "$action"
	wait_bg "$ap" || arc=$?
	wait_bg "$pp" 10 2>/dev/null
	if [ $arc -ne 1 ]; then
		fail "$name" "read exited $arc, not 1: $(lastline "$DATA/f.aerr")"
	elif ! grep -q -- "$expect" "$DATA/f.aerr"; then
		fail "$name" "read's message does not name '$expect': $(lastline "$DATA/f.aerr")"
	elif [ -e "$DATA/fo" ] || [ -n "$(leftovers "$DATA")" ]; then
		fail "$name" "files left behind: $(ls "$DATA"/fo* 2>/dev/null | tr '\n' ' ')$(leftovers "$DATA")"
	else
		ok "$name: $(sed 's/^xferctl: read: //' "$DATA/f.aerr" | head -c 150)"
	fi
}

shape
big=$(mkdata big "$FAIL_SIZE")
cp "$big" "$DATA/victim"
fail_read "$DATA/victim" "source truncated mid-transfer" 'truncate -s 1M "$DATA/victim"' truncated
check_baseline "truncated source"

fail_read "$big" "owner daemon killed -9 mid-file" 'xc_kill 0' 'ECONNRESET\|closed\|lost\|reset'
if xc_start 0 && take_baseline >/dev/null; then
	ok "owner daemon started again"
else
	fail "owner daemon started again" "$(xc_log_tail 0 2>&1 | tail -n 2)"
fi
unshape

# ---------------------------------------------------------------------------------------------
# A target on a full file system: a 2 MiB tmpfs

FULL=$DATA/full
mkdir -p "$FULL"
if mount -t tmpfs -o size=2m xffull "$FULL" 2>/dev/null; then
	src=$(mkdata nospace $((8 * MIB)))
	: >"$DATA/n.out"
	: >"$DATA/w.out"
	"$BUILD/xferctl" --socket "$(xc_sock 0)" readable "$src" >"$DATA/n.out" 2>"$DATA/n.err" &
	pp=$!
	if meta=$(wait_line "$DATA/n.out" "$WAIT"); then
		echo "$meta" >"$DATA/nmeta"
		rc=0
		ctl 1 read "@$DATA/nmeta" "$FULL/out" 2>"$DATA/n.aerr" || rc=$?
		wait_bg "$pp" 10
		if [ $rc -eq 1 ] && grep -q 'No space left' "$DATA/n.aerr" &&
			[ -z "$(ls -A "$FULL")" ]; then
			ok "read onto a full tmpfs: ENOSPC named, partial file removed"
		else
			fail "read onto a full tmpfs" "exit $rc: $(lastline "$DATA/n.aerr"); left: $(ls -A "$FULL" | tr '\n' ' ')"
		fi
	else
		kill9 "$pp"
		fail "read onto a full tmpfs" "no metadata"
	fi
	"$BUILD/xferctl" --socket "$(xc_sock 1)" writable $((8 * MIB)) "$FULL/out" >"$DATA/w.out" 2>"$DATA/w.err" &
	pp=$!
	if meta=$(wait_line "$DATA/w.out" "$WAIT"); then
		echo "$meta" >"$DATA/wmeta"
		rc=0 prc=0
		ctl 0 write "@$DATA/wmeta" "$src" 2>"$DATA/w.aerr" || rc=$?
		wait_bg "$pp" 10 || prc=$?
		if [ $prc -eq 1 ] && grep -q 'No space left' "$DATA/w.err" && [ $rc -eq 1 ] &&
			[ -z "$(ls -A "$FULL")" ]; then
			ok "writable on a full tmpfs: ENOSPC named on both sides, partial file removed"
		else
			fail "writable on a full tmpfs" "writable $prc: $(lastline "$DATA/w.err"); write $rc: $(lastline "$DATA/w.aerr"); left: $(ls -A "$FULL" | tr '\n' ' ')"
		fi
	else
		kill9 "$pp"
		fail "writable on a full tmpfs" "no metadata"
	fi
	check_baseline "full file system"
else
	skip "target on a full file system" "cannot mount a tmpfs here"
fi

# Both daemons exit 0 on SIGTERM (a sanitizer's report would make that non-zero).
if xc_stop_all 2>"$DATA/stop.err"; then
	ok "both daemons exited 0 on SIGTERM"
else
	fail "both daemons exited 0 on SIGTERM" "$(tr '\n' '|' <"$DATA/stop.err")"
fi

summary
