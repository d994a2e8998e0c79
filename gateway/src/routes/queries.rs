//! `POST /v1/queries`, `GET /v1/queries/{id}` (with `?wait=S`), `GET /v1/queries/{id}/events`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::Response;
use futures::Stream;
use pirq_shared::check;
use pirq_shared::dpf::DpfKey;
use pirq_shared::error::ErrorCode;
use pirq_shared::wire::{
    ErrorBody, ErrorEnvelope, Job, QueryRequest, QueryResult, QueryStatus, Reply,
};
use tokio::sync::mpsc;
use tracing::Instrument;

use super::Format;
use crate::error::ApiError;
use crate::events::{Subscription, Wake};
use crate::state::AppState;
use crate::waiters::Slot;
use crate::{durability, idempotency};
use pirq_queue::producer::{SubmitChecks, Submitted};
use pirq_queue::{QueryRecord, QueueError, RegisteredDb, RequestId};

/// Longest `?wait=`, in seconds.
pub const MAX_WAIT_SECS: f64 = 30.0;
/// A waiter reads the status again at least this often, even without a notification.
const RECHECK: Duration = Duration::from_secs(2);

impl From<QueueError> for ApiError {
    fn from(e: QueueError) -> ApiError {
        ApiError::redis(e)
    }
}

