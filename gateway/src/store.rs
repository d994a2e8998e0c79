//! Every Redis command the gateway sends, in one place.
//!
//! One [`ConnectionManager`] (a multiplexed connection that reconnects by itself) carries all of
//! them; the gateway never sends a blocking command, so one connection is enough. Each call is
//! bounded by the configured timeout, so a Redis that is down or stuck becomes an error the
//! handlers answer with 503 instead of a hung request.

use std::collections::HashMap;
use std::time::Duration;

use pirq_shared::digest::Digest;
use pirq_shared::error::ErrorCode;
use pirq_shared::layout::{db_field, query_field as qf, Layout};
use pirq_shared::wire::{ErrorBody, Job, QueryResult, QueryStatus};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// A Redis failure: unreachable, timed out, or an answer of the wrong shape.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    Redis(#[from] redis::RedisError),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("malformed {what} in redis: {detail}")]
    Malformed { what: &'static str, detail: String },
}

/// The database one party's workers registered (`{P}:db`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DbInfo {
    pub num_pages: u64,
    pub page_size: u32,
    pub domain_bits: u8,
    pub epoch: u64,
    pub min_epoch: u64,
    /// Shard count of the party (1: unsharded).
    pub shards: u32,
}

impl DbInfo {
    /// The epochs the party answers.
    pub fn window(&self) -> pirq_shared::wire::EpochRange {
        pirq_shared::wire::EpochRange {
            oldest: self.min_epoch.min(self.epoch),
            newest: self.epoch,
        }
    }
}

/// The party's workers as their heartbeats describe them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveWorkers {
    /// Workers whose heartbeat key is alive.
    pub live: u32,
    /// The newest epoch any live worker answers (`None` without live workers).
    pub newest: Option<u64>,
}

/// The party identity script: the existing id, or `ARGV[1]` stored as the id.
const PARTY_ID: &str = r#"
local id = redis.call('GET', KEYS[1])
if id then return id end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
"#;

/// A query as stored under `{P}:q:<id>`, plus the worker's timings when it is done.
#[derive(Clone, Debug)]
pub struct StoredQuery {
    pub result: QueryResult,
    pub scan_us: Option<u64>,
    pub worker_us: Option<u64>,
}

/// The checks made atomically with a submit.
pub struct SubmitChecks<'a> {
    /// Seconds the `queued` record lives.
    pub pending_ttl: u64,
    /// Refuse when the stream holds this many entries or more (0 = never).
    pub max_backlog: u64,
    /// `(Idempotency-Key, request fingerprint, seconds to remember it)`.
    pub idempotency: Option<(&'a str, &'a str, u64)>,
}

/// What a submit did.
#[derive(Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Queued under the new id.
    Queued,
    /// Nothing queued: the backlog is full.
    Full { backlog: u64 },
    /// Nothing queued: the idempotency key is known, from the request `id`.
    Known { same_request: bool, id: String },
}

/// The submit script. KEYS: record, jobs stream, idempotency record. ARGV: id, key count,
/// accepted_ms, pending_ttl, job bytes, max_backlog (0 = off), fingerprint ('' = no key),
/// idempotency TTL. The idempotency key is checked first: a replay is answered even when the
/// backlog is full.
const SUBMIT: &str = r#"
if ARGV[7] ~= '' then
  local known = redis.call('GET', KEYS[3])
  if known then return {'known', known} end
end
local max = tonumber(ARGV[6])
if max > 0 then
  local len = redis.call('XLEN', KEYS[2])
  if len >= max then return {'full', tostring(len)} end
