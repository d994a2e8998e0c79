#!/usr/bin/env bash
# The queue's own ceiling (issue 29): how many keys/s one party's Redis carries when the scanner
# is out of the way, on one Redis and on a Redis Cluster of N primaries. One party: its Redis (one
# redis-server, or a cluster of N primaries each pinned to its own core), gateways, CPU workers
# over a tiny database (PAGES pages of 4 KiB: a pass costs the worker almost nothing), one
# closed-loop `pirq bench load` per gateway with both key halves sent to the party
# (--allow-same-party: a benchmark of cost, every answer verified; the party answers both halves
# of every key, so its Redis does the work of two party queries per key counted).
#
# On a cluster the party's queue has P = N x PARTS_PER_PRIMARY partitions (`--partitions P`) and
# the slot of partition p's hash tag is placed on primary p mod N (scripts/redis-cluster.sh
# --place-tags), so every primary carries the same number of partitions; primary 0 also holds the
# party's own keys ({qs}: registration, heartbeats). Per run: keys/s answered; each primary's CPU
# (utime + stime from /proc over the measured seconds) as % of its core, and the busiest; Redis
# CPU per key summed over the primaries; `INFO commandstats` (reset when the measured seconds
# start) summed over the primaries, per key; the gateways', workers' and load clients' CPU per
# key and as % of the cores they were given, and which of these is the limit. Results:
# docs/bench/queue-scale.md.
#
#   ops/bench/queue-scale.sh build [DIR]   # here: release binaries (CPU workers: no CUDA needed),
#                                          # redis-server/redis-cli, scripts/redis-cluster.sh into
#                                          # DIR (default .gpu/queue-scale), stripped; the host
#                                          # needs no cargo, no network
#   ops/bench/queue-scale.sh run [DIR]     # on the measuring host (16 cores), from DIR
#
# `run` writes at most 5 files under OUT: results.txt (every run's lines, as printed),
# results.json, summary.md (a Markdown table and the scaling per doubling), both rewritten after
# each run, logs-<run>.tar.gz only when a process died or an answer was wrong (then it exits
# non-zero), and logs.tar.gz with KEEP_LOGS=1. Every process it started is stopped on exit, also on failure or Ctrl-C.
#
# Environment for `run`:
#   PRIMARIES        Redis primaries, a list run in turn (default "1 2 4 8"); 1 is one plain
#                    redis-server (redis://), unless ONE_AS_CLUSTER=1 (a one-node cluster)
#   PARTS_PER_PRIMARY  partitions per primary (default 1; P = N x this; 1 Redis: P = this)
#   REPLICAS         replicas per primary on a cluster (default 0; each on the primary's core)
#   DUR / WARM       measured and warm-up seconds per run (default 20 / 5)
#   RUNS             runs per configuration (default 2)
#   PAGES            database pages (default 256), KEYS keys per query (default 1)
#   WORKER_THREADS   scanner threads per worker (default 1)
# The core budget, per N, from C = $(nproc): N cores for Redis (0 … N-1), the other C - N split
# GATEWAY_SHARE % to gateways, WORKER_SHARE % to workers, the rest to load clients (defaults
# 40 / 40; each at least 1 core), as CPU lists for taskset. Set any of REDIS_CPUS (primary i on the
# (i mod length)-th CPU), GATEWAY_CPUS, WORKER_CPUS, CLIENT_CPUS to use that list for every N.
#   EXTRA            more runs, once each after the others: N:GATEWAY_SHARE:WORKER_SHARE … (e.g.
#                    "8:60:25", the gateways' share raised at 8 primaries; default none)
#   GATEWAYS         gateway processes (default: one per gateway core)
#   WORKERS          worker processes (default: one per worker core)
#   PIN_EACH         1 (default): gateway i and worker i each on the (i mod count)-th core of
#                    their group's list, so each runs one runtime thread (threads that hand
#                    every request and reply between them cost a gateway about 40 % more CPU a
#                    query: docs/bench/load.md, "Gateway CPU per query"); 0: each on the whole list
#   CLIENTS          closed-loop clients per gateway (default: 512 x N in all, split over the
#                    gateways), one load process per gateway, sharing CLIENT_CPUS
#   OUT              results folder (default .gpu/out/queue-scale)
#   KEEP_LOGS        1: every process's log of every run packed into OUT/logs.tar.gz at the end
set -euo pipefail
# shellcheck source=ops/bench/lib/procs.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/procs.sh"
cd "$(dirname "$0")/../.."
D=${2:-.gpu/queue-scale}

