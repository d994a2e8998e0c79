//! The gateway's side of the protocol (the producer): submit a query, read its record, read the
//! registration, append an epoch. Every Redis command a gateway sends goes through here.
//!
//! One [`Connection`](crate::Connection) (a multiplexed connection that reconnects by itself,
//! to one Redis or to a cluster) carries all of them; the gateway never sends a blocking command, so one connection is enough. Each call is
//! bounded by the configured timeout, so a Redis that is down or stuck becomes an error the
//! handlers answer with 503 instead of a hung request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use pirq_shared::digest::Digest;
use pirq_shared::layout::{db_field, job_field, Layout, PartitionKeys, UPDATE_FIELD};
use pirq_shared::update::EpochUpdate;
use pirq_shared::wire::Job;

use crate::connect::{Conn, Settings};
use crate::registration::{Heartbeats, RegisteredDb, WorkerRecord};
use crate::{record, scripts, FailureKind, QueryRecord, QueueError, RedisTarget, RequestId};

/// The party's workers as their heartbeats describe them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveWorkers {
    /// Workers whose heartbeat key is alive.
    pub live: u32,
    /// The newest epoch any live worker answers (`None` without live workers).
    pub newest: Option<u64>,
}

/// The checks made atomically with a submit.
pub struct SubmitChecks<'a> {
    /// Seconds the `queued` record lives.
    pub pending_ttl: u64,
    /// Write the `queued` record even for a request the gateway holds (`Job::reply`): the
    /// `--durability replica` check reads it back on the primary.
    pub record_held: bool,
    /// Refuse when the party's streams hold this many entries or more (0 = never): each of its
    /// `P` partitions is bounded at a `P`-th of it (rounded up), as the gateways fill them in
    /// turn.
    pub max_backlog: u64,
    /// `(Idempotency-Key, request fingerprint, seconds to remember it)`.
    pub idempotency: Option<(&'a str, &'a str, u64)>,
}

/// What a submit did.
#[derive(Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Queued under the new id.
    Queued,
    /// Nothing queued: the backlog is full (`backlog`: the party's, estimated as the full
    /// partition's length times the partition count).
    Full { backlog: u64 },
    /// Nothing queued: the idempotency key is known, from the request `id` (`None` when the
    /// stored id is not one). `net`: the final record of that query when the key's record holds
    /// it (a held query's net, [`crate::record::IdempotencyNet`]), to decode with
    /// [`QueryRecord::decode`] under `id`.
    Known {
        same_request: bool,
        id: Option<RequestId>,
        net: Option<Vec<u8>>,
    },
}

/// What an epoch append did.
#[derive(Debug, PartialEq, Eq)]
pub enum Appended {
    /// The update is on the stream; the registered newest epoch is now its epoch.
    Appended,
    /// Nothing appended: the update's epoch is not `newest + 1`.
    NotNext { newest: i64 },
}

/// A gateway's connection to its party's Redis.
#[derive(Clone)]
pub struct Producer {
    conn: Conn,
    /// Shared, not owned: a producer is cloned for every request (the gateway's state), and a
    /// layout holds the party's key names as strings.
    layout: Arc<Layout>,
    timeout: Duration,
    /// The partition the next request without an `Idempotency-Key` goes to (round robin).
    next_partition: Arc<AtomicU32>,
    /// Each partition's submitter (started on first use): submits travel in batches.
    submitters: Arc<Vec<OnceLock<mpsc::UnboundedSender<PendingSubmit>>>>,
    /// The shortest time between two batches of one partition ([`DEFAULT_SUBMIT_TICK`]).
    submit_tick: Duration,
}

/// The shortest time between two submit batches of one partition, by default: none, a batch
/// leaves as soon as the previous one is answered. A script run has a fixed cost in Redis (~8
/// µs on the 2-core VM, ~13 µs a lone query on an H200 host) that a batch shares, and without
/// a tick batches leave a round trip apart (~50-100 µs), so under load each carries few
/// submits. A tick (`--submit-tick-us`) makes submits that arrive within it of the previous
/// batch wait and go together: on the 2-core VM a 1 ms tick cut Redis's CPU a party query by
/// 17 % on the `Prefer: wait` path, but 64 closed-loop clients then moved in waves and their
/// keys/s fell by a third (docs/bench/host-path.md), so it is a setting for a party whose Redis
/// core is what binds, not a default.
pub const DEFAULT_SUBMIT_TICK: Duration = Duration::ZERO;

