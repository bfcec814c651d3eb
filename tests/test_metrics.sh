#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The Prometheus endpoint (daemon/metrics.c) and the configuration around it:
#   - the example config lists every key config.c knows and is accepted unchanged;
#   - xferd --check-config prints the effective configuration and refuses bad ones by rule;
#   - SIGHUP applies what can change at run time and refuses, in the log, what cannot;
#   - two daemons on 127.0.0.1 ports move bytes (checked) while being scraped; every scrape
#     passes `promtool check metrics` and the counters equal what `xferctl stats` reports;
#   - a flood of idle, slow and oversized HTTP connections leaves the daemon serving, its
#     connections bounded and its fds back at their baseline (tests/metrics_flood.py);
#   - 50 clients moving bytes while the endpoint is scraped: scrape times are reported (never
#     a pass/fail criterion: the machine is shared), every scrape well-formed.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=/usr/bin/python3
T=30
POLL=0.05
# shellcheck source=tests/lib.sh
. tests/lib.sh

require_built
loopback_setup metrics
mkkey "$D/key"
EXAMPLE=systemd/xferd.conf.example

pid_of() { eval "echo \$PID_$1"; }
nfds() { ls "/proc/$(pid_of "$1")/fd" 2>/dev/null | wc -l; }
xctl() { local n=$1; shift; timeout -k 2 "$T" "$BUILD/xferctl" --socket "$D/$n.sock" "$@"; }

# stat NODE KEY: a top-level number of `xferctl --json stats`.
stat()
{
	xctl "$1" --json stats | $PY -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$2"
}

# scrape PORT FILE: GET /metrics into FILE; 0 on HTTP 200.
scrape()
{
	local code
	code=$(curl -s --max-time 10 -o "$2" -w '%{http_code}' "http://127.0.0.1:$1/metrics") &&
		[ "$code" = 200 ]
}

# msum FILE NAME [LABELS]: the sum of the samples of NAME whose labels contain LABELS.
msum()
{
	awk -v name="$2" -v labels="${3:-}" '
		/^#/ { next }
		{ split($1, a, "{") }
		a[1] == name && index($1, labels) { s += $NF }
		END { printf "%.0f\n", s }' "$1"
}

# promcheck FILE: promtool's verdict on FILE (its output on failure, in PROMOUT).
promcheck() { PROMOUT=$(promtool check metrics <"$1" 2>&1); }

# started NAME CONFIG_ARGS...: xferd without peer listening, on $D/NAME.sock, up within 10 s.
started()
{
	local name=$1 i
	shift
	"$BUILD/xferd" --socket "$D/$name.sock" --foreground "$@" 2>"$D/$name.log" &
	PIDS+=($!)
	printf -v "PID_$name" '%s' "$!"
	for ((i = 0; i < 100; i++)); do
		xctl "$name" status >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}

# stop NAME: SIGTERM, and its exit status.
stop()
{
	local pid rc=0
	pid=$(pid_of "$1")
	kill "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null || rc=$?
	return $rc
}

# ---------------------------------------------------------------------------------------------
# The example config and --check-config

example_keys()
{
	local key missing=
	# Every key of the strict unpack in apply(), and every resource name of the limits.
	for key in $(sed -n '/^static int apply(/,/^}/p' daemon/config.c | grep -o '"[a-z_]*", &' |
		cut -d'"' -f2) $(sed -n '/res_names\[XD_NRES\] = {/,/};/p' daemon/limits.c |
		grep -o '\[XD_RES_[A-Z]*\] = "[a-z]*"' | cut -d'"' -f2); do
		grep -q "\"$key\":" "$EXAMPLE" || missing+=" $key"
	done
	if [ -z "$missing" ]; then
		ok "the example config names every key config.c and limits.c know"
	else
		fail "the example config names every key" "missing:$missing"
	fi
}

example_accepted()
{
	local rc=0
	"$BUILD/xferd" --check-config --config "$EXAMPLE" >"$D/ex.json" 2>"$D/ex.err" || rc=$?
	if [ "$rc" -ne 0 ]; then
		fail "--check-config accepts the example" "exit $rc: $(tr '\n' '|' <"$D/ex.err")"
		return
	fi
	if started ex --config "$EXAMPLE" && stop ex; then
		ok "xferd accepts the example config unchanged (--check-config and a real start)"
	else
		fail "xferd starts with the example config" "$(tail -n 2 "$D/ex.log" | tr '\n' '|')"
	fi
}

