#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# xferctl against a real xferd on a private socket: file transfers both ways (bytes compared
# with cmp), every listing with and without --json, the exit statuses (0 done, 1 failed,
# 2 usage), and landing files (none left by an xferctl killed -9; the named fallback). Prints "ok - " / "FAIL - " lines and a final "N passed, N failed".
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) BIN=$BUILD ;; *) BIN=$ROOT/$BUILD ;; esac
XFERD=${XFERD_BIN:-$BIN/xferd}
CTL=$BIN/xferctl
T=30 # seconds: "it ended at all"

passed=0
failed=0
bg_pids=()
DIR=$(mktemp -d /tmp/xferctl-test.XXXXXX)
SOCK=$DIR/xferd.sock
DPID=

ok() { echo "ok - $1"; passed=$((passed + 1)); }
fail() {
	echo "FAIL - $1 ($2)"
	failed=$((failed + 1))
}

cleanup() {
	for p in "${bg_pids[@]}" $DPID; do
		kill -9 "$p" 2>/dev/null
	done
	wait 2>/dev/null
	rm -rf "$DIR"
}
trap cleanup EXIT

ctl() { timeout $T "$CTL" --socket "$SOCK" "$@"; }

# Waits up to $T s for background job $1; returns its exit status (124 on timeout).
wait_bg() {
	local i
	for ((i = 0; i < T * 20; i++)); do
		if ! kill -0 "$1" 2>/dev/null; then
			wait "$1"
			return
		fi
		sleep 0.05
	done
	kill -9 "$1" 2>/dev/null
	wait "$1" 2>/dev/null
	return 124
}

# Waits until file $1 holds one complete line; prints it.
wait_line() {
	local i
	for ((i = 0; i < T * 20; i++)); do
		if [ -s "$1" ] && [ "$(tail -c 1 "$1" | od -An -c | tr -d ' ')" = '\n' ]; then
			head -n 1 "$1"
			return 0
		fi
		sleep 0.05
	done
	return 1
}

json_ok() { python3 -c 'import json,sys; json.load(sys.stdin)'; }

start_daemon() {
	local i
	if [ ! -x "$XFERD" ] || [ ! -x "$CTL" ]; then
		fail start_daemon "no $XFERD or $CTL: build first"
		return 1
	fi
	"$XFERD" --socket "$SOCK" --foreground --log-level warn 2>"$DIR/xferd.log" &
	DPID=$!
	for ((i = 0; i < 200; i++)); do
		if "$CTL" --socket "$SOCK" status >/dev/null 2>&1; then
			return 0
		fi
		kill -0 "$DPID" 2>/dev/null || break
		sleep 0.05
	done
	fail start_daemon "xferd did not come up: $(tail -n 5 "$DIR/xferd.log")"
	return 1
}

# ---- file transfers ----

test_readable_read() {
	local name=readable_read_$1 in=$DIR/rr-in-$1 out=$DIR/rr-out-$1 meta=$DIR/rr-meta-$1 pid
	head -c "$1" /dev/urandom >"$in"
	ctl --meta-file "$meta" readable "$in" >"$DIR/rr-out" 2>"$DIR/rr-err" &
	pid=$!
	bg_pids+=("$pid")
	if ! wait_line "$meta" >/dev/null; then
		fail "$name" "readable wrote no metadata file: $(cat "$DIR/rr-err")"
		return
	fi
	[ -s "$DIR/rr-out" ] && { fail "$name" "metadata on stdout too"; return; }
	if ! ctl read "@$meta" "$out" 2>"$DIR/rr-err2"; then
		fail "$name" "read exited $?: $(cat "$DIR/rr-err2")"
		return
	fi
	[ -s "$DIR/rr-err2" ] && { fail "$name" "read @FILE printed: $(cat "$DIR/rr-err2")"; return; }
	wait_bg "$pid"
	local rc=$?
	[ $rc -eq 0 ] || { fail "$name" "readable exited $rc: $(cat "$DIR/rr-err")"; return; }
	cmp -s "$in" "$out" || { fail "$name" "bytes differ"; return; }
	ok "$name"
}