/// `POST /v1/queries`: validate, queue, answer 202 with the request id.
pub async fn submit(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let idem_key = idempotency::key(&headers)?;
    let format = Format::of_request(&headers)?;
    let body = crate::body::read(&headers, body, st.config.query_body()).await?;
    let request = match format {
        Format::Json => QueryRequest::from_json(&body)?,
        Format::Bincode => QueryRequest::from_bincode(&body)?,
    };
    check_count(request.keys.len(), st.config.max_keys_per_query as usize)?;
    let keys = parse_keys(&request.keys)?;
    let db = st.db.get().await?.ok_or_else(no_database)?;
    check_against_db(&keys, request.epoch, &db)?;

    let fingerprint = idem_key
        .as_ref()
        .map(|_| idempotency::fingerprint(&request));
    // In the partition the request is to live in (the key's, with an Idempotency-Key).
    let id = st.producer.mint_id(idem_key.as_deref());
    let partition = st.producer.layout().partition_of_id(id.as_str());
    if !st.durable.holds(partition) {
        return Err(not_durable(
            st.durable.mode,
            match st.durable.mode {
                durability::Mode::Replica => {
                    "the redis primary of this request's partition has no replica online now"
                }
                _ => "redis does not fsync every write now (appendfsync always)",
            },
        ));
    }
    // A client that prefers to wait for the answer, while a waiter slot is free: its request is
    // held, the job says until when, and no `queued` record is written (the answer comes in
    // the completion event). Subscribed before the job is on the stream, so its answer cannot
    // be announced unheard.
    let accepted_ms = pirq_shared::clock::unix_ms();
    let inline = prefer_wait(&headers).and_then(|wait| {
        let slot = st.waiters.enter().ok()?;
        Some(Held {
            wait,
            slot,
            sub: st.events.subscribe(&id),
            // An unsharded worker shortens the Idempotency-Key record of a held query with
            // its answer (`Reply::held_keep_ms`); a sharded party's combine script does not.
            worker_shortens_idempotency: db.shards <= 1,
        })
    });
    let job = Job {
        keys: request.keys,
        epoch: request.epoch,
        accepted_ms,
        reply: Reply {
            held_until_ms: inline
                .as_ref()
                .map(|held| accepted_ms + held.wait.as_millis() as u64),
            // Its record is a net for a missed event: kept within the read-result budget.
            held_keep_ms: inline
                .as_ref()
                .map(|_| st.retention.ttl().as_millis() as u64),
            idempotency_key: idem_key.clone(),
        },
    };
    if st.drain.memory_full(st.config.max_redis_memory) {
        return Err(ApiError::new(
            ErrorCode::StorageFull,
            format!(
                "redis holds {} MiB with the results still to come, over this gateway's \
                 --max-redis-memory of {} MiB; results expire, and sooner once fetched",
                st.drain.projected_memory() >> 20,
                st.config.max_redis_memory >> 20
            ),
        )
        .retry_after(crate::backpressure::STORAGE_RETRY_AFTER));
    }
    let limit = st
        .drain
        .admit_limit(st.config.max_backlog, st.config.max_backlog_secs);
    let checks = SubmitChecks {
        pending_ttl: st.config.pending_ttl,
        // The replica check reads the record back on the primary.
        record_held: st.durable.mode == durability::Mode::Replica,
        max_backlog: limit,
        idempotency: idem_key
            .as_deref()
            .zip(fingerprint.as_deref())
            .map(|(k, fp)| (k, fp, st.config.idempotency_ttl)),
    };
    let submitted = st
        .producer
        .submit(&id, &job, &checks)
        .instrument(tracing::debug_span!("submit", %id))
        .await?;
    let format = Format::of_answer(&headers);
    match submitted {
        Submitted::Queued => {}
        // Our own submit, sent again after a dropped connection: it is queued.
        Submitted::Known { id: known, .. } if known == Some(id) => {}
        Submitted::Known {
            same_request: true,
            id: Some(known),
        } => {
            // The first request may have got 503 `not_durable`: confirm before answering.
            let stored = fingerprint.as_deref().map(|fp| format!("{fp} {known}"));
            let replayed = idem_key.as_deref().zip(stored.as_deref());
            confirm(&st, &known, replayed).await?;
            return replay(&st, &known, job, format).await;
        }
        Submitted::Known { .. } => {
            return Err(ApiError::new(
                ErrorCode::IdempotencyKeyReused,
                "this Idempotency-Key was used with a different request; use a new key per request",
            ))
        }
        Submitted::Full { backlog } => {
            metrics::counter!(pirq_shared::metrics::GATEWAY_QUERIES_THROTTLED).increment(1);
            let rate = st.drain.rate();
            let retry = st.drain.retry_after(backlog, limit);
            return Err(ApiError::new(
                ErrorCode::BacklogFull,
                format!(
                    "{backlog} jobs are waiting (limit now {limit}: --max-backlog {} jobs, \
                     --max-backlog-secs {} s of work); draining {rate:.1} jobs/s",
                    st.config.max_backlog, st.config.max_backlog_secs
                ),
            )
            .retry_after(retry));
        }
    }
    confirm(&st, &id, None).await?;
    st.drain
        .note_admitted(job.keys.len() as u64 * u64::from(db.page_size));
    tracing::debug!(%id, keys = job.keys.len(), "query accepted");
    metrics::counter!(pirq_shared::metrics::GATEWAY_QUERIES_ACCEPTED).increment(1);
    metrics::counter!(pirq_shared::metrics::GATEWAY_KEYS_ACCEPTED).increment(job.keys.len() as u64);
    if let Some(held) = inline {
        let idem = idem_key.as_deref();
        if let Some(answer) = answer_inline(&st, &id, idem, held, format).await {
            return Ok(answer);
        }
        // Not in time: the client polls from now on, and finds the query `queued` until its
        // record is final (`SET … NX`: never over a final record a worker wrote meanwhile).
        let queued = pirq_queue::record::queued(job.keys.len(), job.accepted_ms, idem);
        record_pending(&st, &id, &queued).await?;
    }
    Ok(accepted(
        &st,
        &id,
        format,
        &QueryResult::pending(id.as_str(), QueryStatus::Queued),
    ))
}

/// How long a held query whose answer did not come in time is retried to be recorded `queued`
/// before the request is answered 503 instead of 202.
const RECORD_PENDING_FOR: Duration = Duration::from_secs(5);

