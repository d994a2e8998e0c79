#!/usr/bin/env bash
# A real local Redis Cluster on 127.0.0.1, for trying pirq on a cluster, tests and benches:
# N primaries with R replicas each (`redis-server --cluster-enabled yes`, joined by
# `redis-cli --cluster create --cluster-yes`), no persistence, in one directory.
#
#   scripts/redis-cluster.sh start [--primaries N] [--replicas R] [--port P] [--dir D]
#       starts N x (1 + R) nodes on ports P, P+1, ... (cluster bus on port + 10000), waits until
#       every node says cluster_state:ok, and prints the URL to give --redis, e.g.
#       redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
#       (defaults: 3 primaries, 0 replicas, port 7000, dir ${TMPDIR:-/tmp}/pirq-redis-cluster-PORT)
#   scripts/redis-cluster.sh url  [--port P] [--dir D]   prints the URL of a running one
#   scripts/redis-cluster.sh stop [--port P] [--dir D]   stops every node (SIGTERM, then waits)
#                                                        and removes the directory
#
# redis-server and redis-cli: $PIRQ_REDIS_SERVER (and the redis-cli beside it) when set, else
# those on PATH (scripts/install-deps.sh installs them). `--node-timeout MS` (default 2000) is
# how long a primary may be unreachable before one of its replicas is promoted.
set -euo pipefail

action=${1:-}
[ $# -gt 0 ] && shift
primaries=3
replicas=0
port=7000
dir=
node_timeout=2000
while [ $# -gt 0 ]; do
    case "$1" in
        --primaries) primaries=$2; shift 2 ;;
        --replicas) replicas=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --dir) dir=$2; shift 2 ;;
        --node-timeout) node_timeout=$2; shift 2 ;;
        *) echo "redis-cluster.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done
dir=${dir:-${TMPDIR:-/tmp}/pirq-redis-cluster-$port}
server=${PIRQ_REDIS_SERVER:-redis-server}
cli=redis-cli
if [ -n "${PIRQ_REDIS_SERVER:-}" ] && [ -x "$(dirname "$PIRQ_REDIS_SERVER")/redis-cli" ]; then
    cli="$(dirname "$PIRQ_REDIS_SERVER")/redis-cli"
fi

node_ports() {
    # The nodes this directory holds, from their directories' names.
    find "$dir" -mindepth 1 -maxdepth 1 -type d -name 'node-*' -printf '%f\n' 2>/dev/null |
        sed 's/^node-//' | sort -n
}

url() {
    local nodes=()
    for p in $(node_ports); do nodes+=("127.0.0.1:$p"); done
    if [ ${#nodes[@]} -eq 0 ]; then
        echo "redis-cluster.sh: no cluster in $dir" >&2
        exit 1
    fi
    local IFS=,
    echo "redis+cluster://${nodes[*]}"
}

stop() {
    local pids=()
    for p in $(node_ports); do
        local pidfile="$dir/node-$p/redis.pid"
        if [ -f "$pidfile" ]; then
            local pid
            pid=$(cat "$pidfile")
            if kill -TERM "$pid" 2>/dev/null; then pids+=("$pid"); fi
        fi
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    done
    rm -rf "$dir"
}

start() {
    if [ "$primaries" -lt 3 ]; then
        echo "redis-cluster.sh: a Redis Cluster needs at least 3 primaries" >&2
        exit 2
    fi
    if [ -n "$(node_ports)" ]; then
        echo "redis-cluster.sh: $dir already holds a cluster (stop it first: $0 stop --port $port)" >&2
        exit 1
    fi
    command -v "$server" >/dev/null || { echo "redis-cluster.sh: $server not found (scripts/install-deps.sh)" >&2; exit 1; }
    local count=$((primaries * (1 + replicas)))
    local nodes=()
    mkdir -p "$dir"
    for i in $(seq 0 $((count - 1))); do
        local p=$((port + i))
        mkdir -p "$dir/node-$p"
        "$server" --port "$p" --bind 127.0.0.1 --save '' --appendonly no \
            --cluster-enabled yes --cluster-node-timeout "$node_timeout" \
            --repl-diskless-sync-delay 0 \
            --cluster-config-file "$dir/node-$p/nodes.conf" --dir "$dir/node-$p" \
            --daemonize yes --pidfile "$dir/node-$p/redis.pid" --logfile "$dir/node-$p/redis.log"
        nodes+=("127.0.0.1:$p")
    done
    for n in "${nodes[@]}"; do
        for _ in $(seq 100); do
            "$cli" -h 127.0.0.1 -p "${n#*:}" ping >/dev/null 2>&1 && break
            sleep 0.1
        done
    done
    if ! "$cli" --cluster create "${nodes[@]}" --cluster-replicas "$replicas" --cluster-yes \
        >"$dir/create.log" 2>&1; then
        cat "$dir/create.log" >&2
        stop
        exit 1
    fi
    # Every node serving, and every replica holding its primary's data (a replica that never
    # synced is never promoted).
    for n in "${nodes[@]}"; do
        local ok=
        for _ in $(seq 300); do
            if "$cli" -h 127.0.0.1 -p "${n#*:}" cluster info 2>/dev/null | grep -q '^cluster_state:ok' &&
                ! "$cli" -h 127.0.0.1 -p "${n#*:}" info replication 2>/dev/null |
                    grep -q '^master_link_status:down'; then
                ok=1
                break
            fi
            sleep 0.1
        done
        if [ -z "$ok" ]; then
            echo "redis-cluster.sh: node $n did not reach cluster_state:ok" >&2
            stop
            exit 1
        fi
    done
    url
}

case "$action" in
    start) start ;;
    stop) stop ;;
    url) url ;;
    *) echo "usage: $0 start|url|stop [--primaries N] [--replicas R] [--port P] [--dir D] [--node-timeout MS]" >&2; exit 2 ;;
esac