test_writable_write() {
	local name=writable_write_$1 in=$DIR/ww-in-$1 out=$DIR/ww-out-$1 meta=$DIR/ww-meta-$1 pid
	head -c "$1" /dev/urandom >"$in"
	ctl writable -m "$meta" "$1" "$out" 2>"$DIR/ww-err" &
	pid=$!
	bg_pids+=("$pid")
	if ! wait_line "$meta" >/dev/null; then
		fail "$name" "writable wrote no metadata file: $(cat "$DIR/ww-err")"
		return
	fi
	if ! ctl write - "$in" <"$meta" 2>"$DIR/ww-err2"; then
		fail "$name" "write exited $?: $(cat "$DIR/ww-err2")"
		return
	fi
	wait_bg "$pid"
	local rc=$?
	[ $rc -eq 0 ] || { fail "$name" "writable exited $rc: $(cat "$DIR/ww-err")"; return; }
	cmp -s "$in" "$out" || { fail "$name" "bytes differ"; return; }
	ok "$name"
}

test_read_metadata_from_stdin() {
	local name=read_metadata_from_stdin in=$DIR/si-in out=$DIR/si-out meta=$DIR/si-meta pid
	head -c 70000 /dev/urandom >"$in"
	ctl readable "$in" >"$meta" 2>/dev/null &
	pid=$!
	bg_pids+=("$pid")
	wait_line "$meta" >/dev/null || { fail "$name" "no metadata"; return; }
	ctl read - "$out" <"$meta" 2>"$DIR/si-err" || {
		fail "$name" "read - exited $?: $(cat "$DIR/si-err")"
		return
	}
	wait_bg "$pid" || { fail "$name" "readable failed"; return; }
	cmp -s "$in" "$out" || { fail "$name" "bytes differ"; return; }
	ok "$name"
}

# `readable | read -`: read takes the one line it needs and does not wait for readable to end.
test_pipe_readable_to_read() {
	local name=pipe_readable_to_read rc
	head -c 5000 /dev/urandom >"$DIR/pp-in"
	ctl readable "$DIR/pp-in" 2>"$DIR/pp-err" | ctl read - "$DIR/pp-out" 2>>"$DIR/pp-err"
	rc=$?
	[ $rc -eq 0 ] || { fail "$name" "exit $rc: $(cat "$DIR/pp-err")"; return; }
	cmp -s "$DIR/pp-in" "$DIR/pp-out" || { fail "$name" "bytes differ"; return; }
	ok "$name"
}

# A size mismatch is refused (exit 1) and leaves the writable claimable by the right size.
test_size_mismatch() {
	local name=size_mismatch_exits_1 meta=$DIR/sm-meta out=$DIR/sm-out pid m rc
	head -c 8192 /dev/urandom >"$DIR/sm-8k"
	head -c 4096 /dev/urandom >"$DIR/sm-4k"
	ctl writable 4096 "$out" >"$meta" 2>/dev/null &
	pid=$!
	bg_pids+=("$pid")
	m=$(wait_line "$meta") || { fail "$name" "no metadata"; return; }
	ctl write "@$meta" "$DIR/sm-8k" 2>"$DIR/sm-err"
	rc=$?
	[ $rc -eq 1 ] || { fail "$name" "write of 8192 into 4096 exited $rc"; return; }
	[ -s "$DIR/sm-err" ] || { fail "$name" "no message on stderr"; return; }
	ctl write "@$meta" "$DIR/sm-4k" 2>/dev/null || { fail "$name" "the right size failed after"; return; }
	wait_bg "$pid" || { fail "$name" "writable failed"; return; }
	cmp -s "$DIR/sm-4k" "$out" || { fail "$name" "bytes differ"; return; }
	ok "$name"
}

# ---- listings ----

test_listings() {
	local c out rc
	for c in status regions ops clients peers devices stats; do
		out=$(ctl "$c" 2>&1)
		rc=$?
		if [ $rc -ne 0 ]; then
			fail "listing_$c" "exit $rc: $out"
			continue
		fi
		out=$(ctl --json "$c" 2>&1)
		rc=$?
		if [ $rc -ne 0 ]; then
			fail "listing_${c}_json" "exit $rc: $out"
			continue
		fi
		if ! printf '%s' "$out" | json_ok 2>/dev/null; then
			fail "listing_${c}_json" "not JSON: ${out:0:200}"
			continue
		fi
		ok "listing_$c"
	done
}

