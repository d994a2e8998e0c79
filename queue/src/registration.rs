//! Registration: the database a party's workers serve (`{P}:db`, written by workers, read by
//! gateways as [`RegisteredDb`]) and each worker's heartbeat (`{P}:worker:<id>` with a TTL,
//! listed in `{P}:workers`), both written through a worker's [`Registry`].
//!
//! The database registration outlives the worker: a gateway keeps accepting queries for the
//! party's database while no worker is up, and they are answered when one starts. Liveness is
//! the heartbeat key alone; a worker that dies stops refreshing it and Redis expires it.
//!
//! One prefix serves one database. The registration carries the database's id
//! ([`db_field::DB_ID`]) and the digest of every recent epoch (`{P}:digests`, SPEC §2.1): a
//! worker whose file has another shape or digest refuses to start ([`Registry::check_prefix`],
//! [`Registry::register`]) unless it was told `--replace-db`; then it claims the prefix with a new id, and
//! the workers of the old database see the new id at their next heartbeat and stop.

use std::collections::HashMap;
use std::time::Duration;

use crate::connect::Conn;
use pirq_shared::digest::Digest;
use pirq_shared::layout::{db_field, Layout};
use pirq_shared::shard::ShardSpec;
use pirq_shared::wire::EpochRange;
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};

use crate::digests::Digests;
use crate::{scripts, Connection, QueueError};

/// The database one party's workers registered (`{P}:db`), as a gateway reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegisteredDb {
    pub num_pages: u64,
    pub page_size: u32,
    pub domain_bits: u8,
    pub epoch: u64,
    pub min_epoch: u64,
    /// Shard count of the party (1: unsharded).
    pub shards: u32,
}

impl RegisteredDb {
    /// Reads the fields of `{P}:db` ([`db_field`]); `min_epoch` defaults to `epoch` (a
    /// registration written before workers kept a window).
    pub fn parse(fields: &HashMap<String, String>) -> Result<RegisteredDb, QueueError> {
        let get = |name: &'static str| -> Result<u64, QueueError> {
            fields
                .get(name)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| QueueError::Malformed {
                    what: "database registration",
                    detail: format!("field {name} missing or not a number"),
                })
        };
        let epoch = get(db_field::EPOCH)?;
        Ok(RegisteredDb {
            num_pages: get(db_field::NUM_PAGES)?,
            page_size: get(db_field::PAGE_SIZE)? as u32,
            domain_bits: get(db_field::DOMAIN_BITS)? as u8,
            epoch,
            min_epoch: get(db_field::MIN_EPOCH).unwrap_or(epoch),
            shards: get(db_field::SHARDS).unwrap_or(1).max(1) as u32,
        })
    }

    /// The epochs the party answers.
    pub fn window(&self) -> EpochRange {
        EpochRange {
            oldest: self.min_epoch.min(self.epoch),
            newest: self.epoch,
        }
    }
}

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
    /// The signing block of a signed database (`docs/spec/signed.md`): gateways serve it in
    /// `/v1/info` as `signing`, so a verifying client learns the database's identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing: Option<pirq_shared::signing::SigningInfo>,
    /// The shard served (`--shard I/S`), absent when unsharded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardSpec>,
    /// The pages served, `[first, end)`: all of them, or the shard's range.
    pub pages: [u64; 2],
    /// The registered database this worker serves ([`db_field::DB_ID`]); set by [`Registry::register`].
    pub db_id: String,
    /// The digest of every epoch this worker answers, published with the window.
    #[serde(skip)]
    pub digests: Digests,
}

/// Why a worker may not serve this prefix.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(
        "another database is registered under prefix {prefix}: {registered}; this worker's file \
         has {ours}. Start the worker with that database's file, give it another --prefix, or \
         pass --replace-db to make this file the party's database (the workers serving the \
         registered one then stop)"
    )]
    Conflict {
        prefix: String,
        registered: String,
        ours: String,
    },
    /// The worker's `--shard` does not fit the shard layout the party's live workers serve.
    #[error(
        "--shard {ours} does not fit the party's live workers, which serve {theirs} ({workers}): \
         one party serves one shard layout at a time, and workers of two layouts would answer \
         overlapping pages. Start this worker with {fits}, or stop those workers first"
    )]
    ShardLayout {
        ours: ShardSpec,
        theirs: String,
        workers: String,
        fits: String,
    },
    #[error("redis: {0}")]
    Redis(#[from] QueueError),
}

