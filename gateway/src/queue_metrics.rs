//! The `pirq_queue_*` gauges: the party's job stream as Redis sees it, sampled every few seconds.
//!
//! Workers know only their own windows; the backlog, the pending entries, the age of the oldest
//! job and the number of live workers are facts about the party's Redis. Every gateway samples
//! them on its own connection (several gateways report the same values: the dashboard takes
//! `max`). Sampling costs five cheap commands every [`SAMPLE_EVERY`], independent of traffic.

use std::time::Duration;

use pirq_shared::layout::{Layout, GROUP};
use pirq_shared::metrics as m;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::streams::{StreamPendingReply, StreamRangeReply};

/// How often the gauges are refreshed; Prometheus scrapes every 5 s in `ops/prometheus`.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// One reading of a party's queue.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueSample {
    /// Entries not yet delivered to any worker.
    pub depth: u64,
    /// Entries delivered and not yet acknowledged.
    pub pending: u64,
    /// Age of the oldest entry, by the Redis server's clock (0 when the stream is empty).
    pub oldest_age: Duration,
    /// Registered workers whose heartbeat key exists.
    pub live_workers: u64,
    /// Every consumer group on the stream (one per shard for a sharded party): its name,
    /// entries delivered and not acknowledged, and entries not yet delivered to it (its lag).
    pub groups: Vec<GroupSample>,
}

/// One consumer group of the job stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupSample {
    pub name: String,
    pub pending: u64,
    pub lag: u64,
}

impl QueueSample {
    /// Sets the catalog's queue gauges to this reading.
    pub fn publish(&self) {
        metrics::gauge!(m::QUEUE_DEPTH).set(self.depth as f64);
        metrics::gauge!(m::QUEUE_PENDING).set(self.pending as f64);
        metrics::gauge!(m::QUEUE_OLDEST_JOB_AGE).set(self.oldest_age.as_secs_f64());
        metrics::gauge!(m::QUEUE_LIVE_WORKERS).set(self.live_workers as f64);
        for g in &self.groups {
            metrics::gauge!(m::QUEUE_GROUP_PENDING, "group" => g.name.clone())
                .set(g.pending as f64);
            metrics::gauge!(m::QUEUE_GROUP_LAG, "group" => g.name.clone()).set(g.lag as f64);
        }
    }
}

/// Reads the queue once. Missing keys (no job yet, no consumer group yet) read as zero.
pub async fn sample(
    conn: &mut ConnectionManager,
    layout: &Layout,
) -> redis::RedisResult<QueueSample> {
    let jobs = layout.jobs();
    let (len, oldest, time, workers): (u64, StreamRangeReply, (u64, u64), Vec<String>) =
        redis::pipe()
            .cmd("XLEN")
            .arg(&jobs)
            .cmd("XRANGE")
            .arg(&jobs)
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(1)
            .cmd("TIME")
            .cmd("SMEMBERS")
            .arg(layout.workers())
            .query_async(conn)
            .await?;
    // XPENDING fails with NOGROUP until the first worker has created the group.
    let pending = match redis::cmd("XPENDING")
        .arg(&jobs)
        .arg(GROUP)
        .query_async::<StreamPendingReply>(conn)
        .await
    {
        Ok(reply) => reply.count() as u64,
        Err(e) if e.code() == Some("NOGROUP") => 0,
        Err(e) => return Err(e),
    };
    let live_workers = if workers.is_empty() {
        0
    } else {
        let mut pipe = redis::pipe();
        for id in &workers {
            pipe.exists(layout.worker(id));
        }
        let alive: Vec<bool> = pipe.query_async(conn).await?;
        alive.into_iter().filter(|a| *a).count() as u64
    };
    let now_ms = time.0 * 1000 + time.1 / 1000;
    let oldest_age = oldest
        .ids
        .first()
        .and_then(|e| entry_ms(&e.id))
        .map(|ms| Duration::from_millis(now_ms.saturating_sub(ms)))
        .unwrap_or_default();
    let groups = match redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(&jobs)
        .query_async::<redis::Value>(conn)
        .await
    {
        Ok(reply) => parse_groups(reply),
        // No stream yet.
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) => {
            Vec::new()
        }
        Err(e) => return Err(e),
    };
    Ok(QueueSample {
        depth: len.saturating_sub(pending),
        pending,
        oldest_age,
        live_workers,
        groups,
    })
}

/// The groups of an `XINFO GROUPS` reply (RESP2 flat arrays or RESP3 maps). `lag` is nil
/// when Redis cannot tell (entries deleted inside the group's range): read as 0 then.
fn parse_groups(reply: redis::Value) -> Vec<GroupSample> {
    use redis::Value;
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let number = |v: &Value| match v {
        Value::Int(n) => (*n).max(0) as u64,
        other => text(other).and_then(|t| t.parse().ok()).unwrap_or(0),
    };
    let Value::Array(groups) = reply else {
        return Vec::new();
    };
    groups
        .into_iter()
        .filter_map(|g| {
            let pairs: Vec<(Value, Value)> = match g {
                Value::Map(pairs) => pairs,
                Value::Array(flat) => {
                    let mut it = flat.into_iter();
                    std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
                }
                _ => return None,
            };
            let field = |name: &str| pairs.iter().find(|(k, _)| text(k).as_deref() == Some(name));
            Some(GroupSample {
                name: text(&field("name")?.1)?,
                pending: field("pending").map_or(0, |(_, v)| number(v)),
                lag: field("lag").map_or(0, |(_, v)| number(v)),
            })
        })
        .collect()
}

/// Milliseconds part of a stream entry id (`<ms>-<seq>`): when Redis appended it.
fn entry_ms(id: &str) -> Option<u64> {
    id.split_once('-')?.0.parse().ok()
}

/// Consecutive failed samples before a warning.
const WARN_AFTER_FAILURES: u32 = 5;

/// Starts the sampler on its own connection; it runs for the life of the process. A Redis
/// that is down leaves the gauges at their last reading (and `/readyz` reports it).
pub fn spawn(
    client: redis::Client,
    layout: Layout,
    timeout: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        let mut conn = match ConnectionManager::new_lazy_with_config(client, config) {
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
            match sample(&mut conn, &layout).await {
                Ok(s) => {
                    s.publish();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_ids_carry_their_append_time() {
        assert_eq!(entry_ms("1700000000123-0"), Some(1_700_000_000_123));
        assert_eq!(entry_ms("5-17"), Some(5));
        assert_eq!(entry_ms("garbage"), None);
        assert_eq!(entry_ms("x-1"), None);
    }
}
