#!/usr/bin/env bash
# Load run on loopback (issue 4): seed a database with LOAD_OFFERS listed
# offers shaped by the Alibaba GPU trace, serve it with a per-token rate
# limit high enough not to interfere, and measure with cmd/loadgen, in one
# run: the yardsticks (a static file, and an authenticated API call that
# does no matching), then narrow quotes, then a mix with broad ones.
# Run it with `make loadtest`; it stops the server it started.
set -euo pipefail

BIN=${BIN:-bin/gpumarket}
LOADGEN=${LOADGEN:-bin/loadgen}
DIR=${LOAD_DIR:-$(mktemp -d /tmp/gpumarket-load.XXXXXX)}
ADDR=${LOAD_ADDR:-127.0.0.1:8090}
OFFERS=${LOAD_OFFERS:-100000}
CLIENTS=${LOAD_CLIENTS:-32}
DURATION=${LOAD_DURATION:-15s}
TRACE=${LOAD_TRACE:-../shared/data/alibaba-gpu-v2023/csv}

mkdir -p "$DIR"
rm -f "$DIR"/load.db*
"$LOADGEN" -seed -db "$DIR/load.db" -offers "$OFFERS" -trace "$TRACE" -token-out "$DIR/token" | grep -v '^token:'
token=$(cat "$DIR/token")

METRICS_ADDR=${LOAD_METRICS_ADDR:-127.0.0.1:8095}
"$BIN" serve -addr "$ADDR" -db "$DIR/load.db" -api-rate 1000000 -metrics-addr "$METRICS_ADDR" >"$DIR/server.out" 2>"$DIR/server.log" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
	grep -q listening "$DIR/server.out" 2>/dev/null && break
	kill -0 "$server" 2>/dev/null || { cat "$DIR/server.log"; exit 1; }
	sleep 0.1
done
grep -q listening "$DIR/server.out" || { echo "server did not start"; exit 1; }

# cpu_us: the server's CPU time so far (user and system), in µs, from
# Linux's /proc; empty elsewhere.
cpu_us() { awk -v t="$(getconf CLK_TCK)" '{ printf "%d", ($14 + $15) * 1000000 / t }' "/proc/$server/stat" 2>/dev/null || true; }
# run TITLE MIX: one load run; it also prints the server's CPU time per
# request over the measured part (after loadgen's 2 s warm-up), a figure
# other processes on the machine move much less than rates and latencies
# (they take processors, not work), and keeps it in last_cpu.
run() {
	echo
	echo "== $1"
	"$LOADGEN" -url "http://$ADDR" -token "$token" -c "$CLIENTS" -d "$DURATION" -mix "$2" >"$DIR/last.out" &
	local lg=$! c0 c1 n
	sleep 2
	c0=$(cpu_us)
	wait "$lg"
	c1=$(cpu_us)
	cat "$DIR/last.out"
	n=$(awk '$1 != "kind" && $1 != "all" && $2 ~ /^[0-9]+$/ { n += $2 } END { print n + 0 }' "$DIR/last.out")
	last_cpu=
	if [ -n "$c0" ] && [ -n "$c1" ] && [ "$n" -gt 0 ]; then
		last_cpu=$(((c1 - c0) / n))
		echo "-- server CPU: $last_cpu µs per request"
	fi
}
# rate KIND: the req/s column of KIND's row in the last run's table; p99
# KIND FILE and errors KIND FILE: its p99 (in ms) and errors in FILE.
rate() { awk -v k="$1" '$1 == k { print $3 }' "$DIR/last.out"; }
p99() { awk -v k="$1" '$1 == k { v = $6; if (v ~ /µs$/) { sub(/µs$/, "", v); v /= 1000 } else sub(/ms$/, "", v); print v }' "$2"; }
errors() { awk -v k="$1" '$1 == k { print $8 }' "$2"; }
run "yardstick: GET /static/app.css (no database)" static=1
run "yardstick: GET /api/v1/ping (token check, rate limit, JSON)" ping=1
ping_rate=$(rate ping)
ping_cpu=$last_cpu
# LOAD_PROFILE=1: a CPU profile of the server during the narrow run
# (docs/testing.md), from the operator's port.
if [ -n "${LOAD_PROFILE:-}" ]; then
	(sleep 4 && curl -s -o "$DIR/narrow.prof" "http://$METRICS_ADDR/debug/pprof/profile?seconds=8") &
	profiler=$!
