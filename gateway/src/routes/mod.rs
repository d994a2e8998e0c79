//! The HTTP routes. Handlers stay thin: parse, validate, one Redis call, answer.

mod admin;
mod health;
mod info;
mod queries;

use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{middleware, Router};
use pirq_shared::error::ErrorCode;
use pirq_shared::wire::{QueryResult, BINCODE, JSON};

use crate::error::ApiError;
use crate::state::AppState;

pub(crate) use queries::no_database as queries_no_database;

/// Which routes a listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routes {
    /// Everything on one port (no `--admin-listen`).
    All,
    /// The public listener beside `--admin-listen`: `/v1/*` but the admin routes, `/healthz`,
    /// `/readyz`. Admin routes and `/metrics` are 404 here, as if they did not exist.
    Public,
    /// `--admin-listen`: the admin routes and `/metrics`, plus `/healthz` and `/readyz` for
    /// probes on the private network.
    Admin,
}

/// Builds the gateway's router over `state`, every route on one listener.
pub fn router(state: AppState) -> Router {
    router_for(state, Routes::All)
}

/// Builds the router of one listener.
pub fn router_for(state: AppState, routes: Routes) -> Router {
    let cors = match routes {
        // The admin listener serves operators' tools, never browsers.
        Routes::Admin => None,
        Routes::All | Routes::Public => crate::cors::layer(&state.config.cors_origins),
    };
    let mut router = Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz));
    if routes != Routes::Admin {
        // Submits and result reads pass `--query-tokens` and the rate limits first; `/v1/info`
        // stays open (a client reads what a party serves before it has a token).
        let queries = Router::new()
            .route("/v1/queries", post(queries::submit))
            .route("/v1/queries/{id}", get(queries::status))
            .route("/v1/queries/{id}/events", get(queries::events))
            .route_layer(middleware::from_fn_with_state(
                state.clone(),
                crate::access::guard,
            ));
        router = router.merge(queries).route("/v1/info", get(info::info));
    }
    if routes != Routes::Public {
        router = router
            .route("/v1/admin/epochs", post(admin::push_epoch))
            .route("/metrics", get(health::metrics));
    }
    let router = router
        .route_layer(middleware::from_fn(crate::metrics::track))
        .fallback(|| async { ApiError::new(ErrorCode::NotFound, "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                ErrorCode::MethodNotAllowed,
                "method not allowed on this route",
            )
        })
        // Bodies are read by `crate::body` with each route's own limit.
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn(crate::server::head_limits))
        .with_state(state);
    // Outermost, so preflights are answered before routing and error answers carry the
    // headers too (a browser may then read their error codes).
    match cors {
        Some(cors) => router.layer(cors),
        None => router,
    }
}

/// Body encoding of a request or an answer (SPEC §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Bincode,
}

impl Format {
    /// From `Content-Type`: JSON when absent, 415 for anything but JSON and bincode.
    pub fn of_request(headers: &HeaderMap) -> Result<Format, ApiError> {
        let Some(value) = headers.get(header::CONTENT_TYPE) else {
            return Ok(Format::Json);
        };
        let media = value
            .to_str()
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match media.as_str() {
            JSON => Ok(Format::Json),
            BINCODE => Ok(Format::Bincode),
            _ => Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                format!("Content-Type {media:?} is not supported; use {JSON} or {BINCODE}"),
            )),
        }
    }

    /// From `Accept`: bincode only when asked for, JSON otherwise.
    pub fn of_answer(headers: &HeaderMap) -> Format {
        let wants_bincode = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|m| {
                m.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .eq_ignore_ascii_case(BINCODE)
            });
        if wants_bincode {
            Format::Bincode
        } else {
            Format::Json
        }
    }

    /// A query state as a response in this format.
    pub fn respond(self, status: StatusCode, result: &QueryResult) -> Response {
        match self {
            Format::Json => {
                (status, [(header::CONTENT_TYPE, JSON)], result.to_json()).into_response()
            }
            Format::Bincode => (
                status,
                [(header::CONTENT_TYPE, BINCODE)],
                result.to_bincode(),
            )
                .into_response(),
        }
    }
}
