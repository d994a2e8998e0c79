//! The worker's Prometheus endpoint (`--metrics-listen`), with the catalog's buckets and help.

use std::net::SocketAddr;

use pirq_shared::metrics::Emitter;

/// Installs the recorder and serves `GET /metrics` on `addr` (needs a Tokio runtime). A shard's
/// worker labels every series with `shard="I/S"`, so dashboards split pass time, keys and jobs
/// per shard.
pub fn install(
    addr: SocketAddr,
    shard: Option<pirq_shared::shard::ShardSpec>,
) -> Result<(), metrics_exporter_prometheus::BuildError> {
    let mut builder = pirq_party::metrics::builder(Emitter::Worker)?.with_http_listener(addr);
    if let Some(spec) = shard {
        builder = builder.add_global_label("shard", spec.to_string());
    }
    builder.install()?;
    pirq_party::metrics::described(Emitter::Worker);
    Ok(())
}
