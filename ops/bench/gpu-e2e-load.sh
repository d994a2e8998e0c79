#!/usr/bin/env bash
# One party end to end on one GPU with a large database (64 GiB by default): Redis, a gateway
# and one CUDA worker, driven by `pirq bench load` in closed loop with both key halves sent to
# that one party (--party-a = --party-b: answers verify, privacy does not hold, the party does
# the work of both; a benchmark of capacity). Results: docs/bench/gpu-e2e.md.
#
#   ops/bench/gpu-e2e-load.sh build [DIR]   # here: release binaries of this tree into
#                                           # DIR/$VARIANT (default current), redis into DIR
#                                           # (DIR default .gpu/e2e-load)
#   ops/bench/gpu-e2e-load.sh run [DIR]     # on the GPU machine, as root (mounts a tmpfs)
#
# Build twice with different VARIANT names (e.g. from two commits) to compare binaries in one
# run. Environment for `run`: PAGES (default 2^24 = 64 GiB of 4 KiB pages), DUR / WARM (seconds
# per load point, default 10 / 3), CLIENTS (default "64 512"), RATES (open-loop points after them,
# queries per second, default none), CONFIGS (worker flag sets
# separated by ';', default "--max-batch-keys 256"), VARIANTS (binary sets under DIR, default:
# all built), GATEWAY_ARGS (extra gateway flags, e.g. "--max-waiters 4096": this benchmark's
# party holds both halves of every client, twice the waiters a real party sees), VERIFY=1 (also
# time `pirq db verify` of the database), LAYOUTS (where the processes run: entries
# REDIS/GATEWAY/WORKER/CLIENTS of taskset core lists, optionally /REDIS-FLAGS with ',' for ' ',
# every point run once per entry; default "0/1-3/4-7/8-15"), OUT (gets one tarball of
# logs, JSON reports, metric scrapes, and per point the CPU seconds of each process and Redis'
# per-command times).
set -euo pipefail
cd "$(dirname "$0")/../.."
D=${2:-.gpu/e2e-load}

case "${1:-}" in
build)
    V=${VARIANT:-current}
    cargo build --release -p pirq-gateway -p pirq-cli --bin pirq-gateway --bin pirq
    cargo build --release -p pirq-worker --features cuda --bin pirq-worker
    rm -rf "${D:?}/$V" && mkdir -p "$D/$V"
    cp target/release/pirq-gateway target/release/pirq-worker target/release/pirq "$D/$V/"
    git rev-parse --short HEAD >"$D/$V/COMMIT"
    git diff --quiet HEAD || echo "(+ uncommitted changes)" >>"$D/$V/COMMIT"
    redis=$(command -v redis-server)
    cp "$redis" "$D/redis-server"
    cp "$(command -v redis-cli)" "$D/redis-cli"
    for lib in liblzf.so.1 libjemalloc.so.2; do
        cp "$(ldd "$redis" | awk -v l="$lib" '$1 == l {print $3}')" "$D/"
    done
    strip "$D/$V"/pirq* "$D/redis-server" "$D/redis-cli" 2>/dev/null || true
    du -sh "$D"
    exit 0
    ;;
run) ;;
*)
    echo "usage: $0 build | run [DIR]" >&2
    exit 2
    ;;
esac

ROOT="$PWD/$D"
export PATH="$ROOT:$PATH" LD_LIBRARY_PATH="$PWD/$D${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
FINAL=${OUT:-.gpu/out}
mkdir -p "$FINAL"
# Logs, JSON reports and metric scrapes go to $LOGS, packed into one tarball in $OUT at the end
# (the GPU machine sends back few files).
LOGS=$(mktemp -d)
PAGES=${PAGES:-16777216}
DUR=${DUR:-10}
WARM=${WARM:-3}
CLIENTS=${CLIENTS:-64 512}
CONFIGS=${CONFIGS:---max-batch-keys 256}
VARIANTS=${VARIANTS:-$(cd "$D" && for v in */; do if [ -x "$v/pirq-worker" ]; then echo "${v%/}"; fi; done)}
# shellcheck disable=SC2086,SC2116 # word splitting joins the lines
VARIANTS=$(echo $VARIANTS)
FIRST=${VARIANTS%% *}
MNT=/mnt/pirq-e2e
W=$(mktemp -d)
PIDS=()
# shellcheck source=scripts/lib/bench-procs.sh
. scripts/lib/bench-procs.sh

stop_all() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
cleanup() {
    stop_all
    umount "$MNT" 2>/dev/null || true
    tar -C "$LOGS" -czf "$FINAL/gpu-e2e-load.tgz" . 2>/dev/null || true
}
trap cleanup EXIT

# wait_worker PID: until /v1/info lists one worker; fails at once if the worker died
wait_worker() {
    for _ in $(seq 1200); do
        kill -0 "$1" 2>/dev/null || { echo "worker died:"; tail -n 30 "$LOGS/worker.log"; return 1; }
        if get http://127.0.0.1:8101/v1/info "$W/info.json" 2>/dev/null &&
            grep -q '"workers":1[,}]' "$W/info.json"; then
            return 0
        fi
        sleep 0.5
    done
    echo "worker not ready"
    return 1
}