# With an operation pending, ops --json shows it and regions --json its region.
test_listings_show_pending_op() {
	local name=listings_show_pending_op meta=$DIR/lp-meta pid m
	head -c 5000 /dev/urandom >"$DIR/lp-in"
	ctl readable "$DIR/lp-in" >"$meta" 2>/dev/null &
	pid=$!
	bg_pids+=("$pid")
	m=$(wait_line "$meta") || { fail "$name" "no metadata"; return; }
	if ! ctl --json ops | python3 -c '
import json, sys
ops = json.load(sys.stdin)["ops"]
sys.exit(0 if any(o["kind"] == "readable" and o["state"] == "INITIALIZED" and
                  o["length"] == 5000 for o in ops) else 1)'; then
		fail "$name" "ops --json does not list the pending readable"
		return
	fi
	if ! ctl --json regions | python3 -c '
import json, sys
sys.exit(0 if any(r["length"] == 5000 for r in json.load(sys.stdin)["regions"]) else 1)'; then
		fail "$name" "regions --json does not list its region"
		return
	fi
	ctl read "@$meta" "$DIR/lp-out" 2>/dev/null || { fail "$name" "read failed"; return; }
	wait_bg "$pid" || { fail "$name" "readable failed"; return; }
	cmp -s "$DIR/lp-in" "$DIR/lp-out" || { fail "$name" "bytes differ"; return; }
	ok "$name"
}

# ---- metadata: a capability, never on a command line unless asked for ----

# The metadata file is 0600 whatever the umask, and an existing file is never overwritten.
test_meta_file_mode() {
	local name=meta_file_0600_under_umask_022 meta=$DIR/mm-meta pid mode rc
	head -c 1000 /dev/urandom >"$DIR/mm-in"
	(umask 022 && exec "$CTL" --socket "$SOCK" --meta-file "$meta" readable "$DIR/mm-in") \
		>/dev/null 2>"$DIR/mm-err" &
	pid=$!
	bg_pids+=("$pid")
	wait_line "$meta" >/dev/null || { fail "$name" "no metadata file: $(cat "$DIR/mm-err")"; return; }
	mode=$(stat -c %a "$meta")
	[ "$mode" = 600 ] || { fail "$name" "mode $mode"; return; }
	cp "$meta" "$DIR/mm-copy"
	ctl --meta-file "$meta" readable "$DIR/mm-in" >/dev/null 2>"$DIR/mm-err2"
	rc=$?
	[ $rc -eq 1 ] || { fail "$name" "a second readable onto the same file exited $rc"; return; }
	grep -q "$meta" "$DIR/mm-err2" || { fail "$name" "no message naming the file"; return; }
	cmp -s "$meta" "$DIR/mm-copy" || { fail "$name" "the existing file was changed"; return; }
	ctl read "@$meta" "$DIR/mm-out" 2>/dev/null || { fail "$name" "read failed"; return; }
	wait_bg "$pid" || { fail "$name" "readable failed"; return; }
	cmp -s "$DIR/mm-in" "$DIR/mm-out" || { fail "$name" "bytes differ"; return; }
	ok "$name"
}

# A literal metadata argument still works, with a one-line warning naming the exposure.
test_literal_metadata_warns() {
	local name=literal_metadata_warns meta=$DIR/lw-meta pid m
	head -c 3000 /dev/urandom >"$DIR/lw-in"
	ctl readable "$DIR/lw-in" >"$meta" 2>/dev/null &
	pid=$!
	bg_pids+=("$pid")
	m=$(wait_line "$meta") || { fail "$name" "no metadata"; return; }
	ctl read "$m" "$DIR/lw-out" 2>"$DIR/lw-err" || { fail "$name" "read failed: $(cat "$DIR/lw-err")"; return; }
	wait_bg "$pid" || { fail "$name" "readable failed"; return; }
	cmp -s "$DIR/lw-in" "$DIR/lw-out" || { fail "$name" "bytes differ"; return; }
	[ "$(wc -l <"$DIR/lw-err")" -eq 1 ] && grep -q 'warning:.*/proc/PID/cmdline' "$DIR/lw-err" ||
		{ fail "$name" "stderr: $(cat "$DIR/lw-err")"; return; }
	ok "$name"
}

