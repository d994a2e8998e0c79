//! The HTTP routes. Handlers stay thin: parse, check (a submit's admission in
//! [`crate::admission`]), call `pirq-queue`, answer; every error conversion is in [`crate::error`].

mod admin;
mod health;
mod info;
mod manifests;
mod queries;
mod tables;

use axum::extract::Request;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::Router;
use pirq_shared::error::ErrorCode;
use pirq_shared::wire::{QueryResult, BINCODE, JSON};

use crate::error::ApiError;
use crate::front::Front;
use crate::state::AppState;

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

/// Every route the gateway serves, one method each. The router is built from [`Route::ALL`]
/// and nothing else, so this list is the whole API: the end-to-end suite checks it against
/// `docs/openapi.yaml` both ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Healthz,
    Readyz,
    SubmitQuery,
    QueryStatus,
    QueryEvents,
    Info,
    Manifests,
    PushEpoch,
    Metrics,
    Tables,
    TableSubmitQuery,
    TableQueryStatus,
    TableQueryEvents,
    TableInfo,
    TableManifests,
    TablePushEpoch,
}

impl Route {
    pub const ALL: [Route; 16] = [
        Route::Healthz,
        Route::Readyz,
        Route::SubmitQuery,
        Route::QueryStatus,
        Route::QueryEvents,
        Route::Info,
        Route::Manifests,
        Route::PushEpoch,
        Route::Metrics,
        Route::Tables,
        Route::TableSubmitQuery,
        Route::TableQueryStatus,
        Route::TableQueryEvents,
        Route::TableInfo,
        Route::TableManifests,
        Route::TablePushEpoch,
    ];

    /// The path, in axum's (and OpenAPI's) `{param}` syntax.
    pub fn path(self) -> &'static str {
        match self {
            Route::Healthz => "/healthz",
            Route::Readyz => "/readyz",
            Route::SubmitQuery => "/v1/queries",
            Route::QueryStatus => "/v1/queries/{id}",
            Route::QueryEvents => "/v1/queries/{id}/events",
            Route::Info => "/v1/info",
            Route::Manifests => "/v1/manifests",
            Route::PushEpoch => "/v1/admin/epochs",
            Route::Metrics => "/metrics",
            Route::Tables => "/v1/tables",
            Route::TableSubmitQuery => "/v1/tables/{name}/queries",
            Route::TableQueryStatus => "/v1/tables/{name}/queries/{id}",
            Route::TableQueryEvents => "/v1/tables/{name}/queries/{id}/events",
            Route::TableInfo => "/v1/tables/{name}/info",
            Route::TableManifests => "/v1/tables/{name}/manifests",
            Route::TablePushEpoch => "/v1/admin/tables/{name}/epochs",
        }
    }

    pub fn method(self) -> Method {
        match self {
            Route::SubmitQuery
            | Route::PushEpoch
            | Route::TableSubmitQuery
            | Route::TablePushEpoch => Method::POST,
            _ => Method::GET,
        }
    }

    /// Whether a listener serving `routes` answers this route (else 404, as if it did not
    /// exist): the query routes are public, the admin routes and `/metrics` private, the
    /// probes on both.
    pub fn served_on(self, routes: Routes) -> bool {
        match self {
            Route::Healthz | Route::Readyz => true,
            Route::SubmitQuery
            | Route::QueryStatus
            | Route::QueryEvents
            | Route::Info
            | Route::Manifests
            | Route::Tables
            | Route::TableSubmitQuery
            | Route::TableQueryStatus
            | Route::TableQueryEvents
            | Route::TableInfo
            | Route::TableManifests => routes != Routes::Admin,
            Route::PushEpoch | Route::Metrics | Route::TablePushEpoch => routes != Routes::Public,
        }
    }

    /// Whether `--query-tokens` and the rate limits ([`crate::access`]) guard it: the query
    /// routes (a table's too), not `/v1/info`, `/v1/manifests` nor `/v1/tables`.
    pub fn needs_query_access(self) -> bool {
        matches!(
            self,
            Route::SubmitQuery
                | Route::QueryStatus
                | Route::QueryEvents
                | Route::TableSubmitQuery
                | Route::TableQueryStatus
                | Route::TableQueryEvents
        )
    }

    /// The handler, on [`Route::method`] only (another method is 405).
    fn handler(self) -> MethodRouter<AppState> {
        let method = MethodFilter::try_from(self.method()).expect("GET and POST are filters");
        match self {
            Route::Healthz => on(method, health::healthz),
            Route::Readyz => on(method, health::readyz),
            Route::SubmitQuery => on(method, queries::submit),
            Route::QueryStatus => on(method, queries::status),
            Route::QueryEvents => on(method, queries::events),
            Route::Info => on(method, info::info),
            Route::Manifests => on(method, manifests::manifests),
            Route::PushEpoch => on(method, admin::push_epoch),
            Route::Metrics => on(method, health::metrics),
            Route::Tables => on(method, tables::list),
            Route::TableSubmitQuery => on(method, tables::submit),
            Route::TableQueryStatus => on(method, tables::status),
            Route::TableQueryEvents => on(method, tables::events),
            Route::TableInfo => on(method, tables::info),
            Route::TableManifests => on(method, tables::manifests),
            Route::TablePushEpoch => on(method, tables::push_epoch),
        }
    }
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
    // Every route behind its one middleware (`crate::front`): head limits, metrics, and on the
    // query routes `--query-tokens` and the rate limits (`/v1/info` stays open: a client reads
    // what a party serves before it has a token).
    let mut router = Router::new();
    for route in Route::ALL.into_iter().filter(|r| r.served_on(routes)) {
        let access = route.needs_query_access().then(|| state.access.clone());
        let front = Front::new(route.path(), access);
        router = router.route(route.path(), route.handler().route_layer(front));
    }
    let router = router
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state);
    // Outermost, so preflights are answered before routing and error answers carry the
    // headers too (a browser may then read their error codes).
    match cors {
        Some(cors) => router.layer(cors),
        None => router,
    }
}

/// A path no route has: 404 (414 or 431 first, as on a route).
async fn not_found(req: Request) -> ApiError {
    match crate::server::check_head(&req) {
        Err(refused) => refused,
        Ok(()) => ApiError::new(ErrorCode::NotFound, "no such route"),
    }
}

/// A route's path with another method: 405 (414 or 431 first, as on a route).
async fn method_not_allowed(req: Request) -> ApiError {
    match crate::server::check_head(&req) {
        Err(refused) => refused,
        Ok(()) => ApiError::new(
            ErrorCode::MethodNotAllowed,
            "method not allowed on this route",
        ),
    }
}

/// Body encoding of a request or an answer (SPEC §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Bincode,
}

impl Format {
    /// From `Content-Type`: JSON when absent, 415 for anything but JSON and bincode (the media
    /// type compared without case, parameters ignored; no allocation on the way).
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
            .trim();
        if media.eq_ignore_ascii_case(JSON) {
            Ok(Format::Json)
        } else if media.eq_ignore_ascii_case(BINCODE) {
            Ok(Format::Bincode)
        } else {
            let media = media.to_ascii_lowercase();
            Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                format!("Content-Type {media:?} is not supported; use {JSON} or {BINCODE}"),
            ))
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
