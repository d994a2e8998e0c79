#!/usr/bin/env bash
# One party end to end on 1..N GPUs of one host (issue 35 item 3, issue 41): Redis (one
# redis-server, or a Redis Cluster of CLUSTER primaries), one gateway, one CUDA worker per GPU
# (replicas of the whole database, or shards of it with SHARDS=1), all serving one database
# (64 GiB by default, on a tmpfs), driven by `pirq bench load` in closed loop with both key
# halves sent to that party (--allow-same-party: answers verify, privacy does not hold, the party
# does the work of both: a benchmark of capacity, which counts *party keys*, two a lookup).
# Set against the same machine's scanner bench (`pirq-gpu-bench`, GPU 0, same database size).
# Results: docs/bench/host-path.md (issue 35), docs/bench/gpu-e2e.md.
#
#   ops/bench/gpu-scale.sh build [DIR]   # here: the gateway and CUDA worker of this tree into
#                                        # DIR/$VARIANT (default current); the load generator,
#                                        # pirq-gpu-bench, redis-server/redis-cli and
#                                        # scripts/redis-cluster.sh into DIR (default .gpu/scale)
#   ops/bench/gpu-scale.sh run [DIR]     # on the GPU machine, as root (mounts a tmpfs)
#
# Build again from another checkout with another VARIANT to compare binary sets on one machine:
# `run` takes every set (VARIANTS, default all built) at each GPU count in turn. A set's folder
# may hold a GATEWAY_ARGS file: extra gateway flags for that set (e.g. a copy of a set with
# `--connection-threads 4` compares settings of one build).
#
# Environment for `run`:
#   PAGES      database pages of 4 KiB (default 2^24: 64 GiB)
#   GPUS       GPU counts run in turn (default "1 2"); n uses GPUs 0..n-1, one worker each
#   SHARDS     1: the n workers are shards I/n of the database instead of replicas (default 0)
#   CLIENTS    closed-loop clients (default 2048); LONE=1 (default) also times 1 client
#   KEYS       keys per query (default 1)
#   DUR / WARM measured and warm-up seconds per point (default 20 / 5)
#   BENCH      1 (default): `pirq-gpu-bench` at Q = 256 and 512 on GPU 0 first
#   CLUSTER    0 (default): one redis-server; N: a Redis Cluster of N primaries (one core each)
#              and the party's queue in 2N partitions (`--partitions`), placed evenly
#   GW_THREADS gateway runtime threads (default: unset, the gateway's own default)
#   REDIS_ARGS extra redis-server arguments, split on spaces (default none), e.g.
#              "--io-threads 4 --io-threads-do-reads yes"; given to every node of a cluster too
#   REDIS_CPUS the one redis-server's cores (default 0; give I/O threads room, e.g. 0,1,14-17)
#   OUT        results folder (default .gpu/out): summary.txt and a tarball of logs, JSON
#              reports, metric scrapes and per point Redis' INFO commandstats
# Redis CPU is reported for the whole process and for its main thread alone (the thread that
# runs every command: what binds one Redis; /proc/PID/task/PID/stat), per thread in the logs
# (NAME.redis-threads). Cores: Redis REDIS_CPUS (cluster: 0..N-1, the main threads), gateway GW_CPUS (default 2-9), worker g on
# WORKER_BASE+2g..WORKER_BASE+2g+1 (default 10), clients CLIENT_CPUS (default 18 up to the last
# core; the 2-GPU host has 32 cores, the 4-GPU host 64; on the 16-core 1-GPU host use e.g.
# GW_CPUS=1-3 WORKER_BASE=4 CLIENT_CPUS=6-15).
set -euo pipefail
cd "$(dirname "$0")/../.."
D=${2:-.gpu/scale}