# Empty and oversized metadata (file and stdin) are refused with one line naming why.
test_meta_refused_sizes() {
	local src rc
	: >"$DIR/mr-empty"
	printf '\n' >"$DIR/mr-newline"
	head -c 16385 /dev/zero | tr '\0' A >"$DIR/mr-big"
	head -c 100 /dev/urandom >"$DIR/mr-in"
	for src in empty newline big; do
		ctl read "@$DIR/mr-$src" "$DIR/mr-out" >/dev/null 2>"$DIR/mr-err"
		rc=$?
		if [ $rc -ne 1 ] || ! grep -Eq 'no metadata|larger than 16384' "$DIR/mr-err"; then
			fail "meta_refused_file_$src" "exit $rc: $(cat "$DIR/mr-err")"
		else
			ok "meta_refused_file_$src"
		fi
		ctl write - "$DIR/mr-in" <"$DIR/mr-$src" >/dev/null 2>"$DIR/mr-err"
		rc=$?
		if [ $rc -ne 1 ] || ! grep -Eq 'no metadata|larger than 16384' "$DIR/mr-err"; then
			fail "meta_refused_stdin_$src" "exit $rc: $(cat "$DIR/mr-err")"
		else
			ok "meta_refused_stdin_$src"
		fi
	done
}

# ---- listings of any size ----

# A client (raw protocol, Python) that holds $1 regions and $2 readable ops, checks list.ops'
# pages itself (ids ascending, no repeats, each "next" the last id), prints its client id and
# waits for stdin to close.
HOLDER=$(
	cat <<'PY'
import array, fcntl, json, os, socket, sys
nreg, nops = int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sys.argv[1])
rid = 0
def call(method, params=None, fd=None):
    global rid
    rid += 1
    msg = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    data = json.dumps(msg).encode()
    if fd is None:
        s.send(data)
    else:
        socket.send_fds(s, [data], [fd])
    while True:
        rep = json.loads(s.recv(70000))
        if rep.get("id") == rid:
            break
    if "error" in rep:
        sys.exit("%s refused: %s" % (method, rep["error"]))
    return rep["result"]
me = call("hello", {"version": 1, "client": "holder"})["client"]
regions = []
for i in range(nreg):
    fd = os.memfd_create("r", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 4096)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    regions.append(call("region.register", {"name": "holder-region-%04d" % i}, fd)["region"])
    os.close(fd)
for i in range(nops):
    call("op.readable", {"descs": [{"region": regions[i % nreg], "offset": 0, "length": 4096}],
                         "timeout_ms": 600000})
after, ids = None, []
while True:
    res = call("list.ops", {"limit": 7} if after is None else {"after": after, "limit": 7})
    page = [o["op"] for o in res["ops"]]
    if len(page) > 7 or page != sorted(page) or (after is not None and page and page[0] <= after):
        sys.exit("bad page after %s: %s" % (after, page))
    ids += page
    if "next" not in res:
        break
    if res["next"] != page[-1]:
        sys.exit("next %s is not the last id %s" % (res["next"], page[-1]))
    after = res["next"]
mine = [i for i in ids if True]
if len(ids) != len(set(ids)) or len(ids) < nops:
    sys.exit("paged list.ops: %d ids, %d distinct, want >= %d" % (len(ids), len(set(ids)), nops))
print(me, flush=True)
sys.stdin.read()
PY
)

# Counts the rows of listing $1 (--json) that belong to client $2.
count_json() {
	python3 -c '
import json, sys
rows = json.load(sys.stdin)[sys.argv[1]]
print(sum(1 for r in rows if r["client"] == int(sys.argv[2])))' "$@"
}

