//! The worker's scheduling, top to bottom: the job stream → admission → the rotating scan →
//! results.
//!
//! 1. **Read** ([`serve::read_loop`]): `XREADGROUP` into a bounded channel, only when there is
//!    room, so a busy worker leaves jobs to its peers.
//! 2. **Admit** ([`admit`]): takes every job waiting in the channel at once. A shard's jobs are
//!    started there (the start script marks them running and pins the epoch every shard answers
//!    them at; jobs final already are settled). Each job is checked (`serve::check_job`); one
//!    pinned to an epoch this worker has not applied yet waits apart for it.
//! 3. **Rotate** ([`rotate`], one blocking thread that owns the scanner's [`Rotation`]): joins
//!    waiting jobs at the next segment boundary while they fit, steps the rotation, and sends
//!    the outcome of every job whose turn ended to the writer. While keys are in flight it never
//!    waits for jobs; with none it sleeps until one comes. A job with more keys than the rotation
//!    holds joins in parts. Which keys join when, and when a job is whole, is the synchronous
//!    [`Book`]'s (unit-tested there); this loop only moves keys and answers.
//! 4. **Write** ([`write`]): in the order the rotation sent them, marks the jobs that joined as
//!    running (a whole party's; so "running" lands before "done") and writes outcomes
//!    ([`serve::write_outcomes`]), taking everything queued in one round trip.
//!
//! Stop: reading and admitting stop; the rotation joins nothing new, finishes the keys in flight
//! (a job joined in part is joined whole) and their outcomes are written; what was read but not
//! joined is handed back to the group by the caller.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pirq_queue::consumer::{Delivery, EntryId, Outcome, ShardStart};
use pirq_queue::record::Pages;
use pirq_queue::RequestId;
use pirq_scan::rotation::{Finished, Rotation, Step, Ticket};
use pirq_scan::ScanError;
use pirq_shared::dpf::DpfKey;
use pirq_shared::error::ErrorCode;
use pirq_shared::metrics as m;
use pirq_shared::wire::{ErrorBody, Reply};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::rotation_book::{Book, JobId, Next};
use crate::serve::{self, Worker};
use crate::share::{Claim, Held};

/// Runs until `stop` turns true, then drains as the module documentation says.
pub async fn run(worker: Worker, stop: watch::Receiver<bool>) {
    let worker = Arc::new(worker);
    let keeper = pirq_queue::consumer::spawn_keeper(worker.queue.clone(), stop.clone());
    let rotation = match worker.scanner.clone().rotation() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "the scanner cannot rotate; serving nothing");
            keeper.abort();
            return;
        }
    };
    tracing::info!(
        segments = rotation.segments(),
        capacity_keys = rotation.capacity(),
        "rotating scan ready"
    );
    let capacity = rotation.capacity().max(1);
    let (deliveries_tx, deliveries) = mpsc::channel(capacity);
    let reader = tokio::spawn(serve::read_loop(
        worker.queue.clone(),
        deliveries_tx,
        worker.block,
        stop.clone(),
        worker.health.clone(),
    ));
    let (jobs_tx, jobs) = mpsc::channel(capacity);
    let (events_tx, events) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write(worker.clone(), events));
    let rotating = {
        let (worker, events) = (worker.clone(), events_tx.clone());
        let stop = stop.clone();
        tokio::task::spawn_blocking(move || rotate(&worker, rotation, jobs, events, stop))
    };
    admit(&worker, deliveries, jobs_tx, events_tx, stop).await;
    reader.abort();
    // The admission's senders are gone: the rotation finishes its keys in flight and ends,
    // then the writer writes the last outcomes and ends.
    let _ = rotating.await;
    let _ = writer.await;
    keeper.abort();
    serve::hand_back_held(&worker.queue).await;
}

