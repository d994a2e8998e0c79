#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this). Needs only the Rust toolchain
# and root (or sudo) to install redis-server if it is missing.
#
#   1. formatting and lints (also of the CUDA backend, which builds without CUDA installed),
#      `cargo doc` with broken intra-doc links denied, `cargo package` of the publishable crates,
#      and the ops checks (docker-compose schema, Dockerfile lint, dashboard vs metrics catalog)
#   2. unit, property and end-to-end tests (real redis-server, gateway and worker processes),
#      from one release build: the end-to-end tests, the TypeScript client's and the soak run the
#      binaries of that build (the tests' feature set; see "tests: build" below)
#   3. the tests whose code path depends on the Redis version again, against Redis 7.4: the
#      `--durability fsync` ones (WAITAOF there, `appendfsync always` on Debian's 7.0) and
#      `--durability replica`. The other fault, recovery and slow-client tests run against 7.0
#      only (until 2026-11-28 they ran against both; nothing in their paths asks the version)
#   4. the TypeScript client (clients/ts): the spec's vectors, then Node and headless Chromium
#      against real parties (needs Node >= 20, npm and chromium: install-deps.sh gets them);
#      then ethers v6 reading Ethereum state through `pirq eth serve` (tests/eth, seconds)
#   5. a 1-minute soak: two parties under load through two worker kills, a Redis restart and
#      epoch pushes, every answer verified (ops/soak.sh). PIRQ_SOAK_MINUTES=2 runs the 2-minute
#      soak the suite ran until 2026-11-28 (the 30-minute run is docs/bench/soak.md)
#   6. a bounded fuzz run of the key and .pirdb header parsers
#   7. with PIRQ_COMPOSE_SMOKE=1 only: the compose stack built and brought up for real, two
#      parties, verified queries over HTTPS (ops/compose/smoke.sh: needs a Docker engine; image
#      builds take minutes). Without it the suite says that it skipped it.
#   8. with PIRQ_CLUSTER_TESTS=1 only (in step 2): with each party on a 3-primary Redis Cluster and
#      its queue in 4 partitions spread over the primaries, kv lookups, a worker killed under
#      load, pages (one_slot.rs), and every test of the epochs and shards suites; and a cluster
#      primary killed under load (its replica promoted, nothing lost), and Redis commands a query
#      counted on the cluster (tests/tests/e2e/host_path.rs). Pages, epochs and shards on a
#      3-primary cluster with one partition always run (tests/tests/e2e/one_slot.rs). Without it
#      the suite says that it skipped them.
#
# Each stage prints its seconds as it ends, and the run closes with all of them ("stage times").
# GPU tests are skipped here (no GPU); scripts/gpu-test.sh runs them on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."

# No incremental state: a run builds each tree once, and incremental caches only cost it disk
# (about 3 GiB of the ~8 GiB a whole run leaves in target/; CI's stop 44 failed on a full disk)
# and write time. A developer's own cargo commands keep theirs.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# Stage times: `stage NAME` ends the stage before it (a `-- NAME: N s` line) and starts NAME; the
# run ends, passed or failed, with every stage's seconds, so a CI log shows where the time went.
stage_times=()
stage_name=""
stage() {
    if [ -n "$stage_name" ]; then
        local took=$((SECONDS - stage_started))
        stage_times+=("$(printf '%6d s  %s' "$took" "$stage_name")")
        echo "-- $stage_name: $took s"
    fi
    stage_name=${1:-}
    stage_started=$SECONDS
    if [ -n "$stage_name" ]; then echo "== $stage_name"; fi
}
stage_report() {
    stage ""
    echo "== stage times"
    printf '%s\n' "${stage_times[@]}"
    printf '%6d s  whole suite\n' "$SECONDS"
}
log=$(mktemp)
ts_log=$(mktemp)
eth_log=$(mktemp)
trap 'stage_report; rm -f "$log" "$ts_log" "$eth_log"' EXIT

stage "dependencies (install-deps.sh)"
scripts/install-deps.sh

stage "fmt"
cargo fmt --all --check

stage "clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

stage "clippy, CUDA backend (builds without CUDA installed)"
# The whole workspace with the CUDA features on, in one invocation: features resolve as in the
# plain run above, so only the crates the features change are checked again (per-package runs
# resolved their own features and checked shared dependencies once more each).
cargo clippy --workspace --all-targets --locked \
    --features pirq-scan/cuda,pirq-worker/cuda,pirq-cli/cuda -- -D warnings

# Every intra-doc link resolves (a renamed or removed item leaves none dangling in the docs).
stage "cargo doc (broken intra-doc links denied)"
RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links" cargo doc --workspace --no-deps --locked --quiet

