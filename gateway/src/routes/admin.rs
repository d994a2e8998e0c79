//! `POST /v1/admin/epochs`: append the next epoch's page replacements to the updates stream.
//!
//! The body is a whole [`EpochUpdate`] (JSON with base64 pages, or bincode), limited by
//! `--max-update-bytes` rather than the query body limit. After checking the bearer token and
//! the pages against the registered database, one Lua script (`queue/lua/append_epoch.lua`)
//! checks that the epoch is the newest + 1, appends the update as a single stream entry with id
//! `<epoch>-0`, and raises the registered newest epoch: all pages of an epoch or none, and no two
//! gateways can append the same epoch.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::Json;
use pirq_queue::producer::Appended;
use pirq_shared::error::ErrorCode;
use pirq_shared::update::EpochUpdate;
use serde::Serialize;

use super::Format;
use crate::error::ApiError;
use crate::state::AppState;

/// Answer of a successful push.
#[derive(Serialize)]
pub struct Pushed {
    pub epoch: u64,
    pub pages: usize,
}

pub async fn push_epoch(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<Pushed>), ApiError> {
    // The token before a byte of the body: a wrong token costs the gateway nothing.
    authorize(state.config.admin_token.as_deref(), &headers)?;
    // A bad Content-Type is refused once the body is read (`crate::body` says why).
    let format = Format::of_request(&headers);
    let body = crate::body::read(&headers, body, state.config.update_body()).await?;
    let format = format?;
    let update = match format {
        Format::Json => EpochUpdate::from_json(&body),
        Format::Bincode => EpochUpdate::from_bincode(&body),
    }
    .map_err(|e| ApiError::new(ErrorCode::InvalidUpdate, e.to_string()))?;
    // Redis trouble is a 503 with `Retry-After`, as on every route.
    let db = state
        .producer
        .database()
        .await?
        .ok_or_else(ApiError::no_database)?;
    update
        .validate(db.num_pages, db.page_size as usize)
        .map_err(|e| ApiError::new(ErrorCode::InvalidUpdate, e.to_string()))?;
    // The workers' records carry the served file's signing block (as /v1/info says it).
    let signing = state
        .producer
        .worker_records()
        .await?
        .into_iter()
        .find_map(|record| record.signing);
    if let Some(signing) = signing {
        check_signed(&signing, &update)?;
    }

    let appended = state.producer.append_epoch(&update).await?;
    if let Appended::NotNext { newest } = appended {
        return Err(ApiError::new(
            ErrorCode::EpochNotNext,
            format!(
                "epoch {} is not the next epoch: the newest is {newest}",
                update.epoch
            ),
        ));
    }
    state.db.invalidate();
    tracing::info!(
        epoch = update.epoch,
        pages = update.pages.len(),
        "epoch update appended"
    );
    Ok((
        StatusCode::OK,
        Json(Pushed {
            epoch: update.epoch,
            pages: update.pages.len(),
        }),
    ))
}

/// A signed database takes only updates its publisher signed: every page must carry the
/// signature of the database's block as changed at the update's epoch (what `pirq db apply`
/// checks too). Anything else would be served as pages every verifying client refuses.
fn check_signed(
    signing: &pirq_shared::signing::SigningInfo,
    update: &EpochUpdate,
) -> Result<(), ApiError> {
    let refuse = |why: String| {
        ApiError::new(
            ErrorCode::UnsignedUpdate,
            format!(
                "the database is signed (publisher key {}); {why}: make the update with \
                 --sign-key and the database's publisher secret key",
                signing.publisher_key
            ),
        )
    };
    let block = signing
        .block()
        .map_err(|e| refuse(format!("its signing block cannot check updates: {e}")))?;
    for w in &update.pages {
        match block.verify_page(w.index, &w.page) {
            Ok(changed) if changed == update.epoch => {}
            Ok(changed) => {
                return Err(refuse(format!(
                    "page {} of the update for epoch {} is signed as changed at epoch {changed}",
                    w.index, update.epoch
                )))
            }
            Err(_) => {
                return Err(refuse(format!(
                    "page {} of the update for epoch {} does not carry the publisher's \
                     signature",
                    w.index, update.epoch
                )))
            }
        }
    }
    Ok(())
}

/// 403 when the gateway has no admin token (an empty one counts as none), 401 unless
/// `Authorization: Bearer <token>` matches (the scheme in any case, RFC 9110 §11.1).
pub(super) fn authorize(expected: Option<&str>, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = expected.filter(|t| !t.is_empty()) else {
        return Err(ApiError::new(
            ErrorCode::AdminDisabled,
            "this gateway has no admin token (--admin-token); the admin routes are off",
        ));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)
        .unwrap_or("");
    if !constant_time_eq(given.as_bytes(), expected.as_bytes()) {
        return Err(ApiError::new(
            ErrorCode::Unauthorized,
            "missing or wrong bearer token",
        ));
    }
    Ok(())
}

/// The token of `Bearer <token>`, the scheme matched case-insensitively.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Compares without an early exit, so response timing does not reveal a token prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_is_case_insensitive() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer abc"), Some("abc"));
        assert_eq!(bearer("BEARER  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearerabc"), None);
    }
}