/// A checked job, ready to join the rotation.
pub struct Ready {
    pub entry_id: EntryId,
    pub request_id: RequestId,
    pub received: Instant,
    pub accepted_ms: u64,
    pub deliveries: u64,
    pub epoch: u64,
    pub keys: Vec<DpfKey>,
    /// Whether joining announces it running: its client follows events (a held request's
    /// gateway waits for the answer only), and a shard's job was announced at admission.
    pub mark_running: bool,
    /// Where the answer goes (the job's).
    pub reply: Reply,
}

/// What the rotation tells the writer, in order.
pub enum Event {
    /// These jobs joined the rotation.
    Running(Vec<RequestId>),
    Outcomes(Vec<Outcome>),
}

/// Step 2: jobs from the channel to the rotation until `stop`.
async fn admit(
    worker: &Arc<Worker>,
    mut deliveries: mpsc::Receiver<Delivery>,
    jobs: mpsc::Sender<Ready>,
    events: mpsc::UnboundedSender<Event>,
    mut stop: watch::Receiver<bool>,
) {
    // Jobs pinned to an epoch not applied yet, each waiting for it on its own.
    let mut pinned_ahead = JoinSet::new();
    loop {
        while pinned_ahead.try_join_next().is_some() {}
        let first = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            d = deliveries.recv() => match d { Some(d) => d, None => break },
        };
        let mut batch = vec![first];
        while let Ok(d) = deliveries.try_recv() {
            batch.push(d);
        }
        let (starting, settled) = if worker.queue.shard().is_whole() {
            (batch, Vec::new())
        } else {
            start_shard_jobs(worker, batch).await
        };
        let mut outcomes = settled;
        let newest = worker.epochs.borrow().newest;
        for d in starting {
            let ahead = d
                .job
                .as_ref()
                .ok()
                .and_then(|j| j.epoch)
                .is_some_and(|e| e > newest);
            if ahead {
                let (worker, jobs, events) = (worker.clone(), jobs.clone(), events.clone());
                pinned_ahead.spawn(async move {
                    serve::wait_for_pinned_epoch(&worker, &d).await;
                    match check(&worker, d) {
                        Ok(ready) => {
                            let _ = jobs.send(ready).await;
                        }
                        Err(outcome) => {
                            let _ = events.send(Event::Outcomes(vec![*outcome]));
                        }
                    }
                });
                continue;
            }
            match check(worker, d) {
                Ok(ready) => {
                    if jobs.send(ready).await.is_err() {
                        return;
                    }
                }
                Err(outcome) => outcomes.push(*outcome),
            }
        }
        if !outcomes.is_empty() {
            let _ = events.send(Event::Outcomes(outcomes));
        }
    }
    // Stopping: jobs waiting for their epoch are not started (they are handed back).
    pinned_ahead.abort_all();
}

/// A shard's jobs: the start script marks them running and pins each one's epoch (the first
/// shard to start a job picks it); jobs final already are settled. Returns the jobs to run, at
/// their pinned epochs, and the settled outcomes.
async fn start_shard_jobs(
    worker: &Worker,
    mut batch: Vec<Delivery>,
) -> (Vec<Delivery>, Vec<Outcome>) {
    let newest = worker.epochs.borrow().newest;
    let proposals: Vec<(RequestId, u64, bool)> = batch
        .iter()
        .filter_map(|d| {
            let job = d.job.as_ref().ok()?;
            let follows = job.reply.held_until_ms.is_none();
            Some((d.request_id?, job.epoch.unwrap_or(newest), follows))
        })
        .collect();
    let starts = match worker.queue.start_shard_window(&proposals).await {
        Ok(s) => s,
        Err(e) => {
            // Nothing pinned, nothing run: give the jobs back for another try.
            tracing::warn!(error = %e, "starting shard jobs failed; handing them back");
            let retry = batch
                .into_iter()
                .map(|d| Outcome::Retry {
                    entry_id: d.entry_id,
                    deliveries: d.deliveries,
                })
                .collect();
            return (Vec::new(), retry);
        }
    };
    let mut starts = starts.into_iter();
    let mut settled = Vec::new();
    batch.retain_mut(|d| {
        if d.request_id.is_none() || d.job.is_err() {
            return true; // failed by the check, without a start
        }
        match starts.next() {
            Some(ShardStart::At(epoch)) => {
                if let Ok(job) = d.job.as_mut() {
                    job.epoch = Some(epoch);
                }
                true
            }
            Some(ShardStart::Settled) | None => {
                settled.push(Outcome::Settled {
                    entry_id: d.entry_id.clone(),
                });
                false
            }
            Some(ShardStart::OtherShardCount) => {
                let failed = Outcome::Failed {
                    entry_id: d.entry_id.clone(),
                    request_id: d.request_id.expect("startable jobs have ids"),
                    error: ErrorBody::new(
                        ErrorCode::Internal,
                        "the party was re-split into another number of shards while this \
                         query was being answered; submit it again",
                    ),
                    worker: d.received.elapsed(),
                    reply: d.job.as_ref().map(|j| j.reply.clone()).unwrap_or_default(),
                };
                settled.push(settle(worker, failed, d.deliveries));
                false
            }
        }
    });
    (batch, settled)
}

