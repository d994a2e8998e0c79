#!/usr/bin/env bash
# The party's host path side by side (issue 35 item 5): two or more binary sets (earlier commits
# and the working tree) run alternately on one machine, path by path, so that whatever else the
# machine does weighs on each alike. One party: one redis-server, one gateway, CPU workers over
# a tiny database (PAGES pages of 4 KiB: a pass costs the worker almost nothing, as in
# queue-scale.sh), one closed-loop `pirq bench load` (the set's own) with both key halves sent to
# the party (--allow-same-party: a benchmark of cost, every answer verified; each key is two
# party queries there). Per run, over the measured seconds only: Redis commands per party query
# (`INFO commandstats`, reset when they start: script internals included), Redis CPU µs per party
# query (utime + stime of the redis-server from /proc), gateway CPU µs per party query, and the
# keys/s the clients had answered. Party queries are the gateway's
# `pirq_gateway_queries_accepted_total` over the same seconds. Results: docs/bench/host-path.md.
#
#   ops/bench/host-path.sh build [DIR] [COMMIT...]  # here: release binaries of each COMMIT
#                                  # (default 9eabb7d; e.g. "6d82951 9eabb7d") through a
#                                  # `git worktree`, and of the working tree, into DIR/set-*/
#                                  # (default .gpu/host-path), with redis-server, redis-cli and
#                                  # this script: a bundle that needs no cargo and no network
#   ops/bench/host-path.sh run [DIR]   # on the measuring host (or here), from DIR
#
# Paths (PATHS, default "wait poll sse kv shards partitions"): wait = `Prefer: wait` (the clients'
# default); poll = GET every 5 ms (`--poll`); sse = Server-Sent Events (`--sse`); kv = kv lookups
# (a kv database of the set's own `pirq kv build`, 2 keys a query); shards = the party in 2
# shards, a worker each; partitions = the queue in 4 partitions on the one Redis.
#
# Environment for `run`: RUNS (default 2: each set runs each path RUNS times, sets alternating),
# DUR / WARM (measured and warm-up seconds, default 10 / 3), CLIENTS (closed-loop clients,
# default 64), PAGES (default 512), WORKERS (worker processes, one thread each, default 2; the
# shards path runs one a shard), OUT (default .gpu/out/host-path). CPUs (taskset lists):
# REDIS_CPUS (default 0), GATEWAY_CPUS (default 1), WORKER_CPUS and CLIENT_CPUS (default: the
# other cores split in half); on fewer than 4 cores everything shares every core. The gateway
# runs its default thread count. REDIS_ARGS: extra redis-server arguments, one line split on
# spaces (e.g. "--io-threads 4 --io-threads-do-reads yes"; give REDIS_CPUS room for the threads).
#
# Redis CPU is read twice: the whole process (every thread) and its main thread alone
# (/proc/PID/task/PID/stat: the thread that runs every command, the one that binds; Redis' I/O
# threads, when enabled, take socket reads and writes off it). Each run's per-thread CPU is in
# OUT/runs/NAME/redis-threads.txt.
#
# A set's directory may hold GATEWAY_ARGS: flags its gateway gets (one line), and REDIS_ARGS:
# flags its redis-server gets (one line, after the environment's), to compare one binary set at
# two settings (the set's COMMIT file names the setting then; copy the set's directory).
#
# `run` writes OUT/results.txt (a line a run), OUT/summary.md (the median per set and path,
# rewritten after each run) and each run's logs and load report under OUT/runs/; it stops every
# process it started on exit, and exits non-zero when a process died or an answer was wrong.
set -euo pipefail
# shellcheck source=ops/bench/lib/procs.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/procs.sh"
cd "$(dirname "$0")/../.."
D=${2:-.gpu/host-path}

