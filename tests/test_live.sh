#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# xferctl top and xferctl watch against real daemons: two daemons on 127.0.0.1 (TCP, keyed)
# moving 64 MiB (bytes compared) while `top -n 4` samples; watch printing each event of a
# transfer as text and as JSON; watch as nobody seeing nobody's operations and never root's;
# top on a terminal (a pty): clears the screen, quits on q and on Ctrl-C, and restores the
# terminal's modes. Prints "ok - " / "FAIL - " lines and "N passed, N failed".
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
T=60
POLL=0.05
MIB=$((1024 * 1024))
require_built

loopback_setup live
chmod 755 "$D"
DATA=$D/data
mkdir -p "$DATA"
chmod 777 "$DATA"
mkkey "$D/key"
# Socket mode 0666 (438) so that nobody may connect (the watch scope case).
echo '{"socket_mode": 438}' >"$D/any.json"
loopback_start A "$BASE" --peer-key "$D/key" --config "$D/any.json" || abort_setup "A did not start"
loopback_start B $((BASE + 1)) --peer-key "$D/key" || abort_setup "B did not start"
node_sock() { echo "$D/$1.sock"; }
ctl() { timeout -k 2 "$T" "$BUILD/xferctl" --socket "$(node_sock "$1")" "${@:2}"; }

# --- top while 64 MiB moves from A to B -----------------------------------------------------
src=$(mkdata big $((64 * MIB)))
ctl A top -n 4 >"$D/top.out" 2>"$D/top.err" &
TOP=$!
sleep 0.3
bg "$D/p.out" "$D/p.err" A readable "$src"
PP=$BG
if META=$(wait_line "$D/p.out" "$T"); then
	kill -STOP "$PP" # its operation stays listed after the transfer
	ctl B read "$META" "$D/big.dst" 2>"$D/a.err"
	arc=$?
	if [ $arc -eq 0 ] && cmp -s "$src" "$D/big.dst"; then
		ok "64 MiB from A to B during top: identical"
	else
		fail "64 MiB from A to B" "read exit $arc: $(lastline "$D/a.err")"
	fi
else
	fail "readable on A" "$(lastline "$D/p.err")"
fi
wait_bg "$TOP" "$T"
trc=$?
out=$(cat "$D/top.out")
frames=$(grep -c '^THROUGHPUT' <<<"$out")
if [ $trc -eq 0 ] && [ "$frames" = 4 ] && ! grep -q $'\033' <<<"$out"; then
	ok "top -n 4: 4 frames of plain text (stdout not a terminal), exit 0"
else
	fail "top -n 4" "exit $trc, $frames frames: $(head -n 3 "$D/top.err" | tr '\n' '|')"
fi
# A peer row: node (16 hex), tcp, the endpoint, two rates. One of the frames saw bytes move.
peer_rows=$(grep -E '^ +[0-9a-f]{16} +tcp ' <<<"$out")
if [ -n "$peer_rows" ] && grep -vqE ' 0B/s +0B/s$' <<<"$peer_rows"; then
	ok "top: the peer set to B over tcp, with a non-zero rate in a frame: $(grep -vE ' 0B/s +0B/s$' <<<"$peer_rows" | head -n 1 | tr -s ' ')"
else
	fail "top shows throughput per peer and transport" "$(grep -A3 '^THROUGHPUT' <<<"$out" | tail -n 4 | tr '\n' '|')"
fi
# The transfer is over (the read returned) and the readable stays listed (its client stopped):
# a frame taken now shows it whatever the frames above caught, however slow the host.
ctl A top -n 1 >"$D/top1.out" 2>>"$D/top.err"
last=$(awk '/^xferd /{f=""} {f = f $0 "\n"} END {printf "%s", f}' "$D/top1.out")
# REGISTERED 0B: xferctl registers the file itself, and a file region charges no bytes.
if grep -q 'COMPLETE 1 ' <<<"$last" && grep -qE '^ +[0-9]+ xferctl +[0-9]+ +0 +1 +64\.0MiB +0B$' <<<"$last"; then
	ok "top: a frame after the transfer has the COMPLETE readable and xferctl as top client (moved 64.0MiB)"
else
	fail "top: operations by state and top clients" "$(grep -A3 -E '^(OPERATIONS|TOP)' <<<"$last" | tr '\n' '|')"
fi
kill -CONT "$PP" 2>/dev/null
wait_bg "$PP" "$T" >/dev/null

# --- watch: every event of a transfer, text and JSON ------------------------------------------
small=$(mkdata small $((1 * MIB + 3)))
watch_pair() { # watch_pair OUT ARGS...: a watcher of 5 events on A during one local transfer
	local out=$1 w m
	shift
	ctl A watch -n 5 "$@" >"$out" 2>"$out.err" &
	w=$!
	sleep 0.3 # (a line on stderr says it subscribed; the events need not wait for it)
	bg "$D/w.out" "$D/w.err" A readable "$small"
	m=$(wait_line "$D/w.out" "$T") && ctl A read "$m" "$D/small.dst" 2>/dev/null
	wait_bg "$BG" "$T" >/dev/null
	wait_bg "$w" 10
}
watch_pair "$D/watch.txt"
wrc=$?
wt=$(cat "$D/watch.txt")
if [ $wrc -eq 0 ] && [ "$(wc -l <<<"$wt")" = 5 ] &&
	grep -qE '^[0-9:.]+ op [0-9]+ readable INITIALIZED client [0-9]+ 0/1048579 bytes' <<<"$wt" &&
	grep -qE ' readable COMPLETE client [0-9]+ 1048579/1048579 bytes \(1\.0MiB\) transport local peer local' <<<"$wt" &&
	grep -qE ' read COMPLETE ' <<<"$wt" && cmp -s "$small" "$D/small.dst"; then
	ok "watch -n 5: one line per event (readable created, read started, readable started, both ends), exit 0"