/// The worker's own check of a job ([`serve::check_job`]): a ready job, or its outcome (boxed:
/// an outcome is large, and most jobs are ready).
fn check(worker: &Worker, d: Delivery) -> Result<Ready, Box<Outcome>> {
    let Some(request_id) = d.request_id else {
        tracing::warn!(entry = %d.entry_id, "stream entry without a request id; discarding it");
        let discard = Outcome::Discard {
            entry_id: d.entry_id,
        };
        return Err(Box::new(settle(worker, discard, d.deliveries)));
    };
    let accepted_ms = d.job.as_ref().map(|j| j.accepted_ms).unwrap_or(0);
    let reply = d.job.as_ref().map(|j| j.reply.clone()).unwrap_or_default();
    let window = worker.scanner.epoch_window();
    match serve::check_job(d.job, &worker.scanner.geometry(), window) {
        Ok((epoch, keys)) => Ok(Ready {
            entry_id: d.entry_id,
            request_id,
            received: d.received,
            accepted_ms,
            deliveries: d.deliveries,
            epoch,
            keys,
            mark_running: worker.queue.shard().is_whole() && reply.held_until_ms.is_none(),
            reply,
        }),
        Err(error) => {
            let failed = Outcome::Failed {
                entry_id: d.entry_id,
                request_id,
                error,
                worker: d.received.elapsed(),
                reply,
            };
            Err(Box::new(settle(worker, failed, d.deliveries)))
        }
    }
}

/// A job in the rotation: its keys, and what its parts brought back so far. Which keys join
/// when, and when the job is whole, is its [`Book`]'s.
struct Running {
    ready: Ready,
    /// Each finished part's answers, by its first key: the scanner's buffers, passed on to the
    /// write as they are (never joined here: the Redis command is their one copy).
    pages: BTreeMap<usize, Bytes>,
    /// How long the job was held before each part in flight joined, by the part's first key
    /// (the segment wait counts from the worker's read, not from the join).
    held: HashMap<usize, Duration>,
    error: Option<ErrorBody>,
    /// Longest turn of its parts (for the claim-idle time).
    turn: Duration,
}

impl Running {
    fn new(ready: Ready) -> Running {
        Running {
            ready,
            pages: BTreeMap::new(),
            held: HashMap::new(),
            error: None,
            turn: Duration::ZERO,
        }
    }
}

/// The jobs of one rotation: the [`Book`] that says which keys join and when a job is whole,
/// and each job's keys and answers.
struct Jobs {
    book: Book<Ticket>,
    running: HashMap<JobId, Running>,
    /// The table these jobs are of: the `table` label of their metrics.
    table: Arc<str>,
}

impl Jobs {
    fn add(&mut self, ready: Ready) {
        let id = self.book.add(ready.keys.len());
        self.running.insert(id, Running::new(ready));
    }