# check_printed: the printed configuration is itself a valid config that prints the same.
check_printed()
{
	"$BUILD/xferd" --check-config --metrics-listen 127.0.0.1:9 --log-level debug \
		>"$D/eff.json" 2>/dev/null
	if ! grep -q '"metrics_listen": "127.0.0.1:9"' "$D/eff.json" ||
		! grep -q '"log_level": "debug"' "$D/eff.json"; then
		fail "--check-config prints the effective configuration" "$(head -c 300 "$D/eff.json")"
		return
	fi
	"$BUILD/xferd" --check-config --config "$D/eff.json" >"$D/eff2.json" 2>/dev/null
	if cmp -s "$D/eff.json" "$D/eff2.json"; then
		ok "--check-config prints the effective configuration, which reads back the same"
	else
		fail "the printed configuration reads back the same" "$(diff "$D/eff.json" "$D/eff2.json" | head -3 | tr '\n' '|')"
	fi
}

# refused_config WHAT PATTERN TEXT [OPTIONS...]: --check-config of a file TEXT exits 1 naming it.
refused_config()
{
	local what=$1 pattern=$2 rc=0
	printf '%s\n' "$3" >"$D/bad.conf"
	shift 3
	"$BUILD/xferd" --check-config --config "$D/bad.conf" "$@" >/dev/null 2>"$D/bad.err" || rc=$?
	if [ "$rc" -eq 1 ] && grep -q -- "$pattern" "$D/bad.err"; then
		ok "--check-config refuses $what, naming the rule"
	else
		fail "--check-config refuses $what" "exit $rc: $(tr '\n' '|' <"$D/bad.err")"
	fi
}

if want config; then
	example_keys
	example_accepted
	check_printed
	refused_config "an unknown key" "lgo_level" '{"lgo_level": "info"}'
	refused_config "copy_threads 0" "copy_threads 1..64" '{"copy_threads": 0}'
	refused_config "busy_poll_us 1001" "busy_poll_us 0..1000" '{"busy_poll_us": 1001}'
	refused_config "a metrics_listen name" "numeric ADDR:PORT" '{"metrics_listen": "localhost:9468"}'
	refused_config "a metrics_listen without port" "numeric ADDR:PORT" '{"metrics_listen": "127.0.0.1"}'
	refused_config "malformed JSON (with its line)" "bad.conf:3:" $'# comment\n{\n"log_level" "info"}'
	refused_config "a bad log level" "err, warn, info or debug" '{"log_level": "loud"}'
	refused_config "a bad --metrics-listen" "numeric ADDR:PORT" '{}' --metrics-listen 1.2.3.4:0
fi

# ---------------------------------------------------------------------------------------------
# SIGHUP

# hup NAME: SIGHUP, then waits for the log line that ends the reload; prints the new lines.
hup()
{
	local before i
	before=$(wc -l <"$D/$1.log")
	kill -HUP "$(pid_of "$1")"
	for ((i = 0; i < 100; i++)); do
		tail -n +$((before + 1)) "$D/$1.log" | grep -q 'SIGHUP: \(applied\|configuration unchanged\|.*not applied (the\)' && break
		sleep 0.05
	done
	tail -n +$((before + 1)) "$D/$1.log"
}

busy_poll_of() # NODE: the busy_poll_us `xferctl stats` reports
{
	xctl "$1" --json stats | $PY -c 'import json,sys; print(json.load(sys.stdin)["busy_poll"]["us"])'
}

limit_of() # NODE RESOURCE: the per-connection limit `xferctl stats` reports
{
	xctl "$1" --json stats |
		$PY -c 'import json,sys; print(json.load(sys.stdin)["limits"]["per_connection"][sys.argv[1]]["limit"])' "$2"
}