test_listings_of_any_size() {
	local name=listings_of_any_size fifo=$DIR/holder.in pid me n rows
	mkfifo "$fifo"
	timeout $((T * 4)) python3 -c "$HOLDER" "$SOCK" 700 1500 <"$fifo" >"$DIR/holder.out" \
		2>"$DIR/holder.err" &
	pid=$!
	bg_pids+=("$pid")
	exec 9>"$fifo"
	me=$(wait_line "$DIR/holder.out") || {
		fail "$name" "holder did not get ready: $(tail -n 3 "$DIR/holder.err")"
		exec 9>&-
		return
	}
	for what in ops:1500 regions:700; do
		n=$(ctl --json "${what%%:*}" 2>"$DIR/big-err" | count_json "${what%%:*}" "$me")
		if [ "$n" != "${what#*:}" ]; then
			fail "${name}_${what%%:*}_json" "$n of client $me listed: $(cat "$DIR/big-err")"
		else
			ok "${name}_${what%%:*}_json"
		fi
		rows=$(ctl "${what%%:*}" 2>"$DIR/big-err" | awk -v me="$me" '
			NR == 1 { for (i = 1; i <= NF; i++) if ($i == "CLIENT") col = i; next }
			$col == me { n++ } END { print n + 0 }')
		if [ "$rows" != "${what#*:}" ]; then
			fail "${name}_${what%%:*}_table" "$rows rows of client $me: $(cat "$DIR/big-err")"
		else
			ok "${name}_${what%%:*}_table"
		fi
	done
	exec 9>&-
	wait_bg "$pid"
}

# ---- daemon-supplied text reaches the terminal escaped ----

# A fake xferd (Python) whose listings and errors carry escape sequences, as a hostile peer's
# cause or endpoint would: xferctl must print none of their control bytes raw.
FAKE=$(
	cat <<'PY'
import json, os, socket, sys
EVIL = "\x1b]0;pwned\x07\x1b[2J\x7f\u009b"
ls = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
ls.bind(sys.argv[1])
ls.listen(8)
print("ready", flush=True)
results = {
    "hello": {"version": 1, "daemon": "xferd fake" + EVIL, "node": "n" + EVIL, "epoch": 1,
              "client": 1, "uid": 0, "max_packet": 65536},
    "list.regions": {"regions": [{"region": 1, "name": "r" + EVIL, "client": 1, "pid": 1,
                                  "uid": 0, "length": 4096, "ops": 0, "register_us": 1}]},
    "list.ops": {"ops": [{"op": 1, "kind": "read", "state": "ERRORED", "length": 1,
                          "bytes": 0, "transport": "tcp", "peer": "p" + EVIL, "client": 1,
                          "timeout_ms": 1, "age_ms": 1, "errno": "EIO",
                          "cause": "c" + EVIL}]},
    "stats": {"daemon": "xferd fake" + EVIL, "node": "n" + EVIL, "uptime_ms": 1},
    "list.peers": {"peers": [{"node": "n", "endpoint": "e" + EVIL, "state": "connected",
                              "conns": [{"id": 1, "role": "r" + EVIL, "remote": "a" + EVIL,
                                         "tcp": {"cc": "c" + EVIL, "state": "s" + EVIL}},
                                        {"id": 2, "role": "data", "tcp_error": "t" + EVIL}]}]},
}
while True:
    c, _ = ls.accept()
    while True:
        data = c.recv(70000)
        if not data:
            break
        req = json.loads(data)
        m = req["method"]
        if m == "list.peers":  # (what each form of xferctl peers asks: test_peers_brief)
            print("list.peers", json.dumps(req.get("params"), sort_keys=True), flush=True)
        if m in results:
            rep = {"jsonrpc": "2.0", "id": req["id"], "result": results[m]}
        else:
            rep = {"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32000,
                   "message": "refused" + EVIL, "data": {"errno": "EIO"}}}
        c.send(json.dumps(rep).encode())
    c.close()
PY
)

test_daemon_text_escaped() {
	local fake=$DIR/fake.sock pid c out args
	python3 -c "$FAKE" "$fake" >"$DIR/fake.out" 2>"$DIR/fake.err" &
	pid=$!
	bg_pids+=("$pid")
	wait_line "$DIR/fake.out" >/dev/null || { fail daemon_text_escaped "no fake daemon"; return; }
	for c in status regions ops peers peers-tcp clients; do
		args=("$c")
		[ "$c" = peers-tcp ] && args=(peers --tcp)
		timeout $T "$CTL" --socket "$fake" "${args[@]}" >"$DIR/fake-$c" 2>&1
		timeout $T "$CTL" --socket "$fake" --json "${args[@]}" >>"$DIR/fake-$c" 2>&1
		if LC_ALL=C grep -q "$(printf '[\001-\037\177\302]')" <(tr -d '\n' <"$DIR/fake-$c"); then
			fail "daemon_text_escaped_$c" "raw control bytes: $(od -c "$DIR/fake-$c" | head -5)"
		elif ! grep -qF '\x1b]0;pwned\x07\x1b[2J\x7f\xc2\x9b' "$DIR/fake-$c" ||
			{ [ "$c" != clients ] && ! grep -qF '\u001B]0;pwned\u0007\u001B[2J\u007f\u009B' "$DIR/fake-$c"; }; then
			fail "daemon_text_escaped_$c" "no escaped text: $(cat "$DIR/fake-$c")"
		else
			ok "daemon_text_escaped_$c"
		fi
	done
	kill "$pid" 2>/dev/null
}

