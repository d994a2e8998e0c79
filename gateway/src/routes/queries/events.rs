//! `GET /v1/queries/{id}/events`: Server-Sent Events, a `status` event at each change while the
//! query is pending, then one `result` event (or an `error` event when the record vanished or
//! Redis failed).

use std::convert::Infallible;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use pirq_shared::error::ErrorCode;
use pirq_shared::wire::{ErrorBody, ErrorEnvelope};
use tokio::sync::mpsc;

use super::{check_id, fetched, RECHECK};
use crate::error::ApiError;
use crate::events::{Subscription, Wake};
use crate::state::AppState;
use pirq_queue::{QueryRecord, RequestId};

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