case "${1:-}" in
build)
    V=${VARIANT:-current}
    cargo build --release -p pirq-gateway -p pirq-cli --bin pirq-gateway --bin pirq
    cargo build --release -p pirq-worker --features cuda --bin pirq-worker
    cargo build --release -p pirq-scan --features cuda --bin pirq-gpu-bench
    rm -rf "${D:?}/$V" && mkdir -p "$D/$V"
    cp target/release/pirq-gateway target/release/pirq-worker "$D/$V/"
    cp target/release/pirq target/release/pirq-gpu-bench scripts/redis-cluster.sh "$D/"
    git rev-parse --short HEAD >"$D/$V/COMMIT"
    git diff --quiet HEAD || echo "(+ uncommitted changes)" >>"$D/$V/COMMIT"
    # shellcheck source=scripts/lib/gpu-bundle.sh
    . scripts/lib/gpu-bundle.sh
    copy_redis_server "$D"
    strip "$D"/pirq* "$D/$V"/pirq* "$D/redis-server" "$D/redis-cli" 2>/dev/null || true
    du -sh "$D"
    exit 0
    ;;
run) ;;
*)
    echo "usage: $0 build | run [DIR]" >&2
    exit 2
    ;;
esac

B="$PWD/$D"
export PATH="$B:$PATH" LD_LIBRARY_PATH="$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
OUT=${OUT:-.gpu/out}
mkdir -p "$OUT"
LOGS=$(mktemp -d)
W=$(mktemp -d)
PAGES=${PAGES:-16777216}
GPUS=${GPUS:-1 2}
CLIENTS=${CLIENTS:-2048}
KEYS=${KEYS:-1}
DUR=${DUR:-20}
WARM=${WARM:-5}
CLUSTER=${CLUSTER:-0}
MNT=/mnt/pirq-scale
read -ra REDIS_EXTRA <<<"${REDIS_ARGS:-}"
if [ ${#REDIS_EXTRA[@]} -gt 0 ]; then
    # redis-cluster.sh starts $PIRQ_REDIS_SERVER (and uses the redis-cli beside it): a wrapper
    # that adds REDIS_ARGS gives every cluster node the same arguments.
    mkdir -p "$W/redis-args"
    printf '#!/bin/sh\nexec %q "$@" %s\n' "$(command -v redis-server)" "${REDIS_EXTRA[*]}" >"$W/redis-args/redis-server"
    chmod +x "$W/redis-args/redis-server"
    ln -sf "$(command -v redis-cli)" "$W/redis-args/redis-cli"
    export PIRQ_REDIS_SERVER=$W/redis-args/redis-server
fi
SUMMARY="$OUT/summary.txt"
PIDS=()
# shellcheck source=scripts/lib/bench-procs.sh
. scripts/lib/bench-procs.sh

stop_all() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
    if [ "$CLUSTER" != 0 ]; then redis-cluster.sh stop >/dev/null 2>&1 || true; fi
}
cleanup() {
    stop_all
    umount "$MNT" 2>/dev/null || true
    tar -C "$LOGS" -czf "$OUT/gpu-scale.tgz" . 2>/dev/null || true
}
trap cleanup EXIT
say() { echo "$*" | tee -a "$SUMMARY"; }

# redis_nodes: the ports of the party's Redis primaries
redis_nodes() {
    if [ "$CLUSTER" = 0 ]; then echo 7101; else seq 7000 $((7000 + CLUSTER - 1)); fi
}

# commands_total: the calls INFO commandstats counts, over every primary
commands_total() {
    local total=0 n
    for port in $(redis_nodes); do
        n=$(redis-cli -p "$port" INFO commandstats | awk -F'[=,]' '/^cmdstat_/ { s += $2 } END { print s + 0 }')
        total=$((total + n))
    done
    echo "$total"
}

# wait_workers N: until /v1/info lists N workers; fails at once if a worker died
wait_workers() {
    for _ in $(seq 1200); do
        for p in "${WORKER_PIDS[@]}"; do
            kill -0 "$p" 2>/dev/null || { echo "a worker died:"; tail -n 30 "$LOGS"/worker-*.log; return 1; }
        done
        if get http://127.0.0.1:8101/v1/info "$W/info.json" 2>/dev/null &&
            grep -q "\"workers\":$1[,}]" "$W/info.json"; then
            return 0
        fi
        sleep 0.5
    done
    echo "workers not ready"
    return 1
}

: >"$SUMMARY"
say "machine: $(nproc) cores; $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | tr -s ' ')"
VARIANTS=${VARIANTS:-$(cd "$B" && for v in */; do if [ -x "$v/pirq-worker" ]; then echo "${v%/}"; fi; done)}
# shellcheck disable=SC2086,SC2116 # word splitting joins the lines
VARIANTS=$(echo $VARIANTS)
for v in $VARIANTS; do
    say "variant $v: $(tr '\n' ' ' <"$B/$v/COMMIT") $(cat "$B/$v/GATEWAY_ARGS" 2>/dev/null)"
done
say "pages $PAGES; clients $CLIENTS; keys/query $KEYS; dur $DUR s (warm $WARM); cluster ${CLUSTER}; shards ${SHARDS:-0}; redis args '${REDIS_ARGS:-}' on cores ${REDIS_CPUS:-0}"
mkdir -p "$MNT"
umount "$MNT" 2>/dev/null || true
mount -t tmpfs -o size=72G tmpfs "$MNT"
t0=$(date +%s)
pirq db gen --pages "$PAGES" --page-size 4096 --seed 11 --out "$MNT/db.pirdb" 2>&1 | tail -n 1
say "db gen: $(($(date +%s) - t0)) s"

if [ "${BENCH:-1}" = 1 ]; then
    gib=$((PAGES * 4096 >> 30))
    CUDA_VISIBLE_DEVICES=0 pirq-gpu-bench --sizes-gib "$gib" --qs 1,256,512 --reps 5 \
        --pool-qs 64 --pool-windows 4 --rotate-qs 1 --rotate-turns 3 >"$LOGS/gpu-bench.txt" 2>&1 || true
    say "scanner bench (GPU 0, $gib GiB):"
    grep -E "^\s*(1|256|512)\s" "$LOGS/gpu-bench.txt" | head -n 6 | tee -a "$SUMMARY" || true
fi

SELF=(--party-a http://127.0.0.1:8101 --party-b http://127.0.0.1:8101 --allow-same-party
    --verify "$MNT/db.pirdb" --bincode --keys "$KEYS")
nproc_all=$(nproc)
client_cpus=${CLIENT_CPUS:-18-$((nproc_all - 1))}
gw_cpus=${GW_CPUS:-2-9}
wb=${WORKER_BASE:-10}
for n in $GPUS; do
  for v in $VARIANTS; do
    if [ "$CLUSTER" = 0 ]; then
        start "${REDIS_CPUS:-0}" redis redis-server --port 7101 --save "" --appendonly no --dir "$W" \
            "${REDIS_EXTRA[@]}"
        REDIS_URL=redis://127.0.0.1:7101
        PART_ARGS=()
        sleep 0.3
    else
        tags="party"
        for p in $(seq 1 $((2 * CLUSTER - 1))); do tags="$tags party:$p"; done
        REDIS_URL=$(redis-cluster.sh start --primaries "$CLUSTER" --replicas 0 --place-tags "$tags" | tail -n 1)
        i=0
        for port in $(redis_nodes); do
            pid=$(redis-cli -p "$port" INFO server | awk -F: '/^process_id/ { print $2 }' | tr -d '\r')
            taskset -cp "$i" "$pid" >/dev/null
            i=$((i + 1))
        done
        PART_ARGS=(--partitions $((2 * CLUSTER)))
    fi
    # A set's own gateway flags (e.g. connection lanes): the words of $B/$v/GATEWAY_ARGS.
    gw_args=()
    if [ -f "$B/$v/GATEWAY_ARGS" ]; then read -r -a gw_args <"$B/$v/GATEWAY_ARGS"; fi
    # shellcheck disable=SC2086
    start "$gw_cpus" "gateway-$v-$n" "$B/$v/pirq-gateway" --redis "$REDIS_URL" --prefix party --listen 127.0.0.1:8101 \
        --max-waiters 8192 "${PART_ARGS[@]}" ${GW_THREADS:+--runtime-threads $GW_THREADS} "${gw_args[@]}"
    WORKER_PIDS=()
    for g in $(seq 0 $((n - 1))); do
        shard=()
        if [ "${SHARDS:-0}" = 1 ]; then shard=(--shard "$g/$n"); fi
        start "$((wb + 2 * g))-$((wb + 1 + 2 * g))" "worker-$v-$n-g$g" env CUDA_VISIBLE_DEVICES="$g" \
            "$B/$v/pirq-worker" --redis "$REDIS_URL" --prefix party --db "$MNT/db.pirdb" --backend cuda \
            --consumer "g$g" --metrics-listen "127.0.0.1:$((9100 + g))" "${PART_ARGS[@]}" "${shard[@]}"
        WORKER_PIDS+=("${PIDS[-1]}")
    done
    t0=$(date +%s)
    wait_workers "$n"
    say "== $v, $n GPU(s): workers ready after $(($(date +%s) - t0)) s"
    gw=${PIDS[0]}
    if [ "$CLUSTER" = 0 ]; then gw=${PIDS[1]}; fi
    points="$CLIENTS"
    if [ "${LONE:-1}" = 1 ]; then points="1 $points"; fi
    for c in $points; do
        name="$v-gpus-$n-c$c"
        for port in $(redis_nodes); do redis-cli -p "$port" CONFIG RESETSTAT >/dev/null; done
        redis_before=0 main_before=0
        for port in $(redis_nodes); do
            pid=$(redis-cli -p "$port" INFO server | awk -F: '/^process_id/ { print $2 }' | tr -d '\r')
            redis_before=$((redis_before + $(cpu_ticks "$pid")))
            main_before=$((main_before + $(main_cpu_ticks "$pid")))
            thread_cpu_ticks "$pid" | sed "s/^/$port before /" >>"$LOGS/$name.redis-threads"
        done
        gw_before=$(cpu_ticks "$gw")
        taskset -c "$client_cpus" pirq bench load --quiet --duration "$DUR" --warmup "$WARM" \
            --json "$LOGS/$name.json" "${SELF[@]}" --concurrency "$c" 2>"$LOGS/$name.txt" || true
        gw_ticks=$(($(cpu_ticks "$gw") - gw_before))
        redis_ticks=0 main_ticks=0
        for port in $(redis_nodes); do
            pid=$(redis-cli -p "$port" INFO server | awk -F: '/^process_id/ { print $2 }' | tr -d '\r')
            redis_ticks=$((redis_ticks + $(cpu_ticks "$pid")))
            main_ticks=$((main_ticks + $(main_cpu_ticks "$pid")))
            thread_cpu_ticks "$pid" | sed "s/^/$port after /" >>"$LOGS/$name.redis-threads"
            redis-cli -p "$port" INFO commandstats >>"$LOGS/$name.commandstats"
        done
        redis_ticks=$((redis_ticks - redis_before))
        main_ticks=$((main_ticks - main_before))
        commands=$(commands_total)
        # Party keys: both halves of every lookup went to this party. The CPU and commands count
        # the warm-up too (reset before it), so they are divided by the keys of warm-up + measure.
        python3 - "$LOGS/$name.json" "$gw_ticks" "$redis_ticks" "$commands" "$WARM" "$main_ticks" <<'PY' | tee -a "$SUMMARY"
import json, sys
r = json.load(open(sys.argv[1]))
gw, rd, cmds, warm = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
main = int(sys.argv[6])
party_keys_s = 2 * r["achieved_keys_per_s"]
keys_all = party_keys_s * (r["duration_s"] + warm)
per = lambda ticks: ticks * 1e4 / keys_all if keys_all else float("nan")
lat = r["latency_ms"]
print(f"  clients {sys.argv[1].rsplit('-c', 1)[-1].split('.')[0]:>5}: {party_keys_s:9.1f} party keys/s; "
      f"p50 {lat['p50']:.2f} ms p99 {lat['p99']:.2f} ms; errors {sum(r['errors'].values())}; "
      f"gateway {per(gw):.1f} us/key ({gw / (r['duration_s'] + warm):.0f} % of a core); "
      f"redis {per(rd):.1f} us/key ({rd / (r['duration_s'] + warm):.0f} %); "
      f"{cmds / keys_all if keys_all else float('nan'):.2f} commands/key; "
      f"redis main thread {per(main):.1f} us/key ({main / (r['duration_s'] + warm):.0f} %)")
PY
        for g in $(seq 0 $((n - 1))); do
            get "http://127.0.0.1:$((9100 + g))/metrics" "$LOGS/$name-g$g.metrics" || true
        done
        get http://127.0.0.1:8101/metrics "$LOGS/$name-gateway.metrics" || true
    done
    stop_all
    sleep 1
  done
done
echo "done: $OUT"
