//! Backpressure: the job backlog against `--max-backlog`, and `Retry-After` from the drain rate.
//!
//! The backlog is the job stream's length: entries are deleted when acknowledged, so it counts
//! the jobs waiting for a worker plus those delivered and not yet answered. The check itself is
//! part of the submit script (one atomic step with the `XADD`, see [`pirq_queue::producer`]); this module
//! measures how fast the party drains its stream, so that a refused client is told when to come
//! back: `Retry-After = ceil((backlog − max_backlog + 1) / drain rate)`, between 1 and
//! [`MAX_RETRY_AFTER`] seconds (the maximum while nothing drains, e.g. no worker is up).
//!
//! The drain rate comes from `XINFO STREAM`: jobs added (`entries-added`, Redis ≥ 7.0) minus the
//! growth of the stream over one sampling period, smoothed over a few periods.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pirq_shared::layout::Layout;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Value;

/// Longest `Retry-After` a 429 carries, in seconds.
pub const MAX_RETRY_AFTER: u64 = 60;
/// How often the drain rate is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The party's current drain rate, shared by the handlers.
#[derive(Clone, Default)]
pub struct Drain {
    /// Jobs per second, as `f64` bits.
    rate: Arc<AtomicU64>,
}

impl Drain {
    /// Jobs answered per second, smoothed.
    pub fn rate(&self) -> f64 {
        f64::from_bits(self.rate.load(Ordering::Relaxed))
    }

    fn set(&self, rate: f64) {
        self.rate.store(rate.to_bits(), Ordering::Relaxed);
    }

    /// Seconds until the backlog is back under `max_backlog` at the current rate.
    pub fn retry_after(&self, backlog: u64, max_backlog: u64) -> u64 {
        retry_after(backlog, max_backlog, self.rate())
    }

    /// Starts the sampler on its own connection, for the life of the process.
    pub fn spawn(&self, client: redis::Client, layout: Layout, timeout: Duration) {
        let drain = self.clone();
        tokio::spawn(async move {
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout));
            let Ok(mut conn) = ConnectionManager::new_lazy_with_config(client, config) else {
                return;
            };
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut prev: Option<(u64, u64, Instant)> = None;
            loop {
                tick.tick().await;
                let Ok(Some((len, added))) = stream_counts(&mut conn, &layout.jobs()).await else {
                    prev = None;
                    continue;
                };
                let now = Instant::now();
                if let Some((plen, padded, at)) = prev {
                    let dt = now.duration_since(at).as_secs_f64().max(1e-3);
                    // Jobs that left the stream: added meanwhile minus how much it grew.
                    let left = (added.saturating_sub(padded) as f64) - (len as f64 - plen as f64);
                    let sample = (left / dt).max(0.0);
                    let old = drain.rate();
                    drain.set(if old == 0.0 {
                        sample
                    } else {
                        0.5 * old + 0.5 * sample
                    });
                }
                prev = Some((len, added, now));
            }
        });
    }
}

/// `Retry-After` for a backlog at a drain rate (jobs/s).
pub fn retry_after(backlog: u64, max_backlog: u64, rate: f64) -> u64 {
    let excess = backlog.saturating_sub(max_backlog) + 1;
    if rate <= 1e-3 {
        return MAX_RETRY_AFTER;
    }
    ((excess as f64 / rate).ceil() as u64).clamp(1, MAX_RETRY_AFTER)
}

/// `(length, entries-added)` of the stream, `None` if it does not exist yet or the server does
/// not report `entries-added` (Redis < 7.0).
async fn stream_counts(
    conn: &mut ConnectionManager,
    stream: &str,
) -> redis::RedisResult<Option<(u64, u64)>> {
    let reply: redis::RedisResult<Value> = redis::cmd("XINFO")
        .arg("STREAM")
        .arg(stream)
        .query_async(conn)
        .await;
    let reply = match reply {
        Ok(v) => v,
        Err(e) if e.code().is_some() => return Ok(None),
        Err(e) => return Err(e),
    };
    let pairs: Vec<(Value, Value)> = match reply {
        Value::Map(p) => p,
        Value::Array(items) => {
            let mut it = items.into_iter();
            let mut out = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                out.push((k, v));
            }
            out
        }
        _ => return Ok(None),
    };
    let get = |name: &str| {
        pairs.iter().find_map(|(k, v)| match (k, v) {
            (Value::BulkString(k), Value::Int(n)) if k.as_slice() == name.as_bytes() => {
                Some(*n as u64)
            }
            (Value::SimpleString(k), Value::Int(n)) if k == name => Some(*n as u64),
            _ => None,
        })
    };
    Ok(get("length").zip(get("entries-added")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_follows_the_drain_rate() {
        assert_eq!(retry_after(100, 100, 0.0), MAX_RETRY_AFTER);
        assert_eq!(retry_after(100, 100, 10.0), 1);
        assert_eq!(retry_after(149, 100, 10.0), 5);
        assert_eq!(retry_after(100_000, 100, 1.0), MAX_RETRY_AFTER);
    }
}
