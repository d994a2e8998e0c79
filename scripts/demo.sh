#!/usr/bin/env bash
# The pirq demo, end to end on this machine:
#   builds everything (release), installs redis-server if missing, makes a small database,
#   makes a throwaway CA and one TLS certificate per party (ops/compose/certs.sh, openssl),
#   starts two parties over HTTPS (each: its own redis-server, certificate, pirq-gateway and
#   pirq-worker), the client trusting the CA with --ca-cert (PIRQ_CA_CERT),
#   fetches pages privately with `pirq query` (answers held by the parties with `Prefer: wait`, polling, bincode), checks every page
#   against the database file with dd + cmp, looks a page up through the TypeScript client's
#   demo page in headless Chromium, prints the latency; the same parties serve a key-value
#   database as a second table (`--table users=FILE` beside the page database, one worker each):
#   keys looked up with `pirq get --table users` (present, absent, and after an update by key
#   pushed to that table alone), shows the database digest and the mistakes the client
#   refuses (the same party twice, plain HTTP to a remote party), serves the database as two
#   page-range shards, answers a wallet's eth_getBalance privately from a tiny Ethereum state
#   (pirq eth import / serve, docs/eth.md) before and after a block that deletes the account,
#   and cleans up on exit.
#
#   scripts/demo.sh                       # 16384 pages of 4096 B (64 MiB)
#   PIRQ_DEMO_PAGES=65536 scripts/demo.sh # 256 MiB
#
# Ports: 127.0.0.1, from PIRQ_DEMO_PORT_BASE (default 17300) upwards.
set -euo pipefail
cd "$(dirname "$0")/.."

pages=${PIRQ_DEMO_PAGES:-16384}
page_size=4096
base=${PIRQ_DEMO_PORT_BASE:-17300}

scripts/install-deps.sh >/dev/null

echo "== build (release): pirq-gateway, pirq-worker, pirq (the first build takes minutes; cargo shows its progress)"
cargo build --release -p pirq-gateway -p pirq-worker -p pirq-cli \
    --bin pirq-gateway --bin pirq-worker --bin pirq
bin=$PWD/target/release

