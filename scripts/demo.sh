#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `make demo`: start a private xferd, move a buffer between two client processes through it
# (readable/read, then writable/write), check every byte, stop the daemon. Extra arguments go to
# xferbench (e.g. --size 1G).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/xferd-tmp.sh

cat <<'TXT'
xferd demo
==========
xferd is a per-node transfer daemon. Applications hand it sealed memfd buffers over a Unix
socket; it maps them once and moves bytes between them (memcpy on one node, TCP or RDMA
between nodes). Transfers come in pairs: one process offers a buffer ("readable" or
"writable") and gets an opaque metadata string; it passes that string to another process by
any channel it likes; the other process claims it ("read" or "write") and the daemon moves the
bytes. Both sides are told when the transfer has finished.

This demo starts a private xferd, then two client processes, a passive one and an active one,
that pass metadata through a pipe and move the buffer both ways, checking every byte.

TXT

xferd_tmp_start
echo "started $BUILD/xferd (pid $XFERD_PID) on $XFERD_SOCK"
echo

rc=0
"$BUILD/xferbench" demo --socket "$XFERD_SOCK" "$@" || rc=$?

echo
echo "The same from Python (client/python): a prefill process offers a torch KV cache of 8 layers"
echo "(8 descriptors over one registered pool), a decode process reads it into its own tensor;"
echo "metadata and sha256 go through a pipe, and each side checks the other's sha256:"
echo "  \$ client/python/examples/kv_transfer.py both --socket \$SOCK"
XFERD_LIBRARY="$BUILD/libxferclient.so.1" /usr/bin/python3 client/python/examples/kv_transfer.py \
	both --socket "$XFERD_SOCK" || rc=1

echo
echo "And with a window, as NIXL-based engines do: the decode worker exposes its registered KV cache"
echo "once as a write window; prefill opens it once and puts each request's per-layer K/V blocks"
echo "into the request's slot (8 requests per op.batch), with one notify tag per request; decode"
echo "checks each request's blocks when its tag arrives:"
echo "  \$ client/python/examples/kv_window.py both --socket \$SOCK"
XFERD_LIBRARY="$BUILD/libxferclient.so.1" /usr/bin/python3 client/python/examples/kv_window.py \
	both --socket "$XFERD_SOCK" || rc=1

echo
if xferd_tmp_stop; then
	echo "stopped xferd with SIGTERM; it exited 0"
elif [ "$rc" -eq 0 ]; then
	rc=1
fi
exit "$rc"