/// Records a held query `queued` (`SET … NX`) before the 202 that sends its client polling: a
/// held request has no record until its final one, and a poll that found none would be told
/// 404 for a query that is still running (the soak saw it when Redis restarted while the
/// gateway held the request and the worker's write waited for Redis). Retried with back-off
/// for [`RECORD_PENDING_FOR`]; if Redis stays away the client gets 503 and retries the request
/// (with its `Idempotency-Key` it is answered, not run again while known).
async fn record_pending(st: &AppState, id: &RequestId, queued: &[u8]) -> Result<(), ApiError> {
    let give_up = Instant::now() + RECORD_PENDING_FOR;
    let mut backoff =
        pirq_party::Backoff::new(Duration::from_millis(50), Duration::from_millis(500));
    loop {
        match st
            .producer
            .keep_pending(id, queued, st.config.pending_ttl)
            .await
        {
            Ok(()) => return Ok(()),
            Err(e) => {
                let pause = backoff.next_delay();
                if Instant::now() + pause >= give_up {
                    return Err(e.into());
                }
                tracing::debug!(error = %e, "recording a held query as queued failed; retrying");
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// `Prefer: wait=S` (RFC 7240 §4.3), capped at [`MAX_WAIT_SECS`]: the client would rather wait
/// for the answer than be told to come back. A preference the gateway cannot read is ignored,
/// as the RFC asks.
fn prefer_wait(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|pref| {
            let (name, value) = pref.split_once('=')?;
            if !name.trim().eq_ignore_ascii_case("wait") {
                return None;
            }
            let secs: f64 = value.trim().trim_matches('"').parse().ok()?;
            (secs.is_finite() && secs > 0.0)
                .then(|| Duration::from_secs_f64(secs.min(MAX_WAIT_SECS)))
        })
}

/// A request the gateway holds for its answer (`Prefer: wait`): how long, the waiter slot it
/// takes, and its subscription, made before the job was queued.
struct Held {
    wait: Duration,
    slot: Slot,
    sub: Subscription,
    worker_shortens_idempotency: bool,
}

/// Holds a just-queued query's answer until it is final or `wait` has passed: one round trip
/// for the whole query instead of a submit and then a wait (a second request, and the
/// `queued`/`running` events between). The answer comes in the completion event, without a
/// read. `None` (answer the 202: the query is queued either way, and the caller records it as
/// such) when the answer does not come in time or reading it failed.
async fn answer_inline(
    st: &AppState,
    id: &RequestId,
    idempotency_key: Option<&str>,
    held: Held,
    format: Format,
) -> Option<Response> {
    let Held {
        wait,
        slot,
        sub,
        worker_shortens_idempotency,
    } = held;
    let queued = QueryRecord {
        result: QueryResult::pending(id.as_str(), QueryStatus::Queued),
        scan_us: None,
        worker_us: None,
        idempotency_key: idempotency_key.map(str::to_owned),
    };
    // No read at first: a held query has no record until its answer.
    let q = wait_final_from(st, id, wait, sub, Some(queued), true)
        .await
        .ok()?;
    drop(slot);
    if !q.result.status.is_final() {
        return None;
    }
    // An unsharded worker shortened a done query's Idempotency-Key record with its answer.
    let shortened = worker_shortens_idempotency && q.result.status == QueryStatus::Done;
    fetched(st, id, &q, true, shortened);
    let mut resp = accepted(st, id, format, &q.result);
    let h = resp.headers_mut();
    h.insert("preference-applied", HeaderValue::from_static("wait"));
    if let Some(timing) = server_timing(&q) {
        h.insert("server-timing", timing);
    }
    Some(resp)
}

/// A 202 (pending) or 200 (final) answer for a query with its `Location`.
fn accepted(st: &AppState, id: &RequestId, format: Format, result: &QueryResult) -> Response {
    let final_ = result.status.is_final();
    let code = if final_ {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    let mut resp = format.respond(code, result);
    let h = resp.headers_mut();
    h.insert(
        header::LOCATION,
        HeaderValue::from_str(&format!("{}/queries/{id}", st.queries_base()))
            .expect("hex and a table name are a valid header"),
    );
    if !final_ {
        h.insert(
            header::RETRY_AFTER,
            HeaderValue::from(st.config.retry_after),
        );
    }
    resp
}

/// A known `Idempotency-Key` with the same request: the first request's id, as it stands now.
/// When that query has no record (its request was held and its answer handed over, or is still
/// on its way, or was lost with the gateway that held it), the job is queued again under the
/// same id, as a polled one: answering a PIR query twice costs a pass and tells the party
/// nothing new, and the retry gets its answer.
async fn replay(
    st: &AppState,
    id: &RequestId,
    job: Job,
    format: Format,
) -> Result<Response, ApiError> {
    metrics::counter!(pirq_shared::metrics::GATEWAY_IDEMPOTENT_REPLAYS).increment(1);
    if let Some(stored) = st.producer.load(id).await? {
        return Ok(accepted(st, id, format, &stored.result));
    }
    let job = Job {
        reply: Reply {
            held_until_ms: None,
            held_keep_ms: None,
            ..job.reply
        },
        ..job
    };
    let checks = SubmitChecks {
        pending_ttl: st.config.pending_ttl,
        record_held: true,
        max_backlog: 0,
        idempotency: None,
    };
    st.producer.submit(id, &job, &checks).await?;
    Ok(accepted(
        st,
        id,
        format,
        &QueryResult::pending(id.as_str(), QueryStatus::Queued),
    ))
}

/// `--durability fsync|replica`: waits until the queued job `id` is on disk, or on a replica;
/// `Err` (503 `not_durable`) when it is not in time. `replayed`: the `Idempotency-Key` and its
/// stored value when the submit was a replay ([`Producer::wait_replica`]).
///
/// [`Producer::wait_replica`]: pirq_queue::producer::Producer::wait_replica
async fn confirm(
    st: &AppState,
    id: &RequestId,
    replayed: Option<(&str, &str)>,
) -> Result<(), ApiError> {
    use pirq_queue::replication::ReplicaAck;
    match st.durable.mode {
        durability::Mode::WaitAof => {
            if !st.producer.wait_aof(st.config.fsync_timeout()).await? {
                return Err(not_durable(
                    st.durable.mode,
                    "WAITAOF: the job is not on disk yet",
                ));
            }
        }
        durability::Mode::Replica => {
            let timeout = st.config.replica_timeout();
            match st.producer.wait_replica(id, replayed, timeout).await? {
                ReplicaAck::Confirmed => {}
                ReplicaAck::Unconfirmed => {
                    return Err(not_durable(
                        st.durable.mode,
                        &format!("WAIT: no replica confirmed the job within {timeout:?}"),
                    ))
                }
                ReplicaAck::Missing => {
                    return Err(ApiError::new(
                        ErrorCode::NotDurable,
                        "--durability replica: the redis primary that took the query failed \
                         before a replica had it, and it will not be answered; submit it again \
                         (with the same Idempotency-Key, if any)",
                    )
                    .retry_after(1))
                }
            }
        }
        durability::Mode::Ack | durability::Mode::AppendfsyncAlways => {}
    }
    Ok(())
}

fn not_durable(mode: durability::Mode, why: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotDurable,
        format!(
            "--durability {}: {why}; the query may still be answered, retry with the same \
             Idempotency-Key",
            mode.flag()
        ),
    )
    .retry_after(1)
}

fn check_count(count: usize, max: usize) -> Result<(), ApiError> {
    if count == 0 {
        return Err(ApiError::new(
            ErrorCode::NoKeys,
            "a query needs at least one key",
        ));
    }
    if count > max {
        return Err(ApiError::new(
            ErrorCode::TooManyKeys,
            format!("{count} keys in one query, at most {max} are accepted"),
        ));
    }
    Ok(())
}

/// SPEC §1.3 parse of every key; the first bad one is named.
fn parse_keys(raw: &[Vec<u8>]) -> Result<Vec<DpfKey>, ApiError> {
    check::parse_keys(raw).map_err(rejected)
}

/// The keys' domain and the pinned epoch against the registered database.
fn check_against_db(
    keys: &[DpfKey],
    epoch: Option<u64>,
    db: &RegisteredDb,
) -> Result<(), ApiError> {
    check::check_domain(keys, db.domain_bits).map_err(rejected)?;
    if let Some(e) = epoch {
        check::check_epoch(e, db.window()).map_err(rejected)?;
    }
    Ok(())
}

/// A check's refusal as an answer (its code sets the status).
fn rejected(body: ErrorBody) -> ApiError {
    let code = ErrorCode::parse(&body.code).unwrap_or(ErrorCode::Internal);
    let mut e = ApiError::new(code, "");
    e.body = body;
    e
}

pub(crate) fn no_database() -> ApiError {
    ApiError::new(
        ErrorCode::NoDatabase,
        "no worker has registered a database for this party yet",
    )
    .retry_after(1)
}

/// The request id of the path: 400 `invalid_id` (without a Redis round trip, and without
/// echoing what was sent) unless it is a [`RequestId`] (32 lowercase hex digits); a path that is
/// not UTF-8 is refused the same way. Nothing else ever names a Redis key.
fn check_id(path: Result<Path<String>, PathRejection>) -> Result<RequestId, ApiError> {
    match path {
        Ok(Path(id)) => RequestId::parse(&id).map_err(|_| invalid_id()),
        Err(_) => Err(invalid_id()),
    }
}

fn invalid_id() -> ApiError {
    ApiError::new(
        ErrorCode::InvalidId,
        "a query id is 32 lowercase hex digits",
    )
}

/// `?wait=S`: seconds to long-poll, a non-negative number, capped at [`MAX_WAIT_SECS`].
fn parse_wait(query: Option<&str>) -> Result<Duration, ApiError> {
    let mut wait = Duration::ZERO;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if name != "wait" {
            continue;
        }
        let secs: f64 = value
            .parse()
            .ok()
            .filter(|s: &f64| s.is_finite() && *s >= 0.0)
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::InvalidParameter,
                    format!("wait={value:?} is not a number of seconds"),
                )
            })?;
        wait = Duration::from_secs_f64(secs.min(MAX_WAIT_SECS));
    }
    Ok(wait)
}

