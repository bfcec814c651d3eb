#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Rolling the cluster key (README, "Rolling the cluster key"): a key file holds one to four keys,
# one per line; a daemon proves itself and its claims with the first and accepts a peer's proof
# under any of them, and SIGHUP reads the file again. Daemons on 127.0.0.1 ports walk the three
# steps of a roll one node at a time, moving bytes (compared) at each: add the new key second,
# move it first, drop the old one. A node that has only the new key talks to one that proves
# with it, and is refused by one that still proves with the old key; dropping a key closes at
# once every set that proved it, and a daemon holding only a dropped key is refused. Bad key
# files are refused at start and, on SIGHUP, leave the keys as they were.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
# shellcheck source=tests/lib.sh
. tests/lib.sh

require_built
loopback_setup keys

mkkey "$D/old"
mkkey "$D/new"

pid_of() { eval "echo \$PID_$1"; }

# key_id KEYFILE: the id a daemon shows for the key of KEYFILE (its SHA-256's first 4 bytes).
key_id() { /usr/bin/python3 -c 'import hashlib, sys; print(hashlib.sha256(bytes.fromhex(open(sys.argv[1]).read())).hexdigest()[:8])' "$1"; }
OLD=$(key_id "$D/old")
NEW=$(key_id "$D/new")

# keys NODE KEYFILE...: NODE's key file holds these keys, in this order (mode 0600).
keys() { local node=$1; shift; (umask 077 && for k in "$@"; do cat "$k"; echo; done >"$D/$node.key"); }

# reload NODE: SIGHUP, then waits until NODE logged that it read its keys again.
reload()
{
	local n i
	n=$(grep -c "SIGHUP: cluster keys\|the cluster keys stay" "$D/$1.log")
	kill -HUP "$(pid_of "$1")"
	for ((i = 0; i < 100; i++)); do
		[ "$(grep -c "SIGHUP: cluster keys\|the cluster keys stay" "$D/$1.log")" -gt "$n" ] &&
			return 0
		sleep 0.05
	done
	return 1
}

# peer_keys NODE OTHER: the "keys" NODE lists for its live set to OTHER (by OTHER's node id).
peer_keys()
{
	local node
	node=$("$BUILD/xferctl" --socket "$D/$2.sock" status --json |
		/usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["stats"]["node"])')
	"$BUILD/xferctl" --socket "$D/$1.sock" peers --json | /usr/bin/python3 -c '
import json, sys
sets = [p for p in json.load(sys.stdin)["peers"] if p["node"] == sys.argv[1] and p["state"] != "failed"]
print(" ".join(",".join(p.get("keys", [])) for p in sets))' "$node"
}

# moves NAME OWNER READER [WHY]: a transfer OWNER -> READER moves the bytes (ok) or fails.
moves()
{
	if loopback_transfer "$2" "$3" "$1"; then
		ok "$1: $2 -> $3 moves 1 MiB byte-exact${4:+ ($4)}"
	else
		fail "$1: $2 -> $3 moves 1 MiB byte-exact" "$(tail -n 2 "$D/$1.err" | tr '\n' '|')"
	fi
}

# refused NAME OWNER READER: the transfer fails, the reader told it is a matter of the key.
refused()
{
	if ! loopback_transfer "$2" "$3" "$1" && grep -q "cluster key" "$D/$1.err"; then
		ok "$1: $2 -> $3 is refused: $(tail -n 1 "$D/$1.err")"
	else
		fail "$1: $2 -> $3 is refused naming the cluster key" "$(tail -n 2 "$D/$1.err" | tr '\n' '|')"
	fi
}

# --- key files refused at start
keys bad "$D/old" "$D/new" "$D/old"
if ! timeout 10 "$BUILD/xferd" --socket "$D/r.sock" --foreground --listen 127.0.0.1:$((BASE + 9)) \
	--peer-key "$D/bad.key" 2>"$D/r.log" && grep -q "the key of line 1 again" "$D/r.log"; then
	ok "a key file with one key twice is refused at start: $(grep -o 'peer key.*' "$D/r.log" | head -n 1)"
else
	fail "a key file with one key twice is refused at start" "$(tail -n 2 "$D/r.log" | tr '\n' '|')"
fi
for i in 1 2 3 4 5; do mkkey "$D/k$i"; done
keys five "$D/k1" "$D/k2" "$D/k3" "$D/k4" "$D/k5"
if ! timeout 10 "$BUILD/xferd" --socket "$D/r.sock" --foreground --listen 127.0.0.1:$((BASE + 9)) \
	--peer-key "$D/five.key" 2>"$D/r.log" && grep -q "more than 4 keys" "$D/r.log"; then
	ok "a key file of five keys is refused at start (at most 4)"
