#!/usr/bin/env bash
# Two real parties on two GPUs of one host (issue 28): each party its own GPU, Redis, gateway
# and rotating CUDA worker, both serving the same 64 GiB database; `pirq bench load` in closed
# loop against the pair (party A and party B distinct, each given one half of every query, as a
# deployment runs), every page verified. Results: docs/bench/gpu-e2e.md.
#
#   scripts/gpu-two-parties.sh build DIR   # here: release binaries of this tree and redis-server,
#                                          # stripped, in DIR/bin.tgz (checked < 60 MiB), and
#                                          # this script as DIR/run.sh
#   DIR/run.sh run                         # on the GPU machine, as root (mounts a tmpfs for the
#                                          # database); needs 2 GPUs of >= 70 GiB (H200s)
#
# Per load point (CLIENTS, default "1 64 128 512"; each point once per worker configuration)
# $OUT gets:
#   cfgN-two-closed-C.json   the `pirq bench load --json` report (queries/s; every query is one
#                            key at each party, so keys/s by each party = queries/s; latency)
#   cfgN-two-closed-C.txt    its table and log lines
#   cfgN-closed-C.points.json  the point: the report's figures, each process' CPU seconds
#                            (/proc/<pid>/stat) over the point, and each worker's rotation
#                            metrics (turn duration, keys a turn, segment wait: sums and counts
#                            of the point)
#   cfgN-{a,b}-C.metrics     each worker's /metrics after the point
# and at the end summary.json (all points), machine.txt, steps.txt and logs.tgz (every log).
# Plot: ops/bench/plot-load.py --from-reports $OUT --halves 1 --label cfg1-two=... .
#
# Environment: PAGES (default 2^24 pages of 4 KiB = 64 GiB), DUR / WARM (seconds per point,
# default 10 / 3), CLIENTS, CONFIGS (worker flag sets separated by ';', default
# "--max-batch-keys 256"), GATEWAY_ARGS (default "--max-waiters 4096 --max-connections 4096":
# 512 clients hold 512 answers at each gateway, the default cap), GPUS (default "0 1": party A's
# and B's), CPUS (cores as A_REDIS/A_GATEWAY/A_WORKER/B_REDIS/B_GATEWAY/B_WORKER/CLIENTS,
# default "0/1-3/4-7/8/9-11/12-15/16-31", cut to the machine's cores when it has fewer); for a
# rehearsal without GPUs: BACKEND=cpu (default cuda), DB_DIR (a folder for the database instead
# of a tmpfs mounted at /mnt/pirq-two), a small PAGES.
set -euo pipefail

case "${1:-}" in
build)
    dest="${2:?destination directory}"
    cd "$(dirname "$0")/.."
    cargo build --release -p pirq-gateway -p pirq-cli --bin pirq-gateway --bin pirq
    cargo build --release -p pirq-worker --features cuda --bin pirq-worker
    rm -rf "$dest" && mkdir -p "$dest/bin"
    # shellcheck source=scripts/lib/gpu-bundle.sh
    . scripts/lib/gpu-bundle.sh
    cp target/release/pirq-gateway target/release/pirq target/release/pirq-worker "$dest/bin/"
    copy_redis_server "$dest/bin"
    cp "$(command -v redis-cli)" "$dest/bin/"
    git rev-parse --short HEAD >"$dest/bin/COMMIT"
    git diff --quiet HEAD || echo "(+ uncommitted changes)" >>"$dest/bin/COMMIT"
    strip "$dest"/bin/pirq* "$dest/bin/redis-server" "$dest/bin/redis-cli" 2>/dev/null || true
    cp scripts/gpu-two-parties.sh "$dest/run.sh"
    tar -C "$dest" -czf "$dest/bin.tgz" bin && rm -rf "${dest:?}/bin"
    du -sh "$dest"/*
    size=$(du -sk "$dest" | cut -f1)
    if [ "$size" -ge $((60 * 1024)) ]; then
        echo "the bundle is $((size / 1024)) MiB; the device carries at most 60" >&2
        exit 1
    fi
    exit 0
    ;;
run) ;;
*)
    echo "usage: $0 build DIR | run" >&2
    exit 2
    ;;
esac

here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
mkdir -p "$out"
work=$(mktemp -d /tmp/pirq-two.XXXXXX)
tar -C "$work" -xzf "$here/bin.tgz"
bin="$work/bin"
export PATH="$bin:$PATH" LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
lib=$(ldconfig -p 2>/dev/null | grep -m1 -o '/.*libnvrtc\.so[.0-9]*' || true)
[[ -z "$lib" ]] && lib=$(find /usr/local/cuda*/ /usr/lib /opt -name 'libnvrtc.so*' 2>/dev/null | head -1 || true)
if [[ -n "$lib" ]]; then
    LD_LIBRARY_PATH="$(dirname "$lib"):$LD_LIBRARY_PATH"
    export LD_LIBRARY_PATH
fi

