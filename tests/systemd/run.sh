#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# tests/systemd/run.sh: xferd under a real systemd. Runs INSIDE the VM of `scripts/rxe-vm.sh -S`
# (`make test-systemd`): Debian's systemd is PID 1, two Soft-RoCE devices rxe0 (10.77.0.1) and
# rxe1 (10.77.0.2). What `make install DESTDIR=$BUILD/systemd-root PREFIX=/usr` staged on the
# host is copied into the guest's / (an overlay: nothing reaches the host) and used as installed:
#
#   node A: the installed xferd.socket + xferd.service as they are, reading the installed
#           config path /etc/xferd/xferd.conf (rdma on rxe0, listen 10.77.0.1:7700, cluster
#           key), no /etc/default/xferd
#   node B: xferd-b.socket + xferd-b.service, the installed units with the names, socket
#           directory and /etc/default file renamed (rdma on rxe1, 10.77.0.2:7700); its
#           XFERD_OPTS names another --config, which overrides the unit's
#
#   - systemd-sysusers makes the user xferd; the sockets start, the services do not
#   - a client (user alice, in group xferd) connecting starts the service (Type=notify:
#     "active" only once READY=1 came); the daemon runs as xferd with CAP_IPC_LOCK only
#     (effective, permitted, bounding), no_new_privs, seccomp, and still sees its rxe device
#   - files both ways between A and B over RDMA (transport rdma, require_rdma), bytes compared
#   - CAP_IPC_LOCK measured: under LimitMEMLOCK=64K node B registers 8 MiB with it, not without
#   - journald took the daemon's <N> prefixes as priorities (info and warning entries, no
#     literal "<6>" in a message)
#   - systemctl stop drains: a waiting client is told (ESHUTDOWN), the service exits 0, the
#     socket stays and the next client starts the service again
#   - systemctl restart keeps the socket (same inode, the socket unit untouched) and clients
#     get through; systemd-analyze security on the live unit <= 2.5
#   - WatchdogSec=30: the event loop pings; a daemon SIGSTOPped under WatchdogSec=5 (node B, a
#     drop-in) is killed by systemd and started again, and serves
#   - /etc/xferd/xferd.conf is the configuration: a key added there (metrics_listen) takes
#     effect after systemctl restart; systemctl reload (SIGHUP) applies a log_level change
#     (the journal names it, debug entries follow)
#
# Prints "ok - NAME" / "FAIL - NAME (why)" and a final "N passed, N failed". Every wait bounded.
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh
BUILD=${BUILD:-build}
STAGE=$ROOT/$BUILD/systemd-root
T=120    # seconds: "it ended at all" for one client
POLL=0.1 # seconds between polls
MIB=$((1024 * 1024))
SOCK_A=/run/xferd/xferd.sock
SOCK_B=/run/xferd-b/xferd.sock
UNITS=/usr/lib/systemd/system

[ "$(ps -o comm= -p 1)" = systemd ] || abort_setup "PID 1 is not systemd: run with scripts/rxe-vm.sh -S"
[ -d "$STAGE/usr/sbin" ] || abort_setup "$STAGE is not a staged install (make test-systemd makes it)"
[ -n "${RXE_DEV0:-}" ] && [ -n "${RXE_DEV1:-}" ] || abort_setup "no rxe devices in the environment"

D=$(mktemp -d /tmp/xfsd.XXXXXX) || exit 1
cleanup() { kill_children; }
trap cleanup EXIT

# actl SOCK ARGS...: xferctl as alice (unprivileged, in the group xferd) against SOCK, bounded.
actl()
{
	local s=$1
	shift
	timeout -k 2 "$T" setpriv --reuid=alice --regid=alice --init-groups -- xferctl --socket "$s" "$@"
}
# prop UNIT NAME: one property of UNIT.
prop() { systemctl show -P "$2" "$1"; }
# wait_state UNIT STATE [SECONDS]: until UNIT's ActiveState is STATE.
wait_state()
{
	local end=$((SECONDS + ${3:-30}))
	while [ "$(prop "$1" ActiveState)" != "$2" ]; do
		[ $SECONDS -lt "$end" ] || return 1
		sleep "$POLL"
	done
}
# journal UNIT: the unit's journal as "PRIORITY MESSAGE" lines.
journal()
{
	journalctl --no-pager -q -u "$1" -o json --output-fields=PRIORITY,MESSAGE 2>/dev/null |
		/usr/bin/python3 -c 'import json, sys
for l in sys.stdin:
    e = json.loads(l)
    m = e.get("MESSAGE", "")
    print(e.get("PRIORITY", "?"), m if isinstance(m, str) else "(binary)")'
}
# why_unit UNIT: state and the last journal lines, for a FAIL reason.
why_unit()
{
	echo "$1: $(prop "$1" ActiveState)/$(prop "$1" SubState) result $(prop "$1" Result);" \
		"$(journalctl --no-pager -q -u "$1" -n 4 -o cat 2>/dev/null | tr '\n' '|')"
}

