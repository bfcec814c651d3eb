#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The event loop's lateness (daemon/looplag.c) and file I/O off the loop (tcp.c's file lane),
# two daemons of scripts/cluster.sh (namespaces, or loopback ports):
#   - /metrics has xferd_event_loop_lag_seconds (promtool-clean); a daemon stopped (SIGSTOP)
#     for 0.6 s records a tick at least 0.5 s late, counts it, and logs where the time went;
#   - a file whose I/O blocks (tests/preload/filegate.c: sendfile from a file, or splice into
#     one, waits while a gate file exists; the source is dropped from the page cache first, as
#     cached pages are sent on the loop): the daemon inside it still answers its clients
#     (`xferctl status`), on the sending side and on the receiving side; once the gate opens
#     the transfer completes, bytes compared. Before the file lane, the loop itself sat in
#     that sendfile or splice and nothing answered until the gate opened;
#   - the owner of the receiving file cancels while the splice into it waits at the gate:
#     op.cancel answers (CANCELLED, and the writer is told) only once the gate opened and the
#     worker is through, never while bytes of its frame may still land in the file (before,
#     it answered at once).
# No bound on how long anything takes is asserted, only what must have happened.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
# shellcheck source=tests/cluster_suite.sh
. tests/cluster_suite.sh

T=30
POLL=0.02
PY=/usr/bin/python3

# (a daemon inside the gate gets out)
before_teardown() { rm -f "${DATA:-/nonexistent}"/gate*; }

require_built
DATA=$(mktemp -d /var/tmp/xferd-looplag.XXXXXX) || abort_setup "mktemp failed"
cc -shared -fPIC -O2 -o "$DATA/filegate.so" tests/preload/filegate.c -ldl ||
	abort_setup "could not build tests/preload/filegate.c"
xn_up 2 >/dev/null || abort_setup "scripts/netns.sh could not make two nodes"
MPORT=$((10000 + RANDOM % 20000))

# Each daemon with the gate shim, its own gate (absent: no file I/O waits); node 0 with metrics.
# (ASan wants its runtime first among the libraries; the shim comes before it here.)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
for n in 0 1; do
	extra=
	[ "$n" = 0 ] && extra="\"metrics_listen\": \"127.0.0.1:$MPORT\""
	XC_CONFIG_EXTRA=$extra LD_PRELOAD="$DATA/filegate.so" XFERD_TEST_FILE_GATE="$DATA/gate$n" \
		xc_start "$n" || abort_setup "node $n did not start"
done

# scrape FILE: node 0's /metrics into FILE.
scrape() { xn_exec 0 curl -s --max-time 10 -o "$1" "http://127.0.0.1:$MPORT/metrics"; }
# mval FILE NAME: the value of the sample NAME (no labels).
mval() { awk -v n="$2" '$1 == n { print $2 }' "$1"; }

# ---- the metric and the warning ----

lag_recorded()
{
	local i count
	for ((i = 0; i < 250; i++)); do
		scrape "$DATA/m1" && count=$(mval "$DATA/m1" xferd_event_loop_lag_seconds_count)
		[ "${count:-0}" -ge 2 ] && break
		sleep "$POLL"
	done
	if [ "${count:-0}" -lt 2 ]; then
		fail "loop lag histogram" "xferd_event_loop_lag_seconds_count is '${count:-}' after 5 s"
	elif ! out=$(promtool check metrics <"$DATA/m1" 2>&1); then
		fail "loop lag histogram" "promtool: $out"
	else
		ok "/metrics has xferd_event_loop_lag_seconds ($count ticks), promtool-clean"
	fi
}