/// `GET /v1/queries/{id}`: 200 when done or failed, 202 while pending; `?wait=S` long-polls.
pub async fn status(
    State(st): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = check_id(path)?;
    let wait = parse_wait(query.as_deref())?;
    let stored = if wait.is_zero() {
        let record = st
            .producer
            .load(&id)
            .await?
            .ok_or_else(|| ApiError::not_found(id.as_str()))?;
        Arc::new(record)
    } else {
        let _waiter = st.waiters.enter()?;
        wait_final(&st, &id, wait).await?
    };
    let final_ = stored.result.status.is_final();
    if final_ {
        fetched(&st, &id, &stored, false, false);
    }
    let code = if final_ {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    let mut resp = Format::of_answer(&headers).respond(code, &stored.result);
    if !final_ {
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(st.config.retry_after),
        );
    }
    if let Some(timing) = server_timing(&stored) {
        resp.headers_mut().insert("server-timing", timing);
    }
    Ok(resp)
}

/// A client has been handed the final result `record` of `id`: its bytes count towards the
/// party's read rate, and it and its idempotency record are kept only as long as
/// [`crate::retention`] says from now on (in the background: the answer does not wait for it; a
/// failure only means they live their full TTLs). A held query's record (`held`) was written
/// short-lived by its worker: only its idempotency record, if any, is shortened, unless the
/// worker did that too (`idempotency_shortened`).
fn fetched(
    st: &AppState,
    id: &RequestId,
    record: &QueryRecord,
    held: bool,
    idempotency_shortened: bool,
) {
    st.retention.handed_over(page_bytes(record));
    let idem = record.idempotency_key.clone();
    if held && (idem.is_none() || idempotency_shortened) {
        return;
    }
    let producer = st.producer.clone();
    let id = *id;
    let ttl = st.retention.ttl();
    tokio::spawn(async move {
        if let Err(e) = producer.release(&id, !held, idem.as_deref(), ttl).await {
            tracing::debug!(error = %e, "shortening a fetched result's lifetime failed");
        }
    });
}

