//! `GET /v1/tables` and the routes of one table, `/v1/tables/{name}/…` and
//! `/v1/admin/tables/{name}/epochs` (issue 38): each is the route without a table name, run
//! with the table's state ([`AppState::for_table`]); `default` is the table those routes mean.

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pirq_shared::layout::DEFAULT_TABLE;
use pirq_shared::wire::{Info, TableSummary, Tables};

use crate::error::ApiError;
use crate::state::AppState;

/// `GET /v1/tables`: every table the party serves, `default` first (when a worker registered
/// it), then the named ones by name; a table listed by `{P}:tables` whose registration is gone
/// is left out.
pub async fn list(State(st): State<AppState>) -> Result<Json<Tables>, ApiError> {
    let mut names = vec![DEFAULT_TABLE.to_string()];
    names.extend(st.producer.table_names().await?);
    let mut tables = Vec::new();
    for name in names {
        let table = match st.for_table(&name).await {
            Ok(table) => table,
            Err(_) => continue,
        };
        let Some(db) = table.producer.database().await? else {
            continue;
        };
        let kind = if table.producer.kv_layout().await?.is_some() {
            "kv"
        } else {
            "pages"
        };
        let signing = table
            .producer
            .worker_records()
            .await?
            .into_iter()
            .find_map(|record| record.signing);
        tables.push(TableSummary {
            name,
            kind: kind.to_string(),
            num_pages: db.num_pages,
            page_size: db.page_size,
            epoch: db.window(),
            digest: table.producer.digest_at(db.epoch).await?,
            signing,
            workers: table.producer.live_workers().await?.live,
        });
    }
    Ok(Json(Tables { tables }))
}

/// The table name of the path (a path that does not decode names no table).
fn table_name(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    path.map(|Path(name)| name)
        .map_err(|_| crate::tables::unknown_table("(undecodable)"))
}

/// The table name and the request id of the path.
fn table_and_id(
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<(String, String), ApiError> {
    path.map(|Path(pair)| pair)
        .map_err(|_| crate::tables::unknown_table("(undecodable)"))
}

/// `GET /v1/tables/{name}/info`.
pub async fn info(
    State(st): State<AppState>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<Info>, ApiError> {
    super::info::info(State(st.for_table(&table_name(name)?).await?)).await
}

/// `GET /v1/tables/{name}/manifests`.
pub async fn manifests(
    State(st): State<AppState>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    super::manifests::manifests(State(st.for_table(&table_name(name)?).await?)).await
}

/// `POST /v1/tables/{name}/queries`.
pub async fn submit(
    State(st): State<AppState>,
    name: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    super::queries::submit(
        State(st.for_table(&table_name(name)?).await?),
        headers,
        body,
    )
    .await
}

/// `GET /v1/tables/{name}/queries/{id}`.
pub async fn status(
    State(st): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    query: RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (name, id) = table_and_id(path)?;
    let st = st.for_table(&name).await?;
    super::queries::status(State(st), Ok::<_, PathRejection>(Path(id)), query, headers).await
}

/// `GET /v1/tables/{name}/queries/{id}/events`.
pub async fn events(
    State(st): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (name, id) = table_and_id(path)?;
    let st = st.for_table(&name).await?;
    let stream = super::queries::events(State(st), Ok::<_, PathRejection>(Path(id))).await?;
    Ok(stream.into_response())
}

/// `POST /v1/admin/tables/{name}/epochs`.
pub async fn push_epoch(
    State(st): State<AppState>,
    name: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<super::admin::Pushed>), ApiError> {
    // The admin token before anything else, as on `/v1/admin/epochs`: a wrong token learns
    // nothing, not even whether the table exists.
    super::admin::authorize(st.config.admin_token.as_deref(), &headers)?;
    super::admin::push_epoch(
        State(st.for_table(&table_name(name)?).await?),
        headers,
        body,
    )
    .await
}
