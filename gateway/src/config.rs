//! Gateway configuration: every flag is also a `PIRQ_*` environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use pirq_shared::layout::Layout;

/// When a query counts as accepted (`--durability`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Durability {
    /// 202 once Redis acknowledged the job (in memory; on disk per the server's own AOF/RDB
    /// settings).
    Ack,
    /// 202 only once the job is on disk: `WAITAOF 1 0` where Redis has it (≥ 7.2), else Redis
    /// must run with `appendonly yes` and `appendfsync always` (checked at start and every few
    /// seconds; the gateway refuses to start otherwise).
    Fsync,
    /// 202 only once a replica of the Redis primary that took the job has it (`WAIT 1`, to the
    /// primary of the request's partition on a cluster): the job survives the loss of that
    /// primary, as in a failover. Every primary serving the party must have a replica online
    /// (checked at start and every few seconds; the gateway refuses to start otherwise).
    Replica,
}

/// HTTP front of one pirq party: validates queries, queues them in Redis, serves results.
#[derive(Parser, Debug, Clone)]
#[command(name = "pirq-gateway", version, about, long_about = None)]
pub struct Config {
    /// `--redis` and `--prefix`, as every server of the party takes them.
    #[command(flatten)]
    pub redis: pirq_party::RedisArgs,

    /// `--partitions`, as every server of the party takes it.
    #[command(flatten)]
    pub partitions: pirq_party::PartitionArgs,

    /// Address to listen on for HTTP.
    #[arg(long, env = "PIRQ_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// PEM certificate chain to serve HTTPS with (leaf first); with `--tls-key`. Re-read, with
    /// the key, on SIGHUP: new connections get the new certificate, open ones keep theirs.
    /// Without it the gateway speaks plain HTTP, which is only private on loopback or behind a
    /// TLS-terminating proxy on the same host (docs/security.md).
    #[arg(long, env = "PIRQ_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of `--tls-cert` (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "PIRQ_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// A second address that serves the admin routes (`POST /v1/admin/epochs`) and `/metrics`,
    /// which then answer 404 on `--listen`; `/healthz` and `/readyz` answer on both. Bind it to
    /// a private interface (loopback, the operators' network). Without it, everything is on
    /// `--listen` (the admin route still needs `--admin-token`).
    #[arg(long, env = "PIRQ_ADMIN_LISTEN")]
    pub admin_listen: Option<SocketAddr>,

    /// Serve `--admin-listen` over TLS too, with the `--tls-cert` certificate.
    #[arg(long, env = "PIRQ_ADMIN_TLS", requires_all = ["admin_listen", "tls_cert"])]
    pub admin_tls: bool,

    /// File of query tokens, one a line (`#` starts a comment): `POST /v1/queries` and result
    /// reads then need `Authorization: Bearer TOKEN` (401 `unauthorized` otherwise); `/v1/info`,
    /// `/healthz` and `/readyz` stay open. Re-read on SIGHUP. Tokens are never logged.
    #[arg(long, env = "PIRQ_QUERY_TOKENS")]
    pub query_tokens: Option<PathBuf>,

    /// The publisher's manifest file (`docs/spec/signed.md` §4.2, as `pirq epoch make` / `pirq kv
    /// update --manifests` write it), served at `GET /v1/manifests` so verifying clients can
    /// refuse rolled-back pages. Read again at every request: install a new one by renaming it
    /// over the old, after the party serves the update's epoch. Without it the route answers
    /// 404 `no_manifests`.
    #[arg(long, env = "PIRQ_MANIFESTS")]
    pub manifests: Option<PathBuf>,

    /// A named table's manifest file, `NAME=FILE` (repeatable; several at once in the
    /// environment: `PIRQ_TABLE_MANIFESTS=a=a.json,b=b.json`), served at
    /// `GET /v1/tables/NAME/manifests` as `--manifests` is for the table `default`: each signed
    /// table has its own publisher manifests (issue 38). A table without one answers 404
    /// `no_manifests`.
    #[arg(long = "table-manifests", env = "PIRQ_TABLE_MANIFESTS", value_delimiter = ',', value_parser = table_file)]
    pub table_manifests: Vec<(String, PathBuf)>,

    /// Queries a second each token may submit, in bursts of up to twice that; past it 429
    /// `rate_limited` with `Retry-After`. Needs `--query-tokens`.
    #[arg(long, env = "PIRQ_TOKEN_RATE", requires = "query_tokens")]
    pub token_rate: Option<std::num::NonZeroU32>,

    /// Without tokens: queries a second each client address may submit, in bursts of up to
    /// twice that; past it 429 `rate_limited` with `Retry-After`. Behind a proxy every client
    /// has the proxy's address: limit at the proxy instead.
    #[arg(long, env = "PIRQ_IP_RATE", conflicts_with = "query_tokens")]
    pub ip_rate: Option<std::num::NonZeroU32>,

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

