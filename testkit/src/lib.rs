//! Test support shared by the suites of several crates (a dev-dependency only; nothing ships
//! with it): the pieces that were written again in every suite that needs them.
//!
//! - [`Redis`]: a real `redis-server` on a free port in its own directory, `$PIRQ_REDIS_SERVER`
//!   when set (scripts/test.sh runs the durability and fault suites again with Redis 7.4), killed
//!   on drop;
//!   or a real Redis Cluster of several nodes ([`Redis::start_cluster`], `redis+cluster://`);
//! - [`Proc`]: a child process with its log file, killed on drop (the e2e harness runs its
//!   gateways and workers as these too);
//! - [`TestDb`]: a `.pirdb` file of deterministic synthetic pages in a temporary directory;
//! - [`jobs`]: entries written straight into a party's job stream, as a gateway would leave them
//!   or as no gateway ever would (poison);
//! - [`fake_party`]: a party that answers the HTTP API itself, honestly or with one chosen
//!   misbehaviour (silent, dribbling, huge, hostile), for client tests (`FAKE_PARTY.md`);
//! - [`tamper`]: a proxy in front of a real party that XORs bytes into the pages of its answers,
//!   keeping the digest stamp (a lying party, for the signed-answer tests);
//! - [`TestCa`]: a throwaway certificate authority and the certificates it signs, for tests
//!   over TLS (gateways, `rediss://`);
//! - [`gpu_tests_enabled`]: the `PIRQ_GPU_TESTS=1` switch of the GPU suites.

mod db;
pub mod fake_party;
pub mod jobs;
mod process;
mod redis_cluster;
mod redis_server;
pub mod tamper;
mod tls;

pub use db::TestDb;
pub use process::{free_port, Proc};
pub use redis_cluster::{ClusterNode, ClusterNodes, ClusterShape, NODE_TIMEOUT_MS};
pub use redis_server::{cluster_mode_from_env, redis_cli, redis_server, Redis, RedisTls};
pub use tls::{CertFiles, TestCa};

/// Whether the GPU tests run: only with `PIRQ_GPU_TESTS=1` (scripts/gpu-test.sh sets it on a
/// machine with a CUDA GPU). Elsewhere a GPU test returns at once and passes as skipped, and
/// this says so on stderr, naming `test`.
pub fn gpu_tests_enabled(test: &str) -> bool {
    let on = std::env::var("PIRQ_GPU_TESTS").is_ok_and(|v| v == "1");
    if !on {
        eprintln!("skipping {test}: set PIRQ_GPU_TESTS=1 on a machine with a CUDA GPU");
    }
    on
}
