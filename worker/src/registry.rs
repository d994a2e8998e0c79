//! Registration: the database this worker serves (`{P}:db`) and its heartbeat
//! (`{P}:worker:<id>` with a TTL, listed in `{P}:workers`).
//!
//! The database registration outlives the worker: a gateway keeps accepting queries for the
//! party's database while no worker is up, and they are answered when one starts. Liveness is
//! the heartbeat key alone; a worker that dies stops refreshing it and Redis expires it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pirq_shared::layout::{db_field, Layout};
use pirq_shared::shard::ShardSpec;
use pirq_shared::wire::EpochRange;
use redis::aio::ConnectionManager;
use redis::AsyncCommands;
use serde::Serialize;

/// What a worker tells Redis about itself.
#[derive(Clone, Debug, Serialize)]
pub struct Registration {
    pub worker_id: String,
    pub backend: &'static str,
    pub num_pages: u64,
    pub page_size: u32,
    pub domain_bits: u8,
    /// The epochs this worker answers now (refreshed at every beat).
    pub window: EpochRange,
    pub max_batch_keys: u32,
    pub started_ms: u64,
    /// The database's key-value layout, if it is a kv database (gateways serve it in
    /// `/v1/info`, so clients need only the parties' URLs).
    pub kv: Option<pirq_shared::kv::KvInfo>,
    /// The shard served (`--shard I/S`), absent when unsharded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardSpec>,
    /// The pages served, `[first, end)`: all of them, or the shard's range.
    pub pages: [u64; 2],
}

impl Registration {
    pub fn now_ms() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// Writes the database registration and the first heartbeat. Warns when another geometry was
/// registered before: gateways then validate against this worker's database.
pub async fn register(
    conn: &mut ConnectionManager,
    layout: &Layout,
    reg: &Registration,
    heartbeat_ttl: Duration,
) -> redis::RedisResult<()> {
    let previous: std::collections::HashMap<String, String> = conn.hgetall(layout.db()).await?;
    if let (Some(pages), Some(size)) = (
        previous.get(db_field::NUM_PAGES),
        previous.get(db_field::PAGE_SIZE),
    ) {
        if *pages != reg.num_pages.to_string() || *size != reg.page_size.to_string() {
            tracing::warn!(
                registered_pages = %pages, registered_page_size = %size,
                "another database was registered under this prefix; replacing it with this worker's"
            );
        }
    }
    beat(conn, layout, reg, heartbeat_ttl).await
}

/// Writes the geometry and raises the registered epochs to this worker's: `epoch` (newest) and
/// `min_epoch` (oldest) only ever go up while the geometry stays the same, so a worker that is a
/// moment behind never moves a party's advertised window back. A new geometry replaces all.
/// The shard count (ARGV[11], ARGV[12]) is written as it is: gateways read it for readiness.
const RAISE: &str = r#"
local same = redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2]
  and redis.call('HGET', KEYS[1], ARGV[3]) == ARGV[4]
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[11], ARGV[12])
for i = 7, 9, 2 do
  local current = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '-1')
  if not same or tonumber(ARGV[i + 1]) > current then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return 1
"#;

/// Publishes the database and this worker's epoch window (see [`RAISE`]). The kv layout is
/// written first, so a gateway that sees this geometry sees its layout too.
pub async fn publish_window(
    conn: &mut ConnectionManager,
    layout: &Layout,
    reg: &Registration,
) -> redis::RedisResult<()> {
    let mut kv = redis::cmd(if reg.kv.is_some() { "HSET" } else { "HDEL" });
    kv.arg(layout.db()).arg(db_field::KV);
    if let Some(info) = &reg.kv {
        kv.arg(serde_json::to_string(info).expect("kv info serializes"));
    }
    kv.query_async::<()>(conn).await?;
    redis::Script::new(RAISE)
        .key(layout.db())
        .arg(db_field::NUM_PAGES)
        .arg(reg.num_pages)
        .arg(db_field::PAGE_SIZE)
        .arg(reg.page_size)
        .arg(db_field::DOMAIN_BITS)
        .arg(reg.domain_bits)
        .arg(db_field::EPOCH)
        .arg(reg.window.newest)
        .arg(db_field::MIN_EPOCH)
        .arg(reg.window.oldest)
        .arg(db_field::SHARDS)
        .arg(reg.shard.map_or(1, |s| s.count))
        .invoke_async::<i64>(conn)
        .await
        .map(drop)
}

/// One heartbeat. It rewrites the database registration too, so a Redis that lost its data
/// (restart without persistence) learns it again within one interval.
pub async fn beat(
    conn: &mut ConnectionManager,
    layout: &Layout,
    reg: &Registration,
    ttl: Duration,
) -> redis::RedisResult<()> {
    publish_window(conn, layout, reg).await?;
    let json = serde_json::to_string(reg).expect("registration serializes");
    redis::pipe()
        .atomic()
        .cmd("SET")
        .arg(layout.worker(&reg.worker_id))
        .arg(json)
        .arg("PX")
        .arg(ttl.as_millis() as u64)
        .ignore()
        .cmd("SADD")
        .arg(layout.workers())
        .arg(&reg.worker_id)
        .ignore()
        .query_async(conn)
        .await
}

/// Heartbeats every `interval` until the task is aborted; failures are logged and retried.
/// Each beat carries the window from `epochs` as it is then.
pub fn spawn_heartbeat(
    mut conn: ConnectionManager,
    layout: Layout,
    mut reg: Registration,
    epochs: tokio::sync::watch::Receiver<EpochRange>,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            reg.window = *epochs.borrow();
            match beat(&mut conn, &layout, &reg, interval * 3).await {
                Ok(()) => metrics::gauge!(pirq_shared::metrics::WORKER_HEARTBEAT_TIMESTAMP)
                    .set(pirq_shared::metrics::unix_now_seconds()),
                Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
            }
        }
    })
}

/// Removes this worker's heartbeat (the database registration stays).
pub async fn deregister(
    conn: &mut ConnectionManager,
    layout: &Layout,
    worker_id: &str,
) -> redis::RedisResult<()> {
    redis::pipe()
        .atomic()
        .del(layout.worker(worker_id))
        .ignore()
        .srem(layout.workers(), worker_id)
        .ignore()
        .query_async(conn)
        .await
}
