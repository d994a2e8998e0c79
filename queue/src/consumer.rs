//! The worker's side of the job stream (the consumer): read windows through the consumer group,
//! record status, write results, acknowledge, reclaim and hand back.
//!
//! Two connections: `XREADGROUP ... BLOCK` holds its connection until jobs arrive, so it gets one
//! of its own, and every other command goes over the second. Results are written before the
//! entry is acknowledged and deleted, and writing a result twice stores the same bytes, so a
//! job delivered again (after a crash between the two) is harmless.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pirq_shared::layout::{job_field, shard_group, Layout, PartitionKeys};
use pirq_shared::metrics as m;
use pirq_shared::shard::ShardSpec;
use pirq_shared::wire::{ErrorBody, Job, QueryStatus, Reply, WireError};
use redis::Value;

use crate::connect::{Conn, Settings};
use crate::record::{self, DoneFields, Frames, Pages, Written};
use crate::reply::{self, Fields};
use crate::{one_slot, probe, scripts, Connection, QueueError, RedisTarget, RequestId};

/// A job stream entry: the partition whose stream holds it, and its id there.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EntryId {
    pub partition: u32,
    /// The stream entry id (`<ms>-<seq>`), for `XACK`/`XDEL`.
    pub id: String,
}

impl std::fmt::Display for EntryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.partition, self.id)
    }
}

/// One stream entry as read.
#[derive(Debug)]
pub struct Delivery {
    /// Stream entry, for `XACK`/`XDEL`.
    pub entry_id: EntryId,
    /// The request id, `None` when the entry has none (it did not come from a gateway), or one
    /// that does not live in the entry's partition (nor did that).
    pub request_id: Option<RequestId>,
    pub job: Result<Job, WireError>,
    /// When this worker read it (starts the worker time).
    pub received: Instant,
    /// How many times the group has delivered this entry, this delivery included.
    pub deliveries: u64,
    /// The entry was deleted while pending (read again without fields).
    pub gone: bool,
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
        entry_id: EntryId,
        request_id: RequestId,
        epoch: u64,
        page_size: usize,
        /// The answers back to back, page `i` answering key `i`, in the scanner's buffers.
        pages: Pages,
        scan: Duration,
        worker: Duration,
        /// The gateway's acceptance time (Unix ms), for the end-to-end latency metric.
        accepted_ms: u64,
        /// Digest of the database at `epoch` (SPEC §2.1), stamped on the result.
        digest: Option<pirq_shared::digest::Digest>,
        /// Where the answer goes (the job's).
        reply: Reply,
    },
    Failed {
        entry_id: EntryId,
        request_id: RequestId,
        error: ErrorBody,
        worker: Duration,
        reply: Reply,
    },
    /// Not a job at all: acknowledge and delete, nobody waits for it.
    Discard { entry_id: EntryId },
    /// Nothing left to do for this shard (the query is already final, or its record expired):
    /// acknowledge and delete, without writing anything.
    Settled { entry_id: EntryId },
    /// Not answered this time: give the entry back to the group at once (not acknowledged), so
    /// any worker claims it again; `deliveries` so far stay counted.
    Retry { entry_id: EntryId, deliveries: u64 },
    /// Given up: copied to the dead-letter stream with the reason, the query (if any) `failed`
    /// with that reason, the entry acknowledged and deleted.
    DeadLetter {
        entry_id: EntryId,
        request_id: Option<RequestId>,
        error: ErrorBody,
        deliveries: u64,
        /// The job's, when it could be read (else the failure is kept `--result-ttl`).
        reply: Reply,
    },
}

impl Outcome {
    pub fn entry_id(&self) -> &EntryId {
        match self {
            Outcome::Done { entry_id, .. }
            | Outcome::Failed { entry_id, .. }
            | Outcome::Discard { entry_id }
            | Outcome::Settled { entry_id }
            | Outcome::Retry { entry_id, .. }
            | Outcome::DeadLetter { entry_id, .. } => entry_id,
        }
    }
}

/// Idle time given to an entry handed back to the group: longer than any `--claim-idle-ms`, so
/// the next `XAUTOCLAIM` of any worker takes it (about 49 days).
const RELEASED_IDLE_MS: u64 = u32::MAX as u64;

/// The delivery rules: how long an entry may sit unacknowledged with a consumer before another
/// takes it, how often it may be delivered, and the dead-letter stream's cap.
#[derive(Clone, Debug)]
pub struct Policy {
    /// `None`: derived from the longest window seen ([`Consumer::claim_idle`]).
    pub claim_idle: Option<Duration>,
    pub max_deliveries: u64,
    pub dead_letter_max: u64,
}

/// Deliveries a job gets by default (`--max-deliveries`): one failure may be bad luck (its
/// worker was killed for another reason), three in a row make the job the likely cause, so it
/// is dead-lettered and its query answered `failed` instead of taking down worker after worker.
pub const DEFAULT_MAX_DELIVERIES: u64 = 3;

/// Default approximate cap on the dead-letter stream (`--dead-letter-max`): room to inspect an
/// incident's poison jobs, and a bound so that a flood of them cannot grow Redis without end.
pub const DEFAULT_DEAD_LETTER_MAX: u64 = 10_000;

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            claim_idle: None,
            max_deliveries: DEFAULT_MAX_DELIVERIES,
            dead_letter_max: DEFAULT_DEAD_LETTER_MAX,
        }
    }
}

/// Outcomes per block when a window's outcomes are written ([`Consumer::finish`]): small enough
/// that the first answers are announced while Redis still reads the rest, large enough that a
/// block's one `SPUBLISH`, `XACK` and `XDEL` stay a small share of its commands (16 answers of
/// 4 KiB are 64 KiB, a few reads of Redis' 16 KiB input buffer).
pub const FINISH_BLOCK: usize = 16;