/// The bytes of a record's pages.
fn page_bytes(record: &QueryRecord) -> u64 {
    record.result.pages.iter().map(|p| p.len() as u64).sum()
}

/// `Server-Timing` with the worker's scan and total times, for latency accounting.
fn server_timing(q: &QueryRecord) -> Option<HeaderValue> {
    let scan = q.scan_us?;
    let worker = q.worker_us.unwrap_or(scan);
    HeaderValue::from_str(&format!(
        "scan;dur={:.3}, worker;dur={:.3}",
        scan as f64 / 1e3,
        worker as f64 / 1e3
    ))
    .ok()
}

/// Reads the query until it is final or `wait` has passed: its record as the wait left it
/// (shared with the event that brought it, when one did).
async fn wait_final(
    st: &AppState,
    id: &RequestId,
    wait: Duration,
) -> Result<Arc<QueryRecord>, ApiError> {
    // Subscribe before the first read: a change between the read and the wait still wakes us.
    let sub = st.events.subscribe(id);
    wait_final_from(st, id, wait, sub, None, false).await
}

/// [`wait_final`] with a subscription made earlier and, when known, the record as it stood
/// when `sub` was made (else it is read first). A final record comes in the event that
/// announced it, without a read. `held`: the query's request is held by this gateway, so it has
/// no record until its final one (a read that finds none finds it pending, not unknown).
async fn wait_final_from(
    st: &AppState,
    id: &RequestId,
    wait: Duration,
    mut sub: Subscription,
    known: Option<QueryRecord>,
    held: bool,
) -> Result<Arc<QueryRecord>, ApiError> {
    let deadline = Instant::now() + wait;
    let mut shutdown = st.shutdown.clone();
    let mut q = match known {
        Some(q) => Arc::new(q),
        None => Arc::new(
            st.producer
                .load(id)
                .await?
                .ok_or_else(|| ApiError::not_found(id.as_str()))?,
        ),
    };
    loop {
        let now = Instant::now();
        // Shutting down: answer with what is known now, the client asks again elsewhere.
        if q.result.status.is_final() || now >= deadline || *shutdown.borrow() {
            return Ok(q);
        }
        let wake = tokio::select! {
            r = tokio::time::timeout((deadline - now).min(RECHECK), sub.changed()) => r.unwrap_or(Wake::Read),
            _ = shutdown.wait_for(|s| *s) => Wake::Read,
        };
        match wake {
            Wake::Progress(status) => Arc::make_mut(&mut q).result.status = status,
            Wake::Final(record) => q = record,
            Wake::Read => match st.producer.load(id).await? {
                Some(record) => q = Arc::new(record),
                None if held => {}
                None => return Err(ApiError::not_found(id.as_str())),
            },
        }
    }
}

