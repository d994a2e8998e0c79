//! The worker's Prometheus endpoint (`--metrics-listen`), with the catalog's buckets and help.

use std::net::SocketAddr;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use pirq_shared::metrics::{self as m, Emitter};

/// Installs the recorder and serves `GET /metrics` on `addr` (needs a Tokio runtime). A shard's
/// worker labels every series with `shard="I/S"`, so dashboards split pass time, keys and jobs
/// per shard.
pub fn install(
    addr: SocketAddr,
    shard: Option<pirq_shared::shard::ShardSpec>,
) -> Result<(), metrics_exporter_prometheus::BuildError> {
    let mut builder = PrometheusBuilder::new().with_http_listener(addr);
    if let Some(spec) = shard {
        builder = builder.add_global_label("shard", spec.to_string());
    }
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
