//! `GET /v1/info`: the database this party serves, as its workers registered it.

use axum::extract::State;
use axum::Json;
use pirq_shared::wire::Info;

use crate::error::ApiError;
use crate::state::AppState;

pub async fn info(State(st): State<AppState>) -> Result<Json<Info>, ApiError> {
    // Read fresh rather than through the cache: clients compare parties' epochs with this.
    let db = st
        .producer
        .database()
        .await?
        .ok_or_else(ApiError::no_database)?;
    let workers = st.producer.live_workers().await?;
    let kv = st.producer.kv_layout().await?;
    let records = st.producer.worker_records().await?;
    let shards = if db.shards > 1 {
        crate::shards::view(&db, &records)
    } else {
        Vec::new()
    };
    // Every worker of a database serves the same file's signing block (it is part of the
    // database's identity): the first live worker's record says it.
    let signing = records.iter().find_map(|record| record.signing.clone());
    Ok(Json(Info {
        num_pages: db.num_pages,
        page_size: db.page_size,
        domain_bits: db.domain_bits,
        epoch: db.window(),
        max_keys_per_query: st.config.max_keys_per_query,
        workers: workers.live,
        kv,
        signing,
        shards,
        digest: st.producer.digest_at(db.epoch).await?,
        party: Some(st.producer.party_id().await?),
    }))
}
