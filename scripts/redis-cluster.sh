#!/usr/bin/env bash
# A real local Redis Cluster on 127.0.0.1, for trying pirq on a cluster, tests and benches:
# N primaries with R replicas each (`redis-server --cluster-enabled yes`), no persistence, in one
# directory. The script joins the nodes itself (`CLUSTER ADDSLOTSRANGE`, `CLUSTER MEET`,
# `CLUSTER REPLICATE`, as `redis-cli --cluster create` does), so any number of primaries works
# (1 and 2 too, which `redis-cli --cluster create` refuses) and slots can be placed.
#
#   scripts/redis-cluster.sh start [--primaries N] [--replicas R] [--port P] [--dir D]
#                                  [--place-tags "T0 T1 ..."] [--cpus LIST]
#       starts N x (1 + R) nodes on ports P, P+1, ... (primaries first, then the replicas of
#       primary 0, 1, ...; cluster bus on port + 10000), waits until every node says
#       cluster_state:ok and every replica has synced, and prints the URL to give --redis, e.g.
#       redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
#       (defaults: 3 primaries, 0 replicas, port 7000, dir ${TMPDIR:-/tmp}/pirq-redis-cluster-PORT)
#   scripts/redis-cluster.sh url  [--port P] [--dir D]   prints the URL of a running one
#   scripts/redis-cluster.sh stop [--port P] [--dir D]   stops every node (SIGTERM, then waits)
#                                                        and removes the directory
#
# Slots: each primary gets an equal range of the 16384 slots, except that with `--place-tags`
# the slot of hash tag Ti (`{Ti}`, e.g. a party's partitions: "pirq pirq:1 pirq:2 pirq:3") goes
# to primary i mod N, so that partition p of a party sits on primary p mod N (a slot two tags
# share is reported on stderr and stays with the first). `--cpus LIST` (taskset syntax, e.g.
# 0-3 or 0,2,4) pins node i, every thread of it, to the (i mod length)-th CPU of LIST.
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
place_tags=
cpus=
while [ $# -gt 0 ]; do
    case "$1" in
        --primaries) primaries=$2; shift 2 ;;
        --replicas) replicas=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --dir) dir=$2; shift 2 ;;
        --node-timeout) node_timeout=$2; shift 2 ;;
        --place-tags) place_tags=$2; shift 2 ;;
        --cpus) cpus=$2; shift 2 ;;
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

