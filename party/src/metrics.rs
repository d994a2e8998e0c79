//! The Prometheus recorder of a party's server, built from the metrics catalog
//! (`pirq_shared::metrics`): the same histogram buckets in every process, so they aggregate, and
//! the catalog's help text.

use std::time::Duration;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use pirq_shared::metrics::{self as m, Emitter};

/// A builder with the buckets of every histogram `emitter` records. The caller picks how it is
/// served (the gateway renders on its own route; the worker listens on `--metrics-listen`), then
/// calls [`described`] once it is installed.
pub fn builder(emitter: Emitter) -> Result<PrometheusBuilder, BuildError> {
    let mut builder = PrometheusBuilder::new();
    for metric in m::of(emitter) {
        if let Some(buckets) = metric.buckets() {
            builder =
                builder.set_buckets_for_metric(Matcher::Full(metric.name.to_string()), buckets)?;
        }
    }
    Ok(builder)
}

/// Registers the help text of `emitter`'s metrics (and its counters at zero) with the installed
/// recorder.
pub fn described(emitter: Emitter) {
    m::describe(emitter);
}

/// How often [`spawn_upkeep`] drains the recorder.
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Drains the recorder every [`UPKEEP_INTERVAL`] for the life of the process. A recorder
/// installed with `install_recorder` keeps every histogram sample until upkeep folds it into
/// the buckets: without this, a process whose `/metrics` nobody scrapes grows by a few bytes a
/// sample for ever (the gateway grew ~10 MiB a minute at 7,600 queries/s on the H100,
/// `docs/bench/sustained.md`).
pub fn spawn_upkeep(handle: PrometheusHandle) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(UPKEEP_INTERVAL);
        loop {
            tick.tick().await;
            handle.run_upkeep();
        }
    });
}