/// How long the final record of a query whose client a gateway holds (`Prefer: wait`) is kept
/// when it is written well before the gateway's deadline: the answer reaches that gateway in
/// the completion event, and the record is only a net for an event the gateway missed (its
/// subscription reconnecting), which its waiters read again within [`HELD_KEEP`] (they re-read
/// every 2 s and at once after a reconnect). Kept for `--result-ttl` like any other result it
/// would count against Redis' memory for minutes, for nobody.
pub const HELD_KEEP: Duration = Duration::from_secs(5);

/// A job finished less than this before its gateway's deadline is kept for `--result-ttl`: the
/// gateway may have given up waiting (its clock and the worker's differ by a little; it answers
/// 202 at the deadline), and its client then polls for the record.
pub const HELD_SLACK: Duration = Duration::from_secs(2);

/// [`Consumer`]'s keep time for a final record written at `now_ms` whose full time is
/// `full_ms` (`--result-ttl`): a held request's record, written well before its gateway's
/// deadline, is kept what the gateway asked within [`HELD_KEEP`] (at least 1 ms); any other
/// record the full time.
fn held_keep_ms(reply: &Reply, now_ms: u64, full_ms: u64) -> u64 {
    match reply.held_until_ms {
        Some(until) if now_ms + (HELD_SLACK.as_millis() as u64) < until => {
            let bound = HELD_KEEP.as_millis() as u64;
            reply
                .held_keep_ms
                .unwrap_or(bound)
                .clamp(1, bound)
                .min(full_ms)
        }
        _ => full_ms,
    }
}

/// The Idempotency-Key of a held request (`Reply::held_keep_ms` set: its gateway holds the
/// request and hands the answer over from the event), whose record an unsharded worker shortens
/// with the answer's ([`Reply::held_keep_ms`] documents the promise to the gateway).
fn held_idempotency(reply: &Reply) -> Option<&str> {
    reply.held_keep_ms?;
    reply.idempotency_key.as_deref()
}

/// Seconds a sharded query's combine state lives at most (as long as a `queued` record does by
/// default, `--pending-ttl`): every shard's partial must be in by then.
const SHARD_STATE_TTL: u64 = 3600;

/// The floor of the derived claim-idle time.
pub const MIN_AUTO_CLAIM_IDLE: Duration = Duration::from_secs(5);
/// Longest derived claim-idle time: one very slow window (a Redis stall counts into it) must not
/// make a dead worker's jobs wait minutes for a peer.
pub const MAX_AUTO_CLAIM_IDLE: Duration = Duration::from_secs(20);

/// How long a worker's connection attempt may take: a Redis that has not accepted within 5 s
/// is down or cut off, and the command fails so that the caller's back-off (and its warning)
/// takes over instead of a worker that hangs without a word.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How much longer than its block time a command may wait for its reply: a reply that takes 5 s
/// beyond it means Redis or the network is stalled, so the command fails and is retried.
const REPLY_SLACK: Duration = Duration::from_secs(5);

/// Longest wait between reconnect attempts: a worker serves again within a second of Redis
/// coming back.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// The settings of a worker's Redis connections, for commands that block up to `block`
/// (`XREADGROUP ... BLOCK` here, the updates follower's `XREAD ... BLOCK`; `Duration::ZERO` for
/// a connection whose commands never block). The reply timeout is `block` + [`REPLY_SLACK`]:
/// a blocking read holds its connection for the whole block time when no entry arrives, so a
/// shorter timeout would fail every idle read (and log a warning every couple of seconds).
pub(crate) fn connection_settings(block: Duration) -> Settings {
    Settings {
        connect_timeout: CONNECT_TIMEOUT,
        response_timeout: block + REPLY_SLACK,
        reconnect_retries: None,
        max_reconnect_delay: Some(MAX_RECONNECT_DELAY),
    }
}

/// What [`Consumer::start_shard_window`] found for one job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardStart {
    /// Answer at this epoch (every shard answers the job at the same one).
    At(u64),
    /// Nothing to answer: the query is final already.
    Settled,
    /// The query holds partials of another shard count (the party was re-split meanwhile).
    OtherShardCount,
}

/// One worker's consumer of the job streams, one per partition of the party
/// ([`Layout::partition`]): every worker reads every partition, each through a blocking
/// connection of its own ([`Consumer::read`] takes the partition), and each outcome goes back
/// to the partition its entry came from.
pub struct Consumer {
    layout: Layout,
    /// The keys of each partition, by index.
    partitions: Vec<PartitionKeys>,
    /// The shard this worker serves ([`ShardSpec::WHOLE`] when unsharded) and its group.
    shard: ShardSpec,
    group: String,
    consumer: String,
    /// One connection for each partition's `XREADGROUP … BLOCK`, by index.
    readers: Vec<Conn>,
    writer: Conn,
    result_ttl: u64,
    policy: Policy,
    /// `XACKDEL` (Redis ≥ 8.2) found at start: one command instead of `XACK` + `XDEL`.
    ackdel: AtomicBool,
    /// Entries this worker holds (read, not yet acknowledged or handed back).
    inflight: Mutex<HashSet<EntryId>>,
    /// Recent longest window, in microseconds (derives the claim-idle time): rises at once to
    /// a longer window, decays towards shorter ones.
    longest_window_us: AtomicU64,
}

impl Consumer {
    /// Connects lazily: the first command connects, and reconnects happen by themselves.
    pub fn new(
        target: &RedisTarget,
        layout: Layout,
        consumer: String,
        block: Duration,
        result_ttl: u64,
    ) -> Result<Consumer, QueueError> {
        let readers = (0..layout.partitions())
            .map(|_| Ok(target.worker_connection(block)?.conn))
            .collect::<Result<Vec<_>, QueueError>>()?;
        let writer = target.worker_connection(Duration::ZERO)?.conn;
        Ok(Consumer {
            partitions: layout.all_partitions().map(|(_, keys)| keys).collect(),
            layout,
            shard: ShardSpec::WHOLE,
            group: shard_group(ShardSpec::WHOLE),
            consumer,
            readers,
            writer,
            result_ttl,
            policy: Policy::default(),
            ackdel: AtomicBool::new(false),
            inflight: Mutex::new(HashSet::new()),
            longest_window_us: AtomicU64::new(0),
        })
    }

