//! `GET /v1/queries/{id}`: the query's record, 200 when final and 202 while pending; `?wait=S`
//! long-polls until it is final.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use pirq_shared::error::ErrorCode;

use super::{
    check_id, fetched, server_timing, wait_final_from, Format, MAX_WAIT_SECS, SERVER_TIMING,
};
use crate::error::ApiError;
use crate::state::AppState;
use pirq_queue::{QueryRecord, RequestId};

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
        resp.headers_mut().insert(SERVER_TIMING, timing);
    }
    Ok(resp)
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
