//! The worker's side of the job stream: read windows through the consumer group, record status,
//! write results, acknowledge.
//!
//! Two connections: `XREADGROUP ... BLOCK` holds its connection until jobs arrive, so it gets one
//! of its own, and every other command goes over the second. Results are written before the
//! entry is acknowledged and deleted, and writing a result twice stores the same bytes, so a
//! job delivered again (after a crash between the two) is harmless.

use std::time::{Duration, Instant};

use pirq_shared::layout::{job_field, query_field as qf, Layout, GROUP};
use pirq_shared::metrics as m;
use pirq_shared::wire::{ErrorBody, Job, QueryStatus, WireError};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Value;

/// One stream entry as read.
#[derive(Debug)]
pub struct Delivery {
    /// Stream entry id, for `XACK`/`XDEL`.
    pub entry_id: String,
    /// The request id, `None` when the entry has none (it did not come from a gateway).
    pub request_id: Option<String>,
    pub job: Result<Job, WireError>,
    /// When this worker read it (starts the batcher's wait and the worker time).
    pub received: Instant,
}

impl Delivery {
    /// Keys the job adds to a window (an undecodable job adds none).
    pub fn keys(&self) -> usize {
        self.job.as_ref().map(|j| j.keys.len()).unwrap_or(0)
    }
}

/// What became of one delivery.
#[derive(Debug)]
pub enum Outcome {
    Done {
        entry_id: String,
        request_id: String,
        epoch: u64,
        page_size: usize,
        /// The answers back to back, `pages[i]` answering key `i`.
        pages: Vec<u8>,
        scan: Duration,
        worker: Duration,
        /// The gateway's acceptance time (Unix ms), for the end-to-end latency metric.
        accepted_ms: u64,
    },
    Failed {
        entry_id: String,
        request_id: String,
        error: ErrorBody,
        worker: Duration,
    },
    /// Not a job at all: acknowledge and delete, nobody waits for it.
    Discard { entry_id: String },
}

impl Outcome {
    fn entry_id(&self) -> &str {
        match self {
            Outcome::Done { entry_id, .. }
            | Outcome::Failed { entry_id, .. }
            | Outcome::Discard { entry_id } => entry_id,
        }
    }
}

/// Marks queued queries as running; never moves a final status back, and never creates a record
/// that expired (HSET keeps the gateway's TTL on an existing key).
const MARK_RUNNING: &str = r#"
for i, key in ipairs(KEYS) do
  if redis.call('HGET', key, 'status') == 'queued' then
    redis.call('HSET', key, 'status', 'running')
    redis.call('PUBLISH', ARGV[1], ARGV[i + 1] .. ' running')
  end
end
return 0
"#;

pub struct Queue {
    layout: Layout,
    consumer: String,
    reader: ConnectionManager,
    writer: ConnectionManager,
    result_ttl: u64,
    mark_running: redis::Script,
}

