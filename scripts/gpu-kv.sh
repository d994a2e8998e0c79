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
# KV_PAGES (default 16777216), KV_LOAD (default 0.93), KV_SECONDS (measured seconds per load
# point, default 12). $OUT gets gpu-kv.log, worker.log and one JSON report per load point.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
build)
    dir=${2:?usage: $0 build DIR}
    cargo build --release -p pirq-cli --bin pirq
    cargo build --release -p pirq-gateway --bin pirq-gateway
    cargo build --release -p pirq-worker --features cuda --bin pirq-worker
    rm -rf "$dir" && mkdir -p "$dir"
    cargo test --release -p pirq-e2e --test kv --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys,shutil
for m in map(json.loads, sys.stdin):
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        shutil.copy(m["executable"], sys.argv[1] + "/suite-kv")' "$dir"
    cp target/release/pirq target/release/pirq-gateway "$dir/"
    cp target/release/pirq-worker "$dir/pirq-worker.real"
    strip "$dir"/pirq "$dir"/pirq-gateway "$dir"/pirq-worker.real "$dir"/suite-kv
    redis=$(command -v redis-server)
    cp "$redis" "$dir/redis-server"
    for lib in liblzf.so.1 libjemalloc.so.2; do
        cp "$(ldd "$redis" | awk -v l="$lib" '$1 == l {print $3}')" "$dir/"
    done
    # The e2e harness starts workers with --backend cpu: this wrapper makes them CUDA workers
    # (which fail rather than fall back when no GPU answers).
    cat >"$dir/pirq-worker" <<'WRAP'
#!/usr/bin/env bash
args=()
prev=""
for a in "$@"; do
    if [[ "$prev" == "--backend" ]]; then a=cuda; fi
    args+=("$a")
    prev="$a"
done
echo "gpu-kv: pirq-worker ${args[*]}" >>"${PIRQ_GPU_E2E_LOG:-/dev/null}"
exec "$(dirname "$0")/pirq-worker.real" "${args[@]}"
WRAP
    chmod +x "$dir/pirq-worker"
    du -sh "$dir"
    ;;
run)
    dir=$(cd "${2:?usage: $0 run DIR}" && pwd)
    out=${OUT:-$dir/out}
    mkdir -p "$out"
    log=$out/gpu-kv.log
    exec > >(tee -a "$log") 2>&1
    export PATH="$dir:$PATH" LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PIRQ_E2E_BIN_DIR="$dir" PIRQ_GPU_E2E_LOG="$dir/workers.log" RUST_BACKTRACE=0
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    nproc
    free -g | head -2
    value=${KV_VALUE:-1008}
    pages=${KV_PAGES:-16777216}
    secs=${KV_SECONDS:-12}
    mnt=/mnt/pirq-kv
    pids=()
    cleanup() {
        for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
        for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
        mountpoint -q "$mnt" && umount "$mnt" || true
    }
    trap cleanup EXIT

    echo "== kv e2e suite, CUDA workers"
    t0=$(date +%s)
    "$dir/suite-kv" --test-threads=2 && suite=ok || suite=FAILED
    echo "suite: $suite in $(($(date +%s) - t0)) s; workers started with --backend cuda: $(grep -c -- '--backend cuda' "$PIRQ_GPU_E2E_LOG" || true)"

    echo "== 64 GiB kv table on tmpfs: $pages pages, $value-byte values"
    mountpoint -q "$mnt" && umount "$mnt"
    mkdir -p "$mnt"
    mount -t tmpfs -o size=70g tmpfs "$mnt"
    slots=$((4096 / (16 + value)))
    records=$(python3 -c "import math; print(int($pages * $slots * ${KV_LOAD:-0.93}))")
    echo "records: $records ($slots slots per page)"
    timev=()
    [ -x /usr/bin/time ] && timev=(/usr/bin/time -v)
    t0=$(date +%s)
    pirq kv gen --records "$records" --key-size 20 --value-size "$value" --seed 1 --format bin --out - |
        "${timev[@]}" pirq kv build --records - --format bin --count "$records" --key-size 20 \
            --value-size "$value" --pages "$pages" --seed 2 --out "$mnt/kv.pirdb"
    echo "build wall: $(($(date +%s) - t0)) s"
    pirq db info "$mnt/kv.pirdb"

    echo "== one party: redis-server, gateway, CUDA worker"
    redis-server --port 6390 --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
        >"$dir/redis.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do redis-cli -p 6390 ping >/dev/null 2>&1 && break; sleep 0.1; done 2>/dev/null || true
    pirq-gateway --redis redis://127.0.0.1:6390 --prefix kv --listen 127.0.0.1:8390 \
        >"$dir/gateway.log" 2>&1 &
    pids+=($!)
    t0=$(date +%s)
    "$dir/pirq-worker.real" --redis redis://127.0.0.1:6390 --prefix kv --db "$mnt/kv.pirdb" \
        --backend cuda >"$out/worker.log" 2>&1 &
    worker=$!
    pids+=($worker)
    url=http://127.0.0.1:8390
    until curl -sf "$url/readyz" >/dev/null; do
        kill -0 "$worker" 2>/dev/null || { echo "worker died:"; tail -20 "$out/worker.log"; exit 1; }
        sleep 0.5
    done
    echo "worker ready after $(($(date +%s) - t0)) s"
    curl -s "$url/v1/info"
    echo

    pirq kv gen --records 100000 --key-size 20 --value-size "$value" --seed 1 --out "$dir/sample.jsonl"
    key=$(head -1 "$dir/sample.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
    want=$(head -1 "$dir/sample.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["value"])')
    got=$(pirq get --party-a "$url" --party-b "$url" --key "$key" --key 00112233445566778899aabbccddeeff00112233) || true
    [ "$got" = "$want"$'\n'"absent" ] && echo "pirq get: present value exact, absent key absent" ||
        { echo "pirq get: unexpected answer"; echo "$got" | cut -c1-80; }

    echo "== lookups: closed loop, half of the keys absent, every answer checked"
    for point in "1 1" "16 8" "32 16"; do
        set -- $point
        pirq bench load --party-a "$url" --party-b "$url" --kv-records "$dir/sample.jsonl" \
            --concurrency "$1" --keys "$2" --duration "$secs" --warmup 3 --bincode --quiet \
            --json "$out/load-c$1-k$2.json" || true
    done
    grep -h "scan\|pass" "$out/worker.log" | tail -3 || true
    ;;
*)
    echo "usage: $0 build DIR | run DIR" >&2
    exit 2
    ;;
esac
