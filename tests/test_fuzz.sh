#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# A timed libFuzzer session of each fuzz target (tests/fuzz/: the control protocol, the peer
# protocol, the metadata decoder, the client's op.batch_done reader, the daemon's op.batch
# reader) against the in-process daemon where there is one, built by `make fuzz` with clang,
# AddressSanitizer and UBSan. make test replays the stored corpora on every run; this
# looks for new inputs: XFER_FUZZ_SECONDS per target (default 20; 0 skips). A crash, a leak, a
# timeout or an out-of-memory fails the target and names the reproducer that `make fuzz` left
# in build/fuzz/TARGET-* (replay it with build/tests/test_fuzz_replay FILE, or the _meta_ /
# _peer_ replayers). Runs once, in the plain `make test`: the sanitizer run (XFER_SANITIZE set)
# skips it, the fuzz build is sanitized already.
#
# The stored corpora are the hand-written seeds (named for what they send) and the inputs of a
# campaign, merged in by `fuzz_T -merge=1 tests/fuzz/CORPUS SCRATCH` (a file is kept only if it
# adds coverage; libFuzzer names it by its SHA-1). Session 14's campaign (2026-11-27, each target
# ~6.7 min at idle priority, seeded with earlier campaigns' build/fuzz finds; no crash, leak,
# timeout or OOM) took the replay's coverage (edges / features) from ctl 1395/2398, peer
# 492/878, meta 167/284, reply 153/253, req 174/272 to 1653/3158, 706/1721, 264/755, 200/710,
# 225/663 (61/27/13/9/9 files -> 349/277/141/163/134, 39 KB -> 442 KB).
set -u
cd "$(dirname "$0")/.."
# shellcheck source=tests/lib.sh
. tests/lib.sh

SECONDS_EACH=${XFER_FUZZ_SECONDS:-20}
TARGETS=(ctl peer meta reply req)
LOGDIR=build/fuzz # each target's whole libFuzzer output stays there, as TARGET.log
mkdir -p "$LOGDIR" || exit 1

skip_all()
{
	local t
	for t in "${TARGETS[@]}"; do
		skip "fuzz_$t for $SECONDS_EACH s" "$1"
	done
	summary
	exit 0
}

[ -z "${XFER_SANITIZE:-}" ] || skip_all "the sanitizer run; the plain make test fuzzes"
[ "$SECONDS_EACH" != 0 ] || skip_all "XFER_FUZZ_SECONDS=0"
command -v clang >/dev/null || skip_all "no clang (scripts/install-deps.sh installs it)"

if ! make --no-print-directory FUZZ=1 "${TARGETS[@]/#/build/fuzz/fuzz_}" >"$LOGDIR/build.log" 2>&1; then
	tail -n 20 "$LOGDIR/build.log" | sed 's/^/# /'
	fail "build the fuzz targets (make FUZZ=1)" "see the build output above"
	summary
	exit 1
fi

for t in "${TARGETS[@]}"; do
	log=$LOGDIR/$t.log
	if make --no-print-directory fuzz FUZZ_TARGETS="$t" FUZZ_SECONDS="$SECONDS_EACH" \
		>"$log" 2>&1; then
		ok "fuzz_$t for $SECONDS_EACH s: $(grep -E '^Done [0-9]+ runs' "$log" | tail -n 1), $(
			grep -oE 'cov: [0-9]+' "$log" | tail -n 1)"
	else
		# fuzz_die()'s line names the broken invariant; libFuzzer's name the reproducer.
		grep -E '^fuzz_|ERROR|SUMMARY|Test unit written' "$log" | head -n 10 | sed 's/^/# /'
		fail "fuzz_$t for $SECONDS_EACH s" "libFuzzer found a failing input (above; $log)"
	fi
done
summary
[ "$failed" -eq 0 ]