# xferctl peers as a table asks list.peers without the connections' TCP ("conns": false, which
# costs the daemon ~24 us per connection); --json and --tcp show them, so they ask with.
test_peers_brief() {
	local fake=$DIR/brief.sock pid args want got form seen=0
	python3 -c "$FAKE" "$fake" >"$DIR/brief.out" 2>"$DIR/brief.err" &
	pid=$!
	bg_pids+=("$pid")
	wait_line "$DIR/brief.out" >/dev/null || { fail peers_brief "no fake daemon"; return; }
	for form in table json tcp; do
		args=(peers)
		want='list.peers {"conns": false}'
		[ "$form" = json ] && args=(--json peers) && want='list.peers {}'
		[ "$form" = tcp ] && args=(peers --tcp) && want='list.peers {}'
		timeout $T "$CTL" --socket "$fake" "${args[@]}" >/dev/null 2>&1
		got=$(grep '^list.peers ' "$DIR/brief.out" | tail -n +$((seen + 1)))
		seen=$((seen + 1))
		if [ "$got" = "$want" ]; then
			ok "peers_brief_$form: $got"
		else
			fail "peers_brief_$form" "asked '$got', not '$want'"
		fi
	done
	kill "$pid" 2>/dev/null
}

# ---- exit statuses ----

test_usage_errors() {
	local args rc
	while IFS= read -r args; do
		# shellcheck disable=SC2086
		ctl $args >/dev/null 2>&1
		rc=$?
		if [ $rc -eq 2 ]; then
			ok "usage_exit_2: xferctl $args"
		else
			fail "usage_exit_2: xferctl $args" "exit $rc"
		fi
	done <<'EOF'

no-such-command
read onlyonearg
readable
writable abc out
writable 0 out
--meta-file x ops
-m x read @m out
--timeout 0 status
--tcp ops
peers --tcp extra
--no-such-option status
EOF
}

# Bad metadata: exit 1 with exactly one line on stderr.
test_bad_metadata() {
	local m rc lines
	head -c 100 /dev/urandom >"$DIR/bm-in"
	for m in xfer1.garbage not-metadata xfer1.eyJ2IjoxLCJraW5kIjoicmVhZGFibGUifQ; do
		printf '%s\n' "$m" >"$DIR/bm-meta"
		ctl read "@$DIR/bm-meta" "$DIR/bm-out" >/dev/null 2>"$DIR/bm-err"
		rc=$?
		lines=$(wc -l <"$DIR/bm-err")
		if [ $rc -ne 1 ] || [ "$lines" -ne 1 ]; then
			fail "bad_metadata_read: $m" "exit $rc, $lines stderr lines: $(cat "$DIR/bm-err")"
		else
			ok "bad_metadata_read: $m"
		fi
		ctl write - "$DIR/bm-in" <"$DIR/bm-meta" >/dev/null 2>"$DIR/bm-err"
		rc=$?
		lines=$(wc -l <"$DIR/bm-err")
		if [ $rc -ne 1 ] || [ "$lines" -ne 1 ]; then
			fail "bad_metadata_write: $m" "exit $rc, $lines stderr lines: $(cat "$DIR/bm-err")"
		else
			ok "bad_metadata_write: $m"
		fi
	done
}

test_no_daemon() {
	local rc lines
	timeout $T "$CTL" --socket "$DIR/nobody-here.sock" status >/dev/null 2>"$DIR/nd-err"
	rc=$?
	lines=$(wc -l <"$DIR/nd-err")
	if [ $rc -eq 1 ] && [ "$lines" -eq 1 ]; then
		ok no_daemon_exits_1
	else
		fail no_daemon_exits_1 "exit $rc, $lines stderr lines"
	fi
}

# ---- landing files (OUTFILE of read and writable) ----

# Prints the daemon's region and operation counts: "REGIONS OPS".
daemon_counts() {
	ctl --json status | python3 -c '
import json, sys
s = json.load(sys.stdin)["stats"]
print(s["regions"], s["ops"])'
}

# Waits up to 5 s for the daemon's region and operation counts to be back at $1.
wait_daemon_counts() {
	local i
	for ((i = 0; i < 100; i++)); do
		[ "$(daemon_counts)" = "$1" ] && return 0
		sleep 0.05
	done
	return 1
}

