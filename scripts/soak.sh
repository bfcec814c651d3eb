#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# soak.sh: do two daemons that run for a long time under mixed work stay flat? Two xferd on the
# two-node rig (scripts/netns.sh, scripts/cluster.sh), and for --minutes a loop of what clients
# do: xferbench_net pipe (pairings 4K-1M, batched, both directions), win (gets and puts, posted
# too), check (scatter/gather, every byte), xferctl readable/read of a file (cmp'd), the Python
# examples (kv_transfer.py and kv_window.py `both` across the nodes), a local xferbench bench
# --max 16M now and then, and clients killed with SIGKILL 0-300 ms after they started (the
# Python ones PYKILL_MS, default 1500, later: once torch is imported and they have connected).
#
# Every --interval seconds each daemon's VmRSS, VmHWM, open fds, threads, `xferctl --json stats`
# counters (clients, regions, ops, windows, waits) and peer connections, and the size of its
# /metrics exposition, go to $OUT/samples.tsv. After the loop (clients gone, 3 s for the peers'
# side of killed clients) a last row is taken and checked against the one taken after the first
# round: 1 client (the sampler's own), 0 regions, ops, windows, window handles and waits, and the
# fds it had then (give or take peer connections). Then both daemons get SIGTERM and must exit 0
# (with a SANITIZE build, LeakSanitizer reports at that exit, in the daemons' logs).
#
#   scripts/soak.sh [--minutes 20] [--interval 30] [--out DIR]
#
# Environment: BUILD (default build), CLIENT_BUILD (the clients' build, default BUILD: with
# BUILD=build-san, CLIENT_BUILD=build keeps ASan out of python3). Not part of make test: it
# takes minutes and loads both vCPUs. Exit status 0 when every transfer checked out, the end
# matched the baseline and both daemons exited 0.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

MINUTES=20
INTERVAL=30
OUT=
while [ $# -gt 0 ]; do
	case $1 in
	--minutes) MINUTES=$2; shift 2 ;;
	--interval) INTERVAL=$2; shift 2 ;;
	--out) OUT=$2; shift 2 ;;
	-h | --help)
		sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//p}' "$0"
		exit 0
		;;
	*)
		echo "soak.sh: unknown option '$1' (try --help)" >&2
		exit 2
		;;
	esac
done
[[ $MINUTES =~ ^[1-9][0-9]*$ && $INTERVAL =~ ^[1-9][0-9]*$ ]] || {
	echo "soak.sh: --minutes and --interval take whole numbers from 1" >&2
	exit 2
}
BUILD=${BUILD:-build}
CLIENT_BUILD=${CLIENT_BUILD:-$BUILD}
export BUILD
[ -n "$OUT" ] || OUT=$(mktemp -d "${TMPDIR:-/tmp}/soak-out.XXXXXX")
mkdir -p "$OUT"
for b in "$BUILD/xferd" "$CLIENT_BUILD"/{xferctl,xferbench,xferbench_net,libxferclient.so.1}; do
	[ -e "$b" ] || {
		echo "soak.sh: $b is missing: run 'make' first" >&2
		exit 1
	}
done
export XFERD_LIBRARY
XFERD_LIBRARY=$(cd "$CLIENT_BUILD" && pwd)/libxferclient.so.1
PY=/usr/bin/python3
PYKILL_MS=${PYKILL_MS:-1500} # (python3 takes about this long to import torch and connect)
NET=$CLIENT_BUILD/xferbench_net
CTL=$CLIENT_BUILD/xferctl

