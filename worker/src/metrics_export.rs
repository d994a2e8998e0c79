//! The worker's Prometheus endpoint (`--metrics-listen`), with the catalog's buckets and help.

use std::net::SocketAddr;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use pirq_shared::metrics::{self as m, Emitter};

/// Installs the recorder and serves `GET /metrics` on `addr` (needs a Tokio runtime).
pub fn install(addr: SocketAddr) -> Result<(), metrics_exporter_prometheus::BuildError> {
    let mut builder = PrometheusBuilder::new().with_http_listener(addr);
    for metric in m::of(Emitter::Worker) {
        if let Some(buckets) = metric.buckets() {
            builder =
                builder.set_buckets_for_metric(Matcher::Full(metric.name.to_string()), buckets)?;
        }
    }
    builder.install()?;
    m::describe(Emitter::Worker);
    Ok(())
}
