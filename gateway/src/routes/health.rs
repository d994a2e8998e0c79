//! `GET /healthz` (the process answers), `GET /readyz` (it can serve queries), `GET /metrics`.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use pirq_shared::error::ErrorCode;
use serde_json::json;

use crate::error::ApiError;
use crate::state::AppState;

pub async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// Ready when Redis answers, a database is registered, the live workers serve one shard layout,
/// a live worker answers its newest epoch (a query accepted now would otherwise wait for one;
/// for a sharded party, every shard needs one) and the pub/sub listener is subscribed.
pub async fn readyz(State(st): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    st.store.ping().await?;
    let db = st
        .store
        .database()
        .await?
        .ok_or_else(super::queries_no_database)?;
    let records = st.store.worker_records().await?;
    if let Some(why) = crate::shards::layout_conflict(&records) {
        return Err(ApiError::new(ErrorCode::ShardUnavailable, why).retry_after(1));
    }
    if db.shards > 1 {
        let shards = crate::shards::view(&db, &records);
        if let Some(why) = crate::shards::not_ready(&db, &shards) {
            return Err(ApiError::new(ErrorCode::ShardUnavailable, why).retry_after(1));
        }
    } else {
        let workers = st.store.live_workers().await?;
        if workers.newest.is_none_or(|n| n < db.epoch) {
            let message = match workers.newest {
                None => "no live worker: queries would wait until one starts".to_string(),
                Some(n) => format!(
                    "no live worker answers the newest epoch {} yet ({} live, newest {n})",
                    db.epoch, workers.live
                ),
            };
            return Err(ApiError::new(ErrorCode::NoWorkers, message).retry_after(1));
        }
    }
    if !st.events.is_connected() {
        return Err(ApiError::new(
            ErrorCode::RedisUnavailable,
            "pub/sub connection is not up yet",
        )
        .retry_after(1));
    }
    Ok(Json(json!({"status": "ready"})))
}

pub async fn metrics(State(st): State<AppState>) -> impl IntoResponse {
    let text = match &st.metrics {
        Some(handle) => {
            handle.run_upkeep();
            handle.render()
        }
        None => String::new(),
    };
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}
