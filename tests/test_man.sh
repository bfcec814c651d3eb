#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The man pages and the bash completion against the code they describe: every page passes
# `mandoc -T lint`; xferctl(1) and `xferctl --help` name the same commands and options, as do
# xferd(8) and `xferd --help`; every key daemon/config.c accepts (and every limit resource
# limits.c knows) is in xferd.conf(5), so that a new key cannot come in undocumented; every
# function xferclient.h exports is in libxferclient(3); the completion offers exactly the
# commands and options of `xferctl --help`.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) BIN=$BUILD ;; *) BIN=$ROOT/$BUILD ;; esac
MAN=$ROOT/man

passed=0
failed=0
ok() { echo "ok - $1"; passed=$((passed + 1)); }
fail() {
	echo "FAIL - $1 ($2)"
	failed=$((failed + 1))
}

# same_sets WHAT A-NAME A-LIST B-NAME B-LIST: passes when the two newline lists are equal as
# sets, else names what each lacks.
same_sets() {
	local what=$1 an=$2 a=$3 bn=$4 b=$5 only_a only_b
	only_a=$(comm -23 <(sort -u <<<"$a") <(sort -u <<<"$b") | tr '\n' ' ')
	only_b=$(comm -13 <(sort -u <<<"$a") <(sort -u <<<"$b") | tr '\n' ' ')
	if [ -z "$(tr -d ' \n' <<<"$a")" ]; then
		fail "$what" "found none in $an"
	elif [ -z "$only_a$only_b" ]; then
		ok "$what: $(wc -l < <(sort -u <<<"$a")) the same in $an and $bn"
	else
		fail "$what" "${only_a:+in $an but not in $bn: $only_a}${only_a:+${only_b:+; }}${only_b:+in $bn but not in $an: $only_b}"
	fi
}

