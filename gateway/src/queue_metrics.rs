//! The `pirq_queue_*` gauges: the party's job stream as Redis sees it, sampled every few seconds.
//!
//! Workers know only their own windows; the backlog, the pending entries, the age of the oldest
//! job and the number of live workers are facts about the party's Redis. Every gateway samples
//! them on its own connection (several gateways report the same values: the dashboard takes
//! `max`). Sampling costs five cheap commands every [`SAMPLE_EVERY`], independent of traffic
//! ([`pirq_queue::sampler::queue`]).

use std::time::Duration;

use pirq_queue::sampler::{self, QueueSample};
use pirq_queue::RedisTarget;
use pirq_shared::layout::Layout;
use pirq_shared::metrics as m;

/// How often the gauges are refreshed; Prometheus scrapes every 5 s in `ops/prometheus`.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// Sets the catalog's queue gauges to this reading.
pub fn publish(sample: &QueueSample) {
    metrics::gauge!(m::QUEUE_DEPTH).set(sample.depth as f64);
    metrics::gauge!(m::QUEUE_PENDING).set(sample.pending as f64);
    metrics::gauge!(m::QUEUE_OLDEST_JOB_AGE).set(sample.oldest_age.as_secs_f64());
    metrics::gauge!(m::QUEUE_LIVE_WORKERS).set(sample.live_workers as f64);
    for g in &sample.groups {
        metrics::gauge!(m::QUEUE_GROUP_PENDING, "group" => g.name.clone()).set(g.pending as f64);
        metrics::gauge!(m::QUEUE_GROUP_LAG, "group" => g.name.clone()).set(g.lag as f64);
    }
}

/// Consecutive failed samples before a warning.
const WARN_AFTER_FAILURES: u32 = 5;

/// Starts the sampler on its own connection; it runs for the life of the process. A Redis
/// that is down leaves the gauges at their last reading (and `/readyz` reports it).
pub fn spawn(
    target: &RedisTarget,
    layout: Layout,
    timeout: Duration,
) -> tokio::task::JoinHandle<()> {
    let conn = target.connection(timeout);
    tokio::spawn(async move {
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "queue metrics disabled: bad redis client");
                return;
            }
        };
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // One slow sample under load is no news (the next comes a second later); a Redis that
        // stays unreachable is, once.
        let mut failures = 0u32;
        loop {
            tick.tick().await;
            match sampler::queue(&conn, &layout).await {
                Ok(s) => {
                    publish(&s);
                    failures = 0;
                }
                Err(e) => {
                    failures += 1;
                    if failures == WARN_AFTER_FAILURES {
                        tracing::warn!(error = %e, failures, "sampling the queue keeps failing");
                    } else {
                        tracing::debug!(error = %e, failures, "sampling the queue failed");
                    }
                }
            }
        }
    })
}