else
	fail "a key file of five keys is refused at start" "$(tail -n 2 "$D/r.log" | tr '\n' '|')"
fi

# --- before: A and B on the old key
keys A "$D/old"
keys B "$D/old"
loopback_start A $((BASE + 1)) --peer-key "$D/A.key" || abort_setup "daemon A did not start: $(tail -n 3 "$D/A.log")"
loopback_start B $((BASE + 2)) --peer-key "$D/B.key" || abort_setup "daemon B did not start"
moves t0 A B "both on the old key"
if "$BUILD/xferctl" --socket "$D/A.sock" status | grep -q "authenticated by cluster key $OLD (proving, 1 set)"; then
	ok "xferctl status names the key A proves with ($OLD) and the one set that proved it"
else
	fail "xferctl status names the key A proves with" "$("$BUILD/xferctl" --socket "$D/A.sock" status | grep peers:)"
fi
seen=$(peer_keys A B)
[ "$seen" = "$OLD" ] && ok "A lists its set to B as proven with $OLD" ||
	fail "A lists its set to B as proven with $OLD" "keys '$seen'"

# --- step 1: the new key added second, one node at a time
keys A "$D/old" "$D/new"
if reload A && grep -q "SIGHUP: cluster keys $OLD, $NEW (this daemon proves with the first); 0 peer sets" "$D/A.log"; then
	ok "step 1: A reads [old, new] on SIGHUP, closes no set"
else
	fail "step 1: A reads [old, new] on SIGHUP" "$(grep SIGHUP "$D/A.log" | tail -n 1)"
fi
moves t1 B A "A has both keys, B the old one; the set made under the old key stays"
if "$BUILD/xferctl" --socket "$D/A.sock" status |
	grep -q "authenticated by cluster key $OLD (proving, 1 set), $NEW (accepted, 0 sets)"; then
	ok "xferctl status: $OLD proving (the set to B), $NEW accepted (no set yet)"
else
	fail "xferctl status names both keys and their sets" "$("$BUILD/xferctl" --socket "$D/A.sock" status | grep peers:)"
fi
keys B "$D/old" "$D/new"
reload B || fail "step 1: B reads its keys again on SIGHUP" "no log line"

# --- step 2: the new key first; C has only the new key
keys A "$D/new" "$D/old"
reload A || fail "step 2: A reads its keys again on SIGHUP" "no log line"
keys C "$D/new"
loopback_start C $((BASE + 3)) --peer-key "$D/C.key" || abort_setup "daemon C did not start"
moves t2 A C "A proves with the new key, C has only it"
refused t3 B C
if grep -q "failed authentication" "$D/C.log"; then
	ok "step 2: C logs that B's proof does not match its key"
else
	fail "step 2: C logs that B's proof does not match its key" "$(tail -n 2 "$D/C.log" | tr '\n' '|')"
fi
keys B "$D/new" "$D/old"
reload B || fail "step 2: B reads its keys again on SIGHUP" "no log line"
moves t4 B C "B now proves with the new key"
seen=$(peer_keys C B)
[ "$seen" = "$NEW" ] && ok "C lists its set to B as proven with $NEW" ||
	fail "C lists its set to B as proven with $NEW" "keys '$seen'"

# --- step 3: the old key dropped; sets that proved it close at once
keys A "$D/new"
if reload A && grep -q "SIGHUP: cluster keys $NEW (this daemon proves with the first); 1 peer sets" "$D/A.log"; then
	ok "step 3: A drops the old key and closes the one set that proved it (to B)"
else
	fail "step 3: A drops the old key and closes the set to B" "$(grep SIGHUP "$D/A.log" | tail -n 1)"
fi
moves t5 B A "a new set, proven with the new key"
seen=$(peer_keys A B)
[ "$seen" = "$NEW" ] && ok "A lists its new set to B as proven with $NEW" ||
	fail "A lists its new set to B as proven with $NEW" "keys '$seen'"


# --- a daemon holding only the dropped key is refused
keys E "$D/old"
loopback_start E $((BASE + 5)) --peer-key "$D/E.key" || abort_setup "daemon E did not start"
refused t6 A E

# --- a bad key file on SIGHUP changes nothing
printf 'not a key\n' >"$D/A.key"
if reload A && grep -q "the cluster keys stay as they were" "$D/A.log"; then
	ok "a key file that does not load on SIGHUP is logged, the keys stay"
else
	fail "a key file that does not load on SIGHUP is logged" "$(grep SIGHUP "$D/A.log" | tail -n 1)"
fi
moves t7 A C "after the refused reload"

for n in A B C E; do
	kill -0 "$(pid_of $n)" 2>/dev/null || fail "daemon $n still runs" "it exited: $(tail -n 2 "$D/$n.log" | tr '\n' '|')"
done
summary