echo "machine: $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
# The host: CPU model and clock, which cores share a physical one, and where interrupts land (a
# core that takes the GPU's or the network's interrupts is a poor home for Redis' one thread).
lscpu | grep -E "^(Model name|Thread|Core|Socket|NUMA node|CPU max|CPU MHz)" || true
lscpu -e=CPU,CORE,SOCKET,NODE 2>/dev/null | tr -s ' ' | tr '\n' ';' && echo
awk 'NR == 1 { n = NF } NR > 1 { for (c = 2; c <= n + 1; c++) if ($c ~ /^[0-9]+$/) t[c - 2] += $c }
     END { printf "interrupts since boot by cpu:"; for (c = 0; c < n; c++) printf " %d:%d", c, t[c]; print "" }' \
    /proc/interrupts || true
LAYOUTS=${LAYOUTS:-0/1-3/4-7/8-15}
mkdir -p "$MNT"
mount -t tmpfs -o size=72G tmpfs "$MNT"
t0=$(date +%s)
"$ROOT/$FIRST/pirq" db gen --pages "$PAGES" --page-size 4096 --seed 11 \
    --out "$MNT/db.pirdb" 2>&1 | tail -n 1
echo "db gen: $(($(date +%s) - t0)) s"
if [ "${VERIFY:-0}" = 1 ]; then
    t0=$EPOCHREALTIME
    "$ROOT/$FIRST/pirq" db verify "$MNT/db.pirdb" 2>&1 | tail -n 2
    echo "db verify: $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
fi
SELF=(--party-a http://127.0.0.1:8101 --party-b http://127.0.0.1:8101 --allow-same-party
    --verify "$MNT/db.pirdb")

i=0
IFS=';' read -r -a configs <<<"$CONFIGS"
for variant in $VARIANTS; do
    B="$ROOT/$variant"
    for cfg in "${configs[@]}"; do
      for layout in $LAYOUTS; do
        IFS=/ read -r redis_cpus gateway_cpus worker_cpus client_cpus redis_flags <<<"$layout"
        i=$((i + 1))
        echo "== config $i: $variant ($(tr '\n' ' ' <"$B/COMMIT")) pirq-worker $cfg;" \
            "cores: redis $redis_cpus, gateway $gateway_cpus, worker $worker_cpus, clients $client_cpus;" \
            "redis flags: ${redis_flags:-none}"
        # shellcheck disable=SC2086
        start "$redis_cpus" redis redis-server --port 7101 --save "" --appendonly no --dir "$W" \
            ${redis_flags//,/ }
        sleep 0.3
        # shellcheck disable=SC2086
        start "$gateway_cpus" gateway "$B/pirq-gateway" --redis redis://127.0.0.1:7101 --prefix party-a \
            --listen 127.0.0.1:8101 ${GATEWAY_ARGS:-}
        # shellcheck disable=SC2086
        start "$worker_cpus" worker "$B/pirq-worker" --redis redis://127.0.0.1:7101 --prefix party-a \
            --db "$MNT/db.pirdb" --backend cuda --consumer gpu0 \
            --metrics-listen 127.0.0.1:9101 $cfg
        t0=$(date +%s)
        wait_worker "${PIDS[2]}"
        echo "worker ready after $(($(date +%s) - t0)) s"
        grep -h "window policy" "$LOGS/worker.log" | tail -n 1 || true
        # shellcheck disable=SC2086 # the lists split into points
        for point in $CLIENTS ${RATES:+$(printf 'rate:%s ' $RATES)}; do
            case $point in
            rate:*) c=${point#rate:} name="cfg$i-$variant-open-$c" load=(--rate "$c") ;;
            *) c=$point name="cfg$i-$variant-closed-$c" load=(--concurrency "$c") ;;
            esac
            redis-cli -p 7101 CONFIG RESETSTAT >/dev/null
            before=("$(cpu_ticks "${PIDS[0]}")" "$(cpu_ticks "${PIDS[1]}")" "$(cpu_ticks "${PIDS[2]}")")
            TIMEFORMAT="client user %U s, system %S s"
            { time taskset -c "$client_cpus" "$B/pirq" bench load --quiet --duration "$DUR" \
                --warmup "$WARM" --json "$LOGS/$name.json" "${SELF[@]}" --bincode --keys 1 \
                "${load[@]}" 2>"$LOGS/$name.txt" || true; } 2>"$LOGS/$name.clientcpu"
            echo "$name: $(tail -n 1 "$LOGS/$name.txt")"
            echo "cpu ticks (1/100 s) over the point: redis $(($(cpu_ticks "${PIDS[0]}") - before[0]))" \
                "gateway $(($(cpu_ticks "${PIDS[1]}") - before[1]))" \
                "worker $(($(cpu_ticks "${PIDS[2]}") - before[2]));" \
                "$(cat "$LOGS/$name.clientcpu" 2>/dev/null)"
            redis-cli -p 7101 INFO commandstats >"$LOGS/$name.commandstats" || true
            grep -E "cmdstat_(xadd|evalsha|eval|hgetall|exec|hset|xreadgroup):" \
                "$LOGS/$name.commandstats" | cut -d, -f1-3 | tr '\n' ' ' || true
            echo
            get http://127.0.0.1:9101/metrics "$LOGS/$name.metrics" || true
            grep -E '^pirq_worker_(turn_duration_seconds|turn_keys)_(sum|count)' \
                "$LOGS/$name.metrics" || true
            get http://127.0.0.1:8101/metrics "$LOGS/$name.gateway-metrics" || true
        done
        cp "$LOGS/worker.log" "$LOGS/worker-cfg$i.log"
        stop_all
        sleep 0.5
      done
    done
done
echo "done: $FINAL/gpu-e2e-load.tgz"
