#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# A file region on a file system that stops answering (tests/fuse_gate.py, a FUSE mount whose
# operations wait while a gate file exists: a hostile user's mount, or a dead sshfs) must not
# stall the daemon. One xferd (scripts/cluster.sh); the clients are Python (the xferd package),
# which open the file on the mount and hand the daemon its fd.
#   - a registration whose fstat(2) waits in the file system: `xferctl status` from another
#     client still answers, and the registration fails ETIMEDOUT naming the file system once
#     XD_FILE_PROBE_MS passes; after the gate opens, the daemon is back to its baseline
#   - the same, the registering client killed -9 while it waits: nothing left behind
#   - its fstatfs(2) waits instead (statfs): the same
#   - five such registrations in a row on one connection: the fifth refused EAGAIN at once
#   - the file's fd offered as a memfd while its fstat and flush wait: refused EBADF at once,
#     status answering (the daemon's close of the refused fd is not made on the loop)
#   - a registration while the file system's flush waits: answered, status answering (the fd the
#     client sent is the region's: no close at all)
#   - the file's fd sent with a request that takes none while flush waits: status answers; 253
#     of them in one packet: at most 32 threads close them
#   - a registration while the file system answers works (the file region is usable: a local
#     read of it into memory, bytes compared)
#   - a small local copy out of the file while its reads wait (that size was copied on the loop
#     thread): status still answers; the copy completes once the gate opens
#   - a region deregistered while the file system's flush waits (FUSE sends a FLUSH at every
#     close(2)): the daemon's close of its fd is not made on the loop; status answers
#   - SIGTERM while a registration waits: the daemon stops, exit status 0, the client told
# Before the fix, the loop itself sat in the fstat and nothing answered until the gate opened.
# Every wait for a client is bounded, and made only once the gate is open: a process inside a
# FUSE request can be neither killed nor reaped until the file system answers (gate_watch).
# Skipped (with the reason) without /dev/fuse or python3-fusepy.
#
# Prints "ok - ", "FAIL - ", "SKIP - " lines and "N passed, N failed[, N skipped]".
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
# shellcheck source=tests/cluster_suite.sh
. tests/cluster_suite.sh

T=30
POLL=0.02
PY=/usr/bin/python3
NODES=0
SIZE=65536
FPID=
MNT=
WATCH=

# (a daemon or client inside the file system gets out; then the mount goes)
before_teardown()
{
	[ -n "$DATA" ] && gate_open
	fuse_abort
	return 0
}
# gate_watch SECONDS: the gate opens after SECONDS whatever happens, so that no wait of this
# suite can outlast it (a client or the daemon inside a gated FUSE call cannot be killed).
# gate_open: opens it now and ends the watch (each case ends it: none outlives its case).
gate_watch()
{
	(
		for ((i = 0; i < $1 * 50; i++)); do sleep 0.02; done
		rm -f "$DATA/gate"
	) &
	WATCH=$!
}
gate_open()
{
	rm -f "$DATA/gate"
	if [ -n "$WATCH" ]; then
		kill "$WATCH" 2>/dev/null
		wait "$WATCH" 2>/dev/null
		WATCH=
	fi
	return 0
}
# fuse_abort: ends the file system's process, which aborts its FUSE connection: every call
# waiting in it fails at once (a process inside a FUSE request can be neither killed nor reaped
# until the file system answers; /sys/fs/fuse/connections is not always mounted). Later cases
# then fail, none hangs.
fuse_abort()
{
	if [ -n "$FPID" ]; then
		kill -KILL "$FPID" 2>/dev/null
		wait "$FPID" 2>/dev/null
		FPID=
	fi
	return 0
}
after_teardown()
{
	if [ -n "$MNT" ]; then
		fusermount -u "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null
	fi
	if [ -n "$FPID" ]; then
		kill "$FPID" 2>/dev/null
		wait "$FPID" 2>/dev/null
	fi
	return 0
}

