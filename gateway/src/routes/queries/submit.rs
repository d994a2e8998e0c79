//! `POST /v1/queries`: read and check the request, pass admission ([`crate::admission`]),
//! queue it, and answer 202 with its id, or the answer itself when the client prefers to wait
//! (`Prefer: wait`) and it comes in time; a known `Idempotency-Key` is answered as its first
//! request was.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use pirq_shared::check;
use pirq_shared::dpf::DpfKey;
use pirq_shared::error::ErrorCode;
use pirq_shared::wire::{Job, QueryRequest, QueryResult, QueryStatus, Reply};
use tracing::Instrument;

use super::{
    accepted, fetched, server_timing, wait_final_from, Format, MAX_WAIT_SECS, PREFER,
    PREFERENCE_APPLIED, SERVER_TIMING,
};
use crate::error::ApiError;
use crate::events::Subscription;
use crate::state::AppState;
use crate::waiters::Slot;
use crate::{admission, durability, idempotency};
use pirq_queue::producer::{SubmitChecks, Submitted};
use pirq_queue::{QueryRecord, RegisteredDb, RequestId};

/// `POST /v1/queries`: validate, pass admission, queue, answer 202 with the request id (or,
/// held, the answer).
pub async fn submit(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    // The headers are checked, but a refusal waits until the body (within its limits) is read:
    // see `crate::body` on why answering before it can lose the answer.
    let head = idempotency::key(&headers).and_then(|k| Ok((k, Format::of_request(&headers)?)));
    let body = crate::body::read(&headers, body, st.config.query_body()).await?;
    let (idem_key, format) = head?;
    let request = match format {
        Format::Json => QueryRequest::from_json(&body)?,
        Format::Bincode => QueryRequest::from_bincode(&body)?,
    };
    admission::key_count(request.keys.len(), st.config.max_keys_per_query as usize)?;
    let keys = parse_keys(&request.keys)?;
    let db = st.db.get().await?.ok_or_else(ApiError::no_database)?;
    check_against_db(&keys, request.epoch, &db)?;

    let fingerprint = idem_key
        .as_ref()
        .map(|_| idempotency::fingerprint(&request));
    // In the partition the request is to live in (the key's, with an Idempotency-Key).
    let id = st.producer.mint_id(idem_key.as_deref());
    admission::durable_now(&st, &id)?;
    let inline = hold(&st, &headers, &id, &db);
    let net = net_in_idempotency(&st, inline.as_ref(), fingerprint.as_deref());
    let job = job_of(&st, request, inline.as_ref(), idem_key.clone(), net);
    admission::memory(&st)?;
    let limit = admission::backlog_limit(&st);
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
            net,
        } => {
            // The first request may have got 503 `not_durable`: confirm before answering.
            let stored = fingerprint.as_deref().map(|fp| format!("{fp} {known}"));
            let replayed = idem_key.as_deref().zip(stored.as_deref());
            confirm(&st, &known, replayed).await?;
            return replay(&st, &known, net.as_deref(), job, format).await;
        }
        Submitted::Known { .. } => {
            return Err(ApiError::new(
                ErrorCode::IdempotencyKeyReused,
                "this Idempotency-Key was used with a different request; use a new key per request",
            ))
        }
        Submitted::Full { backlog } => return Err(admission::backlog_full(&st, backlog, limit)),
    }
    confirm(&st, &id, None).await?;
    admitted(&st, &id, &job, db.page_size);
    if let Some(held) = inline {
        let idem = idem_key.as_deref();
        if let Some(answer) = answer_inline(&st, &id, idem, held, format).await {
            return Ok(answer);
        }
        // Not in time: the client polls from now on, and finds the query `queued` until its
        // record is final (`SET … NX`: never over a final record a worker wrote meanwhile).
        // Marked when the worker was asked for the answer's net in the key's record: it may
        // still write it there (it cannot know the wait ended early), and reads follow it.
        let queued = match (idem, net) {
            (Some(key), Some(_)) => {
                pirq_queue::record::queued_after_hold(job.keys.len(), job.accepted_ms, key)
            }
            _ => pirq_queue::record::queued(job.keys.len(), job.accepted_ms, idem),
        };
        record_pending(&st, &id, &queued).await?;
    }
    Ok(accepted(
        &st,
        &id,
        format,
        &QueryResult::pending(id.as_str(), QueryStatus::Queued),
    ))
}

/// A client that prefers to wait for the answer, while a waiter slot is free: its request is
/// held, the job says until when, and no `queued` record is written (the answer comes in the
/// completion event). Subscribed before the job is on the stream, so its answer cannot be
/// announced unheard. `None`: the client polls.
fn hold(st: &AppState, headers: &HeaderMap, id: &RequestId, db: &RegisteredDb) -> Option<Held> {
    let wait = prefer_wait(headers)?;
    let slot = st.waiters.enter().ok()?;
    Some(Held {
        wait,
        slot,
        // Its answer is the final record or, past the wait, `queued`: progress is not for it.
        sub: st.events.subscribe_final(id),
        // An unsharded worker shortens the Idempotency-Key record of a held query with its
        // answer (`Reply::held_keep_ms`); a sharded party's combine script does not.
        worker_shortens_idempotency: db.shards <= 1,
    })
}

