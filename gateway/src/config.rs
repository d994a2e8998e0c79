//! Gateway configuration: every flag is also a `PIRQ_*` environment variable.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

/// HTTP front of one pirq party: validates queries, queues them in Redis, serves results.
#[derive(Parser, Debug, Clone)]
#[command(name = "pirq-gateway", version, about, long_about = None)]
pub struct Config {
    /// Redis URL of this party (each party has its own Redis).
    #[arg(
        long = "redis",
        env = "PIRQ_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,

    /// Key prefix of this party in Redis; keys are `{PREFIX}:...`. Must match the workers'.
    #[arg(long, env = "PIRQ_PREFIX", default_value = "pirq")]
    pub prefix: String,

    /// Address to listen on for HTTP.
    #[arg(long, env = "PIRQ_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Most keys one query may carry.
    #[arg(long, env = "PIRQ_MAX_KEYS_PER_QUERY", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub max_keys_per_query: u32,

    /// Largest request body accepted, in bytes; larger bodies get 413.
    #[arg(long, env = "PIRQ_BODY_LIMIT", default_value_t = 1 << 20)]
    pub body_limit: usize,

    /// Seconds a query's status is kept while it waits for a worker (workers then keep a
    /// finished result for their own `--result-ttl`).
    #[arg(long, env = "PIRQ_PENDING_TTL", default_value_t = 3600)]
    pub pending_ttl: u64,

    /// Seconds suggested in `Retry-After` on 202 and 503 answers.
    #[arg(long, env = "PIRQ_RETRY_AFTER", default_value_t = 1)]
    pub retry_after: u64,

    /// Bearer token for `POST /v1/admin/epochs`. Without it the admin route answers 403.
    #[arg(long, env = "PIRQ_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Largest epoch update body accepted by the admin route, in bytes (its own limit, apart
    /// from `--body-limit`, so whole epochs of pages fit: 256 MiB = 65,536 pages of 4 KiB in
    /// bincode). Bigger changes are pushed as several consecutive epochs.
    #[arg(long, env = "PIRQ_MAX_UPDATE_BYTES", default_value_t = 256 << 20)]
    pub max_update_bytes: usize,

    /// Timeout of one Redis command and of one connection attempt, in milliseconds. A Redis that
    /// does not answer within it turns into 503 `redis_unavailable`.
    #[arg(long, env = "PIRQ_REDIS_TIMEOUT_MS", default_value_t = 2000)]
    pub redis_timeout_ms: u64,
}

impl Config {
    pub fn redis_timeout(&self) -> Duration {
        Duration::from_millis(self.redis_timeout_ms.max(1))
    }
}
