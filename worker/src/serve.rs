//! The worker's loop: Redis → windows → scanner passes → results.
//!
//! A reader task pulls entries with `XREADGROUP` into a bounded channel (it only reads when
//! there is room, so a busy worker leaves jobs to its peers). The [`Batcher`] forms windows from
//! the channel. Each window runs as scanner passes on a blocking thread while the reader keeps
//! pulling the next jobs from Redis; the window's results are written by a task of their own
//! while the next window is formed and scanned.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pirq_shared::check;
use pirq_shared::dpf::DpfKey;
use pirq_shared::error::ErrorCode;
use pirq_shared::metrics as m;
use pirq_shared::wire::{EpochRange, ErrorBody, Job, WireError};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::batcher::{Batcher, Idle, Window};
use crate::health::Health;
use crate::policy::WindowPolicy;
use crate::reclaim;
use pirq_queue::consumer::{Consumer, Delivery, Outcome, ShardStart};
use pirq_queue::RequestId;
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
    pub max_batch_keys: usize,
    pub block: Duration,
    /// How windows close and how many scan at once ([`crate::policy`]).
    pub policy: WindowPolicy,
    /// Told whether each read of the job stream succeeds (`/readyz`).
    pub health: Arc<Health>,
}

/// Runs until `stop` turns true: then stops reading, finishes the window in flight, writes its
/// results, and hands back to the group every job it held but had not started.
pub async fn run(worker: Worker, stop: watch::Receiver<bool>) {
    let keeper = reclaim::spawn_keeper(worker.queue.clone(), stop.clone());
    let (tx, rx) = mpsc::channel(worker.max_batch_keys.max(1));
    let reader = tokio::spawn(read_loop(
        worker.queue.clone(),
        tx,
        worker.block,
        stop.clone(),
        worker.health.clone(),
    ));
    let policy = worker.policy;
    let mut batcher = Batcher::new(rx, policy.max_keys, policy.gather);
    // Up to `policy.slots` windows scan at once (the CUDA backend's workspaces: one window's
    // upload and expansion overlap another's scan), but a window that the policy keeps from
    // scanning beside another takes jobs until the running scans end. A window's results are
    // written while the next windows scan, with as many writes in flight as scans.
    let scans = Arc::new(Semaphore::new(policy.slots));
    let writes = Arc::new(Semaphore::new(policy.slots));
    // Windows scanning now.
    let (running, _) = watch::channel(0usize);
    // When the last scan ended and how many keys it answered.
    let last_end = Arc::new(std::sync::Mutex::new((Instant::now(), 0usize)));
    let worker = Arc::new(worker);
    let mut in_flight = JoinSet::new();
    let mut stop_wait = stop.clone();
    loop {
        while in_flight.try_join_next().is_some() {}
        let Ok(scan_permit) = scans.clone().acquire_owned().await else {
            break;
        };
        let (ended, answered) = *last_end.lock().unwrap_or_else(|e| e.into_inner());
        let close = policy.close(*running.borrow(), ended, answered);
        let idle: Option<Idle> = close.until_idle.then(|| {
            let (mut scans_now, last_end) = (running.subscribe(), last_end.clone());
            Box::pin(async move {
                let _ = scans_now.wait_for(|n| *n == 0).await;
                *last_end.lock().unwrap_or_else(|e| e.into_inner())
            }) as Idle
        });
        // Stop first: once stopping, buffered jobs are not started (they are handed back).
        let window = tokio::select! {
            biased;
            _ = stop_wait.wait_for(|s| *s) => break,
            w = batcher.next_window_by(close, idle) => match w { Some(w) => w, None => break },
        };
        record_scanner_idle(*running.borrow(), &last_end);
        let (worker, writes) = (worker.clone(), writes.clone());
        let (running, last_end) = (running.clone(), last_end.clone());
        running.send_modify(|n| *n += 1);
        in_flight.spawn(async move {
            // The window policy's view of the scanner: how many windows scan, when the last
            // one ended and how many keys it answered.
            let scanned = |keys: Option<usize>| {
                if let Some(keys) = keys {
                    *last_end.lock().unwrap_or_else(|e| e.into_inner()) = (Instant::now(), keys);
                }
                running.send_modify(|n| *n -= 1);
            };
            // Jobs pinned to an epoch not applied yet wait apart, holding neither the rest of
            // their window nor a scan slot while they wait.
            // (A shard window pins its epochs in its start script and waits there.)
            let (now, ahead) = if worker.queue.shard().is_whole() {
                let newest = worker.epochs.borrow().newest;
                window.split_pinned_ahead(newest)
            } else {
                (window, None)
            };
            if !now.deliveries.is_empty() {
                let keys = now.keys;
                let outcomes = run_window(&worker, now).await;
                scanned(Some(keys));
                drop(scan_permit);
                let _write_permit = writes.clone().acquire_owned().await;
                write_outcomes(&worker.queue, outcomes).await;
            } else {
                scanned(None);
                drop(scan_permit);
            }
            if let Some(ahead) = ahead {
                wait_for_pinned_epochs(&worker, &ahead).await;
                // No scan slot: the read loop holds the free one while it waits for jobs, so
                // taking one could wait for traffic. A pass beyond the slots is rare (only right
                // after a push) and safe: the CUDA backend waits for a workspace of its own.
                running.send_modify(|n| *n += 1);
                let keys = ahead.keys;
                let outcomes = run_window(&worker, ahead).await;
                scanned(Some(keys));
                let _write_permit = writes.acquire_owned().await;
                write_outcomes(&worker.queue, outcomes).await;
            }
        });
    }
    reader.abort();
    while in_flight.join_next().await.is_some() {}
    keeper.abort();
    // What is still ours was read but never started (buffered, or cut off by the stop): back to
    // the group now, so peers need not wait for the claim-idle time.
    let mut backoff = pirq_party::Backoff::default();
    for attempt in 1..=5 {
        match reclaim::release_held(&worker.queue).await {
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

/// How long the scanner stood idle before the window just formed: since the last scan ended, or
/// 0 when a scan is still running. Under steady load, the time the front end (results out, the
/// clients' next queries in) takes between passes.
fn record_scanner_idle(running: usize, last_end: &std::sync::Mutex<(Instant, usize)>) {
    let idle = match running {
        0 => last_end
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .elapsed(),
        _ => Duration::ZERO,
    };
    metrics::histogram!(m::WORKER_SCANNER_IDLE).record(idle.as_secs_f64());
}

/// Keeps the channel fed from the stream until `stop`.
async fn read_loop(
    queue: Arc<Consumer>,
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
    let max_deliveries = queue.policy().max_deliveries;
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
        let claim_now = own_pending.is_none() && tokio::time::Instant::now() >= next_claim;
        let read = match &own_pending {
            Some(after) => queue.read_own_pending(tx.capacity(), after).await,
            None if claim_now => {
                let idle = queue.claim_idle();
                let r = queue.claim(idle, tx.capacity(), &mut cursor).await;
                // A full page: more may be waiting, claim again at once; else after a while.
                if !matches!(&r, Ok(d) if d.len() >= tx.capacity()) && cursor == "0-0" {
                    next_claim = tokio::time::Instant::now()
                        + (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
                }
                if let Ok(d) = &r {
                    if !d.is_empty() {
                        tracing::info!(
                            jobs = d.len(),
                            "claimed jobs idle past the claim-idle time"
                        );
                    }
                }
                r
            }
            None => {
                queue
                    .read(tx.capacity(), block.min(Duration::from_secs(1)))
                    .await
            }
        };
        health.note_read(read.is_ok());
        match read {
            Ok(deliveries) => {
                backoff.reset();
                if own_pending.is_some() {
                    own_pending = deliveries.last().map(|d| d.entry_id.clone());
                    if let Some(n) = own_pending.as_ref().map(|_| deliveries.len()) {
                        tracing::info!(jobs = n, "resuming jobs this consumer held before");
                    }
                }
                let (dead, deliveries): (Vec<Delivery>, Vec<Delivery>) = deliveries
                    .into_iter()
                    .partition(|d| d.deliveries > max_deliveries);
                let dead: Vec<Outcome> = dead
                    .iter()
                    .filter_map(|d| reclaim::over_limit(d, max_deliveries))
                    .collect();
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
                tracing::warn!(error = %e, "reading the job stream failed; retrying");
                backoff.wait().await;
            }
        }
    }
}

/// Marks the window running, runs its passes on a blocking thread, and returns the outcomes.
/// Failures are then held to the delivery limit ([`reclaim::apply_policy`]).
async fn run_window(worker: &Worker, window: Window) -> Vec<Outcome> {
    let span = tracing::debug_span!("window", jobs = window.deliveries.len(), keys = window.keys);
    let deliveries: HashMap<String, u64> = window
        .deliveries
        .iter()
        .map(|d| (d.entry_id.clone(), d.deliveries))
        .collect();
    let start = Instant::now();
    let mut outcomes = run_window_inner(worker, window).instrument(span).await;
    worker.queue.note_window(start.elapsed());
    // Every answer carries the digest of the epoch it answers (SPEC §2.1).
    for outcome in &mut outcomes {
        if let Outcome::Done { epoch, digest, .. } = outcome {
            *digest = worker.digests.get(*epoch);
            if digest.is_none() {
                tracing::error!(
                    epoch,
                    "no digest for an answered epoch; clients will refuse it"
                );
            }
        }
    }

    reclaim::apply_policy(outcomes, &deliveries, worker.queue.policy().max_deliveries)
}

async fn run_window_inner(worker: &Worker, window: Window) -> Vec<Outcome> {
    if !worker.queue.shard().is_whole() {
        return run_shard_window(worker, window).await;
    }
    let ids: Vec<RequestId> = window
        .deliveries
        .iter()
        .filter_map(|d| d.request_id)
        .collect();
    metrics::histogram!(m::WORKER_BATCH_JOBS).record(window.deliveries.len() as f64);
    metrics::histogram!(m::WORKER_BATCH_KEYS).record(window.keys as f64);
    let running = {
        let queue = worker.queue.clone();
        tokio::spawn(async move {
            if let Err(e) = queue.mark_running(&ids).await {
                tracing::warn!(error = %e, "marking jobs running failed");
            }
        })
    };
    // Jobs pinned ahead were split off and waited for in `run` already.
    let outcomes = execute_blocking(worker, window).await;
    // "running" must land before "done", or it could overwrite it.
    let _ = running.await;
    outcomes
}

/// A shard's window: the start script marks the jobs running and pins the epoch all shards
/// answer each job at (the first shard to start a job picks it), then the window runs as usual
/// at those epochs. Jobs that are final already (another shard failed them) or expired are
/// settled without a pass.
async fn run_shard_window(worker: &Worker, mut window: Window) -> Vec<Outcome> {
    let newest = worker.epochs.borrow().newest;
    let startable: Vec<usize> = (0..window.deliveries.len())
        .filter(|&i| {
            let d = &window.deliveries[i];
            d.request_id.is_some() && d.job.is_ok()
        })
        .collect();
    let proposals: Vec<(RequestId, u64)> = startable
        .iter()
        .map(|&i| {
            let d = &window.deliveries[i];
            let job = d.job.as_ref().expect("startable jobs decoded");
            (
                d.request_id.expect("startable jobs have ids"),
                job.epoch.unwrap_or(newest),
            )
        })
        .collect();
    let starts = match worker.queue.start_shard_window(&proposals).await {
        Ok(s) => s,
        Err(e) => {
            // Nothing pinned, nothing run: give the window back for another try.
            tracing::warn!(error = %e, "starting a shard window failed; handing its jobs back");
            return window
                .deliveries
                .into_iter()
                .map(|d| Outcome::Retry {
                    entry_id: d.entry_id,
                    deliveries: d.deliveries,
                })
                .collect();
        }
    };
    let mut outcomes = Vec::new();
    let mut settled = vec![false; window.deliveries.len()];
    for (&i, start) in startable.iter().zip(starts) {
        let d = &mut window.deliveries[i];
        match start {
            ShardStart::At(epoch) => {
                if let Ok(job) = d.job.as_mut() {
                    job.epoch = Some(epoch);
                }
            }
            ShardStart::Settled => {
                settled[i] = true;
                outcomes.push(Outcome::Settled {
                    entry_id: d.entry_id.clone(),
                });
            }
            ShardStart::OtherShardCount => {
                settled[i] = true;
                outcomes.push(Outcome::Failed {
                    entry_id: d.entry_id.clone(),
                    request_id: d.request_id.expect("startable jobs have ids"),
                    error: ErrorBody::new(
                        ErrorCode::Internal,
                        "the party was re-split into another number of shards while this query \
                         was being answered; submit it again",
                    ),
                    worker: d.received.elapsed(),
                });
            }
        }
    }
    let mut keep = settled.iter().map(|s| !s);
    window.deliveries.retain(|_| keep.next().unwrap_or(true));
    window.keys = window.deliveries.iter().map(Delivery::keys).sum();
    if window.deliveries.is_empty() {
        return outcomes;
    }
    wait_for_pinned_epochs(worker, &window).await;
    outcomes.extend(execute_blocking(worker, window).await);
    outcomes
}

/// [`execute`] on a blocking thread. A pass that panics fails every job of its window
/// (`scan_failed`; an entry without a request id is discarded), so the queries are answered
/// and the worker serves on.
async fn execute_blocking(worker: &Worker, window: Window) -> Vec<Outcome> {
    // Keep what is needed to report a failure if the pass panics.
    let entries: Vec<(String, Option<RequestId>, Instant)> = window
        .deliveries
        .iter()
        .map(|d| (d.entry_id.clone(), d.request_id, d.received))
        .collect();
    let scanner = worker.scanner.clone();
    match tokio::task::spawn_blocking(move || execute(scanner.as_ref(), window)).await {
        Ok(outcomes) => outcomes,
        Err(e) => {
            tracing::error!(error = %e, "scanner pass panicked; failing its window");
            entries
                .into_iter()
                .map(|(entry_id, request_id, received)| match request_id {
                    Some(request_id) => Outcome::Failed {
                        entry_id,
                        request_id,
                        error: ErrorBody::new(ErrorCode::ScanFailed, "the scanner pass failed"),
                        worker: received.elapsed(),
                    },
                    None => Outcome::Discard { entry_id },
                })
                .collect()
        }
    }
}

/// A job may pin an epoch the gateway already accepted but this worker's follower has not
/// applied yet: wait for it (bounded by `epoch_wait`) rather than fail the job.
async fn wait_for_pinned_epochs(worker: &Worker, window: &Window) {
    let Some(pinned) = window
        .deliveries
        .iter()
        .filter_map(|d| d.job.as_ref().ok().and_then(|j| j.epoch))
        .max()
    else {
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
async fn write_outcomes(queue: &Consumer, outcomes: Vec<Outcome>) {
    let started = Instant::now();
    let mut backoff = pirq_party::Backoff::default();
    for attempt in 1..=10 {
        match queue.finish(&outcomes).await {
            Ok(()) => {
                metrics::histogram!(m::WORKER_RESULTS_WRITE)
                    .record(started.elapsed().as_secs_f64());
                record_outcomes(&outcomes);
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

fn record_outcomes(outcomes: &[Outcome]) {
    for o in outcomes {
        match o {
            Outcome::Done {
                pages,
                page_size,
                accepted_ms,
                ..
            } => {
                metrics::counter!(m::WORKER_JOBS_COMPLETED).increment(1);
                metrics::counter!(m::WORKER_KEYS_ANSWERED)
                    .increment((pages.len() / page_size) as u64);
                // Written just now: acceptance at the gateway to result in Redis.
                metrics::histogram!(m::WORKER_JOB_LATENCY)
                    .record(m::seconds_since_unix_ms(*accepted_ms));
            }
            Outcome::Failed { .. } => metrics::counter!(m::WORKER_JOBS_FAILED).increment(1),
            Outcome::DeadLetter { request_id, .. } => {
                metrics::counter!(m::WORKER_JOBS_DEAD_LETTERED).increment(1);
                if request_id.is_some() {
                    metrics::counter!(m::WORKER_JOBS_FAILED).increment(1);
                }
            }
            Outcome::Retry { .. } => metrics::counter!(m::WORKER_JOBS_RELEASED).increment(1),
            Outcome::Discard { .. } | Outcome::Settled { .. } => {}
        }
    }
}

/// A job that passed the checks: its keys are in the window's key list at `first..first+count`.
struct Valid {
    entry_id: String,
    request_id: RequestId,
    received: Instant,
    accepted_ms: u64,
    first: usize,
    count: usize,
    epoch: u64,
}

impl Valid {
    /// The job's answered outcome: `pages` are its answers back to back.
    fn done(self, pages: Vec<u8>, page_size: usize, scan: Duration) -> Outcome {
        Outcome::Done {
            pages,
            entry_id: self.entry_id,
            request_id: self.request_id,
            epoch: self.epoch,
            page_size,
            scan,
            worker: self.received.elapsed(),
            accepted_ms: self.accepted_ms,
            digest: None,
        }
    }
}

/// Validates every job, answers all valid keys in as few passes as the scanner allows, and
/// splits the answers back per job. Runs on a blocking thread.
pub fn execute(scanner: &dyn Scanner, window: Window) -> Vec<Outcome> {
    let geometry = scanner.geometry();
    let epochs = scanner.epoch_window();
    let mut key_epochs = Vec::with_capacity(window.keys);
    let mut outcomes = Vec::with_capacity(window.deliveries.len());
    let mut valid = Vec::new();
    let mut keys = Vec::with_capacity(window.keys);
    for d in window.deliveries {
        let Some(request_id) = d.request_id else {
            tracing::warn!(entry = %d.entry_id, "stream entry without a request id; discarding it");
            outcomes.push(Outcome::Discard {
                entry_id: d.entry_id,
            });
            continue;
        };
        let accepted_ms = d.job.as_ref().map(|j| j.accepted_ms).unwrap_or(0);
        match check_job(d.job, &geometry, epochs) {
            Ok((epoch, job_keys)) => {
                key_epochs.extend(std::iter::repeat_n(epoch, job_keys.len()));
                valid.push(Valid {
                    entry_id: d.entry_id,
                    request_id,
                    received: d.received,
                    accepted_ms,
                    first: keys.len(),
                    count: job_keys.len(),
                    epoch,
                });
                keys.extend(job_keys);
            }
            Err(error) => outcomes.push(Outcome::Failed {
                entry_id: d.entry_id,
                request_id,
                error,
                worker: d.received.elapsed(),
            }),
        }
    }
    if valid.is_empty() {
        return outcomes;
    }
    let page_size = geometry.page_size;
    let start = Instant::now();
    match run_passes(scanner, &keys, &key_epochs) {
        Ok(answers) => {
            let scan = start.elapsed();
            outcomes.extend(valid.into_iter().map(|v| {
                let pages = answers[v.first * page_size..(v.first + v.count) * page_size].to_vec();
                v.done(pages, page_size, scan)
            }))
        }
        Err(e) => {
            // One job may be the cause: run each alone, so the others are answered and only the
            // culprit fails (and is retried, then dead-lettered, by the delivery limit).
            tracing::error!(error = %e, jobs = valid.len(), "scanner pass failed");
            let single = valid.len() == 1;
            if !single {
                tracing::warn!("running the window's jobs one by one to isolate the failure");
            }
            for v in valid {
                let range = v.first..v.first + v.count;
                let alone = if single {
                    Err(e.clone())
                } else {
                    let start = Instant::now();
                    run_passes(scanner, &keys[range.clone()], &key_epochs[range])
                        .map(|a| (a, start.elapsed()))
                };
                outcomes.push(match alone {
                    Ok((pages, scan)) => v.done(pages, page_size, scan),
                    Err(e) => Outcome::Failed {
                        entry_id: v.entry_id,
                        request_id: v.request_id,
                        error: ErrorBody::new(
                            ErrorCode::ScanFailed,
                            format!("scanner pass failed: {e}"),
                        ),
                        worker: v.received.elapsed(),
                    },
                });
            }
        }
    }
    outcomes
}

/// The answers of `keys` in as few passes as the scanner allows, back to back. A pass that
/// panics is an error like a pass that fails: a poison job never takes the worker down.
fn run_passes(scanner: &dyn Scanner, keys: &[DpfKey], epochs: &[u64]) -> Result<Vec<u8>, String> {
    let per_pass = scanner.max_batch_keys().max(1);
    let mut answers = Vec::with_capacity(keys.len() * scanner.geometry().page_size);
    for (chunk, chunk_epochs) in keys.chunks(per_pass).zip(epochs.chunks(per_pass)) {
        let pass_start = Instant::now();
        let pass = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            scanner.pass_at(chunk, chunk_epochs)
        }));
        let a = match pass {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err("the scanner pass panicked".into()),
        };
        metrics::histogram!(m::WORKER_PASS_DURATION).record(pass_start.elapsed().as_secs_f64());
        answers.extend_from_slice(a.as_bytes());
    }
    Ok(answers)
}

/// The worker's own check of a job: the gateway validated it, but the stream is not trusted.
/// Returns the epoch the job is answered at (its pinned one, or the newest) and its keys.
fn check_job(
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

#[cfg(test)]
mod tests {
    use super::*;
    use pirq_scan::{Answers, ScanError};
    use pirq_shared::dpf::generate;
    use pirq_shared::update::EpochUpdate;

    /// Answers every key with a page of its first byte; fails or panics on a pass that holds
    /// the poison key.
    struct Touchy {
        poison: DpfKey,
        panic: bool,
    }

    impl Scanner for Touchy {
        fn name(&self) -> &'static str {
            "touchy"
        }
        fn geometry(&self) -> Geometry {
            Geometry {
                num_pages: 256,
                page_size: 4,
                domain_bits: 8,
            }
        }
        fn max_batch_keys(&self) -> usize {
            64
        }
        fn epoch_window(&self) -> EpochRange {
            EpochRange {
                oldest: 0,
                newest: 0,
            }
        }
        fn apply_epoch(&self, _: &EpochUpdate) -> Result<(), ScanError> {
            Err(ScanError::Unsupported("epochs"))
        }
        fn pass_at(&self, keys: &[DpfKey], _: &[u64]) -> Result<Answers, ScanError> {
            if keys.contains(&self.poison) {
                if self.panic {
                    panic!("touchy scanner");
                }
                return Err(ScanError::Device("touchy scanner".into()));
            }
            let bytes = keys.iter().flat_map(|k| [k.to_bytes()[3]; 4]).collect();
            Ok(Answers::new(4, bytes))
        }
    }

    fn delivery(i: usize, key: &DpfKey) -> Delivery {
        Delivery {
            entry_id: format!("{i}-0"),
            request_id: Some(RequestId::parse(&format!("{i:032x}")).unwrap()),
            job: Ok(Job {
                keys: vec![key.to_bytes()],
                epoch: None,
                accepted_ms: 0,
            }),
            received: Instant::now(),
            deliveries: 1,
            gone: false,
        }
    }

    #[test]
    fn a_failing_pass_fails_only_the_job_that_causes_it() {
        for panic in [false, true] {
            let mut rng = rand::rng();
            let keys: Vec<DpfKey> = (0..5)
                .map(|a| generate(8, a, &mut rng).unwrap().0)
                .collect();
            let scanner = Touchy {
                poison: keys[2].clone(),
                panic,
            };
            let window = Window {
                deliveries: keys
                    .iter()
                    .enumerate()
                    .map(|(i, k)| delivery(i, k))
                    .collect(),
                keys: keys.len(),
            };
            let outcomes = execute(&scanner, window);
            assert_eq!(outcomes.len(), 5);
            for o in &outcomes {
                match o {
                    Outcome::Failed {
                        entry_id, error, ..
                    } => {
                        assert_eq!(entry_id, "2-0", "panic: {panic}");
                        assert_eq!(error.code, "scan_failed");
                    }
                    Outcome::Done {
                        entry_id, pages, ..
                    } => {
                        let i: usize = entry_id.split('-').next().unwrap().parse().unwrap();
                        assert_eq!(pages, &vec![keys[i].to_bytes()[3]; 4]);
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
    }
}