case "${1:-}" in
build)
    # shellcheck source=scripts/lib/gpu-bundle.sh
    source scripts/lib/gpu-bundle.sh
    shift 2 || shift $#
    commits=("$@")
    [ ${#commits[@]} -gt 0 ] || commits=(9eabb7d)
    rm -rf "$D" && mkdir -p "$D"
    bins=(--bin pirq-gateway --bin pirq-worker --bin pirq)
    pkgs=(-p pirq-gateway -p pirq-worker -p pirq-cli)
    # One target directory for every tree: the dependencies are built once, each tree's own
    # crates apart (cargo keys them by path).
    target=$PWD/target
    tmp=$(mktemp -d)
    # A failed build leaves no worktree registered behind.
    trap 'rm -rf "$tmp" "$W"; git worktree prune' EXIT
    i=0
    for c in "${commits[@]}"; do
        rev=$(git rev-parse --short "$c^{commit}")
        git worktree add --detach "$tmp/tree-$rev" "$rev" >/dev/null
        cargo build --release --manifest-path "$tmp/tree-$rev/Cargo.toml" --target-dir "$target" \
            "${pkgs[@]}" "${bins[@]}"
        mkdir -p "$D/set-$i-$rev"
        cp "$target"/release/{pirq-gateway,pirq-worker,pirq} "$D/set-$i-$rev/"
        echo "$rev" >"$D/set-$i-$rev/COMMIT"
        git worktree remove --force "$tmp/tree-$rev"
        i=$((i + 1))
    done
    cargo build --release "${pkgs[@]}" "${bins[@]}"
    head=$(git rev-parse --short HEAD)
    mkdir -p "$D/set-$i-tree"
    cp target/release/{pirq-gateway,pirq-worker,pirq} "$D/set-$i-tree/"
    echo "$head$(git diff --quiet HEAD || echo ' + uncommitted changes')" >"$D/set-$i-tree/COMMIT"
    copy_redis_server "$D"
    cp "$0" "$D/host-path.sh"
    mkdir -p "$D/lib" && cp ops/bench/lib/procs.sh "$D/lib/"
    strip "$D"/set-*/pirq* "$D/redis-server" "$D/redis-cli" 2>/dev/null || true
    du -sh "$D"
    exit 0
    ;;
run) ;;
*)
    echo "usage: $0 build [DIR] [COMMIT...] | run [DIR]" >&2
    exit 2
    ;;
esac