# shellcheck source=scripts/cluster.sh
. scripts/cluster.sh
SAMPLER=
soak_down()
{
	[ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null && wait "$SAMPLER" 2>/dev/null
	xc__rig_down
}
xc_rig_up soak.sh
trap soak_down EXIT
MPORT=9468
for n in 0 1; do # (own metrics ports: in loopback mode both nodes are 127.0.0.1)
	XC_CONFIG_EXTRA="\"metrics_listen\": \"127.0.0.1:$((MPORT + n))\"" xc__write_config "$n"
done
XC_KEEPALIVE_MS=1000 XC_KEEPALIVE_TIMEOUT_MS=5000 xc_start_all || exit 1

# sample NODE LABEL: one row of $OUT/samples.tsv for node NODE's daemon.
sample()
{
	local n=$1 pid st peers m="$OUT/metrics.$1.txt"
	pid=$(xc_pid "$n")
	st=$(timeout 10 "$CTL" --socket "$(xc_sock "$n")" --json stats 2>/dev/null) || st='{}'
	peers=$(timeout 10 "$CTL" --socket "$(xc_sock "$n")" --json peers 2>/dev/null) || peers='{}'
	xn_exec "$n" timeout 10 curl -s "http://127.0.0.1:$((MPORT + n))/metrics" >"$m"
	"$PY" - "$2" "$n" "/proc/$pid" "$st" "$peers" "$m" <<'EOF'
import json, os, sys, time
label, n, proc, st, peers, mpath = sys.argv[1:]
st, peers = json.loads(st), json.loads(peers)
met = {}
for line in open(mpath):
    if line.strip() and not line.startswith("#"):
        name = line.split("{")[0].split()[0]
        met[name] = met.get(name, 0) + float(line.split()[-1])
mlines = sum(1 for line in open(mpath) if line.strip() and not line.startswith("#"))
kv = dict(l.split(":", 1) for l in open(proc + "/status"))
g = st.get("limits", {}).get("global", {})
conns = sum(p.get("connections", 0) for p in peers.get("peers", []))
print("\t".join(str(x) for x in (
    time.strftime("%H:%M:%S", time.gmtime()), label, n,
    kv["VmRSS"].split()[0], kv["VmHWM"].split()[0], len(os.listdir(proc + "/fd")),
    kv["Threads"].strip(), st.get("clients", "-"), st.get("regions", "-"), st.get("ops", "-"),
    g.get("windows", {}).get("used", "-"), g.get("waits", {}).get("used", "-"),
    st.get("fds", "-"), conns, st.get("ops_completed", "-"), st.get("ops_failed", "-"),
    st.get("ops_cancelled", "-"), round(st.get("bytes_moved", 0) / 1e9, 1),
    int(met.get("xferd_window_handles", -1)), int(met.get("xferd_peer_sets", -1)), mlines,
    os.getloadavg()[0])))
EOF
}
COLS=(time label node rss_kb hwm_kb fds threads clients regions ops windows waits stat_fds
	peer_conns ops_done ops_failed ops_cancelled GB_moved whandles peer_sets metric_lines load1)
(IFS=$'\t' && echo "${COLS[*]}") >"$OUT/samples.tsv"
sample 0 base >>"$OUT/samples.tsv"
sample 1 base >>"$OUT/samples.tsv"
(
	trap 'kill "$nap" 2>/dev/null; exit 0' TERM
	while :; do
		sleep "$INTERVAL" &
		nap=$!
		wait "$nap"
		sample 0 run
		sample 1 run
	done >>"$OUT/samples.tsv"
) &
SAMPLER=$!

FAILS=0
fail()
{
	FAILS=$((FAILS + 1))
	echo "$(date -u +%T) FAIL: $*" >>"$OUT/fails.log"
}
# quiet CMD...: runs CMD with its output in $OUT/last.log, appended to fails.log if it fails.
quiet()
{
	if ! timeout 120 "$@" >"$OUT/last.log" 2>&1; then
		fail "$* (status $?): $(tail -n 5 "$OUT/last.log" | tr '\n' ' ')"
		return 1
	fi
}
head -c $((24 << 20)) /dev/urandom >"$OUT/file.bin"

# file_read FROM TO: xferctl readable on node FROM, read on node TO, bytes compared.
file_read()
{
	local meta="$OUT/meta.$1" pid i
	rm -f "$meta" "$OUT/copy.bin"
	timeout 60 "$CTL" --socket "$(xc_sock "$1")" readable --meta-file "$meta" "$OUT/file.bin" \
		>/dev/null 2>>"$OUT/fails.log" &
	pid=$!
	for ((i = 0; i < 200; i++)); do [ -s "$meta" ] && break; sleep 0.02; done
	quiet "$CTL" --socket "$(xc_sock "$2")" read "@$meta" "$OUT/copy.bin" &&
		{ cmp -s "$OUT/file.bin" "$OUT/copy.bin" || fail "file read $1 -> $2: bytes differ"; }
	wait "$pid" || fail "readable on node $1 (status $?)"
}

# killed MS CMD...: starts CMD in a process group of its own and kills the group (CMD and any
# process it started) with SIGKILL after MS + 0-300 ms (MS: when its transfers have begun).
KILLED=0
killed()
{
	local ms=$(($1 + RANDOM % 300))
	shift
	setsid "$@" >/dev/null 2>&1 &
	local pid=$!
	sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
	kill -KILL -- "-$pid" 2>/dev/null && KILLED=$((KILLED + 1))
	wait "$pid" 2>/dev/null
}

# killed_read FROM TO: a read on node TO of a readable on node FROM, the reader killed
# mid-transfer, then the owner's xferctl too (whatever its operation's state by then).
killed_read()
{
	local meta="$OUT/meta.k$1" pid i
	rm -f "$meta"
	timeout 60 "$CTL" --socket "$(xc_sock "$1")" readable --meta-file "$meta" "$OUT/file.bin" \
		>/dev/null 2>&1 &
	pid=$!
	for ((i = 0; i < 200; i++)); do [ -s "$meta" ] && break; sleep 0.02; done
	killed 0 "$CTL" --socket "$(xc_sock "$2")" read "@$meta" "$OUT/copy.bin"
	kill -KILL "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
}

# round I: one pass of the mixed workload (the directions swap with I's parity).
round()
{
	local a=$(($1 % 2)) b=$((($1 + 1) % 2)) sa sb
	sa=$(xc_sock "$a")
	sb=$(xc_sock "$b")
	quiet "$NET" pipe --passive "$sa" --active "$sb" --sizes 4K,64K,1M --depths 8 --batch 8 \
		--seconds 0.4
	quiet "$NET" pipe --passive "$sa" --active "$sb" --sizes 4K,64K --depths 16 --seconds 0.3
	quiet "$NET" win --passive "$sa" --active "$sb" --sizes 4K,64K,1M --depths 16 --batch 8 \
		--seconds 0.4
	quiet "$NET" win --passive "$sa" --active "$sb" --sizes 4K,1M --depths 16 --batch 8 \
		--seconds 0.3 --post
	quiet "$NET" check --passive "$sa" --active "$sb" --max 8M
	file_read "$a" "$b"
	killed 0 "$NET" pipe --passive "$sa" --active "$sb" --sizes 64K,1M --depths 16 --seconds 5
	killed 0 "$NET" win --passive "$sa" --active "$sb" --sizes 4K,1M --depths 16 --batch 8 \
		--seconds 5 --post
	killed_read "$a" "$b"
	if (($1 % 3 == 0)); then
		quiet "$PY" client/python/examples/kv_transfer.py both --socket "$sa" --decode-socket "$sb"
		quiet "$PY" client/python/examples/kv_window.py both --socket "$sa" --decode-socket "$sb"
		killed "$PYKILL_MS" "$PY" client/python/examples/kv_window.py both --socket "$sa" \
			--decode-socket "$sb"
	fi
	if (($1 % 5 == 4)); then
		quiet "$CLIENT_BUILD/xferbench" bench --socket "$sa" --max 16M
		killed 0 "$CLIENT_BUILD/xferbench" bench --socket "$sb" --max 16M
	fi
}

END=$(($(date +%s) + MINUTES * 60))
ROUNDS=0
while [ "$(date +%s)" -lt "$END" ]; do
	round "$ROUNDS"
	ROUNDS=$((ROUNDS + 1))
	if [ "$ROUNDS" = 1 ]; then # (the baseline with the peer connections and workers up)
		sleep 3
		sample 0 warm >>"$OUT/samples.tsv"
		sample 1 warm >>"$OUT/samples.tsv"
	fi
done
kill "$SAMPLER" 2>/dev/null
wait "$SAMPLER" 2>/dev/null
SAMPLER=
sleep 3
sample 0 end >>"$OUT/samples.tsv"
sample 1 end >>"$OUT/samples.tsv"

# The end row against the warm row (after one round, clients gone): nothing a client made is
# left, and the fds are the warm row's when the daemon keeps as many peer connections.
"$PY" - "$OUT/samples.tsv" <<'EOF' || FAILS=$((FAILS + 1))
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
bad = 0
for n in "01":
    base = [r for r in rows if r["node"] == n and r["label"] == "warm"][0]
    end = [r for r in rows if r["node"] == n and r["label"] == "end"][0]
    want = {"clients": "1", "regions": "0", "ops": "0", "windows": "0", "waits": "0",
            "whandles": "0"}
    for k, v in want.items():
        if end[k] != v:
            print("soak.sh: node %s ends with %s %s, not %s" % (n, k, end[k], v))
            bad = 1
    # (the daemon's own count, in the reply that counted 1 client: /proc's, read after that
    # client left, may still hold its connection or a scrape's)
    fds = int(base["stat_fds"]) + int(end["peer_conns"]) - int(base["peer_conns"])
    if int(end["stat_fds"]) != fds:
        print("soak.sh: node %s ends with %s fds and %s peer connections, after one round %s"
              " and %s" % (n, end["stat_fds"], end["peer_conns"], base["stat_fds"],
                          base["peer_conns"]))
        bad = 1
sys.exit(bad)
EOF
xc_stop_all || FAILS=$((FAILS + 1))
cp "$(xc_log 0)" "$OUT/xferd.0.log" && cp "$(xc_log 1)" "$OUT/xferd.1.log"
if grep -l 'Sanitizer' "$OUT"/xferd.?.log; then
	FAILS=$((FAILS + 1))
fi
column -t -s $'\t' "$OUT/samples.tsv"
echo "soak: $ROUNDS rounds in $MINUTES min, $KILLED clients killed, $FAILS failures" \
	"(samples, logs: $OUT)"
[ "$FAILS" -eq 0 ]
