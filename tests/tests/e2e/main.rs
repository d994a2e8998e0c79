//! The end-to-end suite, one test binary: real `redis-server`, `pirq-gateway`, `pirq-worker` and
//! `pirq` processes, two parties on loopback. One module per subject; the harness and the helpers
//! the modules share (parties, the `pirq` tool, `/metrics` scraping, raw requests) are the
//! `pirq_e2e` library (tests/src).
//!
//! One binary rather than one per subject: each links the whole stack, so thirty of them cost
//! minutes of linking, and libtest keeps both cores busy across subjects instead of waiting for
//! the slowest test of each binary. Pick subjects with filters on the module path, e.g.
//! `cargo test --release -p pirq-e2e --test e2e -- faults:: recovery::`.
//!
//! Flags as before: `PIRQ_CLUSTER_TESTS=1` runs the Redis Cluster variants,
//! `PIRQ_E2E_BIN_DIR` uses prebuilt binaries, `PIRQ_REDIS_SERVER` another `redis-server`.

mod access;
mod admin_split;
mod architecture;
mod cluster_failover;
mod cors;
mod epochs;
mod errors;
mod eth;
mod eth_gen;
mod eth_signed;
mod faults;
mod flood;
mod fuzz_http;
mod guards;
mod host_path;
mod kv;
mod lifecycle;
mod one_slot;
mod openapi;
mod ops_metrics;
mod own_data;
mod partitions;
mod prefer_wait;
mod queries;
mod quiet_logs;
mod recovery;
mod redis_features;
mod rediss;
mod replica_durability;
mod shards;
mod signed;
mod slow_clients;
mod sustained;
mod tables;
mod tls;
mod worker_health;
