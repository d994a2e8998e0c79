# shellcheck shell=bash
# Packing binaries for the GPU machine, for the `build` step of the scripts that run there
# (scripts/gpu-e2e.sh, gpu-kv.sh, gpu-shards.sh, gpu-test.sh, ops/gpu-metrics-check.sh,
# ops/bench/load-bench.sh). Sourced from the repository root, never run; nothing here runs on
# the GPU machine itself, which has no cargo, no network and no redis-server: what a run needs
# travels in the bundle folder.

# copy_tests DIR PREFIX CARGO_TEST_ARGS...: builds the tests that `cargo test --release ARGS`
# names and copies each integration test executable to DIR/PREFIX<test name>. Fails when it
# built none.
copy_tests() {
    local dir=$1 prefix=$2
    shift 2
    cargo test --release "$@" --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json, shutil, sys
copied = 0
for m in map(json.loads, sys.stdin):
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        shutil.copy(m["executable"], sys.argv[1] + "/" + sys.argv[2] + m["target"]["name"])
        copied += 1
sys.exit(0 if copied else "no test executable built")' "$dir" "$prefix"
}

# copy_redis_server DIR: this machine's redis-server, redis-cli (the cluster tests join their
# nodes with it) and the two libraries they link that the GPU machine's Ubuntu lacks (liblzf,
# jemalloc); run with DIR on PATH and LD_LIBRARY_PATH.
copy_redis_server() {
    local dir=$1 redis lib
    redis=$(command -v redis-server)
    cp "$redis" "$dir/redis-server"
    cp "$(command -v redis-cli)" "$dir/redis-cli"
    for lib in liblzf.so.1 libjemalloc.so.2; do
        cp "$(ldd "$redis" | awk -v l="$lib" '$1 == l {print $3}')" "$dir/"
    done
}

# copy_cuda_worker DIR: target/release/pirq-worker (built with --features cuda) as
# DIR/pirq-worker.real, and DIR/pirq-worker, a wrapper that runs it with `--backend cuda` in
# place of the backend it is given. The e2e harness starts its workers with `--backend cpu`; a
# CUDA worker fails instead of falling back when no GPU answers, so a suite that passes through
# the wrapper was answered by the CUDA scanner. Each start is logged to $PIRQ_GPU_E2E_LOG when
# set (the scripts count the `--backend cuda` lines).
copy_cuda_worker() {
    local dir=$1
    cp target/release/pirq-worker "$dir/pirq-worker.real"
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
echo "pirq-worker ${args[*]}" >>"${PIRQ_GPU_E2E_LOG:-/dev/null}"
exec "$(dirname "$0")/pirq-worker.real" "${args[@]}"
WRAP
    chmod +x "$dir/pirq-worker"
}