/// Most submits one script run carries: 128 single-key jobs are ~70 KiB of arguments.
const MAX_SUBMIT_BATCH: usize = 128;

/// One submit waiting for its partition's next batch.
struct PendingSubmit {
    id: RequestId,
    job: Vec<u8>,
    /// The `queued` record to write, if any.
    record: Option<Vec<u8>>,
    /// `(the key's record key, the record: "<fingerprint> <id>")` with an Idempotency-Key.
    idempotency: Option<(String, String)>,
    max_backlog: u64,
    pending_ttl: u64,
    idempotency_ttl: u64,
    answer: oneshot::Sender<Result<Verdict, QueueError>>,
}

/// What a batch did with one submit ([`submit_batch`]).
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Queued under its id.
    Queued,
    /// Nothing queued: the partition's stream holds `backlog` entries.
    Full(u64),
    /// The key's record, `'<fingerprint> <id>'` (followed by a held query's net, `\n<record>`,
    /// once its worker answered it): nothing queued, the Idempotency-Key is known.
    Known(Vec<u8>),
}

impl Producer {
    /// Creates the store without connecting: the first command connects, and a Redis that is
    /// down at start only makes requests fail until it is up.
    pub fn new(
        target: &RedisTarget,
        layout: Layout,
        timeout: Duration,
    ) -> Result<Producer, QueueError> {
        let conn = target
            .connection_with(Settings {
                connect_timeout: timeout,
                response_timeout: timeout,
                reconnect_retries: Some(2),
                max_reconnect_delay: Some(Duration::from_millis(500)),
            })?
            .conn;
        let submitters = (0..layout.partitions()).map(|_| OnceLock::new()).collect();
        Ok(Producer {
            conn,
            layout: Arc::new(layout),
            timeout,
            next_partition: Arc::new(AtomicU32::new(rand::random::<u32>())),
            submitters: Arc::new(submitters),
            submit_tick: DEFAULT_SUBMIT_TICK,
        })
    }

    /// With `tick` the shortest time between two submit batches of a partition (zero: a batch
    /// leaves as soon as the previous one is answered). Before the first submit.
    pub fn with_submit_tick(mut self, tick: Duration) -> Producer {
        self.submit_tick = tick;
        self
    }