B=$(realpath "$D")
export PATH="$B:$PATH" LD_LIBRARY_PATH="$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SETS=()
for s in "$B"/set-*/; do SETS+=("${s%/}"); done
[ ${#SETS[@]} -gt 0 ] || { echo "no set-*/ in $B: run '$0 build' first" >&2; exit 2; }
PATHS=${PATHS:-wait poll sse kv shards partitions}
RUNS=${RUNS:-2}
DUR=${DUR:-10}
WARM=${WARM:-3}
CLIENTS=${CLIENTS:-64}
PAGES=${PAGES:-512}
WORKERS=${WORKERS:-2}
NCPU=$(nproc)
if [ "$NCPU" -ge 4 ]; then
    half=$(((NCPU - 2) / 2))
    REDIS_CPUS=${REDIS_CPUS:-0}
    GATEWAY_CPUS=${GATEWAY_CPUS:-1}
    WORKER_CPUS=${WORKER_CPUS:-2-$((1 + half))}
    CLIENT_CPUS=${CLIENT_CPUS:-$((2 + half))-$((NCPU - 1))}
else
    all=0-$((NCPU - 1))
    REDIS_CPUS=${REDIS_CPUS:-$all} GATEWAY_CPUS=${GATEWAY_CPUS:-$all}
    WORKER_CPUS=${WORKER_CPUS:-$all} CLIENT_CPUS=${CLIENT_CPUS:-$all}
fi
OUT=${OUT:-.gpu/out/host-path}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
rm -rf "$OUT/results.txt" "$OUT/results.jsonl" "$OUT/summary.md" "$OUT/runs"
mkdir -p "$OUT/runs"
REDIS_PORT=${REDIS_PORT:-7471}
GW_PORT=${GW_PORT:-8471}
HZ=$(getconf CLK_TCK)
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# accepted: the gateway's accepted party queries so far, summed over its lines (one a table
# since the counter has a `table` label; one line before)
accepted() {
    get "$GW_PORT" /metrics "$W/metrics.txt"
    awk '/^pirq_gateway_queries_accepted_total[{ ]/ {s += $NF} END {print s + 0}' "$W/metrics.txt"
}

# ticks PID: user + system CPU of a process so far, in clock ticks
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# main_ticks PID: the same for the process's main thread alone (its tid is its pid)
main_ticks() { awk '{print $14 + $15}' "/proc/$1/task/$1/stat"; }

# thread_ticks PID: a line per thread, "tid name ticks" (the name is /proc's comm, no spaces in
# Redis' thread names)
thread_ticks() {
    local t
    for t in /proc/"$1"/task/*; do
        echo "${t##*/} $(tr -d ' ' <"$t/comm") $(awk '{print $14 + $15}' "$t/stat" 2>/dev/null || echo 0)"
    done
}

# thread_report BEFORE AFTER QUERIES: per thread, the ticks between the two thread_ticks
# listings and the µs a party query they make
thread_report() {
    awk -v q="$3" -v hz="$HZ" 'NR == FNR {b[$1] = $3; next}
        {d = $3 - b[$1]; printf "%s %s %d ticks %.1f us/party query\n", $1, $2, d, q ? d * 1e6 / hz / q : 0}' "$1" "$2"
}

# commands: every call INFO commandstats counts since the reset, summed
commands() {
    redis-cli -p "$REDIS_PORT" info commandstats |
        awk -F'[:,=]' '/^cmdstat_/ {for (i = 2; i < NF; i++) if ($i == "calls") n += $(i + 1)} END {print n + 0}'
}

# alive LOG PID...: fails the run (showing LOG's tail) if a process has exited
alive() {
    local log=$1 p
    shift
    for p in "$@"; do
        if ! kill -0 "$p" 2>/dev/null; then
            tail -n 20 "$log" >&2
            echo "FAILED: a process exited (pid $p); logs: $log" | tee -a "$OUT/results.txt" >&2
            exit 1
        fi
    done
}

# databases SET: the page database and the kv database (records and file) of a set, made once
databases() {
    local s=$1
    [ -f "$W/$(basename "$s").db.pirdb" ] && return 0
    "$s/pirq" db gen --pages "$PAGES" --page-size 4096 --seed 11 --out "$W/$(basename "$s").db.pirdb" >/dev/null 2>&1
    "$s/pirq" kv gen --records 2000 --key-size 20 --value-size 32 --seed 5 \
        --out "$W/$(basename "$s").kv.jsonl" >/dev/null 2>&1
    # `kv gen` writes hex; builds since the text default (540057d) must be told so.
    local encodings=()
    ! "$s/pirq" kv build --help | grep -q -- --key-encoding ||
        encodings=(--key-encoding hex --value-encoding hex)
    "$s/pirq" kv build --records "$W/$(basename "$s").kv.jsonl" --key-size 20 --value-size 32 \
        "${encodings[@]}" --page-size 512 --load 0.9 --seed 7 \
        --out "$W/$(basename "$s").kv.pirdb" >"$W/kv-build.log" 2>&1 ||
        { cat "$W/kv-build.log" >&2; exit 1; }
}

# one_run SET PATH NAME: one measured run; a line to results.txt
one_run() {
    local s=$1 path=$2 name=$3 set
    set=$(basename "$s")
    local L=$OUT/runs/$name
    mkdir -p "$L"
    local db=$W/$set.db.pirdb parts=1 load_args=(--verify "$W/$set.db.pirdb")
    case "$path" in
    wait) ;;
    poll) load_args+=(--poll) ;;
    sse) load_args+=(--sse) ;;
    kv) db=$W/$set.kv.pirdb load_args=(--kv-records "$W/$set.kv.jsonl") ;;
    shards) ;;
    partitions) parts=4 ;;
    *) echo "unknown path $path" >&2; exit 2 ;;
    esac
    local redis_args=()
    read -ra redis_args <<<"${REDIS_ARGS:-} $(cat "$s/REDIS_ARGS" 2>/dev/null || true)"
    start "$REDIS_CPUS" "$L/redis.log" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 \
        --save "" --appendonly no --dir "$W" "${redis_args[@]}"
    local redis=${PIDS[-1]}
    for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
    local url=redis://127.0.0.1:$REDIS_PORT
    local gw_args=()
    [ ! -f "$s/GATEWAY_ARGS" ] || read -ra gw_args <"$s/GATEWAY_ARGS"
    start "$GATEWAY_CPUS" "$L/gateway.log" "$s/pirq-gateway" --redis "$url" --prefix hp \
        --partitions "$parts" --listen "127.0.0.1:$GW_PORT" "${gw_args[@]}"
    local gw=${PIDS[-1]} workers=$WORKERS i shard=()
    [ "$path" != shards ] || workers=2
    for ((i = 0; i < workers; i++)); do
        [ "$path" != shards ] || shard=(--shard "$i/2")
        start "$WORKER_CPUS" "$L/worker$i.log" "$s/pirq-worker" --redis "$url" --prefix hp \
            --partitions "$parts" --db "$db" --backend cpu --threads 1 --consumer "w$i" "${shard[@]}"
    done
    local ready=
    for _ in $(seq 300); do
        alive "$L" "${PIDS[@]}"
        if get "$GW_PORT" /v1/info "$W/info.json" 2>/dev/null && grep -q "\"workers\":${workers}[,}]" "$W/info.json"; then
            ready=1
            break
        fi
        sleep 0.2
    done
    [ -n "$ready" ] || { echo "FAILED: $name: workers did not register" | tee -a "$OUT/results.txt"; exit 1; }
    local gw_url=http://127.0.0.1:$GW_PORT
    # The load measures 1 s more than the script does: it is still busy when the readings end.
    start "$CLIENT_CPUS" "$L/load.log" "$s/pirq" bench load --quiet --duration $((DUR + 1)) \
        --warmup "$WARM" --json "$L/load.json" --party-a "$gw_url" --party-b "$gw_url" \
        --allow-same-party --bincode --keys 1 --concurrency "$CLIENTS" "${load_args[@]}"
    local load=${PIDS[-1]}
    sleep "$WARM"
    alive "$L" "${PIDS[@]}"
    redis-cli -p "$REDIS_PORT" config resetstat >/dev/null
    local q0 r0 m0 g0 q1 r1 m1 g1 c1
    thread_ticks "$redis" >"$W/threads0"
    q0=$(accepted) r0=$(ticks "$redis") m0=$(main_ticks "$redis") g0=$(ticks "$gw")
    sleep "$DUR"
    alive "$L" "${PIDS[@]}"
    q1=$(accepted) r1=$(ticks "$redis") m1=$(main_ticks "$redis") g1=$(ticks "$gw")
    c1=$(($(commands) - 1)) # less the reset
    thread_ticks "$redis" >"$W/threads1"
    thread_report "$W/threads0" "$W/threads1" "$((q1 - q0))" >"$L/redis-threads.txt"
    wait "$load" || { tail -n 20 "$L/load.log" >&2; echo "FAILED: $name: the load failed" | tee -a "$OUT/results.txt"; exit 1; }
    stop_all
    python3 - "$L/load.json" "$name" "$set" "$(cat "$s/COMMIT")" "$path" "$((q1 - q0))" "$c1" \
        "$((r1 - r0))" "$((g1 - g0))" "$HZ" "$OUT/results.txt" "$OUT/results.jsonl" \
        "$((m1 - m0))" "${redis_args[*]}" <<'PY'