else
	fail "watch: the events of a transfer" "exit $wrc: $(tr '\n' '|' <<<"$wt") $(lastline "$D/watch.txt.err")"
fi
watch_pair "$D/watch.json" --json
if /usr/bin/python3 - "$D/watch.json" <<'EOF'; then
import json, sys
lines = open(sys.argv[1]).read().splitlines()
events = [json.loads(l) for l in lines]
assert len(events) == 5, lines
ends = [e for e in events if e["state"] == "COMPLETE"]
assert {e["kind"] for e in ends} == {"readable", "read"}, events
assert all(e["bytes"] == e["length"] == 1048579 for e in ends), events
EOF
	ok "watch --json: 5 events, each one JSON line; both sides COMPLETE with every byte"
else
	fail "watch --json" "$(head -c 300 "$D/watch.json")"
fi

# --- watch as nobody: only nobody's operations ---------------------------------------------
as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$@"; }
as_nobody timeout -k 2 "$T" "$BUILD/xferctl" --socket "$D/A.sock" watch -n 1 >"$D/nb.out" 2>"$D/nb.err" &
NW=$!
sleep 0.3
bg "$D/r.out" "$D/r.err" A readable "$small" # root's: nobody must not see it
m=$(wait_line "$D/r.out" "$T") && ctl A read "$m" "$D/small2.dst" 2>/dev/null
wait_bg "$BG" "$T" >/dev/null
as_nobody timeout -k 2 "$T" "$BUILD/xferctl" --socket "$D/A.sock" -t 200 readable "$small" \
	>"$D/nr.out" 2>"$D/nr.err" &
NR=$!
wait_bg "$NW" 20
nrc=$?
wait_bg "$NR" 20 >/dev/null
nb=$(cat "$D/nb.out")
if [ $nrc -eq 0 ] && [ "$(wc -l <<<"$nb")" = 1 ] && grep -q ' readable INITIALIZED ' <<<"$nb" &&
	grep -q "operations of your uid" "$D/nb.err"; then
	ok "watch as nobody: nobody's operation only, none of root's"
else
	fail "watch as nobody sees only its uid's operations" "exit $nrc: $(tr '\n' '|' <<<"$nb") $(lastline "$D/nb.err")"
fi

# --- top on a terminal: clear, q, Ctrl-C, terminal restored ---------------------------------
cat >"$D/top_tty.py" <<'EOF'
import os, pty, select, sys, termios, time
ctl, sock, key = sys.argv[1:4]
pid, fd = pty.fork()
if pid == 0:
    os.execv(ctl, [ctl, "--socket", sock, "top"])
buf, end = b"", time.time() + 20
while b"TOP CLIENTS" not in buf and time.time() < end:
    if select.select([fd], [], [], 0.5)[0]:
        buf += os.read(fd, 65536)
assert b"\x1b[H\x1b[2J" in buf, "no clear-screen before the frame: %r" % buf[:200]
lflag = termios.tcgetattr(fd)[3]
assert not lflag & termios.ICANON and not lflag & termios.ECHO, "not in raw mode while running"
os.write(fd, b"q" if key == "q" else b"\x03")
end = time.time() + 10
while time.time() < end:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    if select.select([fd], [], [], 0.1)[0]:
        try:
            os.read(fd, 65536)
        except OSError:
            pass
else:
    os.kill(pid, 9)
    raise SystemExit("top did not quit on %s" % key)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "status %r" % status
lflag = termios.tcgetattr(fd)[3]
assert lflag & termios.ICANON and lflag & termios.ECHO, "terminal not restored"
EOF
for key in q ctrl-c; do
	if why=$(/usr/bin/python3 "$D/top_tty.py" "$BUILD/xferctl" "$D/A.sock" "$key" 2>&1); then
		ok "top on a terminal: clears the screen, quits on $key with 0, terminal modes restored"
	else
		fail "top on a terminal quits on $key" "$(tail -n 1 <<<"$why")"
	fi
done

# --- usage ------------------------------------------------------------------------------------
ctl A --count 2 status >/dev/null 2>"$D/u.err"
urc=$?
ctl A top -n 0 >/dev/null 2>"$D/u2.err"
urc2=$?
if [ $urc -eq 2 ] && grep -q 'for top and watch only' "$D/u.err" && [ $urc2 -eq 2 ] &&
	grep -q "bad --count '0'" "$D/u2.err"; then
	ok "--count only for top/watch, and 1 or more: usage errors (exit 2)"
else
	fail "--count usage errors" "$urc $(lastline "$D/u.err"); $urc2 $(lastline "$D/u2.err")"
fi

summary
[ "$failed" -eq 0 ]