# ---------------------------------------------------------------------------------------------
# Install what make install staged, the user, the configs, node B's units.

note "--- install (at ${SECONDS} s)"
cp -a "$STAGE/." / || abort_setup "cannot copy $STAGE into /"
systemd-sysusers >/dev/null 2>&1
if id xferd >/dev/null 2>&1 && [ "$(id -gn xferd)" = xferd ]; then
	ok "systemd-sysusers created the user and group xferd from the installed sysusers file"
else
	abort_setup "no user xferd after systemd-sysusers"
fi
useradd --no-create-home --groups xferd alice || abort_setup "useradd alice"
chown alice "$D"

mkdir -p /etc/xferd
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >/etc/xferd/peer.key)
chown xferd:xferd /etc/xferd/peer.key
# node_conf NODE-ID DEVICE ADDR SOCKET: a node's config. ack timeout 19 (~2 s): TCG is slow.
node_conf()
{
	printf '{"node_id": "%s", "socket": "%s", "log_level": "info", "transport": "rdma",
  "require_rdma": true, "rdma_devices": ["%s"], "rdma_ack_timeout": 19,
  "listen": ["%s:7700"], "peer_key_file": "/etc/xferd/peer.key", "peer_allow": ["10.77.0.0/24"]}\n' \
		"$1" "$4" "$2" "$3"
}
if [ -f /etc/xferd/xferd.conf ] && cmp -s /etc/xferd/xferd.conf /etc/xferd/xferd.conf.example &&
	grep -q -- "--config /etc/xferd/xferd.conf " "$UNITS/xferd.service"; then
	ok "make install put the example at /etc/xferd/xferd.conf, which xferd.service reads"
else
	fail "the installed config and the unit's --config" "$(grep ExecStart= "$UNITS/xferd.service")"
fi
# Node A: what an operator does, edit the installed file (no /etc/default/xferd).
node_conf aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa "$RXE_DEV0" "$RXE_IP0" "$SOCK_A" >/etc/xferd/xferd.conf
node_conf bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb "$RXE_DEV1" "$RXE_IP1" "$SOCK_B" >/etc/xferd/b.conf
rm -f /etc/default/xferd
echo 'XFERD_OPTS=--config /etc/xferd/b.conf' >/etc/default/xferd-b
sed -e 's/xferd\.socket/xferd-b.socket/g' -e 's|/etc/default/xferd$|/etc/default/xferd-b|' \
	-e 's/^RuntimeDirectory=xferd$/RuntimeDirectory=xferd-b/' \
	"$UNITS/xferd.service" >/etc/systemd/system/xferd-b.service
sed -e "s|^ListenSequentialPacket=.*|ListenSequentialPacket=$SOCK_B|" \
	"$UNITS/xferd.socket" >/etc/systemd/system/xferd-b.socket
systemctl daemon-reload

# ---------------------------------------------------------------------------------------------
note "--- activation (at ${SECONDS} s)"
systemctl start xferd.socket xferd-b.socket
if [ "$(prop xferd.socket ActiveState)" = active ] && [ -S "$SOCK_A" ] && [ -S "$SOCK_B" ] &&
	[ "$(prop xferd.service ActiveState)" = inactive ]; then
	ok "systemctl start xferd.socket xferd-b.socket: listening, services not started"
else
	fail "sockets start, services do not" "$(why_unit xferd.socket) $(why_unit xferd.service)"
fi
st=$(stat -c '%U:%G %a' "$SOCK_A")
if [ "$st" = "root:xferd 660" ]; then
	ok "$SOCK_A is root:xferd 0660"
else
	fail "socket owner and mode" "$st"
fi