# test_landing_killed [--direct]: `writable SIZE OUT` SIGKILLed while it waits for a writer
# leaves nothing in OUT's directory (its landing file has no name until the transfer is done)
# and no region or operation in the daemon.
test_landing_killed() {
	local name=landing_killed${1:+_direct} d=$DIR/lk${1:+d} pid before
	mkdir -p "$d"
	before=$(daemon_counts)
	# (not through ctl: the SIGKILL must reach xferctl, not timeout(1))
	"$CTL" --socket "$SOCK" ${1:+"$1"} writable -m "$d.meta" 1048576 "$d/out" 2>"$d.err" &
	pid=$!
	bg_pids+=("$pid")
	if ! wait_line "$d.meta" >/dev/null; then
		if [ -n "${1:-}" ] && grep -q 'O_DIRECT\|direct I/O' "$d.err"; then
			ok "$name # SKIP $(head -c 120 "$d.err")"
		else
			fail "$name" "writable wrote no metadata: $(cat "$d.err")"
		fi
		kill -9 "$pid" 2>/dev/null
		return
	fi
	local waiting
	waiting=$(ls -A "$d" | tr '\n' ' ')
	kill -9 "$pid"
	wait "$pid" 2>/dev/null
	if [ -n "$waiting" ]; then
		fail "$name" "while waiting for a writer, OUT's directory held: $waiting"
	elif [ -n "$(ls -A "$d")" ]; then
		fail "$name" "left behind: $(ls -A "$d" | tr '\n' ' ')"
	elif ! wait_daemon_counts "$before"; then
		fail "$name" "the daemon's regions and ops went from $before to $(daemon_counts)"
	else
		ok "$name"
	fi
}

# test_landing_named: on a file system without O_TMPFILE (tests/preload/notmpfile.c makes it
# so), the landing file is OUT.xferctl-XXXXXX while `writable` waits; the write lands in OUT
# byte for byte and that name is gone.
test_landing_named() {
	local name=landing_named d=$DIR/ln pid rc waiting
	mkdir -p "$d"
	if ! cc -shared -fPIC -O2 -o "$DIR/notmpfile.so" "$ROOT/tests/preload/notmpfile.c" -ldl; then
		fail "$name" "could not build tests/preload/notmpfile.c"
		return
	fi
	head -c 3000017 /dev/urandom >"$DIR/ln-in"
	# (ASan wants its runtime first among the libraries; the shim comes before it here.)
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
		LD_PRELOAD=$DIR/notmpfile.so ctl writable -m "$d.meta" 3000017 "$d/out" 2>"$d.err" &
	pid=$!
	bg_pids+=("$pid")
	if ! wait_line "$d.meta" >/dev/null; then
		fail "$name" "writable wrote no metadata: $(cat "$d.err")"
		return
	fi
	waiting=$(ls -A "$d" | tr '\n' ' ')
	ctl write "@$d.meta" "$DIR/ln-in" 2>"$d.err2" || {
		fail "$name" "write exited $?: $(cat "$d.err2")"
		return
	}
	wait_bg "$pid"
	rc=$?
	if [ $rc -ne 0 ]; then
		fail "$name" "writable exited $rc: $(cat "$d.err")"
	elif ! [[ $waiting =~ ^out\.xferctl-[A-Za-z0-9]{6}\ $ ]]; then
		fail "$name" "while waiting, OUT's directory held '$waiting', not one out.xferctl-XXXXXX"
	elif ! cmp -s "$DIR/ln-in" "$d/out"; then
		fail "$name" "bytes differ"
	elif [ "$(ls -A "$d")" != out ]; then
		fail "$name" "left behind: $(ls -A "$d" | tr '\n' ' ')"
	else
		ok "$name"
	fi
}

# test_outfile_not_regular: read into a directory and writable onto a FIFO are refused before
# any byte moves, naming the rule: the offer is still there for a read into a file, and
# writable does not wait for a writer first.
# offer_file D SIZE: D.in, SIZE random bytes, offered by xferctl readable in the background (its
# pid in offer_pid, its metadata in D.meta, its stderr in D.perr). Fails if no metadata came.
offer_file() {
	head -c "$2" /dev/urandom >"$1.in"
	ctl readable -m "$1.meta" "$1.in" 2>"$1.perr" &
	offer_pid=$!
	bg_pids+=("$offer_pid")
	wait_line "$1.meta" >/dev/null
}

