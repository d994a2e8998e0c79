#!/usr/bin/env bash
# A lone query's fixed latency on the host path (issue 35: "a lone query <= its pass + 1.5 ms"):
# one closed-loop client, one lookup at a time (`pirq bench load --concurrency 1`, `Prefer:
# wait`, every page verified), against CPU workers over a tiny database (PAGES pages of 4 KiB:
# the scan costs ~0, so what is measured is the HTTP, the gateway's submit, the worker's read,
# join and write, and the completion event back: the same on a GPU host). Two or more binary
# sets run alternately, so that whatever else the machine does weighs on each alike.
#
#   ops/bench/lone.sh SETDIR...    # each SETDIR holds pirq-gateway, pirq-worker and pirq
#                                  # (e.g. copies of target/release/ at two commits), and may
#                                  # hold COMMIT (a line naming it) and ENV (VAR=value
#                                  # lines, set for its servers: one binary set at two
#                                  # settings, e.g. TOKIO_WORKER_THREADS=1)
#
# Per run: PARTIES (default 2: two real parties, each a redis-server, a gateway and one CPU
# worker of one thread, a lookup's halves one at each; 1: one party given both halves, as the
# GPU runs' "one party" rows) over DUR measured seconds after WARM (default 20 / 2). Reported:
# the client's p50 / p90 / p99 / mean ms a lookup, and from party A's /metrics over the measured
# seconds the means a party query of the gateway's `POST /v1/queries` (request in to answer
# out), the worker's job latency (gateway acceptance to result written, ms clock), its queue
# wait (acceptance to read), its read to result written (the two less each other: free of the
# acceptance stamp's whole milliseconds, which add ~0.5 ms to each), the expansion of a joining
# key, its segment wait, its turn and the result's write (one pipeline's round trip); and the
# voluntary context switches of party A's gateway, worker and redis-server (all threads) a
# party query: each is a thread that blocked and was woken, a hand-off on the path, counted
# without timing noise. The client's mean less the gateway's is the HTTP connection and the
# client itself. Writes OUT/results.txt (a line a run)
# and OUT/summary.md (medians per set). RUNS (default 3) runs of each set, alternating. PORT0
# (default 7481): the first redis-server port (gateways at +1000, workers' metrics at +2000).
set -euo pipefail
# shellcheck source=ops/bench/lib/procs.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/procs.sh"
[ $# -ge 1 ] || { sed -n '2,22p' "$0" >&2; exit 2; }
cd "$(dirname "$0")/../.."
SETS=()
for s in "$@"; do SETS+=("$(realpath "$s")"); done
RUNS=${RUNS:-3}
DUR=${DUR:-20}
WARM=${WARM:-2}
PAGES=${PAGES:-64}
PARTIES=${PARTIES:-2}
OUT=${OUT:-/tmp/pirq-lone}
REDIS=${PIRQ_REDIS_SERVER:-redis-server}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
rm -f "$OUT/results.txt" "$OUT/results.jsonl" "$OUT/summary.md"
# Ports: redis-servers from PORT0, gateways from PORT0 + 1000, workers' metrics from PORT0 + 2000.
PORT0=${PORT0:-7481}

# alive LOGDIR: fails the run if a server of this run (SERVERS) has exited (a port taken by another
# process on the machine: its server would answer in place of this run's)
alive() {
    local p
    for p in "${SERVERS[@]}"; do
        kill -0 "$p" 2>/dev/null && continue
        tail -n 3 "$1"/*.log >&2
        echo "FAILED: a process of this run exited (pid $p); logs in $1; another PORT0?" >&2
        exit 1
    done
}

# party N SET DB LOGDIR: party N's redis-server, gateway (port 8481+N) and worker (metrics
# 9481+N)
party() {
    local n=$1 s=$2 db=$3 L=$4
    local rport=$((PORT0 + n)) gport=$((PORT0 + 1000 + n)) mport=$((PORT0 + 2000 + n))
    local env=()
    [ ! -f "$s/ENV" ] || mapfile -t env <"$s/ENV"
    spawn "$L/redis$n.log" "$REDIS" --port "$rport" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$W"
    SERVERS+=($!)
    [ "$n" != 0 ] || REDIS_PID=$!
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$rport") 2>/dev/null && break
        sleep 0.1
    done
    spawn "$L/gateway$n.log" env "${env[@]}" "$s/pirq-gateway" --redis "redis://127.0.0.1:$rport" \
        --prefix lone --listen "127.0.0.1:$gport"
    SERVERS+=($!)
    [ "$n" != 0 ] || GATEWAY_PID=$!
    spawn "$L/worker$n.log" env "${env[@]}" "$s/pirq-worker" --redis "redis://127.0.0.1:$rport" \
        --prefix lone --db "$db" --backend cpu --threads 1 --consumer "w$n" \
        --metrics-listen "127.0.0.1:$mport"
    SERVERS+=($!)
    [ "$n" != 0 ] || WORKER_PID=$!
    for _ in $(seq 300); do
        alive "$L"
        if get "$gport" /v1/info "$W/info.json" 2>/dev/null && grep -q '"workers":1[,}]' "$W/info.json"; then
            return 0
        fi
        sleep 0.2
    done
    echo "FAILED: party $n did not come up; logs in $L" >&2
    exit 1
}

# switches PID: the voluntary context switches of every thread of a process so far (a thread
# that blocks, waiting for another thread, a socket or a timer, makes one: a count of the
# hand-offs between threads and processes that no timing noise moves)
switches() {
    cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches/ {s += $2} END {print s + 0}'
}

# scrape NAME: party 0's gateway and worker metrics into $W/NAME.{gw,wk}, and its processes'
# context switches into $W/NAME.sw ("gateway worker redis")
scrape() {
    get $((PORT0 + 1000)) /metrics "$W/$1.gw"
    get $((PORT0 + 2000)) /metrics "$W/$1.wk"
    echo "$(switches "$GATEWAY_PID") $(switches "$WORKER_PID") $(switches "$REDIS_PID")" >"$W/$1.sw"
}

one_run() {
    local s=$1 name=$2
    local L=$OUT/runs/$name
    mkdir -p "$L"
    local db=$W/db.pirdb
    SERVERS=()
    [ -f "$db" ] || "$s/pirq" db gen --pages "$PAGES" --page-size 4096 --seed 11 --out "$db" >/dev/null 2>&1
    local n
    for ((n = 0; n < PARTIES; n++)); do party "$n" "$s" "$db" "$L"; done
    local a=http://127.0.0.1:$((PORT0 + 1000)) b=http://127.0.0.1:$((PORT0 + 1000 + PARTIES - 1))
    local same=()
    [ "$PARTIES" -gt 1 ] || same=(--allow-same-party)
    spawn "$L/load.log" "$s/pirq" bench load --quiet --duration "$DUR" --warmup "$WARM" \
        --json "$L/load.json" --party-a "$a" --party-b "$b" "${same[@]}" --keys 1 --concurrency 1 \
        --verify "$db"
    local load=$!
    sleep "$WARM"
    scrape before
    sleep "$DUR"
    alive "$L"
    scrape after
    wait "$load" || { tail -n 20 "$L/load.log" >&2; echo "FAILED: $name: the load failed" >&2; exit 1; }
    cp "$W"/before.* "$W"/after.* "$L/"
    stop_all
    python3 - "$L" "$name" "$(cat "$s/COMMIT" 2>/dev/null || basename "$s")" "$OUT" <<'PY'
import json, re, sys
L, name, commit, out = sys.argv[1:]

def sums(path):
    """Every histogram's _sum and _count, by metric name and label set."""
    got = {}
    for line in open(path):
        m = re.match(r'^(\w+)_(sum|count)(\{[^}]*\})? ([0-9.eE+-]+)$', line.strip())
        if m:
            got[(m[1], m[3] or "", m[2])] = float(m[4])
    return got

def mean_ms(kind, metric, label=""):
    b, a = sums(f"{L}/before.{kind}"), sums(f"{L}/after.{kind}")
    s = c = 0.0
    for (name_, labels, what), v in a.items():
        if name_ != metric or label not in labels:
            continue
        d = v - b.get((name_, labels, what), 0.0)
        if what == "sum":
            s += d
        else:
            c += d
    return (s / c * 1e3 if c else float("nan")), int(c)

rep = json.load(open(f"{L}/load.json"))
sw = [int(a) - int(b) for a, b in zip(open(f"{L}/after.sw").read().split(),
                                      open(f"{L}/before.sw").read().split())]
errors = sum(rep.get("errors", {}).values())
lat = rep["latency_ms"]
gw, gw_n = mean_ms("gw", "pirq_gateway_http_request_duration_seconds", 'route="/v1/queries"')
job, job_n = mean_ms("wk", "pirq_worker_job_latency_seconds")
qwait, _ = mean_ms("wk", "pirq_worker_queue_wait_seconds")
seg, _ = mean_ms("wk", "pirq_worker_segment_wait_seconds")
turn, _ = mean_ms("wk", "pirq_worker_turn_duration_seconds")
write, _ = mean_ms("wk", "pirq_worker_results_write_duration_seconds")
expand, _ = mean_ms("wk", "pirq_worker_phase_duration_seconds", 'phase="expand"')
row = {"name": name, "commit": commit, "lookups": rep["ok"], "errors": errors,
       "p50": lat["p50"], "p90": lat["p90"], "p99": lat["p99"], "mean": lat["mean"],
       "gateway_post_ms": gw, "gateway_posts": gw_n, "worker_job_ms": job, "worker_jobs": job_n,
       "queue_wait_ms": qwait, "segment_wait_ms": seg, "turn_ms": turn, "write_ms": write,
       "read_to_written_ms": job - qwait, "expand_ms": expand,
       "switches_gateway": sw[0] / job_n if job_n else 0, "switches_worker": sw[1] / job_n if job_n else 0,
       "switches_redis": sw[2] / job_n if job_n else 0}
line = (f"{name}: {commit}: {rep['ok']} lookups, p50 {lat['p50']:.3f} p90 {lat['p90']:.3f} "
        f"p99 {lat['p99']:.3f} mean {lat['mean']:.3f} ms; party A: gateway POST {gw:.3f} ms "
        f"({gw_n} posts), worker job {job:.3f} (queue wait {qwait:.3f}; read to written "
        f"{job - qwait:.3f}: expand {expand:.3f}, segment wait {seg:.3f}, turn {turn:.3f}, "
        f"write {write:.3f}); context switches a party query: gateway "
        f"{row['switches_gateway']:.2f}, worker {row['switches_worker']:.2f}, Redis "
        f"{row['switches_redis']:.2f}; errors {errors}")
print(line)
open(f"{out}/results.txt", "a").write(line + "\n")
open(f"{out}/results.jsonl", "a").write(json.dumps(row) + "\n")
if errors:
    sys.exit(f"{name}: the load saw errors: {rep['errors']}")
PY
}

for ((r = 1; r <= RUNS; r++)); do
    for s in "${SETS[@]}"; do one_run "$s" "$(basename "$s")-run$r"; done
done
python3 - "$OUT/results.jsonl" "$OUT/summary.md" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
out = ["| binaries | runs | p50 ms | p90 ms | mean ms | gateway POST ms | worker job ms | "
       "queue wait ms | read to written ms | expand ms | segment wait ms | turn ms | write ms | "
       "switches a party query (gateway / worker / Redis) |", "|---|---:" + "|---:" * 12 + "|"]
for c in dict.fromkeys(r["commit"] for r in rows):
    rs = [r for r in rows if r["commit"] == c]
    m = lambda k: statistics.median(r[k] for r in rs)
    out.append(f"| {c} | {len(rs)} | {m('p50'):.3f} | {m('p90'):.3f} | {m('mean'):.3f} | "
               f"{m('gateway_post_ms'):.3f} | {m('worker_job_ms'):.3f} | {m('queue_wait_ms'):.3f} | "
               f"{m('read_to_written_ms'):.3f} | {m('expand_ms'):.3f} | "
               f"{m('segment_wait_ms'):.3f} | {m('turn_ms'):.3f} | {m('write_ms'):.3f} | "
               f"{m('switches_gateway'):.2f} / {m('switches_worker'):.2f} / {m('switches_redis'):.2f} |")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