fi
run "POST /api/v1/quotes, narrow requests" narrow=1
narrow_rate=$(rate narrow)
echo "-- narrow quotes / ping yardstick: $narrow_rate / $ping_rate req/s = $(awk -v a="$narrow_rate" -v b="$ping_rate" 'BEGIN { printf "%.2f", a / b }') (target at least 0.33); narrow p99 $(p99 narrow "$DIR/last.out") ms at $CLIENTS clients (target at most 20)"
if [ -n "$ping_cpu" ] && [ -n "$last_cpu" ]; then
	echo "-- server CPU per request, ping / narrow quote: $ping_cpu / $last_cpu µs = $(awk -v a="$ping_cpu" -v b="$last_cpu" 'BEGIN { printf "%.2f", a / b }') (the ratio of rates a CPU-bound server would reach)"
fi
if [ -n "${LOAD_PROFILE:-}" ]; then
	wait "$profiler"
	echo "-- CPU profile of the server during the narrow run: $DIR/narrow.prof (go tool pprof -top $BIN $DIR/narrow.prof)"
	go tool pprof -top "$BIN" "$DIR/narrow.prof" 2>/dev/null | sed -n '1,25p'
fi
run "POST /api/v1/quotes, 9 narrow : 1 broad" narrow=9,broad=1

# Expensive requests are bounded (issue 13): narrow quotes from
# NARROW_CLIENTS clients alone, then beside BROAD_LOOPS loops sending broad
# quotes back to back (through the API with a token, then as visitors of
# the request builder, whose limit per address answers most with 429).
# The loops run as a second loadgen for the whole measurement.
NARROW_CLIENTS=${LOAD_NARROW_CLIENTS:-4}
BROAD_LOOPS=${LOAD_BROAD_LOOPS:-16}
narrow_beside() {
	echo
	echo "== narrow quotes, $NARROW_CLIENTS clients, beside $BROAD_LOOPS loops of $1"
	"$LOADGEN" -url "http://$ADDR" -token "$token" -c "$BROAD_LOOPS" -d "$DURATION" -warmup 3s -mix "$2" >"$DIR/loops.out" &
	loops=$!
	sleep 1
	"$LOADGEN" -url "http://$ADDR" -token "$token" -c "$NARROW_CLIENTS" -d "$DURATION" -mix narrow=1 | tee "$DIR/beside.out"
	wait "$loops"
	echo "-- the loops:"
	cat "$DIR/loops.out"
	local p
	p=$(p99 narrow "$DIR/beside.out")
	echo "-- narrow p99 beside $1 / idle: $p / $idle_p99 ms = $(awk -v a="$p" -v b="$idle_p99" 'BEGIN { printf "%.2f", a / b }') (target at most 2); narrow refused: $(errors narrow "$DIR/beside.out") (target 0)"
}
echo
echo "== narrow quotes, $NARROW_CLIENTS clients, idle"
"$LOADGEN" -url "http://$ADDR" -token "$token" -c "$NARROW_CLIENTS" -d "$DURATION" -mix narrow=1 | tee "$DIR/idle.out"
idle_p99=$(p99 narrow "$DIR/idle.out")
narrow_beside "broad API quotes" broad=1
narrow_beside "broad request-builder quotes as visitors" anon=1

# The matcher alone, in the same run (Go benchmarks): a narrow request at
# 100,000 offers, an index write beside no-match broad requests there, and
# a broad request within the work budget at 1,000,000 offers.
if [ "${LOAD_BENCH:-1}" != 0 ]; then
	echo
	echo "== go test -bench: matcher alone"
	for b in 'Match/^offers=100000$/narrow/index$' 'WriterBesideRelaxations' 'Match/^offers=1000000$/broad/budget$'; do
		go test -run '^$' -bench "$b" -benchtime 40x ./market | grep -E '^Benchmark|offers from'
	done
fi
# A fleet of simulated provider agents on one replica (issue 28):
# heartbeats, long-polls and reports over HTTP at each size, with payments
# (pay → keys installed) and the narrow-quote yardstick beside. It serves
# its own marketplace (a child process) and takes a few minutes, so it runs
# when LOAD_FLEET is set, e.g. LOAD_FLEET=1000,5000,10000 make loadtest.
if [ -n "${LOAD_FLEET:-}" ]; then
	echo
	echo "== fleet of simulated agents: ${LOAD_FLEET}"
	"$LOADGEN" -fleet -agents "$LOAD_FLEET" -interval "${LOAD_FLEET_INTERVAL:-10s}" -d "${LOAD_FLEET_DURATION:-30s}"
fi
echo
echo "server log and database in $DIR"
