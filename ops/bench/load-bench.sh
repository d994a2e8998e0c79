#!/usr/bin/env bash
# Load benchmarks of the whole system with `pirq bench load` on a many-core machine (the GPU
# machine's 16 cores; no GPU used), each process pinned to its own cores with taskset:
#
#   1. gateway ceiling: one gateway (1 core) + its Redis (1 core), no worker, submit-only
#      load from 6 other cores, closed loop at several concurrencies and open loop at several
#      offered rates;
#   2. end to end on the CPU backend: two parties (Redis, gateway, one 2-thread worker each),
#      256 MiB database, verified fetches at several offered rates and closed loop;
#   3. horizontal scaling: 1, 2, 4 single-thread CPU workers per party, closed loop;
#   4. (SECTIONS="4", on the GPU machine) end to end with one CUDA worker per party, both on
#      GPU 0, over an 8 GiB database, to set against the scanner bench (docs/bench/gpu-scan.md);
#   5. (SECTIONS="5", on a 2-GPU machine) one party's capacity with 1 and 2 CUDA workers (one
#      per GPU, CUDA_VISIBLE_DEVICES) over a $GPU_DB_PAGES-page database (default 2^23: 32 GiB).
#      The generator sends both key halves to that one party (--party-a = --party-b): answers
#      still verify, privacy does not hold, and the party does twice the work per fetch; a
#      benchmark of capacity only.
#
#   ops/bench/load-bench.sh build   # here: release binaries + redis-server into .gpu/ops/
#   ops/bench/load-bench.sh run     # there (carry .gpu): JSON reports and a summary in $OUT
#
# `build` takes the load generator from $PIRQ_LOAD_BIN when set (a binary that runs the
# `load` subcommand), else `pirq bench load`.
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.gpu/ops

case "${1:-}" in
build)
    cargo build --release -p pirq-gateway -p pirq-cli --bin pirq-gateway --bin pirq
    # The CUDA feature loads the driver at run time only: the same worker serves --backend cpu.
    cargo build --release -p pirq-worker --features cuda --bin pirq-worker
    rm -rf "$D" && mkdir -p "$D"
    cp target/release/pirq-gateway target/release/pirq-worker target/release/pirq "$D/"
    if [ -n "${PIRQ_LOAD_BIN:-}" ]; then
        cp "$PIRQ_LOAD_BIN" "$D/loadgen"
    else
        printf '#!/usr/bin/env bash\nexec "$(dirname "$0")/pirq" bench "$@"\n' >"$D/loadgen"
    fi
    chmod +x "$D/loadgen"
    . scripts/lib/gpu-bundle.sh
    copy_redis_server "$D"
    strip "$D"/pirq* "$D/redis-server" 2>/dev/null || true
    du -sh "$D"
    exit 0
    ;;
run) ;;
*)
    echo "usage: $0 build | run" >&2
    exit 2
    ;;
esac

