#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench-metrics.sh (`make bench`): what a scrape of /metrics takes under a 50-client load, and
# whether scraping disturbs the transfers. Two daemons on 127.0.0.1 ports (TCP transport, a
# throwaway cluster key), metrics on both. Two loads of 50 clients:
#   pairs    tests/test_metrics.sh's: 25 readable/read pairs of xferctl processes, SIZE random
#            bytes each (checked with cmp), in WAVES waves; GB/s = bytes moved / wall time;
#   benches  25 xferbench_net processes, each a passive client on A and an active one on B,
#            moving SIZE reads for 2 s, then writes: the daemons themselves are busy;
#            GB/s = the sum of the processes' medians (reads and writes averaged).
# Each round runs each load without scrapes and with both daemons scraped every 100 ms
# (tests/metrics_flood.py --time: connect to last byte), in two placements:
#   shared  the daemons are children of this script, in its session: the kernel schedules
#           them in one group with the 50 clients (sched_autogroup), as test scripts run them;
#   own     the daemons and the scrapers each start in a session of their own (setsid), so
#           each is a scheduling group of its own, as systemd runs xferd.service in its own
#           cgroup and a Prometheus server runs apart from the clients.
# Printed: throughput without and with scrapes (medians of the rounds), the scrape times
# (p50/p90/p99/max over all rounds), how long daemon A waited for a CPU while runnable
# (/proc/PID/schedstat), and the daemon's side of the scrapes (its histogram
# xferd_metrics_scrape_seconds: accept to reply written). The machine is shared: compare only
# numbers of the same run.
#
# Options: --size SIZE (4M), --waves N (4), --rounds N (2), --loads "pairs benches",
# --placements "shared own", --json FILE.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build}
PY=/usr/bin/python3
SIZE=4M
WAVES=4
ROUNDS=2
LOADS="pairs benches"
PLACEMENTS="shared own"
JSON_OUT=
while [ $# -gt 0 ]; do
	case $1 in
	--size) SIZE=$2; shift 2 ;;
	--waves) WAVES=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--loads) LOADS=$2; shift 2 ;;
	--placements) PLACEMENTS=$2; shift 2 ;;
	--json) JSON_OUT=$2; shift 2 ;;
	*)
		echo "bench-metrics.sh: unknown option '$1' (--size, --waves, --rounds, --loads, --placements, --json)" >&2
		exit 2
		;;
	esac
done
for b in xferd xferctl xferbench_net; do
	[ -x "$BUILD/$b" ] || { echo "bench-metrics.sh: $BUILD/$b is missing: run 'make'" >&2; exit 1; }
done
command -v setsid >/dev/null || { echo "bench-metrics.sh: setsid (util-linux) is missing" >&2; exit 1; }
BYTES=$(numfmt --from=iec "$SIZE")

RUN=$(mktemp -d "${TMPDIR:-/tmp}/bench-metrics.XXXXXX")
PIDS=()
cleanup()
{
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$RUN"
}
trap cleanup EXIT
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$RUN/key")
BASE=$((10000 + RANDOM % 20000))

# start PLACEMENT NAME PEERPORT METRICSPORT: a daemon, its pid in PID_PLACEMENT_NAME. In its own
# session for "own" (setsid execs it in place: the pid is the daemon's).
start()
{
	local i wrap=
	[ "$1" = own ] && wrap=setsid
	$wrap "$BUILD/xferd" --socket "$RUN/$1$2.sock" --listen "127.0.0.1:$3" \
		--peer-key "$RUN/key" --metrics-listen "127.0.0.1:$4" --log-level warn \
		2>"$RUN/$1$2.log" &
	PIDS+=($!)
	printf -v "PID_$1_$2" '%s' "$!"
	for ((i = 0; i < 100; i++)); do
		curl -s -o /dev/null "http://127.0.0.1:$4/metrics" && return 0
		sleep 0.1
	done
	echo "bench-metrics.sh: daemon $1$2 did not start: $(tail -n 3 "$RUN/$1$2.log")" >&2
	exit 1
}
for pl in $PLACEMENTS; do
	case $pl in
	shared) start shared A $((BASE + 1)) $((BASE + 2)); start shared B $((BASE + 3)) $((BASE + 4)) ;;
	own) start own A $((BASE + 5)) $((BASE + 6)); start own B $((BASE + 7)) $((BASE + 8)) ;;
	*) echo "bench-metrics.sh: --placements: shared and/or own, not '$pl'" >&2; exit 2 ;;
	esac
done
mport() { if [ "$1" = shared ]; then echo $((BASE + 2)) $((BASE + 4)); else echo $((BASE + 6)) $((BASE + 8)); fi; }

