#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The layering check: which C file of daemon/ and proto/ uses which, read from `nm -P` of the
# built objects (A -> B when A uses a symbol B defines), every use of a higher layer than the
# file's own (RULES lists the layers top to bottom, "NAME: glob ..."), and every circle of files.
# Usage, from the project root: scripts/layers.sh OBJDIR RULES (LAYERS_ROOT=DIR: the sources are
# under DIR instead). Exit status 1 when a file is in no layer, a use goes up or a circle exists.
set -u

ROOT=${LAYERS_ROOT:-.}

usage()
{
	echo "usage: [LAYERS_ROOT=DIR] scripts/layers.sh OBJDIR RULES" >&2
	exit 2
}

die()
{
	echo "layers.sh: $*" >&2
	exit 2
}

# read_rules RULES: LNAMES, the layers' names top to bottom, and LGLOBS, their globs (one
# space-separated string per layer). A '#' starts a comment; blank lines are skipped.
read_rules()
{
	local line n=0 name
	LNAMES=() LGLOBS=()
	while IFS= read -r line || [ -n "$line" ]; do
		n=$((n + 1))
		line=${line%%#*}
		[[ $line =~ ^[[:space:]]*$ ]] && continue
		[[ $line =~ ^[[:space:]]*([^:[:space:]]+)[[:space:]]*:(.*)$ ]] ||
			die "$1:$n: expected \"NAME: glob ...\""
		name=${BASH_REMATCH[1]}
		[[ " ${LNAMES[*]} " != *" $name "* ]] || die "$1:$n: layer $name named twice"
		LNAMES+=("$name")
		LGLOBS+=("${BASH_REMATCH[2]}")
	done <"$1"
	[ ${#LNAMES[@]} -gt 0 ] || die "$1: no layers"
}

# layer_of SRC: "NUMBER<tab>NAME" of SRC's layer (0 is the top one); "-1<tab>" when no layer
# matches SRC, "-2<tab>NAME, NAME..." when several do. A glob that matches no file is fine.
layer_of()
{
	local i g globs hits=() names=() list
	for i in "${!LNAMES[@]}"; do
		read -ra globs <<<"${LGLOBS[i]}"
		for g in "${globs[@]}"; do
			# shellcheck disable=SC2053 # $g is a glob on purpose
			if [[ $1 == $g ]]; then
				hits+=("$i")
				names+=("${LNAMES[i]}")
				break
			fi
		done
	done
	case ${#hits[@]} in
	0) printf -- '-1\t\n' ;;
	1) printf '%s\t%s\n' "${hits[0]}" "${names[0]}" ;;
	*)
		list=$(IFS=,; echo "${names[*]}")
		printf -- '-2\t%s\n' "${list//,/, }"
		;;
	esac
}

# collect OBJDIR TMP: TMP/files, "SRC<tab>NUMBER<tab>NAME" per object whose source exists
# under ROOT, and TMP/syms, "SRC<tab>KIND<tab>SYMBOL" per global definition and use, by symbol.
collect()
{
	local objdir=$1 tmp=$2 obj src
	: >"$tmp/files"
	: >"$tmp/raw"
	shopt -s nullglob
	for obj in "$objdir"/daemon/*.o "$objdir"/proto/*.o; do
		src=${obj#"$objdir"/}
		src=${src%.o}.c
		[ -f "$ROOT/$src" ] || continue
		printf '%s\t%s\n' "$src" "$(layer_of "$src")" >>"$tmp/files"
		nm -P "$obj" >"$tmp/nm" || die "nm -P $obj failed"
		awk -v src="$src" '$2 ~ /^[TDBRCVWU]$/ { printf "%s\t%s\t%s\n", src, $2, $1 }' \
			"$tmp/nm" >>"$tmp/raw"
	done
	shopt -u nullglob
	[ -s "$tmp/files" ] || die "no objects of existing sources in $objdir/daemon or $objdir/proto"
	LC_ALL=C sort -t "$(printf '\t')" -k3,3 -k1,1 "$tmp/raw" >"$tmp/syms"
}

# The graph, the checks and the report, from TMP/files and TMP/syms (see collect). A use goes
# to the file that defines the symbol; a strong definition (T D B R) hides weak ones (C V W).
# POSIX awk (mawk): arrays are kept in numbered order and sorted by isort.
# shellcheck disable=SC2016 # an awk program, not for the shell to expand
REPORT='
function isort(a, n,    i, j, t) {
	for (i = 2; i <= n; i++) {
		t = a[i]
		for (j = i - 1; j >= 1 && a[j] > t; j--)
			a[j + 1] = a[j]
		a[j + 1] = t
	}
}
function visit(v,    i, w, m, list) {
	ord[v] = low[v] = ++counter
	stack[++sp] = v
	on[v] = 1
	for (i = 1; i <= nadj[v]; i++) {
		w = adj[v, i]
		if (!(w in ord)) {
			visit(w)
			if (low[w] < low[v]) low[v] = low[w]
		} else if (on[w] && ord[w] < low[v])
			low[v] = ord[w]
	}
	if (low[v] != ord[v]) return
	m = 0
	do {
		w = stack[sp--]
		on[w] = 0
		member[++m] = w
	} while (w != v)
	if (m < 2) return
	isort(member, m)
	list = member[1]
	for (i = 2; i <= m; i++) list = list " " member[i]
	circle[++nc] = list "\t" m
}
BEGIN { FS = "\t" }
FNR == NR { node[++nf] = $1; lnum[$1] = $2 + 0; lname[$1] = $3; next }
$2 == "U" { usrc[++nu] = $1; uname[nu] = $3; next }
{
	r = ($2 ~ /[CVW]/) ? 1 : 2
	if (r > rank[$3]) { rank[$3] = r; defs[$3] = $1 }
	else if (r == rank[$3]) defs[$3] = defs[$3] "\t" $1
}
END {
	for (u = 1; u <= nu; u++) {
		s = usrc[u]
		if (!(uname[u] in defs)) continue
		nd = split(defs[uname[u]], d, "\t")
		for (k = 1; k <= nd; k++) {
			if (d[k] == s) continue
			key = s SUBSEP d[k]
			if (key in names) names[key] = names[key] ", " uname[u]
			else { edge[++ne] = key; names[key] = uname[u] }
		}
	}
	isort(edge, ne)
	for (e = 1; e <= ne; e++) {
		split(edge[e], p, SUBSEP)
		printf "%s -> %s: %s\n", p[1], p[2], names[edge[e]]
		adj[p[1], ++nadj[p[1]]] = p[2]
	}
	isort(node, nf)
	for (i = 1; i <= nf; i++) {
		f = node[i]
		if (lnum[f] == -1) printf "UNASSIGNED: %s is in no layer of %s\n", f, rules
		if (lnum[f] == -2) printf "UNASSIGNED: %s is in more than one layer of %s (%s)\n", f, rules, lname[f]
		if (lnum[f] < 0) nun++
	}
	for (e = 1; e <= ne; e++) {
		split(edge[e], p, SUBSEP)
		a = p[1]; b = p[2]
		if (lnum[a] < 0 || lnum[b] < 0 || lnum[b] >= lnum[a]) continue
		printf "UPWARD: %s (layer %s) -> %s (layer %s): %s\n", a, lname[a], b, lname[b], names[edge[e]]
		nup++
	}
	for (i = 1; i <= nf; i++)
		if (!(node[i] in ord)) visit(node[i])
	isort(circle, nc)
	for (i = 1; i <= nc; i++) {
		split(circle[i], p, "\t")
		printf "CIRCLE (%d files): %s\n", p[2], p[1]
	}
	printf "layers: %d files, %d edges, %d upward, %d circles", nf, ne, nup, nc
	if (nun) printf ", %d unassigned", nun
	printf "\n"
	exit (nup + nc + nun > 0)
}'

main()
{
	[ $# -eq 2 ] || usage
	local objdir=${1%/} rules=$2 tmp rc=0
	[ -d "$objdir" ] || die "$objdir is not a directory"
	[ -d "$ROOT" ] || die "LAYERS_ROOT $ROOT is not a directory"
	[ -r "$rules" ] || die "cannot read $rules"
	read_rules "$rules"
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/layers.XXXXXX") || die "mktemp failed"
	# shellcheck disable=SC2064 # expand $tmp now
	trap "rm -rf '$tmp'" EXIT
	collect "$objdir" "$tmp"
	LC_ALL=C awk -v rules="$rules" "$REPORT" "$tmp/files" "$tmp/syms" || rc=$?
	return $rc
}

main "$@"
