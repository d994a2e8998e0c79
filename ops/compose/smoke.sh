#!/usr/bin/env bash
# The compose stack, brought up as its users bring it up, and checked end to end:
#
#   1. the pirq images built with Compose (docker/Dockerfile), on local base images where no
#      registry can be reached (ops/compose/local-images.sh);
#   2. two parties on this host, each its own Compose project with its own Redis, gateway, two
#      CPU workers and Prometheus (Grafana too when its image is here: Debian does not package it),
#      serving one key-value database from a host directory; each gateway serves HTTPS with its
#      own certificate from a throwaway CA (ops/compose/certs.sh), and its admin routes and
#      /metrics on a separate loopback listener;
#   3. `pirq query --verify` (pages against the database file) and `pirq get` (values against the
#      records) through both parties over HTTPS (`--ca-cert`); an epoch update built with
#      `pirq kv update`, pushed to both admin listeners with `pirq epoch push`, and both checks
#      again at the new epoch; the public port refuses plain HTTP and answers 404 for /metrics and
#      the admin route;
#      Party A's certificate is then renewed in place and re-read on SIGHUP, without a restart;
#   4. each party's Prometheus scrapes its gateway (on the admin listener) and both workers
#      (`up == 1`), has the alert rules loaded, and Docker reports every gateway and worker healthy.
#
# Run: ops/compose/smoke.sh   (root or the docker group; minutes: see docs/operations.md).
# scripts/test.sh runs it with PIRQ_COMPOSE_SMOKE=1.
#
# Settings (environment):
#   COMPOSE                 the Compose command (default: docker-compose if installed, else
#                           `docker compose`); v1.29 and v2 both work
#   PIRQ_COMPOSE_NETWORK    host | bridge (default: host when the engine has no `bridge` network)
#   PIRQ_COMPOSE_IMAGES     local (default: base, Redis and Prometheus images from Debian packages,
#                           no registry) | registry (the official images, pulled)
#   PIRQ_BINARIES           prebuilt (default: ops/compose/prebuilt-binaries.sh builds on the host
#                           and the images copy the binaries in) | build (compiled inside Docker:
#                           what a user without a Rust toolchain does; far slower on small hosts)
#   PIRQ_SMOKE_KEEP=1       leave both parties running afterwards
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
start=$(date +%s)
log() { echo "smoke: $*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

# ---- tools -------------------------------------------------------------------------------------
docker info >/dev/null 2>&1 || fail "no Docker engine answers (docs/operations.md, 'Compose without a registry' says how to start one)"
if [ -z "${COMPOSE:-}" ]; then
    if command -v docker-compose >/dev/null; then COMPOSE=docker-compose; else COMPOSE="docker compose"; fi
fi
read -r -a compose_cmd <<<"$COMPOSE"
log "compose: $("${compose_cmd[@]}" version 2>/dev/null | head -n1)"
# docker/Dockerfile needs BuildKit: a docker CLI that can build with it first on PATH (the same
# file the recipes of docs/operations.md source).
# shellcheck source=ops/compose/buildkit.sh
. ops/compose/buildkit.sh || fail "see above"

network=${PIRQ_COMPOSE_NETWORK:-}
if [ -z "$network" ]; then
    if docker network inspect bridge >/dev/null 2>&1; then network=bridge; else network=host; fi
fi
files=(-f docker-compose.yml)
[ "$network" = host ] && files+=(-f ops/compose/host-network.yml)
log "network: $network"

images=${PIRQ_COMPOSE_IMAGES:-local}
if [ "$images" = local ]; then
    ops/compose/local-images.sh
    set -a
    # shellcheck source=/dev/null
    . ops/compose/local-images.env
    set +a
fi
export PIRQ_BINARIES=${PIRQ_BINARIES:-prebuilt}
[ "$PIRQ_BINARIES" = prebuilt ] && ops/compose/prebuilt-binaries.sh
PIRQ=$ROOT/target/release/pirq
[ -x "$PIRQ" ] || cargo build --release --locked -p pirq-cli --bin pirq

# ---- the database both parties serve, in a host directory ------------------------------------------
work=$(mktemp -d /tmp/pirq-smoke.XXXXXX)
chmod 755 "$work"
export PIRQ_DATA=$work/data PIRQ_DB_FILE=kv.pirdb
mkdir -p "$PIRQ_DATA"
"$PIRQ" kv gen --records 3000 --key-size 16 --value-size 32 --seed 11 --out "$work/records.jsonl"
"$PIRQ" kv build --records "$work/records.jsonl" --value-size 32 --key-size 16 --seed 5 \
    --key-encoding hex --value-encoding hex \
    --out "$PIRQ_DATA/kv.pirdb" >/dev/null
chmod -R a+rX "$PIRQ_DATA"
pages=$("$PIRQ" db info "$PIRQ_DATA/kv.pirdb" | python3 -c 'import json,sys; print(json.load(sys.stdin)["num_pages"])')
log "database: $pages pages, 3000 records ($work)"

export PIRQ_ADMIN_TOKEN
PIRQ_ADMIN_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export PIRQ_CPU_WORKER_THREADS=1 RUST_LOG=info

# ---- a throwaway CA and one certificate per party (each its own key: one TLS identity each) -------
ops/compose/certs.sh "$work/tls" party-a party-b
CA=$work/tls/ca.pem

party() { # party a|b compose-args...
    local p=$1
    shift
    PIRQ_TLS_DIR=$work/tls/party-$p \
        "${compose_cmd[@]}" "${files[@]}" -p "pirq-smoke-$p" --env-file "ops/party-$p.env" --profile cpu "$@"
}
cleanup() {
    if [ "${PIRQ_SMOKE_KEEP:-0}" = 1 ]; then
        log "left running (PIRQ_SMOKE_KEEP=1): projects pirq-smoke-a, pirq-smoke-b; data in $work"
        return
    fi
    for p in a b; do party "$p" down -v --remove-orphans >/dev/null 2>&1 || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# ---- build and start -----------------------------------------------------------------------------
services=(redis db-init gateway worker-cpu prometheus)
[ "$network" = host ] && services+=(worker-cpu2)
scale=()
[ "$network" = bridge ] && scale=(--scale worker-cpu=2)
if docker image inspect "${PIRQ_GRAFANA_IMAGE:-grafana/grafana:12.1.0}" >/dev/null 2>&1; then
    export GRAFANA_ADMIN_PASSWORD
    GRAFANA_ADMIN_PASSWORD=${GRAFANA_ADMIN_PASSWORD:-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')}
    services+=(grafana)
else
    log "Grafana: no image ${PIRQ_GRAFANA_IMAGE:-grafana/grafana:12.1.0} here (Debian has no package to build one from); the stacks run without it"
fi
t=$(date +%s)
party a build gateway db-init worker-cpu >&2
log "images built in $(($(date +%s) - t)) s (BINARIES=$PIRQ_BINARIES)"
for p in a b; do
    party "$p" up -d "${scale[@]}" "${services[@]}" >&2
done

port() { grep "^$2=" "ops/party-$1.env" | cut -d= -f2; }
wait_ready() { # url seconds
    local deadline=$(($(date +%s) + $2))
    until curl -fs --cacert "$CA" -o /dev/null "$1"; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 2
    done
}
for p in a b; do
    url=https://127.0.0.1:$(port "$p" PIRQ_GATEWAY_PORT)
    wait_ready "$url/readyz" 300 || {
        party "$p" ps >&2
        party "$p" logs --tail 40 >&2
        fail "party $p: $url/readyz not 200 within 300 s"
    }
    log "party $p ready at $url"
done
A=https://127.0.0.1:$(port a PIRQ_GATEWAY_PORT)
B=https://127.0.0.1:$(port b PIRQ_GATEWAY_PORT)
ADMIN_A=http://127.0.0.1:$(port a PIRQ_ADMIN_PORT)
ADMIN_B=http://127.0.0.1:$(port b PIRQ_ADMIN_PORT)

# ---- the public port: HTTPS only, no admin route, no /metrics; the admin listener has both ------------
code() { curl -s -o /dev/null -w '%{http_code}' --cacert "$CA" -m 5 "$@"; }
for p in a b; do
    pub=https://127.0.0.1:$(port "$p" PIRQ_GATEWAY_PORT)
    adm=http://127.0.0.1:$(port "$p" PIRQ_ADMIN_PORT)
    plain=http://127.0.0.1:$(port "$p" PIRQ_GATEWAY_PORT)
    if curl -fsS -o /dev/null -m 5 "$plain/v1/info" 2>/dev/null; then fail "party $p: plain HTTP answered on the public port"; fi
    # Without the CA, the party's certificate is not trusted.
    if curl -fsS -o /dev/null -m 5 "$pub/v1/info" 2>/dev/null; then fail "party $p: its certificate verified without the CA"; fi
    [ "$(code "$pub/metrics")" = 404 ] || fail "party $p: /metrics on the public port answered $(code "$pub/metrics")"
    [ "$(code -X POST "$pub/v1/admin/epochs")" = 404 ] || fail "party $p: the admin route is on the public port"
    [ "$(code "$adm/metrics")" = 200 ] || fail "party $p: /metrics on the admin listener answered $(code "$adm/metrics")"
    log "party $p: HTTPS on the public port (plain HTTP refused, /metrics and the admin route 404); /metrics on the admin listener"
done

# ---- private queries, verified -----------------------------------------------------------------------
# `pirq get` prints one line per key: the value in hex, or `absent`.
check_get() { # records-file label
    local keys=() want=() got
    mapfile -t keys < <(python3 -c 'import json,sys; [print(json.loads(l)["key"]) for l in list(open(sys.argv[1]))[:40:8]]' "$1")
    mapfile -t want < <(python3 -c 'import json,sys; [print(json.loads(l)["value"]) for l in list(open(sys.argv[1]))[:40:8]]' "$1")
    local args=()
    for k in "${keys[@]}"; do args+=(--key "$k"); done
    got=$("$PIRQ" get --party-a "$A" --party-b "$B" --ca-cert "$CA" "${args[@]}")
    [ "$got" = "$(printf '%s\n' "${want[@]}")" ] || fail "$2: pirq get answered
$got
expected
$(printf '%s\n' "${want[@]}")"
    log "$2: pirq get: ${#keys[@]} keys, every value as in the records"
}
"$PIRQ" query --party-a "$A" --party-b "$B" --ca-cert "$CA" --index 0 --index $((pages / 2)) --index $((pages - 1)) \
    --verify "$PIRQ_DATA/kv.pirdb" >/dev/null || fail "epoch 0: pirq query --verify"
log "epoch 0: pirq query over HTTPS: 3 pages equal to the database file's"
check_get "$work/records.jsonl" "epoch 0"

# ---- an epoch: change 5 values, push to both, check again ----------------------------------------------
python3 - "$work/records.jsonl" "$work/changes.jsonl" "$work/records-1.jsonl" <<'PY'
import json, sys
records = [json.loads(l) for l in open(sys.argv[1])]
changed = {}
for r in records[:40:8]:
    changed[r["key"]] = "ee" * 32
with open(sys.argv[2], "w") as f:
    for k, v in changed.items():
        f.write(json.dumps({"key": k, "value": v}) + "\n")
with open(sys.argv[3], "w") as f:
    for r in records:
        f.write(json.dumps({"key": r["key"], "value": changed.get(r["key"], r["value"])}) + "\n")
PY
"$PIRQ" kv update --db "$PIRQ_DATA/kv.pirdb" --changes "$work/changes.jsonl" --epoch 1 --out "$work/e1.json" >/dev/null
"$PIRQ" db apply --db "$PIRQ_DATA/kv.pirdb" --update "$work/e1.json" --out "$work/kv-e1.pirdb" >/dev/null
for url in "$ADMIN_A" "$ADMIN_B"; do
    "$PIRQ" epoch push --party "$url" --from "$work/e1.json" >/dev/null || fail "epoch push to $url"
done
newest() { curl -fsS --cacert "$CA" "$1/v1/info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["epoch"]["newest"])'; }
deadline=$(($(date +%s) + 60))
until [ "$(newest "$A")" = 1 ] && [ "$(newest "$B")" = 1 ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "the parties did not reach epoch 1"
    sleep 1
done
wait_ready "$A/readyz" 60 && wait_ready "$B/readyz" 60 || fail "not ready at epoch 1"
log "epoch 1 pushed to both parties' admin listeners"
"$PIRQ" query --party-a "$A" --party-b "$B" --ca-cert "$CA" --index 0 --index $((pages / 2)) --index $((pages - 1)) \
    --verify "$work/kv-e1.pirdb" >/dev/null || fail "epoch 1: pirq query --verify"
log "epoch 1: pirq query: 3 pages equal to the snapshot's (pirq db apply)"
check_get "$work/records-1.jsonl" "epoch 1"

# ---- certificate rotation: party A's files renewed in place, SIGHUP, served without a restart ------
served_fp() { # https-base-url -> SHA-256 fingerprint of the certificate the party presents
    openssl s_client -connect "${1#https://}" -servername localhost </dev/null 2>/dev/null |
        openssl x509 -noout -fingerprint -sha256
}
file_fp() { openssl x509 -in "$1" -noout -fingerprint -sha256; }
[ "$(served_fp "$A")" = "$(file_fp "$work/tls/party-a/cert.pem")" ] || fail "party A does not serve its certificate"
gw_a=$(party a ps -q gateway)
started=$(docker inspect -f '{{.State.StartedAt}}' "$gw_a")
ops/compose/certs.sh "$work/tls" party-a-renewed 2>/dev/null
# Overwritten in place (the directory is what the container mounts); the key keeps its owner.
cp "$work/tls/party-a-renewed/key.pem" "$work/tls/party-a/key.pem"
cp "$work/tls/party-a-renewed/cert.pem" "$work/tls/party-a/cert.pem"
party a kill -s SIGHUP gateway >&2
deadline=$(($(date +%s) + 30))
until [ "$(served_fp "$A")" = "$(file_fp "$work/tls/party-a/cert.pem")" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "party A still serves its old certificate 30 s after SIGHUP"
    sleep 1
done
[ "$(docker inspect -f '{{.State.StartedAt}}' "$gw_a")" = "$started" ] || fail "party A's gateway restarted on SIGHUP"
check_get "$work/records-1.jsonl" "after rotation"
log "party A: certificate renewed in place and re-read on SIGHUP (docker-compose kill -s SIGHUP), no restart"

# ---- monitoring ------------------------------------------------------------------------------------
prom_query() { # base query -> JSON result array
    curl -fsS --get "$1/api/v1/query" --data-urlencode "query=$2" |
        python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["data"]["result"]))'
}
for p in a b; do
    prom=http://127.0.0.1:$(port "$p" PROMETHEUS_PORT)
    deadline=$(($(date +%s) + 90))
    while :; do
        gw=$(prom_query "$prom" 'sum(up{job="pirq-gateway"})' | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r[0]["value"][1] if r else 0)')
        wk=$(prom_query "$prom" 'sum(up{job="pirq-worker"})' | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r[0]["value"][1] if r else 0)')
        ready=$(prom_query "$prom" 'sum(pirq_worker_ready)' | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r[0]["value"][1] if r else 0)')
        answered=$(prom_query "$prom" 'sum(pirq_worker_jobs_completed_total)' | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r[0]["value"][1] if r else 0)')
        [ "$gw" = 1 ] && [ "$wk" = 2 ] && [ "$ready" = 2 ] && [ "$answered" != 0 ] && break
        [ "$(date +%s)" -lt "$deadline" ] || fail "party $p: Prometheus sees gateway up=$gw, workers up=$wk, ready=$ready, jobs completed=$answered"
        sleep 3
    done
    rules=$(curl -fsS "$prom/api/v1/rules" | python3 -c 'import json,sys; print(sum(len(g["rules"]) for g in json.load(sys.stdin)["data"]["groups"]))')
    [ "$rules" -gt 0 ] || fail "party $p: Prometheus has no alert rules loaded"
    log "party $p: Prometheus scrapes the gateway's admin listener and 2 workers (up, ready, $answered jobs completed), $rules alert rules loaded"
    # Docker's own health check of the gateway and each worker (their /readyz; every 10 s, the
    # first one 10 s after the start).
    for c in $(party "$p" ps -q gateway) $(party "$p" ps -q worker-cpu) $(party "$p" ps -q worker-cpu2 2>/dev/null); do
        deadline=$(($(date +%s) + 60))
        until [ "$(docker inspect -f '{{.State.Health.Status}}' "$c")" = healthy ]; do
            [ "$(date +%s)" -lt "$deadline" ] ||
                fail "party $p: container ${c:0:12} is $(docker inspect -f '{{.State.Health.Status}}' "$c")"
            sleep 2
        done
    done
    log "party $p: Docker reports the gateway and every worker healthy"
    # Normal operation logs no WARN or ERROR line (a refused plain-HTTP or untrusted client above
    # is a failed handshake: counted, logged at debug).
    for c in $(party "$p" ps -q gateway worker-cpu) $(party "$p" ps -q worker-cpu2 2>/dev/null); do
        bad=$(docker logs "$c" 2>&1 | grep -E '^[0-9TZ:.-]+ +(WARN|ERROR) ' || true)
        [ -z "$bad" ] || fail "party $p: container ${c:0:12} logged
$bad"
    done
    log "party $p: no WARN or ERROR line in the gateway's and the workers' logs"
done
log "passed in $(($(date +%s) - start)) s ($COMPOSE, network $network, images $images, binaries $PIRQ_BINARIES, HTTPS)"
