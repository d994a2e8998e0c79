//! The worker's side of the job stream, for the scheduling loop ([`crate::schedule`]): reading
//! jobs, checking them, waiting for a pinned epoch, writing outcomes, handing back what was
//! held.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pirq_shared::check;
use pirq_shared::dpf::DpfKey;
use pirq_shared::error::ErrorCode;
use pirq_shared::metrics as m;
use pirq_shared::wire::{EpochRange, ErrorBody, Job, WireError};
use tokio::sync::{mpsc, watch};

use crate::health::Health;
use pirq_queue::consumer::{Consumer, Delivery, Outcome};
use pirq_scan::{Geometry, Scanner};

/// Everything the loop needs.
pub struct Worker {
    pub scanner: Arc<dyn Scanner>,
    pub queue: Arc<Consumer>,
    /// The scanner's epoch window, as the updates follower announces it.
    pub epochs: watch::Receiver<EpochRange>,
    /// The digest of every epoch answered, stamped on each result.
    pub digests: pirq_queue::digests::Digests,
    /// How long a job pinned to an epoch not applied yet waits for it.
    pub epoch_wait: Duration,
    pub block: Duration,
    /// Told whether each read of the job stream succeeds (`/readyz`).
    pub health: Arc<Health>,
    /// The scanner time this worker's tables share ([`crate::share`]), and this table's
    /// number among them.
    pub share: Arc<crate::share::ScanShare>,
    pub table_index: usize,
}

/// Hands back to the group every job this worker read but never started (buffered, or cut off
/// by the stop), so peers need not wait for the claim-idle time.
pub async fn hand_back_held(queue: &Consumer) {
    let mut backoff = pirq_party::Backoff::default();
    for attempt in 1..=5 {
        match queue.release_held().await {
            Ok(n) => {
                tracing::info!(jobs = n, "handed back the jobs held but not started");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, attempt, "handing back held jobs failed; retrying");
                backoff.wait().await;
            }
        }
    }
    tracing::warn!("held jobs not handed back; peers claim them after the claim-idle time");
}

/// Keeps the channel fed from every partition's stream until `stop`: one reader a partition,
/// each blocking on its own connection, so a job queued in any partition is read at once.
///
/// Fair under load: a reader reads only when the channel has room, and at most its share of
/// the channel (capacity / partitions) at a time; readers waiting for room get it in the order
/// they asked (Tokio's channel permits are first come, first served), so while every partition
/// has a backlog the worker takes from each in turn, and none starves behind a busier one.
pub async fn read_loop(
    queue: Arc<Consumer>,
    tx: mpsc::Sender<Delivery>,
    block: Duration,
    stop: watch::Receiver<bool>,
    health: Arc<Health>,
) {
    let share = tx
        .max_capacity()
        .div_ceil(queue.partitions() as usize)
        .max(1);
    // Dropped (the task aborted) or done, the set aborts every reader.
    let mut readers = tokio::task::JoinSet::new();
    for partition in 0..queue.partitions() {
        readers.spawn(read_partition(
            queue.clone(),
            partition,
            share,
            tx.clone(),
            block,
            stop.clone(),
            health.clone(),
        ));
    }
    while readers.join_next().await.is_some() {}
}

