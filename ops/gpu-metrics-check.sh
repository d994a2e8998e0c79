#!/usr/bin/env bash
# The metrics end-to-end check (tests/tests/ops_metrics.rs) with CUDA workers, on a GPU machine:
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
    cargo build --release -p pirq-gateway --bin pirq-gateway
    cargo build --release -p pirq-worker --features cuda --bin pirq-worker
    exe=$(cargo test --release -p pirq-e2e --test ops_metrics --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="ops_metrics"][0])')
    rm -rf "$D" && mkdir -p "$D"
    cp target/release/pirq-gateway "$D/"
    cp target/release/pirq-worker "$D/pirq-worker.real"
    cp "$exe" "$D/ops_metrics"
    strip "$D/pirq-gateway" "$D/pirq-worker.real" "$D/ops_metrics"
    redis=$(command -v redis-server)
    cp "$redis" "$D/"
    for lib in liblzf.so.1 libjemalloc.so.2; do
        cp "$(ldd "$redis" | awk -v l="$lib" '$1 == l {print $3}')" "$D/"
    done
    cat >"$D/pirq-worker" <<'WRAP'
#!/usr/bin/env bash
# The real worker with --backend cuda in place of the backend the harness asks for.
args=()
prev=""
for a in "$@"; do
    [[ "$prev" == "--backend" ]] && a=cuda
    args+=("$a")
    prev="$a"
done
exec "$(dirname "$0")/pirq-worker.real" "${args[@]}"
WRAP
    chmod +x "$D/pirq-worker"
    du -sh "$D"
    ;;
run)
    export PATH="$PWD/$D:$PATH" LD_LIBRARY_PATH="$PWD/$D${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PIRQ_E2E_BIN_DIR="$PWD/$D" PIRQ_E2E_CUDA=1
    "$D/ops_metrics" --nocapture
    ;;
*)
    echo "usage: $0 build | run" >&2
    exit 2
    ;;
esac
