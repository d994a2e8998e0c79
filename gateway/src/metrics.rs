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
    let resp = next.run(req).await;
    let status = resp.status().as_u16().to_string();
    metrics::counter!(pirq_shared::metrics::GATEWAY_HTTP_REQUESTS, "route" => route.clone(), "method" => method, "status" => status).increment(1);
    metrics::histogram!(pirq_shared::metrics::GATEWAY_HTTP_REQUEST_DURATION, "route" => route)
        .record(start.elapsed().as_secs_f64());
    resp
}
