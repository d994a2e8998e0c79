#!/usr/bin/env bash
# Sharded parties on a multi-GPU machine (docs/bench/shards.md).
#
#   scripts/gpu-shards.sh build DIR   # here: release builds, stripped and packed into DIR
#                                     # (e.g. /work/main/.gpu-shards, carried to the device)
#   scripts/gpu-shards.sh run         # on the GPU machine, from DIR: every step below, logs in $OUT
#   scripts/gpu-shards.sh run1        # the same on a one-GPU machine: correctness steps, and two
#                                     # shards sharing GPU 0 (no speed comparison is possible)
#
# Steps (each bounded by `timeout`, each log in $OUT/<step>.log):
#   gpu_shards   GPU shard parity: partials of file and generated shards XOR to the CPU answer
#   bench-64x1   pirq-shard-bench: 64 GiB on one GPU
#   bench-64x2   pirq-shard-bench: the same 64 GiB as two shards on two GPUs
#   bench-160x2  pirq-shard-bench: 160 GiB (more than one GPU holds) over two GPUs, verified
#   e2e-160x2    redis-server + pirq-gateway + two pirq-worker --synthetic --shard I/2 (one per
#                GPU), 160 GiB, checked through HTTP by e2e-shard-check against the generator
#   suite-shards the e2e suite's shards:: tests (tests/tests/e2e/shards.rs), every worker on
#                --backend cuda
set -euo pipefail

case "${1:-}" in
build)
    dest="${2:?destination directory}"
    cd "$(dirname "$0")/.."
    cargo build --release -p pirq-gateway --bin pirq-gateway
    cargo build --release -p pirq-worker --features cuda --bin pirq-worker
    cargo build --release -p pirq-scan --features cuda --bin pirq-shard-bench
    cargo build --release -p pirq-e2e --bin e2e-shard-check
    rm -rf "$dest" && mkdir -p "$dest/bin"
    . scripts/lib/gpu-bundle.sh
    copy_tests "$dest/bin" "" --features cuda -p pirq-scan --test gpu_shards
    copy_tests "$dest/bin" suite- -p pirq-e2e --test e2e # run with the filter shards::
    for b in pirq-gateway pirq-shard-bench e2e-shard-check; do cp "target/release/$b" "$dest/bin/"; done
    copy_cuda_worker "$dest/bin"
    copy_redis_server "$dest/bin"
    strip "$dest"/bin/gpu_shards "$dest"/bin/suite-e2e "$dest"/bin/pirq-gateway \
        "$dest"/bin/pirq-worker.real "$dest"/bin/pirq-shard-bench "$dest"/bin/e2e-shard-check
    cp scripts/gpu-shards.sh "$dest/run.sh"
    tar -C "$dest" -czf "$dest/bin.tgz" bin && rm -rf "$dest/bin"
    du -sh "$dest"/*
    ;;
run | run1)
    mode=$1
    here="$(cd "$(dirname "$0")" && pwd)"
    out="${OUT:-$here/out}"
    mkdir -p "$out"
    work=/tmp/pirq-shards && rm -rf "$work" && mkdir -p "$work"
    tar -C "$work" -xzf "$here/bin.tgz"
    bin="$work/bin"
    export PATH="$bin:$PATH" LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    lib=$(ldconfig -p 2>/dev/null | grep -m1 -o '/.*libnvrtc\.so[.0-9]*' || true)
    [[ -z "$lib" ]] && lib=$(find /usr/local/cuda*/ /usr/lib /opt -name 'libnvrtc.so*' 2>/dev/null | head -1 || true)
    [[ -n "$lib" ]] && export LD_LIBRARY_PATH="$(dirname "$lib"):$LD_LIBRARY_PATH"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$out/gpus.txt"
    step() { # step NAME SECONDS CMD…
        local name=$1 secs=$2; shift 2
        echo "== $name: $*" | tee -a "$out/steps.txt"
        local t0=$SECONDS rc=0
        timeout "$secs" "$@" >"$out/$name.log" 2>&1 || rc=$?
        echo "== $name: rc=$rc in $((SECONDS - t0)) s" | tee -a "$out/steps.txt"
        tail -n 12 "$out/$name.log"
    }
    if [[ $mode == run1 ]]; then
        step gpu_shards 120 env PIRQ_GPU_TESTS=1 "$bin/gpu_shards" --test-threads=1
        step suite-shards 150 env PIRQ_E2E_BIN_DIR="$bin" "$bin/suite-e2e" shards:: --test-threads=2
        step bench-120x2-gpu0 100 pirq-shard-bench --gib 120 --shards 2 --gpus 0,0 --verify 64 --qs 1,256 --reps 5
        step bench-64x1 70 pirq-shard-bench --gib 64 --shards 1 --verify 16 --qs 1,64,256 --reps 9
        exit 0
    fi
    step bench-160x2 100 pirq-shard-bench --gib 160 --shards 2 --verify 64 --qs 1,64,256 --reps 7
    step bench-64x1 70 pirq-shard-bench --gib 64 --shards 1 --verify 16 --qs 1,64,256 --reps 9
    step bench-64x2 70 pirq-shard-bench --gib 64 --shards 2 --verify 16 --qs 1,64,256 --reps 9
    e2e160() {
        local pages=$(( (160 << 30) / 4096 )) seed=7 port=6390 http=8090 pids=()
        redis-server --port $port --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >"$out/e2e-redis.log" 2>&1 &
        pids+=($!)
        sleep 0.5
        pirq-gateway --redis redis://127.0.0.1:$port --prefix big --listen 127.0.0.1:$http >"$out/e2e-gateway.log" 2>&1 &
        pids+=($!)
        for i in 0 1; do
            pirq-worker.real --redis redis://127.0.0.1:$port --prefix big --backend cuda --gpu $i \
                --synthetic "$pages:4096:$seed" --shard "$i/2" --consumer "gpu$i" >"$out/e2e-worker$i.log" 2>&1 &
            pids+=($!)
        done
        http_ok() { # GET $1 answers 200 (curl when there is one, else bash's /dev/tcp)
            if command -v curl >/dev/null; then curl -sf "http://127.0.0.1:$http$1" >/dev/null; return; fi
            exec 3<>"/dev/tcp/127.0.0.1/$http" || return 1
            printf 'GET %s HTTP/1.0\r\n\r\n' "$1" >&3
            head -1 <&3 | grep -q ' 200 '
        }
        local ready=0
        for _ in $(seq 1 240); do
            if http_ok /readyz; then ready=1; break; fi
            for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { echo "process $p died"; break 2; }; done
            sleep 0.5
        done
        local rc=1
        if [[ $ready == 1 ]]; then
            e2e-shard-check --url "http://127.0.0.1:$http" --pages "$pages" --seed $seed \
                --sequential 20 --pairs 1 && \
            e2e-shard-check --url "http://127.0.0.1:$http" --pages "$pages" --seed $seed \
                --sequential 0 --queries 96 --pairs 8 --concurrency 16 && rc=0
        else
            echo "not ready"; tail -5 "$out"/e2e-*.log
        fi
        kill "${pids[@]}" 2>/dev/null || true
        wait 2>/dev/null || true
        return $rc
    }
    export -f e2e160; export out work
    step e2e-160x2 150 bash -c e2e160
    step gpu_shards 120 env PIRQ_GPU_TESTS=1 "$bin/gpu_shards" --test-threads=1
    step suite-shards 150 env PIRQ_E2E_BIN_DIR="$bin" "$bin/suite-e2e" shards:: --test-threads=2
    ;;
*)
    echo "usage: $0 build DIR | run" >&2
    exit 2
    ;;
esac
