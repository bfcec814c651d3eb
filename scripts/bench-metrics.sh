#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench-metrics.sh (`make bench`): does scraping the Prometheus endpoint disturb transfers?
# Two daemons on 127.0.0.1 ports (TCP transport, a throwaway cluster key), metrics on both;
# $BUILD/xferbench_net moves SIZE-byte transfers (read and write) for --seconds per kind, in
# ROUNDS alternating runs: without scrapes, then with both daemons scraped every 100 ms. The
# machine is shared, so only the two columns of the same run are compared (medians of the
# rounds, and their ratio); it also reports what one scrape took (connect to last byte) and
# what the daemon spent rendering it.
#
# Options: --size SIZE (64M), --seconds S (2), --rounds N (3), --json FILE.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build}
PY=/usr/bin/python3
SIZE=64M
SECS=2
ROUNDS=3
JSON_OUT=
while [ $# -gt 0 ]; do
	case $1 in
	--size) SIZE=$2; shift 2 ;;
	--seconds) SECS=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--json) JSON_OUT=$2; shift 2 ;;
	*)
		echo "bench-metrics.sh: unknown option '$1' (--size, --seconds, --rounds, --json)" >&2
		exit 2
		;;
	esac
done
for b in xferd xferbench_net; do
	[ -x "$BUILD/$b" ] || { echo "bench-metrics.sh: $BUILD/$b is missing: run 'make'" >&2; exit 1; }
done

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
BASE=$((20000 + RANDOM % 20000))

# start NAME PEERPORT METRICSPORT
start()
{
	local i
	"$BUILD/xferd" --socket "$RUN/$1.sock" --listen "127.0.0.1:$2" --peer-key "$RUN/key" \
		--metrics-listen "127.0.0.1:$3" --log-level warn 2>"$RUN/$1.log" &
	PIDS+=($!)
	for ((i = 0; i < 100; i++)); do
		curl -s -o /dev/null "http://127.0.0.1:$3/metrics" && return 0
		sleep 0.1
	done
	echo "bench-metrics.sh: daemon $1 did not start: $(tail -n 3 "$RUN/$1.log")" >&2
	exit 1
}
start A $((BASE + 1)) $((BASE + 3))
start B $((BASE + 2)) $((BASE + 4))

# run OUT: one xferbench_net run, its JSON lines in OUT.
run()
{
	"$BUILD/xferbench_net" bench --passive "$RUN/A.sock" --active "$RUN/B.sock" --min "$SIZE" \
		--max "$SIZE" --seconds "$SECS" --lat-iters 0 --json >"$1"
}

# scraper STOPFILE OUT: both daemons every 100 ms, one line of milliseconds per scrape.
scraper()
{
	$PY tests/metrics_flood.py 127.0.0.1 $((BASE + 3)) --time "$1" >"$2.a" &
	local a=$!
	$PY tests/metrics_flood.py 127.0.0.1 $((BASE + 4)) --time "$1" >"$2.b"
	wait "$a"
	cat "$2.a" "$2.b" >"$2"
}

gbps() { $PY -c 'import json,sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    if o["kind"] == sys.argv[2]: print(o["gbps_median"])' "$1" "$2"; }

echo "bench-metrics: $ROUNDS rounds of $SIZE transfers, ${SECS} s per kind, TCP on 127.0.0.1"
for ((r = 1; r <= ROUNDS; r++)); do
	run "$RUN/none.$r"
	rm -f "$RUN/stop"
	scraper "$RUN/stop" "$RUN/times.$r" &
	sp=$!
	run "$RUN/scraped.$r"
	touch "$RUN/stop"
	wait "$sp"
	echo "  round $r: read $(gbps "$RUN/none.$r" read) / $(gbps "$RUN/scraped.$r" read) GB/s," \
		"write $(gbps "$RUN/none.$r" write) / $(gbps "$RUN/scraped.$r" write) GB/s (none / scraped)"
done

curl -s "http://127.0.0.1:$((BASE + 3))/metrics" >"$RUN/final.prom"
$PY - "$RUN" "$ROUNDS" "$JSON_OUT" "$SIZE" <<'EOF'
import json, statistics, sys
run, rounds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def gbps(f, kind):
    for line in open(f):
        o = json.loads(line)
        if o["kind"] == kind:
            return o["gbps_median"]

res = {}
for kind in ("read", "write"):
    none = statistics.median(gbps(f"{run}/none.{r}", kind) for r in range(1, rounds + 1))
    scr = statistics.median(gbps(f"{run}/scraped.{r}", kind) for r in range(1, rounds + 1))
    res[kind] = {"none_gbps": none, "scraped_gbps": scr, "ratio": scr / none if none else 0}
times = []
for r in range(1, rounds + 1):
    times += [float(t) for t in open(f"{run}/times.{r}") if t.strip() != "bad"]
times.sort()
render = {}
for line in open(f"{run}/final.prom"):
    if line.startswith("xferd_metrics_render_seconds_"):
        k, v = line.split()
        render[k.rsplit("_", 1)[1]] = float(v)
render_ms = render["sum"] / render["count"] * 1000 if render.get("count") else 0
print()
print(f"{'':24}{'no scrapes':>14}{'scraped /100ms':>16}{'ratio':>8}")
for kind in ("read", "write"):
    r = res[kind]
    print(f"  {kind + ' GB/s (median)':22}{r['none_gbps']:14.3f}{r['scraped_gbps']:16.3f}"
          f"{r['ratio']:7.2f}x")
if times:
    print(f"  scrapes: {len(times)}, median {statistics.median(times):.2f} ms, "
          f"max {times[-1]:.2f} ms (connect to last byte, during transfers); "
          f"daemon render time {render_ms:.3f} ms on average")
if out:
    json.dump({"size": sys.argv[4], **res, "scrape_ms_median": statistics.median(times) if times else None,
               "scrape_ms_max": times[-1] if times else None, "render_ms": render_ms},
              open(out, "w"))
EOF
