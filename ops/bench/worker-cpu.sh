#!/usr/bin/env bash
# The worker's CPU per key (issue 28, item 4: the answer bytes' copies between the scanner and the
# Redis write), on the CPU backend or (BACKEND=cuda) the CUDA one: one party (Redis, the release
# gateway, one worker on a small database, so the scan costs little beside the rest of a key's way)
# driven by `pirq bench load` in closed loop with both key halves sent to that party
# (--allow-same-party: answers verify, privacy does not hold; a benchmark of cost only), bincode,
# one key a query. Results: docs/bench/worker-cpu.md.
#
#   ops/bench/worker-cpu.sh [BIN_DIR...]   # each BIN_DIR holds pirq-gateway, pirq-worker and
#                                          # pirq (default target/release; build them first);
#                                          # a BIN_DIR without the last two uses the first's
#
# With several BIN_DIRs the runs alternate between them (A B A B ...), so that whatever else the
# machine does at the time weighs on each alike. Per run it prints the worker's CPU (utime and
# stime from /proc/<pid>/stat) over the keys it answered (`pirq_worker_keys_answered_total` from
# its /metrics), both counted over the measured seconds only (after the warm-up); at the end the
# median per BIN_DIR. The worker is pinned to WORKER_CPUS (default 1), everything else to
# OTHER_CPUS (default 0).
#
# Environment: RUNS per BIN_DIR (default 3), CLIENTS (default 32), DUR / WARM (seconds, default
# 10 / 3), PAGES (default 64: one 64-page segment), PAGE_SIZE (default 4096; larger pages make
# the copies a larger share of a key's cost), BACKEND (default cpu; cuda on a GPU machine, with
# workers built with `--features cuda`), OUT (default a temporary directory: logs, JSON reports,
# and `results`: one line "BIN_DIR us/key keys/s" a run).
set -euo pipefail
# shellcheck source=ops/bench/lib/procs.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/procs.sh"
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || set -- target/release
DIRS=()
for d in "$@"; do DIRS+=("$(realpath "$d")"); done
RUNS=${RUNS:-3}
CLIENTS=${CLIENTS:-32}
DUR=${DUR:-10}
WARM=${WARM:-3}
PAGES=${PAGES:-64}
PAGE_SIZE=${PAGE_SIZE:-4096}
BACKEND=${BACKEND:-cpu}
WORKER_CPUS=${WORKER_CPUS:-1}
OTHER_CPUS=${OTHER_CPUS:-0}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
REDIS_PORT=${REDIS_PORT:-7321}
GW_PORT=${GW_PORT:-8321}
METRICS_PORT=${METRICS_PORT:-9321}
answered() { # the worker's answered-keys counter, summed over its lines (one a table)
    get "$METRICS_PORT" /metrics "$W/metrics" &&
        awk '/^pirq_worker_keys_answered_total[{ ]/ {s += $NF} END {print s + 0}' "$W/metrics"
}

# cpu_ticks PID: "user system" CPU of a process so far, in clock ticks
cpu_ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "tree: $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)')$(git diff --quiet HEAD 2>/dev/null || echo ' + changes')"
for d in "${DIRS[@]}"; do echo "bin $d: $(cat "$d/COMMIT" 2>/dev/null || echo '(no COMMIT file)')"; done
"${DIRS[0]}/pirq" db gen --pages "$PAGES" --page-size "$PAGE_SIZE" --seed 11 \
    --out "$W/db.pirdb" 2>&1 | tail -n 1

# bin BIN_DIR NAME: BIN_DIR/NAME, else the first BIN_DIR's
bin() { if [ -x "$1/$2" ]; then echo "$1/$2"; else echo "${DIRS[0]}/$2"; fi; }

# one_run BIN_DIR NAME: one measured run; appends "BIN_DIR us/key keys/s" to $OUT/results
one_run() {
    local b=$1 name=$2
    start "$OTHER_CPUS" "$OUT/redis.log" redis-server --port "$REDIS_PORT" --save "" \
        --appendonly no --dir "$W"
    sleep 0.3
    start "$OTHER_CPUS" "$OUT/gateway.log" "$(bin "$b" pirq-gateway)" \
        --redis "redis://127.0.0.1:$REDIS_PORT" --prefix wcpu --listen "127.0.0.1:$GW_PORT"
    start "$WORKER_CPUS" "$OUT/worker.log" "$b/pirq-worker" --redis "redis://127.0.0.1:$REDIS_PORT" \
        --prefix wcpu --db "$W/db.pirdb" --backend "$BACKEND" --threads 1 --consumer cpu0 \
        --metrics-listen "127.0.0.1:$METRICS_PORT"
    local worker=${PIDS[2]}
    for _ in $(seq 1200); do # up to 2 min: a CUDA worker compiles its kernels first
        get "$GW_PORT" /v1/info "$W/info.json" 2>/dev/null &&
            grep -q '"workers":1[,}]' "$W/info.json" && break
        sleep 0.1
    done
    taskset -c "$OTHER_CPUS" "$(bin "$b" pirq)" bench load --quiet --duration "$DUR" \
        --warmup "$WARM" --json "$OUT/$name.json" --party-a "http://127.0.0.1:$GW_PORT" \
        --party-b "http://127.0.0.1:$GW_PORT" --allow-same-party --verify "$W/db.pirdb" \
        --bincode --keys 1 --concurrency "$CLIENTS" 2>"$OUT/$name.txt" &
    PIDS+=("$!") # stopped with the servers on Ctrl-C, not left to run out its time
    local load=$! k0 k1 u0 s0 u1 s1
    sleep "$WARM"
    k0=$(answered)
    read -r u0 s0 < <(cpu_ticks "$worker")
    sleep "$DUR"
    k1=$(answered)
    read -r u1 s1 < <(cpu_ticks "$worker")
    wait "$load" || true
    awk -v u="$((u1 - u0))" -v s="$((s1 - s0))" -v hz="$HZ" -v k="$((k1 - k0))" \
        -v b="$b" -v name="$name" -v dur="$DUR" -v res="$OUT/results" 'BEGIN {
            t = u + s; us = k ? 1e6 / hz / k : 0
            printf "%s: %d keys (%.0f/s), worker CPU %.2f s = %.1f us/key (user %.1f, system %.1f)\n",
                   name, k, k / dur, t / hz, t * us, u * us, s * us
            printf "%s %.1f %.0f\n", b, t * us, k / dur >> res }'
    grep '^|' "$OUT/$name.txt" | tail -n 1 || true
    stop_all
    sleep 0.5
}

for run in $(seq "$RUNS"); do
    for i in "${!DIRS[@]}"; do
        one_run "${DIRS[$i]}" "run$run-bin$i"
    done
done
echo "median worker CPU per key:"
for i in "${!DIRS[@]}"; do
    awk -v b="${DIRS[$i]}" '$1 == b { print $2 }' "$OUT/results" | sort -n |
        awk -v b="${DIRS[$i]}" -v i="$i" '{ v[NR] = $1 } END {
            printf "  bin%d %s: %.1f us (runs: %d, min %.1f, max %.1f)\n", i, b,
                   NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, NR, v[1], v[NR] }'
done
echo "logs and reports: $OUT"
