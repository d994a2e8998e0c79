#!/usr/bin/env bash
# Key-value lookups on the GPU machine (docs/bench/kv.md): the kv e2e suite with CUDA workers,
# then a 64 GiB kv table (2^24 pages of 4 KiB) built on tmpfs there and looked up through a real
# Redis + gateway + CUDA worker with `pirq bench load --kv-records`.
#
#   scripts/gpu-kv.sh build DIR   # here: build pirq, gateway, worker (--features cuda), the kv
#                                 # suite; copy them and this machine's redis-server into DIR
#   scripts/gpu-kv.sh run DIR     # on the GPU machine (carry DIR): suite, build, bench
#
# One party answers both halves of every lookup (both DPF keys of each candidate page go to the
# same gateway, as `pirq bench load` does when --party-b is --party-a): two parties at 64 GiB do
# not fit one 80 GB GPU. That party scans 2·d keys per lookup, twice a real party's work.
#
# Knobs (environment): KV_VALUE (value bytes, default 1008: 4 slots of 1024 B per page),
# KV_PAGES (default 16777216), KV_LOAD (default 0.9), KV_SECONDS (measured seconds per load
# point, default 12). $OUT gets gpu-kv.log, worker.log and one JSON report per load point.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
build)
    dir=${2:?usage: $0 build DIR}
    . scripts/lib/gpu-bundle.sh
    cargo build --release -p pirq-cli --bin pirq
    cargo build --release -p pirq-gateway --bin pirq-gateway
    cargo build --release -p pirq-worker --features cuda --bin pirq-worker
    rm -rf "$dir" && mkdir -p "$dir"
    copy_tests "$dir" suite- -p pirq-e2e --test e2e # run with the filter kv::
    cp target/release/pirq target/release/pirq-gateway "$dir/"
    copy_cuda_worker "$dir"
    strip "$dir"/pirq "$dir"/pirq-gateway "$dir"/pirq-worker.real "$dir"/suite-e2e
    copy_redis_server "$dir"
    du -sh "$dir"
    ;;
run)
    dir=$(cd "${2:?usage: $0 run DIR}" && pwd)
    out=${OUT:-$dir/out}
    mkdir -p "$out"
    exec > >(tee -a "$out/gpu-kv.log") 2>&1
    export PATH="$dir:$PATH" LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PIRQ_E2E_BIN_DIR="$dir" PIRQ_GPU_E2E_LOG="$dir/workers.log" RUST_BACKTRACE=0
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    echo "cores: $(nproc)"; free -g | head -2
    value=${KV_VALUE:-1008}
    pages=${KV_PAGES:-16777216}
    load=${KV_LOAD:-0.9}
    secs=${KV_SECONDS:-12}
    mnt=/mnt/pirq-kv
    pids=()
    cleanup() {
        for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
        for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
        if mountpoint -q "$mnt"; then umount "$mnt" || true; fi
    }
    trap cleanup EXIT
    # No curl or redis-cli there: bash's /dev/tcp.
    http_get() { # port path -> body
        exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
        printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
        cat <&3
        exec 3<&-
    }
    ready() { http_get 8390 /readyz 2>/dev/null | head -n 1 | grep -q ' 200 '; }

    # The e2e suite runs beside the table build (it needs a few cores and little GPU memory);
    # it is over before the big worker starts.
    if [ "${KV_SUITE:-1}" = 1 ]; then
        echo "== kv e2e suite, CUDA workers (in the background)"
        t_suite=$(date +%s)
        ( "$dir/suite-e2e" kv:: --test-threads=2 >"$dir/suite.log" 2>&1
          echo "suite exit $? after $(($(date +%s) - t_suite)) s" >>"$dir/suite.log" ) &
        suite=$!
    fi

    echo "== kv table on tmpfs: $pages pages of 4 KiB, $value-byte values, d = 2, load $load"
    if mountpoint -q "$mnt"; then umount "$mnt"; fi
    mkdir -p "$mnt"
    mount -t tmpfs -o size=70g tmpfs "$mnt"
    slots=$((4096 / (16 + value)))
    records=$(awk -v p="$pages" -v s="$slots" -v l="$load" 'BEGIN { printf "%d", p * s * l }')
    echo "records: $records ($slots slots per page)"
    timev=()
    if [ -x /usr/bin/time ]; then timev=(/usr/bin/time -v); fi
    t0=$(date +%s)
    pirq kv gen --records "$records" --key-size 20 --value-size "$value" --seed 1 --format bin --out - |
        timeout 330 "${timev[@]}" pirq kv build --records - --format bin --count "$records" \
            --key-size 20 --value-size "$value" --pages "$pages" --seed 2 --out "$mnt/kv.pirdb"
    echo "build wall: $(($(date +%s) - t0)) s"
    pirq db info "$mnt/kv.pirdb"
    if [ "${KV_SUITE:-1}" = 1 ]; then
        wait "$suite" || true
        cat "$dir/suite.log"
        echo "workers started with --backend cuda: $(grep -c -- '--backend cuda' "$PIRQ_GPU_E2E_LOG" || true)"
    fi

    echo "== one party: redis-server, gateway, CUDA worker"
    redis-server --port 6390 --bind 127.0.0.1 --save "" --appendonly no >"$dir/redis.log" 2>&1 &
    pids+=($!)
    sleep 0.5
    pirq-gateway --redis redis://127.0.0.1:6390 --prefix kv --listen 127.0.0.1:8390 \
        >"$dir/gateway.log" 2>&1 &
    pids+=($!)
    t0=$(date +%s)
    "$dir/pirq-worker.real" --redis redis://127.0.0.1:6390 --prefix kv --db "$mnt/kv.pirdb" \
        --backend cuda >"$out/worker.log" 2>&1 &
    worker=$!
    pids+=($worker)
    until ready; do
        kill -0 "$worker" 2>/dev/null || { echo "worker died:"; tail -20 "$out/worker.log"; exit 1; }
        [ $(($(date +%s) - t0)) -lt 240 ] || { echo "worker not ready in 240 s"; exit 1; }
        sleep 0.5
    done
    echo "worker ready after $(($(date +%s) - t0)) s"
    http_get 8390 /v1/info | tail -n 1
    echo
    url=http://127.0.0.1:8390

    pirq kv gen --records 100000 --key-size 20 --value-size "$value" --seed 1 --out "$dir/sample.jsonl"
    # `pirq get` refuses one party as both (it would see both halves); the bench below says
    # --allow-same-party, for capacity only. Lookups by `pirq get` on CUDA workers are the e2e
    # suite's.
    echo "== lookups: closed loop, half of the keys absent, every answer checked"
    for point in "1 1" "16 8" "32 16"; do
        set -- $point
        pirq bench load --party-a "$url" --party-b "$url" --kv-records "$dir/sample.jsonl" \
            --allow-same-party --concurrency "$1" --keys "$2" --duration "$secs" --warmup 3 \
            --bincode --quiet \
            --json "$out/load-c$1-k$2.json" || true
    done
    ;;
*)
    echo "usage: $0 build DIR | run DIR" >&2
    exit 2
    ;;
esac