work=$(mktemp -d "${TMPDIR:-/tmp}/pirq-demo.XXXXXX")
pids=()
cleanup() {
    local status=$?
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ "$status" -ne 0 ]; then
        echo "demo failed; last log lines:" >&2
        tail -n 5 "$work"/*.log >&2 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A port is taken when something accepts a connection on it.
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in $((base + 1)) $((base + 2)) $((base + 11)) $((base + 12)) $((base + 20)) $((base + 31)) $((base + 32)); do
    if port_busy "$p"; then
        echo "port $p is in use; set PIRQ_DEMO_PORT_BASE to a free range" >&2
        exit 1
    fi
done

# GET $2 over HTTPS on port $1, trusting only the demo's CA: the whole answer, head and body.
https_get() {
    printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" |
        timeout 5 openssl s_client -quiet -verify_return_error -CAfile "$ca" \
            -connect "127.0.0.1:$1" 2>/dev/null
}
# 200 from GET $2 on port $1?
http_ok() { https_get "$1" "$2" | head -n 1 | grep -q ' 200 '; }
redis_up() { redis-cli -p "$1" ping 2>/dev/null | grep -q PONG; }
wait_for() { # what, command...
    local what=$1
    shift
    for _ in $(seq 1 300); do
        if "$@"; then return 0; fi
        sleep 0.1
    done
    echo "timed out waiting for $what" >&2
    return 1
}

echo "== database: $pages pages of $page_size B ($(((pages * page_size) >> 20)) MiB)"
"$bin/pirq" db gen --pages "$pages" --page-size "$page_size" --seed 42 --out "$work/demo.pirdb" >/dev/null

echo "== key-value database: 20000 records with text keys, cuckoo-placed in pages (docs/spec/kv.md)"
# Records as users hold them: text keys, text values; the table records that, so lookups take
# the key as text and print the value as text, with no encoding flags.
awk 'BEGIN { for (i = 1; i <= 20000; i++) printf "{\"key\":\"user-%05d\",\"value\":\"profile of user %d\"}\n", i, i }' \
    >"$work/kv-records.jsonl"
head -n 2 "$work/kv-records.jsonl" | sed 's/^/   /'
"$bin/pirq" kv build --records "$work/kv-records.jsonl" --max-value-size 64 --seed 3 \
    --out "$work/kv.pirdb"
"$bin/pirq" kv get --db "$work/kv.pirdb" --key user-00042 | sed 's/^/   offline check: user-00042 -> /'

echo "== TLS: a throwaway CA and one certificate per party (each party its own key)"
ops/compose/certs.sh "$work/tls" a b 2>/dev/null
ca=$work/tls/ca.pem
# Every pirq command below trusts the demo's CA (the same as --ca-cert "$ca").
export PIRQ_CA_CERT=$ca
echo "   CA $ca; party a: $work/tls/a/cert.pem, party b: $work/tls/b/cert.pem"

admin_token=demo-admin-$RANDOM$RANDOM
# The demo page of the TypeScript client is served here; the gateways allow it (CORS).
web_origin=http://127.0.0.1:$((base + 20))
# start_gateway NAME REDIS_PORT GATEWAY_PORT [FLAGS...]: a pirq-gateway for prefix demo-NAME on the
# party's Redis, serving HTTPS with its party's certificate (a-sh: party a's) (log:
# gateway-NAME.log).
start_gateway() {
    local name=$1 rport=$2 gport=$3
    shift 3
    local cert=$work/tls/${name%%-*}
    PIRQ_ADMIN_TOKEN=$admin_token "$bin/pirq-gateway" --redis "redis://127.0.0.1:$rport" \
        --prefix "demo-$name" --listen "127.0.0.1:$gport" \
        --tls-cert "$cert/cert.pem" --tls-key "$cert/key.pem" "$@" >"$work/gateway-$name.log" 2>&1 &
    pids+=($!)
}
# start_worker NAME REDIS_PORT LOG DB [FLAGS...]: a pirq-worker for prefix demo-NAME serving DB
# as its table default (log: LOG.log); FLAGS may add tables (--table NAME=FILE).
start_worker() {
    local name=$1 rport=$2 log=$3 db=$4
    shift 4
    "$bin/pirq-worker" --redis "redis://127.0.0.1:$rport" --prefix "demo-$name" --db "$db" \
        --backend auto --threads 1 "$@" >"$work/$log.log" 2>&1 &
    pids+=($!)
}
start_party() { # name redis_port gateway_port
    local name=$1 rport=$2 gport=$3
    mkdir -p "$work/redis-$name"
    redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$work/redis-$name" \
        >"$work/redis-$name.log" 2>&1 &
    pids+=($!)
    wait_for "redis-server $name" redis_up "$rport"
    start_gateway "$name" "$rport" "$gport" --cors-origin "$web_origin"
    # One worker, two tables: the page database (the table default) and the key-value one.
    start_worker "$name" "$rport" "worker-$name" "$work/demo.pirdb" --table "users=$work/kv.pirdb"
    wait_for "party $name to be ready" http_ok "$gport" /readyz
    wait_for "party $name's table users" lists_table "$gport" users
    echo "party $name: https://127.0.0.1:$gport (redis on $rport; one worker, tables default and users)"
}
# Whether GET /v1/tables on port $1 lists the table $2.
lists_table() { https_get "$1" /v1/tables | grep -q "\"name\":\"$2\""; }
echo "== two parties, each serving two tables from one worker"
start_party a $((base + 1)) $((base + 11))
start_party b $((base + 2)) $((base + 12))
a=https://127.0.0.1:$((base + 11))
b=https://127.0.0.1:$((base + 12))

# Independent check: the page's bytes straight from the file (header is one 4096-byte block).
check_pages() { # dir index...
    local dir=$1
    shift
    for i in "$@"; do
        dd if="$work/demo.pirdb" bs="$page_size" skip=$((i + 1)) count=1 status=none |
            cmp -s - "$dir/page-$i.bin" || { echo "page $i differs from the database file" >&2; exit 1; }
    done
    echo "   dd + cmp: $# page(s) identical to the database file"
}

indices=(0 4242 $((pages - 1)) $((RANDOM % pages)) $((RANDOM % pages)))
index_args=()
for i in "${indices[@]}"; do index_args+=(--index "$i"); done

echo "== pirq query over HTTPS: ${#indices[@]} pages, each party holding its answer until it is ready (Prefer: wait)"
"$bin/pirq" query --party-a "$a" --party-b "$b" --ca-cert "$ca" "${index_args[@]}" --out "$work/held" \
    --verify "$work/demo.pirdb"
check_pages "$work/held" "${indices[@]}"

echo "== pirq query --poll --bincode"
"$bin/pirq" query --party-a "$a" --party-b "$b" "${index_args[@]}" --out "$work/poll" --poll --bincode \
    --verify "$work/demo.pirdb"
check_pages "$work/poll" "${indices[@]}"

echo "== the TypeScript client in headless Chromium: the demo page (clients/ts), page 4242"
(cd clients/ts && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build) >"$work/npm.log" 2>&1
# Chromium trusts the two party certificates (their keys), as a browser trusts a public CA.
trust=(--trust-cert "$work/tls/a/cert.pem" --trust-cert "$work/tls/b/cert.pem")
node clients/ts/dist/demo/headless.js --a "$a" --b "$b" --port $((base + 20)) --index 4242 \
    --db "$work/demo.pirdb" "${trust[@]}"

echo "== latency: 10 single-page queries, one after another"
for _ in $(seq 1 10); do
    i=$((RANDOM % pages))
    "$bin/pirq" query --party-a "$a" --party-b "$b" --index "$i" --out "$work/one" --verify "$work/demo.pirdb" | tail -n 1
done

echo "== epoch 1: 100 pages replaced on both parties, then queried at the new epoch"
"$bin/pirq" epoch make --db "$work/demo.pirdb" --epoch 1 --pages 100 --seed 7 --out "$work/epoch-1.json"
for party in "$a" "$b"; do
    PIRQ_ADMIN_TOKEN=$admin_token "$bin/pirq" epoch push --party "$party" --from "$work/epoch-1.json"
done
# The reference: a snapshot of the database at epoch 1, folded by the offline tool.
"$bin/pirq" db apply --db "$work/demo.pirdb" --update "$work/epoch-1.json" --out "$work/demo-1.pirdb"
newest_is() { https_get "$1" /v1/info | grep -q "\"newest\":$2[,}]"; }
wait_for "party a at epoch 1" newest_is $((base + 11)) 1
wait_for "party b at epoch 1" newest_is $((base + 12)) 1
# Some of the replaced pages, and the pages fetched before.
changed=$(grep -o '"index":[0-9]*' "$work/epoch-1.json" | head -n 5 | cut -d: -f2)
epoch_args=("${index_args[@]}")
for i in $changed; do epoch_args+=(--index "$i"); done
"$bin/pirq" query --party-a "$a" --party-b "$b" "${epoch_args[@]}" --out "$work/epoch1" \
    --verify "$work/demo-1.pirdb"
for i in $changed; do
    dd if="$work/demo.pirdb" bs="$page_size" skip=$((i + 1)) count=1 status=none |
        cmp -s - "$work/epoch1/page-$i.bin" && { echo "page $i did not change at epoch 1" >&2; exit 1; }
done
echo "   the replaced pages came back with their epoch-1 contents"

# The tables party $1 (a gateway port) lists, one line each: name, kind, pages, epochs.
show_tables() {
    https_get "$1" /v1/tables |
        grep -o '"name":"[^"]*","kind":"[^"]*","num_pages":[0-9]*,"page_size":[0-9]*,"epoch":{"oldest":[0-9]*,"newest":[0-9]*}' |
        sed 's/"name":"\([^"]*\)","kind":"\([^"]*\)","num_pages":\([0-9]*\),"page_size":\([0-9]*\),"epoch":{"oldest":\([0-9]*\),"newest":\([0-9]*\)}/   \1: \2, \3 pages of \4 B, epochs \5..\6/'
}
echo "== party a's tables (GET /v1/tables): the page table at epoch 1, the key-value one at 0"
show_tables $((base + 11))

echo "== key-value lookups in the table users, from the same two parties"
key=user-00042
value="profile of user 42"
missing=nobody
echo "   pirq get --table users --key $key --key $missing"
status=0
got=$("$bin/pirq" get --party-a "$a" --party-b "$b" --table users --key "$key" --key "$missing") || status=$?
echo "$got" | sed 's/^/   /'
[ "$status" -eq 1 ] && [ "$got" = "$value"$'\n'"absent" ] ||
    { echo "pirq get: expected the record's value, then absent (exit 1); got exit $status" >&2; exit 1; }
echo "   exit status 1 (a key was absent); the value is the record's"
echo "== kv epoch 1: change that key's value by key, push it to the table users alone, look it up again"
new="moved to Lisbon"
echo "{\"key\":\"$key\",\"value\":\"$new\"}" >"$work/kv-changes.jsonl"
"$bin/pirq" kv update --db "$work/kv.pirdb" --changes "$work/kv-changes.jsonl" --epoch 1 \
    --out "$work/kv-epoch-1.bin"
for party in "$a" "$b"; do
    PIRQ_ADMIN_TOKEN=$admin_token "$bin/pirq" epoch push --party "$party" --table users --from "$work/kv-epoch-1.bin"
done
table_newest_is() { https_get "$1" /v1/tables/users/info | grep -q "\"newest\":$2[,}]"; }
wait_for "party a's table users at epoch 1" table_newest_is $((base + 11)) 1
wait_for "party b's table users at epoch 1" table_newest_is $((base + 12)) 1
got=$("$bin/pirq" get --party-a "$a" --party-b "$b" --table users --key "$key")
[ "$got" = "$new" ] || { echo "pirq get after the update: got $got, expected $new" >&2; exit 1; }
echo "   $got (exit 0)"
echo "   party a's tables now: users moved to epoch 1, default stayed where it was"
show_tables $((base + 11))
echo "== the TypeScript client's demo page on the table users: the changed key, then the missing one"
node clients/ts/dist/demo/headless.js --a "$a" --b "$b" --table users --port $((base + 20)) \
    --key "$key" --expect "$(printf '%s' "$new" | od -An -tx1 | tr -d ' \n')" \
    --key "$missing" --expect absent "${trust[@]}"

echo "== guards: the database digest, and the mistakes the client refuses"
"$bin/pirq" db info "$work/demo-1.pirdb" | grep -o '"digest": *"[0-9a-f]*"' | sed 's/^/   epoch-1 snapshot /'
"$bin/pirq" db verify "$work/demo.pirdb" | sed 's/^/   /'
if out=$("$bin/pirq" query --party-a "$a" --party-b "$a" --index 1 --out "$work/same" 2>&1); then
    echo "pirq query accepted the same party twice" >&2; exit 1
fi
echo "   the same party as A and B: $(echo "$out" | tail -n 1)"
# Refused before any name is resolved: whoever sees both plain connections learns the index.
if out=$("$bin/pirq" query --party-a http://pir-a.example.invalid --party-b "$b" --index 1 \
    --out "$work/plain" 2>&1); then
    echo "pirq query accepted plain HTTP to a remote party" >&2; exit 1
fi
echo "   plain HTTP to a remote party: $(echo "$out" | tail -n 1)"

echo "== a sharded party pair: the database cut into 2 page-range shards, one worker each, partials XORed inside Redis"
"$bin/pirq" db split --shards 2 --out-dir "$work/shards" "$work/demo.pirdb" >/dev/null
start_sharded_party() { # name redis_port gateway_port
    local name=$1 rport=$2 gport=$3 i
    start_gateway "$name-sh" "$rport" "$gport"
    for i in 0 1; do
        start_worker "$name-sh" "$rport" "worker-$name-sh-$i" \
            "$work/shards/demo.shard-$i-of-2.pirdb" --shard "$i/2"
    done
    wait_for "sharded party $name to be ready" http_ok "$gport" /readyz
    echo "sharded party $name: https://127.0.0.1:$gport (prefix demo-$name-sh, shards 0/2 and 1/2)"
}
start_sharded_party a $((base + 1)) $((base + 31))
start_sharded_party b $((base + 2)) $((base + 32))
"$bin/pirq" query --party-a "https://127.0.0.1:$((base + 31))" --party-b "https://127.0.0.1:$((base + 32))" \
    "${index_args[@]}" --out "$work/sharded" --verify "$work/demo.pirdb"
check_pages "$work/sharded" "${indices[@]}"

echo "== Ethereum reads (docs/eth.md): a tiny state dump as three tables on the same parties, one eth_getBalance answered privately"
"$bin/pirq" eth gen --accounts 1000 --contract-every 10 --slots 4 --codes 8 --seed 7 --quiet \
    --out "$work/eth.jsonl"
"$bin/pirq" eth import --dump "$work/eth.jsonl" --out "$work/eth" --block 21000000 --quiet
for n in a b; do
    rport=$((base + 1)); gport=$((base + 11))
    [ $n = b ] && rport=$((base + 2)) && gport=$((base + 12))
    # One more worker on each party: the tables accounts, code and storage.
    "$bin/pirq-worker" --redis "redis://127.0.0.1:$rport" --prefix "demo-$n" --backend auto \
        --threads 1 --table "accounts=$work/eth/accounts.pirdb" --table "code=$work/eth/code.pirdb" \
        --table "storage=$work/eth/storage.pirdb" >"$work/worker-eth-$n.log" 2>&1 &
    pids+=($!)
    for t in accounts code storage; do wait_for "party $n's table $t" lists_table "$gport" "$t"; done
done
eth_port=$((base + 40))
"$bin/pirq" eth serve --party-a "$a" --party-b "$b" --listen "127.0.0.1:$eth_port" --chain-id 1 \
    >"$work/eth-serve.log" 2>&1 &
pids+=($!)
# The dump's second account: its address, and its balance as a JSON-RPC quantity.
account=$(sed -n 3p "$work/eth.jsonl")
address=$(echo "$account" | grep -o '"address":"0x[0-9a-f]*"' | cut -d'"' -f4)
want=$(node -e "console.log('0x' + BigInt(process.argv[1]).toString(16))" \
    "$(echo "$account" | grep -o '"balance":"[0-9]*"' | cut -d'"' -f4)")
call="{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_getBalance\",\"params\":[\"$address\",\"latest\"]}"
rpc_up() { curl -s -o /dev/null "http://127.0.0.1:$eth_port/" -H 'content-type: application/json' \
    -d '{"jsonrpc":"2.0","id":0,"method":"eth_chainId"}'; }
wait_for "pirq eth serve" rpc_up
echo "   curl http://127.0.0.1:$eth_port/ -d '$call'"
got=$(curl -s "http://127.0.0.1:$eth_port/" -H 'content-type: application/json' -d "$call")
echo "   $got"
echo "$got" | grep -q "\"result\":\"$want\"" ||
    { echo "eth_getBalance answered $got, the dump says $want" >&2; exit 1; }
echo "   the dump's balance of $address ($want): each party saw one lookup in each table, not the address"

echo "== The next block: that account deleted (its changes alone make one epoch on each table), read again"
printf '{"root":"0x%064x"}\n{"address":"%s","deleted":true}\n' 1 "$address" >"$work/eth-block.jsonl"
"$bin/pirq" eth import --base "$work/eth" --changes "$work/eth-block.jsonl" --block 21000001 \
    --update-out "$work/eth-21000001" --quiet
for party in "$a" "$b"; do
    for t in accounts code storage; do
        PIRQ_ADMIN_TOKEN=$admin_token "$bin/pirq" epoch push --party "$party" --table "$t" \
            --from "$work/eth-21000001/$t.update"
    done
done
block_is() { curl -s "http://127.0.0.1:$eth_port/" -H 'content-type: application/json' \
    -d '{"jsonrpc":"2.0","id":0,"method":"eth_blockNumber"}' | grep -q '"result":"0x1406f41"'; }
wait_for "pirq eth serve at block 21000001" block_is
got=$(curl -s "http://127.0.0.1:$eth_port/" -H 'content-type: application/json' -d "$call")
echo "   $got"
echo "$got" | grep -q '"result":"0x0"' ||
    { echo "eth_getBalance of the deleted account answered $got, not 0x0" >&2; exit 1; }
echo "   block 21000001 served: the deleted account reads 0x0, as a node answers"

echo "== demo passed"