    /// A new request id, in the partition its request is to live in. A request with an
    /// `Idempotency-Key` goes to the key's partition (a retry through any gateway finds the
    /// key's record there); the others go to the partitions in turn, round robin. Round robin
    /// rather than least backlog: it costs no Redis command (least backlog would read every
    /// partition's length per query, or act on a reading a second old), and it keeps the
    /// partitions even because every worker consumes every partition in turn. Each gateway
    /// starts at a random partition so that gateways started together do not move in step.
    pub fn mint_id(&self, idempotency_key: Option<&str>) -> RequestId {
        let partitions = self.layout.partitions();
        let partition = match idempotency_key {
            Some(key) => self.layout.partition_of_idempotency_key(key),
            None => self.next_partition.fetch_add(1, Ordering::Relaxed) % partitions,
        };
        RequestId::mint_in(partition, partitions)
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The connection, for the commands of this crate's other modules ([`crate::replication`]).
    pub(crate) fn conn(&self) -> &Conn {
        &self.conn
    }

    /// The configured per-command timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends a command or pipeline within the timeout ([`send`]).
    async fn run<T: redis::FromRedisValue>(&self, what: Query<'_>) -> Result<T, QueueError> {
        send(&self.conn, self.timeout, what).await
    }

    pub async fn ping(&self) -> Result<(), QueueError> {
        self.run::<String>(Query::NodeCmd(&redis::cmd("PING")))
            .await?;
        Ok(())
    }

    /// Appends the job to its partition's stream, followed by its `queued` record (expiring
    /// after `pending_ttl`) when its client polls (`job.reply.held_until_ms` is `None`) or
    /// `checks.record_held` asks, once its Idempotency-Key is claimed and the backlog has room
    /// (`submit_batch`: a known key queues nothing, and is answered even when the backlog is
    /// full).
    ///
    /// Submits are batched per partition: each partition has one submitter task, which sends
    /// every submit that arrived while its previous batch was on the wire as one batch of two
    /// pipelines. A lone submit goes at once; under load a batch costs one `XLEN` for all its
    /// jobs (group commit), and two round trips.
    pub async fn submit(
        &self,
        id: &RequestId,
        job: &Job,
        checks: &SubmitChecks<'_>,
    ) -> Result<Submitted, QueueError> {
        let partitions = self.layout.partitions();
        let index = self.layout.partition_of_id(id.as_str());
        // Every key of the script in the id's partition (one slot): the id was minted there
        // ([`Producer::mint_id`]), for a request with an `Idempotency-Key` in the key's.
        let partition = self.layout.partition(index);
        let (idempotency, fingerprint, idempotency_ttl) = match checks.idempotency {
            Some((key, fp, ttl)) => (
                Some((partition.idempotency(key), format!("{fp} {id}"))),
                fp,
                ttl,
            ),
            None => (None, "", 0),
        };
        let record = (job.reply.held_until_ms.is_none() || checks.record_held).then(|| {
            record::queued(
                job.keys.len(),
                job.accepted_ms,
                job.reply.idempotency_key.as_deref(),
            )
        });
        let (answer, answered) = oneshot::channel();
        let pending = PendingSubmit {
            id: *id,
            job: job.to_bincode(),
            record,
            idempotency,
            max_backlog: checks.max_backlog.div_ceil(u64::from(partitions)),
            pending_ttl: checks.pending_ttl,
            idempotency_ttl,
            answer,
        };
        self.submitter(index)
            .send(pending)
            .map_err(|_| QueueError::Timeout(self.timeout))?;
        let verdict = answered
            .await
            .map_err(|_| QueueError::Timeout(self.timeout))??;
        Ok(match verdict {
            Verdict::Queued => Submitted::Queued,
            Verdict::Full(backlog) => Submitted::Full {
                backlog: backlog * u64::from(partitions),
            },
            Verdict::Known(value) => {
                let (claim, net) = record::idempotency_value(&value);
                let (fp, id) = claim.split_once(' ').unwrap_or(("", ""));
                Submitted::Known {
                    same_request: fp == fingerprint,
                    id: RequestId::parse(id).ok(),
                    net: net.map(<[u8]>::to_vec),
                }
            }
        })
    }

    /// The submitter of `partition`, started on first use.
    fn submitter(&self, partition: u32) -> &mpsc::UnboundedSender<PendingSubmit> {
        self.submitters[partition as usize].get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(submit_batches(
                self.conn.clone(),
                self.timeout,
                self.submit_tick,
                self.layout.partition(partition),
                rx,
            ));
            tx
        })
    }

    /// Writes the `queued` record of a held request whose gateway stopped waiting (it answers
    /// 202, and the client polls from now on), unless a record is there already (the final one,
    /// which a `queued` one must never hide): `SET … NX`.
    pub async fn keep_pending(
        &self,
        id: &RequestId,
        record: &[u8],
        pending_ttl: u64,
    ) -> Result<(), QueueError> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.layout.query(id.as_str()))
            .arg(record)
            .arg("NX")
            .arg("EX")
            .arg(pending_ttl);
        self.run::<Option<String>>(Query::Cmd(&cmd)).await?;
        Ok(())
    }

    /// `WAITAOF 1 0 <timeout>`: whether the local AOF has fsynced every write of this
    /// connection so far.
    pub async fn wait_aof(&self, timeout: Duration) -> Result<bool, QueueError> {
        let mut cmd = redis::cmd("WAITAOF");
        cmd.arg(1).arg(0).arg(timeout.as_millis() as u64);
        let (local, _replicas): (i64, i64) = self.run(Query::NodeCmd(&cmd)).await?;
        Ok(local >= 1)
    }

    /// The query's state, `None` if the id is unknown or its record expired. A `queued` record
    /// that a gateway wrote after holding the request ([`record::HELD_MARK`]) is followed to
    /// the net its worker may have written in the Idempotency-Key record instead
    /// ([`Producer::load_held`]).
    pub async fn load(&self, id: &RequestId) -> Result<Option<QueryRecord>, QueueError> {
        let cmd = redis::Cmd::get(self.layout.query(id.as_str()));
        let bytes: Option<Vec<u8>> = self.run(Query::Cmd(&cmd)).await?;
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        if let Some(key) = record::held_net_key(&bytes) {
            if let Some(net) = self.load_net(id, key).await? {
                return Ok(Some(net));
            }
        }
        QueryRecord::decode(id, &bytes).map(Some)
    }

    /// The net a worker kept for `id` in the record of `idempotency_key`, if there is one.
    async fn load_net(
        &self,
        id: &RequestId,
        idempotency_key: &str,
    ) -> Result<Option<QueryRecord>, QueueError> {
        let cmd = redis::Cmd::get(self.idempotency_record(id, idempotency_key));
        let claim: Option<Vec<u8>> = self.run(Query::Cmd(&cmd)).await?;
        claim.map_or(Ok(None), |claim| net_of(id, &claim))
    }

    /// The record of `idempotency_key`, in the partition of `id` (the submit minted the id
    /// there).
    fn idempotency_record(&self, id: &RequestId, idempotency_key: &str) -> String {
        self.layout
            .partition(self.layout.partition_of_id(id.as_str()))
            .idempotency(idempotency_key)
    }

    /// The state of a query whose request this gateway holds, with `idempotency_key`: its
    /// record, else the net its worker kept in the key's record
    /// ([`crate::record::IdempotencyNet`]; only this query's: the claim must name `id`). One
    /// round trip (`GET` of both: the id lives in the key's partition). Without a key, as
    /// [`Producer::load`].
    pub async fn load_held(
        &self,
        id: &RequestId,
        idempotency_key: Option<&str>,
    ) -> Result<Option<QueryRecord>, QueueError> {
        let Some(key) = idempotency_key else {
            return self.load(id).await;
        };
        let mut pipe = redis::pipe();
        pipe.get(self.layout.query(id.as_str()))
            .get(self.idempotency_record(id, key));
        let (record, claim): (Option<Vec<u8>>, Option<Vec<u8>>) =
            self.run(Query::Pipe(&pipe)).await?;
        if let Some(bytes) = record {
            return QueryRecord::decode(id, &bytes).map(Some);
        }
        claim.map_or(Ok(None), |claim| net_of(id, &claim))
    }

    /// Lowers the time left to the query's record (unless `record` is false: a held request's
    /// record was written short-lived already), and to its `Idempotency-Key` record when it has
    /// one, to `ttl` (never raises it: `PEXPIRE … LT`), once a client has read its final result:
    /// from then on they are kept only for a re-read or a replay of a lost answer.
    pub async fn release(
        &self,
        id: &RequestId,
        record: bool,
        idempotency_key: Option<&str>,
        ttl: Duration,
    ) -> Result<(), QueueError> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        self.release_cmds(&mut pipe, id, record, idempotency_key, ttl);
        if pipe.is_empty() {
            return Ok(());
        }
        let _: redis::Value = self.run(Query::Pipe(&pipe)).await?;
        Ok(())
    }

    /// The `PEXPIRE … LT` commands of [`Producer::release`], added to `pipe` (replies ignored).
    fn release_cmds(
        &self,
        pipe: &mut redis::Pipeline,
        id: &RequestId,
        record: bool,
        idempotency_key: Option<&str>,
        ttl: Duration,
    ) {
        let ms = ttl.as_millis().max(1) as u64;
        if record {
            pipe.cmd("PEXPIRE")
                .arg(self.layout.query(id.as_str()))
                .arg(ms)
                .arg("LT")
                .ignore();
        }
        if let Some(key) = idempotency_key {
            pipe.cmd("PEXPIRE")
                // Claimed by the submit, in the id's partition.
                .arg(
                    self.layout
                        .partition(self.layout.partition_of_id(id.as_str()))
                        .idempotency(key),
                )
                .arg(ms)
                .arg("LT")
                .ignore();
        }
    }

    /// Adds `bytes` handed over to clients by this gateway to the party's counter, and returns
    /// the counter: its growth over time is the party's read rate, all gateways together.
    pub async fn count_fetched(&self, bytes: u64) -> Result<u64, QueueError> {
        let cmd = redis::Cmd::incr(self.layout.fetched_bytes(), bytes);
        self.run(Query::Cmd(&cmd)).await
    }

    /// The registered database, `None` if no worker has registered one.
    pub async fn database(&self) -> Result<Option<RegisteredDb>, QueueError> {
        let cmd = redis::Cmd::hgetall(self.layout.db());
        let fields: HashMap<String, String> = self.run(Query::Cmd(&cmd)).await?;
        if fields.is_empty() {
            return Ok(None);
        }
        RegisteredDb::parse(&fields).map(Some)
    }

    /// Appends `update` to the updates stream if its epoch is the registered newest + 1, and
    /// raises the newest (`queue/lua/append_epoch.lua`): all pages of an epoch or none, and no
    /// two gateways can append the same epoch.
    pub async fn append_epoch(&self, update: &EpochUpdate) -> Result<Appended, QueueError> {
        let mut invocation = scripts::APPEND_EPOCH.script().key(self.layout.db());
        invocation
            .key(self.layout.updates())
            .arg(update.epoch)
            .arg(update.to_bincode())
            .arg(db_field::EPOCH)
            .arg(UPDATE_FIELD);
        let mut conn = self.conn.clone();
        let (applied, newest): (i64, i64) =
            tokio::time::timeout(self.timeout, invocation.invoke_async(&mut conn))
                .await
                .map_err(|_| QueueError::Timeout(self.timeout))??;
        Ok(if applied < 0 {
            Appended::NotNext { newest }
        } else {
            Appended::Appended
        })
    }

    /// The key-value layout the workers registered with the database, `None` for a page
    /// database.
    pub async fn kv_layout(&self) -> Result<Option<pirq_shared::kv::KvInfo>, QueueError> {
        let cmd = redis::Cmd::hget(self.layout.db(), db_field::KV);
        let json: Option<String> = self.run(Query::Cmd(&cmd)).await?;
        json.map(|j| {
            serde_json::from_str(&j).map_err(|e| QueueError::Malformed {
                what: "kv layout registration",
                detail: e.to_string(),
            })
        })
        .transpose()
    }

    /// Workers whose heartbeat key is alive, and the newest epoch they answer (from the window
    /// in each heartbeat). Members of the set whose heartbeat expired (a worker that died without
    /// deregistering) are removed on the way.
    pub async fn live_workers(&self) -> Result<LiveWorkers, QueueError> {
        let beats = self.heartbeats().await?;
        if !beats.dead.is_empty() {
            let cmd = redis::Cmd::srem(self.layout.workers(), &beats.dead);
            let _: Result<(), _> = self.run(Query::Cmd(&cmd)).await;
        }
        let mut workers = LiveWorkers {
            live: (beats.records.len() + beats.unreadable) as u32,
            newest: None,
        };
        for record in &beats.records {
            workers.newest = workers.newest.max(record.window.map(|w| w.newest));
        }
        Ok(workers)
    }

    /// The heartbeats under the prefix, within the timeout (retried once after a reconnect).
    async fn heartbeats(&self) -> Result<Heartbeats, QueueError> {
        let read = || async {
            let mut conn = self.conn.clone();
            match tokio::time::timeout(self.timeout, Heartbeats::read(&mut conn, &self.layout))
                .await
            {
                Ok(r) => r.map_err(QueueError::from),
                Err(_) => Err(QueueError::Timeout(self.timeout)),
            }
        };
        match read().await {
            Err(e) if e.kind() == FailureKind::Unreachable => read().await,
            other => other,
        }
    }

    /// The database digest (SPEC §2.1) a worker registered for `epoch`, if any.
    pub async fn digest_at(&self, epoch: u64) -> Result<Option<Digest>, QueueError> {
        let cmd = redis::Cmd::hget(self.layout.digests(), epoch);
        let hex: Option<String> = self.run(Query::Cmd(&cmd)).await?;
        Ok(hex.as_deref().and_then(Digest::from_hex))
    }

    /// The party's identity (`{P}:party`), drawn and stored by the first gateway that asks.
    pub async fn party_id(&self) -> Result<String, QueueError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(scripts::PARTY_ID.source)
            .arg(1)
            .arg(self.layout.party())
            .arg(format!("{:032x}", rand::random::<u128>()));
        self.run(Query::Cmd(&cmd)).await
    }
}

