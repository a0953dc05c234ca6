#!/usr/bin/env bash
# Narrow quotes per second with one and with two replicas on the same
# PostgreSQL (issue 12), in one run beside the SQLite yardstick: seed an
# SQLite database with LOAD_OFFERS trace-shaped offers (loadgen -seed), copy
# it into PostgreSQL with `gpumarket migrate-db`, then measure with
# cmd/loadgen, LOAD_CLIENTS clients for LOAD_DURATION each:
#   1. one server on the SQLite file (the yardstick),
#   2. one replica on PostgreSQL,
#   3. two replicas on PostgreSQL, the clients spread over both.
# PostgreSQL is LOAD_PG_URL (an empty database) or, when unset, a throwaway
# cluster started here from Debian's postgresql binaries (as the postgres
# user when run as root) with its default durability, stopped at the end.
# Everything runs on one machine: with 2 cores the replicas, PostgreSQL and
# the load generator share them, so a second replica adds no cores.
# Run it with `make loadtest-replicas`.
set -euo pipefail

BIN=${BIN:-bin/gpumarket}
LOADGEN=${LOADGEN:-bin/loadgen}
DIR=${LOAD_DIR:-$(mktemp -d /tmp/gpumarket-load-replicas.XXXXXX)}
OFFERS=${LOAD_OFFERS:-100000}
CLIENTS=${LOAD_CLIENTS:-32}
DURATION=${LOAD_DURATION:-15s}
TRACE=${LOAD_TRACE:-../shared/data/alibaba-gpu-v2023/csv}
PG_URL=${LOAD_PG_URL:-}
PG_PORT=${LOAD_PG_PORT:-55432}
ADDRS=(127.0.0.1:8091 127.0.0.1:8092 127.0.0.1:8093)

mkdir -p "$DIR"
rm -f "$DIR"/load.db*
pids=()
pgstop=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ ${#pgstop[@]} -gt 0 ]; then "${pgstop[@]}" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

if [ -z "$PG_URL" ]; then
	pgbin=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)}
	[ -x "$pgbin/initdb" ] || { echo "no PostgreSQL server binaries (install postgresql) and no LOAD_PG_URL"; exit 1; }
	as=()
	mkdir -p "$DIR/pg"
	if [ "$(id -u)" = 0 ]; then
		# initdb refuses root: the cluster runs as postgres.
		as=(runuser -u postgres --)
		chmod 755 "$DIR"
		chown postgres: "$DIR/pg"
	fi
	"${as[@]}" "$pgbin/initdb" -D "$DIR/pg/data" -A trust -U postgres -E UTF8 >/dev/null
	"${as[@]}" "$pgbin/pg_ctl" -D "$DIR/pg/data" -l "$DIR/pg/log" -w \
		-o "-p $PG_PORT -k $DIR/pg -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
	pgstop=("${as[@]}" "$pgbin/pg_ctl" -D "$DIR/pg/data" -m fast -w stop)
	PG_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres?sslmode=disable"
fi

"$LOADGEN" -seed -db "$DIR/load.db" -offers "$OFFERS" -trace "$TRACE" -token-out "$DIR/token" | grep -v '^token:'
token=$(cat "$DIR/token")
"$BIN" migrate-db -from "$DIR/load.db" -to "$PG_URL" | tail -n 3
key=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')

# serve NAME DB ADDR: one server, stopped at the end; waits until it listens.
serve() {
	"$BIN" serve -addr "$3" -db "$2" -replica "$1" -session-key "$key" -api-rate 1000000 \
		>"$DIR/$1.out" 2>"$DIR/$1.log" &
	local pid=$!
	pids+=("$pid")
	for _ in $(seq 1 1200); do
		grep -q listening "$DIR/$1.out" 2>/dev/null && return 0
		kill -0 "$pid" 2>/dev/null || { cat "$DIR/$1.log"; exit 1; }
		sleep 0.1
	done
	echo "$1 did not start"
	exit 1
}

run() {
	echo
	echo "== $1"
	"$LOADGEN" -url "$2" -token "$token" -c "$CLIENTS" -d "$DURATION" -mix narrow=1
}

serve sqlite "$DIR/load.db" "${ADDRS[0]}"
run "yardstick: narrow quotes, one server on SQLite" "http://${ADDRS[0]}"
kill "${pids[0]}"
wait "${pids[0]}" || true
pids=()

serve replica-a "$PG_URL" "${ADDRS[1]}"
run "narrow quotes, one replica on PostgreSQL" "http://${ADDRS[1]}"
serve replica-b "$PG_URL" "${ADDRS[2]}"
run "narrow quotes, two replicas on PostgreSQL" "http://${ADDRS[1]},http://${ADDRS[2]}"
echo
echo "logs and the SQLite database in $DIR"