    /// Joins at this segment boundary what fits, in arrival order (the rest of a job joined in
    /// part first). The ids of the jobs that started (to announce running), and the jobs that
    /// failed to join with nothing in flight: done.
    fn join(&mut self, rotation: &mut dyn Rotation) -> (Vec<RequestId>, Vec<Running>) {
        let capacity = rotation.capacity().max(1);
        let mut started = Vec::new();
        let mut done = Vec::new();
        loop {
            let failed = match self.book.next(|keys| rotation.fits(keys)) {
                Next::Idle | Next::Wait => break,
                // Not even an empty rotation takes it.
                Next::TooLarge(part) => (
                    part.job,
                    scan_error(&ScanError::BatchTooLarge {
                        got: part.len,
                        max: capacity,
                    }),
                ),
                Next::Join(part) => {
                    let r = self.running.get_mut(&part.job).expect("a job of the book");
                    let keys = &r.ready.keys[part.first..part.first + part.len];
                    match guarded(|| rotation.join(keys, r.ready.epoch)) {
                        Ok(ticket) => {
                            if part.first == 0 && r.ready.mark_running {
                                started.push(r.ready.request_id);
                            }
                            r.held.insert(part.first, r.ready.received.elapsed());
                            self.book.joined(part, ticket);
                            continue;
                        }
                        Err(e) => (part.job, scan_error(&e)),
                    }
                }
            };
            let (job, error) = failed;
            self.running.get_mut(&job).expect("a job of the book").error = Some(error);
            if let Some(d) = self.book.failed(job) {
                done.extend(self.running.remove(&d.job));
            }
        }
        (started, done)
    }

    /// A part's turn ended: its answers (or error) go to its job; the job when it is whole.
    fn finish(&mut self, f: Finished) -> Option<Running> {
        let (part, done) = self.book.finished(&f.ticket, f.answers.is_err())?;
        let r = self.running.get_mut(&part.job)?;
        let held = r.held.remove(&part.first).unwrap_or_default();
        r.turn = r.turn.max(f.turn);
        match f.answers {
            Ok(answers) => {
                metrics::histogram!(m::WORKER_SEGMENT_WAIT, m::TABLE => self.table.clone())
                    .record((held + f.waited).as_secs_f64());
                r.pages.insert(part.first, answers.into_shared());
            }
            Err(e) => r.error = Some(scan_error(&e)),
        }
        self.running.remove(&done?.job)
    }

    /// Stopping: the jobs not joined at all are dropped (the caller hands them back); a job
    /// joined in part joins whole.
    fn stop(&mut self) {
        for id in self.book.stop() {
            self.running.remove(&id);
        }
    }
}

