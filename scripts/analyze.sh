#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `make analyze`: cppcheck and clang-tidy (the checks .clang-tidy names) over every C file of
# daemon/, client/ and proto/, with the flags the Makefile compiles them with (ANALYZE_FLAGS).
# Prints each finding once and exits 1 if there is any, so that a new one fails. A false
# positive is suppressed where it is reported, with the reason beside it:
# `// cppcheck-suppress ID ; why` or `NOLINT(check): why`. ANALYZE_JOBS: files at a time;
# ANALYZE_FILES: only these files (make analyze ANALYZE_FILES="daemon/op.c proto/xp_meta.c").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

: "${ANALYZE_FLAGS:?run through make analyze, which passes the compiler flags}"
jobs=${ANALYZE_JOBS:-$(nproc)}
# shellcheck disable=SC2206 # a list of paths
files=(${ANALYZE_FILES:-daemon/*.c client/*.c proto/*.c})
tmp=$(mktemp -d "${TMPDIR:-/tmp}/xferd-analyze.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)

# The system header that defines $1's macros, as the compiler finds it.
header_path()
{
	echo "#include <$1>" | ${CC:-cc} -M -x c - | grep -o -m1 "[^ ]*/$1"
}

# cppcheck reads no system header (it would be slow and noisy), but without the macros of
# sys/queue.h (TAILQ_HEAD in a struct) and jansson.h (json_array_foreach) it stops at a syntax
# error in every file that uses them, and checks nothing there: so those two come in.
cppcheck --enable=warning,performance,portability --inconclusive --std=c11 -D_GNU_SOURCE \
	-Iproto -Iclient -Idaemon --include="$(header_path sys/queue.h)" \
	--include="$(header_path jansson.h)" --inline-suppr --quiet -j "$jobs" \
	--template='{file}:{line}:{column}: {severity}: {message} [cppcheck-{id}]' \
	"${files[@]}" 2>"$tmp/cppcheck.out" || echo "cppcheck: exited $?" >>"$tmp/cppcheck.out"

# One clang-tidy per file, $jobs at a time. A run that fails without a finding (clang-tidy
# missing or crashing) is reported too, so that a file left unchecked cannot look clean.
tidy_one()
{
	local out=$2/tidy-${1//\//_}
	# shellcheck disable=SC2086 # ANALYZE_FLAGS is a list of flags
	clang-tidy --quiet "$1" -- $ANALYZE_FLAGS >"$out" 2>"$out.err" ||
		echo "$1:1:1: error: clang-tidy exited $? [analyze]" >>"$out"
}
export -f tidy_one
export ANALYZE_FLAGS
# shellcheck disable=SC2016 # $1 and $2 are the inner bash's
printf '%s\n' "${files[@]}" | xargs -P "$jobs" -I{} bash -c 'tidy_one "$1" "$2"' _ {} "$tmp"

# A finding is a "FILE:LINE:COL: SEVERITY: MESSAGE [CHECK]" line (a note is not); a header's
# may come from several files, so each is counted once. clang-tidy's whole output is shown
# first for a file with a finding: its notes are the path that leads to it.
finding='^[^ :]+:[0-9]+:[0-9]+: (warning|error|style|performance|portability): '
for f in "$tmp"/tidy-*; do
	grep -qE "$finding" "$f" && cat "$f"
done
grep -hE "$finding" "$tmp"/cppcheck.out "$tmp"/tidy-* | sed "s|^$PWD/||" | sort -u >"$tmp/found" || true
grep -h 'exited' "$tmp/cppcheck.out" >>"$tmp/found" || true
[ -s "$tmp/found" ] && echo "== findings" && cat "$tmp/found"
n=$(wc -l <"$tmp/found")
echo "make analyze: $n findings in ${#files[@]} files (cppcheck, clang-tidy), $(($(date +%s) - start)) s"
[ "$n" -eq 0 ]