if want sighup; then
	HP=$((BASE + 7))
	printf '{"log_level": "info", "limits": {"regions": 8}}\n' >"$D/hup.conf"
	started hup --config "$D/hup.conf" || abort_setup "xferd with a config did not start"
	printf '{"log_level": "debug", "limits": {"regions": 2}, "socket_mode": 384,\n "metrics_listen": "127.0.0.1:%d", "busy_poll_us": 0}\n' "$HP" >"$D/hup.conf"
	out=$(hup hup)
	if [[ $out == *"SIGHUP: applied "*log_level* ]] && [[ $out == *"SIGHUP: applied "*limits* ]] &&
		[[ $out == *"SIGHUP: applied "*metrics_listen* ]] &&
		[[ $out == *"SIGHUP: applied "*busy_poll_us* ]] && [ "$(busy_poll_of hup)" = 0 ] &&
		xctl hup status >/dev/null && grep -q "debug .*connected: pid" "$D/hup.log" &&
		[[ $out == *"need a restart: socket_mode"* ]] && [ "$(limit_of hup regions)" = 2 ] &&
		scrape "$HP" "$D/hup.prom" && grep -q "^xferd_busy_polls_total [0-9]" "$D/hup.prom" &&
		grep -q "^xferd_busy_poll_seconds_total [0-9]" "$D/hup.prom"; then
		ok "SIGHUP applies log_level (debug lines follow), limits, metrics_listen and busy_poll_us and names them; refuses socket_mode"
	else
		fail "SIGHUP applies what can change" "log: $(echo "$out" | tr '\n' '|')"
	fi
	printf '{"log_level": "debug", "limits": {"regions": 2},\n "socket_mode": 384, "metrics_listen": 1}\n' >"$D/hup.conf"
	out=$(hup hup)
	if [[ $out == *"not applied (the running configuration stays)"* ]] &&
		[ "$(limit_of hup regions)" = 2 ] && scrape "$HP" "$D/hup.prom"; then
		ok "SIGHUP with a broken file changes nothing and says so"
	else
		fail "SIGHUP with a broken file changes nothing" "log: $(echo "$out" | tr '\n' '|')"
	fi
	printf '{"log_level": "info", "socket_mode": 384}\n' >"$D/hup.conf"
	out=$(hup hup)
	if [[ $out == *"metrics off"* ]] && ! scrape "$HP" "$D/hup.prom" &&
		[ "$(limit_of hup regions)" = 4096 ] && [ "$(busy_poll_of hup)" = 100 ]; then
		ok "SIGHUP turns metrics off, limits and busy_poll_us back to their defaults when the keys go"
	else
		fail "SIGHUP turns metrics off" "log: $(echo "$out" | tr '\n' '|')"
	fi
	if stop hup; then ok "the reloaded daemon stops cleanly (exit 0)"; else fail "the reloaded daemon stops cleanly" "exit $?"; fi
fi

# ---------------------------------------------------------------------------------------------
# Scrapes during transfers: two daemons A (owner) and B, metrics on both

MA=$((BASE + 3))
MB=$((BASE + 4))
start_pair()
{
	loopback_start A $((BASE + 1)) --peer-key "$D/key" --metrics-listen "127.0.0.1:$MA" ||
		abort_setup "daemon A did not start: $(tail -n 3 "$D/A.log")"
	loopback_start B $((BASE + 2)) --peer-key "$D/key" --metrics-listen "127.0.0.1:$MB" ||
		abort_setup "daemon B did not start: $(tail -n 3 "$D/B.log")"
}

# transfer KIND OWNER ACTIVE NAME SIZE: readable/read or writable/write of SIZE random bytes;
# 0 when both clients succeed and the bytes that arrived are the source's.
transfer()
{
	local kind=$1 owner=$2 active=$3 name=$4 size=$5 op rc=0
	head -c "$size" /dev/urandom >"$D/$name.src"
	rm -f "$D/$name.meta"
	if [ "$kind" = read ]; then
		"$BUILD/xferctl" --socket "$D/$owner.sock" -m "$D/$name.meta" readable "$D/$name.src" \
			>/dev/null 2>"$D/$name.oerr" &
	else
		"$BUILD/xferctl" --socket "$D/$owner.sock" -m "$D/$name.meta" writable "$size" \
			"$D/$name.dst" >/dev/null 2>"$D/$name.oerr" &
	fi
	op=$!
	for ((i = 0; i < 200; i++)); do
		[ -s "$D/$name.meta" ] && break
		sleep 0.02
	done
	if [ "$kind" = read ]; then
		xctl "$active" read "@$D/$name.meta" "$D/$name.dst" 2>"$D/$name.err" || rc=$?
	else
		xctl "$active" write "@$D/$name.meta" "$D/$name.src" 2>"$D/$name.err" || rc=$?
	fi
	[ "$rc" -eq 0 ] || kill "$op" 2>/dev/null
	wait "$op" || rc=1
	[ "$rc" -eq 0 ] && cmp -s "$D/$name.src" "$D/$name.dst"
}

