#!/usr/bin/env bash
# The gateway's instructions per party query (issue 35): a repeatable count where CPU time is
# not (a small shared machine moves the gateway's µs a query by ±10 % run to run, and `perf stat
# -e instructions` needs a PMU a VM may not expose). One party as in host-path.sh (one
# redis-server, CPU workers over a tiny database, `pirq bench load --allow-same-party --bincode
# --keys 1` in closed loop, every answer verified), with the gateway run under
# `valgrind --tool=callgrind`: its counters are zeroed after the warm-up and dumped after DUR
# seconds (`callgrind_control`), and the instructions it ran between are divided by the party
# queries it accepted meanwhile (`pirq_gateway_queries_accepted_total`; the two /metrics reads
# fall outside the counted span). Valgrind runs the gateway's threads one at a time, ~50× slower:
# the counts are the code's, not this machine's, but batch sizes (queries a pub/sub message, a
# submit run) follow the slowed timing, so compare binaries at the same CLIENTS.
#
#   ops/bench/gateway-instructions.sh GATEWAY [GATEWAY...]   # each a pirq-gateway binary;
#       # build one with symbols for the per-function report (the release profile strips them):
#       #   CARGO_PROFILE_RELEASE_STRIP=none cargo build --release --target-dir target/prof \
#       #       -p pirq-gateway --bin pirq-gateway
#
# Environment: PATHS (default "wait poll": `Prefer: wait`, and GET every 5 ms with `--poll`),
# RUNS (default 1: each gateway runs each path RUNS times, gateways alternating), CLIENTS
# (default 32), DUR / WARM (seconds, default 20 / 8; valgrind's start takes a few of them),
# WORKERS (default 2), PAGES (default 512), GATEWAY_ARGS (flags every gateway gets; default the
# GPU host's thread plan, "--runtime-threads 2 --connection-threads 4"), BIN_DIR (pirq-worker
# and pirq, default target/release), OUT (default /tmp/gateway-instructions), REDIS_PORT /
# GW_PORT (7491 / 8491), TOP (functions in each run's report, default 40).
#
# Per run: OUT/NAME/callgrind.out.* (callgrind_annotate reads them), OUT/NAME/top.txt (the
# functions by exclusive instructions), and a line in OUT/results.txt: instructions a party
# query, and on the poll path the GETs a party query (a poll's count follows the timing: the
# instructions a request, given too, do not).
set -euo pipefail
# shellcheck source=ops/bench/lib/procs.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/procs.sh"
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || { sed -n '2,30p' "$0" >&2; exit 2; }
GWS=()
for g in "$@"; do GWS+=("$(realpath "$g")"); done
PATHS=${PATHS:-wait poll}
RUNS=${RUNS:-1}
CLIENTS=${CLIENTS:-32}
DUR=${DUR:-20}
WARM=${WARM:-8}
WORKERS=${WORKERS:-2}
PAGES=${PAGES:-512}
GATEWAY_ARGS=${GATEWAY_ARGS:---runtime-threads 2 --connection-threads 4}
BIN_DIR=$(realpath "${BIN_DIR:-target/release}")
OUT=${OUT:-/tmp/gateway-instructions}
REDIS_PORT=${REDIS_PORT:-7491}
GW_PORT=${GW_PORT:-8491}
TOP=${TOP:-40}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")