    /// Sets the delivery rules.
    pub fn with_policy(mut self, policy: Policy) -> Consumer {
        self.policy = Policy {
            max_deliveries: policy.max_deliveries.max(1),
            ..policy
        };
        self
    }

    /// Serves shard `spec`: reads through that shard's consumer group, and writes partial
    /// answers through the combine script instead of results.
    pub fn with_shard(mut self, spec: ShardSpec) -> Consumer {
        self.shard = spec;
        self.group = shard_group(spec);
        self
    }

    pub fn shard(&self) -> ShardSpec {
        self.shard
    }

    /// The consumer group this worker reads through.
    pub fn group(&self) -> &str {
        &self.group
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// How many partitions this worker reads.
    pub fn partitions(&self) -> u32 {
        self.partitions.len() as u32
    }

    fn keys(&self, partition: u32) -> &PartitionKeys {
        &self.partitions[partition as usize]
    }

    /// A connection for other work (registration, heartbeats).
    pub fn connection(&self) -> Connection {
        Connection {
            conn: self.writer.clone(),
        }
    }

    /// How long an entry may sit with a consumer before another worker claims it: the flag, or
    /// 10 × the recent longest window, between [`MIN_AUTO_CLAIM_IDLE`] and
    /// [`MAX_AUTO_CLAIM_IDLE`]. Entries a live worker holds never reach it: the keeper refreshes
    /// them ([`Consumer::touch_inflight`]) every third of it.
    pub fn claim_idle(&self) -> Duration {
        self.policy.claim_idle.unwrap_or_else(|| {
            auto_claim_idle(Duration::from_micros(
                self.longest_window_us.load(Ordering::Relaxed),
            ))
        })
    }

    /// Records how long a window took (read to outcomes): a longer window than the recent
    /// longest replaces it, a shorter one pulls it down by an eighth of the difference, so a
    /// one-off slow window (a Redis stall) stops counting after a few dozen normal ones.
    pub fn note_window(&self, took: Duration) {
        let took = took.as_micros() as u64;
        let _ = self
            .longest_window_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(decayed_longest(old, took))
            });
    }

    /// Finds what this Redis offers instead of assuming it: `XACKDEL` (8.2) is probed with
    /// `COMMAND INFO`. Returns the server version for the log.
    pub async fn probe(&self) -> Result<String, QueueError> {
        let mut conn = self.writer.node();
        let version = probe::server_version(&mut conn).await?;
        let ackdel = probe::command_exists(&mut conn, "XACKDEL").await?;
        self.ackdel.store(ackdel, Ordering::Relaxed);
        Ok(version)
    }

    /// Whether acknowledgements use `XACKDEL`.
    pub fn uses_xackdel(&self) -> bool {
        self.ackdel.load(Ordering::Relaxed)
    }

    /// Creates every partition's stream and group if needed. The group starts at the stream's
    /// beginning, so jobs queued before the first worker ever ran are read too.
    pub async fn ensure_group(&self) -> Result<(), QueueError> {
        for p in 0..self.partitions() {
            self.ensure_group_in(p).await?;
        }
        Ok(())
    }

    async fn ensure_group_in(&self, partition: u32) -> Result<(), QueueError> {
        let mut conn = self.writer.clone();
        let r: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(self.keys(partition).jobs())
            .arg(&self.group)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await;
        match r {
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            other => Ok(other?),
        }
    }

    /// Reads up to `count` new entries of `partition`, blocking up to `block` when there are
    /// none (on that partition's reader connection).
    pub async fn read(
        &self,
        partition: u32,
        count: usize,
        block: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        self.xreadgroup(partition, count, Some(block), ">").await
    }

    /// Reads up to `count` entries already delivered to this consumer and not acknowledged,
    /// with ids after `after` (start with `"0"`). A worker restarted under the same consumer
    /// name picks up what it held when it stopped. Entries deleted meanwhile come back without
    /// fields and are acknowledged as discards.
    pub async fn read_own_pending(
        &self,
        partition: u32,
        count: usize,
        after: &str,
    ) -> Result<Vec<Delivery>, QueueError> {
        self.xreadgroup(partition, count, None, after).await
    }

    async fn xreadgroup(
        &self,
        partition: u32,
        count: usize,
        block: Option<Duration>,
        id: &str,
    ) -> Result<Vec<Delivery>, QueueError> {
        let mut conn = self.readers[partition as usize].clone();
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(&self.group)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(count.max(1));
        if let Some(block) = block {
            cmd.arg("BLOCK").arg(block.as_millis() as u64);
        }
        cmd.arg("STREAMS").arg(self.keys(partition).jobs()).arg(id);
        let reply: redis::RedisResult<Value> = cmd.query_async(&mut conn).await;
        let reply = match reply {
            // The stream or group vanished (Redis restarted without persistence): make it again.
            Err(e) if e.code() == Some("NOGROUP") => {
                tracing::warn!(partition, "job stream or group missing; creating it");
                self.ensure_group_in(partition).await?;
                return Ok(Vec::new());
            }
            other => other?,
        };
        let received = Instant::now();
        let mut deliveries: Vec<Delivery> = reply::read_reply(reply)
            .into_iter()
            .map(|(entry_id, fields)| self.delivery(partition, entry_id, fields, received))
            .collect();
        self.drop_gone(partition, &mut deliveries).await?;
        self.hold(&deliveries);
        // New entries are on their first delivery; entries read again are counted by Redis.
        if id != ">" {
            self.fill_delivery_counts(partition, &mut deliveries)
                .await?;
        }
        for job in deliveries.iter().filter_map(|d| d.job.as_ref().ok()) {
            metrics::histogram!(m::WORKER_QUEUE_WAIT, m::TABLE => self.layout().table_name().to_string())
                .record(m::seconds_since_unix_ms(job.accepted_ms));
        }
        Ok(deliveries)
    }

    /// Claims up to `count` entries that sat unacknowledged with any consumer (this one
    /// included) for at least `min_idle`: a worker that died, or entries handed back. `cursor`
    /// carries the `XAUTOCLAIM` scan position between calls (start with `"0-0"`). Each claim
    /// counts as a delivery.
    pub async fn claim(
        &self,
        partition: u32,
        min_idle: Duration,
        count: usize,
        cursor: &mut String,
    ) -> Result<Vec<Delivery>, QueueError> {
        let mut conn = self.writer.clone();
        let reply: redis::RedisResult<Value> = redis::cmd("XAUTOCLAIM")
            .arg(self.keys(partition).jobs())
            .arg(&self.group)
            .arg(&self.consumer)
            .arg(min_idle.as_millis() as u64)
            .arg(cursor.as_str())
            .arg("COUNT")
            .arg(count.max(1))
            .query_async(&mut conn)
            .await;
        let reply = match reply {
            Err(e) if e.code() == Some("NOGROUP") => {
                self.ensure_group_in(partition).await?;
                return Ok(Vec::new());
            }
            other => other?,
        };
        let Some((next, entries)) = reply::autoclaim(reply) else {
            return Ok(Vec::new());
        };
        if let Some(next) = next {
            *cursor = next;
        }
        let received = Instant::now();
        let mut deliveries: Vec<Delivery> = entries
            .into_iter()
            .map(|(entry_id, fields)| self.delivery(partition, entry_id, fields, received))
            .collect();
        self.drop_gone(partition, &mut deliveries).await?;
        self.hold(&deliveries);
        self.fill_delivery_counts(partition, &mut deliveries)
            .await?;
        if !deliveries.is_empty() {
            metrics::counter!(m::WORKER_JOBS_RECLAIMED, m::TABLE => self.layout().table_name().to_string())
                .increment(deliveries.len() as u64);
        }
        Ok(deliveries)
    }

    /// Acknowledges entries that were deleted while pending (they come back without fields):
    /// nothing is left to answer.
    async fn drop_gone(
        &self,
        partition: u32,
        deliveries: &mut Vec<Delivery>,
    ) -> Result<(), QueueError> {
        let gone: Vec<String> = deliveries
            .iter()
            .filter(|d| d.gone)
            .map(|d| d.entry_id.id.clone())
            .collect();
        if gone.is_empty() {
            return Ok(());
        }
        deliveries.retain(|d| !d.gone);
        let mut conn = self.writer.clone();
        redis::cmd("XACK")
            .arg(self.keys(partition).jobs())
            .arg(&self.group)
            .arg(&gone)
            .query_async::<()>(&mut conn)
            .await?;
        Ok(())
    }

    /// Sets each delivery's count from the group's pending list (`XPENDING` per entry, one
    /// round trip).
    async fn fill_delivery_counts(
        &self,
        partition: u32,
        deliveries: &mut [Delivery],
    ) -> Result<(), QueueError> {
        if deliveries.is_empty() {
            return Ok(());
        }
        let jobs = self.keys(partition).jobs();
        let mut pipe = redis::pipe();
        for d in deliveries.iter() {
            pipe.cmd("XPENDING")
                .arg(&jobs)
                .arg(&self.group)
                .arg(&d.entry_id.id)
                .arg(&d.entry_id.id)
                .arg(1);
        }
        let mut conn = self.writer.clone();
        let replies: Vec<Value> = one_slot::send(&pipe, &mut conn).await?;
        for (d, reply) in deliveries.iter_mut().zip(replies) {
            if let Some((_, count, _)) = reply::pending(reply).into_iter().next() {
                d.deliveries = count.max(1);
            }
        }
        Ok(())
    }

    /// Entries this consumer still holds in the group of any partition (up to `count` a
    /// partition), with their delivery counts, leaving out those it already handed back (idle
    /// past [`RELEASED_IDLE_MS`] / 2).
    pub async fn own_pending(&self, count: usize) -> Result<Vec<(EntryId, u64)>, QueueError> {
        let mut conn = self.writer.clone();
        let mut held = Vec::new();
        for (p, keys) in self.partitions.iter().enumerate() {
            let reply: Value = redis::cmd("XPENDING")
                .arg(keys.jobs())
                .arg(&self.group)
                .arg("-")
                .arg("+")
                .arg(count.max(1))
                .arg(&self.consumer)
                .query_async(&mut conn)
                .await?;
            held.extend(
                reply::pending(reply)
                    .into_iter()
                    .filter(|(_, _, idle)| *idle < RELEASED_IDLE_MS / 2)
                    .map(|(id, count, _)| {
                        let entry = EntryId {
                            partition: p as u32,
                            id,
                        };
                        (entry, count)
                    }),
            );
        }
        Ok(held)
    }

    /// Hands entries back to the group without acknowledging them: their idle time is set past
    /// any claim-idle time, so the next `XAUTOCLAIM` of any worker takes them, and their
    /// delivery count is set to the given value (the claim adds one).
    pub async fn release(&self, entries: &[(EntryId, u64)]) -> Result<(), QueueError> {
        if entries.is_empty() {
            return Ok(());
        }
        // One pipeline per partition (one hash slot each), sent at once.
        let mut ordered: Vec<&(EntryId, u64)> = entries.iter().collect();
        ordered.sort_by_key(|(id, _)| id.partition);
        let sends = ordered
            .chunk_by(|a, b| a.0.partition == b.0.partition)
            .map(|partition| {
                let mut pipe = redis::pipe();
                for (id, count) in partition {
                    self.release_cmd(&mut pipe, id, *count);
                }
                let mut conn = self.writer.clone();
                async move { one_slot::send::<()>(&pipe, &mut conn).await }
            });
        futures::future::try_join_all(sends).await?;
        self.forget(entries.iter().map(|(id, _)| id));
        Ok(())
    }

    fn release_cmd(&self, pipe: &mut redis::Pipeline, entry: &EntryId, retry_count: u64) {
        pipe.cmd("XCLAIM")
            .arg(self.keys(entry.partition).jobs())
            .arg(&self.group)
            .arg(&self.consumer)
            .arg(0)
            .arg(&entry.id)
            .arg("IDLE")
            .arg(RELEASED_IDLE_MS)
            .arg("RETRYCOUNT")
            .arg(retry_count)
            .arg("JUSTID")
            .ignore();
    }

    /// Refreshes the idle time of every entry this worker holds (`XCLAIM … JUSTID` to itself,
    /// which does not count a delivery), so no peer claims a job that is only slow.
    pub async fn touch_inflight(&self) -> Result<usize, QueueError> {
        let mut ids: Vec<EntryId> = self.inflight.lock().unwrap().iter().cloned().collect();
        if ids.is_empty() {
            return Ok(0);
        }
        ids.sort_by_key(|e| e.partition);
        // One command per 500 entries of a partition (each on one stream), all sent at once.
        let claims = ids
            .chunk_by(|a, b| a.partition == b.partition)
            .flat_map(|partition| partition.chunks(500))
            .map(|chunk| {
                let mut cmd = redis::cmd("XCLAIM");
                cmd.arg(self.keys(chunk[0].partition).jobs())
                    .arg(&self.group)
                    .arg(&self.consumer)
                    .arg(0)
                    .arg(chunk.iter().map(|e| e.id.as_str()).collect::<Vec<_>>())
                    .arg("JUSTID");
                let mut conn = self.writer.clone();
                async move { cmd.query_async::<()>(&mut conn).await }
            });
        futures::future::try_join_all(claims).await?;
        Ok(ids.len())
    }

    fn hold(&self, deliveries: &[Delivery]) {
        let mut set = self.inflight.lock().unwrap();
        set.extend(deliveries.iter().map(|d| d.entry_id.clone()));
    }

    /// Stops refreshing these entries (acknowledged, handed back, or given up on: then they
    /// become claimable after the claim-idle time).
    pub fn forget<'a>(&self, ids: impl IntoIterator<Item = &'a EntryId>) {
        let mut set = self.inflight.lock().unwrap();
        for id in ids {
            set.remove(id);
        }
    }

    /// Entries currently held.
    pub fn inflight(&self) -> usize {
        self.inflight.lock().unwrap().len()
    }

    /// Announces that the queries of a window are `running` (for clients that follow a query's
    /// events; nothing is written): one `SPUBLISH` of frames per partition the queries live in,
    /// all sent at once.
    pub async fn mark_running(&self, request_ids: &[RequestId]) -> Result<(), QueueError> {
        let sends = self
            .by_partition(request_ids, |id| id)
            .into_iter()
            .map(|(partition, ids)| {
                let mut frames = Frames::default();
                for id in ids {
                    frames.push(*id, Written::progress(QueryStatus::Running));
                }
                let mut cmd = redis::cmd("SPUBLISH");
                cmd.arg(self.keys(partition).events()).arg(&frames);
                let mut conn = self.writer.clone();
                async move { cmd.query_async::<()>(&mut conn).await }
            });
        futures::future::try_join_all(sends).await?;
        Ok(())
    }

    /// `items` grouped by the partition of their request id, partitions in ascending order,
    /// each group in the order given (with each item's index in `items`).
    fn by_partition<'a, T>(
        &self,
        items: &'a [T],
        id: impl Fn(&'a T) -> &'a RequestId,
    ) -> Vec<(u32, Vec<&'a RequestId>)> {
        self.indexed_by_partition(items, id)
            .into_iter()
            .map(|(p, group)| (p, group.into_iter().map(|(_, id)| id).collect()))
            .collect()
    }

    fn indexed_by_partition<'a, T>(
        &self,
        items: &'a [T],
        id: impl Fn(&'a T) -> &'a RequestId,
    ) -> Vec<(u32, Vec<(usize, &'a RequestId)>)> {
        let mut groups: std::collections::BTreeMap<u32, Vec<(usize, &RequestId)>> =
            Default::default();
        for (i, item) in items.iter().enumerate() {
            let request = id(item);
            let partition = self.layout.partition_of_id(request.as_str());
            groups.entry(partition).or_default().push((i, request));
        }
        groups.into_iter().collect()
    }

    /// Sharded parties: announces a window's queries running (the first shard to start each,
    /// for clients that follow events), fixes their shard count and pins the epoch every shard
    /// answers them at (`queue/lua/shard_start.lua`). `jobs`: (request id, the epoch this worker
    /// would answer at, whether the query's client follows its events).
    pub async fn start_shard_window(
        &self,
        jobs: &[(RequestId, u64, bool)],
    ) -> Result<Vec<ShardStart>, QueueError> {
        let mut starts = vec![ShardStart::Settled; jobs.len()];
        // One script run per partition (a script touches one slot), all sent at once.
        let groups = self.indexed_by_partition(jobs, |(id, _, _)| id);
        let runs = groups.iter().map(|(partition, group)| {
            let keys = self.keys(*partition);
            let mut inv = scripts::SHARD_START.script().prepare_invoke();
            for (_, id) in group {
                inv.key(keys.query(id.as_str()));
                inv.key(keys.shard_state(id.as_str()));
            }
            inv.arg(keys.events())
                .arg(self.shard.count)
                .arg(SHARD_STATE_TTL.max(self.result_ttl));
            for (i, id) in group {
                let (_, epoch, follows) = jobs[*i];
                inv.arg(id.as_str())
                    .arg(epoch)
                    .arg(if follows { "1" } else { "0" });
            }
            let mut conn = self.writer.clone();
            async move { inv.invoke_async::<Vec<i64>>(&mut conn).await }
        });
        let replies = futures::future::try_join_all(runs).await?;
        for ((_, group), replies) in groups.iter().zip(replies) {
            for ((i, _), reply) in group.iter().zip(replies) {
                starts[*i] = match reply {
                    e if e >= 0 => ShardStart::At(e as u64),
                    -3 => ShardStart::OtherShardCount,
                    _ => ShardStart::Settled,
                };
            }
        }
        Ok(starts)
    }

    /// How long the final record of a job with `reply` is kept, in milliseconds: briefly when
    /// its gateway holds the client's request and will hand the answer over from the event
    /// (what the gateway asked, [`Reply::held_keep_ms`], within [`HELD_KEEP`]), else
    /// `--result-ttl`.
    fn keep_ms(&self, reply: &Reply) -> u64 {
        held_keep_ms(reply, record::unix_ms(), self.result_ttl * 1000)
    }

    /// Writes every outcome of a window, announces it, then acknowledges and deletes the
    /// entries (and hands back the ones to retry). A shard of a sharded party writes its
    /// answers as partials through the combine script, which acknowledges them itself and
    /// deletes the entry once the last shard's partial completed the query
    /// (`queue/lua/shard_combine.lua`).
    ///
    /// One pipeline (one round trip) per partition the outcomes belong to, all sent at once:
    /// each partition's keys and status channel sit in one hash slot, so on a Redis Cluster each
    /// pipeline goes to the node serving it ([`Consumer::finish_pipelines`]). Each pipeline is
    /// cut into blocks of [`FINISH_BLOCK`] outcomes: a block is each answer's `SET`, then one
    /// `SPUBLISH` carrying the block's records, then one `XACK` and one `XDEL` of its entries;
    /// Redis announces a block's results as soon as it has run it. No `MULTI`: Redis runs a
    /// connection's commands in order, so an entry is never acknowledged before its result is
    /// written; a worker that dies half-way leaves results written and entries unacknowledged,
    /// which are delivered again and written again with the same bytes.
    pub async fn finish(&self, outcomes: &[Outcome]) -> Result<(), QueueError> {
        if outcomes.is_empty() {
            return Ok(());
        }
        let sends = self.finish_pipelines(outcomes).into_iter().map(|pipe| {
            let mut conn = self.writer.clone();
            async move { one_slot::send::<()>(&pipe, &mut conn).await }
        });
        futures::future::try_join_all(sends).await?;
        self.forget(outcomes.iter().map(Outcome::entry_id));
        Ok(())
    }

    /// The pipelines of [`Consumer::finish`]: one per partition among `outcomes` (ascending),
    /// each of blocks of at most [`FINISH_BLOCK`] outcomes, in the order given.
    fn finish_pipelines(&self, outcomes: &[Outcome]) -> Vec<redis::Pipeline> {
        let mut ordered: Vec<&Outcome> = outcomes.iter().collect();
        ordered.sort_by_key(|o| o.entry_id().partition);
        ordered
            .chunk_by(|a, b| a.entry_id().partition == b.entry_id().partition)
            .map(|partition| {
                let mut pipe = redis::pipe();
                for block in partition.chunks(FINISH_BLOCK) {
                    self.finish_block(&mut pipe, block);
                }
                pipe
            })
            .collect()
    }

    /// The commands of one block of [`Consumer::finish`].
    fn finish_block(&self, pipe: &mut redis::Pipeline, outcomes: &[&Outcome]) {
        let Some(first) = outcomes.first() else {
            return;
        };
        let keys = self.keys(first.entry_id().partition);
        let events = keys.events();
        let mut frames = Frames::default();
        let mut acked: Vec<&str> = Vec::new();
        for outcome in outcomes.iter().copied() {
            match outcome {
                Outcome::Done {
                    entry_id,
                    request_id,
                    epoch,
                    page_size,
                    pages,
                    scan,
                    worker,
                    digest,
                    reply,
                    ..
                } => {
                    let done = DoneFields {
                        epoch: *epoch,
                        page_size: *page_size,
                        pages,
                        scan: *scan,
                        worker: *worker,
                        digest: *digest,
                    };
                    if self.shard.is_whole() {
                        let record = self.done_cmds(pipe, keys, request_id, &done, reply);
                        frames.push(*request_id, record);
                        acked.push(&entry_id.id);
                    } else {
                        self.partial_cmds(pipe, keys, &entry_id.id, request_id, &done, reply);
                    }
                }
                Outcome::Failed {
                    entry_id,
                    request_id,
                    error,
                    worker,
                    reply,
                } => {
                    self.fail_cmds(pipe, keys, request_id, error, *worker, reply);
                    acked.push(&entry_id.id);
                }
                Outcome::Discard { entry_id } | Outcome::Settled { entry_id } => {
                    acked.push(&entry_id.id)
                }
                Outcome::Retry {
                    entry_id,
                    deliveries,
                } => self.release_cmd(pipe, entry_id, *deliveries),
                Outcome::DeadLetter {
                    entry_id,
                    request_id,
                    error,
                    deliveries,
                    reply,
                } => {
                    scripts::DEAD_LETTER
                        .eval(pipe, 2)
                        .arg(keys.jobs())
                        .arg(keys.dead_letters())
                        .arg(&entry_id.id)
                        .arg(self.policy.dead_letter_max)
                        .arg(&error.code)
                        .arg(&error.message)
                        .arg(*deliveries)
                        .arg(&self.consumer)
                        .ignore();
                    if let Some(request_id) = request_id {
                        self.fail_cmds(pipe, keys, request_id, error, Duration::ZERO, reply);
                    }
                    acked.push(&entry_id.id);
                }
            }
        }
        if !frames.is_empty() {
            pipe.cmd("SPUBLISH").arg(&events).arg(&frames).ignore();
        }
        if !acked.is_empty() {
            if self.uses_xackdel() && self.shard.is_whole() {
                pipe.cmd("XACKDEL")
                    .arg(keys.jobs())
                    .arg(&self.group)
                    .arg("IDS")
                    .arg(acked.len())
                    .arg(&acked)
                    .ignore();
            } else {
                pipe.cmd("XACK")
                    .arg(keys.jobs())
                    .arg(&self.group)
                    .arg(&acked)
                    .ignore();
                pipe.cmd("XDEL").arg(keys.jobs()).arg(&acked).ignore();
            }
        }
    }

    /// An answer's record, `SET` with its keep time (and a held query's Idempotency-Key record
    /// shortened to the same); returns the record for the block's event.
    fn done_cmds(
        &self,
        pipe: &mut redis::Pipeline,
        keys: &PartitionKeys,
        request_id: &RequestId,
        done: &DoneFields,
        reply: &Reply,
    ) -> Written {
        let record = Written::done(done, reply.idempotency_key.as_deref());
        let keep = self.keep_ms(reply);
        pipe.cmd("SET")
            .arg(keys.query(request_id.as_str()))
            .arg(&record)
            .arg("PX")
            .arg(keep)
            .ignore();
        if let Some(key) = held_idempotency(reply) {
            // A held query's Idempotency-Key record is kept as briefly as its record, here in
            // the block's pipeline, instead of by the gateway after the hand-over (a round trip
            // and a task a query).
            pipe.cmd("PEXPIRE")
                .arg(keys.idempotency(key))
                .arg(keep)
                .arg("LT")
                .ignore();
        }
        record
    }

    /// A shard's partial answer: the combine script XORs it in and acknowledges the entry.
    /// Every shard stamps the digest of the database it answered from (the whole database's);
    /// the script fails the query if two shards differ.
    fn partial_cmds(
        &self,
        pipe: &mut redis::Pipeline,
        keys: &PartitionKeys,
        entry_id: &str,
        request_id: &RequestId,
        done: &DoneFields,
        reply: &Reply,
    ) {
        scripts::SHARD_COMBINE
            .eval(pipe, 5)
            .arg(keys.query(request_id.as_str()))
            .arg(keys.partial_sum(request_id.as_str()))
            .arg(keys.partial_in(request_id.as_str(), self.shard.index))
            .arg(keys.jobs())
            .arg(keys.shard_state(request_id.as_str()))
            .arg(self.shard.index)
            .arg(self.shard.count)
            .arg(done.pages)
            .arg(done.epoch)
            .arg(done.page_size)
            .arg(done.scan.as_micros() as u64)
            .arg(done.worker.as_micros() as u64)
            .arg(self.keep_ms(reply))
            .arg(entry_id)
            .arg(&self.group)
            .arg(keys.events())
            .arg(request_id.as_str())
            .arg(done.digest.map(|d| d.to_hex()).unwrap_or_default())
            .arg(reply.idempotency_key.as_deref().unwrap_or("-"))
            .ignore();
    }

    /// A failure: written and announced by `fail.lua` unless the query is done already.
    fn fail_cmds(
        &self,
        pipe: &mut redis::Pipeline,
        keys: &PartitionKeys,
        request_id: &RequestId,
        error: &ErrorBody,
        worker: Duration,
        reply: &Reply,
    ) {
        scripts::FAIL
            .eval(pipe, 1)
            .arg(keys.query(request_id.as_str()))
            .arg(record::failed(
                error,
                worker,
                reply.idempotency_key.as_deref(),
            ))
            .arg(self.keep_ms(reply))
            .arg(keys.events())
            .arg(request_id.as_str())
            .ignore();
    }
}