impl Queue {
    /// Connects lazily: the first command connects, and reconnects happen by themselves.
    pub fn new(
        client: &redis::Client,
        layout: Layout,
        consumer: String,
        block: Duration,
        result_ttl: u64,
    ) -> redis::RedisResult<Queue> {
        let config = |timeout: Duration| {
            ConnectionManagerConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(5)))
                .set_response_timeout(Some(timeout))
                .set_max_delay(Duration::from_secs(1))
        };
        let reader = ConnectionManager::new_lazy_with_config(
            client.clone(),
            config(block + Duration::from_secs(5)),
        )?;
        let writer = ConnectionManager::new_lazy_with_config(
            client.clone(),
            config(Duration::from_secs(5)),
        )?;
        Ok(Queue {
            layout,
            consumer,
            reader,
            writer,
            result_ttl,
            mark_running: redis::Script::new(MARK_RUNNING),
        })
    }

    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// A connection for other work (registration, heartbeats).
    pub fn connection(&self) -> ConnectionManager {
        self.writer.clone()
    }

    /// Creates the stream and the group if needed. The group starts at the stream's beginning,
    /// so jobs queued before the first worker ever ran are read too.
    pub async fn ensure_group(&self) -> redis::RedisResult<()> {
        let mut conn = self.writer.clone();
        let r: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(self.layout.jobs())
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await;
        match r {
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            other => other,
        }
    }

    /// Reads up to `count` new entries, blocking up to `block` when there are none.
    pub async fn read(&self, count: usize, block: Duration) -> redis::RedisResult<Vec<Delivery>> {
        self.xreadgroup(count, Some(block), ">").await
    }

    /// Reads up to `count` entries already delivered to this consumer and not acknowledged,
    /// with ids after `after` (start with `"0"`). A worker restarted under the same consumer
    /// name picks up what it held when it stopped. Entries deleted meanwhile come back without
    /// fields and are acknowledged as discards.
    pub async fn read_own_pending(
        &self,
        count: usize,
        after: &str,
    ) -> redis::RedisResult<Vec<Delivery>> {
        self.xreadgroup(count, None, after).await
    }

    async fn xreadgroup(
        &self,
        count: usize,
        block: Option<Duration>,
        id: &str,
    ) -> redis::RedisResult<Vec<Delivery>> {
        let mut conn = self.reader.clone();
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(GROUP)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(count.max(1));
        if let Some(block) = block {
            cmd.arg("BLOCK").arg(block.as_millis() as u64);
        }
        cmd.arg("STREAMS").arg(self.layout.jobs()).arg(id);
        let reply: redis::RedisResult<Value> = cmd.query_async(&mut conn).await;
        let reply = match reply {
            // The stream or group vanished (Redis restarted without persistence): make it again.
            Err(e) if e.code() == Some("NOGROUP") => {
                tracing::warn!("job stream or group missing; creating it");
                self.ensure_group().await?;
                return Ok(Vec::new());
            }
            other => other?,
        };
        let received = Instant::now();
        let deliveries: Vec<Delivery> = parse_read_reply(reply)
            .into_iter()
            .map(|(entry_id, fields)| delivery(entry_id, fields, received))
            .collect();
        for job in deliveries.iter().filter_map(|d| d.job.as_ref().ok()) {
            metrics::histogram!(m::WORKER_QUEUE_WAIT)
                .record(m::seconds_since_unix_ms(job.accepted_ms));
        }
        Ok(deliveries)
    }

    /// Marks the queries of a window `running` and announces it.
    pub async fn mark_running(&self, request_ids: &[String]) -> redis::RedisResult<()> {
        if request_ids.is_empty() {
            return Ok(());
        }
        let mut inv = self.mark_running.prepare_invoke();
        for id in request_ids {
            inv.key(self.layout.query(id));
        }
        inv.arg(self.layout.events());
        for id in request_ids {
            inv.arg(id);
        }
        let mut conn = self.writer.clone();
        inv.invoke_async::<()>(&mut conn).await
    }

    /// Writes every outcome of a window, announces it, then acknowledges and deletes the entries.
    pub async fn finish(&self, outcomes: &[Outcome]) -> redis::RedisResult<()> {
        if outcomes.is_empty() {
            return Ok(());
        }
        let events = self.layout.events();
        let mut pipe = redis::pipe();
        pipe.atomic();
        for outcome in outcomes {
            match outcome {
                Outcome::Done {
                    request_id,
                    epoch,
                    page_size,
                    pages,
                    scan,
                    worker,
                    ..
                } => {
                    let key = self.layout.query(request_id);
                    pipe.cmd("HSET")
                        .arg(&key)
                        .arg(qf::STATUS)
                        .arg(QueryStatus::Done.as_str())
                        .arg(qf::EPOCH)
                        .arg(*epoch)
                        .arg(qf::PAGE_SIZE)
                        .arg(*page_size)
                        .arg(qf::PAGES)
                        .arg(pages.as_slice())
                        .arg(qf::SCAN_US)
                        .arg(scan.as_micros() as u64)
                        .arg(qf::WORKER_US)
                        .arg(worker.as_micros() as u64)
                        .ignore();
                    pipe.cmd("EXPIRE").arg(&key).arg(self.result_ttl).ignore();
                    pipe.cmd("PUBLISH")
                        .arg(&events)
                        .arg(format!("{request_id} done"))
                        .ignore();
                }
                Outcome::Failed {
                    request_id,
                    error,
                    worker,
                    ..
                } => {
                    let key = self.layout.query(request_id);
                    pipe.cmd("HSET")
                        .arg(&key)
                        .arg(qf::STATUS)
                        .arg(QueryStatus::Failed.as_str())
                        .arg(qf::ERROR_CODE)
                        .arg(&error.code)
                        .arg(qf::ERROR_MESSAGE)
                        .arg(&error.message)
                        .arg(qf::WORKER_US)
                        .arg(worker.as_micros() as u64)
                        .ignore();
                    if let Some(i) = error.key_index {
                        pipe.cmd("HSET")
                            .arg(&key)
                            .arg(qf::KEY_INDEX)
                            .arg(i)
                            .ignore();
                    }
                    pipe.cmd("EXPIRE").arg(&key).arg(self.result_ttl).ignore();
                    pipe.cmd("PUBLISH")
                        .arg(&events)
                        .arg(format!("{request_id} failed"))
                        .ignore();
                }
                Outcome::Discard { .. } => {}
            }
        }
        let ids: Vec<&str> = outcomes.iter().map(Outcome::entry_id).collect();
        pipe.cmd("XACK")
            .arg(self.layout.jobs())
            .arg(GROUP)
            .arg(&ids)
            .ignore();
        pipe.cmd("XDEL").arg(self.layout.jobs()).arg(&ids).ignore();
        let mut conn = self.writer.clone();
        pipe.query_async::<()>(&mut conn).await
    }
}

