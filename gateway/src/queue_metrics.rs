//! The `pirq_queue_*` gauges: the party's job stream as Redis sees it, sampled every few seconds.
//!
//! Workers know only their own windows; the backlog, the pending entries, the age of the oldest
//! job and the number of live workers are facts about the party's Redis. Every gateway samples
//! them on its own connection (several gateways report the same values: the dashboard takes
//! `max`). Sampling costs five cheap commands a table every [`SAMPLE_EVERY`], independent of
//! traffic ([`pirq_queue::sampler::queue`]). Every gauge has the label `table` (issue 38): the
//! table `default`, and each named table of `{P}:tables`, read again at every sample so a
//! table registered later is sampled too.

use std::time::Duration;

use pirq_queue::sampler::{self, QueueSample};
use pirq_queue::RedisTarget;
use pirq_shared::layout::{Layout, DEFAULT_TABLE};
use pirq_shared::metrics as m;

/// How often the gauges are refreshed; Prometheus scrapes every 5 s in `ops/prometheus`.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// Sets the catalog's queue gauges of table `table` to this reading.
pub fn publish(table: &str, sample: &QueueSample) {
    let t = table.to_string();
    metrics::gauge!(m::QUEUE_DEPTH, "table" => t.clone()).set(sample.depth as f64);
    metrics::gauge!(m::QUEUE_PENDING, "table" => t.clone()).set(sample.pending as f64);
    metrics::gauge!(m::QUEUE_OLDEST_JOB_AGE, "table" => t.clone())
        .set(sample.oldest_age.as_secs_f64());
    metrics::gauge!(m::QUEUE_LIVE_WORKERS, "table" => t.clone()).set(sample.live_workers as f64);
    for g in &sample.groups {
        let group = g.name.clone();
        metrics::gauge!(m::QUEUE_GROUP_PENDING, "group" => group.clone(), "table" => t.clone())
            .set(g.pending as f64);
        metrics::gauge!(m::QUEUE_GROUP_LAG, "group" => group, "table" => t.clone())
            .set(g.lag as f64);
    }
}

/// One sample of every table's queue: `default`'s and each named table's (their layouts from
/// the party's), published as they come.
async fn sample_all(
    conn: &pirq_queue::Connection,
    layout: &Layout,
) -> Result<(), pirq_queue::QueueError> {
    sample_one(conn, layout, DEFAULT_TABLE).await?;
    for name in sampler::table_names(conn, layout).await? {
        // A name in {P}:tables is a table name (the workers check it before they add it).
        if let Ok(table) = layout.table(&name) {
            sample_one(conn, &table, &name).await?;
        }
    }
    Ok(())
}

async fn sample_one(
    conn: &pirq_queue::Connection,
    layout: &Layout,
    table: &str,
) -> Result<(), pirq_queue::QueueError> {
    let sample = sampler::queue(conn, layout).await?;
    publish(table, &sample);
    Ok(())
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
            match sample_all(&conn, &layout).await {
                Ok(()) => failures = 0,
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
