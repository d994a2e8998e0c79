#!/usr/bin/env bash
# The metrics end-to-end check (tests/tests/e2e/ops_metrics.rs) with CUDA workers, on a GPU machine:
# every catalog metric, VRAM and the GPU phases (h2d, expand, scan, d2h) included, must be on the
# workers' /metrics after real queries.
#
#   ops/gpu-metrics-check.sh build   # here: release gateway, CUDA worker, the test, redis-server
#   ops/gpu-metrics-check.sh run     # on the GPU machine (carry .gpu/opsgpu)
#
# The harness starts workers with `--backend cpu`; the pirq-worker here is a wrapper that makes
# it `--backend cuda`, which fails rather than falling back without a GPU, and PIRQ_E2E_CUDA=1
# makes the test demand the CUDA-only metrics, so a pass means CUDA workers exported them.
set -euo pipefail
cd "$(dirname "$0")/.."
D=.gpu/opsgpu

case "${1:-}" in
build)
    . scripts/lib/gpu-bundle.sh
    cargo build --release -p pirq-gateway --bin pirq-gateway
    cargo build --release -p pirq-worker --features cuda --bin pirq-worker
    rm -rf "$D" && mkdir -p "$D"
    copy_tests "$D" "" -p pirq-e2e --test e2e
    cp target/release/pirq-gateway "$D/"
    copy_cuda_worker "$D"
    strip "$D/pirq-gateway" "$D/pirq-worker.real" "$D/e2e"
    copy_redis_server "$D"
    du -sh "$D"
    ;;
run)
    export PATH="$PWD/$D:$PATH" LD_LIBRARY_PATH="$PWD/$D${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PIRQ_E2E_BIN_DIR="$PWD/$D" PIRQ_E2E_CUDA=1
    "$D/e2e" ops_metrics:: --nocapture
    ;;
*)
    echo "usage: $0 build | run" >&2
    exit 2
    ;;
esac