stopped_daemon_is_late()
{
	local pid late max i
	pid=$(xc_pid 0)
	kill -STOP "$pid"
	sleep 0.6
	kill -CONT "$pid"
	for ((i = 0; i < 500; i++)); do
		scrape "$DATA/m2" && late=$(mval "$DATA/m2" xferd_event_loop_late_ticks_total)
		[ "${late:-0}" -ge 1 ] && break
		sleep "$POLL"
	done
	max=$(mval "$DATA/m2" xferd_event_loop_lag_max_seconds)
	if [ "${late:-0}" -lt 1 ]; then
		fail "a stopped daemon's loop is late" "late ticks '${late:-}' after 10 s"
	elif ! awk -v m="${max:-0}" 'BEGIN { exit !(m >= 0.5) }'; then
		fail "a stopped daemon's loop is late" "xferd_event_loop_lag_max_seconds $max < 0.5"
	elif ! grep -q "the event loop ran .* s late .*off-CPU" "$(xc_log 0)"; then
		fail "a stopped daemon's loop is late" "no warning in the log: $(tail -n 2 "$(xc_log 0)" | tr '\n' '|')"
	else
		ok "SIGSTOP 0.6 s: a tick $max s late, counted, and logged with where the time went"
	fi
}

# ---- file I/O that blocks ----

# evicted FILE: FILE written back and dropped from the page cache; 1 if pages stay.
evicted()
{
	$PY -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fsync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1" &&
		[ "$(fincore -b -n -o RES "$1" 2>/dev/null | tr -d ' ')" = 0 ]
}

# gated_case KIND GATED_NODE NAME: a read (node 0's file -> node 1's file) or write (node 1's
# file -> node 0's file) of 8 MiB while GATED_NODE's file I/O waits at the gate; that daemon
# must answer `xferctl status` meanwhile; then the gate opens and the bytes must arrive.
gated_case()
{
	local kind=$1 g=$2 name=$3 src=$DATA/src out=$DATA/out pp ap meta st prc=0 arc=0 i
	head -c $((8 * 1024 * 1024 + 5)) /dev/urandom >"$src"
	# Out of the page cache: cached pages are sent on the loop (no disk to wait for), so the
	# gate stands for a disk only where the pages must be read (a sending case needs that).
	if ! evicted "$src" && [ "$kind:$g" = read:0 ]; then
		skip "$name" "the file system keeps $src in memory (tmpfs?): nothing to wait for"
		return
	fi
	rm -f "$out" "$DATA/gate$g.entered"
	: >"$DATA/gate$g"
	if [ "$kind" = read ]; then
		bg "$DATA/p.out" "$DATA/p.err" 0 readable "$src"
	else
		bg "$DATA/p.out" "$DATA/p.err" 0 writable "$(stat -c %s "$src")" "$out"
	fi
	pp=$BG
	if ! meta=$(wait_line "$DATA/p.out" "$T"); then
		fail "$name" "no metadata: $(lastline "$DATA/p.err")"
		rm -f "$DATA/gate$g"
		kill9 "$pp"
		return
	fi
	if [ "$kind" = read ]; then
		bg "$DATA/a.out" "$DATA/a.err" 1 read "$meta" "$out"
	else
		bg "$DATA/a.out" "$DATA/a.err" 1 write "$meta" "$src"
	fi
	ap=$BG
	for ((i = 0; i < 1500; i++)); do
		[ -e "$DATA/gate$g.entered" ] && break
		sleep "$POLL"
	done
	if [ ! -e "$DATA/gate$g.entered" ]; then
		st="node $g never reached the file I/O"
	elif ! timeout -k 2 10 "$BUILD/xferctl" --socket "$(xc_sock "$g")" status >/dev/null 2>&1; then
		st="node $g did not answer xferctl status within 10 s while its file I/O waited"
	fi
	rm -f "$DATA/gate$g"
	wait_bg "$ap" "$T" || arc=$?
	wait_bg "$pp" "$T" || prc=$?
	if [ -n "${st:-}" ]; then
		fail "$name" "$st"
	elif [ "$arc" != 0 ] || [ "$prc" != 0 ]; then
		fail "$name" "clients exited $arc/$prc: $(lastline "$DATA/a.err") / $(lastline "$DATA/p.err")"
	elif ! cmp -s "$src" "$out"; then
		fail "$name" "the bytes differ"
	else
		ok "$name"
	fi
}