end
redis.call('HSET', KEYS[1], 'status', 'queued', 'keys', ARGV[2], 'accepted_ms', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('XADD', KEYS[2], '*', 'id', ARGV[1], 'job', ARGV[5])
if ARGV[7] ~= '' then
  redis.call('SET', KEYS[3], ARGV[7] .. ' ' .. ARGV[1], 'EX', ARGV[8])
end
return {'queued', ARGV[1]}
"#;

#[derive(Clone)]
pub struct Store {
    conn: ConnectionManager,
    layout: Layout,
    timeout: Duration,
}

impl Store {
    /// Creates the store without connecting: the first command connects, and a Redis that is
    /// down at start only makes requests fail until it is up.
    pub fn new(
        client: redis::Client,
        layout: Layout,
        timeout: Duration,
    ) -> Result<Store, StoreError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client, config)?;
        Ok(Store {
            conn,
            layout,
            timeout,
        })
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The shared connection, for modules with their own commands (the admin route's script).
    pub fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// The configured per-command timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends a command or pipeline within the timeout. The first command after Redis dropped
    /// the connection fails with an I/O error while the manager reconnects; that one is sent
    /// again once, so a Redis restart costs no failed request when Redis is back.
    async fn run<T: redis::FromRedisValue>(&self, what: Query<'_>) -> Result<T, StoreError> {
        let attempt = || async {
            let mut conn = self.conn.clone();
            let fut = async {
                match what {
                    Query::Cmd(c) => c.query_async::<T>(&mut conn).await,
                }
            };
            match tokio::time::timeout(self.timeout, fut).await {
                Ok(r) => r.map_err(StoreError::Redis),
                Err(_) => Err(StoreError::Timeout(self.timeout)),
            }
        };
        match attempt().await {
            Err(StoreError::Redis(e)) if e.is_io_error() || e.is_connection_dropped() => {
                attempt().await
            }
            other => other,
        }
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        self.run::<String>(Query::Cmd(&redis::cmd("PING"))).await?;
        Ok(())
    }

    /// Records the query as `queued` (expiring after `pending_ttl`) and appends the job to the
    /// stream, in one script: a job is never on the stream without its status, nor the reverse.
    /// The same step checks the backlog and the idempotency key, so neither can be raced.
    pub async fn submit(
        &self,
        id: &str,
        job: &Job,
        checks: &SubmitChecks<'_>,
    ) -> Result<Submitted, StoreError> {
        let (idem_key, fingerprint, idem_ttl) = match checks.idempotency {
            Some((key, fp, ttl)) => (self.layout.idempotency(key), fp, ttl),
            // Unused, but a declared key of the same slot keeps the script cluster-safe.
            None => (self.layout.idempotency(""), "", 0),
        };
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(SUBMIT)
            .arg(3)
            .arg(self.layout.query(id))
            .arg(self.layout.jobs())
            .arg(idem_key)
            .arg(id)
            .arg(job.keys.len())
            .arg(job.accepted_ms)
            .arg(checks.pending_ttl)
            .arg(job.to_bincode())
            .arg(checks.max_backlog)
            .arg(fingerprint)
            .arg(idem_ttl);
        let (verdict, detail): (String, String) = self.run(Query::Cmd(&cmd)).await?;
        match verdict.as_str() {
            "queued" => Ok(Submitted::Queued),
            "full" => Ok(Submitted::Full {
                backlog: detail.parse().unwrap_or(checks.max_backlog),
            }),
            "known" => {
                let (fp, id) = detail.split_once(' ').unwrap_or(("", ""));
                Ok(Submitted::Known {
                    same_request: fp == fingerprint,
                    id: id.to_string(),
                })
            }
            other => Err(StoreError::Malformed {
                what: "submit answer",
                detail: other.to_string(),
            }),
        }
    }

    /// `WAITAOF 1 0 <timeout>`: whether the local AOF has fsynced every write of this
    /// connection so far.
    pub async fn wait_aof(&self, timeout: Duration) -> Result<bool, StoreError> {
        let mut cmd = redis::cmd("WAITAOF");
        cmd.arg(1).arg(0).arg(timeout.as_millis() as u64);
        let (local, _replicas): (i64, i64) = self.run(Query::Cmd(&cmd)).await?;
        Ok(local >= 1)
    }

    /// The query's state, `None` if the id is unknown or its record expired.
    pub async fn load(&self, id: &str) -> Result<Option<StoredQuery>, StoreError> {
        let cmd = redis::Cmd::hgetall(self.layout.query(id));
        let fields: HashMap<String, Vec<u8>> = self.run(Query::Cmd(&cmd)).await?;
        if fields.is_empty() {
            return Ok(None);
        }
        parse_query(id, &fields).map(Some)
    }

    /// Lowers the time left to the query's record to `secs` (never raises it: `EXPIRE … LT`),
    /// once a client has read its final result.
    pub async fn expire_within(&self, id: &str, secs: u64) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("EXPIRE");
        cmd.arg(self.layout.query(id)).arg(secs).arg("LT");
        self.run::<i64>(Query::Cmd(&cmd)).await?;
        Ok(())
    }

    /// The registered database, `None` if no worker has registered one.
    pub async fn database(&self) -> Result<Option<DbInfo>, StoreError> {
        let cmd = redis::Cmd::hgetall(self.layout.db());
        let fields: HashMap<String, String> = self.run(Query::Cmd(&cmd)).await?;
        if fields.is_empty() {
            return Ok(None);
        }
        let get = |name: &'static str| -> Result<u64, StoreError> {
            fields
                .get(name)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| StoreError::Malformed {
                    what: "database registration",
                    detail: format!("field {name} missing or not a number"),
                })
        };
        let epoch = get(db_field::EPOCH)?;
        Ok(Some(DbInfo {
            num_pages: get(db_field::NUM_PAGES)?,
            page_size: get(db_field::PAGE_SIZE)? as u32,
            domain_bits: get(db_field::DOMAIN_BITS)? as u8,
            epoch,
            min_epoch: get(db_field::MIN_EPOCH).unwrap_or(epoch),
            shards: get(db_field::SHARDS).unwrap_or(1).max(1) as u32,
        }))
    }

    /// The key-value layout the workers registered with the database, `None` for a page
    /// database.
    pub async fn kv_layout(&self) -> Result<Option<pirq_shared::kv::KvInfo>, StoreError> {
        let cmd = redis::Cmd::hget(self.layout.db(), db_field::KV);
        let json: Option<String> = self.run(Query::Cmd(&cmd)).await?;
        json.map(|j| {
            serde_json::from_str(&j).map_err(|e| StoreError::Malformed {
                what: "kv layout registration",
                detail: e.to_string(),
            })
        })
        .transpose()
    }

    /// Workers whose heartbeat key is alive, and the newest epoch they answer (from the window
    /// in each heartbeat). Members of the set whose heartbeat expired (a worker that died without
    /// deregistering) are removed on the way.
    pub async fn live_workers(&self) -> Result<LiveWorkers, StoreError> {
        let cmd = redis::Cmd::smembers(self.layout.workers());
        let ids: Vec<String> = self.run(Query::Cmd(&cmd)).await?;
        if ids.is_empty() {
            return Ok(LiveWorkers::default());
        }
        let keys: Vec<String> = ids.iter().map(|id| self.layout.worker(id)).collect();
        let cmd = redis::Cmd::mget(&keys);
        let beats: Vec<Option<String>> = self.run(Query::Cmd(&cmd)).await?;
        let dead: Vec<&String> = ids
            .iter()
            .zip(&beats)
            .filter(|(_, b)| b.is_none())
            .map(|(id, _)| id)
            .collect();
        if !dead.is_empty() {
            let cmd = redis::Cmd::srem(self.layout.workers(), dead);
            let _: Result<(), _> = self.run(Query::Cmd(&cmd)).await;
        }
        let mut workers = LiveWorkers::default();
        for beat in beats.iter().flatten() {
            workers.live += 1;
            let newest = serde_json::from_str::<serde_json::Value>(beat)
                .ok()
                .and_then(|v| v["window"]["newest"].as_u64());
            workers.newest = workers.newest.max(newest);
        }
        Ok(workers)
    }

    /// The database digest (SPEC §2.1) a worker registered for `epoch`, if any.
    pub async fn digest_at(&self, epoch: u64) -> Result<Option<Digest>, StoreError> {
        let cmd = redis::Cmd::hget(self.layout.digests(), epoch);
        let hex: Option<String> = self.run(Query::Cmd(&cmd)).await?;
        Ok(hex.as_deref().and_then(Digest::from_hex))
    }

    /// The party's identity (`{P}:party`), drawn and stored by the first gateway that asks.
    pub async fn party_id(&self) -> Result<String, StoreError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(PARTY_ID)
            .arg(1)
            .arg(self.layout.party())
            .arg(format!("{:032x}", rand::random::<u128>()));
        self.run(Query::Cmd(&cmd)).await
    }
}