fn delivery(entry_id: String, fields: Fields, received: Instant) -> Delivery {
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k.as_slice() == name.as_bytes())
            .map(|(_, v)| v.as_slice())
    };
    let request_id = field(job_field::ID)
        .and_then(|v| std::str::from_utf8(v).ok())
        .filter(|id| pirq_shared::layout::is_request_id(id))
        .map(str::to_string);
    let job = match field(job_field::JOB) {
        Some(bytes) => Job::from_bincode(bytes),
        None => Err(WireError {
            code: pirq_shared::error::ErrorCode::InvalidJob,
            message: "stream entry has no job field".into(),
            key_index: None,
        }),
    };
    Delivery {
        entry_id,
        request_id,
        job,
        received,
    }
}

/// The field/value pairs of one stream entry.
type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// Flattens an `XREADGROUP` reply (RESP2 arrays or RESP3 maps) into `(entry id, fields)`.
fn parse_read_reply(reply: Value) -> Vec<(String, Fields)> {
    let streams: Vec<(Value, Value)> = match reply {
        Value::Map(pairs) => pairs,
        Value::Array(items) => items.into_iter().filter_map(pair).collect(),
        _ => Vec::new(),
    };
    let mut out = Vec::new();
    for (_name, entries) in streams {
        let Value::Array(entries) = entries else {
            continue;
        };
        for entry in entries {
            let Some((id, fields)) = pair(entry) else {
                continue;
            };
            let Some(id) = bytes(id).and_then(|b| String::from_utf8(b).ok()) else {
                continue;
            };
            let flat = match fields {
                Value::Array(items) => items,
                Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
                _ => Vec::new(),
            };
            let mut it = flat.into_iter();
            let mut kv = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                if let (Some(k), Some(v)) = (bytes(k), bytes(v)) {
                    kv.push((k, v));
                }
            }
            out.push((id, kv));
        }
    }
    out
}

fn pair(v: Value) -> Option<(Value, Value)> {
    match v {
        Value::Array(items) if items.len() == 2 => {
            let mut it = items.into_iter();
            Some((it.next()?, it.next()?))
        }
        _ => None,
    }
}

fn bytes(v: Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.into_bytes()),
        _ => None,
    }
}
