//! The Prometheus recorder of a party's server, built from the metrics catalog
//! (`pirq_shared::metrics`): the same histogram buckets in every process, so they aggregate, and
//! the catalog's help text.

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder};
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