# The publishable crates package cleanly (versions on every path dependency, files in place).
# `cargo package --workspace`, unlike `cargo publish --workspace`, does not skip `publish = false`
# members, so the two test-only ones are excluded; --no-verify skips the build of each package
# (minutes; the full check without it is in client/README.md), offline, from Cargo.lock.
stage "cargo package (publishable crates, no build)"
cargo package --workspace --exclude pirq-e2e --exclude pirq-testkit \
    --no-verify --no-metadata --allow-dirty --locked --offline --quiet

stage "ops: compose schema, Dockerfile lint, image paths, dashboard vs metrics catalog, alert rules"
# install-deps.sh installed promtool: the alert rules' tests must run, not be skipped.
PIRQ_REQUIRE_PROMTOOL=1 scripts/check-ops.sh

# One release build for every stage after it: the tests, and the binaries that the end-to-end
# tests, the TypeScript client's tests and the soak start (PIRQ_E2E_BIN_DIR, PIRQ_BIN_DIR), in
# the tests' feature set. Built apart (`cargo build -p pirq-gateway ...`, as each of those does on
# its own), they resolve other features (no tokio test-util, no reqwest http2 of the TLS suite's
# client) and rebuild most of the dependency tree, once for each; and so does a `cargo test -p`.
stage "tests: build (release)"
cargo build --workspace --release --locked --bins --tests --examples
export PIRQ_E2E_BIN_DIR="$PWD/target/release" PIRQ_BIN_DIR="$PWD/target/release"

stage "tests: unit, property and end-to-end"
cargo test --workspace --release --locked 2>&1 | tee "$log"
passed=$(grep -o '^test result: .*' "$log" | grep -o '[0-9]* passed' | awk '{s += $1} END {print s + 0}')
failed=$(grep -o '^test result: .*' "$log" | grep -o '[0-9]* failed' | awk '{s += $1} END {print s + 0}')

# Redis 7.4 for the tests whose path depends on the server's version: `--durability fsync`
# takes the WAITAOF path there (7.0 has none: `appendfsync always` is checked instead), and
# `--durability replica` (WAIT) on the newer replication. `--workspace --test e2e`, not `-p`:
# the same build as above, nothing recompiled.
stage "durability tests again, against Redis 7.4"
redis74=$(scripts/install-redis74.sh)
PIRQ_REDIS_SERVER="$PWD/$redis74" cargo test --workspace --release --locked --test e2e -- \
    fsync replica_durability:: 2>&1 | tee -a "$log"
passed=$(grep -o '^test result: .*' "$log" | grep -o '[0-9]* passed' | awk '{s += $1} END {print s + 0}')
failed=$(grep -o '^test result: .*' "$log" | grep -o '[0-9]* failed' | awk '{s += $1} END {print s + 0}')

stage "TypeScript client: spec vectors, Node and headless Chromium against real parties"
(cd clients/ts && npm ci --no-audit --no-fund --loglevel=error && npm test) 2>&1 | tee "$ts_log"
passed=$((passed + $(grep -o '^# pass [0-9]*' "$ts_log" | awk '{s += $3} END {print s + 0}')))
failed=$((failed + $(grep -o '^# fail [0-9]*' "$ts_log" | awk '{s += $3} END {print s + 0}')))

stage "ethers v6 through pirq eth serve in front of two real parties (tests/eth)"
(cd tests/eth && npm ci --no-audit --no-fund --loglevel=error && npm test) 2>&1 | tee "$eth_log"
passed=$((passed + $(grep -o '^# pass [0-9]*' "$eth_log" | awk '{s += $3} END {print s + 0}')))
failed=$((failed + $(grep -o '^# fail [0-9]*' "$eth_log" | awk '{s += $3} END {print s + 0}')))

# A minute by default: worker kills at 15 and 30 s, party A's Redis restarted at 20 s, an epoch
# every 5 s (ops/soak.sh's schedule for a run under 2 minutes).
soak_minutes=${PIRQ_SOAK_MINUTES:-1}
stage "soak, $soak_minutes min: worker kills, a Redis restart, epoch pushes, every answer verified"
if ops/soak.sh "$soak_minutes"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi

stage "fuzz"
scripts/fuzz.sh "${PIRQ_FUZZ_SECONDS:-20}"

stage "compose smoke"
if [ "${PIRQ_COMPOSE_SMOKE:-0}" = 1 ]; then
    if ops/compose/smoke.sh; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
else
    echo "compose smoke: SKIPPED (it builds images and starts two stacks for minutes);" \
        "run it with PIRQ_COMPOSE_SMOKE=1 scripts/test.sh, or ops/compose/smoke.sh"
fi

stage "Redis Cluster: kv, a worker killed, epochs, shards, four partitions, a primary failing over"
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