impl Store {
    /// The heartbeat records (JSON, as workers write them) of the workers that are alive, with
    /// their ids.
    pub async fn worker_records(&self) -> Result<Vec<(String, serde_json::Value)>, StoreError> {
        let cmd = redis::Cmd::smembers(self.layout.workers());
        let ids: Vec<String> = self.run(Query::Cmd(&cmd)).await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = ids.iter().map(|id| self.layout.worker(id)).collect();
        let cmd = redis::Cmd::mget(keys);
        let records: Vec<Option<String>> = self.run(Query::Cmd(&cmd)).await?;
        Ok(ids
            .into_iter()
            .zip(records)
            .filter_map(|(id, r)| Some((id, serde_json::from_str(&r?).ok()?)))
            .collect())
    }
}

/// One command, as [`Store::run`] sends it.
#[derive(Clone, Copy)]
enum Query<'a> {
    Cmd(&'a redis::Cmd),
}

fn malformed(detail: String) -> StoreError {
    StoreError::Malformed {
        what: "query record",
        detail,
    }
}

/// Turns the fields of `{P}:q:<id>` into the result the API answers with.
fn parse_query(id: &str, fields: &HashMap<String, Vec<u8>>) -> Result<StoredQuery, StoreError> {
    let text = |name: &str| fields.get(name).and_then(|v| std::str::from_utf8(v).ok());
    let number = |name: &str| text(name).and_then(|v| v.parse::<u64>().ok());
    let status = text(qf::STATUS)
        .and_then(QueryStatus::parse)
        .ok_or_else(|| malformed(format!("query {id} has no valid status")))?;
    let mut result = QueryResult::pending(id, status);
    match status {
        QueryStatus::Queued | QueryStatus::Running => {}
        QueryStatus::Done => {
            let page_size = number(qf::PAGE_SIZE)
                .filter(|p| *p > 0)
                .ok_or_else(|| malformed(format!("query {id} is done without a page size")))?;
            let pages = fields
                .get(qf::PAGES)
                .ok_or_else(|| malformed(format!("query {id} is done without pages")))?;
            if !(pages.len() as u64).is_multiple_of(page_size) {
                return Err(malformed(format!(
                    "query {id}: answers are not whole pages"
                )));
            }
            result.epoch = number(qf::EPOCH);
            result.digest = text(qf::DIGEST).and_then(Digest::from_hex);
            result.pages = pages
                .chunks(page_size as usize)
                .map(<[u8]>::to_vec)
                .collect();
        }
        QueryStatus::Failed => {
            let code = text(qf::ERROR_CODE).unwrap_or(ErrorCode::Internal.as_str());
            let mut error = ErrorBody {
                code: code.to_string(),
                message: text(qf::ERROR_MESSAGE).unwrap_or("").to_string(),
                ..ErrorBody::new(ErrorCode::Internal, "")
            };
            if let Some(i) = number(qf::KEY_INDEX) {
                error = error.with_key_index(i as usize);
            }
            result.error = Some(error);
        }
    }
    Ok(StoredQuery {
        result,
        scan_us: number(qf::SCAN_US),
        worker_us: number(qf::WORKER_US),
    })
}