pages=("$MAN"/*.[0-9])
if out=$(mandoc -T lint -W warning "${pages[@]}" 2>&1) && [ -z "$out" ]; then
	ok "mandoc -T lint: ${#pages[@]} pages clean"
else
	fail "mandoc -T lint" "$(echo "$out" | head -n 5 | tr '\n' ' ')"
fi
for p in xferd.8 xferd.conf.5 xferctl.1 libxferclient.3; do
	[ -f "$MAN/$p" ] || fail "man/$p exists" "missing"
done

# The commands of `xferctl --help` are its lines "  NAME ..." between "commands:" and "options:";
# its options every --long and -x at the start of an "options:" line.
help=$("$BIN/xferctl" --help 2>&1)
help_cmds=$(sed -n '/^commands:/,/^options:/s/^  \([a-z][a-z-]*\)\( .*\)\{0,1\}$/\1/p' <<<"$help")
help_opts=$(sed -n '/^options:/,/^$/p' <<<"$help" | grep -oE '^ +(-[a-z], )?--[a-z-]+' |
	grep -oE -- '--?[a-z-]+')
# The page's commands are the ".It Cm NAME" of its command list, its options every "Fl x" of an
# ".It" line (the first list of the page).
page=$MAN/xferctl.1
page_cmds=$(sed -n 's/^\.It Cm \([a-z][a-z-]*\).*/\1/p' "$page")
page_opts=$(grep '^\.It Fl' "$page" | grep -oE 'Fl -?[a-z][a-z-]*' | sed 's/^Fl /-/')
same_sets "xferctl commands" "xferctl --help" "$help_cmds" "xferctl(1)" "$page_cmds"
same_sets "xferctl options" "xferctl --help" "$help_opts" "xferctl(1)" "$page_opts"

# Every option of xferd's usage text (and its getopt_long table) is in xferd(8).
xhelp=$("$BIN/xferd" --help 2>&1)
xhelp_opts=$(grep -oE -- '--[a-z-]+' <<<"$xhelp" | sort -u)
xtable_opts=$(sed -n 's/^[[:space:]]*{ "\([a-z-]*\)", [a-z_]*_argument.*/--\1/p' "$ROOT/daemon/main.c")
xpage_opts=$(grep -E '^\.(It|Op) ' "$MAN/xferd.8" | grep -oE 'Fl -[a-z][a-z-]*' | sed 's/^Fl /-/' |
	sort -u)
same_sets "xferd options" "xferd's getopt table" "$xtable_opts" "xferd(8)" "$xpage_opts"
missing=$(comm -23 <(sort -u <<<"$xhelp_opts") <(sort -u <<<"$xpage_opts") | tr '\n' ' ')
if [ -z "$missing" ]; then
	ok "every option of xferd --help is in xferd(8)"
else
	fail "every option of xferd --help is in xferd(8)" "missing: $missing"
fi

# Config keys: the string literals of config.c's strict unpack_keys() key list in apply()
# (format strings start with "{"; the call ends with "))"), and the limit resources of limits.c.
keys=$(awk '/^static int apply\(/ { f = 1 } f && /JSON_STRICT/ { u = 1 } u { print } u && /\)\)( *\{)? *$/ { exit }' \
	"$ROOT/daemon/config.c" | grep -oE '"[a-z_]+"' | tr -d '"')
res=$(sed -n '/res_names\[XD_NRES\] = {/,/};/p' "$ROOT/daemon/limits.c" | grep -oE '= "[a-z_]+"' |
	grep -oE '[a-z_]+')
conf_keys=$(sed -n 's/^\.It Cm \([a-z_]*\).*/\1/p' "$MAN/xferd.conf.5")
conf_cms=$(grep -oE 'Cm [a-z_]+' "$MAN/xferd.conf.5" | sed 's/^Cm //')
if [ "$(wc -w <<<"$keys")" -lt 20 ]; then
	fail "config keys found in daemon/config.c apply()" "only: $(echo $keys)"
else
	missing=$(comm -23 <(sort -u <<<"$keys") <(sort -u <<<"$conf_keys") | tr '\n' ' ')
	extra=$(comm -13 <(sort -u <<<"$keys") <(sort -u <<<"$conf_keys") | tr '\n' ' ')
	if [ -z "$missing$extra" ]; then
		ok "xferd.conf(5) documents the $(wc -w <<<"$keys") keys config.c accepts, no others"
	else
		fail "xferd.conf(5) and config.c's keys" \
			"${missing:+accepted by daemon/config.c apply() but not an .It Cm entry in man/xferd.conf.5: $missing}${extra:+ documented but not accepted: $extra}"
	fi
fi
missing=$(comm -23 <(sort -u <<<"$res") <(sort -u <<<"$conf_cms") | tr '\n' ' ')
if [ -n "$res" ] && [ -z "$missing" ]; then
	ok "xferd.conf(5) names every limit resource: $(echo $res)"
else
	fail "xferd.conf(5) names every limit resource of limits.c" "missing: ${missing:-none found}"
fi

# Every function client/xferclient.h exports (XFER_EXPORT) has its synopsis (.Fn) in
# libxferclient(3), and the page describes none that is not exported.
exported=$(tr '\n' ' ' <"$ROOT/client/xferclient.h" | grep -oE 'XFER_EXPORT [^(;]*\(' |
	grep -oE 'xfer_[a-z0-9_]+ *\($' | tr -d ' (')
documented=$(sed -n '/^\.Sh SYNOPSIS/,/^\.Sh DESCRIPTION/s/^\.Fn \(xfer_[a-z0-9_]*\).*/\1/p' \
	"$MAN/libxferclient.3")
same_sets "library functions" "client/xferclient.h (XFER_EXPORT)" "$exported" "libxferclient(3)" \
	"$documented"

# The completion, run by bash-completion itself: its word lists and what it offers.
comp=$ROOT/client/xferctl.bash
bc=/usr/share/bash-completion/bash_completion
if [ ! -f "$bc" ]; then
	fail "bash completion" "$bc missing (Debian package bash-completion)"
else
	complete_words() { # complete_words WORD...: what completing the last word offers
		bash -c '. "$1"; . "$2"; shift 2
			COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
			_xferctl xferctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
			printf "%s\n" "${COMPREPLY[@]}"' _ "$bc" "$comp" "$@"
	}
	same_sets "completion commands" "xferctl --help" "$help_cmds" "completion" "$(complete_words xferctl '')"
	same_sets "completion options" "xferctl --help" "$(grep -- '^--' <<<"$help_opts")" \
		"completion" "$(complete_words xferctl --json -)"
	got=$(complete_words xferctl -s /tmp/x.sock st | sort | tr '\n' ' ')
	if [ "$got" = "stats status " ]; then
		ok "completion after an option and its argument: 'st' -> $got"
	else
		fail "completion after --socket PATH of 'st'" "got '$got'"
	fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