/// The fingerprint to give a held request's job so that its worker keeps the answer's net in
/// the Idempotency-Key record instead of a record of its own
/// ([`Reply::idempotency_fingerprint`]), where that is safe: the key's record must outlast the
/// wait by more than the net's keep time (so the worker's write can only find this query's
/// claim, never a later request's after it expired), and no `queued` record may have been
/// written (`--durability replica` writes one, which only the query's own record replaces).
fn net_in_idempotency<'a>(
    st: &AppState,
    held: Option<&Held>,
    fingerprint: Option<&'a str>,
) -> Option<&'a str> {
    let held = held?;
    let outlasts = Duration::from_secs(st.config.idempotency_ttl)
        > held.wait + pirq_queue::consumer::HELD_KEEP + pirq_queue::consumer::HELD_SLACK;
    let no_queued_record = st.durable.mode != durability::Mode::Replica;
    fingerprint.filter(|_| held.worker_shortens_idempotency && outlasts && no_queued_record)
}

/// The job queued for `request`, accepted now; `held`: where its answer goes when its client
/// waits for it; `net_fingerprint`: see [`net_in_idempotency`].
fn job_of(
    st: &AppState,
    request: QueryRequest,
    held: Option<&Held>,
    idempotency_key: Option<String>,
    net_fingerprint: Option<&str>,
) -> Job {
    let accepted_ms = pirq_shared::clock::unix_ms();
    Job {
        keys: request.keys,
        epoch: request.epoch,
        accepted_ms,
        reply: Reply {
            held_until_ms: held.map(|held| accepted_ms + held.wait.as_millis() as u64),
            // Its record is a net for a missed event: kept within the read-result budget.
            held_keep_ms: held.map(|_| st.retention.ttl().as_millis() as u64),
            idempotency_key,
            idempotency_fingerprint: net_fingerprint.map(str::to_owned),
        },
    }
}

/// A query accepted: counted, and its answer's bytes noted for the memory projection.
fn admitted(st: &AppState, id: &RequestId, job: &Job, page_size: u32) {
    st.drain
        .note_admitted(job.keys.len() as u64 * u64::from(page_size));
    tracing::debug!(%id, keys = job.keys.len(), "query accepted");
    st.accepted.count(job.keys.len() as u64);
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
        .get_all(PREFER)
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
    h.insert(PREFERENCE_APPLIED, HeaderValue::from_static("wait"));
    if let Some(timing) = server_timing(&q) {
        h.insert(SERVER_TIMING, timing);
    }
    Some(resp)
}

/// A known `Idempotency-Key` with the same request: the first request's id, as it stands now
/// (`net`: its answer, when the key's record holds a held query's net). When that query has no
/// record (its request was held and its answer handed over, or is still on its way, or was
/// lost with the gateway that held it), the job is queued again under the same id, as a polled
/// one: answering a PIR query twice costs a pass and tells the party nothing new, and the retry
/// gets its answer.
async fn replay(
    st: &AppState,
    id: &RequestId,
    net: Option<&[u8]>,
    job: Job,
    format: Format,
) -> Result<Response, ApiError> {
    metrics::counter!(pirq_shared::metrics::GATEWAY_IDEMPOTENT_REPLAYS).increment(1);
    if let Some(net) = net {
        let stored = QueryRecord::decode(id, net)?;
        return Ok(accepted(st, id, format, &stored.result));
    }
    if let Some(stored) = st.producer.load(id).await? {
        return Ok(accepted(st, id, format, &stored.result));
    }
    let job = Job {
        reply: Reply {
            held_until_ms: None,
            held_keep_ms: None,
            idempotency_fingerprint: None,
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
                return Err(ApiError::not_durable(
                    st.durable.mode.flag(),
                    "WAITAOF: the job is not on disk yet",
                ));
            }
        }
        durability::Mode::Replica => {
            let timeout = st.config.replica_timeout();
            match st.producer.wait_replica(id, replayed, timeout).await? {
                ReplicaAck::Confirmed => {}
                ReplicaAck::Unconfirmed => {
                    return Err(ApiError::not_durable(
                        st.durable.mode.flag(),
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

/// SPEC §1.3 parse of every key; the first bad one is named.
fn parse_keys(raw: &[Vec<u8>]) -> Result<Vec<DpfKey>, ApiError> {
    check::parse_keys(raw).map_err(ApiError::from)
}

/// The keys' domain and the pinned epoch against the registered database.
fn check_against_db(
    keys: &[DpfKey],
    epoch: Option<u64>,
    db: &RegisteredDb,
) -> Result<(), ApiError> {
    check::check_domain(keys, db.domain_bits)?;
    if let Some(e) = epoch {
        check::check_epoch(e, db.window())?;
    }
    Ok(())
}
