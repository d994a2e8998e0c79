//! Prometheus metrics: the recorder, and a middleware that counts and times every request.
//!
//! Names follow `pirq_gateway_<what>_<unit>`; the route label is the matched route template
//! (`/v1/queries/{id}`), never the raw path, so request ids do not explode the label space.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use metrics_exporter_prometheus::PrometheusHandle;

/// Installs the process-wide Prometheus recorder and its upkeep. Call once, from `main`,
/// inside the runtime.
pub fn install() -> Result<PrometheusHandle, metrics_exporter_prometheus::BuildError> {
    use pirq_shared::metrics::Emitter;
    // The catalog's buckets, the same the workers use, so histograms aggregate across processes;
    // served on the gateway's own `/metrics` route.
    let handle = pirq_party::metrics::builder(Emitter::Gateway)?.install_recorder()?;
    // Help text from the catalog, and the counters at zero before the first request.
    pirq_party::metrics::described(Emitter::Gateway);
    crate::caps::register_refusals();
    crate::access::register_refusals();
    pirq_party::metrics::spawn_upkeep(handle.clone());
    Ok(handle)
}

/// Counts and times every request by route, method and status.
pub async fn track(req: Request, next: Next) -> Response {
    let start = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let method = req.method().to_string();
    let named = table_of(req.uri().path());
    let resp = next.run(req).await;
    let table = table_label(&route, named, resp.status().as_u16());
    let status = resp.status().as_u16().to_string();
    metrics::counter!(pirq_shared::metrics::GATEWAY_HTTP_REQUESTS, "route" => route.clone(), "method" => method, "status" => status, "table" => table.clone()).increment(1);
    metrics::histogram!(pirq_shared::metrics::GATEWAY_HTTP_REQUEST_DURATION, "route" => route, "table" => table)
        .record(start.elapsed().as_secs_f64());
    resp
}

/// The table a `/v1/tables/NAME/…` or `/v1/admin/tables/NAME/…` path names, if it is a valid
/// table name.
fn table_of(path: &str) -> Option<String> {
    let rest = path
        .strip_prefix("/v1/tables/")
        .or_else(|| path.strip_prefix("/v1/admin/tables/"))?;
    let name = rest.split('/').next()?;
    pirq_shared::layout::check_table_name(name).ok()?;
    Some(name.to_string())
}

/// The `table` label: the table a table route names (but on a 404, which may be
/// `unknown_table`: names sent by anyone must not grow the label space), `default` on the
/// per-database routes without a table name, `-` elsewhere.
fn table_label(route: &str, named: Option<String>, status: u16) -> String {
    const DEFAULT_ROUTES: [&str; 6] = [
        "/v1/queries",
        "/v1/queries/{id}",
        "/v1/queries/{id}/events",
        "/v1/info",
        "/v1/manifests",
        "/v1/admin/epochs",
    ];
    match named {
        Some(name) if status != 404 => name,
        Some(_) => "-".to_string(),
        None if DEFAULT_ROUTES.contains(&route) => pirq_shared::layout::DEFAULT_TABLE.to_string(),
        None => "-".to_string(),
    }
}
