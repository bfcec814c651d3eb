#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# tests/rdma/run.sh: cross-node tests of xferd over RDMA. Runs INSIDE the VM of
# scripts/rxe-vm.sh (`make test-rdma`), which provides two Soft-RoCE devices on a veth pair:
#   node 0: xferd --rdma-device $RXE_DEV0 (rxe0) --listen $RXE_IP0 (10.77.0.1):7700
#   node 1: xferd --rdma-device $RXE_DEV1 (rxe1) --listen $RXE_IP1 (10.77.0.2):7700
# both with --transport rdma and "require_rdma": true, so a fallback to TCP is an error, and
# both with the same cluster key (--peer-key, a 0600 file): their peers authenticate.
#
#   - devices: each daemon uses its rxe device, port ACTIVE, Ethernet, MTU, RoCE v2 GID
#   - the four operations byte-exact (cmp) at 4 KiB .. 32 MiB, both directions; each passive op
#     (and each active op seen while it ran) lists transport "rdma"; peers list transport rdma
#     and no TCP connections (over TCP: their TCP, "conns");
#     the devices count RDMA READ/WRITE bytes, in requests of at most the node's
#     rdma_request_size (128 KiB on node 0, 16 KiB on node 1); regions list per-device keys
#   - registrations too large to pin on the event loop are made and dropped on a worker
#     (tests/rdma/rdma_reg.c): listed as such with their keys, bytes moved through them at
#     once, deregistered at once, clients dying mid-registration leave no region or charge
#   - multi-descriptor ops with mismatched boundaries (tests/rdma/rdma_sg.c)
#   - a staging pool that cannot be made (64 GiB configured): the file read that waited for it
#     ends with the cause, the daemon serves on (the pool is made on a worker, not the loop)
#   - file regions through the staging buffers (tests/rdma/rdma_files.c): file -> memory, memory
#     -> file, file -> file, reads and writes, the file on either side, unaligned, 1 B to 3 MiB +
#     5 and one XFER_RDMA_FILES_BIG (default 256 MiB) file -> file read; truncated source: EIO;
#     full target (1 MiB tmpfs): ENOSPC, and xferctl's partial file removed; every staging buffer
#     back in its pool (also after the failure group's kills). xferctl registers files itself, so
#     the sizes, concurrency and failure groups move files through staging too.
#   - O_DIRECT file regions over RDMA, on an ext4 image loop-mounted in the guest (tmpfs in 6.1
#     does no O_DIRECT): rdma_files -D (every pairing with O_DIRECT files, descriptors at
#     unaligned offsets and lengths inside aligned regions, 1 B .. 5 MiB + 5), and xferctl
#     --direct read and write of an unaligned length, O_DIRECT file to O_DIRECT file
#   - the benchmark client of make bench-rdma (tests/rdma/rdma_bench.c), briefly, 2 in flight:
#     it runs, checks its bytes and reports the transport, so that the bench does not rot
#   - a hostile peer (tests/rdma/rdma_rogue.c, RDMA only): a HELLO without a nonce, an AUTH with
#     a wrong MAC and a CLAIM before AUTH are refused, no set made, the op still served; with the
#     key it proves like a daemon, and then: CLAIM_OK's rkeys are memory windows
#     that reach only the claimed range, in its direction, through the claimer's queue pair,
#     while the transfer lasts; the region MR's own rkey reaches nothing; a window's opener
#     holding a revoked window's rkey fails once it let go, and is cut off if it does not; an
#     opener flooding WNOTIFYs at an owner client that reads nothing, past its credit (or past
#     4096 without one) is revoked EDQUOT, the owner's client kept and given every earlier one
#   - a fake window owner (rdma_rogue with ROGUE_ONLY=o, listening on node 0's address, port
#     FAKE_PORT) that node 1 opens a window of: WNOTIFY_ACKs going backwards, past what was
#     sent, without an integer count, unparsable, with a lying header length or the opener's
#     direction flag each end node 1's set to it (PROTOCOL.md §10.9), its held tagged puts end
#     ERRORED with the cause, its handle closed; node 1 then opens, puts and gets again (bytes
#     checked on both sides) and lists nothing of the fake owner; then the same fake owner holds
#     readables and writables node 1 claims: a CLAIM_OK sent twice (PROTOCOL.md §10.4), ranges
#     a byte short of the claim, none, or an rkey past 32 bits each end node 1's set EPROTO,
#     its op ERRORED (or refused) naming the rule; good claims before and after read and
#     write byte-exact
#   - rolling the cluster key: a second key added to the file both nodes read, then alone,
#     SIGHUP after each: the sets that proved the old key close, new ones prove the new key,
#     transfers both ways over RDMA at each step
#   - windows: tests/test_windows.c on these two nodes (gets/puts, notify, revocation, kills,
#     batches; 6000 tagged puts at an owner that reads nothing slow the keyed opener by its
#     notification credit, PROTOCOL.md §10.9), every cross-node get and put over this transport
#   - concurrency: 8 readable/read pairs each direction plus 4 writable/write pairs each
#     direction, all at once
#   - refusals before any byte moves: EINVAL (pairing), EMSGSIZE, EALREADY (second claim while
#     the first runs), ESTALE (owner restarted); the passive op stays claimable
#   - failures mid-transfer: either daemon SIGKILLed (the survivor's op ends ERRORED within the
#     keepalive bound), and each of the four clients SIGKILLed (the other side's op ends, and
#     the connection set between the daemons, shared by every client, survives)
#   - rdma_post_thread "never" (daemons restarted): the event loop posts every work request, as
#     for a NIC; the four operations (node 0 writing, node 1 reading) at 1 MiB + 1 and 8 MiB, and
#     test_windows' gets and puts at many offsets, bytes checked
#   - failed posts (tests/preload/postfail.c preloaded: node 1's post of RDMA WRITEs or READs
#     fails with ENOMEM mid-transfer), under "never" and "auto" (WRITEs by the poster thread):
#     an xferctl write and window puts and gets (tests/rdma/rdma_postfail.c) end ERRORED on both
#     sides within 20 s, the cause naming the post and the thread; the set is failed, the next
#     transfers run on a new one, bytes checked
#   - after each group: regions, ops, active ops, fds and clients back to their baseline
#
# Prints "ok - NAME" / "FAIL - NAME (why)" and a final "N passed, N failed". Every wait is
# bounded; nothing asserts on speed (Soft-RoCE under TCG moves ~10-20 MB/s). The helpers shared
# with tests/test_cross.sh are in tests/lib.sh.
#
# Environment: BUILD (default build); XFER_RDMA_TRANSPORT=tcp runs the same cases over TCP
# between the two addresses (expects transport "tcp"; the veths are slowed to 100 Mbit/s with
# tc for the failure cases, or they end before they are caught under way); XFER_RDMA_FAIL_SIZE (bytes moved in
# the failure cases, default 128 MiB: 4 MiB chunks, 2 in flight, finish 64 MiB before a
# sanitizer build notices a kill); XFER_RDMA_LOG (daemon log level, default warn);
# XFER_RDMA_KEEP=DIR copies the daemon logs there at the end (DIR must be outside the guest's
# tmpfs, e.g. under the repository); XFER_RDMA_ONLY=REGEX runs only the matching groups of
# sizes, regions, registration, multi, files, staging, direct, bench, hostile, fakeowner, keys, windows, concurrency, refusals, failures,
# loopposts, postfail (setup and shutdown
# always run).
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh
BUILD=${BUILD:-build}
TRANSPORT=${XFER_RDMA_TRANSPORT:-rdma}
MIB=$((1024 * 1024))
FAIL_SIZE=${XFER_RDMA_FAIL_SIZE:-$((128 * MIB))}
FILES_BIG=${XFER_RDMA_FILES_BIG:-$((256 * MIB))} # the largest file moved over RDMA (rdma_files)
PORT=7700
FAKE_PORT=7710 # the fake window owner's listener (rdma_rogue, on node 0's address)
KA_MS=3000     # keepalive_timeout_ms of the daemons
BOUND=8        # seconds a survivor may take to see a failure: keepalive 3 s + TCG slack
T=180          # seconds: "it ended at all" for one client
WAIT=60        # seconds for metadata, and for a passive client to end after its transfer
POLL=0.05      # seconds between polls
NODES="0 1"
ONLY=${XFER_RDMA_ONLY:-}
DEV=("${RXE_DEV0:-}" "${RXE_DEV1:-}")
IP=("${RXE_IP0:-}" "${RXE_IP1:-}")

