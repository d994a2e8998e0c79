//! `GET /healthz` (the process answers), `GET /readyz` (it can serve queries), `GET /metrics`.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use pirq_shared::error::ErrorCode;
use serde_json::json;

use pirq_queue::RegisteredDb;
use pirq_shared::layout::DEFAULT_TABLE;

use crate::error::ApiError;
use crate::state::AppState;

pub async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// Ready when Redis answers, the party serves a table (a worker registered it), and every table
/// it serves is ready: its live workers serve one shard layout and a live worker answers its
/// newest epoch (a query accepted now would otherwise wait for one; for a sharded table, every
/// shard needs one); and the pub/sub listener is subscribed. The tables are the table `default`
/// when a worker registered it and every named one in `{P}:tables` whose registration is there
/// (issue 38): a party of named tables only is ready without `default`, and a table whose
/// workers are gone makes the party not ready, naming it.
pub async fn readyz(State(st): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    st.producer.ping().await?;
    let mut served = 0;
    let mut names = vec![DEFAULT_TABLE.to_string()];
    names.extend(st.producer.table_names().await?);
    for name in names {
        let table = st.for_table(&name).await?;
        let Some(db) = table.producer.database().await? else {
            continue;
        };
        served += 1;
        table_ready(&table, &db)
            .await
            .map_err(|e| named(e, &name))?;
    }
    if served == 0 {
        return Err(ApiError::no_database());
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

/// One table's readiness: one shard layout among its live workers, and a live worker (every
/// shard's, for a sharded table) at its newest epoch.
async fn table_ready(table: &AppState, db: &RegisteredDb) -> Result<(), ApiError> {
    let records = table.producer.worker_records().await?;
    if let Some(why) = crate::shards::layout_conflict(&records) {
        return Err(ApiError::new(ErrorCode::ShardUnavailable, why).retry_after(1));
    }
    if db.shards > 1 {
        let shards = crate::shards::view(db, &records);
        if let Some(why) = crate::shards::not_ready(db, &shards) {
            return Err(ApiError::new(ErrorCode::ShardUnavailable, why).retry_after(1));
        }
        return Ok(());
    }
    let workers = table.producer.live_workers().await?;
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
    Ok(())
}

/// The error of a table that is not ready, naming the table when the party has several (the
/// table `default` of a party of one table keeps the message it always had).
fn named(mut e: ApiError, table: &str) -> ApiError {
    if table != DEFAULT_TABLE {
        e.body.message = format!("table {table}: {}", e.body.message);
    }
    e
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
