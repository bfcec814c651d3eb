#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# demo-net.sh: the two-node demo. Two xferd daemons in two network namespaces ("node 0" and
# "node 1", joined by veths; scripts/netns.sh), a 1 GiB random file on node 0, then:
#   1. node 0: xferctl readable FILE      node 1: xferctl read @META-FILE COPY   (bytes 0 -> 1)
#   2. node 0: xferctl writable SIZE BACK node 1: xferctl write @META-FILE COPY  (bytes 1 -> 0)
# each checked with sha256sum, with the time and throughput, then everything is torn down.
# Clients run inside their node's namespace, as they would on two machines; the metadata string
# is the only thing handed from one node to the other.
#
# Options: --size SIZE (default 1G; K, M, G suffixes). Environment: BUILD (default build).
# Needs root for namespaces; without them it runs on two loopback ports and says so.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build}
export BUILD

SIZE=1G
while [ $# -gt 0 ]; do
	case $1 in
	--size) SIZE=$2; shift 2 ;;
	-h | --help)
		sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "$0"
		exit 0
		;;
	*)
		echo "demo-net.sh: unknown option '$1' (try --help)" >&2
		exit 2
		;;
	esac
done
case $SIZE in
*[kK]) BYTES=$((${SIZE%?} * 1024)) ;;
*[mM]) BYTES=$((${SIZE%?} * 1024 * 1024)) ;;
*[gG]) BYTES=$((${SIZE%?} * 1024 * 1024 * 1024)) ;;
*) BYTES=$SIZE ;;
esac
[[ $BYTES =~ ^[0-9]+$ ]] && [ "$BYTES" -gt 0 ] || {
	echo "demo-net.sh: bad --size '$SIZE'" >&2
	exit 2
}
for b in xferd xferctl; do
	[ -x "$BUILD/$b" ] || {
		echo "demo-net.sh: $BUILD/$b is missing: run 'make' first" >&2
		exit 1
	}
done

# shellcheck source=scripts/cluster.sh
. scripts/cluster.sh
FILES=$(mktemp -d /dev/shm/demo-net.XXXXXX 2>/dev/null || mktemp -d "${TMPDIR:-/tmp}/demo-net.XXXXXX")
CLIENT_PIDS=()
cleanup()
{
	local p
	for p in "${CLIENT_PIDS[@]}"; do
		if jobs -pr | grep -qx "$p"; then
			{
				kill -KILL "$p"
				wait "$p"
			} 2>/dev/null
		fi
	done
	xc_stop_all >/dev/null 2>&1 || true
	xn_down
	rm -rf "$FILES"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

CTL=$(cd "$(dirname "$BUILD/xferctl")" && pwd)/xferctl
now() { date +%s.%N; }
rate()
{
	awk -v b="$1" -v t0="$2" -v t1="$3" 'BEGIN { s = t1 - t0; printf "%.2f s, %.2f GB/s (%.1f Gbit/s)", s, b / s / 1e9, b * 8 / s / 1e9 }'
}
exec 3>&1 # the terminal, for commands shown while their own output goes elsewhere
# show NODE CMD...: prints the command as a prompt on node NODE.
show()
{
	local node=$1
	shift
	echo "  node$node\$ $*" | sed "s#$FILES/#\$DIR/#g; s#$XN_DIR/#\$RUN/#g; s#$CTL#xferctl#g; s#xfer1\.[A-Za-z0-9_-]*#\"\$METADATA\"#g" >&3
}
# on NODE CMD...: runs CMD on node NODE (inside its namespace), showing it first.
on()
{
	show "$@"
	xn_exec "$@"
}
# bg_on NODE OUT ERR CMD...: the same in the background, its stdout into file OUT and its stderr
# into ERR, or the script's own where OUT or ERR is "-" (inherited: opening /dev/stdout instead
# would truncate the file a caller sent the demo's output to, and the command would write over
# it from its start); BG is the command's own pid (the subshell execs into it).
bg_on()
{
	local node=$1 out=$2 err=$3
	shift 3
	show "$node" "$@"
	(
		[ "$out" = - ] || exec >"$out"
		[ "$err" = - ] || exec 2>"$err"
		if [ "$(xn_mode)" = netns ]; then
			exec ip netns exec "$(xn_ns "$node")" "$@"
		fi
		exec "$@"
	) &
	BG=$!
	CLIENT_PIDS+=("$BG")
}
# wait_line FILE: the first line of FILE once complete (30 s at most).
wait_line()
{
	local i
	for ((i = 0; i < 1500; i++)); do
		if [ -s "$1" ] && [ "$(tail -c 1 "$1" | od -An -c | tr -d ' ')" = '\n' ]; then
			head -n 1 "$1"
			return 0
		fi
		sleep 0.02
	done
	return 1
}

cat <<'TXT'
xferd two-node demo
===================
Two xferd daemons, each in its own network namespace with its own address: two "nodes". A
process on node 0 offers a buffer and gets an opaque metadata string; it hands the string to a
process on node 1 by any channel (here: a file only its owner can read, since the metadata is a
capability, and never a command line, which every local user can see); node 1's daemon connects to node 0's
over TCP (the address is in the metadata) and the bytes move daemon to daemon, straight from one
registered buffer into the other. Then the same the other way round with writable/write.

TXT

xn_up 2 || exit 1
xn_check || {
	echo "demo-net.sh: the two nodes cannot reach each other" >&2
	exit 1
}
if [ "$(xn_mode)" = netns ]; then
	echo "nodes: node 0 = namespace $(xn_ns 0), $(xn_addr 0); node 1 = namespace $(xn_ns 1), $(xn_addr 1) (veth, MTU $(cat "$XN_DIR/mtu"))"
else
	echo "nodes: no network namespaces here (not root?): two daemons on 127.0.0.1 ports $(xn_port 0) and $(xn_port 1)"
fi
xc_start_all || exit 1
for n in 0 1; do
	echo "  node $n: xferd pid $(xc_pid "$n"), --listen $(xn_endpoint "$n"), node id $(xc_node_id "$n"), socket \$RUN/n$n.sock"
done
S0=$(xc_sock 0)
S1=$(xc_sock 1)

echo
echo "making a $BYTES-byte random file on node 0 ..."
head -c "$BYTES" /dev/urandom >"$FILES/data.bin"
SUM=$(sha256sum "$FILES/data.bin" | cut -d' ' -f1)
echo "  sha256 $SUM"

rc=0

echo
echo "1. readable on node 0, read on node 1"
bg_on 0 "$FILES/readable.out" "$FILES/readable.err" "$CTL" --socket "$S0" readable "$FILES/data.bin"
RPID=$BG
if ! META=$(wait_line "$FILES/readable.out"); then
	echo "demo-net.sh: readable printed no metadata: $(cat "$FILES/readable.err")" >&2
	exit 1
fi
echo "  node 0 printed the metadata (${#META} characters: ${META:0:32}...), and it is handed to node 1"
(umask 077 && printf '%s\n' "$META" >"$FILES/meta.txt")
t0=$(now)
if on 1 "$CTL" --socket "$S1" read "@$FILES/meta.txt" "$FILES/copy.bin"; then
	t1=$(now)
	wait "$RPID" || {
		echo "demo-net.sh: readable on node 0 failed: $(cat "$FILES/readable.err")" >&2
		rc=1
	}
	got=$(sha256sum "$FILES/copy.bin" | cut -d' ' -f1)
	echo "  read: $(rate "$BYTES" "$t0" "$t1") (xferctl's whole run: buffer, transfer, writing the file)"
	if [ "$got" = "$SUM" ]; then
		echo "  sha256 on node 1 matches: $got"
	else
		echo "  sha256 on node 1 DIFFERS: $got" >&2
		rc=1
	fi
else
	echo "demo-net.sh: read on node 1 failed" >&2
	rc=1
fi
echo "  node 1 sees node 0 as a peer:"
xc_ctl 1 peers | sed 's/^/    /'

echo
echo "2. writable on node 0, write from node 1 (the copy goes back)"
rm -f "$FILES/data.bin" # node 0 gets it back from node 1
bg_on 0 "$FILES/writable.out" "$FILES/writable.err" "$CTL" --socket "$S0" writable "$BYTES" "$FILES/back.bin"
WPID=$BG
if ! META=$(wait_line "$FILES/writable.out"); then
	echo "demo-net.sh: writable printed no metadata: $(cat "$FILES/writable.err")" >&2
	exit 1
fi
(umask 077 && printf '%s\n' "$META" >"$FILES/meta.txt")
t0=$(now)
if on 1 "$CTL" --socket "$S1" write "@$FILES/meta.txt" "$FILES/copy.bin"; then
	t1=$(now)
	if wait "$WPID"; then
		t2=$(now)
		got=$(sha256sum "$FILES/back.bin" | cut -d' ' -f1)
		echo "  write: $(rate "$BYTES" "$t0" "$t1") (xferctl's whole run: reading the file, transfer)"
		echo "  writable on node 0 saved the file $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.2f", b - a }') s later"
		if [ "$got" = "$SUM" ]; then
			echo "  sha256 on node 0 matches the original: $got"
		else
			echo "  sha256 on node 0 DIFFERS: $got" >&2
			rc=1
		fi
	else
		echo "demo-net.sh: writable on node 0 failed: $(cat "$FILES/writable.err")" >&2
		rc=1
	fi