import json, sys
load, name, set_, commit, path, q, calls, r, g, hz, txt, jsonl, m, redis_args = sys.argv[1:]
rep = json.load(open(load))
q, calls, r, g, hz, m = int(q), int(calls), int(r), int(g), int(hz), int(m)
errors = sum(rep.get("errors", {}).values())
row = {"name": name, "set": set_, "commit": commit, "path": path, "party_queries": q,
       "commands_per_query": calls / q if q else 0,
       "redis_us_per_query": r * 1e6 / hz / q if q else 0,
       "gateway_us_per_query": g * 1e6 / hz / q if q else 0,
       "keys_per_s": rep["achieved_keys_per_s"], "p50_ms": rep["latency_ms"]["p50"],
       "errors": errors, "redis_main_us_per_query": m * 1e6 / hz / q if q else 0,
       "redis_args": redis_args}
line = (f"{name}: {commit} {path}: {q} party queries, {row['commands_per_query']:.2f} commands, "
        f"Redis {row['redis_us_per_query']:.1f} us, gateway {row['gateway_us_per_query']:.1f} us a party "
        f"query; {row['keys_per_s']:.0f} keys/s (p50 {row['p50_ms']:.1f} ms), errors {errors}; "
        f"Redis main thread {row['redis_main_us_per_query']:.1f} us a party query")