impl Consumer {
    /// A delivery from an entry of `partition`'s stream as read. The request id is parsed here,
    /// once: an entry whose `id` field is not a [`RequestId`] of this partition (a gateway mints
    /// every id in the partition it queues the job in) is answered to nobody.
    fn delivery(
        &self,
        partition: u32,
        entry_id: String,
        fields: Fields,
        received: Instant,
    ) -> Delivery {
        let mut delivery = delivery(entry_id, fields, received);
        delivery.entry_id.partition = partition;
        if let Some(id) = &delivery.request_id {
            if self.layout.partition_of_id(id.as_str()) != partition {
                delivery.request_id = None;
            }
        }
        delivery
    }
}

/// A delivery from a stream entry as read (partition 0; [`Consumer::delivery`] sets it).
fn delivery(entry_id: String, fields: Fields, received: Instant) -> Delivery {
    let gone = fields.is_empty();
    let request_id =
        reply::field(&fields, job_field::ID).and_then(|v| RequestId::from_bytes(v).ok());
    let job = match reply::field(&fields, job_field::JOB) {
        Some(bytes) => Job::from_bincode(bytes),
        None => Err(WireError {
            code: pirq_shared::error::ErrorCode::InvalidJob,
            message: "stream entry has no job field".into(),
            key_index: None,
        }),
    };
    Delivery {
        entry_id: EntryId {
            partition: 0,
            id: entry_id,
        },
        request_id,
        job,
        received,
        deliveries: 1,
        gone,
    }
}