else
	echo "demo-net.sh: write from node 1 failed" >&2
	rc=1
fi
echo "  node 0's counters:"
xc_ctl 0 status | sed 's/^/    /'

echo
echo "3. Python: prefill on node 0 offers a torch KV cache (8 layers, 8 descriptors), decode on"
echo "   node 1 begin_read()s it into its own tensor; metadata and sha256 cross by two pipes"
mkfifo -m 600 "$FILES/to-decode" "$FILES/to-prefill"
export XFERD_LIBRARY
XFERD_LIBRARY=$(cd "$BUILD" && pwd)/libxferclient.so.1
KV=client/python/examples/kv_transfer.py
bg_on 0 - - /usr/bin/python3 "$KV" prefill --socket "$S0" \
	--send "$FILES/to-decode" --recv "$FILES/to-prefill"
PPID_KV=$BG
on 1 /usr/bin/python3 "$KV" decode --socket "$S1" --recv "$FILES/to-decode" \
	--send "$FILES/to-prefill" || rc=1
wait "$PPID_KV" || rc=1

echo
echo "4. Python windows: decode on node 1 exposes its KV cache once as a write window; prefill on"
echo "   node 0 opens it and puts each request's per-layer blocks into its slot with one notify tag"
echo "   per request (8 requests per op.batch); decode checks a request's blocks when its tag arrives"
mkfifo -m 600 "$FILES/window-md"
bg_on 1 - - /usr/bin/python3 client/python/examples/kv_window.py decode \
	--socket "$S1" --send "$FILES/window-md"
DPID_KV=$BG
on 0 /usr/bin/python3 client/python/examples/kv_window.py prefill --socket "$S0" \
	--recv "$FILES/window-md" || rc=1
wait "$DPID_KV" || rc=1

echo
if xc_stop_all; then
	echo "both daemons stopped with SIGTERM and exited 0; namespaces and files removed"
else
	rc=1
fi
[ "$rc" -eq 0 ] && echo "demo: OK" || echo "demo: FAILED"
exit "$rc"