    /// Backlog (jobs in the stream: waiting plus delivered and not yet acknowledged) at which
    /// new queries get 429 `backlog_full` with a `Retry-After` computed from the drain rate.
    /// 0 turns the count bound off.
    #[arg(long, env = "PIRQ_MAX_BACKLOG", default_value_t = 10_000)]
    pub max_backlog: u64,

    /// Most seconds of work the backlog may hold at the measured drain rate (so the most a flood
    /// delays a query accepted after it); past it 429 `backlog_full`. 0 turns it off.
    #[arg(long, env = "PIRQ_MAX_BACKLOG_SECS", default_value_t = 30)]
    pub max_backlog_secs: u64,

    /// Bytes of Redis memory (`used_memory`, sampled every second) past which new queries get
    /// 429 `storage_full`, whatever Redis's own `maxmemory`. 0 turns it off.
    #[arg(long, env = "PIRQ_MAX_REDIS_MEMORY", default_value_t = 2 << 30)]
    pub max_redis_memory: u64,

    /// Most seconds a final result (and its `Idempotency-Key` record) is kept once a client has
    /// read it, for a re-read or the replay of an answer lost on the way (never longer than the
    /// worker's `--result-ttl`). Under load the time is shorter: see `--fetched-result-bytes`.
    #[arg(long, env = "PIRQ_FETCHED_RESULT_TTL", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub fetched_result_ttl: u64,

    /// Bytes of Redis the party's read results may hold together (pages plus ~2 KiB a record):
    /// a read result is kept this many bytes over the party's read rate (all gateways, measured
    /// every second), at most `--fetched-result-ttl` and at least half a second. So memory for
    /// re-reads stays about this size whatever the throughput. Default: 256 MiB, or a quarter of
    /// `--max-redis-memory` when that is less (so that read results alone never reach the cap);
    /// a value at or above `--max-redis-memory` is refused.
    #[arg(long, env = "PIRQ_FETCHED_RESULT_BYTES",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub fetched_result_bytes: Option<u64>,

    /// Seconds an `Idempotency-Key` is remembered after its first request: a replay within
    /// this time gets the first request's id (or its result); a reuse with another body gets
    /// 422.
    #[arg(long, env = "PIRQ_IDEMPOTENCY_TTL", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub idempotency_ttl: u64,

    /// When to answer 202: `ack` (Redis has the job), `fsync` (the job is on disk) or `replica`
    /// (a replica of the Redis primary has the job).
    #[arg(long, env = "PIRQ_DURABILITY", value_enum, default_value_t = Durability::Ack)]
    pub durability: Durability,

    /// Milliseconds a `--durability fsync` accept waits for `WAITAOF` before answering 503
    /// `not_durable` (the job may still be queued and answered).
    #[arg(long, env = "PIRQ_FSYNC_TIMEOUT_MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub fsync_timeout_ms: u64,

    /// Milliseconds a `--durability replica` accept waits for a replica to confirm the job
    /// (`WAIT 1`) before answering 503 `not_durable` (the job may still be queued and
    /// answered). Below `--redis-timeout-ms`, which bounds the whole exchange with Redis.
    #[arg(long, env = "PIRQ_REPLICA_TIMEOUT_MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub replica_timeout_ms: u64,

    /// Milliseconds SIGTERM waits for open requests: long-polls answer at once with the current
    /// status, SSE streams end after a last `status` event; requests still open after this are
    /// cut.
    #[arg(long, env = "PIRQ_SHUTDOWN_GRACE_MS", default_value_t = 10_000)]
    pub shutdown_grace_ms: u64,

    /// Milliseconds a client has to send a whole request head once it connected or once the
    /// previous answer was sent: this is also how long an idle keep-alive connection stays open.
    /// A slower or silent client is disconnected.
    #[arg(long, env = "PIRQ_HEADER_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout_ms: u64,

    /// Milliseconds a client has to send a whole request body; slower bodies get 408
    /// `body_timeout` and the connection is closed.
    #[arg(long, env = "PIRQ_BODY_TIMEOUT_MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub body_timeout_ms: u64,

    /// Milliseconds a connection may go without a byte moving either way (a client that stopped
    /// reading its answer, a body that stalls in a handler that does not read it). Keep it above
    /// the longest `?wait=` (30 s) and the SSE keep-alive (15 s).
    #[arg(long, env = "PIRQ_IDLE_TIMEOUT_MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_ms: u64,