# scraper PORT PREFIX: scrapes every 50 ms until $D/stop-scraping exists; counts failures.
scraper()
{
	local n=0 bad=0
	while [ ! -e "$D/stop-scraping" ]; do
		n=$((n + 1))
		scrape "$1" "$2.last" || bad=$((bad + 1))
		promcheck "$2.last" || bad=$((bad + 1))
		sleep 0.05
	done
	echo "$n $bad" >"$2.count"
}

# windows_counted: windows (tests/test_windows.c's notify cases against A and B): A owns the
# windows, A and B open them; A counts the puts and the tags it delivered, and no window is left.
windows_counted()
{
	local out f=$D/win.prom
	if [ ! -x "$BUILD/tests/test_windows" ]; then
		skip "window metrics" "$BUILD/tests/test_windows is not built"
		return
	fi
	out=$(XFER_WINDOWS_NODES="$D/A.sock,$D/B.sock" timeout 120 "$BUILD/tests/test_windows" \
		notify_exactly_once_in_order 2>&1)
	metrics_current "http://127.0.0.1:$MA/metrics" "$f"
	if [[ $out =~ [1-9]\ passed,\ 0\ failed ]] && promcheck "$f" &&
		[ "$(msum "$f" xferd_window_operations_total)" -gt 0 ] &&
		[ "$(msum "$f" xferd_window_notifications_total)" -gt 0 ] &&
		[ "$(msum "$f" xferd_windows)" = 0 ] && [ "$(msum "$f" xferd_window_handles)" = 0 ]; then
		ok "windows: $(msum "$f" xferd_window_operations_total) window ops and $(msum "$f" xferd_window_notifications_total) tags counted, none left open"
	else
		fail "window metrics" "$(echo "$out" | tail -n 2 | tr '\n' '|') $(grep '^xferd_window' "$f" | tr '\n' ' ')"
	fi
}

# errored_op NODE: a readable whose client is killed: its op ends ERRORED.
errored_op()
{
	head -c 4096 /dev/urandom >"$D/c.src"
	"$BUILD/xferctl" --socket "$D/$1.sock" -m "$D/c.meta" readable "$D/c.src" >/dev/null 2>&1 &
	local p=$! i
	for ((i = 0; i < 200; i++)); do [ -s "$D/c.meta" ] && break; sleep 0.02; done
	kill -9 "$p"
	wait "$p" 2>/dev/null
	rm -f "$D/c.meta"
}

# matches NODE PORT: the metrics equal `xferctl stats` on NODE (idle: nothing moves now).
matches()
{
	local n=$1 f=$D/$1.final why=
	local completed cancelled failed bytes regions clients
	sleep 0.2 # (the last client's connection close is handled)
	metrics_current "http://127.0.0.1:$2/metrics" "$f" || why+=" no current scrape in 50"
	completed=$(stat "$n" ops_completed)
	cancelled=$(stat "$n" ops_cancelled)
	failed=$(stat "$n" ops_failed)
	bytes=$(stat "$n" bytes_moved)
	regions=$(stat "$n" regions)
	clients=$(stat "$n" clients)
	[ "$(msum "$f" xferd_operations_total 'state="complete"')" = "$completed" ] ||
		why+=" complete $(msum "$f" xferd_operations_total 'state="complete"') != $completed"
	[ "$(msum "$f" xferd_operations_total 'state="cancelled"')" = "$cancelled" ] ||
		why+=" cancelled $(msum "$f" xferd_operations_total 'state="cancelled"') != $cancelled"
	[ "$(msum "$f" xferd_operations_total 'state="errored"')" = "$failed" ] ||
		why+=" errored != $failed"
	[ "$(msum "$f" xferd_transferred_bytes_total)" = "$bytes" ] ||
		why+=" bytes $(msum "$f" xferd_transferred_bytes_total) != $bytes"
	[ "$(msum "$f" xferd_operation_duration_seconds_count)" = $((completed + cancelled + failed)) ] ||
		why+=" duration count != ended"
	[ "$(msum "$f" xferd_regions)" = "$regions" ] || why+=" regions != $regions"
	[ "$(msum "$f" xferd_operations_listed)" = "$(stat "$n" ops)" ] || why+=" listed ops != ops"
	# (stats counts the xferctl asking; the scrape came before it)
	[ "$(msum "$f" xferd_clients)" = $((clients - 1)) ] || why+=" clients != $clients - 1"
	[ "$completed" -gt 0 ] && [ "$failed" -gt 0 ] || why+=" nothing counted ($completed, $failed)"
	if [ -z "$why" ]; then
		ok "node $n: metrics equal xferctl stats ($completed complete, $failed errored, $cancelled cancelled, $bytes bytes)"
	else
		fail "node $n: metrics equal xferctl stats" "$why"
	fi
}