impl Producer {
    /// The heartbeat records of the workers that are alive.
    pub async fn worker_records(&self) -> Result<Vec<WorkerRecord>, QueueError> {
        Ok(self.heartbeats().await?.records)
    }
}

/// One command, as [`Producer::run`] sends it.
#[derive(Clone, Copy)]
enum Query<'a> {
    Cmd(&'a redis::Cmd),
    /// A command that names no key, for the node of the party's slot ([`Conn::node`]).
    NodeCmd(&'a redis::Cmd),
    /// Several commands in one write (not a transaction).
    Pipe(&'a redis::Pipeline),
}

/// Sends a command or pipeline on `conn` within `timeout`. The first command after Redis dropped
/// the connection fails with an I/O error while the manager reconnects; that one is sent again
/// once, so a Redis restart costs no failed request when Redis is back.
async fn send<T: redis::FromRedisValue>(
    conn: &Conn,
    timeout: Duration,
    what: Query<'_>,
) -> Result<T, QueueError> {
    let attempt = || async {
        let mut conn = conn.clone();
        let fut = async {
            match what {
                Query::Cmd(c) => c.query_async::<T>(&mut conn).await,
                Query::NodeCmd(c) => c.query_async::<T>(&mut conn.node()).await,
                Query::Pipe(p) => return crate::one_slot::send::<T>(p, &mut conn).await,
            }
            .map_err(QueueError::from)
        };
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(QueueError::Timeout(timeout)),
        }
    };
    match attempt().await {
        Err(e) if e.kind() == FailureKind::Unreachable => attempt().await,
        other => other,
    }
}

/// A partition's submitter: takes the first waiting submit, then, once `tick` has passed since
/// the previous batch left, every other one waiting by then (up to [`MAX_SUBMIT_BATCH`]), and
/// sends them as one batch ([`submit_batch`]); each submit gets its own verdict. One batch on
/// the wire at a time, so batches grow with the load and a lone submit waits for nothing. Ends
/// when every sender is gone.
async fn submit_batches(
    conn: Conn,
    timeout: Duration,
    tick: Duration,
    keys: PartitionKeys,
    mut rx: mpsc::UnboundedReceiver<PendingSubmit>,
) {
    let mut batch: Vec<PendingSubmit> = Vec::with_capacity(MAX_SUBMIT_BATCH);
    let mut last_sent: Option<tokio::time::Instant> = None;
    while rx.recv_many(&mut batch, MAX_SUBMIT_BATCH).await > 0 {
        if let Some(next) = last_sent.map(|t| t + tick) {
            if batch.len() < MAX_SUBMIT_BATCH && tokio::time::Instant::now() < next {
                tokio::time::sleep_until(next).await;
                while batch.len() < MAX_SUBMIT_BATCH {
                    match rx.try_recv() {
                        Ok(p) => batch.push(p),
                        Err(_) => break,
                    }
                }
            }
        }
        last_sent = Some(tokio::time::Instant::now());
        match submit_batch(&conn, timeout, &keys, &batch).await {
            Ok(verdicts) => {
                for (p, verdict) in batch.drain(..).zip(verdicts) {
                    let _ = p.answer.send(Ok(verdict));
                }
            }
            Err(e) => {
                for p in batch.drain(..) {
                    let _ = p.answer.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Sends one batch of submits of a partition in two plain pipelines, without a script
/// (docs/redis.md, "Submits go in batches"), and returns each submit's verdict, in order:
///
/// 1. **Claims**: `XLEN` of the stream (when the batch has a backlog bound) and, for each submit
///    with an `Idempotency-Key`, `SET <key's record> "<fingerprint> <id>" NX GET EX <ttl>`,
///    which claims the key and answers what it held. Skipped when there is neither.
/// 2. **Queue**, from those answers, in order: a key that names another request is `Known`
///    (nothing queued: a replay is answered even when the backlog is full); past the backlog
///    bound the submit is `Full` and the key it claimed is deleted again (`DEL`); the others
///    are appended (`XADD`), each followed by its `queued` record when it has one, written
///    `SET … NX` (never over a final record a fast worker wrote first).
///
/// What the script did atomically is kept by order: the job is appended only once its key is
/// claimed, so a replay never queues it twice, and its record only after the job, so a record
/// never says `queued` for a job that is not on the stream. A claim whose job never followed
/// (the second pipeline failed, or the gateway died between them) is what a held request's
/// claim looks like once its answer was handed over: a replay of the key finds no record and
/// queues the job again under the claimed id ([`Submitted::Known`]). Without Lua a query costs
/// Redis about a fifth less (`ops/bench/query-contract-cost.py`, variant `two-step`); the
/// price is a second round trip per batch, and a bound that other gateways' batches may pass
/// by what they append between this batch's `XLEN` and its `XADD`s.
async fn submit_batch(
    conn: &Conn,
    timeout: Duration,
    keys: &PartitionKeys,
    batch: &[PendingSubmit],
) -> Result<Vec<Verdict>, QueueError> {
    // One bound and one lifetime each for the batch: the strictest bound; the lifetimes are the
    // gateway's settings, the same for all (a submit without an Idempotency-Key has none, and
    // `EX 0` is an error).
    let max_backlog = batch
        .iter()
        .map(|p| p.max_backlog)
        .filter(|&b| b > 0) // 0: no bound
        .min()
        .unwrap_or(0);
    let pending_ttl = batch
        .iter()
        .map(|p| p.pending_ttl)
        .max()
        .unwrap_or(1)
        .max(1);
    let idempotency_ttl = batch
        .iter()
        .map(|p| p.idempotency_ttl)
        .max()
        .unwrap_or(1)
        .max(1);
    let jobs = keys.jobs();

    // 1. The backlog and the claims.
    let mut backlog = 0u64;
    let mut held: Vec<Option<Vec<u8>>> = vec![None; batch.len()];
    let claims = batch.iter().any(|p| p.idempotency.is_some());
    if max_backlog > 0 || claims {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        if max_backlog > 0 {
            pipe.cmd("XLEN").arg(&jobs);
        }
        for p in batch {
            if let Some((key, value)) = &p.idempotency {
                pipe.cmd("SET")
                    .arg(key)
                    .arg(value)
                    .arg("NX")
                    .arg("GET")
                    .arg("EX")
                    .arg(idempotency_ttl);
            }
        }
        let replies: Vec<redis::Value> = send(conn, timeout, Query::Pipe(&pipe)).await?;
        first_error(&replies)?;
        let mut replies = replies.into_iter();
        if max_backlog > 0 {
            backlog = match replies.next() {
                Some(redis::Value::Int(n)) => n.max(0) as u64,
                other => return Err(malformed("XLEN", &other)),
            };
        }
        for (p, slot) in batch.iter().zip(held.iter_mut()) {
            if p.idempotency.is_some() {
                *slot = match replies.next() {
                    Some(redis::Value::Nil) => None,
                    Some(redis::Value::BulkString(b)) => Some(b),
                    Some(redis::Value::SimpleString(s)) => Some(s.into_bytes()),
                    other => return Err(malformed("SET NX GET", &other)),
                };
            }
        }
    }

    // 2. The verdicts, and the jobs, records and released claims they call for.
    let mut verdicts = Vec::with_capacity(batch.len());
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    let mut released: Vec<&str> = Vec::new();
    for (p, held) in batch.iter().zip(held) {
        // Our own claim, when the first pipeline was sent again after a dropped connection.
        let ours = |value: &[u8]| p.idempotency.as_ref().map(|(_, v)| v.as_bytes()) == Some(value);
        match held {
            Some(value) if !ours(&value) => verdicts.push(Verdict::Known(value)),
            _ if max_backlog > 0 && backlog >= max_backlog => {
                if let Some((key, _)) = &p.idempotency {
                    released.push(key);
                }
                verdicts.push(Verdict::Full(backlog));
            }
            _ => {
                pipe.cmd("XADD")
                    .arg(&jobs)
                    .arg("*")
                    .arg(job_field::ID)
                    .arg(p.id.as_str())
                    .arg(job_field::JOB)
                    .arg(&p.job);
                if let Some(record) = &p.record {
                    pipe.cmd("SET")
                        .arg(keys.query(p.id.as_str()))
                        .arg(record)
                        .arg("NX")
                        .arg("EX")
                        .arg(pending_ttl);
                }
                backlog += 1;
                verdicts.push(Verdict::Queued);
            }
        }
    }
    if !released.is_empty() {
        pipe.cmd("DEL").arg(&released);
    }
    if !pipe.is_empty() {
        let replies: Vec<redis::Value> = send(conn, timeout, Query::Pipe(&pipe)).await?;
        first_error(&replies)?;
    }
    Ok(verdicts)
}

/// The first refusal among a pipeline's replies (sent with `ignore_errors`), as the error of a
/// single command: so that `OOM` reads as out of memory and `LOADING` as not serving, which a
/// pipeline's combined error does not say.
fn first_error(replies: &[redis::Value]) -> Result<(), QueueError> {
    match replies.iter().find_map(|v| match v {
        redis::Value::ServerError(e) => Some(e.clone()),
        _ => None,
    }) {
        Some(e) => Err(redis::RedisError::from(e).into()),
        None => Ok(()),
    }
}

fn malformed(what: &'static str, reply: &Option<redis::Value>) -> QueueError {
    QueueError::Malformed {
        what: "submit answer",
        detail: format!("{what}: {reply:?}"),
    }
}

/// The net of `id` in an Idempotency-Key record's value, if it holds one and its claim names
/// `id` (the key may have been claimed by another request since).
fn net_of(id: &RequestId, claim: &[u8]) -> Result<Option<QueryRecord>, QueueError> {
    match record::idempotency_value(claim) {
        (head, Some(net)) if head.split_once(' ').map(|(_, of)| of) == Some(id.as_str()) => {
            QueryRecord::decode(id, net).map(Some)
        }
        _ => Ok(None),
    }
}

/// Tables (issue 38): a producer per table, sharing the gateway's connection, and the party's
/// list of tables.
impl Producer {
    /// The same connection, for the keys of another table of the party (`layout`, from
    /// [`Layout::table`]): its own submitters, so each table's submits batch on their own.
    pub fn for_table(&self, layout: Layout) -> Producer {
        let submitters = (0..layout.partitions()).map(|_| OnceLock::new()).collect();
        Producer {
            conn: self.conn.clone(),
            layout: Arc::new(layout),
            timeout: self.timeout,
            next_partition: Arc::new(AtomicU32::new(rand::random::<u32>())),
            submitters: Arc::new(submitters),
            submit_tick: self.submit_tick,
        }
    }

    /// The party's named tables (`{P}:tables`, written by the workers that serve them), sorted.
    pub async fn table_names(&self) -> Result<Vec<String>, QueueError> {
        let cmd = redis::Cmd::smembers(self.layout.tables());
        let mut names: Vec<String> = self.run(Query::Cmd(&cmd)).await?;
        names.sort();
        Ok(names)
    }
}
