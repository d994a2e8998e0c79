#!/usr/bin/env bash
# Issue 38's fairness on the CPU: one party (Redis, gateway, one CPU worker serving two tables,
# `busy` and `quiet`), `pirq bench load --allow-same-party` (both key halves to this one party:
# answers still verify, privacy does not hold; a measurement of scheduling only):
#
#   1. quiet, 1 client alone;  2. busy, 1 client alone;
#   3. busy at $BUSY_CLIENTS clients for WARM + 3 DUR seconds and, from its DUR-th second,
#      quiet at 1 client for DUR seconds.
#
# The goal (issue 38 item 2): the lone quiet lookup under load within 3x its idle latency.
# Prints one line a run and the ratio; JSON reports land in $OUT (default: a temporary folder).
#
#   ops/bench/tables-fair.sh     # release binaries from target/release (cargo build first)
#
# Sizes: BUSY_PAGES (default 16384) and QUIET_PAGES (256) pages of PAGE_SIZE (4096) bytes;
# THREADS (worker scanner threads, default 1), DUR (5), WARM (1), BUSY_CLIENTS (64).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/target/release:$PATH"
BUSY_PAGES=${BUSY_PAGES:-16384}
QUIET_PAGES=${QUIET_PAGES:-256}
PAGE_SIZE=${PAGE_SIZE:-4096}
THREADS=${THREADS:-1}
DUR=${DUR:-5}
WARM=${WARM:-1}
BUSY_CLIENTS=${BUSY_CLIENTS:-64}
REDIS_PORT=${REDIS_PORT:-7391}
GATEWAY_PORT=${GATEWAY_PORT:-8391}
METRICS_PORT=${METRICS_PORT:-9391}
W=$(mktemp -d)
OUT=${OUT:-$W/out}
mkdir -p "$OUT"
PIDS=()
LOGS=$W
# shellcheck source=scripts/lib/bench-procs.sh
. scripts/lib/bench-procs.sh
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$W/busy.pirdb" "$W/quiet.pirdb"
}
trap cleanup EXIT
ALL_CPUS=0-$(($(nproc) - 1))
URL=http://127.0.0.1:$GATEWAY_PORT

echo "machine: $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
pirq db gen --pages "$BUSY_PAGES" --page-size "$PAGE_SIZE" --seed 1 --out "$W/busy.pirdb" >/dev/null 2>&1
pirq db gen --pages "$QUIET_PAGES" --page-size "$PAGE_SIZE" --seed 2 --out "$W/quiet.pirdb" >/dev/null 2>&1
start "$ALL_CPUS" redis redis-server --port "$REDIS_PORT" --save "" --appendonly no --dir "$W"
sleep 0.3
start "$ALL_CPUS" worker pirq-worker --redis "redis://127.0.0.1:$REDIS_PORT" --prefix fair \
    --backend cpu --threads "$THREADS" --metrics-listen "127.0.0.1:$METRICS_PORT" \
    --table "busy=$W/busy.pirdb" --table "quiet=$W/quiet.pirdb"
start "$ALL_CPUS" gateway pirq-gateway --redis "redis://127.0.0.1:$REDIS_PORT" --prefix fair \
    --listen "127.0.0.1:$GATEWAY_PORT"
# Both tables registered (the gateway lists them) before any load.
for _ in $(seq 300); do
    if get "$URL/v1/tables" "$W/tables.json" 2>/dev/null &&
        grep -q '"busy"' "$W/tables.json" && grep -q '"quiet"' "$W/tables.json"; then
        break
    fi
    sleep 0.1
done
grep -q '"quiet"' "$W/tables.json" || {
    echo "the tables never registered" >&2
    tail -n 20 "$W"/*.log >&2
    exit 1
}

# load NAME TABLE CLIENTS SECONDS: one closed-loop run, every page verified.
load() {
    pirq bench load --party-a "$URL" --party-b "$URL" --allow-same-party --table "$2" \
        --verify "$W/$2.pirdb" --concurrency "$3" --duration "$4" --warmup "$WARM" --quiet \
        --json "$OUT/$1.json" >/dev/null 2>"$OUT/$1.txt"
}
# line NAME: lookups/s, p50, p99 and errors of a run.
line() {
    python3 - "$OUT/$1.json" "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
l = r["latency_ms"]
print(f"{sys.argv[2]:<28} {r['achieved_qps']:>9.1f}/s  p50 {l['p50']:>8.2f} ms  p99 {l['p99']:>8.2f} ms  errors {sum(r['errors'].values())}")
EOF
}

load quiet-alone quiet 1 "$DUR"
line quiet-alone
load busy-alone busy 1 "$DUR"
line busy-alone
load busy-loaded busy "$BUSY_CLIENTS" $((3 * DUR)) &
BUSY=$!
sleep $((WARM + DUR))
load quiet-under-load quiet 1 "$DUR"
wait "$BUSY"
line busy-loaded
line quiet-under-load
python3 - "$OUT" <<'EOF'
import json, sys
p = lambda n: json.load(open(f"{sys.argv[1]}/{n}.json"))["latency_ms"]["p50"]
print(f"quiet p50 under load / alone: {p('quiet-under-load') / p('quiet-alone'):.2f}x (goal <= 3x)")
EOF
# How each table's rotation is cut, and the worker's own view: turn time per table.
grep -o 'rotating scan ready.*' "$W/worker.log" | sed 's/^/worker: /'
get "http://127.0.0.1:$METRICS_PORT/metrics" "$OUT/worker-metrics.txt"
grep -E '^pirq_worker_turn_duration_seconds(_sum|_count)' "$OUT/worker-metrics.txt" | sed 's/^/worker: /'
cp "$W"/*.log "$OUT/"
if grep -E ' (WARN|ERROR) ' "$W"/*.log; then
    echo "warnings or errors in the logs above" >&2
fi