PAIR=
for g in transfers flood load; do [ -z "${ONLY:-}" ] || [[ $g =~ $ONLY ]] && PAIR=1; done
[ -n "$PAIR" ] && start_pair

if want transfers; then
	rm -f "$D/stop-scraping"
	scraper "$MA" "$D/sa" &
	SA=$!
	scraper "$MB" "$D/sb" &
	SB=$!
	bad=
	for i in 1 2 3; do
		transfer read A B "r$i" $((4 << 20)) || bad+=" read$i"
		transfer write A B "w$i" $((4 << 20)) || bad+=" write$i"
	done
	transfer read A A local1 $((1 << 20)) || bad+=" local"
	errored_op A
	errored_op B
	touch "$D/stop-scraping"
	wait "$SA" "$SB"
	if [ -z "$bad" ]; then
		ok "transfers while scraped (read, write across nodes, a local pair): bytes match"
	else
		fail "transfers while scraped" "failed:$bad"
	fi
	read -r na bada <"$D/sa.count"
	read -r nb badb <"$D/sb.count"
	if [ "$bada" = 0 ] && [ "$badb" = 0 ] && [ "$na" -gt 0 ] && [ "$nb" -gt 0 ]; then
		ok "$na + $nb scrapes during transfers, every one HTTP 200 and passing promtool check metrics"
	else
		fail "scrapes during transfers" "A: $bada of $na bad, B: $badb of $nb bad; $PROMOUT"
	fi
	windows_counted
	matches A "$MA"
	matches B "$MB"
	f=$D/B.final
	if [ "$(msum "$f" xferd_peer_sets 'transport="tcp",state="up"')" = 1 ] &&
		[ "$(msum "$f" xferd_claim_latency_seconds_count 'transport="tcp"')" -ge 6 ] &&
		[ "$(msum "$f" xferd_peer_sent_bytes_total)" -gt $((12 << 20)) ] &&
		[ "$(msum "$D/A.final" xferd_transferred_bytes_total 'transport="local"')" -ge $((1 << 20)) ]; then
		ok "peer sets, claim latency, bytes per peer and per transport are counted"
	else
		fail "peer and claim metrics" "$(grep -E '^xferd_(peer_sets|claim_latency_seconds_count|peer_sent)' "$f" | tr '\n' '|')"
	fi
fi

# ---------------------------------------------------------------------------------------------
# Hostile HTTP: idle, slow and oversized connections

if want flood; then
	sleep 0.3
	base_fds=$(nfds A)
	if $PY tests/metrics_flood.py 127.0.0.1 "$MA" >"$D/flood.out" 2>&1; then
		ok "HTTP flood: $(tr '\n' ' ' <"$D/flood.out")"
	else
		fail "HTTP flood" "$(tr '\n' '|' <"$D/flood.out")"
	fi
	scrape "$MA" "$D/after.prom"
	if promcheck "$D/after.prom" && xctl A status >/dev/null &&
		[ "$(msum "$D/after.prom" xferd_metrics_http_deadline_cuts_total)" -gt 0 ]; then
		ok "after the flood the daemon serves clients and scrapes; slow connections were cut"
	else
		fail "serving after the flood" "$PROMOUT $(grep deadline_cuts "$D/after.prom")"
	fi
	for ((i = 0; i < 40; i++)); do
		[ "$(nfds A)" -le "$base_fds" ] && break
		sleep 0.1
	done
	if [ "$(nfds A)" -le "$base_fds" ]; then
		ok "fds back to their baseline ($base_fds) after the flood"
	else
		fail "fds back to their baseline" "$(nfds A) > $base_fds"
	fi