# pair PLACEMENT NAME: one readable (on A) / read (on B) of BYTES random bytes; 0 when both
# clients succeed and the bytes that arrived are the source's (test_metrics.sh's transfer).
pair()
{
	local a=$RUN/$1A.sock b=$RUN/$1B.sock n=$RUN/$2 op rc=0 i
	head -c "$BYTES" /dev/urandom >"$n.src"
	"$BUILD/xferctl" --socket "$a" -m "$n.meta" readable "$n.src" >/dev/null 2>"$n.oerr" &
	op=$!
	for ((i = 0; i < 200; i++)); do
		[ -s "$n.meta" ] && break
		sleep 0.02
	done
	timeout -k 2 30 "$BUILD/xferctl" --socket "$b" read "@$n.meta" "$n.dst" 2>"$n.err" || rc=$?
	[ "$rc" -eq 0 ] || kill "$op" 2>/dev/null
	wait "$op" || rc=1
	[ "$rc" -eq 0 ] && cmp -s "$n.src" "$n.dst" && rm -f "$n.src" "$n.dst" "$n.meta"
}

# pairs PLACEMENT: the xferctl load, WAVES waves of 25 pairs; prints failures and GB/s (bytes
# moved / wall time).
pairs()
{
	local w i p bad=0 t0 t1 pids
	t0=$EPOCHREALTIME
	for ((w = 1; w <= WAVES; w++)); do
		pids=()
		for i in $(seq 1 25); do
			pair "$1" "$1.$w.$i" &
			pids+=($!)
		done
		for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
	done
	t1=$EPOCHREALTIME
	echo "$bad $($PY -c 'import sys; print(int(sys.argv[1]) / (float(sys.argv[3]) - float(sys.argv[2])) / 1e9)' \
		"$((25 * WAVES * BYTES))" "$t0" "$t1")"
}

# benches PLACEMENT: the busy load, 25 xferbench_net processes (a passive client on A and an
# active one on B each) moving SIZE reads for 2 s, then writes; prints failures and GB/s (the
# sum of the 25 processes' medians, reads and writes averaged).
benches()
{
	local i p bad=0 pids=()
	for i in $(seq 1 25); do
		"$BUILD/xferbench_net" bench --passive "$RUN/$1A.sock" --active "$RUN/$1B.sock" \
			--min "$SIZE" --max "$SIZE" --seconds 2 --lat-iters 0 --json >"$RUN/xb.$i" 2>&1 &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
	echo "$bad $(cat "$RUN"/xb.* | $PY -c 'import json, sys
print(sum(json.loads(l)["gbps_median"] for l in sys.stdin if l.startswith("{")) / 2)')"
}

# load LOAD PLACEMENT OUT: one run of LOAD (pairs or benches); OUT gets "failures GB/s",
# daemon A's schedstat (on-CPU ns, run-queue ns, timeslices) before and after, and the start
# and end times.
load()
{
	local pid s0 s1 t0 r
	pid=$(eval "echo \$PID_$2_A")
	read -r s0 <"/proc/$pid/schedstat"
	t0=$EPOCHREALTIME
	r=$("$1" "$2")
	read -r s1 <"/proc/$pid/schedstat"
	echo "$r $s0 $s1 $t0 $EPOCHREALTIME" >"$3"
}

# scraped LOAD PLACEMENT OUT: the load while both daemons are scraped every 100 ms; the
# scrape times (ms, or "bad") in OUT.times.
scraped()
{
	local wrap= ports sa sb
	[ "$2" = own ] && wrap=setsid
	read -r -a ports <<<"$(mport "$2")"
	rm -f "$RUN/stop"
	$wrap $PY tests/metrics_flood.py 127.0.0.1 "${ports[0]}" --time "$RUN/stop" >"$3.ta" &
	sa=$!
	$wrap $PY tests/metrics_flood.py 127.0.0.1 "${ports[1]}" --time "$RUN/stop" >"$3.tb" &
	sb=$!
	load "$1" "$2" "$3"
	touch "$RUN/stop"
	wait "$sa" "$sb"
	cat "$3.ta" "$3.tb" >"$3.times"
}

echo "bench-metrics: 50 clients, $ROUNDS rounds, TCP on 127.0.0.1; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  pairs:   25 readable/read xferctl pairs x $WAVES waves of $SIZE (tests/test_metrics.sh's load)"
echo "  benches: 25 xferbench_net processes (2 clients each), $SIZE reads 2 s then writes 2 s"
for ((r = 1; r <= ROUNDS; r++)); do
	for ld in $LOADS; do
		for pl in $PLACEMENTS; do
			load "$ld" "$pl" "$RUN/$ld.$pl.none.$r"
			scraped "$ld" "$pl" "$RUN/$ld.$pl.scraped.$r"
		done
	done
	echo "  round $r done (load average $(cut -d' ' -f1 /proc/loadavg))"
