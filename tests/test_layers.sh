#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The layering of daemon/ and proto/: scripts/layers.sh on the objects in $BUILD against
# daemon/LAYERS finds no use of a higher layer, no circle and no file outside every layer. Then
# the checker itself, on small C fixtures built here: one that breaks each rule must fail
# naming it, a clean one must pass. Prints "ok - " / "FAIL - " lines and "N passed, N failed".
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) BDIR=$BUILD ;; *) BDIR=$ROOT/$BUILD ;; esac
CHECK=$ROOT/scripts/layers.sh
CC=${CC:-cc}
passed=0 failed=0 skipped=0
# shellcheck source=tests/lib.sh
. "$ROOT/tests/lib.sh"

TMP=$(mktemp -d /tmp/xferd-layers.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# commented TEXT: TEXT with "# " before each line.
commented()
{
	local l
	while IFS= read -r l; do echo "# $l"; done <<<"$1"
}

# check_tree: the built daemon/ and proto/ follow daemon/LAYERS.
check_tree()
{
	local name="layers: daemon/ and proto/ follow daemon/LAYERS" out rc=0
	if ! compgen -G "$BDIR/daemon/*.o" >/dev/null; then
		fail "$name" "no objects in $BUILD/daemon: build first"
		return
	fi
	out=$(cd "$ROOT" && bash "$CHECK" "$BDIR" daemon/LAYERS 2>&1) || rc=$?
	if [ "$rc" -eq 0 ]; then
		ok "$name (${out##*$'\n'})"
	else
		commented "$(grep -E '^(UPWARD:|CIRCLE |UNASSIGNED:|layers\.sh:)' <<<"$out" | head -n 30)"
		fail "$name" "exit $rc: ${out##*$'\n'}"
	fi
}

# fixture DIR FILE:BODY...: DIR/daemon/FILE.c for each argument, each compiled into
# DIR/obj/daemon/FILE.o; BODY is C text. 1 when a compile fails.
fixture()
{
	local dir=$1 arg file
	shift
	mkdir -p "$dir/daemon" "$dir/obj/daemon"
	for arg in "$@"; do
		file=${arg%%:*}
		printf '%s\n' "${arg#*:}" >"$dir/daemon/$file.c"
		"$CC" -c -o "$dir/obj/daemon/$file.o" "$dir/daemon/$file.c" || return 1
	done
}

# run_check DIR: OUT and RC of the checker on fixture DIR (its rules in DIR/LAYERS).
run_check()
{
	RC=0
	OUT=$(LAYERS_ROOT=$1 bash "$CHECK" "$1/obj" "$1/LAYERS" 2>&1) || RC=$?
}

# expect NAME LINE: OUT holds LINE (a whole line); one ok/FAIL line.
expect()
{
	if grep -qxF -- "$2" <<<"$OUT"; then
		ok "$1"
	else
		commented "$OUT"
		fail "$1" "no line \"$2\""
	fi
}

# check_broken: low.c uses top.c (a layer up), a.c and b.c use each other, stray.c is in no
# layer, and gone.o (a copy of low.o, no source) is skipped; the checker exits 1 naming each.
check_broken()
{
	local d=$TMP/broken
	fixture "$d" \
		'top:void a_fn(void); void top_fn(void) { a_fn(); }' \
		'low:void top_fn(void); void low_fn(void) { top_fn(); }' \
		'a:void b_fn(void); int a_count = 1; void a_fn(void) { b_fn(); }' \
		'b:extern int a_count; void a_fn(void); void b_fn(void) { if (a_count) a_fn(); }' \
		'stray:void low_fn(void); void stray_fn(void) { low_fn(); }' ||
		{
			fail "layers checker: broken fixture" "$CC -c failed"
			return
		}
	cp "$d/obj/daemon/low.o" "$d/obj/daemon/gone.o"
	printf '%s\n' '# fixture' 'top: daemon/top.c' 'low: daemon/low.c daemon/[ab].c daemon/none*.c' \
		>"$d/LAYERS"
	run_check "$d"
	if [ "$RC" -eq 1 ]; then ok "layers checker: broken fixture exits 1"; else
		commented "$OUT"
		fail "layers checker: broken fixture exits 1" "exit $RC"
	fi
	expect "layers checker: names an edge's symbols" "daemon/b.c -> daemon/a.c: a_count, a_fn"
	expect "layers checker: reports the upward use" \
		"UPWARD: daemon/low.c (layer low) -> daemon/top.c (layer top): top_fn"
	expect "layers checker: reports the circle" "CIRCLE (2 files): daemon/a.c daemon/b.c"
	expect "layers checker: reports the file in no layer" \
		"UNASSIGNED: daemon/stray.c is in no layer of $d/LAYERS"
	expect "layers checker: counts (object without a source skipped)" \
		"layers: 5 files, 5 edges, 1 upward, 1 circles, 1 unassigned"
}

# check_clean: top.c -> mid.c -> low.c, all downward, one glob matching nothing: exit 0.
check_clean()
{
	local d=$TMP/clean
	fixture "$d" \
		'top:void mid_fn(void); int main(void) { mid_fn(); return 0; }' \
		'mid:void low_fn(void); void mid_fn(void) { low_fn(); }' \
		'low:int low_count; void low_fn(void) { low_count++; }' ||
		{
			fail "layers checker: clean fixture" "$CC -c failed"
			return
		}
	printf '%s\n' 'top: daemon/top.c  # the top' '' 'mid: daemon/mid.c daemon/nothing*.c' \
		'low: daemon/low.c' >"$d/LAYERS"
	run_check "$d"
	if [ "$RC" -eq 0 ]; then ok "layers checker: clean fixture exits 0"; else
		commented "$OUT"
		fail "layers checker: clean fixture exits 0" "exit $RC"
	fi
	expect "layers checker: clean fixture's counts" "layers: 3 files, 2 edges, 0 upward, 0 circles"
}

check_tree
if command -v "$CC" >/dev/null && command -v nm >/dev/null; then
	check_broken
	check_clean
else
	skip "layers checker fixtures" "$CC or nm is not installed"
fi
summary
[ "$failed" -eq 0 ]