/// `GET /v1/queries/{id}/events`: `status` events while pending, then one `result` event.
pub async fn events(
    State(st): State<AppState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let id = check_id(path)?;
    // Held by the task that feeds the stream, so released when the stream ends.
    let waiter = st.waiters.enter()?;
    let sub = st.events.subscribe(&id);
    let first = st
        .producer
        .load(&id)
        .await?
        .ok_or_else(|| ApiError::not_found(id.as_str()))?;
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        follow(st, id, sub, first, tx).await;
        drop(waiter);
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|ev| (Ok(ev), rx))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// Feeds one SSE stream until the query is final, the record vanishes, or the client leaves.
async fn follow(
    st: AppState,
    id: RequestId,
    mut sub: Subscription,
    mut current: QueryRecord,
    tx: mpsc::Sender<Event>,
) {
    let mut last_sent = None;
    let mut shutdown = st.shutdown.clone();
    loop {
        let result = &current.result;
        if result.status.is_final() {
            if tx
                .send(json_event("result", result.to_json()))
                .await
                .is_ok()
            {
                fetched(&st, &id, &current, false, false);
            }
            return;
        }
        if last_sent != Some(result.status) {
            if tx
                .send(json_event("status", result.to_json()))
                .await
                .is_err()
            {
                return;
            }
            last_sent = Some(result.status);
        }
        let wake = tokio::select! {
            _ = tx.closed() => return,
            r = tokio::time::timeout(RECHECK, sub.changed()) => r.unwrap_or(Wake::Read),
            // Shutting down: end the stream (after the status above); the client reconnects
            // or polls another gateway.
            _ = shutdown.wait_for(|s| *s) => return,
        };
        match wake {
            Wake::Progress(status) => {
                current.result.status = status;
                continue;
            }
            Wake::Final(record) => {
                current = (*record).clone();
                continue;
            }
            Wake::Read => {}
        }
        current = match st.producer.load(&id).await {
            Ok(Some(q)) => q,
            Ok(None) => {
                let _ = tx
                    .send(error_event(ErrorBody::new(
                        ErrorCode::NotFound,
                        "the query expired",
                    )))
                    .await;
                return;
            }
            Err(e) => {
                let _ = tx
                    .send(error_event(ErrorBody::new(e.code(), e.public_message())))
                    .await;
                return;
            }
        };
    }
}

fn json_event(name: &str, json: Vec<u8>) -> Event {
    Event::default()
        .event(name)
        .data(String::from_utf8(json).expect("serde_json writes UTF-8"))
}

fn error_event(error: ErrorBody) -> Event {
    json_event(
        "error",
        serde_json::to_vec(&ErrorEnvelope { error }).expect("serializes"),
    )
}