/// The recent longest window after one of `took` µs.
fn decayed_longest(old: u64, took: u64) -> u64 {
    if took >= old {
        took
    } else {
        old - (old - took) / 8
    }
}

/// 10 × the recent longest window, within [`MIN_AUTO_CLAIM_IDLE`]..=[`MAX_AUTO_CLAIM_IDLE`].
fn auto_claim_idle(longest: Duration) -> Duration {
    (longest * 10).clamp(MIN_AUTO_CLAIM_IDLE, MAX_AUTO_CLAIM_IDLE)
}

#[cfg(test)]
mod claim_idle_tests {
    use super::*;

    #[test]
    fn claim_idle_is_capped_and_decays_after_a_stall() {
        assert_eq!(
            auto_claim_idle(Duration::from_millis(10)),
            MIN_AUTO_CLAIM_IDLE
        );
        assert_eq!(
            auto_claim_idle(Duration::from_secs(10)),
            MAX_AUTO_CLAIM_IDLE
        );
        // A 10 s stall, then 50 ms windows: back to the minimum within 40 windows.
        let mut longest = decayed_longest(50_000, 10_000_000);
        assert_eq!(longest, 10_000_000);
        for _ in 0..40 {
            longest = decayed_longest(longest, 50_000);
        }
        assert_eq!(
            auto_claim_idle(Duration::from_micros(longest)),
            MIN_AUTO_CLAIM_IDLE
        );
        // A longer window counts at once.
        assert_eq!(decayed_longest(longest, 900_000), 900_000);
    }
}