case "${1:-}" in
build)
    # shellcheck source=scripts/lib/gpu-bundle.sh
    source scripts/lib/gpu-bundle.sh
    cargo build --release -p pirq-gateway -p pirq-worker -p pirq-cli \
        --bin pirq-gateway --bin pirq-worker --bin pirq
    rm -rf "$D" && mkdir -p "$D"
    cp target/release/pirq-gateway target/release/pirq-worker target/release/pirq "$D/"
    copy_redis_server "$D"
    cp "$0" "$D/queue-scale.sh"
    mkdir -p "$D/lib" && cp ops/bench/lib/procs.sh "$D/lib/"
    cp scripts/redis-cluster.sh "$D/redis-cluster.sh"
    git rev-parse --short HEAD >"$D/COMMIT"
    git diff --quiet HEAD || echo "(+ uncommitted changes)" >>"$D/COMMIT"
    strip "$D"/pirq* "$D/redis-server" "$D/redis-cli" 2>/dev/null || true
    du -sh "$D"
    exit 0
    ;;
run) ;;
*)
    echo "usage: $0 build | run [DIR]" >&2
    exit 2
    ;;
esac

B=$(realpath "$D")
export PATH="$B:$PATH" LD_LIBRARY_PATH="$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The cluster script: the bundle's copy on the host, the repository's here.
CLUSTER_SH=$B/redis-cluster.sh
[ -x "$CLUSTER_SH" ] || CLUSTER_SH=$PWD/scripts/redis-cluster.sh
OUT=${OUT:-.gpu/out/queue-scale}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
rm -f "$OUT/results.txt" "$OUT/results.json" "$OUT/summary.md" "$OUT"/logs-*.tar.gz
PRIMARIES=${PRIMARIES:-1 2 4 8}
PARTS_PER_PRIMARY=${PARTS_PER_PRIMARY:-1}
ONE_AS_CLUSTER=${ONE_AS_CLUSTER:-0}
REPLICAS=${REPLICAS:-0}
WORKER_THREADS=${WORKER_THREADS:-1}
KEYS=${KEYS:-1}
DUR=${DUR:-20}
WARM=${WARM:-5}
RUNS=${RUNS:-2}
PAGES=${PAGES:-256}
PIN_EACH=${PIN_EACH:-1}
GATEWAY_SHARE=${GATEWAY_SHARE:-40}
WORKER_SHARE=${WORKER_SHARE:-40}
NCPU=$(nproc)
REDIS_PORT=7401
GATEWAY_PORT=8401
ADMIN_PORT=9401
HZ=$(getconf CLK_TCK)
REDIS_PID=
CLUSTER_DIR=
# stop_all: the party's processes first (a worker writes what it holds before it exits), then
# its Redis
stop_all() {
    stop_pids
    if [ -n "$REDIS_PID" ]; then
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
        REDIS_PID=
    fi
    if [ -n "$CLUSTER_DIR" ]; then
        "$CLUSTER_SH" stop --port "$REDIS_PORT" --dir "$CLUSTER_DIR" || true
        CLUSTER_DIR=
    fi
}
# Thousands of client connections per load process and per gateway.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# fail RUN MESSAGE: says what failed, packs the run's logs into $OUT and exits non-zero (the
# EXIT trap stops everything)
fail() {
    echo "FAILED: $1: $2" | tee -a "$OUT/results.txt" >&2
    tar -czf "$OUT/logs-$1.tar.gz" -C "$W" "logs-$1" 2>/dev/null || true
    echo "logs: $OUT/logs-$1.tar.gz" >&2
    exit 1
}