out=$(actl "$SOCK_A" status 2>&1)
rc=$?
if [ $rc -eq 0 ] && wait_state xferd.service active 30 &&
	[ "$(prop xferd.service Type)" = notify ]; then
	ok "a client (alice, group xferd) activated xferd.service: Type=notify, READY reached (active/$(prop xferd.service SubState))"
else
	fail "a client activates xferd.service" "xferctl exit $rc: $out; $(why_unit xferd.service)"
fi
if ! { actl "$SOCK_B" status >/dev/null 2>&1 && wait_state xferd-b.service active 30; }; then
	fail "a client activates xferd-b.service" "$(why_unit xferd-b.service)"
fi

# The sandbox as the kernel sees it: CAP_IPC_LOCK is bit 14.
pid=$(prop xferd.service MainPID)
status=$(cat "/proc/$pid/status" 2>/dev/null)
want_caps=0000000000004000
got=$(awk -v u="$(id -u xferd)" '/^Uid:/ { uid = ($2 == u && $3 == u) } /^CapEff:/ { e = $2 }
	/^CapPrm:/ { p = $2 } /^CapBnd:/ { b = $2 } /^NoNewPrivs:/ { n = $2 } /^Seccomp:/ { s = $2 }
	END { print uid, e, p, b, n, s }' <<<"$status")
if [ "$got" = "1 $want_caps $want_caps $want_caps 1 2" ]; then
	ok "xferd (pid $pid) runs as xferd with CAP_IPC_LOCK only (eff/prm/bnd), no_new_privs, seccomp"
else
	fail "the daemon's credentials" "uid-ok CapEff CapPrm CapBnd NoNewPrivs Seccomp = $got"
fi
# Its own cgroup (and session): the kernel schedules it as a group apart from its clients,
# which is what keeps a metrics scrape short on a host busy with them (README, Metrics).
cg=$(awk -F: '$1 == 0 { print $3 }' "/proc/$pid/cgroup" 2>/dev/null)
if [ "$cg" = "$(prop xferd.service ControlGroup)" ] && [ "$cg" = /system.slice/xferd.service ] &&
	[ "$(ps -o sid= -p "$pid" | tr -d ' ')" = "$pid" ]; then
	ok "xferd runs in a cgroup of its own ($cg) and leads its own session"
else
	fail "the daemon's own cgroup and session" "cgroup '$cg', unit's '$(prop xferd.service ControlGroup)', sid $(ps -o sid= -p "$pid")"
fi
devs=$(actl "$SOCK_A" --json devices 2>&1)
if [[ $devs == *\"$RXE_DEV0\"* && $devs == *'"state":"active"'* ]]; then
	ok "the sandboxed daemon opens $RXE_DEV0 (DeviceAllow=char-infiniband_verbs): port ACTIVE"
else
	fail "the sandboxed daemon sees $RXE_DEV0" "$devs"
fi

# ---------------------------------------------------------------------------------------------
note "--- transfers over RDMA (at ${SECONDS} s)"
# transfer KIND OWNER-SOCK ACTIVE-SOCK SIZE: KIND read (readable on the owner, read on the
# active side) or write (writable on the owner, write from the active side), bytes compared.
transfer()
{
	local kind=$1 os=$2 as=$3 size=$4 w pid rc=0 arc=0
	# Each transfer its own files (the metadata file must be new); this runs in $(...), so no
	# counter would survive the call.
	w=$(mktemp -u "$D/x.XXXXXX")-$kind
	head -c "$size" /dev/urandom >"$w.src"
	chown alice "$w.src"
	# Through stdin and stdout, so that xferctl moves the bytes through a memfd buffer: a file
	# registered as itself moves over TCP only (PROTOCOL.md §4, file regions).
	if [ "$kind" = read ]; then
		actl "$os" -m "$w.meta" readable - <"$w.src" >"$w.p.out" 2>"$w.p.err" &
	else
		actl "$os" -m "$w.meta" writable "$size" - >"$w.dst" 2>"$w.p.err" &
	fi
	pid=$!
	local end=$((SECONDS + 60))
	while [ ! -s "$w.meta" ] && alive "$pid" && [ $SECONDS -lt $end ]; do sleep "$POLL"; done
	if [ ! -s "$w.meta" ]; then
		kill9 "$pid"
		echo "no metadata: $(lastline "$w.p.err")"
		return 1
	fi
	if [ "$kind" = read ]; then
		actl "$as" read "@$w.meta" - >"$w.dst" 2>"$w.a.err" || arc=$?
	else
		actl "$as" write "@$w.meta" - <"$w.src" >"$w.a.out" 2>"$w.a.err" || arc=$?
	fi
	if [ $arc -ne 0 ]; then # the passive side would wait for its deadline
		kill9 "$pid"
		echo "active exit $arc: $(lastline "$w.a.err")"
		return 1
	fi
	wait_bg "$pid" 60 || rc=$?
	if [ $rc -ne 0 ]; then
		echo "passive exit $rc: $(lastline "$w.p.err")"
		return 1
	fi
	cmp -s "$w.src" "$w.dst" || { echo "bytes differ"; return 1; }
}
for c in "read $SOCK_A $SOCK_B $((8 * MIB))" "write $SOCK_B $SOCK_A $((4 * MIB + 1))"; do
	# shellcheck disable=SC2086 # three words
	set -- $c
	if why=$(transfer "$@"); then
		ok "$1 of $4 bytes between xferd.service ($RXE_DEV0) and xferd-b.service ($RXE_DEV1): identical"
	else
		fail "$1 of $4 bytes between the two services" "$why"
	fi
done
peers=$(actl "$SOCK_A" --json peers 2>&1)
if [[ $peers == *'"transport":"rdma"'* ]]; then
	ok "node A's peer set to node B is transport rdma"
else
	fail "node A's peer set is rdma" "$peers"
fi

# ---------------------------------------------------------------------------------------------
note "--- CAP_IPC_LOCK, measured (at ${SECONDS} s)"
# What the one capability buys: with a drop-in that lowers LimitMEMLOCK= to 64 KiB, node B
# still registers (and pins) an 8 MiB buffer because the kernel's pinning skips the limit for
# CAP_IPC_LOCK; without the capability the same registration fails and says why.
# memlock_case CAPS: node B restarted with LimitMEMLOCK=64K and AmbientCapabilities=CAPS;
# then a read of 8 MiB from A into B. Prints the transfer's failure, if any.
memlock_case()
{
	mkdir -p /etc/systemd/system/xferd-b.service.d
	printf '[Service]\nLimitMEMLOCK=65536\nAmbientCapabilities=\nAmbientCapabilities=%s\n' "$1" \
		>/etc/systemd/system/xferd-b.service.d/memlock.conf
	systemctl daemon-reload
	systemctl restart xferd-b.service
	transfer read "$SOCK_A" "$SOCK_B" $((8 * MIB))
}
if why=$(memlock_case CAP_IPC_LOCK); then
	ok "LimitMEMLOCK=64K with CAP_IPC_LOCK: 8 MiB registered on $RXE_DEV1 and read, identical"
else
	fail "LimitMEMLOCK=64K with CAP_IPC_LOCK still registers 8 MiB" "$why"
fi
if why=$(memlock_case ''); then
	fail "without CAP_IPC_LOCK a 64K memlock limit stops an 8 MiB registration" "it worked"
elif [[ $why == *RLIMIT_MEMLOCK* ]]; then
	ok "LimitMEMLOCK=64K without the capability: refused, and told why: ${why#active exit 1: }"
else
	fail "without CAP_IPC_LOCK the refusal names the memlock limit" "$why"
fi
rm -rf /etc/systemd/system/xferd-b.service.d
systemctl daemon-reload
systemctl restart xferd-b.service

# ---------------------------------------------------------------------------------------------
note "--- stop, start, restart (at ${SECONDS} s)"
# A waiting passive operation, then stop: the client must hear why.
head -c $((4 * MIB)) /dev/urandom >"$D/stop.src"
chown alice "$D/stop.src"
actl "$SOCK_A" -m "$D/stop.meta" readable "$D/stop.src" >"$D/stop.out" 2>"$D/stop.err" &
wpid=$!
end=$((SECONDS + 30))
while [ ! -s "$D/stop.meta" ] && alive "$wpid" && [ $SECONDS -lt $end ]; do sleep "$POLL"; done
t0=$(now_ms)
systemctl stop xferd.service 2>/dev/null # it warns that the socket can start it again
took=$(elapsed "$t0")
wait_bg "$wpid" 30
crc=$?
if [ "$(prop xferd.service ActiveState)" = inactive ] && [ "$(prop xferd.service Result)" = success ] &&
	[ "$(prop xferd.service ExecMainStatus)" = 0 ]; then
	ok "systemctl stop xferd.service: drained and exited 0 in $took s"
else
	fail "systemctl stop drains" "$(why_unit xferd.service) status $(prop xferd.service ExecMainStatus)"
fi
if [ $crc -eq 1 ] && grep -q ESHUTDOWN "$D/stop.err"; then
	ok "the waiting client was told: $(lastline "$D/stop.err")"
else
	fail "a waiting client is told of the stop" "exit $crc: $(lastline "$D/stop.err")"
fi
if [ "$(prop xferd.socket ActiveState)" = active ] && [ -S "$SOCK_A" ] &&
	actl "$SOCK_A" status >/dev/null 2>&1 && wait_state xferd.service active 30; then
	ok "after the stop the socket still listens; the next client started the service again"
else
	fail "socket kept over a stop, reactivation" "$(why_unit xferd.socket) $(why_unit xferd.service)"
fi

ino=$(stat -c %i "$SOCK_A")
since=$(prop xferd.socket ActiveEnterTimestampMonotonic)
pid0=$(prop xferd.service MainPID)
systemctl restart xferd.service
if wait_state xferd.service active 30 && [ "$(stat -c %i "$SOCK_A")" = "$ino" ] &&
	[ "$(prop xferd.socket ActiveEnterTimestampMonotonic)" = "$since" ] &&
	[ "$(prop xferd.service MainPID)" != "$pid0" ] && actl "$SOCK_A" status >/dev/null 2>&1; then
	ok "systemctl restart xferd.service: new daemon, the same socket (inode $ino), clients get through"
else
	fail "restart keeps the socket" "inode $ino -> $(stat -c %i "$SOCK_A"); $(why_unit xferd.service)"
fi
if why=$(transfer read "$SOCK_A" "$SOCK_B" $((1 * MIB))); then
	ok "a transfer after the restart: identical"
else
	fail "a transfer after the restart" "$why"
fi

# ---------------------------------------------------------------------------------------------
note "--- /etc/xferd/xferd.conf: restart and reload (at ${SECONDS} s)"
MPORT=9468
metrics_up() { curl -s --max-time 5 -o /dev/null "http://127.0.0.1:$MPORT/metrics"; }
# journal_has UNIT PRIORITY PATTERN [SECONDS]: until a message of UNIT at PRIORITY (0-7)
# matches PATTERN (journalctl alone: a python per poll is slow under TCG).
journal_has()
{
	local end=$((SECONDS + ${4:-30}))
	until journalctl --no-pager -q -u "$1" -p "$2..$2" -o cat 2>/dev/null | grep -qE "$3"; do
		[ $SECONDS -lt "$end" ] || return 1
		sleep "$POLL"
	done
}
was_up=$(metrics_up && echo yes || echo no)
/usr/bin/python3 - <<'PYEOF'
import json
p = "/etc/xferd/xferd.conf"
c = json.load(open(p))
c["metrics_listen"] = "127.0.0.1:9468"
json.dump(c, open(p, "w"))
PYEOF
systemctl restart xferd.service
if [ "$was_up" = no ] && wait_state xferd.service active 30 && metrics_up &&
	actl "$SOCK_A" status >/dev/null 2>&1; then
	ok "metrics_listen added to /etc/xferd/xferd.conf: after systemctl restart /metrics answers on port $MPORT"
else
	fail "a key changed in /etc/xferd/xferd.conf takes effect after restart" "metrics before: $was_up; $(why_unit xferd.service)"
fi
sed -i 's/"log_level": "info"/"log_level": "debug"/' /etc/xferd/xferd.conf
debug0=$(journalctl --no-pager -q -u xferd.service -p 7..7 -o cat 2>/dev/null | grep -c .)
systemctl reload xferd.service
if journal_has xferd.service 6 'SIGHUP: applied .*log_level' && actl "$SOCK_A" status >/dev/null 2>&1 &&
	journal_has xferd.service 7 'connected: pid' 10 && [ "$(prop xferd.service ActiveState)" = active ]; then
	ok "log_level debug in /etc/xferd/xferd.conf: systemctl reload applies it (journal: $(journalctl --no-pager -q -u xferd.service -p 6..6 -o cat | grep -m1 'SIGHUP: applied')), debug entries follow"
else
	fail "systemctl reload applies a log_level change" "debug entries before: $debug0; $(why_unit xferd.service)"
fi
sed -i 's/"log_level": "debug"/"log_level": "info"/' /etc/xferd/xferd.conf
systemctl reload xferd.service

# ---------------------------------------------------------------------------------------------
note "--- watchdog (at ${SECONDS} s)"
if [ "$(prop xferd.service WatchdogUSec)" = 30s ] &&
	journal_has xferd.service 6 'systemd watchdog: WATCHDOG=1 every 15000 ms' 10; then
	ok "WatchdogSec=30: the daemon's event loop pings every 15 s (journal: $(journalctl --no-pager -q -u xferd.service -p 6..6 -o cat | grep -m1 'systemd watchdog'))"
else
	fail "the watchdog is on and pinged" "WatchdogUSec=$(prop xferd.service WatchdogUSec); $(why_unit xferd.service)"
fi
# A loop that stops turning: node B with WatchdogSec=5 (and SIGKILL 3 s after the SIGABRT, which
# a stopped process does not take) is SIGSTOPped; systemd must kill it and start a new one.
WD_DROPIN=/run/systemd/system/xferd-b.service.d/watchdog.conf
mkdir -p "${WD_DROPIN%/*}"
printf '[Service]\nWatchdogSec=5\nTimeoutAbortSec=3\n' >"$WD_DROPIN"
systemctl daemon-reload
systemctl restart xferd-b.service
wait_state xferd-b.service active 30
pid0=$(prop xferd-b.service MainPID)
kill -STOP "$pid0"
end=$((SECONDS + 60))
while [ $SECONDS -lt $end ]; do
	pid1=$(prop xferd-b.service MainPID)
	[ "$pid1" != 0 ] && [ "$pid1" != "$pid0" ] && [ "$(prop xferd-b.service ActiveState)" = active ] && break
	sleep 0.5
done
if [ "$pid1" != "$pid0" ] && [ "$pid1" != 0 ] &&
	journalctl --no-pager -q -u xferd-b.service -o cat | grep -q 'Watchdog timeout'; then
	ok "a stopped event loop: systemd's watchdog killed xferd-b (pid $pid0) and started pid $pid1"
else
	fail "a stopped loop is killed and restarted by the watchdog" "MainPID $pid0 -> $pid1; $(why_unit xferd-b.service)"
fi
kill -KILL "$pid0" 2>/dev/null
rm -f "$WD_DROPIN" # (the daemon now running keeps WatchdogSec=5 until its next start)
systemctl daemon-reload
if wait_state xferd-b.service active 30 && why=$(transfer read "$SOCK_A" "$SOCK_B" $((1 * MIB))); then
	ok "the daemon the watchdog restarted serves: a transfer to node B identical"
else
	fail "a transfer after the watchdog's restart" "${why:-$(why_unit xferd-b.service)}"
fi

# ---------------------------------------------------------------------------------------------
note "--- journal (at ${SECONDS} s)"
# Node B loses its peer when A stops or restarts: a warning in B's journal. Every daemon line
# carries a <N> prefix; journald must have taken it as the priority.
systemctl stop xferd-b.service 2>/dev/null
j=$(journal xferd.service; journal xferd-b.service)
pri=$(awk '{ print $1 }' <<<"$j" | sort -u | tr '\n' ' ')
if grep -q '^6 ' <<<"$j" && grep -q '^4 ' <<<"$j" && ! grep -qE '^[0-9?] <[0-7]>' <<<"$j"; then
	ok "journald: the daemons' lines have priorities $pri(info and warning among them), no raw <N>"
else
	fail "journald shows the priorities" "priorities '$pri'; $(grep -E '^[0-9?] ' <<<"$j" | tail -n 4 | tr '\n' '|')"
fi

out=$(systemd-analyze security --no-pager xferd.service 2>&1 | tail -n 1)
level=$(sed -n 's/.*exposure level for xferd.service: \([0-9.]*\).*/\1/p' <<<"$out")
if [ -n "$level" ] && awk -v l="$level" 'BEGIN { exit !(l <= 2.5) }'; then
	ok "systemd-analyze security xferd.service (live): $level"
else
	fail "systemd-analyze security xferd.service (live) <= 2.5" "$out"
fi

summary
[ "$failed" -eq 0 ]
