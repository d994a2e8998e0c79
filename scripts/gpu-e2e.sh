#!/usr/bin/env bash
# End to end on the GPU machine: the e2e suite (tests/tests/e2e/: real redis-server,
# pirq-gateway and pirq-worker processes; byte-exact pages, epoch updates) with every worker on
# the CUDA backend.
#
#   scripts/gpu-e2e.sh build   # here: build gateway, worker (--features cuda), the suite; copy
#                              # them and this machine's redis-server into .gpu/e2e/
#   scripts/gpu-e2e.sh run     # on the GPU machine (carry .gpu): run the suite
#
# The harness starts workers with `--backend cpu`; the `pirq-worker` in .gpu/e2e/ is a wrapper
# that turns that into `--backend cuda` (which fails instead of falling back when no GPU answers),
# so a passing suite means the CUDA scanner answered every query. The GPU machine has no network
# and no redis-server: the binary and the two libraries Ubuntu lacks travel with it.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.gpu/e2e

case "${1:-}" in
build)
    . scripts/lib/gpu-bundle.sh
    cargo build --release -p pirq-gateway --bin pirq-gateway
    cargo build --release -p pirq-cli --bin pirq # the kv suite drives the pirq tool
    cargo build --release -p pirq-worker --features cuda --bin pirq-worker
    rm -rf "$dir" && mkdir -p "$dir"
    copy_tests "$dir" suite- -p pirq-e2e
    cp target/release/pirq-gateway "$dir/pirq-gateway"
    cp target/release/pirq "$dir/pirq"
    copy_cuda_worker "$dir"
    strip "$dir/pirq-gateway" "$dir/pirq" "$dir/pirq-worker.real" "$dir"/suite-*
    copy_redis_server "$dir"
    du -sh "$dir"
    ;;
run)
    out="${OUT:-.gpu/out}"
    mkdir -p "$out"
    export PATH="$PWD/$dir:$PATH" LD_LIBRARY_PATH="$PWD/$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PIRQ_E2E_BIN_DIR="$PWD/$dir" PIRQ_GPU_E2E_LOG="$out/gpu-e2e-workers.log"
    redis-server --version
    status=0
    for suite in "$dir"/suite-*; do
        echo "== $(basename "$suite")" | tee -a "$out/gpu-e2e.log"
        "$suite" --test-threads=2 2>&1 | tee -a "$out/gpu-e2e.log" || status=1
    done
    echo "workers started with: $(grep -c -- '--backend cuda' "$PIRQ_GPU_E2E_LOG") x --backend cuda"
    exit $status
    ;;
*)
    echo "usage: $0 build | run" >&2
    exit 2
    ;;
esac
