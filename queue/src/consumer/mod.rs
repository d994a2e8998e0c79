//! The worker's side of the job stream (the consumer): the whole delivery lifecycle of a job
//! stream entry, one concept a module.
//!
//! | module | what it owns |
//! | --- | --- |
//! | this one | [`Consumer`] (its connections, shard, group and rules), the stream's entry types ([`EntryId`], [`Delivery`], [`Outcome`]), the groups' creation |
//! | `read` | delivery: new entries and this consumer's own pending ones through `XREADGROUP`, parsed once into [`Delivery`] |
//! | `reclaim` | entries idle past the claim-idle time (`XAUTOCLAIM`), the keeper that refreshes what a live worker holds, hand-back at shutdown |
//! | `policy` | the delivery rules ([`Policy`]) and the retry/dead-letter decision over a delivery or an outcome |
//! | `start` | a window's start: `running` announced, a sharded party's epoch pinned ([`ShardStart`]) |
//! | `finish` | a window's outcomes written, announced, acknowledged and deleted, in blocks of [`FINISH_BLOCK`] |
//!
//! Two kinds of connection: `XREADGROUP ... BLOCK` holds its connection until jobs arrive, so
//! each partition's reader gets one of its own, and every other command goes over the writer.
//! Results are written before the entry is acknowledged and deleted, and writing a result twice
//! stores the same bytes, so a job delivered again (after a crash between the two) is harmless.

mod finish;
mod policy;
mod read;
mod reclaim;
mod start;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pirq_shared::layout::{shard_group, Layout, PartitionKeys};
use pirq_shared::shard::ShardSpec;
use pirq_shared::wire::{ErrorBody, Job, Reply, WireError};

use crate::connect::Conn;
use crate::record::Pages;
use crate::{probe, Connection, QueueError, RedisTarget, RequestId};

pub use finish::{FINISH_BLOCK, HELD_KEEP, HELD_SLACK};
pub use policy::{Policy, DEFAULT_DEAD_LETTER_MAX, DEFAULT_MAX_DELIVERIES};
pub use reclaim::{spawn_keeper, MAX_AUTO_CLAIM_IDLE, MIN_AUTO_CLAIM_IDLE};
pub use start::ShardStart;

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

    /// The registration under this consumer's prefix (table), over its writer connection.
    pub fn registry(&self) -> crate::Registry {
        crate::Registry::new(self.connection(), self.layout.clone())
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
}