#[cfg(test)]
mod held_keep_tests {
    use super::*;

    fn held(until: u64, keep: Option<u64>) -> Reply {
        Reply {
            held_until_ms: Some(until),
            held_keep_ms: keep,
            idempotency_key: None,
        }
    }

    #[test]
    fn a_held_record_is_kept_what_its_gateway_asked_within_the_bound() {
        let full = 60_000;
        let bound = HELD_KEEP.as_millis() as u64;
        let now = 1_000_000;
        let early = now + 30_000;
        // The gateway's read-result retention, when shorter than the bound.
        assert_eq!(held_keep_ms(&held(early, Some(700)), now, full), 700);
        // Never longer than the bound, never zero (a PX of 0 is an error).
        assert_eq!(held_keep_ms(&held(early, Some(60_000)), now, full), bound);
        assert_eq!(held_keep_ms(&held(early, Some(0)), now, full), 1);
        // Without a wish: the bound.
        assert_eq!(held_keep_ms(&held(early, None), now, full), bound);
        // Finished close to the deadline: the gateway may answer 202, the client polls.
        assert_eq!(held_keep_ms(&held(now + 1_000, Some(700)), now, full), full);
        // Not held: the full time.
        assert_eq!(held_keep_ms(&Reply::default(), now, full), full);
    }
}

