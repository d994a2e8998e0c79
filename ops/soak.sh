#!/usr/bin/env bash
# The soak (issue 25): two parties under steady load for MINUTES, with the faults a deployment
# lives through, every answer verified against the database at the epoch it answers.
#
#   ops/soak.sh [MINUTES]            # default 30; the test suite runs 1 (scripts/test.sh)
#   PIRQ_SOAK_RECORD=docs/bench/soak.md ops/soak.sh 30    # and write the report there
#
# What runs (real processes, loopback only): per party a redis-server (AOF, appendfsync always),
# a gateway (--durability fsync) and two CPU workers (one scan thread each), on one page database
# (PIRQ_SOAK_PAGES pages of 1 KiB, default 4096). `e2e-soak` (tests/src/bin/e2e-soak.rs) sends
# PIRQ_SOAK_CLIENTS (4) concurrent loops of 2-page queries to both parties and pushes an epoch
# (4 pages replaced with random bytes) every PIRQ_SOAK_EPOCH_EVERY seconds (5). Meanwhile:
#
#   - every PIRQ_SOAK_KILL_EVERY seconds (180; 40 in a run under 5 minutes, 15 under 2), one
#     worker, in turn, is killed with SIGKILL and started again 2 s later under the same consumer
#     name (none in the last 20 s);
#   - at a third of the run, party A's redis-server is killed with SIGKILL and started again on
#     its AOF 2 s later;
#   - every 30 s the resident memory of every gateway, worker and redis-server is sampled.
#
# Passes when nothing is wrong, nothing accepted is lost, queries were answered every minute,
# and no process's log has a line at ERROR (WARN lines are expected around the faults and are
# counted in the report). The report (JSON, CSV and the markdown of PIRQ_SOAK_RECORD) stays in the
# work directory printed at the start. PIRQ_BIN_DIR: run the binaries there instead of building.
# The processes inherit the environment, so their flags' variables set them: e.g.
# `PIRQ_CONNECTION_THREADS=4 ops/soak.sh 2` soaks gateways on connection lanes.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MINUTES=${1:-30}
PAGES=${PIRQ_SOAK_PAGES:-4096}
CLIENTS=${PIRQ_SOAK_CLIENTS:-4}
EPOCH_EVERY=${PIRQ_SOAK_EPOCH_EVERY:-5}
SECONDS_TOTAL=$(python3 -c "print(int(float('$MINUTES') * 60))")
if [ -n "${PIRQ_SOAK_KILL_EVERY:-}" ]; then
    KILL_EVERY=$PIRQ_SOAK_KILL_EVERY
elif [ "$SECONDS_TOTAL" -lt 120 ]; then
    KILL_EVERY=15
elif [ "$SECONDS_TOTAL" -lt 300 ]; then
    KILL_EVERY=40
else
    KILL_EVERY=180
fi
REDIS_AT=$((SECONDS_TOTAL / 3))
RECORD=${PIRQ_SOAK_RECORD:-}
# The commit the binaries are built from (the report names it; the tree may move during a run).
COMMIT="$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (+ uncommitted changes)')"
log() { echo "soak: $*" >&2; }

command -v redis-server >/dev/null || scripts/install-deps.sh
# The binaries: $PIRQ_BIN_DIR's when set (scripts/test.sh passes the suite's one release build),
# else built here.
if [ -n "${PIRQ_BIN_DIR:-}" ]; then
    BUILT=$PIRQ_BIN_DIR
else
    cargo build --release --locked --quiet -p pirq-gateway -p pirq-worker -p pirq-cli -p pirq-e2e \
        --bin pirq-gateway --bin pirq-worker --bin pirq --bin e2e-soak
    BUILT=$ROOT/target/release
fi
W=$(mktemp -d /tmp/pirq-soak.XXXXXX)
# A copy of the binaries: a build during the run must not change what a restarted worker runs.
BIN=$W/bin
mkdir -p "$BIN"
cp "$BUILT"/{pirq-gateway,pirq-worker,pirq,e2e-soak} "$BIN/"
log "work directory $W; $MINUTES min, worker kill every $KILL_EVERY s, redis restart at $REDIS_AT s"
"$BIN/pirq" db gen --pages "$PAGES" --page-size 1024 --seed 3 --out "$W/db.pirdb" >/dev/null

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
declare -A PID PORT
NAMES=()