impl From<redis::RedisError> for RegistryError {
    fn from(e: redis::RedisError) -> RegistryError {
        RegistryError::Redis(e.into())
    }
}

/// A live worker's heartbeat record as the others read it: the fields of a [`Registration`]
/// that the gateways (`/v1/info`, readiness), the shard layout check and the updates trim use.
/// Typed here, once, so a renamed field is a compile error on both sides.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct WorkerRecord {
    /// The worker's id (its consumer name), as listed in `{P}:workers`.
    #[serde(default)]
    pub worker_id: String,
    /// The shard served, `None` when unsharded.
    #[serde(default)]
    pub shard: Option<ShardSpec>,
    /// The epochs it answers now (`None` only in a record of another format).
    #[serde(default)]
    pub window: Option<EpochRange>,
    /// The signing block of the signed database it serves ([`Registration::signing`]).
    #[serde(default)]
    pub signing: Option<pirq_shared::signing::SigningInfo>,
}

impl WorkerRecord {
    /// The shard served ([`ShardSpec::WHOLE`] when unsharded).
    pub fn shard(&self) -> ShardSpec {
        self.shard.unwrap_or(ShardSpec::WHOLE)
    }
}

/// The heartbeats under a prefix, as read in one pass.
#[derive(Debug, Default)]
pub(crate) struct Heartbeats {
    /// Members of `{P}:workers` whose heartbeat key expired (workers that died without
    /// deregistering).
    pub dead: Vec<String>,
    /// The live workers' records that parse.
    pub records: Vec<WorkerRecord>,
    /// Live heartbeats that do not parse as a [`WorkerRecord`] (another version's format).
    pub unreadable: usize,
}

impl Heartbeats {
    pub(crate) async fn read(conn: &mut Conn, layout: &Layout) -> redis::RedisResult<Heartbeats> {
        let ids: Vec<String> = conn.smembers(layout.workers()).await?;
        if ids.is_empty() {
            return Ok(Heartbeats::default());
        }
        let keys: Vec<String> = ids.iter().map(|id| layout.worker(id)).collect();
        let beats: Vec<Option<String>> = conn.mget(keys).await?;
        let mut out = Heartbeats::default();
        for (id, beat) in ids.into_iter().zip(beats) {
            match beat {
                None => out.dead.push(id),
                Some(json) => match serde_json::from_str::<WorkerRecord>(&json) {
                    Ok(mut record) => {
                        record.worker_id = id;
                        out.records.push(record);
                    }
                    Err(_) => out.unreadable += 1,
                },
            }
        }
        Ok(out)
    }
}

/// The layout a shard count stands for, as messages name it.
pub fn layout_name(count: u32) -> String {
    if count == 1 {
        "the database unsharded".into()
    } else {
        format!("it in {count} shards")
    }
}

/// The live workers whose shard count differs from `count`, as `(id, shard)`.
pub fn other_layouts(records: &[WorkerRecord], count: u32, me: &str) -> Vec<(String, ShardSpec)> {
    records
        .iter()
        .filter(|r| r.worker_id != me)
        .map(|r| (r.worker_id.clone(), r.shard()))
        .filter(|(_, spec)| spec.count != count)
        .collect()
}

/// The shape and digest of a database at one epoch, as messages name it.
fn describe(pages: &str, page_size: &str, epoch: &str, digest: Option<&str>) -> String {
    let digest = match digest {
        Some(d) if !d.is_empty() => format!("digest {}", &d[..d.len().min(16)]),
        _ => "no digest recorded".into(),
    };
    format!("{pages} pages of {page_size} bytes, at epoch {epoch} {digest}")
}

/// The registration's view of one of our epochs: geometry and digest from `{P}:db` and
/// `{P}:digests`.
struct Registered {
    fields: std::collections::HashMap<String, String>,
}

impl Registered {
    async fn read(conn: &mut Conn, layout: &Layout) -> redis::RedisResult<Self> {
        Ok(Registered {
            fields: conn.hgetall(layout.db()).await?,
        })
    }

    fn field(&self, name: &str) -> &str {
        self.fields.get(name).map(String::as_str).unwrap_or("?")
    }
}