/// Step 3, on a blocking thread: joins, steps and reports until the admission is gone and the
/// keys in flight are answered.
fn rotate(
    worker: &Worker,
    mut rotation: Box<dyn Rotation>,
    mut incoming: mpsc::Receiver<Ready>,
    events: mpsc::UnboundedSender<Event>,
    stop: watch::Receiver<bool>,
) {
    let page_size = worker.scanner.geometry().page_size;
    let capacity = rotation.capacity().max(1);
    let mut jobs = Jobs {
        book: Book::new(capacity),
        running: HashMap::new(),
        table: Arc::from(worker.queue.layout().table_name()),
    };
    let mut admitting = true;
    let mut idle_since = Some(Instant::now());
    // This table's place among those waiting for the scanner, kept from its last step while it
    // has keys in flight (`crate::share`).
    let mut claim: Option<Claim> = None;
    let shared = worker.share.is_shared();
    loop {
        // Take jobs: wait for one only when nothing is in flight or waiting.
        if admitting && jobs.book.is_empty() {
            // Nothing to step: no place is kept while this blocks.
            drop(claim.take());
            match incoming.blocking_recv() {
                Some(ready) => jobs.add(ready),
                None => admitting = false,
            }
        }
        // Read more only while fewer than a rotation's worth of keys wait: what is read is held.
        while admitting && jobs.book.waiting_keys() < capacity {
            match incoming.try_recv() {
                Ok(ready) => jobs.add(ready),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => admitting = false,
            }
        }
        if *stop.borrow() {
            admitting = false;
        }
        // The scanner is the worker's, shared with its other tables (`crate::share`): this
        // round's joins and step run while this table holds it.
        let mut held = match claim.take() {
            Some(claim) => claim.take(),
            None => worker.share.take(worker.table_index),
        };
        if !admitting {
            jobs.stop();
        }
        let (started, failed) = jobs.join(rotation.as_mut());
        let mut outcomes: Vec<Outcome> = failed
            .into_iter()
            .map(|r| outcome(worker, r, page_size))
            .collect();
        if !started.is_empty() {
            let _ = events.send(Event::Running(started));
        }
        if rotation.in_flight() == 0 {
            if !outcomes.is_empty() {
                let _ = events.send(Event::Outcomes(outcomes));
            }
            if !admitting && jobs.book.is_empty() {
                return;
            }
            idle_since.get_or_insert_with(Instant::now);
            continue;
        }
        if let Some(since) = idle_since.take() {
            metrics::histogram!(m::WORKER_SCANNER_IDLE, m::TABLE => jobs.table.clone())
                .record(since.elapsed().as_secs_f64());
        }
        let step = step(rotation.as_mut(), shared.then_some(&mut held));
        record_step(&step, &jobs.table);
        for f in step.finished {
            if let Some(r) = jobs.finish(f) {
                worker.queue.note_window(r.ready.received.elapsed());
                outcomes.push(outcome(worker, r, page_size));
            }
        }
        // With keys in flight (or waiting to join) this table steps again at once: it keeps
        // its place as it gives the scanner back (`crate::share`).
        if !jobs.book.is_empty() {
            claim = Some(held.keep_claim());
        } else {
            drop(held);
        }
        if !outcomes.is_empty() {
            let _ = events.send(Event::Outcomes(outcomes));
        }
        // A backend that queues its next step ahead (CUDA) wants it launched near the end of
        // the one in flight: the jobs that arrive until then join it.
        if let Some(at) = rotation.launch_at() {
            let now = Instant::now();
            if at > now && admitting {
                std::thread::sleep(at - now);
            }
        }
    }
}

/// Runs a join, its panic as a scanner error (a panicking backend fails the job at hand, not
/// the worker).
fn guarded<T>(call: impl FnOnce() -> Result<T, ScanError>) -> Result<T, ScanError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call))
        .unwrap_or_else(|_| Err(ScanError::Device("the scanner panicked".into())))
}

/// One segment for every key in flight; with other tables (`held`), the scanner is offered to
/// them between its pieces (`crate::share`). A failed step fails every key in flight; the
/// delivery limit hands their jobs back for another try (or dead-letters them on their last
/// delivery).
fn step(rotation: &mut dyn Rotation, held: Option<&mut Held>) -> Step {
    let stepped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match held {
        Some(held) => rotation.step_pausing(&mut || held.pause_point()),
        None => rotation.step(),
    }));
    let reason = match stepped {
        Ok(Ok(step)) => return step,
        Ok(Err(e)) => e.to_string(),
        Err(_) => "the scanner panicked".to_string(),
    };
    tracing::error!(error = %reason, "a rotation step failed; failing its keys in flight");
    let finished = rotation
        .clear()
        .into_iter()
        .map(|ticket| Finished {
            ticket,
            answers: Err(ScanError::Device(reason.clone())),
            waited: Duration::ZERO,
            turn: Duration::ZERO,
        })
        .collect();
    Step {
        finished,
        ..Step::default()
    }
}

/// A failure of the scanner, as the job's error: an epoch that left the window mid-turn (more
/// updates than `--epoch-window` within one turn) is `epoch_unavailable`; anything else is the
/// scanner's.
fn scan_error(e: &ScanError) -> ErrorBody {
    match e {
        ScanError::Epoch(e) => ErrorBody::new(ErrorCode::EpochUnavailable, e.to_string()),
        e => ErrorBody::new(ErrorCode::ScanFailed, format!("scanner failed: {e}")),
    }
}