start_redis() { # party
    local p=$1
    mkdir -p "$W/redis-$p"
    redis-server --port "${PORT[redis-$p]}" --bind 127.0.0.1 --dir "$W/redis-$p" \
        --appendonly yes --appendfsync always --save "" >>"$W/redis-$p.log" 2>&1 &
    PID[redis-$p]=$!
    for _ in $(seq 100); do
        redis-cli -p "${PORT[redis-$p]}" ping >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    log "redis-server of party $p did not start"
    exit 1
}
start_gateway() { # party
    local p=$1
    PIRQ_ADMIN_TOKEN=$TOKEN RUST_LOG=info "$BIN/pirq-gateway" \
        --redis "redis://127.0.0.1:${PORT[redis-$p]}" --prefix "soak-$p" \
        --listen "127.0.0.1:${PORT[gateway-$p]}" --durability fsync >>"$W/gateway-$p.log" 2>&1 &
    PID[gateway-$p]=$!
}
start_worker() { # party index
    local p=$1 i=$2
    PIRQ_THREADS=1 RUST_LOG=info "$BIN/pirq-worker" \
        --redis "redis://127.0.0.1:${PORT[redis-$p]}" --prefix "soak-$p" --db "$W/db.pirdb" \
        --backend cpu --consumer "soak-$p-w$i" \
        --metrics-listen "127.0.0.1:${PORT[worker-$p$i]}" >>"$W/worker-$p$i.log" 2>&1 &
    PID[worker-$p$i]=$!
}
stop_all() {
    for n in "${!PID[@]}"; do kill "${PID[$n]}" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap stop_all EXIT

for p in a b; do
    PORT[redis-$p]=$(free_port)
    PORT[gateway-$p]=$(free_port)
    start_redis "$p"
    start_gateway "$p"
    NAMES+=("redis-$p" "gateway-$p")
    for i in 0 1; do
        PORT[worker-$p$i]=$(free_port)
        start_worker "$p" "$i"
        NAMES+=("worker-$p$i")
    done
done
for p in a b; do
    for _ in $(seq 600); do
        curl -fsS -o /dev/null "http://127.0.0.1:${PORT[gateway-$p]}/readyz" && break
        sleep 0.1
    done
    curl -fsS -o /dev/null "http://127.0.0.1:${PORT[gateway-$p]}/readyz" || {
        log "party $p not ready"
        tail -n 20 "$W"/*-"$p"*.log >&2
        exit 1
    }
done
log "both parties ready"

PIRQ_ADMIN_TOKEN=$TOKEN "$BIN/e2e-soak" \
    --party-a "http://127.0.0.1:${PORT[gateway-a]}" --party-b "http://127.0.0.1:${PORT[gateway-b]}" \
    --db "$W/db.pirdb" --minutes "$MINUTES" --clients "$CLIENTS" --keys 2 \
    --epoch-every "$EPOCH_EVERY" --epoch-pages 4 --report "$W/report.json" \
    >"$W/e2e-soak.out" 2>"$W/e2e-soak.err" &
DRIVER=$!

rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
echo "t_s,process,rss_kib" >"$W/rss.csv"
: >"$W/events.txt"
t0=$(date +%s)
next_kill=$KILL_EVERY
next_sample=0
redis_done=0
victims=(a0 b0 a1 b1)
k=0
while kill -0 "$DRIVER" 2>/dev/null; do
    t=$(($(date +%s) - t0))
    if [ "$t" -ge "$next_sample" ]; then
        for n in "${NAMES[@]}"; do echo "$t,$n,$(rss "${PID[$n]}")" >>"$W/rss.csv"; done
        next_sample=$((next_sample + 30))
    fi
    if [ "$t" -ge "$next_kill" ] && [ "$t" -lt $((SECONDS_TOTAL - 20)) ]; then
        v=${victims[$((k % 4))]}
        k=$((k + 1))
        kill -9 "${PID[worker-$v]}" 2>/dev/null || true
        wait "${PID[worker-$v]}" 2>/dev/null || true
        echo "$t s: worker $v killed (SIGKILL), restarted 2 s later" >>"$W/events.txt"
        sleep 2
        start_worker "${v:0:1}" "${v:1:1}"
        next_kill=$((next_kill + KILL_EVERY))
    fi
    if [ "$redis_done" = 0 ] && [ "$t" -ge "$REDIS_AT" ]; then
        redis_done=1
        kill -9 "${PID[redis-a]}"
        wait "${PID[redis-a]}" 2>/dev/null || true
        echo "$t s: party A's redis-server killed (SIGKILL), restarted on its AOF 2 s later" >>"$W/events.txt"
        sleep 2
        start_redis a
    fi
    sleep 1
done
status=0
wait "$DRIVER" || status=$?
t=$(($(date +%s) - t0))
for n in "${NAMES[@]}"; do echo "$t,$n,$(rss "${PID[$n]}")" >>"$W/rss.csv"; done
cat "$W/e2e-soak.out"

# Every process's log: no ERROR line; WARN lines are counted (they come with the faults).
# (The logs may carry colour codes: strip them first.)
sed 's/\x1b\[[0-9;]*m//g' "$W"/gateway-*.log "$W"/worker-*.log >"$W/all-logs.txt"
errors=$(grep -c ' ERROR ' "$W/all-logs.txt" || true)
warns=$(grep -c ' WARN ' "$W/all-logs.txt" || true)
log "log lines: $errors at ERROR, $warns at WARN (gateways and workers)"
if [ "$errors" -gt 0 ]; then
    grep ' ERROR ' "$W/all-logs.txt" | head -n 20 >&2
fi

python3 - "$W" "$MINUTES" "$RECORD" "$errors" "$warns" "$KILL_EVERY" "$REDIS_AT" "$PAGES" "$CLIENTS" "$EPOCH_EVERY" "$COMMIT" <<'PY'
import csv, json, os, sys, datetime
w, minutes, record, errors, warns, kill_every, redis_at, pages, clients, epoch_every, commit = sys.argv[1:]
rep = json.load(open(f"{w}/report.json"))
rows = list(csv.DictReader(open(f"{w}/rss.csv")))
procs = sorted({r["process"] for r in rows})
times = sorted({int(r["t_s"]) for r in rows})
rss = {(int(r["t_s"]), r["process"]): int(r["rss_kib"]) for r in rows}
# Resident memory at the start, then the first sample of every 5th minute, and at the end (MiB).
marks = {times[0], times[-1]}
for k in range(1, times[-1] // 300 + 1):
    marks.add(min(t for t in times if t >= k * 300))
marks = sorted(marks)
# The final sample comes a moment after the last 5-minute one: one column for both.
if len(marks) > 2 and marks[-1] - marks[-2] < 30:
    del marks[-2]
def mark_label(t):
    if t == times[0]:
        return "start"
    return f"end ({t / 60:.1f} min)" if t == times[-1] else f"{t / 60:.0f} min"
cpu = ""
try:
    cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
except StopIteration:
    pass
out = []
out.append(f"## {datetime.date.today().isoformat()}: {minutes} minutes, commit {commit}")
out.append("")
niceness = os.nice(0)
run_as = f"`nice -n {niceness} ops/soak.sh {minutes}`" if niceness > 0 else f"`ops/soak.sh {minutes}`"
out.append(f"Machine: {os.cpu_count()} cores ({cpu}), shared with other work while it ran. Command: "
           f"{run_as} ({pages} pages of 1 KiB, {clients} client loops of 2-page queries, "
           f"an epoch of 4 pages every {epoch_every} s, a worker SIGKILLed and restarted every "
           f"{kill_every} s, party A's Redis SIGKILLed and restarted on its AOF at {redis_at} s).")
out.append("")
failed = sum(rep["failed"].values())
out.append("| answered | wrong | accepted and lost | refused at submit (retried) | failed | epochs pushed | ERROR / WARN log lines |")
out.append("|---|---|---|---|---|---|---|")
out.append(f"| {rep['answered']} | {rep['wrong']} | {rep['accepted_and_lost']} | {rep['refused']} | {failed} {rep['failed'] or ''} | {rep['epochs_pushed']} | {errors} / {warns} |")
out.append("")
out.append("Per minute (time from submit to both answers):")
out.append("")
out.append("| minute | answered | p50 ms | p99 ms | max ms |")
out.append("|---|---|---|---|---|")
for m in rep["minutes"]:
    out.append(f"| {m['minute']} | {m['answered']} | {m['p50_ms']:.0f} | {m['p99_ms']:.0f} | {m['max_ms']:.0f} |")
out.append("")
out.append("Resident memory (MiB; a restarted worker is a new process):")
out.append("")
out.append("| process | " + " | ".join(mark_label(t) for t in marks) + " |")
out.append("|---|" + "---|" * len(marks))
for p in procs:
    out.append(f"| {p} | " + " | ".join(f"{rss.get((t, p), 0) / 1024:.1f}" for t in marks) + " |")
out.append("")
out.append("Events:")
out.append("")
for line in open(f"{w}/events.txt"):
    out.append(f"- {line.strip()}")
out.append("")
text = "\n".join(out)
open(f"{w}/soak.md", "w").write(text)
print(text)
if record:
    with open(record, "a") as f:
        f.write("\n" + text)
# Every minute answered something (a stall would show as a minute without answers).
whole = int(float(minutes))
answered_minutes = {m["minute"] for m in rep["minutes"] if m["answered"] > 0}
missing = [m for m in range(whole) if m not in answered_minutes]
if missing:
    print(f"soak: minutes without an answer: {missing}", file=sys.stderr)
    sys.exit(1)
PY
[ "$errors" -eq 0 ] || status=1
if [ "$status" -eq 0 ]; then
    log "passed ($W)"
else
    log "FAILED ($W)"
fi
exit "$status"