require_built
if [ ! -c /dev/fuse ]; then
	skip "file regions on a hung FUSE file system" "no /dev/fuse"
	summary
	exit 0
fi
if ! $PY -c 'import fusepy' 2>/dev/null; then
	skip "file regions on a hung FUSE file system" "python3-fusepy is not installed (scripts/install-deps.sh)"
	summary
	exit 0
fi
DATA=$(mktemp -d /var/tmp/xferd-fuse.XXXXXX) || abort_setup "mktemp failed"
MNT=$DATA/mnt
mkdir "$MNT" || abort_setup "mkdir $MNT failed"
$PY tests/fuse_gate.py "$MNT" "$DATA/gate" "$SIZE" >"$DATA/fuse.log" 2>&1 &
FPID=$!
for ((i = 0; i < 250; i++)); do
	[ -e "$MNT/data" ] && break
	sleep "$POLL"
done
[ -e "$MNT/data" ] || abort_setup "the FUSE file system did not mount: $(firstline "$DATA/fuse.log")"
xn_up 1 >/dev/null || abort_setup "scripts/netns.sh could not make a node"
xc_start 0 || abort_setup "node 0 did not start"

export XFERD_LIBRARY=$BUILD/libxferclient.so.1 PYTHONPATH=$ROOT/client/python SOCK
SOCK=$(xc_sock 0)
case $XFERD_LIBRARY in /*) ;; *) XFERD_LIBRARY=$ROOT/$XFERD_LIBRARY ;; esac
# Under SANITIZE the library needs its runtimes loaded first in Python (as test_python.sh does);
# the file system and the daemon are started already.
if readelf -d "$XFERD_LIBRARY" 2>/dev/null | grep -q 'libasan'; then
	pre=
	for rt in libasan.so libubsan.so; do
		f=$(${CC:-cc} -print-file-name=$rt)
		[ -f "$f" ] && pre="$pre $f"
	done
	export LD_PRELOAD="${pre# }" ASAN_OPTIONS=detect_leaks=0:abort_on_error=0
fi

# The client: opens the file (the gate open), closes the gate on OPS, then does WHAT:
#   register   registers the file; prints "ok REGION" or "err ERRNO_NAME MESSAGE"
#   memfd      offers its fd as a memfd (the default kind); prints "err ERRNO_NAME MESSAGE"
#   stray      speaks the protocol itself: hello, then stats with the file's fd attached
#              ($STRAYS times, default 1; stats takes none); prints "err ERRNO MESSAGE" of the
#              reply, or "err closed"
#   limit      speaks the protocol itself: 5 file registrations of its fd in a row on one
#              connection, then waits for their replies; prints "ok", the first reply's
#              "ID:ERRNO", then the others' sorted, or "err ..."
#   release    registers it, prints "ok REGION", closes the gate on OPS, then closes the File
#              (deregisters it: the daemon closes its fd; then this process closes its own)
#   copy       registers it and 4 KiB of memory (gate still open), closes the gate, reads the
#              file into the memory locally; prints "ok" with the bytes compared, or "err ..."
cat >"$DATA/client.py" <<'EOF'
import os, sys, time
import xferd
what, path, gate, ops = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
def shut(words):
    with open(gate + ".tmp", "w") as g:
        g.write(words + "\n")
    os.rename(gate + ".tmp", gate)
try:
    c = xferd.Connector(socket=os.environ["SOCK"])
    f = xferd.File(path, "r", length=4096)
    if what == "register":
        shut(ops)
        print("ok", f.register_memory(c)._regions[c._serial][1], flush=True)
    elif what == "memfd":
        import ctypes
        from xferd import _clib
        shut(ops)
        out = ctypes.c_uint64()
        c._c_call(_clib.lib.xfer_region_register, f.fd, 0, 4096, b"fuse", ctypes.byref(out))
        print("ok", out.value, flush=True)
    elif what == "limit":
        import array, json, socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(os.environ["SOCK"])
        def req(i, method, params, fd=None):
            msg = json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}).encode()
            anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))] if fd is not None else []
            s.sendmsg([msg], anc)
        req(1, "hello", {"version": 1, "client": "fuse-limit"})
        json.loads(s.recv(65536))
        shut(ops)
        for i in range(2, 7):
            req(i, "region.register", {"name": "f", "kind": "file", "offset": 0, "length": 4096}, f.fd)
        s.settimeout(20)
        got = []
        while len(got) < 5:
            r = json.loads(s.recv(65536))
            if "id" in r and r["id"] in range(2, 7):
                got.append("%d:%s" % (r["id"], r["error"]["data"]["errno"] if "error" in r else "ok"))
        print("ok", got[0], " ".join(sorted(got[1:])), flush=True)  # (timers of one moment: any order)
    elif what == "stray":
        import array, json, socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(os.environ["SOCK"])
        s.settimeout(20)
        s.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "hello",
                           "params": {"version": 1, "client": "fuse-stray"}}).encode())
        json.loads(s.recv(65536))
        shut(ops)
        msg = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "stats", "params": {}}).encode()
        fds = array.array("i", [f.fd] * int(os.environ.get("STRAYS", "1")))
        s.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        r = s.recv(65536)
        e = json.loads(r).get("error", {}) if r else None
        print("err closed" if e is None else "err %s %s" % (e.get("data", {}).get("errno"), e.get("message")),
              flush=True)
    elif what == "release":
        print("ok", f.register_memory(c)._regions[c._serial][1], flush=True)
        shut(ops)
        f.close()
    else:
        m = c.pool(4096).empty(4096)
        f.register_memory(c)
        shut(ops)
        src = c.readable(f)
        c.read(src.metadata(), m).wait(30)
        want = bytes(i % 251 for i in range(4096))
        print("ok" if bytes(m) == want else "err EBADMSG bytes differ", flush=True)
    time.sleep(float(os.environ.get("LINGER", "0")))
except xferd.XferError as e:
    print("err", e.errno_name, e.message, flush=True)
EOF

take_baseline || abort_setup "no baseline"

# status_answers NAME: `xferctl status` answers within 5 s (one FAIL line if not); 0 if it did.
status_answers()
{
	if ! timeout -k 1 5 "$BUILD/xferctl" --socket "$SOCK" status >/dev/null 2>&1; then
		fail "$1" "xferctl status did not answer within 5 s while the file system waited"
		return 1
	fi
	return 0
}

# entered OP [N]: the file system received OP (N times, default 1) while the gate was closed
# (waits up to 10 s).
entered()
{
	local i n
	for ((i = 0; i < 500; i++)); do
		n=$(grep -cx "$1" "$DATA/gate.entered" 2>/dev/null)
		[ "${n:-0}" -ge "${2:-1}" ] && return 0
		sleep "$POLL"
	done
	return 1
}

# hung_register NAME OP KILL: a registration while OP waits in the file system; KILL=1 kills
# the client meanwhile.
hung_register()
{
	local name=$1 op=$2 kill=$3 pid line t0 rc=0
	rm -f "$DATA/gate" "$DATA/gate.entered"
	t0=$(now_ms)
	$PY "$DATA/client.py" register "$MNT/data" "$DATA/gate" "$op" >"$DATA/c.out" 2>"$DATA/c.err" &
	pid=$!
	if ! entered "$op"; then
		fail "$name" "the daemon never reached $op: $(lastline "$DATA/c.err") $(lastline "$DATA/c.out")"
		rm -f "$DATA/gate"
		kill9 "$pid"
		return
	fi
	if ! status_answers "$name"; then
		rm -f "$DATA/gate"
		kill9 "$pid"
		return
	fi
	if [ "$kill" = 1 ]; then
		kill9 "$pid"
		rm -f "$DATA/gate"
		ok "$name: status answered; client killed while its registration waited"
		check_baseline "$name"
		return
	fi
	wait_bg "$pid" "$T" || rc=$?
	line=$(firstline "$DATA/c.out")
	rm -f "$DATA/gate"
	case $line in
	"err ETIMEDOUT "*"did not answer"*)
		ok "$name: status answered; the registration failed after $(elapsed "$t0") s: ${line#err }"
		;;
	*) fail "$name" "registration: '$line' (exit $rc) $(lastline "$DATA/c.err")" ;;
	esac
	check_baseline "$name"
}

hung_register "fstat waits in the file system" getattr 0
hung_register "fstat waits, client killed" getattr 1
hung_register "fstatfs waits in the file system" statfs 0

# Five registrations in a row on one connection while fstat waits: the fifth is refused EAGAIN
# at once (4 may wait per connection), the four others end ETIMEDOUT; nothing left behind.
rm -f "$DATA/gate" "$DATA/gate.entered"
line=$(timeout -k 1 30 $PY "$DATA/client.py" limit "$MNT/data" "$DATA/gate" getattr 2>"$DATA/c.err")
rm -f "$DATA/gate"
if [ "$line" = "ok 6:EAGAIN 2:ETIMEDOUT 3:ETIMEDOUT 4:ETIMEDOUT 5:ETIMEDOUT" ]; then
	ok "5 registrations waiting on one connection: the 5th refused EAGAIN at once, 4 ETIMEDOUT"
else
	fail "5 registrations waiting on one connection" "'$line' $(lastline "$DATA/c.err")"
fi
check_baseline "5 registrations waiting on one connection"

# threads: the daemon's threads now.
threads() { awk '/^Threads:/ { print $2 }' "/proc/$(node_pid 0)/status" 2>/dev/null; }

# gated_call NAME WHAT OPS SECONDS PATTERN: the client WHAT, which closes the gate on OPS (flush
# among them) before its request, is answered within SECONDS with a first line matching
# PATTERN while the gate is closed, and `xferctl status` answers meanwhile, the daemon having
# made at most 32 threads more for closing (its closers' bound); then the gate opens (the
# client's own close of the file waits in the flush until then) and the client ends.
gated_call()
{
	local name=$1 what=$2 ops=$3 secs=$4 pattern=$5 pid line t0 rc=0 th0 th
	rm -f "$DATA/gate" "$DATA/gate.entered"
	th0=$(threads)
	: >"$DATA/c.out" # (emptied before the fork: wait_line must not see the last case's line)
	gate_watch 20
	t0=$(now_ms)
	$PY "$DATA/client.py" "$what" "$MNT/data" "$DATA/gate" "$ops" >"$DATA/c.out" 2>"$DATA/c.err" &
	pid=$!
	if ! line=$(wait_line "$DATA/c.out" "$secs"); then
		fail "$name" "no answer within $secs s while the file system's $ops waited: $(lastline "$DATA/c.err")"
	elif [[ $line != $pattern ]]; then
		fail "$name" "'$line' $(lastline "$DATA/c.err")"
	elif status_answers "$name"; then
		th=$(threads)
		if [ "${th:-0}" -gt $((${th0:-0} + 32)) ]; then
			fail "$name" "the daemon has $th threads, $th0 before: more than 32 closers"
		else
			ok "$name: answered in $(elapsed "$t0") s, status answered ($th threads, $th0 before): $line"
		fi
	fi
	gate_open
	wait_bg "$pid" 10 || rc=$?
	if [ "$rc" = 124 ]; then
		fail "$name" "the client still ran 10 s after the gate opened"
	fi
	check_baseline "$name"
}

# The same fd offered as a memfd while its fstat and flush wait: refused at once (only a memfd
# has seals, and only a memfd is fstat()ed), and the refused fd closed off the loop.
gated_call "a FUSE file offered as a memfd while its fstat and flush wait" memfd "getattr flush" 5 \
	"err EBADF *a file that is not a memfd*"

# A registration while flush waits: the fd the client sent becomes the region's (before, the
# loop closed it after taking a duplicate: a FLUSH that held every client and peer).
gated_call "a file registered while the file system's flush waits" register flush 5 "ok [0-9]*"

# The file's fd sent with a request that takes none: refused, and closed off the loop.
gated_call "a FUSE file's fd sent with stats while flush waits" stray flush 5 "err EPROTO *takes no fds*"
# (253 of them, the most one packet may carry: no thread each)
STRAYS=253 gated_call "a FUSE file's fd 253 times with stats while flush waits" stray flush 5 \
	"err EPROTO *takes no fds*"

# A registration the file system answers: the region is a usable file region.
rm -f "$DATA/gate" "$DATA/gate.entered"
line=$($PY "$DATA/client.py" copy "$MNT/data" "$DATA/gate" none 2>"$DATA/c.err")
if [ "$line" = ok ]; then
	ok "a file region on the FUSE file system: registered, read locally, bytes compared"
else
	fail "a file region on the FUSE file system" "'$line' $(lastline "$DATA/c.err")"
fi
check_baseline "a registration the file system answers"

# A small local copy out of the file while its reads wait (uncached: nothing read it before).
rm -f "$DATA/gate" "$DATA/gate.entered"
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null
$PY "$DATA/client.py" copy "$MNT/data" "$DATA/gate" read >"$DATA/c.out" 2>"$DATA/c.err" &
pid=$!
name="a small local copy whose file reads wait"
if ! entered read; then
	fail "$name" "the daemon never reached read: $(lastline "$DATA/c.err") $(lastline "$DATA/c.out")"
elif status_answers "$name"; then
	rm -f "$DATA/gate"
	rc=0
	wait_bg "$pid" "$T" || rc=$?
	line=$(firstline "$DATA/c.out")
	if [ "$line" = ok ]; then
		ok "$name: status answered; the copy completed once the gate opened"
	else
		fail "$name" "'$line' (exit $rc) $(lastline "$DATA/c.err")"
	fi
fi
rm -f "$DATA/gate"
kill9 "$pid"
check_baseline "$name"

# Two local copies out of the file while its reads wait hold the workers of files that may
# hang (local.c's remote file systems' lane), never the copy workers: meanwhile a 64 MiB copy
# between two memory regions (a job for a copy worker) completes, bytes compared. With one lane
# for all, both copy workers waited in the file system and so did every copy of the daemon.
# (One client: another open(2) of the file would wait for the page the first read locks.)
cat >"$DATA/twocopies.py" <<'EOF2'
import os, sys
import xferd
c = xferd.Connector(socket=os.environ["SOCK"])
f = xferd.File(sys.argv[1], "r", length=4096)
m1, m2 = c.pool(4096).empty(4096), c.pool(4096).empty(4096)
f.register_memory(c)
r1, r2 = c.readable(f), c.readable(f)
with open(sys.argv[2] + ".tmp", "w") as g:
    g.write("read\n")
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
o1, o2 = c.read(r1.metadata(), m1), c.read(r2.metadata(), m2)
print("posted", flush=True)
o1.wait(60)
o2.wait(60)
want = bytes(i % 251 for i in range(4096))
print("ok" if bytes(m1) == want and bytes(m2) == want else "err EBADMSG bytes differ", flush=True)
EOF2
cat >"$DATA/memcopy.py" <<'EOF2'
import os
import numpy
import xferd
c = xferd.Connector(socket=os.environ["SOCK"])
n = 64 << 20
src, dst = c.pool(n).empty(n), c.pool(n).empty(n)  # (numpy arrays of uint8)
src.reshape(-1, 256)[:] = numpy.arange(256, dtype=numpy.uint8)  # (i % 256, no temporary)
op = c.readable(src)
c.read(op.metadata(), dst).wait(10)
print("ok" if numpy.array_equal(dst, src) else "err EBADMSG bytes differ", flush=True)
EOF2
rm -f "$DATA/gate" "$DATA/gate.entered"
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null
name="a memory copy while two copies wait in the file system"
: >"$DATA/h.out"
$PY "$DATA/twocopies.py" "$MNT/data" "$DATA/gate" >"$DATA/h.out" 2>"$DATA/h.err" &
pid=$!
if ! wait_line "$DATA/h.out" 20 >/dev/null || ! entered read; then
	fail "$name" "the copies never got under way: $(lastline "$DATA/h.out") $(lastline "$DATA/h.err")"
else
	t0=$(now_ms)
	line=$(timeout -k 1 30 $PY "$DATA/memcopy.py" 2>"$DATA/m.err")
	case $line in
	ok) ok "$name: the memory copy completed in $(elapsed "$t0") s" ;;
	*) fail "$name" "'$line' after $(elapsed "$t0") s: $(lastline "$DATA/m.err")" ;;
	esac
fi
rm -f "$DATA/gate"
rc=0
wait_bg "$pid" "$T" || rc=$?
line=$(lastline "$DATA/h.out")
[ "$line" = ok ] || fail "$name: the copies out of the file once the gate opened" \
	"'$line' (exit $rc) $(lastline "$DATA/h.err")"
check_baseline "$name"

# The daemon's close(2) of a file region's fd (FUSE: a FLUSH) while flush waits: the client
# registers the file, closes the gate, deregisters it (the daemon closes its fd, on a thread),
# then closes its own fd, both waiting in the file system until the gate opens. (It hung a CI
# run once: c.out still held the last case's "ok" when wait_line read it, before the client's
# redirection emptied it, so the gate closed before the registration; the loop's close of the
# fd the client sent then waited in the flush, and the client, answered only once the gate
# opened, polled for a gate that never came again. The client closes the gate itself now, and
# c.out is emptied before the fork.)
flush_case()
{
	local name="a file region deregistered while the file system's flush waits" pid line rc=0
	rm -f "$DATA/gate" "$DATA/gate.entered"
	: >"$DATA/c.out"
	gate_watch 30
	$PY "$DATA/client.py" release "$MNT/data" "$DATA/gate" flush >"$DATA/c.out" 2>"$DATA/c.err" &
	pid=$!
	if ! line=$(wait_line "$DATA/c.out" "$T") || [ "${line%% *}" != ok ]; then
		fail "$name" "registration: '${line:-}' $(lastline "$DATA/c.err")"
	elif ! entered flush 2; then
		# (two flushes: the daemon's close, then the client's own once it is answered)
		fail "$name" "not two flushes waiting: $(tr '\n' ' ' <"$DATA/gate.entered" 2>/dev/null)$(lastline "$DATA/c.err")"
	elif status_answers "$name"; then
		ok "$name: status answered"
	fi
	gate_open
	wait_bg "$pid" 10 || rc=$?
	if [ "$rc" = 124 ]; then
		fail "$name" "the client still ran 10 s after the gate opened; file system ended"
		fuse_abort
	fi
	check_baseline "$name"
}
flush_case

# SIGTERM while a registration's fstat waits: the daemon gives up on it and stops (its exit
# itself waits for the thread inside the file system, which only the file system ends: the gate
# opens a second later), exit status 0; the client is told.
rm -f "$DATA/gate" "$DATA/gate.entered"
$PY "$DATA/client.py" register "$MNT/data" "$DATA/gate" getattr >"$DATA/c.out" 2>"$DATA/c.err" &
pid=$!
name="SIGTERM while a registration waits in the file system"
if ! entered getattr; then
	fail "$name" "the daemon never reached getattr: $(lastline "$DATA/c.err")"
	rm -f "$DATA/gate"
fi
(sleep 1 && rm -f "$DATA/gate") &
if xc_stop 0; then
	rc=0
	wait_bg "$pid" "$T" || rc=$?
	line=$(firstline "$DATA/c.out")
	case $line in
	"err "*) ok "$name: exit status 0; the client was told: ${line#err }" ;;
	*) fail "$name" "the client: '$line' (exit $rc) $(lastline "$DATA/c.err")" ;;
	esac
else
	fail "$name" "$(logtail 0)"
fi
summary
