#!/usr/bin/env bash
# A party held at saturation for minutes, on defaults (issue 22): does Redis memory plateau, does
# throughput stay flat, does any cap or memory bound refuse a query? One party on one GPU
# (Redis, a gateway on its default flags, one CUDA worker), `pirq bench load` in closed loop with
# both key halves sent to that party (--allow-same-party: the party does the work of both, every
# answer verified), run as MINUTES back-to-back one-minute loads so that each minute has its own
# throughput and p50/p99/max; Redis `used_memory` sampled every 10 s. Results:
# docs/bench/sustained.md.
#
#   ops/bench/sustained.sh build [DIR]   # here: release binaries (CUDA worker) and redis into DIR
#                                        # (default .gpu/sustained)
#   ops/bench/sustained.sh run [DIR]     # on the GPU machine, as root (mounts a tmpfs)
#
# Environment for `run`: SIZES (database sizes as page counts of 4 KiB pages, run one after the
# other; default "16777216 4194304" = 64 GiB and 16 GiB), MINUTES (default 10), CLIENTS (default
# 2048: 4,096 requests held at once on the one gateway), RAISED_SECS (after the last minute of the
# first size, one more load of this many seconds with --max-connections and --max-waiters raised
# by hand to 200000, the comparison the issue asks for; 0 = skip; default 60), OUT (the results
# folder; default .gpu/out). The load client's own open-files limit is raised with prlimit (it is
# a test tool holding 2 connections a client); the gateway gets the host's defaults and raises
# its own.
set -euo pipefail
cd "$(dirname "$0")/../.."
D=${2:-.gpu/sustained}

case "${1:-}" in
build)
    # shellcheck source=scripts/lib/gpu-bundle.sh
    source scripts/lib/gpu-bundle.sh
    cargo build --release -p pirq-gateway -p pirq-cli --bin pirq-gateway --bin pirq
    cargo build --release -p pirq-worker --features cuda --bin pirq-worker
    rm -rf "$D" && mkdir -p "$D"
    cp target/release/pirq-gateway target/release/pirq-worker target/release/pirq "$D/"
    copy_redis_server "$D"
    cp "$(command -v redis-cli)" "$D/redis-cli"
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

B="$PWD/$D"
export PATH="$B:$PATH" LD_LIBRARY_PATH="$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
OUTDIR=${OUT:-.gpu/out}
mkdir -p "$OUTDIR"
SIZES=${SIZES:-16777216 4194304}
MINUTES=${MINUTES:-10}
CLIENTS=${CLIENTS:-2048}
RAISED_SECS=${RAISED_SECS:-60}
MNT=/mnt/pirq-sustained
W=$(mktemp -d)
PIDS=()
# shellcheck source=scripts/lib/bench-procs.sh
. scripts/lib/bench-procs.sh
# Each process logs into the results folder.
LOGS=$OUTDIR
stop_all() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
cleanup() {
    stop_all
    umount "$MNT" 2>/dev/null || true
}
trap cleanup EXIT

# wait_worker PID: until /v1/info lists one worker; fails at once if the worker died
wait_worker() {
    for _ in $(seq 1200); do
        kill -0 "$1" 2>/dev/null || { echo "worker died"; return 1; }
        if get http://127.0.0.1:8201/v1/info "$W/info.json" 2>/dev/null &&
            grep -q '"workers":1[,}]' "$W/info.json"; then
            return 0
        fi
        sleep 0.5
    done
    echo "worker not ready"
    return 1
}

used_memory() { redis-cli -p 7201 INFO memory | awk -F: '/^used_memory:/ {print $2}' | tr -d '\r'; }

# sample_memory FILE: "seconds used_memory_bytes gateway_rss_kib" every 10 s until killed
sample_memory() {
    local t0=$EPOCHSECONDS
    while true; do
        echo "$((EPOCHSECONDS - t0)) $(used_memory) $(awk '/VmRSS/ {print $2}' "/proc/$GW/status" 2>/dev/null)" >>"$1"
        sleep 10
    done
}

# load NAME SECONDS: one closed-loop load of SECONDS; its JSON report in $OUTDIR/NAME.json
load() {
    local hard
    hard=$(ulimit -Hn)
    taskset -c 8-15 prlimit --nofile="$hard:$hard" -- pirq bench load --quiet --duration "$2" \
        --warmup 0 --json "$OUTDIR/$1.json" --party-a http://127.0.0.1:8201 \
        --party-b http://127.0.0.1:8201 --allow-same-party --verify "$MNT/db.pirdb" --bincode \
        --keys 1 --concurrency "$CLIENTS" 2>"$OUTDIR/$1.txt" || true
    echo "$1 (redis $(( $(used_memory) >> 20 )) MiB after): $(grep '^|' "$OUTDIR/$1.txt" | tail -n 1)"
}

echo "machine: $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
echo "binaries: $(cat "$B/COMMIT" | tr '\n' ' ')"
echo "open files: soft $(ulimit -Sn), hard $(ulimit -Hn)"
mkdir -p "$MNT"
mount -t tmpfs -o size=72G tmpfs "$MNT"
first=1
for pages in $SIZES; do
    gib=$((pages * 4096 >> 30))
    rm -f "$MNT/db.pirdb"
    t0=$EPOCHSECONDS
    pirq db gen --pages "$pages" --page-size 4096 --seed 11 --out "$MNT/db.pirdb" 2>&1 | tail -n 1
    echo "== $gib GiB: db gen $((EPOCHSECONDS - t0)) s"
    start 0 "redis-$gib" redis-server --port 7201 --save "" --appendonly no --dir "$W"
    sleep 0.3
    start 1-3 "gateway-$gib" pirq-gateway --redis redis://127.0.0.1:7201 --prefix sus \
        --listen 127.0.0.1:8201
    GW=${PIDS[1]}
    start 4-7 "worker-$gib" pirq-worker --redis redis://127.0.0.1:7201 --prefix sus \
        --db "$MNT/db.pirdb" --backend cuda --consumer gpu0 --metrics-listen 127.0.0.1:9201
    t0=$EPOCHSECONDS
    wait_worker "${PIDS[2]}"
    echo "worker ready after $((EPOCHSECONDS - t0)) s"
    grep -h "listening" "$OUTDIR/gateway-$gib.log" | tail -n 1 || true
    sample_memory "$OUTDIR/memory-$gib.txt" &
    SAMPLER=$!
    for m in $(seq "$MINUTES"); do
        load "$gib-min$m" 60
    done
    kill "$SAMPLER" 2>/dev/null || true
    get http://127.0.0.1:8201/metrics "$OUTDIR/gateway-$gib.metrics" || true
    grep -E '^pirq_gateway_(refusals_total|queries_throttled_total|queries_accepted_total)' \
        "$OUTDIR/gateway-$gib.metrics" || true
    if [ "$first" = 1 ] && [ "$RAISED_SECS" -gt 0 ]; then
        kill "$GW" && wait "$GW" 2>/dev/null || true
        start 1-3 "gateway-$gib-raised" pirq-gateway --redis redis://127.0.0.1:7201 --prefix sus \
            --listen 127.0.0.1:8201 --max-connections 200000 --max-waiters 200000
        sleep 1
        load "$gib-raised" "$RAISED_SECS"
    fi
    first=0
    stop_all
    sleep 1
done
echo "done"