# accepted GATEWAYS: DPF keys accepted so far by the gateways, from their /metrics
accepted() {
    local t=0 i
    for ((i = 0; i < $1; i++)); do
        get $((ADMIN_PORT + i)) /metrics "$W/metrics.txt"
        t=$((t + $(awk '/^pirq_gateway_keys_accepted_total[{ ]/ {s += $NF} END {print s + 0}' "$W/metrics.txt")))
    done
    echo "$t"
}

# ticks PID...: user + system CPU of the processes so far, in clock ticks
ticks() {
    local t=0 p
    for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
    echo "$t"
}

# alive RUN NAME=PID...: fails the run if any of the processes has exited
alive() {
    local run=$1 np
    shift
    for np in "$@"; do
        if ! kill -0 "${np#*=}" 2>/dev/null; then
            local log="$W/logs-$run/${np%=*}.log"
            [ -f "$log" ] && tail -n 20 "$log" >&2
            fail "$run" "${np%=*} (pid ${np#*=}) exited"
        fi
    done
}

# watch RUN SECONDS NAME=PID...: sleeps SECONDS, checking every second that the processes live
watch() {
    local run=$1 secs=$2 i
    shift 2
    for ((i = 0; i < secs; i++)); do
        sleep 1
        alive "$run" "$@"
    done
}

# cpu_range FROM COUNT: a taskset list of COUNT cores from FROM, wrapped over the cores there are
cpu_range() {
    local from=$1 count=$2 i list=()
    for ((i = 0; i < count; i++)); do list+=($(((from + i) % NCPU))); done
    local IFS=,
    echo "${list[*]}"
}