# cpu_list LIST: the CPUs of a taskset list (0-3,8 -> 0 1 2 3 8), one a line
cpu_list() {
    local part
    for part in ${1//,/ }; do
        if [[ "$part" == *-* ]]; then seq "${part%-*}" "${part#*-}"; else echo "$part"; fi
    done
}

# slot_owners N TAGS...: which primary (0..N-1) serves each of the 16384 slots, one a line:
# equal ranges, then the slot of each tag Ti moved to primary i mod N
slot_owners() {
    local n=$1 i=0 slot tag
    shift
    local -A placed=()
    for tag in "$@"; do
        slot=$("$cli" -h 127.0.0.1 -p "$port" cluster keyslot "{$tag}")
        if [ -n "${placed[$slot]:-}" ]; then
            echo "redis-cluster.sh: tags {${placed[$slot]%%=*}} and {$tag} share slot $slot;" \
                "both stay on primary ${placed[$slot]#*=}" >&2
        else
            placed[$slot]="$tag=$((i % n))"
        fi
        i=$((i + 1))
    done
    for slot in $(seq 0 16383); do
        if [ -n "${placed[$slot]:-}" ]; then
            echo "${placed[$slot]#*=}"
        else
            echo $((slot * n / 16384))
        fi
    done
}

start() {
    if [ "$primaries" -lt 1 ] || [ "$primaries" -gt 16384 ]; then
        echo "redis-cluster.sh: --primaries must be 1 to 16384" >&2
        exit 2
    fi
    if [ -n "$(node_ports)" ]; then
        echo "redis-cluster.sh: $dir already holds a cluster (stop it first: $0 stop --port $port)" >&2
        exit 1
    fi
    command -v "$server" >/dev/null || { echo "redis-cluster.sh: $server not found (scripts/install-deps.sh)" >&2; exit 1; }
    local count=$((primaries * (1 + replicas)))
    local nodes=() cpu_of=()
    [ -z "$cpus" ] || mapfile -t cpu_of < <(cpu_list "$cpus")
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
    local i=0
    for n in "${nodes[@]}"; do
        local up=
        for _ in $(seq 100); do
            "$cli" -h 127.0.0.1 -p "${n#*:}" ping >/dev/null 2>&1 && up=1 && break
            sleep 0.1
        done
        [ -n "$up" ] || { echo "redis-cluster.sh: node $n did not start (see $dir/node-${n#*:}/redis.log)" >&2; stop; exit 1; }
        if [ ${#cpu_of[@]} -gt 0 ]; then
            taskset -a -p -c "${cpu_of[$((i % ${#cpu_of[@]}))]}" "$(cat "$dir/node-${n#*:}/redis.pid")" >/dev/null ||
                echo "redis-cluster.sh: could not pin node $n to CPU ${cpu_of[$((i % ${#cpu_of[@]}))]}; it runs unpinned" >&2
        fi
        i=$((i + 1))
    done
    # Slots to the primaries, in ranges; a distinct config epoch each (as redis-cli does), then
    # every node meets node 0.
    local owners
    # shellcheck disable=SC2086 # place_tags is a list of words
    owners=$(slot_owners "$primaries" $place_tags)
    for i in $(seq 0 $((primaries - 1))); do
        local p=$((port + i)) ranges
        ranges=$(echo "$owners" | awk -v me="$i" '
            $1 == me { if (start < 0) start = NR - 1; last = NR - 1; next }
            start >= 0 { printf "%d %d ", start, last; start = -1 }
            BEGIN { start = -1 } END { if (start >= 0) printf "%d %d", start, last }')
        # shellcheck disable=SC2086 # ranges is a list of slot numbers
        "$cli" -h 127.0.0.1 -p "$p" cluster addslotsrange $ranges >/dev/null
    done
    for i in $(seq 0 $((count - 1))); do
        "$cli" -h 127.0.0.1 -p "$((port + i))" cluster set-config-epoch $((i + 1)) >/dev/null
        [ "$i" -eq 0 ] || "$cli" -h 127.0.0.1 -p "$((port + i))" cluster meet 127.0.0.1 "$port" >/dev/null
    done
    # Replicas: replica j of primary i is node primaries + i * replicas + j, once it knows its
    # primary through the cluster bus.
    for i in $(seq 0 $((primaries - 1))); do
        local id
        id=$("$cli" -h 127.0.0.1 -p "$((port + i))" cluster myid)
        for j in $(seq 0 $((replicas - 1))); do
            local rp=$((port + primaries + i * replicas + j)) ok=
            for _ in $(seq 300); do
                if "$cli" -h 127.0.0.1 -p "$rp" cluster replicate "$id" 2>/dev/null | grep -q '^OK'; then
                    ok=1
                    break
                fi
                sleep 0.1
            done
            [ -n "$ok" ] || { echo "redis-cluster.sh: node 127.0.0.1:$rp could not replicate 127.0.0.1:$((port + i))" >&2; stop; exit 1; }
        done
    done
    # Every node serving, knowing every node, and every replica holding its primary's data (a
    # replica that never synced is never promoted).
    for n in "${nodes[@]}"; do
        local ok=
        for _ in $(seq 300); do
            if "$cli" -h 127.0.0.1 -p "${n#*:}" cluster info 2>/dev/null |
                grep -q -e '^cluster_state:ok' &&
                [ "$("$cli" -h 127.0.0.1 -p "${n#*:}" cluster info | tr -d '\r' |
                    awk -F: '$1 == "cluster_known_nodes" {print $2}')" = "$count" ] &&
                ! "$cli" -h 127.0.0.1 -p "${n#*:}" info replication 2>/dev/null |
                    grep -q -e '^master_link_status:down' -e '^master_sync_in_progress:1'; then
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
    *) echo "usage: $0 start|url|stop [--primaries N] [--replicas R] [--port P] [--dir D] [--node-timeout MS] [--place-tags TAGS] [--cpus LIST]" >&2; exit 2 ;;
esac