test_outfile_not_regular() {
	local name=outfile_not_regular d=$DIR/onr rc=0
	mkdir -p "$d/dir"
	mkfifo "$d/fifo"
	if ! offer_file "$d" 65536; then
		fail "$name" "readable wrote no metadata: $(cat "$d.perr")"
		return
	fi
	ctl read "@$d.meta" "$d/dir" 2>"$d.err" || rc=$?
	if [ $rc -ne 1 ] || ! grep -q 'dir is a directory: OUTFILE must be a regular file' "$d.err"; then
		fail "$name" "read into a directory: exit $rc: $(cat "$d.err")"
		return
	fi
	if ! ctl read "@$d.meta" "$d/out" 2>"$d.err" || ! wait_bg "$offer_pid" ||
		! cmp -s "$d.in" "$d/out"; then
		fail "$name" "the offer was taken by the refused read: $(cat "$d.err" "$d.perr")"
		return
	fi
	rc=0
	ctl --timeout 5000 writable 10 "$d/fifo" 2>"$d.err" || rc=$?
	if [ $rc -ne 1 ] || ! grep -q 'fifo is a FIFO: OUTFILE must be' "$d.err"; then
		fail "$name" "writable onto a FIFO: exit $rc: $(cat "$d.err")"
	elif [ "$(ls -A "$d" | tr '\n' ' ')" != "dir fifo out " ]; then
		fail "$name" "the directory holds: $(ls -A "$d" | tr '\n' ' ')"
	else
		ok "$name"
	fi
}

# test_outfile_symlink: a symlink at OUTFILE is replaced by the landed file, as mv replaces one
# (README, xferctl.1): its target keeps its bytes, and a target in another directory is never
# written through the link.
test_outfile_symlink() {
	local name=outfile_symlink d=$DIR/osl
	mkdir -p "$d/other"
	echo "the target's own bytes" >"$d/other/target"
	ln -s other/target "$d/link"
	if ! offer_file "$d" 100000; then
		fail "$name" "readable wrote no metadata: $(cat "$d.perr")"
	elif ! ctl read "@$d.meta" "$d/link" 2>"$d.err" || ! wait_bg "$offer_pid"; then
		fail "$name" "read onto a symlink failed: $(cat "$d.err" "$d.perr")"
	elif [ -L "$d/link" ] || ! cmp -s "$d.in" "$d/link"; then
		fail "$name" "OUTFILE is not the landed file: $(ls -l "$d/link")"
	elif [ "$(cat "$d/other/target")" != "the target's own bytes" ]; then
		fail "$name" "the link's target was written through"
	else
		ok "$name"
	fi
}

# test_infile_fifo: readable of a FIFO with no writer is refused at once, naming what it is
# (it used to wait in open() for a writer).
test_infile_fifo() {
	local name=infile_fifo d=$DIR/inf rc=0
	mkfifo "$d"
	timeout 5 "$CTL" --socket "$SOCK" readable -m "$d.meta" "$d" 2>"$d.err" || rc=$?
	if [ $rc -eq 1 ] && grep -q 'inf is a FIFO, not a regular file' "$d.err" && [ ! -e "$d.meta" ]; then
		ok "$name"
	else
		fail "$name" "exit $rc: $(cat "$d.err")"
	fi
}

test_daemon_stops_cleanly() {
	local rc
	kill -TERM "$DPID"
	wait_bg "$DPID"
	rc=$?
	DPID=
	if [ $rc -eq 0 ]; then
		ok daemon_sigterm_exit_0
	else
		fail daemon_sigterm_exit_0 "exit $rc: $(tail -n 5 "$DIR/xferd.log")"
	fi
}

if start_daemon; then
	test_readable_read 1
	test_readable_read 1048576
	test_readable_read 3000017
	test_writable_write 1
	test_writable_write 1048576
	test_writable_write 3000017
	test_read_metadata_from_stdin
	test_pipe_readable_to_read
	test_size_mismatch
	test_listings
	test_listings_show_pending_op
	test_meta_file_mode
	test_literal_metadata_warns
	test_meta_refused_sizes
	test_listings_of_any_size
	test_daemon_text_escaped
	test_peers_brief
	test_usage_errors
	test_bad_metadata
	test_landing_killed
	test_landing_killed --direct
	test_landing_named
	test_outfile_not_regular
	test_outfile_symlink
	test_infile_fifo
	test_no_daemon
	test_daemon_stops_cleanly
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