fi

# ---------------------------------------------------------------------------------------------
# 50 clients: 25 readable/read pairs across the nodes, in rounds, while scraped every 100 ms

if want load; then
	# The same scrape with nothing else running, for reference.
	rm -f "$D/stop-idle"
	$PY tests/metrics_flood.py 127.0.0.1 "$MA" --time "$D/stop-idle" >"$D/idle-times" &
	LS=$!
	sleep 2
	touch "$D/stop-idle"
	wait "$LS"
	idle=$(grep -v bad "$D/idle-times" | sort -n | awk '{ a[NR] = $1 } END { if (NR) printf "median %.2f ms, max %.2f ms (%d scrapes)", a[int((NR + 1) / 2)], a[NR], NR }')
	note "scrape time idle (connect to last byte): $idle"
	rm -f "$D/stop-scraping"
	$PY tests/metrics_flood.py 127.0.0.1 "$MA" --time "$D/stop-scraping" >"$D/times" &
	LS=$!
	bad=0
	for round in 1 2 3 4; do
		pids=()
		for i in $(seq 1 25); do
			transfer read A B "l$round.$i" $((4 << 20)) &
			pids+=($!)
		done
		for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
	done
	touch "$D/stop-scraping"
	wait "$LS"
	n=$(grep -vc bad "$D/times")
	nbad=$(grep -c bad "$D/times")
	stats=$(grep -v bad "$D/times" | sort -n |
		awk '{ a[NR] = $1 } END { if (NR) printf "median %.2f ms, p90 %.2f ms, max %.2f ms", a[int((NR + 1) / 2)], a[int(NR * 0.9 + 0.5)], a[NR] }')
	scrape "$MA" "$D/load.final"
	render=$(awk '/^xferd_metrics_render_seconds_sum/ { s = $2 } /^xferd_metrics_render_seconds_count/ { n = $2 } END { if (n) printf "%.3f", s / n * 1000 }' "$D/load.final")
	served=$(msum "$D/load.final" xferd_metrics_scrape_seconds_count)
	side=$(awk -v n="$served" '/^xferd_metrics_scrape_seconds_bucket/ {
			split($1, a, "le=\""); split(a[2], b, "\""); le = b[1]
			if (!p50 && $2 >= n * 0.5) p50 = le; if (!p90 && $2 >= n * 0.9) p90 = le }
		END { printf "p50 <= %s s, p90 <= %s s", p50, p90 }' "$D/load.final")
	note "daemon time per snapshot (render on the event loop, xferd_metrics_render_seconds): $render ms on average"
	note "scrapes served the last snapshot, the event loop being busy: $(msum "$D/load.final" xferd_metrics_stale_replies_total) of $served"
	note "daemon side of the scrapes (accept to reply written, xferd_metrics_scrape_seconds): $side"
	note "scrape time under load (50 clients, $n scrapes, connect to last byte): $stats"
	note "(the daemons share the clients' scheduling group here; scripts/bench-metrics.sh compares)"
	if [ "$bad" = 0 ] && [ "$nbad" = 0 ] && [ "$n" -gt 0 ] && [ "$served" -ge "$n" ]; then
		ok "50 clients moving bytes (all matched) while $n scrapes, all well-formed ($stats)"
	else
		fail "50 clients while scraped" "$bad transfers failed, $nbad bad scrapes of $((n + nbad)), $served of $n in xferd_metrics_scrape_seconds"
	fi
fi

if [ -n "$PAIR" ]; then
	for n in A B; do
		if stop "$n"; then ok "daemon $n stops cleanly (exit 0)"; else fail "daemon $n stops cleanly" "exit $?"; fi
	done
fi
summary
[ "$failed" -eq 0 ]
