#!/usr/bin/env bash
# The gateway's CPU per query on the `Prefer: wait` path (issue 13), on a small machine: one
# party (Redis, the release gateway, one CPU worker on a small database) driven by
# `pirq bench load` in closed loop with both key halves sent to that party (--allow-same-party:
# answers verify, privacy does not hold; a benchmark of cost only), bincode, one key a query.
# Results: docs/bench/load.md, "Gateway CPU per query".
#
#   ops/bench/gateway-cpu.sh [BIN_DIR...]   # each BIN_DIR holds pirq-gateway, pirq-worker and
#                                           # pirq (default target/release; build them first);
#                                           # a BIN_DIR without the last two uses the first's
#
# With several BIN_DIRs the runs alternate between them (A B A B ...), so that whatever else
# the machine does at the time weighs on each alike. Per run it prints the gateway's CPU
# (utime and stime from /proc/<pid>/stat) over the queries it accepted
# (`pirq_gateway_queries_accepted_total` from its /metrics), both counted over the measured
# seconds only (after the warm-up), and Redis' CPU over the same queries; at the end the
# median gateway CPU per BIN_DIR. The gateway is
# pinned to GW_CPUS (default 1), everything else to OTHER_CPUS (default 0); on a larger machine
# REDIS_CPUS, WORKER_CPUS and CLIENT_CPUS (default OTHER_CPUS each) and WORKER_THREADS (default
# 1) spread the rest.
#
# Environment: RUNS per BIN_DIR (default 3), CLIENTS (default 64), DUR / WARM (seconds, default
# 15 / 3), PAGES (default 256 pages of 4 KiB: a pass costs the worker little), OUT (default a
# temporary directory: logs, JSON reports), and for each BIN_DIR's first run:
# - PERF=1: `perf record -g` of the gateway over the measured seconds, into
#   $OUT/<run>.perf.data (give a BIN_DIR built with symbols, see docs/bench/load.md);
# - PROBE: instead, a command run over the measured seconds, `{pid}` replaced by the gateway's
#   pid and `-- sleep DUR` appended, e.g. PROBE="perf trace -s -o trace.txt -p {pid}".
set -euo pipefail
# shellcheck source=ops/bench/lib/procs.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/procs.sh"
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || set -- target/release
DIRS=()
for d in "$@"; do DIRS+=("$(realpath "$d")"); done
RUNS=${RUNS:-3}
CLIENTS=${CLIENTS:-64}
DUR=${DUR:-15}
WARM=${WARM:-3}
PAGES=${PAGES:-256}
GW_CPUS=${GW_CPUS:-1}
OTHER_CPUS=${OTHER_CPUS:-0}
REDIS_CPUS=${REDIS_CPUS:-$OTHER_CPUS}
WORKER_CPUS=${WORKER_CPUS:-$OTHER_CPUS}
CLIENT_CPUS=${CLIENT_CPUS:-$OTHER_CPUS}
WORKER_THREADS=${WORKER_THREADS:-1}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
REDIS_PORT=${REDIS_PORT:-7311}
GW_PORT=${GW_PORT:-8311}
accepted() { # the gateway's accepted-queries counter, summed over its lines (one a table)
    get "$GW_PORT" /metrics "$W/metrics" && awk '/^pirq_gateway_queries_accepted_total[{ ]/ {s += $NF} END {print s + 0}' "$W/metrics"
}

# cpu_ticks PID: "user system" CPU of a process so far, in clock ticks
cpu_ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "tree: $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)')$(git diff --quiet HEAD 2>/dev/null || echo ' + changes')"
"${DIRS[0]}/pirq" db gen --pages "$PAGES" --page-size 4096 --seed 11 --out "$W/db.pirdb" 2>&1 |
    tail -n 1

# bin BIN_DIR NAME: BIN_DIR/NAME, else the first BIN_DIR's
bin() { if [ -x "$1/$2" ]; then echo "$1/$2"; else echo "${DIRS[0]}/$2"; fi; }