done
for pl in $PLACEMENTS; do
	read -r -a ports <<<"$(mport "$pl")"
	curl -s "http://127.0.0.1:${ports[0]}/metrics" >"$RUN/$pl.final.prom"
done

$PY - "$RUN" "$ROUNDS" "$JSON_OUT" "$SIZE" "$LOADS" "$PLACEMENTS" <<'EOF'
import json, statistics, sys
run, rounds, out, size, loads = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
placements = sys.argv[6].split()

def load(f):
    v = open(f).read().split()
    bad, gbps = int(v[0]), float(v[1])
    s0, s1 = [int(x) for x in v[2:5]], [int(x) for x in v[5:8]]
    return gbps, bad, (s1[1] - s0[1]) / 1e6, s1[2] - s0[2], (float(v[9]) - float(v[8])) * 1000

def pct(v, p):
    return v[min(len(v) - 1, int(len(v) * p))]

def served(f):
    """p50 and p90 of xferd_metrics_scrape_seconds as bucket bounds (ms), the mean, and the
    replies that got a stale snapshot (None from a daemon that does not count them)."""
    b, s, n, stale = [], 0.0, 0, None
    for line in open(f):
        if line.startswith("xferd_metrics_stale_replies_total "):
            stale = int(line.split()[-1])
        if line.startswith("xferd_metrics_scrape_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            b.append((float("inf") if le == "+Inf" else float(le) * 1000, int(line.split()[-1])))
        elif line.startswith("xferd_metrics_scrape_seconds_sum"):
            s = float(line.split()[-1]) * 1000
        elif line.startswith("xferd_metrics_scrape_seconds_count"):
            n = int(line.split()[-1])
    le = lambda p: next((ub for ub, c in b if c >= p * n), float("inf"))
    return (le(0.5), le(0.9), s / n, stale) if n else (0, 0, 0, stale)

res, failed = {}, 0
print()
print(f"{'':17}{'GB/s none':>10}{'scraped':>9}{'ratio':>7} | {'scrapes':>7}{'p50':>8}{'p90':>8}"
      f"{'p99':>8}{'max':>8} ms | daemon A waiting for a CPU")
for ld in loads.split():
    for pl in placements:
        none = [load(f"{run}/{ld}.{pl}.none.{r}") for r in range(1, rounds + 1)]
        scr = [load(f"{run}/{ld}.{pl}.scraped.{r}") for r in range(1, rounds + 1)]
        failed += sum(x[1] for x in none + scr)
        gn, gs = statistics.median(x[0] for x in none), statistics.median(x[0] for x in scr)
        times, bad = [], 0
        for r in range(1, rounds + 1):
            for t in open(f"{run}/{ld}.{pl}.scraped.{r}.times"):
                if t.strip() == "bad":
                    bad += 1
                else:
                    times.append(float(t))
        times.sort()
        wait = sum(x[2] for x in scr) / sum(x[4] for x in scr) * 100
        per = sum(x[2] for x in scr) / max(1, sum(x[3] for x in scr))
        k = f"{ld}/{pl}"
        res[k] = {"none_gbps": gn, "scraped_gbps": gs, "ratio": gs / gn if gn else 0,
                  "scrapes": len(times), "bad_scrapes": bad,
                  "scrape_ms": {"p50": pct(times, .5), "p90": pct(times, .9),
                                "p99": pct(times, .99), "max": times[-1]} if times else None,
                  "daemon_wait_pct": wait, "daemon_wait_ms_per_slice": per}
        s = res[k]["scrape_ms"] or {"p50": 0, "p90": 0, "p99": 0, "max": 0}
        print(f"  {k:15}{gn:10.3f}{gs:9.3f}{gs / gn if gn else 0:6.2f}x | {len(times):7}"
              f"{s['p50']:8.2f}{s['p90']:8.2f}{s['p99']:8.2f}{s['max']:8.2f}    | "
              f"{wait:3.0f}% of the time, {per:.2f} ms a wakeup")
for pl in placements:
    d50, d90, dmean, stale = served(f"{run}/{pl}.final.prom")
    res[f"daemon_side/{pl}"] = {"p50_le_ms": d50, "p90_le_ms": d90, "mean_ms": dmean,
                                "stale_replies": stale}
    print(f"  daemon side, {pl:6}: p50 <= {d50:g} ms, p90 <= {d90:g} ms, mean {dmean:.2f} ms"
          + ("" if stale is None else f", {stale} stale snapshots")
          + " (daemon A's xferd_metrics_scrape_seconds, accept to reply written, all loads)")
print("  (waiting for a CPU: daemon A's run-queue time in /proc/PID/schedstat, scraped runs)")
if failed:
    print(f"  {failed} transfers FAILED")
if out:
    json.dump({"size": size, **res, "failed_transfers": failed}, open(out, "w"))
sys.exit(1 if failed or any(v.get("bad_scrapes") for v in res.values()) else 0)
EOF
