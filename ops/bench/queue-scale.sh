#!/usr/bin/env bash
# The queue's own ceiling (issue 29): how many keys/s one party's Redis carries when the scanner
# is out of the way. One party: Redis, GATEWAYS gateways, WORKERS CPU workers over a tiny
# database (PAGES pages of 4 KiB: a pass costs the worker almost nothing), one closed-loop
# `pirq bench load` per gateway with both key halves sent to the party (--allow-same-party: a
# benchmark of cost, every answer verified: the party answers both halves of every key, so its
# Redis does the work of two party queries per key counted). Per run: keys/s answered, Redis CPU
# per key (its
# utime + stime from /proc over the measured seconds, divided by the keys answered in them),
# the gateways' and workers' CPU per key, and Redis's per-command CPU (`INFO commandstats`,
# reset at the start of the measured seconds) per key. Results: docs/bench/queue-scale.md.
#
#   ops/bench/queue-scale.sh build [DIR]   # here: release binaries (CPU workers: no CUDA needed)
#                                          # and redis-server/redis-cli into DIR (default
#                                          # .gpu/queue-scale), stripped; no cargo on the host
#   ops/bench/queue-scale.sh run [DIR]     # on the measuring host (16 cores), from DIR
#
# Environment for `run`: PRIMARIES (Redis primaries, default "1"; a list runs each in turn —
# more than 1 needs binaries that take `--redis redis+cluster://…`, issue 29 step 3, and is
# refused until then), GATEWAYS (default 2), WORKERS (default 6), WORKER_THREADS (default 1),
# CLIENTS (closed-loop clients per gateway, default 256), KEYS (keys per query, default 1),
# DUR / WARM (seconds, default 30 / 5), RUNS (per configuration, default 2), PAGES (default 256),
# OUT (results folder, default .gpu/out/queue-scale). CPUs: REDIS_CPUS (default 0),
# GATEWAY_CPUS (default 1-4), WORKER_CPUS (default 5-10), CLIENT_CPUS (default 11-15).
set -euo pipefail
cd "$(dirname "$0")/../.."
D=${2:-.gpu/queue-scale}

case "${1:-}" in
build)
    # shellcheck source=scripts/lib/gpu-bundle.sh
    source scripts/lib/gpu-bundle.sh
    cargo build --release -p pirq-gateway -p pirq-worker -p pirq-cli \
        --bin pirq-gateway --bin pirq-worker --bin pirq
    rm -rf "$D" && mkdir -p "$D"
    cp target/release/pirq-gateway target/release/pirq-worker target/release/pirq "$D/"
    copy_redis_server "$D"
    cp "$(command -v redis-cli)" "$D/redis-cli"
    cp "$0" "$D/queue-scale.sh"
    git rev-parse --short HEAD >"$D/COMMIT"
    git diff --quiet HEAD || echo "(+ uncommitted changes)" >>"$D/COMMIT"
    strip "$D"/pirq* "$D/redis-server" "$D/redis-cli" 2>/dev/null || true
    du -sh "$D"
    exit 0
    ;;
run) ;;
*)
    echo "usage: $0 build | run [DIR]" >&2
    exit 2
    ;;
esac

B=$(realpath "$D")
export PATH="$B:$PATH" LD_LIBRARY_PATH="$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
OUT=${OUT:-.gpu/out/queue-scale}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
PRIMARIES=${PRIMARIES:-1}
GATEWAYS=${GATEWAYS:-2}
WORKERS=${WORKERS:-6}
WORKER_THREADS=${WORKER_THREADS:-1}
CLIENTS=${CLIENTS:-256}
KEYS=${KEYS:-1}
DUR=${DUR:-30}
WARM=${WARM:-5}
RUNS=${RUNS:-2}
PAGES=${PAGES:-256}
REDIS_CPUS=${REDIS_CPUS:-0}
GATEWAY_CPUS=${GATEWAY_CPUS:-1-4}
WORKER_CPUS=${WORKER_CPUS:-5-10}
CLIENT_CPUS=${CLIENT_CPUS:-11-15}
REDIS_PORT=7401
HZ=$(getconf CLK_TCK)
W=$(mktemp -d)
PIDS=()
stop_all() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
trap 'stop_all; rm -rf "$W"' EXIT

# start CPUS NAME CMD...: a background process pinned to CPUS, logging to $OUT/NAME.log
start() {
    local cpus=$1 name=$2
    shift 2
    taskset -c "$cpus" "$@" >"$OUT/$name.log" 2>&1 &
    PIDS+=($!)
}

# get PORT PATH FILE: GET from a local HTTP port into FILE (bash /dev/tcp; no curl needed)
get() {
    exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
    printf 'GET %s HTTP/1.0\r\n\r\n' "$2" >&3
    sed '1,/^\r$/d' <&3 >"$3"
    exec 3>&-
}

# ticks PID...: user + system CPU of the processes so far, in clock ticks
ticks() {
    local t=0 p
    for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
    echo "$t"
}

# wait_workers N: until the party's /v1/info lists N workers
wait_workers() {
    for _ in $(seq 600); do
        if get 8401 /v1/info "$W/info.json" 2>/dev/null &&
            grep -q "\"workers\":$1[,}]" "$W/info.json"; then
            return 0
        fi
        sleep 0.2
    done
    echo "the workers did not all register; see $OUT/*.log" >&2
    return 1
}