# counts: "accepted-queries posts gets" from the gateway's /metrics
counts() {
    get "$GW_PORT" /metrics "$W/metrics.txt"
    awk '/^pirq_gateway_queries_accepted_total[{ ]/ {q += $NF}
        /^pirq_gateway_http_requests_total\{/ && /route="\/v1\/queries"/ && /method="POST"/ {p += $NF}
        /^pirq_gateway_http_requests_total\{/ && /route="\/v1\/queries\/\{id\}"/ && /method="GET"/ {g += $NF}
        END {print q + 0, p + 0, g + 0}' "$W/metrics.txt"
}

"$BIN_DIR/pirq" db gen --pages "$PAGES" --page-size 4096 --seed 11 --out "$W/db.pirdb" >/dev/null 2>&1

# one_run GATEWAY PATH NAME
one_run() {
    local gw_bin=$1 path=$2 name=$3 L=$OUT/$3 load_args=()
    rm -rf "$L" && mkdir -p "$L"
    [ "$path" != poll ] || load_args=(--poll)
    spawn "$L/redis.log" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" \
        --appendonly no --dir "$W"
    for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
    local url=redis://127.0.0.1:$REDIS_PORT gw_args=()
    read -ra gw_args <<<"$GATEWAY_ARGS"
    spawn "$L/gateway.log" valgrind --tool=callgrind --callgrind-out-file="$L/callgrind.out.%p" \
        "$gw_bin" --redis "$url" --prefix gi --listen "127.0.0.1:$GW_PORT" "${gw_args[@]}"
    local gw=${PIDS[-1]} i
    for ((i = 0; i < WORKERS; i++)); do
        spawn "$L/worker$i.log" "$BIN_DIR/pirq-worker" --redis "$url" --prefix gi --db "$W/db.pirdb" \
            --backend cpu --threads 1 --consumer "w$i"
    done
    local ready=
    for _ in $(seq 600); do
        if get "$GW_PORT" /v1/info "$W/info.json" 2>/dev/null && grep -q "\"workers\":${WORKERS}[,}]" "$W/info.json"; then
            ready=1
            break
        fi
        sleep 0.2
    done
    [ -n "$ready" ] || { tail "$L"/*.log >&2; echo "FAILED: $name: the party did not start" >&2; exit 1; }
    local gw_url=http://127.0.0.1:$GW_PORT
    spawn "$L/load.log" "$BIN_DIR/pirq" bench load --quiet --duration $((DUR + 4)) --warmup "$WARM" \
        --json "$L/load.json" --party-a "$gw_url" --party-b "$gw_url" --allow-same-party \
        --verify "$W/db.pirdb" --bincode --keys 1 --concurrency "$CLIENTS" "${load_args[@]}"
    local load=${PIDS[-1]} q0 p0 g0 q1 p1 g1
    sleep "$WARM"
    read -r q0 p0 g0 < <(counts)
    callgrind_control -z "$gw" >/dev/null
    sleep "$DUR"
    callgrind_control -d "$gw" >/dev/null
    read -r q1 p1 g1 < <(counts)
    wait "$load" || { tail -n 20 "$L/load.log" >&2; echo "FAILED: $name: the load failed" >&2; exit 1; }
    stop_all
    local dump
    dump=$(ls "$L"/callgrind.out.*.1 2>/dev/null | head -n 1)
    [ -n "$dump" ] || { echo "FAILED: $name: no callgrind dump" >&2; exit 1; }
    callgrind_annotate --inclusive=no "$dump" 2>/dev/null | head -n $((TOP + 25)) >"$L/top.txt"
    local ir
    ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$dump")
    awk -v ir="$ir" -v q="$((q1 - q0))" -v p="$((p1 - p0))" -v g="$((g1 - g0))" -v name="$name" \
        -v path="$path" -v gw="$gw_bin" -v res="$OUT/results.txt" 'BEGIN {
        line = sprintf("%s: %s %s: %d party queries, %.0f instructions a party query, %.0f a request (%d POST, %d GET: %.2f GETs a query)",
                       name, gw, path, q, q ? ir / q : 0, (p + g) ? ir / (p + g) : 0, p, g, q ? g / q : 0)
        print line; print line >> res }'
}

{
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%FT%TZ)"
    echo "PATHS=\"$PATHS\" RUNS=$RUNS CLIENTS=$CLIENTS DUR=$DUR WARM=$WARM WORKERS=$WORKERS PAGES=$PAGES GATEWAY_ARGS=\"$GATEWAY_ARGS\""
} | tee -a "$OUT/results.txt"
for run in $(seq "$RUNS"); do
    for path in $PATHS; do
        for i in "${!GWS[@]}"; do
            one_run "${GWS[$i]}" "$path" "run$run-$path-gw$i"
        done
    done
done
echo "results: $OUT/results.txt; per run: $OUT/<run>/top.txt"
