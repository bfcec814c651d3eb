#!/bin/bash
# SPDX-License-Identifier: MIT
#
# A peer's frames about transfers must not cost more with the transfers of its set: each names
# one by id (CLAIM, CLAIM_OK, DATA, DONE, DONE_ACK, CANCEL, STAGE), and a walk of every
# transfer of the daemon per frame let one peer (or one local client making many ops) hold the
# loop. A member node claims 16000 writables of one byte and holds them (sends no DATA); the
# same refused CLAIMs are timed beside the first transfer alone and beside all of them, as a
# ratio (sanitizers and valgrind slow both sides alike).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=/usr/bin/python3
. tests/lib.sh

require_built
loopback_setup xferidx
mkkey "$D/key"
N=16000

if ! loopback_start A "$BASE" --peer-key "$D/key"; then
	abort_setup "xferd A did not start"
fi
if read -r FAST SLOW < <(timeout 300 $PY tests/hostile_peer.py xferidx "$D/A.sock" 127.0.0.1 \
	"$BASE" "$D/key" "$N" 2>"$D/py.err") && [ -n "${SLOW:-}" ]; then
	note "4096 refused CLAIMs: ${FAST} us beside 1 transfer, ${SLOW} us beside $N"
	if [ "$SLOW" -le $((8 * FAST + 2000)) ]; then
		ok "a frame naming a transfer costs the same beside 1 or $N transfers of the set"
	else
		fail "a frame naming a transfer costs the same beside 1 or $N transfers of the set" \
			"${FAST} us vs ${SLOW} us"
	fi
else
	fail "$N writables claimed and held by a member node" "$(tail -n 3 "$D/py.err") $(tail -n 3 "$D/A.log")"
fi
if kill -0 "$PID_A" 2>/dev/null; then
	ok "the daemon serves after the claims"
else
	fail "the daemon serves after the claims" "$(tail -n 3 "$D/A.log")"
fi
summary
[ "$failed" -eq 0 ]