export PATH="$PWD/$D:$PATH" LD_LIBRARY_PATH="$PWD/$D${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
OUT=${OUT:-.gpu/out}
mkdir -p "$OUT"
W=$(mktemp -d)
PIDS=()
# start and get: scripts/lib/bench-procs.sh; each process logs into the work folder.
LOGS=$W
# shellcheck source=scripts/lib/bench-procs.sh
. scripts/lib/bench-procs.sh
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT
DUR=${DUR:-6}
WARM=${WARM:-2}
SECTIONS=${SECTIONS:-1 2 3}
READY_TRIES=${READY_TRIES:-200}
section() { [[ " $SECTIONS " == *" $1 "* ]]; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

# ready URL: wait until GET URL answers 200 (bash /dev/tcp; the machine has no curl for sure)
ready() {
    local hostport=${1#http://} path=/${1#http://*/}
    hostport=${hostport%%/*}
    for _ in $(seq "$READY_TRIES"); do
        if { exec 3<>"/dev/tcp/${hostport%:*}/${hostport#*:}"; } 2>/dev/null; then
            printf 'GET %s HTTP/1.0\r\n\r\n' "$path" >&3
            if head -n1 <&3 | grep -q ' 200 '; then
                exec 3>&-
                return 0
            fi
            exec 3>&-
        fi
        sleep 0.1
    done
    echo "not ready: $1" >&2
    tail -n 20 "$W"/*.log >&2
    return 1
}

redis() { # CPUS PORT
    start "$1" "redis-$2" redis-server --port "$2" --save "" --appendonly no --dir "$W"
}

gateway() { # CPUS REDIS_PORT PREFIX PORT
    start "$1" "gateway-$3" pirq-gateway --redis "redis://127.0.0.1:$2" --prefix "$3" \
        --listen "127.0.0.1:$4"
}

worker() { # CPUS REDIS_PORT PREFIX THREADS NAME METRICS_PORT [EXTRA FLAGS...]
    local cpus=$1 port=$2 prefix=$3 threads=$4 name=$5 metrics=$6
    shift 6
    [ $# -gt 0 ] || set -- --backend=cpu
    start "$cpus" "worker-$name" pirq-worker --redis "redis://127.0.0.1:$port" --prefix "$prefix" \
        --db "$W/db.pirdb" --threads "$threads" --consumer "$name" \
        --metrics-listen "127.0.0.1:$metrics" "$@"
}

load() { # NAME ARGS...: the generator on cores 8-15 (ceiling: 2-7)
    local name=$1 cpus=${GEN_CPUS:-8-15}
    shift
    taskset -c "$cpus" loadgen load --quiet --duration "$DUR" --warmup "$WARM" \
        --json "$OUT/$name.json" "$@" 2>"$OUT/$name.txt" || true
    tail -n 1 "$OUT/$name.txt"
}

stop_all() {
    cleanup
    PIDS=()
    sleep 0.5
}

if section 1 || section 2 || section 3; then
echo "== database: 65536 pages x 4096 bytes"
pirq db gen --pages 65536 --page-size 4096 --seed 11 --out "$W/db.pirdb" 2>&1 | tail -n 1
fi

if section 1; then
echo "== 1. gateway ceiling (gateway: 1 core, Redis: 1 core, no worker)"
redis 0 7001
gateway 1 7001 gw 8001
# A worker registers the database (all the gateway needs to accept queries) and leaves;
# the registration stays, and nothing reads the jobs.
worker 2 7001 gw 1 gw0 9001
ready http://127.0.0.1:8001/readyz
kill "${PIDS[-1]}"
wait "${PIDS[-1]}" 2>/dev/null || true
export GEN_CPUS=2-7
for c in 16 64 256; do load "ceiling-closed-$c" --party-a http://127.0.0.1:8001 --submit-only --concurrency "$c"; done
for r in 10000 20000 30000; do load "ceiling-open-$r" --party-a http://127.0.0.1:8001 --submit-only --rate "$r"; done
unset GEN_CPUS
stop_all
fi

# two_parties N THREADS: Redis + gateway on 2 cores per party, N workers of THREADS threads
two_parties() {
    local n=$1 t=$2 i
    redis 0 7101
    redis 6 7201
    sleep 0.3
    gateway 1 7101 party-a 8101
    gateway 7 7201 party-b 8201
    for i in $(seq 0 $((n - 1))); do
        if [ "$t" -eq 2 ]; then
            worker "$((2 + 2 * i))-$((3 + 2 * i))" 7101 party-a 2 "a$i" "$((9100 + i))"
            worker "$((8 + 2 * i))-$((9 + 2 * i))" 7201 party-b 2 "b$i" "$((9200 + i))"
        else
            worker "$((2 + i))" 7101 party-a 1 "a$i" "$((9100 + i))"
            worker "$((8 + i))" 7201 party-b 1 "b$i" "$((9200 + i))"
        fi
    done
    ready http://127.0.0.1:8101/readyz
    ready http://127.0.0.1:8201/readyz
}
PARTIES=(--party-a http://127.0.0.1:8101 --party-b http://127.0.0.1:8201 --verify)

if section 2; then
echo "== 2. end to end, CPU backend, one 2-thread worker per party"
two_parties 1 2
export GEN_CPUS=12-15
for r in 5 10 20 40; do load "e2e-open-$r" "${PARTIES[@]}" "$W/db.pirdb" --rate "$r"; done
for c in 1 16 64; do load "e2e-closed-$c" "${PARTIES[@]}" "$W/db.pirdb" --concurrency "$c"; done
get http://127.0.0.1:9100/metrics "$OUT/e2e-worker-a0.metrics"
get http://127.0.0.1:8101/metrics "$OUT/e2e-gateway-a.metrics"
stop_all
unset GEN_CPUS
fi

if section 3; then
echo "== 3. horizontal scaling: N single-thread CPU workers per party, closed loop"
export GEN_CPUS=12-15
for n in 1 2 4; do
    two_parties "$n" 1
    load "scale-$n-workers" "${PARTIES[@]}" "$W/db.pirdb" --concurrency 64
    for i in $(seq 0 $((n - 1))); do
        get "http://127.0.0.1:$((9100 + i))/metrics" "$OUT/scale-$n-worker-a$i.metrics"
    done
    stop_all
done
fi

if section 4; then
    echo "== 4. end to end, CUDA backend, one worker per party on GPU 0, 8 GiB database"
    pirq db gen --pages 2097152 --page-size 4096 --seed 11 --out "$W/db.pirdb" 2>&1 | tail -n 1
    redis 0 7101
    redis 6 7201
    sleep 0.3
    gateway 1 7101 party-a 8101
    gateway 7 7201 party-b 8201
    worker 2-3 7101 party-a 1 a0 9100 --backend=cuda --max-batch-keys=256
    worker 8-9 7201 party-b 1 b0 9200 --backend=cuda --max-batch-keys=256
    READY_TRIES=1800 ready http://127.0.0.1:8101/readyz
    READY_TRIES=1800 ready http://127.0.0.1:8201/readyz
    export GEN_CPUS=10-15
    load gpu-idle "${PARTIES[@]}" "$W/db.pirdb" --bincode --concurrency 1
    for c in 4 16 64; do
        load "gpu-closed-$c-x16" "${PARTIES[@]}" "$W/db.pirdb" --bincode --keys 16 --concurrency "$c"
    done
    get http://127.0.0.1:9100/metrics "$OUT/gpu-worker-a0.metrics"
    stop_all
fi
if section 5; then
    pages=${GPU_DB_PAGES:-8388608}
    echo "== 5. one party, 1 vs 2 CUDA workers (one per GPU), $pages pages of 4 KiB"
    pirq db gen --pages "$pages" --page-size 4096 --seed 11 --out "$W/db.pirdb" 2>&1 | tail -n 1
    SELF=(--party-a http://127.0.0.1:8101 --party-b http://127.0.0.1:8101 --allow-same-party --verify "$W/db.pirdb")
    for n in 1 2; do
        redis 0 7101
        sleep 0.3
        gateway 1-3 7101 party-a 8101
        for g in $(seq 0 $((n - 1))); do
            start "$((4 + 2 * g))-$((5 + 2 * g))" "worker-g$g" env CUDA_VISIBLE_DEVICES="$g" \
                pirq-worker --redis redis://127.0.0.1:7101 --prefix party-a --db "$W/db.pirdb" \
                --backend cuda --max-batch-keys 256 --consumer "g$g" \
                --metrics-listen "127.0.0.1:$((9100 + g))"
        done
        READY_TRIES=3000 ready http://127.0.0.1:8101/readyz
        # /readyz turns 200 with the first worker; wait until all n have loaded and registered.
        for _ in $(seq 600); do
            get http://127.0.0.1:8101/v1/info "$W/info.json"
            grep -q "\"workers\":$n[,}]" "$W/info.json" && break
            sleep 0.5
        done
        cat "$W/info.json"; echo
        export GEN_CPUS=8-31
        for c in 64 128; do
            load "gpus-$n-closed-$c-x16" "${SELF[@]}" --bincode --keys 16 --concurrency "$c"
        done
        for g in $(seq 0 $((n - 1))); do
            get "http://127.0.0.1:$((9100 + g))/metrics" "$OUT/gpus-$n-worker-g$g.metrics"
        done
        stop_all
    done
fi
echo "done: $OUT"