PID=("" "")
START=$SECONDS

D=$(mktemp -d /dev/shm/xfrdma.XXXXXX) || exit 1
DATA=$D/data
mkdir -p "$DATA"
# The cluster key both nodes share (and the rogue, to get past the handshake for its probes).
KEY=$D/peer.key
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$KEY") || exit 1

cleanup() {
	kill_children
	if [ -n "${XFER_RDMA_KEEP:-}" ]; then
		mkdir -p "$XFER_RDMA_KEEP" && cp "$D"/n*.log "$XFER_RDMA_KEEP"/ 2>/dev/null
	fi
	rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------------------------
# Process starts are what costs under TCG (0.1-0.5 s each), so JSON is read with bash regexes
# where the object is flat (lib.sh's jfield), and nothing forks that need not.

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

# ---------------------------------------------------------------------------------------------
# Daemons

HAS_TRANSPORT=0
"$BUILD/xferd" --help 2>&1 | grep -q -- --transport && HAS_TRANSPORT=1

# rdma_ack_timeout 19 (~2.1 s, default 16 ~270 ms): under emulation a loaded node can take longer
# than 270 ms to ACK, and Soft-RoCE 6.1's requester sometimes stops for good when such a spurious
# retransmission rewinds over a memory window bind (README, "Running the RDMA tests").
# rdma_request_size: node 0 posts requests of the default 128 KiB, node 1 of 16 KiB, so that
# the transfers node 1 drives also cut chunks at the work-request limit per chunk (32).
REQUEST=(131072 16384)
# Staging buffers for files (PROTOCOL.md §10.5.1): node 0 16 of 1 MiB (a quarter of the default
# size, so that the sizes tested cross several chunk edges), node 1 4 of 256 KiB, so that each
# node's chunks fit the other's buffers only by the CLAIM's stage_max, and node 1's transfers
# wait for buffers (2 chunks in flight each, 4 buffers for all of them).
STAGE_SIZE=(1048576 262144)
STAGE_BUFS=(16 4)
METRICS_PORT=9468
MAX_PENDING=4
POST_THREAD=   # rdma_post_thread of both daemons' configs, empty: not set
PRELOAD=       # an LD_PRELOAD for the daemons (tests/preload/postfail.c), empty: none
write_config() {
	local extra=
	[ "$TRANSPORT" = rdma ] &&
		extra=", \"require_rdma\": true, \"rdma_ack_timeout\": 19, \"rdma_request_size\": ${REQUEST[$1]}"
	[ "$TRANSPORT" = rdma ] &&
		extra+=", \"rdma_staging_size\": ${STAGE_SIZE[$1]}, \"rdma_staging_buffers\": ${STAGE_BUFS[$1]}"
	# The Prometheus endpoint on each node's address (checked against the device counters).
	extra+=", \"metrics_listen\": \"${IP[$1]}:$METRICS_PORT\""
	# The hostile peer holds MAX_PENDING connections before AUTH and expects the next refused;
	# the handshake deadline is long enough that none of them expires while it opens them.
	extra+=", \"max_pending_peer_conns\": $MAX_PENDING, \"handshake_timeout_ms\": 20000"
	# rdma_post_thread (the postfail and loopposts groups): unset, the daemon's default (auto).
	[ -n "$POST_THREAD" ] && extra+=", \"rdma_post_thread\": \"$POST_THREAD\""
	printf '{"keepalive_ms": 500, "keepalive_timeout_ms": %s, "default_timeout_ms": 300000%s}\n' \
		"$KA_MS" "$extra" >"$D/n$1.json"
}

# The nodes, for tests/lib.sh.
node_sock() { echo "$D/n$1.sock"; }
node_pid() { echo "${PID[$1]}"; }
node_log() { echo "$D/n$1.log"; }

# node_start N: starts node N's daemon (log appended to $D/nN.log) and waits until it answers.
node_start() {
	local n=$1 args i
	args=(--socket "$(node_sock "$n")" --foreground --log-level "${XFER_RDMA_LOG:-warn}"
		--config "$D/n$n.json" --listen "${IP[$n]}:$PORT" --peer-key "$KEY")
	if [ "$HAS_TRANSPORT" = 1 ]; then
		args+=(--transport "$TRANSPORT")
		[ "$TRANSPORT" = tcp ] || args+=(--rdma-device "${DEV[$n]}")
	fi
	echo "=== $(date +%T) start: xferd ${args[*]}" >>"$D/n$n.log"
	if [ -n "$PRELOAD" ]; then
		# (the injector's trigger files are $D/pfN.*; a sanitizer build's runtime would refuse
		# to come after it in the library list)
		ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" LD_PRELOAD=$PRELOAD \
			XFERD_TEST_POSTFAIL=$D/pf$n "$BUILD/xferd" "${args[@]}" 2>>"$D/n$n.log" &
	else
		"$BUILD/xferd" "${args[@]}" 2>>"$D/n$n.log" &
	fi
	PID[$n]=$!
	for ((i = 0; i < 300; i++)); do
		[ -S "$(node_sock "$n")" ] && timeout 10 "$BUILD/xferctl" --socket "$(node_sock "$n")" status \
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
	rm -f "$(node_sock "$n")"
	return $rc
}
# crash N: SIGKILL.
crash() {
	kill9 "${PID[$1]}"
	PID[$1]=
	rm -f "$(node_sock "$1")"
}
# peer_failures: how many connection-set failures each daemon has logged so far ("N0 N1").
peer_failures() { echo "$(grep -c peer_fail "$D/n0.log") $(grep -c peer_fail "$D/n1.log")"; }
# new_peer_failures "N0 N1": the failures logged since peer_failures said "N0 N1".
new_peer_failures() {
	local c0=${1% *} c1=${1#* }
	{ grep peer_fail "$D/n0.log" | tail -n +$((c0 + 1)) | sed 's/^/node 0: /'
	  grep peer_fail "$D/n1.log" | tail -n +$((c1 + 1)) | sed 's/^/node 1: /'; } | tr '\n' '|'
}

# ---------------------------------------------------------------------------------------------
# Transfers with xferctl. xfer KIND OWNER ACTIVE SRC DST: KIND read (readable on OWNER, read on
# ACTIVE into DST) or write (writable on OWNER saved to DST, write of SRC from ACTIVE).
# The passive client is stopped once it printed its metadata, so that its operation is still
# listed after the transfer; the active node's listing is polled while the active client runs.
# Sets WHY (empty on success) and SEEN (what the listings said).
xfer() {
	local kind=$1 o=$2 a=$3 src=$4 dst=$5 w pk l op at='' pt='' ps='' pb='' size arc=0 prc=0
	pk=$(passive_of "$kind")
	size=$(stat -c %s "$src")
	next_prefix w x
	xfer_begin "$kind" "$o" "$src" "$dst" "$w.p" || return 1
	kill -STOP "$PP"
	claim "$kind" "$a" "$META" "$src" "$dst" "$w.a"
	while [ -z "$at" ] && alive "$AP"; do
		l=$(ctl "$a" --json ops 2>/dev/null) && op=$(op_of "$l" "$kind") && at=$(jfield "$op" transport)
	done
	wait_bg "$AP" || arc=$?
	l=$(ctl "$o" --json ops 2>/dev/null)
	if op=$(op_of "$l" "$pk"); then
		pt=$(jfield "$op" transport) ps=$(jfield "$op" state) pb=$(jfield "$op" bytes)
	fi
	kill -CONT "$PP"
	wait_bg "$PP" "$WAIT" || prc=$?
	SEEN="$pk: ${ps:-not listed} transport '${pt}'; $kind: transport '${at:-(ended before it was listed)}'"
	xfer_outcome "$kind" "$src" "$dst" "$w" "$arc" "$prc" || return 1
	if [ "$ps" != COMPLETE ] || [ "$pt" != "$TRANSPORT" ] || [ "$pb" != "$size" ]; then
		WHY="owner's listing: $pk state '$ps' transport '$pt' bytes '$pb', expected COMPLETE $TRANSPORT $size"
	elif [ -n "$at" ] && [ "$at" != "$TRANSPORT" ]; then
		WHY="active node's listing: $kind transport '$at', expected $TRANSPORT"
	fi
	[ -z "$WHY" ]
}

# ---------------------------------------------------------------------------------------------
# Setup

require_built
if [ -z "${DEV[0]}" ] || [ -z "${DEV[1]}" ] || [ -z "${IP[0]}" ] || [ -z "${IP[1]}" ]; then
	abort_setup "RXE_DEV0/1 and RXE_IP0/1 are not set: run inside scripts/rxe-vm.sh (make test-rdma)"
fi
if [ "$HAS_TRANSPORT" = 0 ] && [ "$TRANSPORT" != tcp ]; then
	abort_setup "$BUILD/xferd has no --transport option: the RDMA transport is not built in"
fi
read -r up _ </proc/uptime
note "VM: kernel $(uname -r), $(nproc) vCPUs, up ${up} s when the tests started"
note "transport $TRANSPORT; node 0 ${DEV[0]} ${IP[0]}:$PORT, node 1 ${DEV[1]} ${IP[1]}:$PORT; failure size $FAIL_SIZE"
write_config 0
write_config 1
if ! node_start 0 || ! node_start 1; then
	abort_setup "the daemons did not start"
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

warm || abort_setup "warm-up transfers failed: $WHY; node 0 log: $(logtail 0) node 1 log: $(logtail 1)"
ok "setup: both daemons up, 4 KiB read each way ($SEEN)"
take_baseline || abort_setup "xferctl stats failed"

# ---------------------------------------------------------------------------------------------
# The four operations, byte-exact. 4 KiB and 1 MiB (+1: a tail that fits no page or segment)
# both ways round; 32 MiB one way round for each kind.

# metrics_match N READ_BYTES WRITE_BYTES: node N's /metrics passes promtool and shows the RDMA
# byte counters `xferctl devices` showed (nothing moves in between).
metrics_match() {
	local n=$1 f=$D/m$1.prom mr mw
	if ! command -v curl >/dev/null || ! command -v promtool >/dev/null; then
		skip "node $n metrics" "curl or promtool missing (Debian packages curl, prometheus)"
		return
	fi
	metrics_current "http://${IP[$n]}:$METRICS_PORT/metrics" "$f"
	mr=$(awk -v d="xferd_rdma_read_bytes_total{device=\"${DEV[$n]}\"}" '$1 == d { print $2 }' "$f")
	mw=$(awk -v d="xferd_rdma_write_bytes_total{device=\"${DEV[$n]}\"}" '$1 == d { print $2 }' "$f")
	if promtool check metrics <"$f" >/dev/null 2>&1 && [ "$mr" = "$2" ] && [ "$mw" = "$3" ]; then
		ok "node $n /metrics: promtool clean, ${DEV[$n]} read/write bytes as xferctl devices"
	else
		fail "node $n /metrics" "read '$mr' vs '$2', write '$mw' vs '$3'; $(promtool check metrics <"$f" 2>&1 | head -n 2)"
	fi
}

if want sizes; then
	sizes_t0=$SECONDS
	check_sizes $((2 * MIB)) 4096 $MIB $((MIB + 1)) $((32 * MIB))
	note "sizes took $((SECONDS - sizes_t0)) s"

	# The data really went by RDMA: the devices counted READ and WRITE bytes, in requests of at
	# most the node's rdma_request_size each, and the connection sets say rdma. (Reads pull with
	# RDMA READ, writes push with RDMA WRITE, both ways round above.)
	for n in 0 1; do
		if [ "$TRANSPORT" = rdma ]; then
			j=$(ctl "$n" --json devices 2>&1)
			rb=$(jfield "$j" rdma_read_bytes) wb=$(jfield "$j" rdma_write_bytes) ce=$(jfield "$j" completion_errors)
			rn=$(jfield "$j" rdma_reads) wn=$(jfield "$j" rdma_writes)
			if [ "${rb:-0}" -ge $MIB ] && [ "${wb:-0}" -ge $MIB ] && [ "${ce:-1}" = 0 ] &&
				[ $((${rn:-0} * REQUEST[n])) -ge "$rb" ] && [ $((${wn:-0} * REQUEST[n])) -ge "$wb" ]; then
				ok "node $n ${DEV[$n]} counters: $rb bytes by $rn RDMA READs, $wb by $wn RDMA WRITEs (<= ${REQUEST[$n]} B each), 0 completion errors"
			else
				fail "node $n ${DEV[$n]} counters" "rdma_reads '$rn' rdma_read_bytes '$rb' rdma_writes '$wn' rdma_write_bytes '$wb' completion_errors '$ce' (requests at most ${REQUEST[$n]} B): $j"
			fi
			metrics_match "$n" "$rb" "$wb"
		fi
		j=$(ctl "$n" --json peers 2>&1)
		# Over RDMA a set is a control queue pair and a data one (PROTOCOL.md §10.5).
		if [ "$TRANSPORT" = rdma ] && ! [[ $j =~ \"connections\":(2|4), ]]; then
			fail "node $n's peer listing: a control and a data connection" "$j"
		elif [[ $j == *\"transport\":\"$TRANSPORT\"* && $j == *\"state\":\"connected\"* ]]; then
			ok "node $n's peer listing: connected, transport $TRANSPORT$([ "$TRANSPORT" = rdma ] && echo ", a control and a data connection")"
		else
			fail "node $n's peer listing: connected, transport $TRANSPORT" "$j"
		fi
		# TCP's numbers (PROTOCOL.md §7, "conns") only where the set is TCP: none to misread.
		t=$(ctl "$n" peers --tcp 2>&1)
		if [ "$TRANSPORT" = rdma ] && [[ $j != *\"conns\"* && $j != *\"tcp\"* && $t == "no TCP connections" ]]; then
			ok "node $n's peer listing over RDMA has no TCP connections"
		elif [ "$TRANSPORT" = tcp ] && [[ $j == *\"conns\":\[\{* && $t == *" estab "* ]]; then
			ok "node $n's peer listing over TCP shows its connections' TCP"
		else
			fail "node $n's peer listing: TCP connections only over TCP" "$t / $j"
		fi
	done
	check_baseline "sizes"
fi

# Registrations: while an operation holds a region, `xferctl regions` shows its keys per device.
if [ "$TRANSPORT" = rdma ] && want regions; then
	src=$(mkdata size.4096 4096)
	# stdin goes through a memfd, which is registered with the device (a file is not: below)
	"$BUILD/xferctl" --socket "$(node_sock 0)" readable - <"$src" >"$DATA/r.out" 2>"$DATA/r.err" &
	rp=$!
	if wait_line "$DATA/r.out" 60 >/dev/null; then
		j=$(ctl 0 --json regions 2>&1)
		if [[ $j =~ \"devices\":\[\{\"device\":\"${DEV[0]}\",\"lkey\":[0-9]+,\"rkey\":[0-9]+\}\] ]]; then
			ok "node 0 lists the region's ${DEV[0]} lkey and rkey ($(jfield "$j" register_us) us to register)"
		else
			fail "node 0 lists the region's keys per device" "$j"
		fi
	else
		fail "node 0 lists the region's keys per device" "readable printed no metadata: $(lastline "$DATA/r.err")"
	fi
	kill9 "$rp"
	# A file region is never registered with a device: its bytes go through staging buffers.
	bg "$DATA/r.out" "$DATA/r.err" 0 readable "$src"
	rp=$BG
	if wait_line "$DATA/r.out" 60 >/dev/null; then
		j=$(ctl 0 --json regions 2>&1)
		if [[ $j == *\"kind\":\"file\"* && $j == *\"devices\":\[\]* ]]; then
			ok "node 0 lists xferctl's file region with no device keys (it moves through staging buffers)"
		else
			fail "node 0 lists the file region without device keys" "$j"
		fi
	else
		fail "node 0 lists the file region without device keys" "readable printed no metadata: $(lastline "$DATA/r.err")"
	fi
	kill9 "$rp"
	check_baseline "regions listing"
fi

# ---------------------------------------------------------------------------------------------
# relay PREFIX NAME RC OUTPUT: counts a test program's "ok - "/"FAIL - " lines as our own checks
# (named PREFIX: ...), passes its notes on, and fails NAME if it printed no result at all.
relay() {
	local l
	while IFS= read -r l; do
		case $l in
		"ok - "*) ok "$1: ${l#ok - }" ;;
		"FAIL - "*) fail "$1: ${l#FAIL - }" "see above" ;;
		*" passed, "*" failed"*) ;;
		*) echo "# ${l#\# }" ;;
		esac
	done <<<"$4"
	[[ $4 == *"ok - "* || $4 == *"FAIL - "* ]] || fail "$2" "exit $3, no result: $4"
}

# ---------------------------------------------------------------------------------------------
# Registrations too large to pin on the event loop are made (and dropped) on a worker, and the
# reply waits for them (tests/rdma/rdma_reg.c): where each was made, bytes moved at once, a
# deregistration right after, clients that die mid-registration leave nothing.

if want registration; then
	if [ -x "$BUILD/tests/rdma_reg" ]; then
		out=$(timeout -k 2 300 "$BUILD/tests/rdma_reg" "$(node_sock 0)" "$(node_sock 1)" "$TRANSPORT" 2>&1)
		relay "registration" "rdma_reg" $? "$out"
		check_baseline "registration"
	else
		fail "registration" "$BUILD/tests/rdma_reg is not built (make test-rdma builds it)"
	fi
fi

# ---------------------------------------------------------------------------------------------
# Multi-descriptor operations (xferctl makes one descriptor per operation).

if want multi; then
	if [ -x "$BUILD/tests/rdma_sg" ]; then
		for p in "0 1" "1 0"; do
			set -- $p
			out=$(timeout -k 2 300 "$BUILD/tests/rdma_sg" "$(node_sock "$1")" "$(node_sock "$2")" "$TRANSPORT" 2>&1)
			relay "passive node $1, active node $2" "rdma_sg passive $1 active $2" $? "$out"
		done
		check_baseline "multi-descriptor"
	else
		fail "multi-descriptor operations" "$BUILD/tests/rdma_sg is not built (make test-rdma builds it)"
	fi
fi

# ---------------------------------------------------------------------------------------------
# File regions over RDMA (staging buffers, PROTOCOL.md §10.5.1): tests/rdma/rdma_files.c
# (file <-> memory and file <-> file both ways and with the file on either side, unaligned, 1 B
# to 3 MiB + 5 and one FILES_BIG read; truncated sources: EIO; full targets on a 1 MiB tmpfs:
# ENOSPC; staging buffers back in their pools), then xferctl's own target on a full tmpfs: the
# partial file is removed. (The sizes, concurrency and failure groups move files too: xferctl
# registers them itself.)

# idle_threads PID: how many threads of PID run at SCHED_IDLE (policy 5, /proc stat field 41).
idle_threads() {
	local f st n=0
	for f in /proc/"$1"/task/*/stat; do
		read -r st <"$f" 2>/dev/null || continue
		st=${st##*) } # (the name may hold spaces and parentheses)
		# shellcheck disable=SC2086 # split on purpose
		set -- $st
		[ "${39:-}" = 5 ] && n=$((n + 1))
	done
	echo "$n"
}

if [ "$TRANSPORT" = rdma ] && want files; then
	files_t0=$SECONDS
	# The staging copies have a lane of their own, at SCHED_IDLE (daemon/local.c): the wire's
	# work (rdma_rxe here, the event loop everywhere) goes first.
	for n in 0 1; do
		k=$(idle_threads "$(node_pid "$n")")
		if [ "$k" = 2 ]; then
			ok "node $n: the staging lane's 2 copy workers run at SCHED_IDLE"
		else
			fail "node $n: staging lane at SCHED_IDLE" "$k threads at SCHED_IDLE, expected 2"
		fi
	done
	small=$D/small
	mkdir -p "$small"
	if mount -t tmpfs -o size=1m xferd-small "$small" 2>/dev/null; then
		out=$(timeout -k 2 900 "$BUILD/tests/rdma_files" "$(node_sock 0)" "$(node_sock 1)" \
			"$DATA" "$small" "$FILES_BIG" 2>&1)
		relay "files" "rdma_files" $? "$out"
		src=$(mkdata enospc $((3 * MIB)))
		bg "$DATA/e.out" "$DATA/e.err" 0 writable $((3 * MIB)) "$small/out"
		ep=$BG
		if emeta=$(wait_line "$DATA/e.out" 60); then
			rc=0
			ctl 1 write "$emeta" "$src" >/dev/null 2>"$DATA/e.a.err" || rc=$?
			prc=0
			wait_bg "$ep" 60 || prc=$?
			left=$(ls -A "$small")
			if [ "$rc" != 0 ] && [ "$prc" != 0 ] && [ -z "$left" ] && grep -q ENOSPC "$DATA/e.err"; then
				ok "xferctl writable into a full tmpfs: ENOSPC ($(lastline "$DATA/e.err")), partial file removed"
			else
				fail "xferctl writable into a full tmpfs" "write exit $rc, writable exit $prc ($(lastline "$DATA/e.err")), left: '$left'"
			fi
		else
			kill9 "$ep"
			fail "xferctl writable into a full tmpfs" "no metadata: $(lastline "$DATA/e.err")"
		fi
		umount "$small"
	else
		skip "file regions over RDMA" "cannot mount a small tmpfs (not root?)"
	fi
	rm -f "$DATA"/enospc* "$DATA"/e.*
	note "files took $((SECONDS - files_t0)) s"
	check_baseline "files"
fi

# ---------------------------------------------------------------------------------------------
# O_DIRECT file regions over RDMA: an ext4 image on a loop device (scripts/rxe-vm.sh loads loop
# and ext4; the guest's tmpfs does no O_DIRECT in 6.1), then rdma_files -D (node 0 passive, node
# 1 active: every pairing, unaligned descriptors inside aligned O_DIRECT regions) and xferctl
# --direct the other way round (node 1 owns, node 0 is active; the body O_DIRECT, the unaligned
# tail through the page cache), O_DIRECT file to O_DIRECT file.

# direct_xfer KIND OWNER ACTIVE SRC DST: KIND as in xfer(), every file side opened --direct;
# sets WHY (empty on success).
direct_xfer() {
	local kind=$1 o=$2 a=$3 src=$4 dst=$5 w arc=0 prc=0
	next_prefix w d
	WHY=''
	rm -f "$dst"
	if [ "$kind" = read ]; then
		bg "$w.p.out" "$w.p.err" "$o" --direct readable "$src"
	else
		bg "$w.p.out" "$w.p.err" "$o" --direct writable "$(stat -c %s "$src")" "$dst"
	fi
	PP=$BG
	if ! META=$(wait_line "$w.p.out" "$WAIT"); then
		kill9 "$PP"
		WHY="$(passive_of "$kind") --direct printed no metadata: $(lastline "$w.p.err")"
		return 1
	fi
	if [ "$kind" = read ]; then
		ctl "$a" --direct read - "$dst" <<<"$META" >"$w.a.out" 2>"$w.a.err" || arc=$?
	else
		ctl "$a" --direct write - "$src" <<<"$META" >"$w.a.out" 2>"$w.a.err" || arc=$?
	fi
	wait_bg "$PP" "$WAIT" || prc=$?
	xfer_outcome "$kind" "$src" "$dst" "$w" "$arc" "$prc"
}

if [ "$TRANSPORT" = rdma ] && want direct; then
	direct_t0=$SECONDS
	dio=$D/dio
	mkdir -p "$dio"
	if truncate -s 48M "$D/dio.img" && mkfs.ext4 -q -F "$D/dio.img" >"$D/dio.err" 2>&1 &&
		mount -o loop "$D/dio.img" "$dio" 2>>"$D/dio.err" &&
		dd if=/dev/zero of="$dio/probe" bs=4096 count=1 oflag=direct status=none 2>>"$D/dio.err"; then
		rm -f "$dio/probe"
		out=$(timeout -k 2 600 "$BUILD/tests/rdma_files" -D "$dio" "$(node_sock 0)" "$(node_sock 1)" 2>&1)
		relay "O_DIRECT files" "rdma_files -D" $? "$out"
		head -c $((3 * MIB + 5)) /dev/urandom >"$dio/src"
		for kind in read write; do
			name="xferctl --direct $(xfer_name "$kind" 1 0): $((3 * MIB + 5)) B, O_DIRECT file -> O_DIRECT file"
			if direct_xfer "$kind" 1 0 "$dio/src" "$dio/out"; then
				ok "$name identical"
			else
				fail "$name" "$WHY"
			fi
		done
		rm -f "$dio/src" "$dio/out"
		umount "$dio"
	else
		fail "O_DIRECT files over RDMA" "no ext4 image with O_DIRECT could be loop-mounted (scripts/rxe-vm.sh loads loop and ext4): $(tr '\n' ' ' <"$D/dio.err")"
	fi
	rm -f "$D/dio.img"
	note "direct took $((SECONDS - direct_t0)) s"
	check_baseline "O_DIRECT files"
fi

# ---------------------------------------------------------------------------------------------
# The bench client (scripts/bench-rdma.sh): 1 s per kind and size, 2 in flight, its margins on.

if want bench; then
	if [ -x "$BUILD/tests/rdma_bench" ]; then
		out=$(timeout -k 2 120 "$BUILD/tests/rdma_bench" -d 2 -m 0.25 "$(node_sock 1)" \
			"$(node_sock 0)" 1 both 65536 1048576 2>&1)
		rc=$?
		lines=$(grep -c "^xferd .* MiB/s [0-9.]* transport $TRANSPORT\$" <<<"$out")
		if [ "$rc" = 0 ] && [ "$lines" = 4 ]; then
			ok "rdma_bench: read and write at 64 KiB and 1 MiB, bytes checked, transport $TRANSPORT"
		else
			fail "rdma_bench" "exit $rc, $lines of 4 result lines over $TRANSPORT: $(tail -n 4 <<<"$out" | tr '\n' ' ')"
		fi
		check_baseline "bench client"
	else
		fail "bench client" "$BUILD/tests/rdma_bench is not built (make test-rdma builds it)"
	fi
fi

# ---------------------------------------------------------------------------------------------
# A hostile peer against node 1: what the rkeys of CLAIM_OK reach, and what they do not.

if [ "$TRANSPORT" = rdma ] && want hostile; then
	if [ -x "$BUILD/tests/rdma_rogue" ]; then
		out=$(ROGUE_MAX_PENDING=$MAX_PENDING timeout -k 2 300 "$BUILD/tests/rdma_rogue" "$(node_sock 1)" "${IP[1]}:$PORT" "${IP[0]}" "$KEY" 2>&1)
		relay "hostile peer" "rdma_rogue" $? "$out"
		check_baseline "hostile peer"
		# The daemons still serve each other after the rogue's refused handshakes (bytes checked).
		if warm; then
			ok "after the hostile peer, both directions transfer ($SEEN)"
		else
			fail "transfers after the hostile peer" "$WHY; node 1 log: $(logtail 1)"
		fi
	else
		fail "hostile peer" "$BUILD/tests/rdma_rogue is not built (make test-rdma builds it)"
	fi
fi

# ---------------------------------------------------------------------------------------------
# A fake window owner that node 1 opens a window of, sending WNOTIFY_ACKs no owner may send.

if [ "$TRANSPORT" = rdma ] && want fakeowner; then
	if [ -x "$BUILD/tests/rdma_rogue" ]; then
		out=$(ROGUE_ONLY=o ROGUE_FAKE_OWNER="${IP[0]}:$FAKE_PORT" timeout -k 2 300 \
			"$BUILD/tests/rdma_rogue" "$(node_sock 1)" "${IP[1]}:$PORT" "${IP[0]}" "$KEY" 2>&1)
		relay "fake window owner" "rdma_rogue (fake owner)" $? "$out"
		check_baseline "fake window owner"
		if warm; then
			ok "after the fake window owner, both directions transfer ($SEEN)"
		else
			fail "transfers after the fake window owner" "$WHY; node 1 log: $(logtail 1)"
		fi
	else
		fail "fake window owner" "$BUILD/tests/rdma_rogue is not built (make test-rdma builds it)"
	fi
fi

# ---------------------------------------------------------------------------------------------
# Rolling the cluster key over RDMA (README, "Rolling the cluster key"; the TCP walk, node by
# node, is tests/test_peer_keys.sh). Both nodes read the one key file: a new key added second,
# then alone, each followed by SIGHUP; the sets that proved the old key close on the reload and
# the next transfers make new ones under the new key, over RDMA. Then the old key alone again.

# set_keys FILE...: the key file holds these keys, one per line, mode 0600.
set_keys() { (umask 077 && for k in "$@"; do cat "$k"; echo; done >"$KEY.new" && mv "$KEY.new" "$KEY"); }
# key_id FILE: what a daemon names the key of FILE (the first 4 bytes of its SHA-256).
key_id() { /usr/bin/python3 -c 'import hashlib, sys; print(hashlib.sha256(bytes.fromhex(open(sys.argv[1]).read())).hexdigest()[:8])' "$1"; }
# reload_keys IDS N...: SIGHUP to each node N, then waits until its stats list the keys IDS
# (space-separated, in order); 1 if one does not within 5 s.
reload_keys() {
	local ids=$1 n i
	shift
	for n in "$@"; do
		kill -HUP "$(node_pid "$n")"
		for ((i = 0; i < 100; i++)); do
			[ "$(ctl "$n" --json status 2>&1 | grep -o '"cluster_keys":\[[^]]*\]' |
				grep -o '"id":"[0-9a-f]*"' | cut -d'"' -f4 | tr '\n' ' ')" = "$ids " ] && break
			sleep 0.05
		done
		[ "$i" -lt 100 ] || return 1
	done
}
# set_keys_of N: the keys node N lists for its live sets, one "[...]" per set.
set_keys_of() { ctl "$1" --json peers 2>&1 | grep -o '"keys":\[[^]]*\]' | tr '\n' ' '; }

if [ "$TRANSPORT" = rdma ] && want keys; then
	cp "$KEY" "$D/old.key"
	(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$D/new.key")
	OLD=$(key_id "$D/old.key")
	NEW=$(key_id "$D/new.key")
	warm
	set_keys "$D/old.key" "$D/new.key"
	if reload_keys "$OLD $NEW" 0 1 && [[ $(set_keys_of 0) == *"\"$OLD\""* ]] && warm; then
		ok "keys: the new key added second on both nodes; the sets made under the old key stay and transfer ($SEEN)"
	else
		fail "keys: the new key added second" "${WHY:-}; node 0 sets' keys: $(set_keys_of 0); node 0 log: $(logtail 0)"
	fi
	set_keys "$D/new.key"
	if reload_keys "$NEW" 0 1 && warm && [[ $(set_keys_of 0) != *"$OLD"* ]] &&
		[[ $(set_keys_of 0) == *"\"$NEW\""* ]]; then
		ok "keys: the old key dropped; the sets that proved it closed, new ones proved $NEW and transfer ($SEEN)"
	else
		fail "keys: the old key dropped" "${WHY:-}; node 0 sets' keys: $(set_keys_of 0); node 0 log: $(logtail 0)"
	fi
	set_keys "$D/old.key" # (what the later groups' daemons start with)
	if reload_keys "$OLD" 0 1 && warm; then
		ok "keys: back to the old key alone ($SEEN)"
	else
		fail "keys: back to the old key alone" "${WHY:-}; node 0 log: $(logtail 0)"
	fi
	check_baseline "keys"
fi

# ---------------------------------------------------------------------------------------------
# Windows (PROTOCOL.md §5.1): tests/test_windows.c against these two daemons, node 0 owning,
# node 1 opening: gets and puts at many offsets, notify tags once and in order, refusals,
# revocation with 32 puts in flight, an opener and an owner client killed mid-stream, a batch
# of 1000; every cross-node op must report this transport (the three-node case is skipped).

# Over RDMA the owner binds one memory window per opener at window.open (§10.6), not one per
# get or put: its windows_bound grows by far less than the ~2,500 cross-node gets and puts of
# test_windows (the batch alone is 2,000), and windows_open is back to 0 once every opener let go.
bound_now() { jfield "$(ctl 0 --json devices 2>&1)" windows_bound; }
# per_op_now: node 1's chains_posted, completions and cq_events ("C P E").
per_op_now() {
	local j
	j=$(ctl 1 --json devices 2>&1)
	echo "$(jfield "$j" chains_posted) $(jfield "$j" completions) $(jfield "$j" cq_events)"
}

# The per-op costs list.devices counts: xferbench_net win (16 gets, then 16 puts, of 64 KiB in
# flight in batches of 8, 1 s each) on node 1, the opener; each op needs at least one posted
# chain's share and a completion's, and the loop wakes for some of them.
check_per_op() {
	local c0 p0 e0 c1 p1 e1 l ops
	read -r c0 p0 e0 <<<"$(per_op_now)"
	l=$(timeout -k 2 120 "$BUILD/xferbench_net" win --passive "$(node_sock 0)" --active "$(node_sock 1)" \
		--sizes 64K --depths 16 --batch 8 --seconds 1 --json 2>&1)
	ops=$(grep -o '"ops":[0-9]*' <<<"$l" | awk -F: '{ s += $2 } END { print s + 0 }')
	read -r c1 p1 e1 <<<"$(per_op_now)"
	if [ -n "$c0" ] && [ -n "$c1" ] && [ -n "$e1" ] && [ "$ops" -ge 64 ] && [ $((c1 - c0)) -gt 0 ] &&
		[ $((p1 - p0)) -gt 0 ] && [ $((e1 - e0)) -gt 0 ] && [ $((e1 - e0)) -le $((p1 - p0)) ]; then
		ok "windows: node 1 counted $((c1 - c0)) chains, $((p1 - p0)) completions, $((e1 - e0)) CQ wake-ups for $ops gets and puts (batches of 8)"
	else
		fail "windows: list.devices counts chains, completions and CQ wake-ups" "$ops ops, chains_posted $c0 -> $c1, completions $p0 -> $p1, cq_events $e0 -> $e1: $l"
	fi
}

# staging_back NODE: waits up to 20 s until none of NODE's staging buffers is in use (a copy or
# a request may still hold one for a moment after its transfer ended); prints `devices` as it
# was last seen and returns non-zero if some still are.
staging_back() {
	local i j
	for ((i = 0; i < 200; i++)); do
		j=$(ctl "$1" --json devices 2>&1)
		[[ $j == *\"in_use\":0,* ]] && break
		sleep 0.1
	done
	echo "$j"
	[[ $j == *\"in_use\":0,* ]]
}
if want windows; then
	[ "$TRANSPORT" = rdma ] && wb0=$(bound_now)
	out=$(XFER_WINDOWS_NODES="$(node_sock 0),$(node_sock 1)" XFER_WINDOWS_TRANSPORT="$TRANSPORT" \
		timeout -k 2 900 "$BUILD/tests/test_windows" 2>&1)
	relay "windows" "test_windows" $? "$out"
	if [ "$TRANSPORT" = rdma ]; then
		end=$((SECONDS + WAIT))
		while :; do # (the openers' releases may still be on their way)
			j=$(ctl 0 --json devices 2>&1)
			wb1=$(jfield "$j" windows_bound) wo=$(jfield "$j" windows_open)
			[ "$wo" = 0 ] || [ $SECONDS -ge $end ] && break
			sleep $POLL
		done
		if [ -n "$wb0" ] && [ -n "$wb1" ] && [ $((wb1 - wb0)) -lt 200 ] && [ "$wo" = 0 ]; then
			ok "windows: node 0 bound $((wb1 - wb0)) memory windows for every get and put of test_windows (one per opener), 0 left open"
		else
			fail "windows: one memory window per opener" "windows_bound $wb0 -> $wb1, windows_open '$wo': $j"
		fi
		check_per_op
	fi
	check_baseline "windows"
fi

# ---------------------------------------------------------------------------------------------
# Concurrency: 8 readable/read pairs each direction and 4 writable/write pairs each direction,
# all 24 at once. Passive clients are stopped after their metadata so that the owners'
# listings show every passive op's final state and transport.

if want concurrency; then
	k=0 good=1
	for o in 0 1; do
		for i in $(seq 0 11); do
			s=$((256 * 1024 + k * 4097))
			head -c "$s" /dev/urandom >"$DATA/c$k.src"
			kind="read"
			[ "$i" -lt 8 ] || kind="write"
			offer "$kind" "$o" "$DATA/c$k.src" "$DATA/c$k.dst" "$DATA/c$k.p"
			CP[$k]=$PP CO[$k]=$o CK[$k]=$kind
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
		conc_t0=$(now_ms)
		for ((k = 0; k < 24; k++)); do
			claim "${CK[$k]}" $((1 - CO[k])) "$(firstline "$DATA/c$k.p.out")" "$DATA/c$k.src" "$DATA/c$k.dst" "$DATA/c$k.a"
			CA[$k]=$AP
		done
		bad=
		for ((k = 0; k < 24; k++)); do
			rc=0
			wait_bg "${CA[$k]}" $T || rc=$?
			[ "$rc" -eq 0 ] || bad+="${CK[$k]} $k on node $((1 - CO[k])) exited $rc: $(lastline "$DATA/c$k.a.err"); "
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
			[ "$rc" -eq 0 ] || bad+="passive $k on node ${CO[$k]} exited $rc: $(lastline "$DATA/c$k.p.err"); "
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

if want refusals; then
	src=$(mkdata ref 65536)
	other=$(mkdata ref2 65537)
	offer read 0 "$src" "" "$DATA/rr"
	rp=$PP
	offer write 0 "$src" "$DATA/ref.writable" "$DATA/rw"
	wp=$PP
	if rmeta=$(wait_line "$DATA/rr.out" 60) && wmeta=$(wait_line "$DATA/rw.out" 60); then
		refuse_mismatches "$rmeta" "$wmeta" "$src" "$other"
		l=$(ctl 0 --json ops 2>&1)
		if [ "$(jfield "$(op_of "$l" readable)" state)" = INITIALIZED ] &&
			[ "$(jfield "$(op_of "$l" writable)" state)" = INITIALIZED ]; then
			ok "the refused claims left both passive ops INITIALIZED"
		else
			fail "the refused claims left both passive ops INITIALIZED" "$l"
		fi
		claim_after_refusals write "$wmeta" "$src" "$DATA/ref.writable" "$DATA/ref.err" "$wp" "$DATA/rw.err"
		claim_after_refusals read "$rmeta" "$src" "$DATA/ref.o1" "$DATA/ref.err" "$rp" "$DATA/rr.err"
	else
		kill9 "$rp"
		kill9 "$wp"
		fail "refusals" "readable/writable printed no metadata: $(lastline "$DATA/rr.err") $(lastline "$DATA/rw.err")"
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
			fail "the first read completes" "exit $rc: $(lastline "$DATA/ra.err")"
		fi
		refused "read of a readable that already completed (node 1)" 1 read "$rmeta" "$DATA/ref.o2" "EALREADY|ECANCELED"
		kill -CONT "$rp"
		wait_bg "$rp" 60 || fail "readable of the EALREADY case" "exit $?: $(lastline "$DATA/rr.err")"
	else
		kill9 "$rp"
		fail "EALREADY" "readable printed no metadata: $(lastline "$DATA/rr.err")"
	fi

	# The owner restarts between making metadata and the read: ESTALE.
	bg "$DATA/rr.out" "$DATA/rr.err" 0 readable "$src"
	rp=$BG
	if rmeta=$(wait_line "$DATA/rr.out" 60); then
		if stop 0; then ok "node 0's xferd exited 0 on SIGTERM"; else fail "node 0's xferd exits 0 on SIGTERM" "$(logtail 0)"; fi
		told_of_shutdown "$rp" "$DATA/rr.err" 20
		if node_start 0; then
			refused "read of metadata from before node 0 restarted (node 1)" 1 read "$rmeta" "$DATA/ref.o1" ESTALE
		else
			fail "node 0 starts again" "$(logtail 0)"
		fi
	else
		kill9 "$rp"
		fail "ESTALE" "readable printed no metadata: $(lastline "$DATA/rr.err")"
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

# start_pair KIND: passive on node 0, active on node 1 (lib.sh's offer_pair, claim_pair); waits
# until node 1 lists it under way. Sets PP, AP, FW (file prefix), MID; or WHY.
start_pair() {
	local kind=$1 l op b
	offer_pair "$kind" || return 1
	claim_pair "$kind"
	while alive "$AP"; do
		l=$(ctl 1 --json ops 2>/dev/null) && op=$(op_of "$l" "$kind") || continue
		b=$(jfield "$op" bytes)
		if [ "$(jfield "$op" state)" = IN_PROGRESS ] && [ "${b:-0}" -gt 0 ] && [ "$b" -lt "$FAIL_SIZE" ]; then
			MID="$b of $FAIL_SIZE bytes moved"
			return 0
		fi
	done
	WHY="the transfer was never seen under way on node 1 (last listing: ${op:-none}; active exit: $(lastline "$FW.a.err"))"
	return 1
}

if want failures; then
	for kind in read write; do
		for victim in 1 0; do
			[ "$victim" = 0 ] && role=owner || role=active
			name="$role daemon (node $victim) SIGKILL mid-$kind"
			if start_pair "$kind"; then
				note "$name: $MID"
				t0=$(now_ms)
				crash "$victim"
				survivor_ends "$name" "$kind" "$victim" $BOUND "ECONNRESET|ETIMEDOUT" "$t0"
			else
				fail "$name" "$WHY"
			fi
			end_pair
			after_failure "$name" "$((1 - victim))"
		done
	done

	for victim in reader owner-read writer owner-write; do
		client_case "$victim"
		if start_pair "$KIND"; then
			note "$NAME: $MID"
			pf0=$(peer_failures)
			kill_client "$victim" $BOUND
			# One client's death ends its own transfer only: the daemons' connection set (shared by
			# every client) must survive it.
			sleep 1
			if [ "$(peer_failures)" = "$pf0" ]; then
				ok "$NAME: the connection set between the daemons survived"
			else
				fail "$NAME: the connection set between the daemons survived" "$(new_peer_failures "$pf0")"
			fi
		else
			fail "$NAME" "$WHY"
		fi
		end_pair
		after_failure "$NAME"
	done
	rm -f "$DATA"/f*
	# Every transfer above moved files (xferctl registers them): whatever was killed, the
	# staging buffers of the daemons that lived through it are all back in their pools.
	if [ "$TRANSPORT" = rdma ]; then
		for n in 0 1; do
			if j=$(staging_back "$n"); then
				ok "node $n: after the kills, every staging buffer is back in its pool ($(jfield "$j" waits) waits)"
			else
				fail "node $n: staging buffers back after the kills" "$j"
			fi
		done
	fi
fi

# ---------------------------------------------------------------------------------------------
# A staging pool that cannot be made (node 1 restarted with 1024 buffers of 64 MiB: 64 GiB, more
# than the guest has) is made on a worker, and its failure ends the transfer that waited for it
# ERRORED with the cause; the daemon goes on serving. Node 1 is then restarted as it was.

if [ "$TRANSPORT" = rdma ] && want staging; then
	name="staging pool that cannot be made: the file read ends with the cause, the daemon lives"
	stop 1
	write_config 1
	sed -i 's/"rdma_staging_buffers": [0-9]*/"rdma_staging_buffers": 1024/; s/"rdma_staging_size": [0-9]*/"rdma_staging_size": 67108864/' "$D/n1.json"
	if node_start 1; then
		src=$(mkdata size.1048576 1048576)
		rm -f "$DATA/sf.meta"
		bg "$DATA/sf.p.out" "$DATA/sf.p.err" 1 readable --meta-file "$DATA/sf.meta" "$src"
		pp=$BG
		for ((i = 0; i < 600; i++)); do
			[ -s "$DATA/sf.meta" ] && break
			sleep 0.1
		done
		bg "$DATA/sf.a.out" "$DATA/sf.a.err" 0 read @"$DATA/sf.meta" "$DATA/sf.copy"
		arc=0
		wait_bg "$BG" || arc=$?
		kill9 "$pp"
		why=$(lastline "$DATA/sf.a.err")
		if [ "$arc" != 0 ] && [[ $why == *"staging buffers"* ]] && [ ! -e "$DATA/sf.copy" ] &&
			ctl 1 status >/dev/null 2>&1; then
			ok "$name ($why)"
		else
			fail "$name" "read exit $arc: $why; node 1 log: $(logtail 1)"
		fi
	else
		fail "$name" "node 1 did not start with the large pool configured"
	fi
	stop 1
	write_config 1
	node_start 1 || abort_setup "node 1 did not restart"
fi

# ---------------------------------------------------------------------------------------------
# Posts that fail, and the event loop's own post path. Both daemons are restarted with the fault
# injector preloaded (tests/preload/postfail.c: an RDMA WRITE or READ post fails with ENOMEM once
# the test makes $D/pfN.write or .read) and rdma_post_thread "never" (the loop posts everything,
# as for a NIC), then "auto" (Soft-RoCE: RDMA WRITEs go through the device's poster thread,
# daemon/rdma_post.c). Under "never", a subset of the sizes group and of test_windows runs
# first, bytes checked. Under each, node 1's post fails mid-transfer: a 32 MiB xferctl write
# (from a file: through the staging buffers) and rdma_postfail's 8 MiB window put and get. The
# ops end ERRORED on both sides with the cause (the failed post and the thread that made it), no
# hang, the set is failed and a new one carries the next transfers (bytes checked), and the
# daemons are back to their baseline, staging buffers included.

# restart_posting SETTING: both daemons restarted with the injector and rdma_post_thread
# SETTING; their devices must list the poster thread that SETTING means on Soft-RoCE (a device
# made in software: one under auto). New baseline.
restart_posting() {
	local n j want=true
	[ "$1" = never ] && want=false
	stop 0
	stop 1
	POST_THREAD=$1 PRELOAD=$BUILD/tests/postfail.so
	[[ $PRELOAD == /* ]] || PRELOAD=$ROOT/$PRELOAD
	for n in 0 1; do
		write_config "$n"
		rm -f "$D/pf$n".*
		node_start "$n" || abort_setup "node $n did not start with rdma_post_thread $1 and the injector"
	done
	for n in 0 1; do
		j=$(ctl "$n" --json devices 2>&1)
		if [ "$(jfield "$j" poster_thread)" = "$want" ]; then
			ok "rdma_post_thread $1: node $n's ${DEV[$n]} lists poster_thread $want"
		else
			fail "rdma_post_thread $1: node $n's ${DEV[$n]} lists poster_thread $want" "$j"
		fi
	done
	warm || abort_setup "warm-up under rdma_post_thread $1 failed: $WHY"
	take_baseline >/dev/null
}

# postfail_write WHERE: node 1 writes 32 MiB (a file) into a writable on node 0; its daemon's
# post of RDMA WRITEs fails after 200 of them went through (~3 MiB: 16 KiB each), made by WHERE
# ("poster thread" or "event loop"). Both clients end ERRORED within 20 s (a failure the poster
# thread does not report leaves the write hanging until its deadline), the writer's cause
# naming the post and WHERE; the writable saved nothing; node 1 failed the set.
postfail_write() {
	local where=$1 name="write of 32 MiB, node 1's RDMA WRITE post failing ($1)" pf0 fired place t0
	place="on the event loop"
	[ "$where" = "poster thread" ] && place="on the device's poster thread"
	pf0=$(peer_failures)
	echo 200 >"$D/pf1.write"
	next_prefix FW f
	if ! xfer_begin write 0 "$PFSRC" "$FW.dst" "$FW.p"; then
		fail "$name" "$WHY"
		rm -f "$D/pf1.write"
		return
	fi
	t0=$(now_ms)
	claim write 1 "$META" "$PFSRC" "$FW.dst" "$FW.a"
	expect_end "$name: the write on node 1 ends ERRORED" "$AP" "$FW.a.err" 20 ERRORED ENOMEM "$t0"
	# (node 0 hears only that node 1 disconnected, as when a TCP set fails: PROTOCOL.md §10.4)
	expect_end "$name: the writable on node 0 ends ERRORED" "$PP" "$FW.p.err" 20 ERRORED ECONNRESET "$t0"
	fired=$(firstline "$D/pf1.write.fired")
	if [ "$fired" = "$where" ] && grep -q "ibv_post_send of RDMA WRITEs failed ($place)" "$FW.a.err"; then
		ok "$name: the cause names the post and the $where"
	else
		fail "$name: the cause names the post and the $where" "the injector failed a post of the '$fired'; the write said: $(lastline "$FW.a.err")"
	fi
	no_file "$name: the writable saved nothing" "$FW.dst"
	if [ "$(peer_failures)" != "$pf0" ]; then
		ok "$name: the connection set failed ($(new_peer_failures "$pf0"))"
	else
		fail "$name: the connection set failed" "no peer_fail in either log"
	fi
	end_pair
	rm -f "$D/pf1.write" "$D/pf1.write.fired" "$FW".*
}

# postfail_group WHERE: the failing posts (WRITEs made by WHERE) and what must hold after them.
postfail_group() {
	local where=$1 out n j i
	postfail_write "$where"
	out=$(timeout -k 2 300 "$BUILD/tests/rdma_postfail" "$(node_sock 0)" "$(node_sock 1)" \
		"$D/pf1" $((8 * MIB)) "$where" 2>&1)
	relay "window ops, node 1's posts failing" "rdma_postfail" $? "$out"
	# After a failed post, nothing more of its queue pair may reach the wire (a DONE behind the
	# lost WRITEs would complete the owner's op with their bytes missing): the injector saw
	# every later post find the queue pair in the error state.
	if [ -e "$D/pf1.violation" ]; then
		fail "failed posts ($where): nothing posted to a live queue pair after its failed post" "$(head -n 3 "$D/pf1.violation" | tr '\n' '|')"
	else
		ok "failed posts ($where): nothing posted to a live queue pair after its failed post"
	fi
	if warm; then
		ok "after the failed posts ($where), both directions transfer ($SEEN)"
	else
		fail "transfers after the failed posts ($where)" "$WHY; node 1 log: $(logtail 1)"
	fi
	check_baseline "failed posts ($where)"
	for n in 0 1; do
		j=$(staging_back "$n") || fail "failed posts ($where): node $n's staging buffers back in their pool" "$j"
	done
}

if [ "$TRANSPORT" = rdma ] && want loopposts; then
	loop_t0=$SECONDS
	restart_posting never
	check_sizes 0 $((MIB + 1)) $((8 * MIB))
	out=$(XFER_WINDOWS_NODES="$(node_sock 0),$(node_sock 1)" XFER_WINDOWS_TRANSPORT="$TRANSPORT" \
		timeout -k 2 300 "$BUILD/tests/test_windows" cross_get_put_many_offsets 2>&1)
	relay "rdma_post_thread never: windows" "test_windows cross_get_put_many_offsets" $? "$out"
	check_baseline "rdma_post_thread never"
	note "loopposts took $((SECONDS - loop_t0)) s"
fi

if [ "$TRANSPORT" = rdma ] && want postfail; then
	pf_t0=$SECONDS
	PFSRC=$(mkdata postfail $((32 * MIB)))
	[ "$POST_THREAD" = never ] || restart_posting never
	postfail_group "event loop"
	restart_posting auto
	postfail_group "poster thread"
	rm -f "$PFSRC"
	note "postfail took $((SECONDS - pf_t0)) s"
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