/// One partition's reader of [`read_loop`], reading at most `share` entries at a time.
async fn read_partition(
    queue: Arc<Consumer>,
    partition: u32,
    share: usize,
    tx: mpsc::Sender<Delivery>,
    block: Duration,
    mut stop: watch::Receiver<bool>,
    health: Arc<Health>,
) {
    let mut backoff = pirq_party::Backoff::default();
    // First what this consumer already held (a restart under the same name), then new entries.
    let mut own_pending = Some("0".to_string());
    // Reclaim: entries idle past the claim-idle time with any consumer (dead ones, handed back).
    let mut cursor = "0-0".to_string();
    let mut next_claim = tokio::time::Instant::now();
    loop {
        if *stop.borrow() {
            return;
        }
        // Wait for room before reading: what we read is ours until acknowledged.
        if tx.capacity() == 0 {
            tokio::select! {
                permit = tx.reserve() => match permit { Ok(p) => drop(p), Err(_) => return },
                _ = stop.changed() => return,
            }
        }
        let room = tx.capacity().clamp(1, share);
        let claim_now = own_pending.is_none() && tokio::time::Instant::now() >= next_claim;
        let read = match &own_pending {
            Some(after) => queue.read_own_pending(partition, room, after).await,
            None if claim_now => {
                let idle = queue.claim_idle();
                let r = queue.claim(partition, idle, room, &mut cursor).await;
                // A full page: more may be waiting, claim again at once; else after a while.
                if !matches!(&r, Ok(d) if d.len() >= room) && cursor == "0-0" {
                    next_claim = tokio::time::Instant::now()
                        + (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
                }
                if let Ok(d) = &r {
                    if !d.is_empty() {
                        tracing::info!(
                            jobs = d.len(),
                            partition,
                            "claimed jobs idle past the claim-idle time"
                        );
                    }
                }
                r
            }
            None => {
                queue
                    .read(partition, room, block.min(Duration::from_secs(1)))
                    .await
            }
        };
        health.note_read(read.is_ok());
        match read {
            Ok(deliveries) => {
                backoff.reset();
                if own_pending.is_some() {
                    own_pending = deliveries.last().map(|d| d.entry_id.id.clone());
                    if let Some(n) = own_pending.as_ref().map(|_| deliveries.len()) {
                        tracing::info!(jobs = n, "resuming jobs this consumer held before");
                    }
                }
                // The delivery limit: queue's rule decides which are given up before they run.
                let (deliveries, dead) = queue.policy().screen(deliveries);
                if !dead.is_empty() {
                    write_outcomes(&queue, dead).await;
                }
                for d in deliveries {
                    if tx.send(d).await.is_err() {
                        return;
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, partition, "reading the job stream failed; retrying");
                backoff.wait().await;
            }
        }
    }
}

/// A job may pin an epoch the gateway already accepted but this worker's follower has not
/// applied yet: wait for it (bounded by `epoch_wait`) rather than fail the job.
pub async fn wait_for_pinned_epoch(worker: &Worker, d: &Delivery) {
    let Some(pinned) = d.job.as_ref().ok().and_then(|j| j.epoch) else {
        return;
    };
    let mut epochs = worker.epochs.clone();
    if epochs.borrow().newest >= pinned {
        return;
    }
    let reached = epochs.wait_for(|w| w.newest >= pinned);
    if tokio::time::timeout(worker.epoch_wait, reached)
        .await
        .is_err()
    {
        tracing::warn!(epoch = pinned, "a job's epoch was not applied in time");
    }
}

/// Writes outcomes, retrying while Redis is unreachable. If it stays unreachable the entries
/// stay pending in the group and are delivered again.
pub async fn write_outcomes(queue: &Consumer, outcomes: Vec<Outcome>) {
    if outcomes.is_empty() {
        return;
    }
    let started = Instant::now();
    let mut backoff = pirq_party::Backoff::default();
    for attempt in 1..=10 {
        match queue.finish(&outcomes).await {
            Ok(()) => {
                let table: Arc<str> = Arc::from(queue.layout().table_name());
                metrics::histogram!(m::WORKER_RESULTS_WRITE, m::TABLE => table.clone())
                    .record(started.elapsed().as_secs_f64());
                record_outcomes(&outcomes, &table);
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, attempt, "writing results failed; retrying");
                backoff.wait().await;
            }
        }
    }
    tracing::error!(
        jobs = outcomes.len(),
        "giving up writing results; the jobs stay pending and are claimed again"
    );
    // Stop refreshing them: after the claim-idle time any worker (this one too) claims them.
    queue.forget(outcomes.iter().map(Outcome::entry_id));
}

/// Counts written outcomes in the metrics of their `table`.
fn record_outcomes(outcomes: &[Outcome], table: &Arc<str>) {
    let counter = |name: &'static str| metrics::counter!(name, m::TABLE => table.clone());
    for o in outcomes {
        match o {
            Outcome::Done {
                pages,
                page_size,
                accepted_ms,
                ..
            } => {
                counter(m::WORKER_JOBS_COMPLETED).increment(1);
                counter(m::WORKER_KEYS_ANSWERED).increment((pages.len() / page_size) as u64);
                // Written just now: acceptance at the gateway to result in Redis.
                metrics::histogram!(m::WORKER_JOB_LATENCY, m::TABLE => table.clone())
                    .record(m::seconds_since_unix_ms(*accepted_ms));
            }
            Outcome::Failed { .. } => counter(m::WORKER_JOBS_FAILED).increment(1),
            Outcome::DeadLetter { request_id, .. } => {
                counter(m::WORKER_JOBS_DEAD_LETTERED).increment(1);
                if request_id.is_some() {
                    counter(m::WORKER_JOBS_FAILED).increment(1);
                }
            }
            Outcome::Retry { .. } => counter(m::WORKER_JOBS_RELEASED).increment(1),
            Outcome::Discard { .. } | Outcome::Settled { .. } => {}
        }
    }
}

/// The worker's own check of a job: the gateway validated it, but the stream is not trusted.
/// Returns the epoch the job is answered at (its pinned one, or the newest) and its keys.
pub fn check_job(
    job: Result<Job, WireError>,
    geometry: &Geometry,
    epochs: EpochRange,
) -> Result<(u64, Vec<DpfKey>), ErrorBody> {
    let job = job.map_err(|e| ErrorBody::new(e.code, e.message))?;
    if job.keys.is_empty() {
        return Err(ErrorBody::new(ErrorCode::NoKeys, "the job has no keys"));
    }
    let epoch = job.epoch.unwrap_or(epochs.newest);
    check::check_epoch(epoch, epochs)?;
    let keys = check::parse_keys(&job.keys)?;
    check::check_domain(&keys, geometry.domain_bits)?;
    Ok((epoch, keys))
}