# The owner of a writable file region (a client by hand: xferctl has no cancel) that cancels
# its operation once the daemon's splice into the file waits at the gate, and says whether
# op.cancel answered within 1 s ("told STATE early") or not ("held"), then how it ended.
cat >"$DATA/gated_owner.py" <<'EOF'
import array, json, os, socket, sys, time
path, target, size, entered = sys.argv[1:5]
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(path)
s.settimeout(30)
def send(i, method, params, fds=()):
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    msg = {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
    s.sendmsg([json.dumps(msg).encode()], anc)
def reply(i):
    while True:
        m = json.loads(s.recv(65536))
        if m.get("id") == i:
            if "result" not in m:
                sys.exit(f"request {i}: {m}")
            return m["result"]
def call(i, method, params, fds=()):
    send(i, method, params, fds)
    return reply(i)
call(1, "hello", {"version": 1, "client": "gated_owner"})
region = call(2, "region.register", {"kind": "file"}, [os.open(target, os.O_RDWR)])["region"]
op = call(3, "op.writable", {"descs": [{"region": region, "offset": 0, "length": int(size)}]})
print(op["metadata"], flush=True)
for _ in range(1500):
    if os.path.exists(entered):
        break
    time.sleep(0.02)
else:
    sys.exit("the daemon never reached the file's I/O")
send(4, "op.cancel", {"op": op["op"]})
s.settimeout(1)
try:
    print("told", reply(4)["state"], "early", flush=True)
    sys.exit(0)
except socket.timeout:
    print("held", flush=True)
s.settimeout(30)
print("told", reply(4)["state"], flush=True)
EOF

# cancel_while_landing: node 1 writes 8 MiB into node 0's file; while node 0's splice into the
# file waits at the gate (the file lane's worker is inside, with bytes of the frame to write),
# the file's owner cancels. The end is told once the worker is through, never while bytes may
# still land in the file (its client may reuse it at once); then CANCELLED on both sides.
cancel_while_landing()
{
	local name="cancel while the receiving side's splice into its file waits: op.cancel answers once the worker is through, CANCELLED"
	local src=$DATA/src out=$DATA/out size meta op wp wrc=0 orc=0 i
	head -c $((8 * 1024 * 1024 + 5)) /dev/urandom >"$src"
	size=$(stat -c %s "$src")
	rm -f "$out" "$DATA/gate0.entered"
	truncate -s "$size" "$out"
	: >"$DATA/gate0"
	: >"$DATA/o.out"
	$PY "$DATA/gated_owner.py" "$(xc_sock 0)" "$out" "$size" "$DATA/gate0.entered" \
		>"$DATA/o.out" 2>"$DATA/o.err" &
	op=$!
	if ! meta=$(wait_line "$DATA/o.out" "$T"); then
		fail "$name" "no metadata: $(lastline "$DATA/o.err")"
		rm -f "$DATA/gate0"
		kill9 "$op"
		return
	fi
	echo "$meta" >"$DATA/meta"
	bg "$DATA/a.out" "$DATA/a.err" 1 write "@$DATA/meta" "$src"
	wp=$BG
	for ((i = 0; i < 1500; i++)); do
		[ "$(wc -l <"$DATA/o.out")" -ge 2 ] && break
		alive "$op" || break
		sleep "$POLL"
	done
	rm -f "$DATA/gate0"
	wait_bg "$op" "$T" || orc=$?
	wait_bg "$wp" "$T" || wrc=$?
	local said
	said=$(sed -n '2,$p' "$DATA/o.out" | tr '\n' ' ')
	if [ "$orc" != 0 ]; then
		fail "$name" "the owner exited $orc: $(lastline "$DATA/o.err")"
	elif [ "$said" != "held told CANCELLED " ]; then
		fail "$name" "op.cancel: $said(want: held, then told CANCELLED once the gate opened)"
	elif [ "$wrc" = 0 ] || ! grep -q "CANCELLED" "$DATA/a.err"; then
		fail "$name" "the writer exited $wrc: $(lastline "$DATA/a.err")"
	else
		ok "$name"
	fi
}

lag_recorded
stopped_daemon_is_late
gated_case read 0 "sendfile from a file blocked (sending side): the daemon answers its clients, then the bytes arrive"
gated_case read 1 "splice into a file blocked (receiving side): the daemon answers its clients, then the bytes arrive"
gated_case write 0 "write into a file whose splice blocks: the daemon answers its clients, then the bytes arrive"
cancel_while_landing

stop_both_nodes
summary
[ "$failed" -eq 0 ]
