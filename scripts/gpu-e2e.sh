#!/usr/bin/env bash
# End to end on the GPU machine: the e2e suites (tests/tests/*.rs: real redis-server,
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
    cargo build --release -p pirq-gateway --bin pirq-gateway
    cargo build --release -p pirq-cli --bin pirq # the kv suite drives the pirq tool
    cargo build --release -p pirq-worker --features cuda --bin pirq-worker
    rm -rf "$dir" && mkdir -p "$dir"
    cargo test --release -p pirq-e2e --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys,shutil
for m in map(json.loads, sys.stdin):
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        shutil.copy(m["executable"], sys.argv[1] + "/suite-" + m["target"]["name"])' "$dir"
    cp target/release/pirq-gateway "$dir/pirq-gateway"
    cp target/release/pirq "$dir/pirq"
    cp target/release/pirq-worker "$dir/pirq-worker.real"
    strip "$dir/pirq-gateway" "$dir/pirq" "$dir/pirq-worker.real" "$dir"/suite-*
    redis=$(command -v redis-server)
    cp "$redis" "$dir/redis-server"
    for lib in liblzf.so.1 libjemalloc.so.2; do
        cp "$(ldd "$redis" | awk -v l="$lib" '$1 == l {print $3}')" "$dir/"
    done
    cat >"$dir/pirq-worker" <<'WRAP'
#!/usr/bin/env bash
# Runs the real worker with --backend cuda in place of whatever backend it was given.
args=()
prev=""
for a in "$@"; do
    if [[ "$prev" == "--backend" ]]; then a=cuda; fi
    args+=("$a")
    prev="$a"
done
echo "gpu-e2e: pirq-worker ${args[*]}" >>"${PIRQ_GPU_E2E_LOG:-/dev/null}"
exec "$(dirname "$0")/pirq-worker.real" "${args[@]}"
WRAP
    chmod +x "$dir/pirq-worker"
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