print(line)
open(txt, "a").write(line + "\n")
open(jsonl, "a").write(json.dumps(row) + "\n")
if errors:
    sys.exit(f"{name}: the load saw {errors} errors: {rep['errors']}")
PY
    sleep 0.5
}

# summary: the median per set and path, as a Markdown table
summary() {
    python3 - "$OUT/results.jsonl" "$OUT/summary.md" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sets = list(dict.fromkeys(r["set"] for r in rows))
paths = list(dict.fromkeys(r["path"] for r in rows))
out = ["| path | binaries | runs | commands / party query | Redis µs / party query | "
       "gateway µs / party query | keys/s | p50 ms | Redis main thread µs / party query |",
       "|---|---|---|---|---|---|---|---|---|"]
for p in paths:
    for s in sets:
        rs = [r for r in rows if r["path"] == p and r["set"] == s]
        if not rs:
            continue
        m = lambda k: statistics.median(r.get(k, 0) for r in rs)
        out.append(f"| {p} | {rs[0]['commit']} | {len(rs)} | {m('commands_per_query'):.2f} | "
                   f"{m('redis_us_per_query'):.1f} | {m('gateway_us_per_query'):.1f} | "
                   f"{m('keys_per_s'):,.0f} | {m('p50_ms'):.1f} | "
                   f"{m('redis_main_us_per_query'):.1f} |")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
}

{
    echo "machine: $NCPU cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
    for s in "${SETS[@]}"; do echo "$(basename "$s"): $(cat "$s/COMMIT")"; done
    echo "redis: $(redis-server --version)"
    echo "PATHS=\"$PATHS\" RUNS=$RUNS DUR=$DUR WARM=$WARM CLIENTS=$CLIENTS PAGES=$PAGES WORKERS=$WORKERS" \
        "REDIS_ARGS=\"${REDIS_ARGS:-}\" REDIS_CPUS=$REDIS_CPUS GATEWAY_CPUS=$GATEWAY_CPUS WORKER_CPUS=$WORKER_CPUS CLIENT_CPUS=$CLIENT_CPUS"
} | tee "$OUT/results.txt"
for s in "${SETS[@]}"; do databases "$s"; done
for run in $(seq "$RUNS"); do
    for path in $PATHS; do
        for s in "${SETS[@]}"; do
            one_run "$s" "$path" "run$run-$path-$(basename "$s")"
        done
    done
done
summary
echo "results: $OUT/results.txt, $OUT/results.jsonl, $OUT/summary.md"