# cpu_count LIST: the CPUs a taskset list names
cpu_count() {
    local n=0 part
    for part in ${1//,/ }; do
        if [[ "$part" == *-* ]]; then n=$((n + ${part#*-} - ${part%-*} + 1)); else n=$((n + 1)); fi
    done
    echo "$n"
}

# nth_cpu LIST I: the (I mod count)-th CPU of a taskset list
nth_cpu() {
    local all=() part
    for part in ${1//,/ }; do
        if [[ "$part" == *-* ]]; then
            mapfile -t -O "${#all[@]}" all < <(seq "${part%-*}" "${part#*-}")
        else
            all+=("$part")
        fi
    done
    echo "${all[$(($2 % ${#all[@]}))]}"
}

# plan N: the CPU lists of a run with N primaries, into REDIS_L GATEWAY_L WORKER_L CLIENT_L
plan() {
    local n=$1 rest g w c
    rest=$((NCPU - n))
    [ "$rest" -ge 3 ] || rest=3
    g=$(((rest * GATEWAY_SHARE + 50) / 100))
    w=$(((rest * WORKER_SHARE + 50) / 100))
    [ "$g" -ge 1 ] || g=1
    [ "$w" -ge 1 ] || w=1
    c=$((rest - g - w))
    [ "$c" -ge 1 ] || c=1
    REDIS_L=${REDIS_CPUS:-$(cpu_range 0 "$n")}
    GATEWAY_L=${GATEWAY_CPUS:-$(cpu_range "$n" "$g")}
    WORKER_L=${WORKER_CPUS:-$(cpu_range $((n + g)) "$w")}
    CLIENT_L=${CLIENT_CPUS:-$(cpu_range $((n + g + w)) "$c")}
}

# one_run NAME PRIMARIES: one measured run; its raw figures go to $W/runs/NAME, its lines to
# stdout and $OUT/results.txt, and the summary files are rewritten
one_run() {
    local name=$1 n=$2 url parts
    local R=$W/runs/$name L=$W/logs-$name
    mkdir -p "$R" "$L"
    plan "$n"
    parts=$((n * PARTS_PER_PRIMARY))
    local gateways=${GATEWAYS:-$(cpu_count "$GATEWAY_L")}
    local workers=${WORKERS:-$(cpu_count "$WORKER_L")}
    local clients=${CLIENTS:-$(((512 * n + gateways - 1) / gateways))}
    local primary_pids=() primary_ports=() placement=()
    if [ "$n" = 1 ] && [ "$ONE_AS_CLUSTER" != 1 ]; then
        taskset -c "$REDIS_L" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 \
            --save "" --appendonly no --dir "$W" >"$L/redis.log" 2>&1 &
        REDIS_PID=$!
        primary_pids+=("$REDIS_PID")
        primary_ports+=("$REDIS_PORT")
        for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
        url="redis://127.0.0.1:$REDIS_PORT"
        for ((p = 0; p < parts; p++)); do placement+=(0); done
    else
        # Partition 0's tag is {qs}, partition p's {qs:p} (docs/redis.md, Partitions).
        local tags=(qs) p
        for ((p = 1; p < parts; p++)); do tags+=("qs:$p"); done
        CLUSTER_DIR=$W/cluster
        url=$("$CLUSTER_SH" start --primaries "$n" --replicas "$REPLICAS" --port "$REDIS_PORT" \
            --dir "$CLUSTER_DIR" --place-tags "${tags[*]}" --cpus "$REDIS_L" 2>"$L/cluster.log") ||
            { cat "$L/cluster.log" >&2; fail "$name" "the cluster did not start"; }
        # Shared slots, unpinned nodes: said in the results too.
        sed "s/^/$name: /" "$L/cluster.log" | tee -a "$OUT/results.txt" >&2
        local i
        for ((i = 0; i < n; i++)); do
            primary_ports+=($((REDIS_PORT + i)))
            primary_pids+=("$(cat "$CLUSTER_DIR/node-$((REDIS_PORT + i))/redis.pid")")
        done
        # Which primary serves each partition's slot (CLUSTER NODES: id addr flags … slots).
        local nodes slot
        nodes=$(redis-cli -p "$REDIS_PORT" cluster nodes)
        for tag in "${tags[@]}"; do
            slot=$(redis-cli -p "$REDIS_PORT" cluster keyslot "{$tag}")
            placement+=("$(echo "$nodes" | awk -v s="$slot" -v base="$REDIS_PORT" '
                { for (i = 9; i <= NF; i++) { split($i, r, "-"); if (r[2] == "") r[2] = r[1]
                  if (s + 0 >= r[1] + 0 && s + 0 <= r[2] + 0) { split($2, a, "[:@]"); print a[2] - base } } }')")
        done
    fi
    local named=() gws=() wks=() i
    for ((i = 0; i < n; i++)); do named+=("redis$i=${primary_pids[$i]}"); done
    for ((i = 0; i < gateways; i++)); do
        local on=$GATEWAY_L
        [ "$PIN_EACH" != 1 ] || on=$(nth_cpu "$GATEWAY_L" "$i")
        start "$on" "$L/gateway$i.log" pirq-gateway --redis "$url" --prefix qs \
            --partitions "$parts" --listen "127.0.0.1:$((GATEWAY_PORT + i))" \
            --admin-listen "127.0.0.1:$((ADMIN_PORT + i))"
        gws+=("${PIDS[-1]}")
        named+=("gateway$i=${PIDS[-1]}")
    done
    for ((i = 0; i < workers; i++)); do
        local on=$WORKER_L
        [ "$PIN_EACH" != 1 ] || on=$(nth_cpu "$WORKER_L" "$i")
        start "$on" "$L/worker$i.log" pirq-worker --redis "$url" --prefix qs \
            --partitions "$parts" --db "$W/db.pirdb" --backend cpu --threads "$WORKER_THREADS" \
            --consumer "cpu$i"
        wks+=("${PIDS[-1]}")
        named+=("worker$i=${PIDS[-1]}")
    done
    # Until the party's /v1/info lists every worker.
    local ready=
    for _ in $(seq 300); do
        alive "$name" "${named[@]}"
        if get "$GATEWAY_PORT" /v1/info "$W/info.json" 2>/dev/null &&
            grep -q "\"workers\":${workers}[,}]" "$W/info.json"; then
            ready=1
            break
        fi
        sleep 0.2
    done
    [ -n "$ready" ] || fail "$name" "the $workers workers did not all register within 60 s"
    local loads=() busy=("${named[@]}")
    for ((i = 0; i < gateways; i++)); do
        local gw="http://127.0.0.1:$((GATEWAY_PORT + i))"
        # Measuring 2 s longer than the script does keeps the clients alive (their CPU readable)
        # until the script's measured seconds end.
        start "$CLIENT_L" "$L/load$i.log" pirq bench load --quiet --duration $((DUR + 2)) \
            --warmup "$WARM" --json "$R/load$i.json" --party-a "$gw" --party-b "$gw" \
            --allow-same-party --verify "$W/db.pirdb" --bincode --keys "$KEYS" \
            --concurrency "$clients"
        loads+=("${PIDS[-1]}")
        busy+=("load$i=${PIDS[-1]}")
    done
    watch "$name" "$WARM" "${busy[@]}"
    for port in "${primary_ports[@]}"; do redis-cli -p "$port" CONFIG RESETSTAT >/dev/null; done
    local r0=() g0 w0 c0 a0 r1=() g1 w1 c1 a1 p
    a0=$(accepted "$gateways")
    for p in "${primary_pids[@]}"; do r0+=("$(ticks "$p")"); done
    g0=$(ticks "${gws[@]}")
    w0=$(ticks "${wks[@]}")
    c0=$(ticks "${loads[@]}")
    watch "$name" "$DUR" "${busy[@]}"
    for p in "${primary_pids[@]}"; do r1+=("$(ticks "$p")"); done
    g1=$(ticks "${gws[@]}")
    w1=$(ticks "${wks[@]}")
    c1=$(ticks "${loads[@]}")
    a1=$(accepted "$gateways")
    for ((i = 0; i < n; i++)); do
        redis-cli -p "${primary_ports[$i]}" INFO commandstats >"$R/commandstats$i.txt"
    done
    # The gateways' answers by status and their refusals by cap: what a 429 or 503 was.
    for ((i = 0; i < gateways; i++)); do get $((ADMIN_PORT + i)) /metrics "$R/metrics$i.txt"; done
    for ((i = 0; i < gateways; i++)); do
        wait "${loads[$i]}" || fail "$name" "load client $i failed: $(tail -n 3 "$L/load$i.log")"
    done
    alive "$name" "${named[@]}"
    local redis_ticks=()
    for ((i = 0; i < n; i++)); do redis_ticks+=($((r1[i] - r0[i]))); done
    cat >"$R/meta" <<META
name=$name
primaries=$n
cluster=$([ "$n" = 1 ] && [ "$ONE_AS_CLUSTER" != 1 ] && echo 0 || echo 1)
partitions=$parts
placement=${placement[*]}
gateways=$gateways
workers=$workers
worker_threads=$WORKER_THREADS
clients_per_gateway=$clients
redis_cpus=$REDIS_L
gateway_cpus=$GATEWAY_L
worker_cpus=$WORKER_L
client_cpus=$CLIENT_L
gateway_cores=$(cpu_count "$GATEWAY_L")
worker_cores=$(cpu_count "$WORKER_L")
client_cores=$(cpu_count "$CLIENT_L")
dur=$DUR
hz=$HZ
redis_ticks=${redis_ticks[*]}
gateway_ticks=$((g1 - g0))
worker_ticks=$((w1 - w0))
client_ticks=$((c1 - c0))
accepted_party_keys=$((a1 - a0))
META
    stop_all
    summarize "$W/runs" "$OUT" | tee -a "$OUT/results.txt"
    if grep -q '^WRONG' "$OUT/results.txt"; then fail "$name" "wrong answers (see results.txt)"; fi
    sleep 0.5
}

# summarize RUNS_DIR OUT: the last run's lines on stdout; results.json and summary.md rewritten
# from every run so far
summarize() {
    python3 - "$1" "$2" <<'PY'
import json, os, re, statistics, sys

runs_dir, out = sys.argv[1], sys.argv[2]

def meta(path):
    m = {}
    for line in open(path):
        k, _, v = line.rstrip("\n").partition("=")
        m[k] = v
    return m

def commandstats(path):
    # cmdstat_hset:calls=8,usec=23,usec_per_call=2.88,rejected_calls=0,failed_calls=0
    stats = {}
    for line in open(path):
        mt = re.match(r"cmdstat_([^:]+):calls=(\d+),usec=(\d+)", line)
        if mt:
            stats[mt.group(1)] = (int(mt.group(2)), int(mt.group(3)))
    return stats

def one(d):
    m = meta(os.path.join(d, "meta"))
    n, dur, hz = int(m["primaries"]), float(m["dur"]), float(m["hz"])
    loads = [json.load(open(os.path.join(d, f))) for f in sorted(os.listdir(d))
             if f.startswith("load") and f.endswith(".json")]
    keys_s = sum(l["achieved_keys_per_s"] for l in loads)
    # The per-key figures divide by the keys the gateways accepted over the same seconds as the
    # CPU readings (both halves of a key reach the party: two party keys a key); in a closed loop
    # it matches the keys answered, which the clients count over their own seconds.
    keys = int(m["accepted_party_keys"]) / 2
    window_keys_s = keys / dur
    errors = {}
    for l in loads:
        for k, v in l["errors"].items():
            errors[k] = errors.get(k, 0) + v
    per_key = lambda ticks: ticks / hz / keys * 1e6 if keys else 0.0
    pct = lambda ticks, cores: 100.0 * ticks / hz / dur / cores
    redis_ticks = [int(t) for t in m["redis_ticks"].split()]
    primary_pct = [pct(t, 1) for t in redis_ticks]
    cmd = {}
    for i in range(n):
        for c, (calls, usec) in commandstats(os.path.join(d, f"commandstats{i}.txt")).items():
            a = cmd.setdefault(c, [0, 0])
            a[0] += calls
            a[1] += usec
    groups = {}
    for g in ("gateway", "worker", "client"):
        t, cores = int(m[f"{g}_ticks"]), int(m[f"{g}_cores"])
        groups[g + "s"] = {"cores": cores, "cpus": m[f"{g}_cpus"], "us_per_key": per_key(t),
                           "pct_of_cores": pct(t, cores),
                           "keys_per_s_per_core": (1e6 / per_key(t)) if t and keys else None}
    # Refused answers by route and status, and refusals by cap, over the whole run.
    refused = {}
    for f in sorted(os.listdir(d)):
        if not (f.startswith("metrics") and f.endswith(".txt")):
            continue
        for line in open(os.path.join(d, f)):
            mt = re.match(r'pirq_gateway_http_requests_total\{(.*)\} (\S+)', line)
            mc = re.match(r'pirq_gateway_refusals_total\{cap="([^"]*)"\} (\S+)', line)
            if mt:
                labels = dict(re.findall(r'(\w+)="([^"]*)"', mt.group(1)))
                if labels.get("status", "200") >= "400":
                    k = f'{labels.get("method", "")} {labels.get("route", "")} {labels["status"]}'
                    refused[k] = refused.get(k, 0) + int(float(mt.group(2)))
            elif mc and float(mc.group(2)) > 0:
                k = f"cap {mc.group(1)}"
                refused[k] = refused.get(k, 0) + int(float(mc.group(2)))
    placement = [int(p) for p in m["placement"].split()]
    parts_per_primary = [placement.count(i) for i in range(n)]
    # The limit: whichever of the busiest primary's core, the gateways', the workers' or the
    # clients' cores is the most used.
    use = {"redis": max(primary_pct), "gateways": groups["gateways"]["pct_of_cores"],
           "workers": groups["workers"]["pct_of_cores"], "clients": groups["clients"]["pct_of_cores"]}
    bound = max(use, key=use.get)
    lat = sorted(l["latency_ms"]["p50"] for l in loads)
    return {
        "name": m["name"], "primaries": n, "cluster": m["cluster"] == "1",
        "partitions": int(m["partitions"]), "partitions_per_primary": parts_per_primary,
        "gateways": int(m["gateways"]), "workers": int(m["workers"]),
        "worker_threads": int(m["worker_threads"]),
        "clients_per_gateway": int(m["clients_per_gateway"]), "redis_cpus": m["redis_cpus"],
        "duration_s": dur, "keys_per_s": round(keys_s), "accepted_keys_per_s": round(window_keys_s),
        "errors": errors,
        "wrong": sum(v for k, v in errors.items() if k.startswith("wrong")),
        "refused_429": sum(l["refused_429"] for l in loads),
        "refused_503": sum(l["refused_503"] for l in loads),
        "gateway_refusals": refused,
        "latency_ms_p50": lat[len(lat) // 2] if lat else None,
        "latency_ms_p99": max(l["latency_ms"]["p99"] for l in loads) if loads else None,
        "redis": {"primary_pct": [round(p, 1) for p in primary_pct],
                  "busiest_pct": round(max(primary_pct), 1),
                  "us_per_key": per_key(sum(redis_ticks))},
        "commandstats_per_key": {c: {"calls": a[0] / keys, "us": a[1] / keys}
                                 for c, a in sorted(cmd.items(), key=lambda x: -x[1][1])} if keys else {},
        "cpu": groups,
        "bound": bound, "use_pct": {k: round(v, 1) for k, v in use.items()},
    }

done = [d for d in os.listdir(runs_dir) if os.path.exists(os.path.join(runs_dir, d, "meta"))]
runs = [one(os.path.join(runs_dir, d))
        for d in sorted(done, key=lambda d: os.path.getmtime(os.path.join(runs_dir, d, "meta")))]
json.dump({"runs": runs}, open(os.path.join(out, "results.json"), "w"), indent=1)

r = runs[-1]
g, w, c = r["cpu"]["gateways"], r["cpu"]["workers"], r["cpu"]["clients"]
print(f"{r['name']}: primaries {r['primaries']} ({'cluster' if r['cluster'] else 'one Redis'}), "
      f"partitions {r['partitions']} ({'/'.join(map(str, r['partitions_per_primary']))} per primary), "
      f"{r['keys_per_s']} keys/s answered ({r['accepted_keys_per_s']} accepted over the CPU readings' "
      f"seconds), p50 {r['latency_ms_p50']} ms; "
      f"Redis {r['redis']['us_per_key']:.1f} us/key summed, primaries at "
      f"{', '.join(f'{p:.0f}' for p in r['redis']['primary_pct'])} % (busiest {r['redis']['busiest_pct']:.0f} %); "
      f"gateways {g['us_per_key']:.1f} us/key ({g['pct_of_cores']:.0f} % of {g['cores']} cores), "
      f"workers {w['us_per_key']:.1f} us/key ({w['pct_of_cores']:.0f} % of {w['cores']}), "
      f"clients {c['us_per_key']:.1f} us/key ({c['pct_of_cores']:.0f} % of {c['cores']}); "
      f"bound: {r['bound']} ({r['use_pct'][r['bound']]:.0f} %); errors {sum(r['errors'].values())}, refused 429/503 "
      f"{r['refused_429']}/{r['refused_503']}")
for cname, v in list(r["commandstats_per_key"].items())[:12]:
    print(f"    {cname:<14} {v['calls']:8.2f} calls/key {v['us']:7.2f} us/key")
if r["gateway_refusals"]:
    print(f"    gateways' refusals: {r['gateway_refusals']}")
if r["wrong"]:
    print(f"WRONG answers in {r['name']}: {r['errors']}")

# summary.md: one row a run, then the mean per N and its ratio per doubling.
rows = ["| run | primaries | partitions (per primary) | gateways / workers / clients (cores) | keys/s | p50 ms | "
        "primaries' CPU % (busiest) | Redis µs/key (sum) | gateways µs/key (% of cores) | "
        "workers µs/key (%) | clients µs/key (%) | bound | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for r in runs:
    g, w, c = r["cpu"]["gateways"], r["cpu"]["workers"], r["cpu"]["clients"]
    rows.append(
        f"| {r['name']} | {r['primaries']}{'' if r['cluster'] else ' (one Redis)'} | {r['partitions']} "
        f"({'/'.join(map(str, r['partitions_per_primary']))}) | {r['gateways']} ({g['cores']}) / "
        f"{r['workers']} ({w['cores']}) / {r['clients_per_gateway']}×{r['gateways']} ({c['cores']}) | "
        f"{r['keys_per_s']:,} | {r['latency_ms_p50']} | "
        f"{' '.join(f'{p:.0f}' for p in r['redis']['primary_pct'])} ({r['redis']['busiest_pct']:.0f}) | "
        f"{r['redis']['us_per_key']:.1f} | {g['us_per_key']:.1f} ({g['pct_of_cores']:.0f}) | "
        f"{w['us_per_key']:.1f} ({w['pct_of_cores']:.0f}) | {c['us_per_key']:.1f} ({c['pct_of_cores']:.0f}) | "
        f"{r['bound']} ({r['use_pct'][r['bound']]:.0f} %) | {sum(r['errors'].values())} |")
by_n = {}
for r in runs:
    if re.fullmatch(r"p\d+-run\d+", r["name"]):  # the EXTRA runs stand alone, in the table above
        by_n.setdefault(r["primaries"], []).append(r)
rows += ["", "| primaries | runs | keys/s (mean) | × the previous size | gateways' capacity, keys/s "
         "(their cores × 10⁶ / µs a key) | Redis µs/key summed | commands/key summed |",
         "|---|---|---|---|---|---|---|"]
prev = None
for n in sorted(by_n):
    rs = by_n[n]
    mean = statistics.mean(r["keys_per_s"] for r in rs)
    gw = [r["cpu"]["gateways"] for r in rs if r["cpu"]["gateways"]["keys_per_s_per_core"]]
    gw_cap = statistics.mean(g["cores"] * g["keys_per_s_per_core"] for g in gw) if gw else 0
    calls = statistics.mean(sum(v["calls"] for c, v in r["commandstats_per_key"].items()
                                if c not in ("evalsha", "eval", "multi", "exec")) for r in rs)
    ratio = f"{mean / prev:.2f}×" if prev else "—"
    rows.append(f"| {n} | {len(rs)} | {mean:,.0f} | {ratio} | {gw_cap:,.0f} | "
                f"{statistics.mean(r['redis']['us_per_key'] for r in rs):.1f} | {calls:.1f} |")
    prev = mean
rows += ["", "commands/key counts every command once (those run inside scripts and MULTI blocks "
         "included; `evalsha`, `multi` and `exec` themselves left out). bound: the most used of the busiest "
         "primary's core, the gateways', the workers' and the clients' cores."]
open(os.path.join(out, "summary.md"), "w").write("\n".join(rows) + "\n")
PY
}

{
    echo "machine: $NCPU cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
    echo "binaries: $(tr '\n' ' ' <"$B/COMMIT")"
    echo "redis: $(redis-server --version)"
    echo "PRIMARIES=\"$PRIMARIES\" EXTRA=\"${EXTRA:-}\" PARTS_PER_PRIMARY=$PARTS_PER_PRIMARY REPLICAS=$REPLICAS PIN_EACH=$PIN_EACH DUR=$DUR WARM=$WARM RUNS=$RUNS PAGES=$PAGES KEYS=$KEYS WORKER_THREADS=$WORKER_THREADS"
} | tee "$OUT/results.txt"
pirq db gen --pages "$PAGES" --page-size 4096 --seed 11 --out "$W/db.pirdb" 2>&1 | tail -n 1
mkdir -p "$W/runs"
for primaries in $PRIMARIES; do
    for run in $(seq "$RUNS"); do
        one_run "p$primaries-run$run" "$primaries"
    done
done
# Then each EXTRA configuration N:GATEWAY_SHARE:WORKER_SHARE once (e.g. 8:60:25: more of the
# cores for gateways at 8 primaries: if keys/s rises, the gateways were the limit).
for extra in ${EXTRA:-}; do
    IFS=: read -r primaries GATEWAY_SHARE WORKER_SHARE <<<"$extra"
    one_run "p$primaries-gw$GATEWAY_SHARE-wk$WORKER_SHARE" "$primaries"
done
if [ "${KEEP_LOGS:-0}" = 1 ]; then
    (cd "$W" && tar -czf "$OUT/logs.tar.gz" logs-*)
    echo "logs: $OUT/logs.tar.gz"
fi
echo "results: $OUT/results.txt, $OUT/results.json, $OUT/summary.md"