PAGES=${PAGES:-16777216}
DUR=${DUR:-10}
WARM=${WARM:-3}
CLIENTS=${CLIENTS:-1 64 128 512}
CONFIGS=${CONFIGS:---max-batch-keys 256}
GATEWAY_ARGS=${GATEWAY_ARGS:---max-waiters 4096 --max-connections 4096}
BACKEND=${BACKEND:-cuda}
read -r GPU_A GPU_B <<<"${GPUS:-0 1}"
if [ -z "${CPUS:-}" ]; then
    CPUS=0/1-3/4-7/8/9-11/12-15/16-31
    # A smaller host (16 cores): two cores a gateway and a worker, the rest to the clients.
    [ "$(nproc)" -ge 32 ] || CPUS=0/1-2/3-4/5/6-7/8-9/10-$(($(nproc) - 1))
fi
IFS=/ read -r A_REDIS A_GW A_WORKER B_REDIS B_GW B_WORKER CLIENT_CPUS <<<"$CPUS"
MNT=/mnt/pirq-two
PIDS=()
stop_all() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
cleanup() {
    stop_all
    [ -n "${DB_DIR:-}" ] || umount "$MNT" 2>/dev/null || true
    tar -C "$work" -czf "$out/logs.tgz" logs 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/logs"
LOGS=$work/logs

start() { # CPUS NAME CMD...
    local cpus=$1 name=$2
    shift 2
    taskset -c "$cpus" "$@" >"$LOGS/$name.log" 2>&1 &
    PIDS+=($!)
}

# get PORT PATH FILE: GET into FILE (bash /dev/tcp; no curl needed)
get() {
    exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
    printf 'GET %s HTTP/1.0\r\n\r\n' "$2" >&3
    sed '1,/^\r$/d' <&3 >"$3"
    exec 3>&-
}

# wait_ready PORT WORKER_PID NAME: until the gateway's /v1/info lists one worker
wait_ready() {
    for _ in $(seq 1200); do
        kill -0 "$2" 2>/dev/null || { echo "worker $3 died:"; tail -n 30 "$LOGS/worker-$3.log"; return 1; }
        if get "$1" /v1/info "$work/info-$3.json" 2>/dev/null &&
            grep -q '"workers":1[,}]' "$work/info-$3.json"; then
            return 0
        fi
        sleep 0.5
    done
    echo "worker $3 not ready"
    return 1
}

# cpu_ticks PID: user + system CPU of a process so far, in clock ticks
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
HZ=$(getconf CLK_TCK)

# rotation FILE: the worker's rotation metrics in a scrape, as JSON fields, each summed over its
# lines (one a table: `name{table="default"} 12`)
rotation() {
    awk '
        /^#/ { next }
        { name = $1; sub(/\{.*/, "", name) }
        name ~ /^pirq_worker_turn_duration_seconds_(sum|count)$/ { f["turn_seconds_" substr(name, length("pirq_worker_turn_duration_seconds_") + 1)] += $NF }
        name ~ /^pirq_worker_turn_keys_(sum|count)$/ { f["turn_keys_" substr(name, length("pirq_worker_turn_keys_") + 1)] += $NF }
        name ~ /^pirq_worker_segment_wait_seconds_(sum|count)$/ { f["segment_wait_seconds_" substr(name, length("pirq_worker_segment_wait_seconds_") + 1)] += $NF }
        name == "pirq_worker_keys_answered_total" { f["keys_answered"] += $NF }
        END { sep = ""; printf "{"; for (k in f) { printf "%s\"%s\": %.12g", sep, k, f[k]; sep = ", " } printf "}" }
    ' "$1" 2>/dev/null || echo "{}"
}

{
    echo "machine: $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader || true
    echo "binaries: $(tr '\n' ' ' <"$bin/COMMIT")"
    echo "cores: A redis $A_REDIS gateway $A_GW worker $A_WORKER (GPU $GPU_A);" \
        "B redis $B_REDIS gateway $B_GW worker $B_WORKER (GPU $GPU_B); clients $CLIENT_CPUS"
} | tee "$out/machine.txt"

if [ -n "${DB_DIR:-}" ]; then
    MNT=$DB_DIR
    mkdir -p "$MNT"
else
    mkdir -p "$MNT"
    mount -t tmpfs -o size=72G tmpfs "$MNT"
fi
t0=$SECONDS
pirq db gen --pages "$PAGES" --page-size 4096 --seed 11 --out "$MNT/db.pirdb" 2>&1 | tail -n 1
echo "db gen: $((SECONDS - t0)) s" | tee -a "$out/steps.txt"

i=0
IFS=';' read -r -a configs <<<"$CONFIGS"
for cfg in "${configs[@]}"; do
    i=$((i + 1))
    echo "== config $i: pirq-worker $cfg" | tee -a "$out/steps.txt"
    start "$A_REDIS" redis-a redis-server --port 7201 --save "" --appendonly no --dir "$work"
    start "$B_REDIS" redis-b redis-server --port 7202 --save "" --appendonly no --dir "$work"
    sleep 0.3
    # shellcheck disable=SC2086 # GATEWAY_ARGS and cfg are flag lists
    {
        start "$A_GW" gateway-a pirq-gateway --redis redis://127.0.0.1:7201 --prefix party-a \
            --listen 127.0.0.1:8201 $GATEWAY_ARGS
        start "$B_GW" gateway-b pirq-gateway --redis redis://127.0.0.1:7202 --prefix party-b \
            --listen 127.0.0.1:8202 $GATEWAY_ARGS
        start "$A_WORKER" worker-a pirq-worker --redis redis://127.0.0.1:7201 --prefix party-a \
            --db "$MNT/db.pirdb" --backend "$BACKEND" --gpu "$GPU_A" --consumer gpu-a \
            --metrics-listen 127.0.0.1:9201 $cfg
        start "$B_WORKER" worker-b pirq-worker --redis redis://127.0.0.1:7202 --prefix party-b \
            --db "$MNT/db.pirdb" --backend "$BACKEND" --gpu "$GPU_B" --consumer gpu-b \
            --metrics-listen 127.0.0.1:9202 $cfg
    }
    t0=$SECONDS
    wait_ready 8201 "${PIDS[4]}" a
    wait_ready 8202 "${PIDS[5]}" b
    echo "workers ready after $((SECONDS - t0)) s" | tee -a "$out/steps.txt"
    grep -h "rotating scan ready" "$LOGS/worker-a.log" "$LOGS/worker-b.log" | tee -a "$out/steps.txt" || true
    for c in $CLIENTS; do
        name="cfg$i-two-closed-$c"
        before=()
        for n in 0 1 2 3 4 5; do before+=("$(cpu_ticks "${PIDS[$n]}")"); done
        get 9201 /metrics "$work/a0.metrics" || true
        get 9202 /metrics "$work/b0.metrics" || true
        TIMEFORMAT="%U %S"
        { time taskset -c "$CLIENT_CPUS" pirq bench load --quiet --duration "$DUR" --warmup "$WARM" \
            --json "$out/$name.json" --party-a http://127.0.0.1:8201 \
            --party-b http://127.0.0.1:8202 --verify "$MNT/db.pirdb" --bincode --keys 1 \
            --concurrency "$c" 2>"$out/$name.txt" || true; } 2>"$work/clientcpu"
        get 9201 /metrics "$out/cfg$i-a-$c.metrics" || true
        get 9202 /metrics "$out/cfg$i-b-$c.metrics" || true
        ticks=()
        for n in 0 1 2 3 4 5; do ticks+=("$(($(cpu_ticks "${PIDS[$n]}") - before[n]))"); done
        read -r cu cs <"$work/clientcpu" || { cu=0; cs=0; }
        # The point: the report's figures, CPU seconds of every process, and each worker's
        # rotation metrics before and after the point (differences give the point's own).
        cat >"$out/cfg$i-closed-$c.points.json" <<EOF
{"config": "$cfg", "clients": $c, "duration_s": $DUR, "warmup_s": $WARM,
 "report": $(cat "$out/$name.json" 2>/dev/null || echo null),
 "cpu_seconds": {"redis_a": $(awk -v t="${ticks[0]}" -v hz="$HZ" 'BEGIN { print t / hz }'),
   "redis_b": $(awk -v t="${ticks[1]}" -v hz="$HZ" 'BEGIN { print t / hz }'),
   "gateway_a": $(awk -v t="${ticks[2]}" -v hz="$HZ" 'BEGIN { print t / hz }'),
   "gateway_b": $(awk -v t="${ticks[3]}" -v hz="$HZ" 'BEGIN { print t / hz }'),
   "worker_a": $(awk -v t="${ticks[4]}" -v hz="$HZ" 'BEGIN { print t / hz }'),
   "worker_b": $(awk -v t="${ticks[5]}" -v hz="$HZ" 'BEGIN { print t / hz }'),
   "clients": $(awk -v u="$cu" -v s="$cs" 'BEGIN { print u + s }')},
 "worker_a": {"before": $(rotation "$work/a0.metrics"), "after": $(rotation "$out/cfg$i-a-$c.metrics")},
 "worker_b": {"before": $(rotation "$work/b0.metrics"), "after": $(rotation "$out/cfg$i-b-$c.metrics")}}
EOF
        echo "$name: $(tail -n 1 "$out/$name.txt")" | tee -a "$out/steps.txt"
    done
    for p in a b; do cp "$LOGS/worker-$p.log" "$LOGS/worker-$p-cfg$i.log"; done
    stop_all
    sleep 0.5
done
# Every point in one file.
{
    echo "["
    sep=""
    for f in "$out"/cfg*-closed-*.points.json; do
        [ -e "$f" ] || continue
        printf '%s' "$sep"
        cat "$f"
        sep=","
    done
    echo "]"
} >"$out/summary.json"
echo "done: $out"