    /// Most open client connections. Past it, a new connection closes the oldest one that is
    /// between requests (or has not sent one yet); when every connection is busy, the new one
    /// gets 503 `too_many_connections` with `Retry-After` and is closed. Default: what the
    /// open-files limit allows once its soft value is raised to the hard one at start, less
    /// 256 descriptors for Redis, the listeners and files; an explicit value above that is
    /// lowered to it.
    #[arg(long, env = "PIRQ_MAX_CONNECTIONS",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,

    /// Most requests waiting for an answer at once (`Prefer: wait` posts, `?wait=` long-polls,
    /// event streams); past it long-polls and event streams get 503 `too_many_waiters` with
    /// `Retry-After` and a `Prefer: wait` post is answered 202 at once (plain status reads
    /// still work). Default: 256 KiB of a quarter of the memory the process may use each,
    /// never fewer than 8,192.
    #[arg(long, env = "PIRQ_MAX_WAITERS",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_waiters: Option<u32>,

    /// Threads that serve requests (0: one per core the process may run on; with the default
    /// connection lanes of a host of 8 cores or more, 2). Each thread more lets the gateway use
    /// another core, at a price per query: work handed between threads costs wake-ups, and
    /// memory freed on another thread than the one that took it. On the `Prefer: wait` path
    /// one thread spent ~60 % of the CPU per query of three, at the same throughput
    /// (`docs/bench/load.md`, "Gateway CPU per query"); past a core's worth of load, more
    /// threads or more gateways.
    #[arg(long, env = "PIRQ_RUNTIME_THREADS", default_value_t = 0)]
    pub runtime_threads: usize,

    /// Connection lanes: threads that each serve their connections from start to end on a
    /// runtime of their own, with a Redis connection of their own (0: none, the connections
    /// are served by the `--runtime-threads` runtime). A query then stays on one thread instead
    /// of crossing between them at each step; the accepts, the completion events and the
    /// samplers stay on the runtime threads. Default: 4 lanes beside 2 runtime threads where
    /// the process may run on 8 cores or more, none below. On an 8-core gateway of a GPU host
    /// they cut its CPU a query by a quarter to a third at the same throughput; on 2 cores
    /// shared with Redis and the workers they cost 15 % more (`docs/bench/host-path.md`).
    #[arg(long, env = "PIRQ_CONNECTION_THREADS",
          value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub connection_threads: Option<u16>,

    /// Timeout of one Redis command and of one connection attempt, in milliseconds. A Redis that
    /// does not answer within it turns into 503 `redis_unavailable`.
    #[arg(long, env = "PIRQ_REDIS_TIMEOUT_MS", default_value_t = 2000)]
    pub redis_timeout_ms: u64,

    /// The shortest time between two submit batches of one queue partition, in microseconds
    /// (0, the default: a batch leaves as soon as the previous one is answered). Submits that
    /// arrive within it of the previous batch wait and go together, as one batch (an `XLEN` and
    /// two round trips), whose fixed cost a lone submit pays whole; a lone query waits for nothing. It
    /// trades latency under load for Redis CPU: for a party whose Redis core is what binds
    /// (`docs/bench/host-path.md`). Tokio's timer counts whole milliseconds, so a wait lasts
    /// up to a millisecond more.
    #[arg(long, env = "PIRQ_SUBMIT_TICK_US",
          default_value_t = pirq_queue::producer::DEFAULT_SUBMIT_TICK.as_micros() as u64)]
    pub submit_tick_us: u64,

    /// Web origins whose pages may query this party from a browser (CORS), e.g.
    /// `https://wallet.example`; repeat the flag or separate origins with commas; `*` allows
    /// every origin. None (the default): no CORS headers, and browsers refuse cross-origin calls.
    #[arg(long = "cors-origin", env = "PIRQ_CORS_ORIGIN", value_delimiter = ',',
          value_parser = crate::cors::parse_origin)]
    pub cors_origins: Vec<crate::cors::Origin>,
}

/// Cores from which the gateway serves through connection lanes by default.
pub const LANES_FROM_CORES: usize = 8;

/// How a gateway's requests are served: its runtime's threads and its connection lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Threads {
    /// Threads of the shared runtime (0: one per core).
    pub runtime: usize,
    /// Connection lanes (0: none).
    pub lanes: usize,
}

impl Threads {
    /// The flags as given (`None`: not given) on a process that may run on `cores` cores.
    pub fn plan(runtime: usize, lanes: Option<u16>, cores: usize) -> Threads {
        match lanes {
            Some(lanes) => Threads {
                runtime,
                lanes: lanes.into(),
            },
            None if cores >= LANES_FROM_CORES => Threads {
                runtime: if runtime == 0 { 2 } else { runtime },
                lanes: 4,
            },
            None => Threads { runtime, lanes: 0 },
        }
    }
}

