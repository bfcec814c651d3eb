#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench-fileio.sh: sendfile/splice against io_uring for file -> socket and socket -> file, one
# TCP connection between two network namespaces (scripts/netns.sh), 1 GiB per transfer, every
# pairing --rounds times, interleaved, in one run ($BUILD/xferbench_fileio, no xferd):
#   file -> socket: sender sendfile | uring-send | mem (send from memory), receiver drops
#   socket -> file: sender from memory, receiver splice | splice-nb (poll, then non-blocking
#                   splices until drained: the daemon's pattern) | uring-write | uring-splice | pwrite |
#                   mem (drops: the same connection without a file)
# The file read is in the page cache (read once first); the file written is new and fallocated
# (as xferctl sizes its landing files) on the file system of --dir. Prints p50 and worst Gbit/s
# per mode. Options: --size SIZE (1G), --rounds N (3), --dir DIR (TMPDIR or /tmp).
# Needs root (namespaces); falls back to loopback without them, and says so.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build}
SIZE=1G
ROUNDS=3
DIR=${TMPDIR:-/tmp}
while [ $# -gt 0 ]; do
	case $1 in
	--size) SIZE=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--dir) DIR=$2; shift 2 ;;
	*)
		sed -n '3,13s/^# \{0,1\}//p' "$0" >&2
		exit 2
		;;
	esac
done
[ -x "$BUILD/xferbench_fileio" ] || {
	echo "bench-fileio.sh: $BUILD/xferbench_fileio is missing; run 'make' (liburing-dev)" >&2
	exit 1
}
BYTES=$(numfmt --from=iec "$SIZE")

# shellcheck source=scripts/netns.sh
. scripts/netns.sh
RUN=$(mktemp -d "$DIR/bench-fileio.XXXXXX")
cleanup()
{
	xn_down
	rm -rf "$RUN"
}
trap cleanup EXIT
xn_up 2 || exit 1
A1=$(xn_addr 1)
PORT=$((20000 + RANDOM % 20000))
[ "$(xn_mode)" = netns ] || echo "bench-fileio: no network namespaces here: loopback numbers"
head -c "$BYTES" /dev/urandom >"$RUN/src"
cat "$RUN/src" >/dev/null

# one SENDMODE RECVMODE: seconds the receiver took (accept to the last byte in place).
one()
{
	local s=$1 r=$2 i out
	: >"$RUN/recv.out"
	xn_spawn 1 "$RUN/recv.out" "$BUILD/xferbench_fileio" recv --listen "$A1:$PORT" --mode "$r" \
		--file "$RUN/dst" --size "$BYTES"
	for ((i = 0; i < 200; i++)); do
		grep -q listening "$RUN/recv.out" && break
		sleep 0.02
	done
	xn_exec 0 "$BUILD/xferbench_fileio" send --connect "$A1:$PORT" --mode "$s" --file "$RUN/src" \
		--size "$BYTES" || { cat "$RUN/recv.out" >&2; exit 1; }
	wait "$XN_PID" || { cat "$RUN/recv.out" >&2; exit 1; }
	xn_forget "$XN_PID"
	PORT=$((PORT + 1))
	awk -v m="$r" '$1 == m { print $2 }' "$RUN/recv.out"
}

PAIRS="sendfile,mem uring-send,mem mem,mem mem,splice mem,splice-nb mem,uring-write mem,uring-splice
	mem,pwrite"
declare -A T
for ((k = 0; k < ROUNDS; k++)); do
	for p in $PAIRS; do
		T[$p]+="$(one "${p%,*}" "${p#*,}") "
	done
done

echo "bench-fileio: $SIZE per transfer, $ROUNDS rounds, one TCP connection, $(xn_mode)," \
	"written file on $(findmnt -no FSTYPE -T "$RUN" 2>/dev/null || echo '?') ($DIR)"
for p in $PAIRS; do echo "$p ${T[$p]}"; done | /usr/bin/python3 -c '
import statistics, sys
size = int(sys.argv[1])
rows = {l.split()[0]: sorted(float(t) for t in l.split()[1:]) for l in sys.stdin}
g = lambda s: size * 8 / s / 1e9
ref = g(statistics.median(rows["mem,mem"]))
print("  %-22s %10s %7s %12s" % ("sender,receiver", "p50 Gbit/s", "worst", "p50/mem,mem"))
for name, ts in rows.items():
    p50 = g(statistics.median(ts))
    print(f"  {name:22} {p50:10.2f} {g(ts[-1]):7.2f} {p50 / ref:11.2f}x")
' "$BYTES"