# one_run NAME PRIMARIES: one measured run; prints its line and appends it to $OUT/results.txt
one_run() {
    local name=$1 primaries=$2 url
    if [ "$primaries" != 1 ]; then
        echo "PRIMARIES=$primaries: these binaries take one Redis only (redis+cluster:// is issue 29 step 3)" >&2
        return 2
    fi
    start "$REDIS_CPUS" "$name-redis" redis-server --port "$REDIS_PORT" --save "" \
        --appendonly no --dir "$W"
    local redis=${PIDS[-1]}
    sleep 0.3
    url="redis://127.0.0.1:$REDIS_PORT"
    local gws=() wks=() i
    for i in $(seq 0 $((GATEWAYS - 1))); do
        start "$GATEWAY_CPUS" "$name-gateway$i" pirq-gateway --redis "$url" --prefix qs \
            --listen "127.0.0.1:$((8401 + i))"
        gws+=("${PIDS[-1]}")
    done
    for i in $(seq 0 $((WORKERS - 1))); do
        start "$WORKER_CPUS" "$name-worker$i" pirq-worker --redis "$url" --prefix qs \
            --db "$W/db.pirdb" --backend cpu --threads "$WORKER_THREADS" --consumer "cpu$i"
        wks+=("${PIDS[-1]}")
    done
    wait_workers "$WORKERS"
    local loads=()
    for i in $(seq 0 $((GATEWAYS - 1))); do
        local gw="http://127.0.0.1:$((8401 + i))"
        taskset -c "$CLIENT_CPUS" pirq bench load --quiet --duration "$DUR" --warmup "$WARM" \
            --json "$OUT/$name-load$i.json" --party-a "$gw" --party-b "$gw" --allow-same-party \
            --verify "$W/db.pirdb" --bincode --keys "$KEYS" --concurrency "$CLIENTS" \
            2>"$OUT/$name-load$i.txt" &
        loads+=($!)
    done
    sleep "$WARM"
    redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
    local r0 g0 w0 r1 g1 w1
    r0=$(ticks "$redis")
    g0=$(ticks "${gws[@]}")
    w0=$(ticks "${wks[@]}")
    sleep "$DUR"
    r1=$(ticks "$redis")
    g1=$(ticks "${gws[@]}")
    w1=$(ticks "${wks[@]}")
    redis-cli -p "$REDIS_PORT" INFO commandstats >"$OUT/$name-commandstats.txt"
    for p in "${loads[@]}"; do wait "$p" || true; done
    # Keys answered (and verified) over the measured seconds, all load clients together.
    local keys_s errors
    keys_s=$(cat "$OUT/$name"-load*.json | awk -F: '/"achieved_keys_per_s"/ {gsub(/[ ,]/, "", $2); s += $2} END {printf "%.0f", s}')
    # Failed, 429 and 503 answers of every load client (columns of its table's last row).
    errors=$(for f in "$OUT/$name"-load*.txt; do grep '^| fetch' "$f" | tail -n 1; done |
        awk -F'|' '{ s += $5 + $7 + $8 } END { print s + 0 }')
    awk -v name="$name" -v p="$primaries" -v ks="$keys_s" -v dur="$DUR" -v hz="$HZ" \
        -v r="$((r1 - r0))" -v g="$((g1 - g0))" -v w="$((w1 - w0))" -v err="$errors" \
        -v res="$OUT/results.txt" 'BEGIN {
            keys = ks * dur; per = keys ? 1e6 / hz / keys : 0
            line = sprintf("%s: primaries %d, %d keys/s; CPU per key: redis %.1f us (%.0f%% of a core), gateways %.1f us, workers %.1f us; failed/refused answers %d",
                           name, p, ks, r * per, 100 * r / hz / dur, g * per, w * per, err)
            print line; print line >> res }'
    # Redis CPU per key by command (usec of INFO commandstats over the keys answered).
    awk -F'[:,=]' -v keys="$(awk -v ks="$keys_s" -v d="$DUR" 'BEGIN {print ks * d}')" \
        '/^cmdstat_/ && keys > 0 { sub(/^cmdstat_/, "", $1); printf "    %-14s %8.2f calls/key %7.2f us/key\n", $1, $3 / keys, $5 / keys }' \
        "$OUT/$name-commandstats.txt" | sort -k4 -n -r | head -n 12 | tee -a "$OUT/results.txt"
    stop_all
    sleep 0.5
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "binaries: $(tr '\n' ' ' <"$B/COMMIT")"
echo "redis: $(redis-server --version)"
echo "GATEWAYS=$GATEWAYS WORKERS=$WORKERS WORKER_THREADS=$WORKER_THREADS CLIENTS=$CLIENTS/gateway KEYS=$KEYS DUR=$DUR PAGES=$PAGES"
pirq db gen --pages "$PAGES" --page-size 4096 --seed 11 --out "$W/db.pirdb" 2>&1 | tail -n 1
for primaries in $PRIMARIES; do
    for run in $(seq "$RUNS"); do
        one_run "p$primaries-run$run" "$primaries"
    done
done
echo "results: $OUT/results.txt"