# one_run BIN_DIR NAME PROBE?: one measured run; appends "BIN_DIR us/query" to $OUT/results
one_run() {
    local b=$1 name=$2 probe=$3
    start "$REDIS_CPUS" "$OUT/redis.log" redis-server --port "$REDIS_PORT" --save "" \
        --appendonly no --dir "$W"
    sleep 0.3
    start "$GW_CPUS" "$OUT/gateway.log" "$b/pirq-gateway" --redis "redis://127.0.0.1:$REDIS_PORT" \
        --prefix gwcpu --listen "127.0.0.1:$GW_PORT"
    start "$WORKER_CPUS" "$OUT/worker.log" "$(bin "$b" pirq-worker)" \
        --redis "redis://127.0.0.1:$REDIS_PORT" --prefix gwcpu --db "$W/db.pirdb" --backend cpu \
        --threads "$WORKER_THREADS" --consumer cpu0
    local redis=${PIDS[0]} gw=${PIDS[1]}
    for _ in $(seq 200); do
        get "$GW_PORT" /v1/info "$W/info.json" 2>/dev/null &&
            grep -q '"workers":1[,}]' "$W/info.json" && break
        sleep 0.1
    done
    taskset -c "$CLIENT_CPUS" "$(bin "$b" pirq)" bench load --quiet --duration "$DUR" --warmup "$WARM" \
        --json "$OUT/$name.json" --party-a "http://127.0.0.1:$GW_PORT" \
        --party-b "http://127.0.0.1:$GW_PORT" --allow-same-party --verify "$W/db.pirdb" \
        --bincode --keys 1 --concurrency "$CLIENTS" 2>"$OUT/$name.txt" &
    PIDS+=("$!") # stopped with the servers on Ctrl-C, not left to run out its time
    local load=$! q0 q1 u0 s0 u1 s1 r0 r1
    sleep "$WARM"
    q0=$(accepted)
    read -r u0 s0 < <(cpu_ticks "$gw")
    r0=$(cpu_ticks "$redis" | awk '{ print $1 + $2 }')
    if [ "$probe" = 1 ] && [ "${PERF:-0}" = 1 ]; then
        perf record -g --call-graph dwarf,16384 -F 1999 -p "$gw" -o "$OUT/$name.perf.data" \
            -- sleep "$DUR" >"$OUT/$name.perf.log" 2>&1
    elif [ "$probe" = 1 ] && [ -n "${PROBE:-}" ]; then
        (cd "$OUT" && eval "${PROBE//\{pid\}/$gw} -- sleep $DUR") >"$OUT/$name.probe.log" 2>&1
    else
        sleep "$DUR"
    fi
    q1=$(accepted)
    read -r u1 s1 < <(cpu_ticks "$gw")
    r1=$(cpu_ticks "$redis" | awk '{ print $1 + $2 }')
    wait "$load" || true
    awk -v u="$((u1 - u0))" -v s="$((s1 - s0))" -v r="$((r1 - r0))" -v hz="$HZ" \
        -v q="$((q1 - q0))" -v b="$b" -v name="$name" -v dur="$DUR" -v res="$OUT/results" 'BEGIN {
            t = u + s; us = q ? 1e6 / hz / q : 0
            printf "%s: %d queries (%.0f/s), gateway CPU %.2f s = %.1f us/query (user %.1f, system %.1f); redis %.1f us/query\n",
                   name, q, q / dur, t / hz, t * us, u * us, s * us, r * us
            printf "%s %.1f\n", b, t * us >> res }'
    grep '^|' "$OUT/$name.txt" | tail -n 1 || true
    stop_all
    sleep 0.5
}

for run in $(seq "$RUNS"); do
    for i in "${!DIRS[@]}"; do
        one_run "${DIRS[$i]}" "run$run-bin$i" "$([ "$run" = 1 ] && echo 1 || echo 0)"
    done
done
echo "median gateway CPU per query:"
for i in "${!DIRS[@]}"; do
    awk -v b="${DIRS[$i]}" '$1 == b { print $2 }' "$OUT/results" | sort -n |
        awk -v b="${DIRS[$i]}" -v i="$i" '{ v[NR] = $1 } END {
            printf "  bin%d %s: %.1f us (runs: %d, min %.1f, max %.1f)\n", i, b,
                   NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, NR, v[1], v[NR] }'
done
echo "logs and reports: $OUT"