#[cfg(test)]
mod one_slot_tests {
    use super::*;
    use crate::connect::TlsFiles;
    use crate::one_slot;
    use pirq_shared::error::ErrorCode;

    /// A window's outcomes from every partition: Done, Failed, DeadLetter, Retry and Settled.
    fn window(partitions: u32) -> Vec<Outcome> {
        let mut outcomes = Vec::new();
        for p in 0..partitions {
            for n in 0..(FINISH_BLOCK as u32 + 3) {
                let entry_id = EntryId {
                    partition: p,
                    id: format!("{n}-0"),
                };
                let request_id = RequestId::mint_in(p, partitions);
                let error = ErrorBody::new(ErrorCode::InvalidJob, "bad job");
                outcomes.push(match n % 5 {
                    0 | 1 => Outcome::Done {
                        entry_id,
                        request_id,
                        epoch: 3,
                        page_size: 4,
                        pages: Pages::new(vec![bytes::Bytes::from_static(b"abcd")]),
                        scan: Duration::from_millis(1),
                        worker: Duration::from_millis(2),
                        accepted_ms: 0,
                        digest: None,
                        reply: Reply::default(),
                    },
                    2 => Outcome::Failed {
                        entry_id,
                        request_id,
                        error,
                        worker: Duration::ZERO,
                        reply: Reply {
                            held_until_ms: Some(u64::MAX),
                            held_keep_ms: None,
                            idempotency_key: Some("k".into()),
                        },
                    },
                    3 => Outcome::DeadLetter {
                        entry_id,
                        request_id: Some(request_id),
                        error,
                        deliveries: 3,
                        reply: Reply::default(),
                    },
                    _ => Outcome::Retry {
                        entry_id,
                        deliveries: 1,
                    },
                });
            }
        }
        outcomes
    }

