#!/usr/bin/env bash
# Lookups/s and latency of `pirq bench load` (the client library's two-party fetch) on one CPU
# party pair, for one or more `pirq` binaries: the effect of keeping the parties' /v1/info
# between lookups (issue 24: one round trip a lookup instead of two).
#
#   ops/bench/client-round-trips.sh before=/path/to/old/lookups after=target/release/examples/lookups
#   ops/bench/client-round-trips.sh load=target/release/pirq
#
# A binary named `lookups*` is client/examples/lookups.rs (the library's `Client::fetch`, built
# from this tree or, copied into an older tree, from that one); any other is a `pirq` whose
# `bench load` runs.
# Each party: its own redis-server, a release pirq-gateway, one single-thread CPU pirq-worker,
# over a 4096 × 1 KiB database (so that the scan is short and the round trips show). Each binary
# runs CONCURRENCY closed-loop clients for DURATION s after 2 s of warm-up, verifying every page.
# Prints one line per binary; the JSON reports stay in $OUT (default /tmp/client-round-trips).
# DB_GEN_BIN: the pirq that writes the database (an older one, when an older binary must read it
# for --verify).
set -euo pipefail
cd "$(dirname "$0")/../.."
R=target/release
CONCURRENCY=${CONCURRENCY:-4}
DURATION=${DURATION:-20}
OUT=${OUT:-/tmp/client-round-trips}
mkdir -p "$OUT"
W=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

"${DB_GEN_BIN:-$R/pirq}" db gen --pages 4096 --page-size 1024 --seed 7 --out "$W/db.pirdb" >/dev/null
URLS=()
for p in a b; do
    rp=$(free_port)
    redis-server --port "$rp" --bind 127.0.0.1 --save "" --appendonly no --dir "$W" >"$W/redis-$p.log" 2>&1 &
    PIDS+=($!)
    gp=$(free_port)
    sleep 0.3
    "$R/pirq-gateway" --redis "redis://127.0.0.1:$rp" --prefix "$p" --listen "127.0.0.1:$gp" >"$W/gw-$p.log" 2>&1 &
    PIDS+=($!)
    "$R/pirq-worker" --redis "redis://127.0.0.1:$rp" --prefix "$p" --db "$W/db.pirdb" --backend cpu --threads 1 >"$W/worker-$p.log" 2>&1 &
    PIDS+=($!)
    URLS+=("http://127.0.0.1:$gp")
done
ready() { curl -sf "$1/v1/info" 2>/dev/null | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin).get("workers",0)>0 else 1)'; }
for u in "${URLS[@]}"; do
    for i in $(seq 300); do ready "$u" && break; sleep 0.2; done
    ready "$u" 2>/dev/null || { echo "$u never got a worker"; for f in "$W"/*.log; do echo "== $f"; tail -n 5 "$f"; done; exit 1; }
done

for spec in "$@"; do
    name=${spec%%=*}
    bin=${spec#*=}
    if [[ $(basename "$bin") == lookups* ]]; then
        echo "$name: $("$bin" "${URLS[0]}" "${URLS[1]}" 4096 "$CONCURRENCY" "$DURATION")"
        continue
    fi
    "$bin" bench load --party-a "${URLS[0]}" --party-b "${URLS[1]}" --concurrency "$CONCURRENCY" \
        --duration "$DURATION" --warmup 2 --keys 1 --verify "$W/db.pirdb" --quiet \
        --json "$OUT/$name.json" 2>"$OUT/$name.log" || { echo "$name failed:"; tail -5 "$OUT/$name.log"; continue; }
    python3 - "$name" "$OUT/$name.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))
l = r["latency_ms"]
extra = "" if "info_requests" not in r else f", /v1/info requests {r['info_requests']}"
print(f"{sys.argv[1]}: {r['achieved_qps']:.1f} lookups/s, p50 {l['p50']:.2f} ms, p99 {l['p99']:.2f} ms, "
      f"max {l['max']:.2f} ms, ok {r['ok']}, errors {sum(r['errors'].values())}{extra}")
PY
done
