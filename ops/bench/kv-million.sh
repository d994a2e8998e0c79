#!/usr/bin/env bash
# A million text records the way a user holds them, end to end (issue 37; docs/bench/kv.md §8):
# build with no encoding flags, check offline, find the update in a new full export, serve the
# table from two real parties on this machine (redis-server, pirq-gateway, one
# `pirq-worker --backend cpu --threads 1` each), look keys up from both clients (`pirq get` and
# the TypeScript client: in Node, clients/ts/bench/kv-check.ts, and in headless Chromium through
# the demo page, clients/ts/demo/headless.ts), push the update to both parties and look up again. Every answer is checked against the records: half of the keys present (their text
# values must match exactly), half absent; after the update, half of the present keys have new
# values. Nothing here runs in the test suite (it takes minutes and 2 GB of disk).
#
#   ops/bench/kv-million.sh           # RECORDS (1000000), CHANGED (1000), LOOKUPS (1000 a client),
#                                     # SINGLE (10 one-key lookups a client), WORK (a temp dir)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
RECORDS=${RECORDS:-1000000}
CHANGED=${CHANGED:-1000}
LOOKUPS=${LOOKUPS:-1000}
SINGLE=${SINGLE:-10}
W=${WORK:-$(mktemp -d)}
mkdir -p "$W"
BIN=$ROOT/target/release
TOKEN=kv-million-admin-token
PIDS=()
WORKERS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ -n "${WORK:-}" ] || rm -rf "$W"
}
trap cleanup EXIT

# The same cargo line as clients/ts/need-binaries.mjs and scripts/test.sh: their artifacts serve.
cargo build --release -q --locked -p pirq-gateway -p pirq-worker -p pirq-cli -p pirq-testkit \
    --bin pirq --bin pirq-gateway --bin pirq-worker --bin pirq-fake-party
(cd clients/ts && npm run -s build >/dev/null)
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(free -g | awk '/Mem:/ {print $2}') GiB, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with local changes)')"
echo "work: $W"

# Seconds since $1 (from `now`).
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

echo "== records: $RECORDS text records (keys user-NNNNNNN, values 100-500 B of words, seed 1), $CHANGED changed in the new export"
python3 - "$RECORDS" "$CHANGED" "$LOOKUPS" "$W" <<'PY'
import json, random, sys
n, changed, lookups, w = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rng = random.Random(1)
letters = "abcdefghijklmnopqrstuvwxyz"
words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(5000)]
def text(length):
    out = []
    size = -1
    while size < length:
        word = rng.choice(words)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:length]