    /// The result writes of a window holding jobs of every partition: one pipeline per
    /// partition, each in that partition's slot (its records, stream, dead letters and status
    /// channel), for an unsharded worker and a shard's; with one partition, one pipeline.
    #[tokio::test]
    async fn a_windows_result_writes_keep_to_one_slot_per_pipeline() {
        let target = RedisTarget::open("redis://127.0.0.1:1", TlsFiles::default()).unwrap();
        for partitions in [1, 4] {
            let layout = Layout::new("pirq")
                .unwrap()
                .with_partitions(partitions)
                .unwrap();
            for shard in [ShardSpec::WHOLE, ShardSpec { index: 1, count: 2 }] {
                let consumer =
                    Consumer::new(&target, layout.clone(), "w".into(), Duration::ZERO, 60)
                        .unwrap()
                        .with_shard(shard);
                let pipes = consumer.finish_pipelines(&window(partitions));
                assert_eq!(pipes.len(), partitions as usize);
                for (p, pipe) in pipes.iter().enumerate() {
                    let slot = one_slot::check(pipe).unwrap();
                    let tag = layout.partition(p as u32).jobs();
                    assert_eq!(slot, Some(redis::cluster_routing::Slot::for_key(tag)));
                }
                // The blocks of every partition in one pipeline (as before partitions could
                // sit on several nodes) is what a cluster refuses.
                if partitions > 1 {
                    let outcomes = window(partitions);
                    let ordered: Vec<&Outcome> = outcomes.iter().collect();
                    let mut all = redis::pipe();
                    for partition in
                        ordered.chunk_by(|a, b| a.entry_id().partition == b.entry_id().partition)
                    {
                        consumer.finish_block(&mut all, partition);
                    }
                    assert!(one_slot::check(&all).is_err());
                }
            }
        }
    }
}