/// Heartbeat intervals a worker's heartbeat key outlives the beat that wrote it: a beat or two
/// late (a slow Redis, a busy host) does not make a live worker look gone, and a dead one is
/// gone within three intervals (what `--heartbeat-ms` promises).
pub const HEARTBEAT_TTL_INTERVALS: u32 = 3;

/// The TTL of a heartbeat written every `interval`.
pub fn heartbeat_ttl(interval: Duration) -> Duration {
    interval * HEARTBEAT_TTL_INTERVALS
}

/// Whether this worker's database is still the registered one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Published {
    /// It is, under this id (another worker on the same database may have registered it anew).
    Current(String),
    /// Another database took the prefix (`--replace-db`): stop taking jobs.
    Replaced,
}

/// A worker's handle on the registration under one prefix (table): the connection and the
/// layout, held once like [`crate::producer::Producer`]'s and [`crate::consumer::Consumer`]'s,
/// so that no call passes them again and the registration protocol has one owner.
#[derive(Clone)]
pub struct Registry {
    conn: Connection,
    layout: Layout,
}

impl Registry {
    pub fn new(conn: Connection, layout: Layout) -> Registry {
        Registry { conn, layout }
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The live workers' heartbeat records under the prefix.
    pub async fn live_records(&self) -> Result<Vec<WorkerRecord>, QueueError> {
        let conn = &mut self.conn.conn.clone();
        Ok(Heartbeats::read(conn, &self.layout).await?.records)
    }

    /// Refuses a worker whose shard `ours` belongs to another layout than the live workers' (a
    /// different shard count; unsharded is one shard): shards of two layouts overlap, so their
    /// partial answers could never combine into one answer. Replicas of a shard and the other
    /// shards of the same layout are welcome. Checked before the worker joins any consumer group,
    /// and again once its own heartbeat is written (two workers starting at once see each other).
    pub async fn check_shard_layout(&self, ours: ShardSpec, me: &str) -> Result<(), RegistryError> {
        let records = self.live_records().await?;
        let others = other_layouts(&records, ours.count, me);
        let Some((_, first)) = others.first() else {
            return Ok(());
        };
        let theirs = first.count;
        let workers = others
            .iter()
            .map(|(id, spec)| format!("{id}: {spec}"))
            .collect::<Vec<_>>()
            .join(", ");
        let fits = if theirs == 1 {
            "no --shard".to_string()
        } else {
            format!("--shard I/{theirs}")
        };
        Err(RegistryError::ShardLayout {
            ours,
            theirs: layout_name(theirs),
            workers,
            fits,
        })
    }

    /// Before the worker applies the party's updates to its file: refuses a file whose shape or
    /// digest differs from the database registered under the prefix (the updates stream belongs to
    /// that database). With `replace`, drops the registration, its digests and its updates stream
    /// instead, so this file becomes the party's database.
    pub async fn check_prefix(
        &self,
        reg: &Registration,
        file_epoch: u64,
        file_digest: Digest,
        replace: bool,
    ) -> Result<(), RegistryError> {
        let layout = &self.layout;
        let conn = &mut self.conn.conn.clone();
        let registered = Registered::read(conn, layout).await?;
        if !registered.fields.contains_key(db_field::NUM_PAGES) {
            return Ok(());
        }
        let at_file_epoch: Option<String> = conn.hget(layout.digests(), file_epoch).await?;
        let shape_differs = registered.field(db_field::NUM_PAGES) != reg.num_pages.to_string()
            || registered.field(db_field::PAGE_SIZE) != reg.page_size.to_string();
        let digest_differs = at_file_epoch
            .as_deref()
            .is_some_and(|d| d != file_digest.to_hex());
        if !(shape_differs || digest_differs) {
            return Ok(());
        }
        let newest = registered.field(db_field::EPOCH).to_string();
        let registered_digest: Option<String> = match &at_file_epoch {
            Some(d) if !shape_differs => Some(d.clone()),
            _ => conn.hget(layout.digests(), &newest).await?,
        };
        let registered_epoch = if shape_differs {
            newest
        } else {
            file_epoch.to_string()
        };
        let registered_text = describe(
            registered.field(db_field::NUM_PAGES),
            registered.field(db_field::PAGE_SIZE),
            &registered_epoch,
            registered_digest.as_deref(),
        );
        if replace {
            tracing::info!(
                prefix = %layout, registered = %registered_text,
                "--replace-db: this worker's database replaces the registered one; its updates stream is dropped"
            );
            let mut pipe = redis::pipe();
            pipe.atomic()
                .del(layout.db())
                .ignore()
                .del(layout.digests())
                .ignore()
                .del(layout.updates())
                .ignore();
            crate::one_slot::send::<()>(&pipe, conn).await?;
            return Ok(());
        }
        Err(RegistryError::Conflict {
            prefix: layout.to_string(),
            registered: registered_text,
            ours: describe(
                &reg.num_pages.to_string(),
                &reg.page_size.to_string(),
                &file_epoch.to_string(),
                Some(&file_digest.to_hex()),
            ),
        })
    }

    /// After catching up with the updates stream: joins the database registered under the prefix
    /// (same shape, same digest at this worker's newest epoch; `reg.db_id` becomes its id) or, when
    /// none is, registers this one; then writes the first heartbeat. A different database is
    /// refused with [`RegistryError::Conflict`] (the check and the claim are one script, so two
    /// workers starting at once on different files cannot both win).
    pub async fn register(
        &self,
        reg: &mut Registration,
        heartbeat_interval: Duration,
    ) -> Result<(), RegistryError> {
        let layout = &self.layout;
        let mgr = &mut self.conn.conn.clone();
        let (newest, digest) = reg.digests.newest();
        let candidate = format!("{:032x}", rand::random::<u128>());
        let reply: Vec<String> = scripts::REGISTER
            .script()
            .key(layout.db())
            .key(layout.digests())
            .arg(reg.num_pages)
            .arg(reg.page_size)
            .arg(newest)
            .arg(digest.to_hex())
            .arg(&candidate)
            .arg(reg.domain_bits)
            .arg(reg.window.oldest)
            .arg(
                reg.kv
                    .as_ref()
                    .map(|info| serde_json::to_string(info).expect("kv info serializes"))
                    .unwrap_or_default(),
            )
            .invoke_async(mgr)
            .await?;
        match reply.as_slice() {
            [ok, id] if ok == "ok" => reg.db_id = id.clone(),
            [_, pages, size, epoch, registered] => {
                return Err(RegistryError::Conflict {
                    prefix: layout.to_string(),
                    registered: describe(pages, size, epoch, Some(registered)),
                    ours: describe(
                        &reg.num_pages.to_string(),
                        &reg.page_size.to_string(),
                        &newest.to_string(),
                        Some(&digest.to_hex()),
                    ),
                })
            }
            other => {
                return Err(RegistryError::Redis(QueueError::Malformed {
                    what: "reply of the register script",
                    detail: format!("{other:?}"),
                }))
            }
        }
        match self.beat(reg, heartbeat_ttl(heartbeat_interval)).await? {
            Published::Current(id) => {
                reg.db_id = id;
                if !layout.is_default_table() {
                    // The party's list of tables, which gateways read to learn them (issue 38).
                    let _: () = mgr.sadd(layout.tables(), layout.table_name()).await?;
                }
                Ok(())
            }
            Published::Replaced => Err(RegistryError::Conflict {
                prefix: layout.to_string(),
                registered: "a database registered by a --replace-db worker a moment ago".into(),
                ours: describe(
                    &reg.num_pages.to_string(),
                    &reg.page_size.to_string(),
                    &newest.to_string(),
                    Some(&digest.to_hex()),
                ),
            }),
        }
    }

    /// Publishes the database, this worker's epoch window and its digests
    /// (`queue/lua/publish_window.lua`: the registered epochs only ever go up while the geometry
    /// stays the same; answers whether this worker's database is still the registered one). The kv
    /// layout is written first (`kv_write.lua`, unless another database replaced this one), so a
    /// gateway that sees this geometry sees its layout too.
    pub async fn publish_window(&self, reg: &Registration) -> Result<Published, QueueError> {
        let layout = &self.layout;
        let conn = &mut self.conn.conn.clone();
        let kv = reg
            .kv
            .as_ref()
            .map(|info| serde_json::to_string(info).expect("kv info serializes"))
            .unwrap_or_default();
        redis::cmd("EVAL")
            .arg(scripts::KV_WRITE.source)
            .arg(1)
            .arg(layout.db())
            .arg(&reg.db_id)
            .arg(db_field::KV)
            .arg(kv)
            .query_async::<()>(conn)
            .await?;
        let mut script = scripts::PUBLISH_WINDOW.script().prepare_invoke();
        script
            .key(layout.db())
            .key(layout.digests())
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
            .arg(&reg.db_id);
        for (epoch, digest) in reg.digests.in_window(reg.window) {
            script.arg(epoch).arg(digest.to_hex());
        }
        let id: String = script.invoke_async(conn).await?;
        Ok(if id.is_empty() {
            Published::Replaced
        } else {
            Published::Current(id)
        })
    }

    /// One heartbeat. It rewrites the database registration too, so a Redis that lost its data
    /// (restart without persistence) learns it again within one interval.
    pub async fn beat(&self, reg: &Registration, ttl: Duration) -> Result<Published, QueueError> {
        let layout = &self.layout;
        let published = self.publish_window(reg).await?;
        if published == Published::Replaced {
            return Ok(published);
        }
        let conn = &mut self.conn.conn.clone();
        let json = serde_json::to_string(reg).expect("registration serializes");
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("SET")
            .arg(layout.worker(&reg.worker_id))
            .arg(json)
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .ignore()
            .cmd("SADD")
            .arg(layout.workers())
            .arg(&reg.worker_id)
            .ignore();
        crate::one_slot::send::<()>(&pipe, conn).await?;
        Ok(published)
    }

    /// Heartbeats every `interval` until the task is aborted; failures are logged and retried.
    /// Each beat carries the window from `epochs` as it is then. When another database replaced
    /// this worker's under the prefix, says so and sets `stop` (the worker stops taking jobs).
    pub fn spawn_heartbeat(
        self,
        mut reg: Registration,
        epochs: tokio::sync::watch::Receiver<EpochRange>,
        interval: Duration,
        stop: tokio::sync::watch::Sender<bool>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                reg.window = *epochs.borrow();
                match self.beat(&reg, heartbeat_ttl(interval)).await {
                    Ok(Published::Replaced) => {
                        tracing::error!(
                            prefix = %self.layout,
                            "stopping: another worker (--replace-db) registered a different database \
                             under this prefix; this worker's answers would come from the old one"
                        );
                        let _ = stop.send(true);
                        return;
                    }
                    Ok(Published::Current(id)) => {
                        reg.db_id = id;
                        metrics::gauge!(pirq_shared::metrics::WORKER_HEARTBEAT_TIMESTAMP)
                            .set(pirq_shared::clock::unix_seconds())
                    }
                    Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
                }
            }
        })
    }

    /// Removes this worker's heartbeat (the database registration stays).
    pub async fn deregister(&self, worker_id: &str) -> Result<(), QueueError> {
        let layout = &self.layout;
        let conn = &mut self.conn.conn.clone();
        let mut pipe = redis::pipe();
        pipe.atomic()
            .del(layout.worker(worker_id))
            .ignore()
            .srem(layout.workers(), worker_id)
            .ignore();
        crate::one_slot::send::<()>(&pipe, conn).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(id: &str, index: Option<(u32, u32)>) -> WorkerRecord {
        let json = match index {
            Some((index, count)) => json!({"shard": {"index": index, "count": count}}),
            None => json!({}),
        };
        WorkerRecord {
            worker_id: id.into(),
            ..serde_json::from_value(json).unwrap()
        }
    }

    #[test]
    fn other_layouts_are_the_other_shard_counts() {
        let records = vec![
            record("a", Some((0, 2))),
            record("b", Some((1, 2))),
            record("c", None),
        ];
        // Another shard or a replica of the same layout is fine; 3 shards and unsharded are not.
        let others = other_layouts(&records, 2, "me");
        assert_eq!(others, vec![("c".to_string(), ShardSpec::WHOLE)]);
        let others = other_layouts(&records, 3, "me");
        assert_eq!(others.len(), 3);
        // A worker's own (older) record does not count against it.
        assert!(other_layouts(&records[..1], 3, "a").is_empty());
        assert_eq!(layout_name(1), "the database unsharded");
        assert_eq!(layout_name(3), "it in 3 shards");
    }
}