every = max(1, n // changed)
key = lambda i: f"user-{i:07d}"
v1, v2 = {}, {}
with open(f"{w}/v1.jsonl", "w") as a, open(f"{w}/v2.jsonl", "w") as b:
    for i in range(n):
        value = text(rng.randint(100, 500))
        v1[i] = value
        a.write(json.dumps({"key": key(i), "value": value}) + "\n")
        if i % every == 0 and i // every < changed:
            value = "changed: " + text(rng.randint(91, 491))
        v2[i] = value
        b.write(json.dumps({"key": key(i), "value": value}) + "\n")
# The keys both clients look up: present ones spread over the table, every other one a changed
# record (a multiple of `every`), each followed by an absent key.
step = max(1, n // max(1, lookups // 2))
picks = [min(n - 1, (k * step // every) * every + (0 if k % 2 == 0 else 7)) for k in range(lookups // 2)]
for name, values in (("v1", v1), ("v2", v2)):
    with open(f"{w}/expected-{name}.jsonl", "w") as out:
        for k, i in enumerate(picks):
            out.write(json.dumps({"key": key(i), "value": values[i]}) + "\n")
            out.write(json.dumps({"key": f"nobody-{k}", "value": None}) + "\n")
with open(f"{w}/keys.txt", "w") as out:
    for k, i in enumerate(picks):
        out.write(f"{key(i)}\nnobody-{k}\n")
PY
ls -l "$W"/v1.jsonl "$W"/v2.jsonl | awk '{print $5, $9}'

echo "== kv build (no encoding flags: keys and values are text)"
/usr/bin/time -v "$BIN/pirq" kv build --records "$W/v1.jsonl" --max-value-size 520 --seed 1 \
    --out "$W/t1.pirdb" 2>"$W/build.txt"
grep -E "^wrote|Elapsed|Maximum resident" "$W/build.txt"

echo "== offline checks"
t=$(now)
"$BIN/pirq" kv stats "$W/t1.pirdb"
echo "kv stats: $(since "$t") s"
# Exit 1: one key is absent. The value is cut to its first 60 characters here.
status=0
"$BIN/pirq" kv get --db "$W/t1.pirdb" --key user-0000042 --key nobody >"$W/kv-get.txt" || status=$?
cut -c1-60 "$W/kv-get.txt"
[ "$status" = 1 ] || { echo "kv get: exit $status, not 1" >&2; exit 1; }

echo "== kv diff (the new export against the table)"
/usr/bin/time -v "$BIN/pirq" kv diff --table "$W/t1.pirdb" --records "$W/v2.jsonl" \
    --out "$W/u1.bin" 2>"$W/diff.txt"
grep -E "^wrote|Elapsed|Maximum resident" "$W/diff.txt"

# party N: redis on 165N, gateway on 185N, one single-thread CPU worker serving t1.pirdb.
party() {
    local n=$1
    redis-server --port "165$n" --bind 127.0.0.1 --save "" --appendonly no >"$W/redis$n.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do redis-cli -p "165$n" ping >/dev/null 2>&1 && break; sleep 0.1; done
    "$BIN/pirq-gateway" --redis "redis://127.0.0.1:165$n" --prefix "million$n" \
        --listen "127.0.0.1:185$n" --admin-token "$TOKEN" --cors-origin "http://127.0.0.1:$WEB_PORT" \
        >"$W/gateway$n.log" 2>&1 &
    PIDS+=($!)
    "$BIN/pirq-worker" --redis "redis://127.0.0.1:165$n" --prefix "million$n" --db "$W/t1.pirdb" \
        --backend cpu --threads 1 >"$W/worker$n.log" 2>&1 &
    PIDS+=($!)
    WORKERS+=($!)
}
# at_epoch PORT EPOCH: wait until the party on PORT is ready and serves EPOCH.
at_epoch() {
    for _ in $(seq 1200); do
        curl -sf "http://127.0.0.1:$1/readyz" >/dev/null 2>&1 &&
            [ "$(curl -sf "http://127.0.0.1:$1/v1/info" | jq '.epoch.newest')" = "$2" ] && return 0
        sleep 0.25
    done
    echo "party on port $1 never served epoch $2" >&2
    return 1
}
WEB_PORT=18590 # where demo/headless.ts serves the demo page to Chromium
A=http://127.0.0.1:1851
B=http://127.0.0.1:1852

# lookups NAME: both clients look up keys.txt and check the answers against expected-NAME.jsonl.
lookups() {
    local name=$1
    echo "-- pirq get: $SINGLE lookups of one key each"
    local t
    t=$(now)
    head -n "$SINGLE" "$W/expected-$name.jsonl" | jq -r '.key' | while read -r k; do
        "$BIN/pirq" get --party-a "$A" --party-b "$B" --key "$k" >/dev/null || [ $? = 1 ]
    done
    echo "pirq get, one key a process: $(awk -v s="$(since "$t")" -v n="$SINGLE" 'BEGIN { printf "%.3f", s / n }') s a lookup (process start, connect, lookup)"
    echo "-- pirq get --keys-file: $LOOKUPS keys in one command"
    t=$(now)
    "$BIN/pirq" get --party-a "$A" --party-b "$B" --keys-file "$W/keys.txt" --json --timeout 600 \
        >"$W/got-$name.jsonl" 2>"$W/get-$name.txt" || [ $? = 1 ]
    echo "pirq get --keys-file: $(since "$t") s; $(cat "$W/get-$name.txt")"
    python3 - "$W/expected-$name.jsonl" "$W/got-$name.jsonl" <<'PY'
import json, sys
expected = [json.loads(l) for l in open(sys.argv[1])]
got = [json.loads(l) for l in open(sys.argv[2])]
assert len(got) == len(expected), (len(got), len(expected))
bad = [(e["key"], g["value"], e["value"]) for e, g in zip(expected, got) if (g["key"], g["value"]) != (e["key"], e["value"])]
print(f"pirq get: {len(got)} answers checked, {sum(g['value'] is not None for g in got)} found, {len(bad)} mismatches, epoch {got[0]['epoch']}")
sys.exit(1 if bad else 0)
PY
    echo "-- TypeScript client: $SINGLE getValue one by one, then all $LOOKUPS keys in one getMany"
    node clients/ts/dist/bench/kv-check.js "$A" "$B" "$W/expected-$name.jsonl" "$SINGLE"
    echo "-- TypeScript client in headless Chromium (the demo page): a present key, then an absent one"
    local first key value
    first=$(head -n 1 "$W/expected-$name.jsonl")
    key=$(jq -r .key <<<"$first")
    value=$(jq -r .value <<<"$first")
    node clients/ts/dist/demo/headless.js --a "$A" --b "$B" --port "$WEB_PORT" \
        --key "$key" --expect "$(printf '%s' "$value" | od -An -tx1 | tr -d ' \n')" \
        --key nobody-0 --expect absent | grep -v "^   Same shape"
}

echo "expected answers: $(grep -c . "$W/expected-v1.jsonl") keys, $(diff <(jq -c .value "$W/expected-v1.jsonl") <(jq -c .value "$W/expected-v2.jsonl") | grep -c '^>') of them changed by the update"
echo "== two parties serving t1.pirdb"
t=$(now)
party 1
party 2
at_epoch 1851 0
at_epoch 1852 0
echo "both parties ready in $(since "$t") s"
grep -h "database loaded" "$W"/worker*.log | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-300 || true
lookups v1

echo "== the update from kv diff pushed to both parties"
t=$(now)
"$BIN/pirq" epoch push --party "$A" --token "$TOKEN" --from "$W/u1.bin"
"$BIN/pirq" epoch push --party "$B" --token "$TOKEN" --from "$W/u1.bin"
at_epoch 1851 1
at_epoch 1852 1
echo "pushed and served at epoch 1 in $(since "$t") s"
lookups v2

echo "== worker memory (RSS, KiB)"
for pid in "${WORKERS[@]}"; do
    echo "worker $pid: $(awk '/VmRSS|VmHWM/ {printf "%s %s ", $1, $2}' "/proc/$pid/status")"
done
if grep -hE "\b(WARN|ERROR)\b" "$W"/gateway*.log "$W"/worker*.log; then
    echo "WARN/ERROR lines above" >&2
    exit 1
fi
echo "no WARN or ERROR lines in the parties' logs"