/// The job's outcome, its answers or its error; delivery limits applied, digest stamped.
fn outcome(worker: &Worker, r: Running, page_size: usize) -> Outcome {
    let Running {
        ready,
        pages,
        error,
        turn,
        ..
    } = r;
    let o = match error {
        None => Outcome::Done {
            // The parts in key order, as one answer string.
            pages: Pages::new(pages.into_values().collect()),
            entry_id: ready.entry_id.clone(),
            request_id: ready.request_id,
            epoch: ready.epoch,
            page_size,
            scan: turn,
            worker: ready.received.elapsed(),
            accepted_ms: ready.accepted_ms,
            // Every answer carries the digest of the epoch it answers (SPEC §2.1).
            digest: worker.digests.get(ready.epoch),
            reply: ready.reply.clone(),
        },
        Some(error) => Outcome::Failed {
            entry_id: ready.entry_id.clone(),
            request_id: ready.request_id,
            error,
            worker: ready.received.elapsed(),
            reply: ready.reply.clone(),
        },
    };
    if let Outcome::Done {
        digest: None,
        epoch,
        ..
    } = &o
    {
        tracing::error!(
            epoch,
            "no digest for an answered epoch; clients will refuse it"
        );
    }
    settle(worker, o, ready.deliveries)
}

/// The delivery limit applied to one job's outcome, as queue's rule decides it
/// ([`pirq_queue::consumer::Policy::settle`]): a failure with deliveries left is handed back
/// for another try.
fn settle(worker: &Worker, outcome: Outcome, deliveries: u64) -> Outcome {
    worker.queue.policy().settle(outcome, deliveries)
}

/// The rotation's metrics: each finished group's turn and the keys of each turn (the wait for
/// the first segment is recorded where the job's read time is known), labelled by `table`.
fn record_step(step: &Step, table: &Arc<str>) {
    for f in &step.finished {
        if f.answers.is_ok() {
            metrics::histogram!(m::WORKER_TURN_DURATION, m::TABLE => table.clone())
                .record(f.turn.as_secs_f64());
        }
    }
    if let Some(keys) = step.turn_keys {
        metrics::histogram!(m::WORKER_TURN_KEYS, m::TABLE => table.clone()).record(keys as f64);
    }
}

/// Step 4: marks and outcomes to Redis in the order the rotation sent them; what queued up
/// while a write ran goes in the next one.
async fn write(worker: Arc<Worker>, mut events: mpsc::UnboundedReceiver<Event>) {
    while let Some(first) = events.recv().await {
        let mut queued = vec![first];
        while let Ok(e) = events.try_recv() {
            queued.push(e);
        }
        let mut running = Vec::new();
        let mut outcomes = Vec::new();
        for event in queued {
            match event {
                Event::Running(ids) => running.extend(ids),
                Event::Outcomes(o) => outcomes.extend(o),
            }
        }
        // A job whose outcome goes out in this same round goes straight from `queued` to its
        // final status: its `running` announcement would be followed a moment later by the
        // answer (docs/http-api.md: a fast query may go straight to its result). The other
        // announcements go first; a job's outcome always comes after its announcement, so none
        // of them belongs to an outcome of this round.
        let finals: std::collections::HashSet<RequestId> =
            outcomes.iter().filter_map(final_request).collect();
        running.retain(|id| !finals.contains(id));
        if let Err(e) = worker.queue.mark_running(&running).await {
            tracing::warn!(error = %e, "marking jobs running failed");
        }
        serve::write_outcomes(&worker.queue, outcomes).await;
    }
}

/// The request an outcome makes final, if any (a retry hands the job back instead).
fn final_request(outcome: &Outcome) -> Option<RequestId> {
    match outcome {
        Outcome::Done { request_id, .. } | Outcome::Failed { request_id, .. } => Some(*request_id),
        Outcome::DeadLetter { request_id, .. } => *request_id,
        Outcome::Discard { .. } | Outcome::Settled { .. } | Outcome::Retry { .. } => None,
    }
}
