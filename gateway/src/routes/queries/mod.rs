//! The query routes, one module a job: [`submit`](mod@submit) (`POST /v1/queries`),
//! [`status`](mod@status) (`GET /v1/queries/{id}`, with `?wait=S`) and [`events`](mod@events)
//! (`GET /v1/queries/{id}/events`).
//! What they share lives here: the path's request id, the 202/200 answer with its `Location`, a
//! final result handed over, `Server-Timing`, and the wait for a final record.

mod events;
mod status;
mod submit;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::rejection::PathRejection;
use axum::extract::Path;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use pirq_shared::wire::QueryResult;

use super::Format;
use crate::error::ApiError;
use crate::events::{Subscription, Wake};
use crate::state::AppState;
use pirq_queue::{QueryRecord, RequestId};

pub use events::events;
pub use status::status;
pub use submit::submit;

/// Longest `?wait=`, in seconds.
pub const MAX_WAIT_SECS: f64 = 30.0;

/// Header names as constants: a `&str` name is parsed and checked again on every use.
const PREFER: HeaderName = HeaderName::from_static("prefer");
const PREFERENCE_APPLIED: HeaderName = HeaderName::from_static("preference-applied");
const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");

/// A waiter reads the status again at least this often, even without a notification.
const RECHECK: Duration = Duration::from_secs(2);

/// The request id of the path: 400 `invalid_id` (without a Redis round trip, and without
/// echoing what was sent) unless it is a [`RequestId`] (32 lowercase hex digits); a path that is
/// not UTF-8 is refused the same way. Nothing else ever names a Redis key.
fn check_id(path: Result<Path<String>, PathRejection>) -> Result<RequestId, ApiError> {
    match path {
        Ok(Path(id)) => RequestId::parse(&id).map_err(|_| ApiError::invalid_id()),
        Err(_) => Err(ApiError::invalid_id()),
    }
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
        HeaderValue::try_from(st.query_location(id.as_str()))
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

/// `Server-Timing` with the worker's scan and total times, for latency accounting, in
/// milliseconds with three decimals (`scan;dur=12.345`). Written from the whole microseconds as
/// integers: the digits `{:.3}` gives of `µs / 1e3`, without float formatting (~1,700
/// instructions a query, docs/bench/host-path.md).
fn server_timing(q: &QueryRecord) -> Option<HeaderValue> {
    use std::fmt::Write;
    let scan = q.scan_us?;
    let worker = q.worker_us.unwrap_or(scan);
    let mut text = String::with_capacity(64);
    write!(
        text,
        "scan;dur={}.{:03}, worker;dur={}.{:03}",
        scan / 1000,
        scan % 1000,
        worker / 1000,
        worker % 1000
    )
    .expect("writing into a String cannot fail");
    HeaderValue::try_from(text).ok()
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
            Wake::Read => {
                // A held query's net may be in its Idempotency-Key record instead of its own.
                let read = if held {
                    let key = q.idempotency_key.as_deref();
                    st.producer.load_held(id, key).await?
                } else {
                    st.producer.load(id).await?
                };
                match read {
                    Some(record) => q = Arc::new(record),
                    None if held => {}
                    None => return Err(ApiError::not_found(id.as_str())),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pirq_shared::wire::QueryStatus;

    fn timed(scan: u64, worker: Option<u64>) -> QueryRecord {
        QueryRecord {
            result: QueryResult::pending("ab".repeat(16), QueryStatus::Done),
            scan_us: Some(scan),
            worker_us: worker,
            idempotency_key: None,
        }
    }

    #[test]
    fn server_timing_has_the_digits_of_the_milliseconds_formatted_as_floats() {
        let samples = (0..3000).chain([
            9_999,
            10_000,
            22_240,
            123_456_789,
            4_000_000_001,
            u64::from(u32::MAX),
        ]);
        for scan in samples {
            let worker = scan * 3 + 7;
            let as_floats = format!(
                "scan;dur={:.3}, worker;dur={:.3}",
                scan as f64 / 1e3,
                worker as f64 / 1e3
            );
            let header = server_timing(&timed(scan, Some(worker))).unwrap();
            assert_eq!(header.to_str().unwrap(), as_floats);
        }
        // No worker time: the scan's stands for it; no scan time: no header.
        let header = server_timing(&timed(1_234, None)).unwrap();
        assert_eq!(header.to_str().unwrap(), "scan;dur=1.234, worker;dur=1.234");
        let mut untimed = timed(1, None);
        untimed.scan_us = None;
        assert!(server_timing(&untimed).is_none());
    }
}