impl Config {
    /// The runtime threads and connection lanes this gateway runs with (see the flags).
    pub fn threads(&self) -> Threads {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Threads::plan(self.runtime_threads, self.connection_threads, cores)
    }

    /// The TLS acceptor of `--tls-cert`/`--tls-key`, `None` for plain HTTP.
    pub fn tls(&self) -> anyhow::Result<Option<crate::tls::Tls>> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Ok(Some(crate::tls::Tls::load(cert, key)?)),
            _ => Ok(None),
        }
    }

    pub fn fsync_timeout(&self) -> Duration {
        Duration::from_millis(self.fsync_timeout_ms)
    }

    pub fn replica_timeout(&self) -> Duration {
        Duration::from_millis(self.replica_timeout_ms)
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }

    pub fn header_timeout(&self) -> Duration {
        Duration::from_millis(self.header_timeout_ms)
    }

    pub fn body_timeout(&self) -> Duration {
        Duration::from_millis(self.body_timeout_ms)
    }

    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms)
    }

    /// Limits of a query body.
    pub fn query_body(&self) -> crate::body::BodyLimits {
        crate::body::BodyLimits {
            limit: self.body_limit,
            timeout: self.body_timeout(),
        }
    }

    /// Limits of an epoch update body.
    pub fn update_body(&self) -> crate::body::BodyLimits {
        crate::body::BodyLimits {
            limit: self.max_update_bytes,
            timeout: self.body_timeout(),
        }
    }

    /// The party's key names: `--prefix` split into `--partitions`.
    pub fn layout(&self) -> Result<Layout, crate::error::StateError> {
        Ok(self.partitions.apply(self.redis.layout()?)?)
    }

    /// The bytes read results may hold: `--fetched-result-bytes`, else its default under
    /// `--max-redis-memory` ([`crate::retention::budget`]).
    pub fn fetched_result_budget(&self) -> Result<u64, crate::retention::BudgetError> {
        crate::retention::budget(self.fetched_result_bytes, self.max_redis_memory)
    }

    /// The manifest file of table `table` (`--manifests` for `default`, else its
    /// `--table-manifests`), if the party serves one.
    pub fn manifests_of(&self, table: &str) -> Option<&std::path::Path> {
        if table == pirq_shared::layout::DEFAULT_TABLE {
            return self.manifests.as_deref();
        }
        self.table_manifests
            .iter()
            .find(|(name, _)| name == table)
            .map(|(_, file)| file.as_path())
    }

    pub fn redis_timeout(&self) -> Duration {
        Duration::from_millis(self.redis_timeout_ms.max(1))
    }

    pub fn submit_tick(&self) -> Duration {
        Duration::from_micros(self.submit_tick_us)
    }

    /// Whether admission is bounded (`--max-backlog`, `--max-backlog-secs`,
    /// `--max-redis-memory`): then each table's drain rate and Redis's memory are sampled.
    pub fn bounds_admission(&self) -> bool {
        self.max_backlog > 0 || self.max_backlog_secs > 0 || self.max_redis_memory > 0
    }
}

/// A `--table-manifests` value: `NAME=FILE`, NAME a table name.
fn table_file(s: &str) -> Result<(String, PathBuf), String> {
    let Some((name, file)) = s.split_once('=') else {
        return Err(format!(
            "{s:?} is not NAME=FILE (for example profiles=profiles-manifests.json)"
        ));
    };
    pirq_shared::layout::check_table_name(name).map_err(|e| e.to_string())?;
    if file.is_empty() {
        return Err(format!("{s:?}: the table {name} names no file"));
    }
    Ok((name.to_string(), PathBuf::from(file)))
}

#[cfg(test)]
mod tests {
    use super::{Threads, LANES_FROM_CORES};

    #[test]
    fn lanes_are_the_default_from_eight_cores_and_the_flags_win() {
        let plan = |runtime, lanes, cores| Threads::plan(runtime, lanes, cores);
        let t = |runtime, lanes| Threads { runtime, lanes };
        assert_eq!(
            plan(0, None, 2),
            t(0, 0),
            "a small host: the shared runtime alone"
        );
        assert_eq!(plan(0, None, LANES_FROM_CORES - 1), t(0, 0));
        assert_eq!(
            plan(0, None, LANES_FROM_CORES),
            t(2, 4),
            "from 8 cores: 4 lanes, 2 threads"
        );
        assert_eq!(plan(0, None, 64), t(2, 4));
        assert_eq!(plan(3, None, 16), t(3, 4), "runtime threads given: kept");
        assert_eq!(
            plan(0, Some(0), 16),
            t(0, 0),
            "--connection-threads 0: no lanes"
        );
        assert_eq!(
            plan(1, Some(8), 2),
            t(1, 8),
            "lanes given: kept on any host"
        );
    }
}
