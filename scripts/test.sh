#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this). Needs only the Rust toolchain
# and root (or sudo) to install redis-server if it is missing.
#
#   1. formatting and lints (also of the CUDA backend, which builds without CUDA installed),
#      `cargo doc` with broken intra-doc links denied, `cargo package` of the publishable crates,
#      and the ops checks (docker-compose schema, Dockerfile lint, dashboard vs metrics catalog)
#   2. unit, property and end-to-end tests (real redis-server, gateway and worker processes)
#   3. the TypeScript client (clients/ts): the spec's vectors, then Node and headless Chromium
#      against real parties (needs Node >= 20, npm and chromium: install-deps.sh gets them);
#      then ethers v6 reading Ethereum state through `pirq eth serve` (tests/eth, seconds)
#   4. a 2-minute soak: two parties under load through worker kills, a Redis restart and epoch
#      pushes, every answer verified (ops/soak.sh; the 30-minute run is docs/bench/soak.md)
#   5. a bounded fuzz run of the key and .pirdb header parsers
#   6. with PIRQ_COMPOSE_SMOKE=1 only: the compose stack built and brought up for real, two
#      parties, verified queries over HTTPS (ops/compose/smoke.sh: needs a Docker engine; image
#      builds take minutes). Without it the suite says that it skipped it.
#   7. with PIRQ_CLUSTER_TESTS=1 only (in step 2): with each party on a 3-primary Redis Cluster and
#      its queue in 4 partitions spread over the primaries, kv lookups, a worker killed under
#      load, pages (one_slot.rs), and every test of the epochs and shards suites; and a cluster
#      primary killed under load (its replica promoted, nothing lost), and Redis commands a query
#      counted on the cluster (tests/tests/e2e/host_path.rs). Pages, epochs and shards on a
#      3-primary cluster with one partition always run (tests/tests/e2e/one_slot.rs). Without it
#      the suite says that it skipped them.
#
# GPU tests are skipped here (no GPU); scripts/gpu-test.sh runs them on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

echo "== fmt, clippy"
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy -p pirq-scan --all-targets --features cuda --locked -- -D warnings
cargo clippy -p pirq-worker -p pirq-cli --all-targets --features cuda --locked -- -D warnings

# Every intra-doc link resolves (a renamed or removed item leaves none dangling in the docs).
echo "== cargo doc (broken intra-doc links denied)"
RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links" cargo doc --workspace --no-deps --locked --quiet

# The publishable crates package cleanly (versions on every path dependency, files in place).
# `cargo package --workspace`, unlike `cargo publish --workspace`, does not skip `publish = false`
# members, so the two test-only ones are excluded; --no-verify skips the build of each package
# (minutes; the full check without it is in client/README.md), offline, from Cargo.lock.
echo "== cargo package (publishable crates, no build)"
cargo package --workspace --exclude pirq-e2e --exclude pirq-testkit \
    --no-verify --no-metadata --allow-dirty --locked --offline --quiet

echo "== ops: compose schema, Dockerfile lint, image paths, dashboard vs metrics catalog, alert rules"
# install-deps.sh installed promtool: the alert rules' tests must run, not be skipped.
PIRQ_REQUIRE_PROMTOOL=1 scripts/check-ops.sh

echo "== tests"
log=$(mktemp)
ts_log=$(mktemp)
eth_log=$(mktemp)
trap 'rm -f "$log" "$ts_log" "$eth_log"' EXIT
cargo test --workspace --release --locked 2>&1 | tee "$log"
passed=$(grep -o '^test result: .*' "$log" | grep -o '[0-9]* passed' | awk '{s += $1} END {print s + 0}')
failed=$(grep -o '^test result: .*' "$log" | grep -o '[0-9]* failed' | awk '{s += $1} END {print s + 0}')

# Redis 7.4 (WAITAOF: `--durability fsync` takes the WAITAOF path there) for the suites that
# depend most on the server: durability, faults, slow clients.
echo "== durability and fault suites again, against Redis 7.4"
redis74=$(scripts/install-redis74.sh)
PIRQ_REDIS_SERVER="$PWD/$redis74" cargo test --release --locked -p pirq-e2e --test e2e -- \
    faults:: slow_clients:: recovery:: replica_durability:: 2>&1 | tee -a "$log"
passed=$(grep -o '^test result: .*' "$log" | grep -o '[0-9]* passed' | awk '{s += $1} END {print s + 0}')
failed=$(grep -o '^test result: .*' "$log" | grep -o '[0-9]* failed' | awk '{s += $1} END {print s + 0}')

echo "== TypeScript client: spec vectors, Node and headless Chromium against real parties"
cargo build --release --locked --quiet -p pirq-gateway -p pirq-worker -p pirq-cli -p pirq-testkit \
    --bin pirq-gateway --bin pirq-worker --bin pirq --bin pirq-fake-party
(cd clients/ts && npm ci --no-audit --no-fund --loglevel=error && npm test) 2>&1 | tee "$ts_log"
passed=$((passed + $(grep -o '^# pass [0-9]*' "$ts_log" | awk '{s += $3} END {print s + 0}')))
failed=$((failed + $(grep -o '^# fail [0-9]*' "$ts_log" | awk '{s += $3} END {print s + 0}')))

echo "== ethers v6 through pirq eth serve in front of two real parties (tests/eth)"
(cd tests/eth && npm ci --no-audit --no-fund --loglevel=error && npm test) 2>&1 | tee "$eth_log"
passed=$((passed + $(grep -o '^# pass [0-9]*' "$eth_log" | awk '{s += $3} END {print s + 0}')))
failed=$((failed + $(grep -o '^# fail [0-9]*' "$eth_log" | awk '{s += $3} END {print s + 0}')))

echo "== soak, 2 minutes: worker kills, a Redis restart, epoch pushes, every answer verified"
if ops/soak.sh 2; then passed=$((passed + 1)); else failed=$((failed + 1)); fi

echo "== fuzz"
scripts/fuzz.sh "${PIRQ_FUZZ_SECONDS:-20}"

echo "== compose smoke"
if [ "${PIRQ_COMPOSE_SMOKE:-0}" = 1 ]; then
    if ops/compose/smoke.sh; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
else
    echo "compose smoke: SKIPPED (it builds images and starts two stacks for minutes);" \
        "run it with PIRQ_COMPOSE_SMOKE=1 scripts/test.sh, or ops/compose/smoke.sh"
fi

echo "== Redis Cluster: kv, a worker killed, epochs, shards, four partitions, a primary failing over"
if [ "${PIRQ_CLUSTER_TESTS:-0}" = 1 ]; then
    echo "Redis Cluster tests: ran with the tests above (PIRQ_CLUSTER_TESTS=1)"
else
    echo "Redis Cluster tests: SKIPPED (seven redis-servers a test, a failover: minutes);" \
        "run them with PIRQ_CLUSTER_TESTS=1 scripts/test.sh, or PIRQ_CLUSTER_TESTS=1 cargo test" \
        "--release -p pirq-e2e --test e2e -- kv:: faults:: cluster_failover:: one_slot:: epochs::" \
        "shards:: host_path::"
fi

# One closing line for the whole suite (the last `cargo test` block is the empty doc-tests).
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
