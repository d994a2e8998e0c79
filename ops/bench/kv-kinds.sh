#!/usr/bin/env bash
# The three kinds of kv table side by side (docs/bench/kv.md §5): a fixed-size table (32-byte
# values), a set (keys only) and a variable-size table (values of 0..=62 bytes, 31 on average),
# each on 16,384 pages of 4 KiB (64 MiB) at load 0.95 with d = 2. For each: the build of
# JSON-lines records from a file (/usr/bin/time -v), then lookups end to end on two CPU parties
# (redis-server, pirq-gateway, pirq-worker --backend cpu --threads 1 each, on this machine)
# with `pirq bench load --kv-records`: half the keys random (must come back absent), half from
# the table (values must match).
#
#   ops/bench/kv-kinds.sh            # release binaries of this checkout; results under $OUT
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -q -p pirq-gateway -p pirq-worker -p pirq-cli \
    --bin pirq-gateway --bin pirq-worker --bin pirq
BIN=$PWD/target/release
OUT=${OUT:-$(mktemp -d)}
W=$(mktemp -d)
DUR=${DUR:-15}
WARM=${WARM:-3}
PAGES=16384
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit: $(git rev-parse --short HEAD)"

# ready PORT: wait until GET /readyz on 127.0.0.1:PORT answers 200 (bash /dev/tcp).
ready() {
    for _ in $(seq 1 600); do
        if exec 3<>"/dev/tcp/127.0.0.1/$1" 2>/dev/null; then
            printf 'GET /readyz HTTP/1.0\r\n\r\n' >&3
            if head -1 <&3 | grep -q ' 200 '; then
                exec 3>&-
                return 0
            fi
            exec 3>&-
        fi
        sleep 0.2
    done
    echo "party on port $1 not ready" >&2
    return 1
}

# party N DB: redis on port 164N, gateway on 184N, one single-thread CPU worker.
party() {
    local n=$1 db=$2
    redis-server --port "164$n" --bind 127.0.0.1 --save "" --appendonly no >"$W/redis$n.log" 2>&1 &
    PIDS+=($!)
    sleep 0.3
    "$BIN/pirq-gateway" --redis "redis://127.0.0.1:164$n" --prefix "kv$n" \
        --listen "127.0.0.1:184$n" >"$W/gateway$n.log" 2>&1 &
    PIDS+=($!)
    "$BIN/pirq-worker" --redis "redis://127.0.0.1:164$n" --prefix "kv$n" --db "$db" \
        --backend cpu --threads 1 >"$W/worker$n.log" 2>&1 &
    PIDS+=($!)
}

stop_parties() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    PIDS=()
}

# kind NAME SLOTS GEN_ARGS BUILD_ARGS
run_kind() {
    local name=$1 slots=$2 gen=$3 build=$4
    local n=$((PAGES * slots * 95 / 100))
    echo "== $name: $n records, $slots slots per page"
    # shellcheck disable=SC2086
    "$BIN/pirq" kv gen --records "$n" --key-size 20 $gen --seed 1 --out "$W/$name.jsonl"
    # shellcheck disable=SC2086
    /usr/bin/time -v "$BIN/pirq" kv build --records "$W/$name.jsonl" --key-size 20 $build \
        --key-encoding hex --value-encoding hex \
        --pages $PAGES --seed 1 --out "$W/$name.pirdb" 2>"$OUT/$name-build.txt"
    grep -E "^wrote|Elapsed|User time|System time|Maximum resident" "$OUT/$name-build.txt"
    head -100000 "$W/$name.jsonl" >"$W/$name-sample.jsonl"
    party 1 "$W/$name.pirdb"
    party 2 "$W/$name.pirdb"
    ready 1841
    ready 1842
    for cfg in "1 1" "8 4"; do
        set -- $cfg
        "$BIN/pirq" bench load --party-a http://127.0.0.1:1841 --party-b http://127.0.0.1:1842 \
            --kv-records "$W/$name-sample.jsonl" --concurrency "$1" --keys "$2" \
            --duration "$DUR" --warmup "$WARM" --quiet --json "$OUT/$name-load-$1x$2.json"
        echo "-- $name, $1 clients x $2 lookups: $OUT/$name-load-$1x$2.json"
    done
    grep -h "database loaded" "$W"/worker*.log | sed 's/\x1b\[[0-9;]*m//g' || true
    stop_parties
    rm -f "$W/$name.pirdb" "$W/$name.jsonl"
}

run_kind fixed 85 "--value-size 32" "--value-size 32"
run_kind set 256 "--value-size 0" "--value-size 0"
run_kind variable 51 "--max-value-size 62" "--max-value-size 62"
echo "results: $OUT"
