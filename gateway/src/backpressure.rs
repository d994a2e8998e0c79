//! Backpressure: admission bounded by work, and Redis memory bounded apart from `maxmemory`.
//!
//! **Work.** The backlog is the job stream's length: entries are deleted when acknowledged, so
//! it counts the jobs waiting for a worker plus those delivered and not yet answered. A query is
//! admitted while the backlog is under [`Drain::admit_limit`]: `--max-backlog` jobs, and no more
//! than `--max-backlog-secs` seconds of work at the measured drain rate. The rate is measured on
//! the traffic as it is, so a flood of 64-key queries (slower to answer) lowers the rate and
//! with it the jobs admitted: the bound is in seconds of work whatever the keys per query. The
//! check itself is the submit's (the stream's `XLEN`, read with the batch's claims before its
//! `XADD`s: see [`pirq_queue::producer`]). A refused client is told when to come back:
//! `Retry-After = ceil((backlog − limit + 1) / drain rate)`, between 1 and [`MAX_RETRY_AFTER`]
//! seconds (the maximum while nothing drains, e.g. no worker is up).
//!
//! The drain rate comes from `XINFO STREAM`: jobs added (`entries-added`, Redis ≥ 7.0) minus the
//! growth of the stream over one sampling period, smoothed over a few periods. Periods with an
//! empty stream at both ends say nothing about capacity and leave the rate as it was, so the
//! bound holds for the first burst after an idle spell too. Until a first drain is seen (a
//! fresh party), only `--max-backlog` applies.
//!
//! **Memory.** The same sampler reads Redis's `used_memory`; while it is over
//! `--max-redis-memory`, new queries get 429 `storage_full` ([`Drain::memory_full`]). Results,
//! pending records and idempotency records all expire (`--result-ttl`, `--pending-ttl`,
//! `--idempotency-ttl`, and `--fetched-result-ttl` once a client has read a result), so memory
//! comes back by itself; replays and status reads go on meanwhile.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pirq_queue::sampler::{stream_counts, used_memory};
use pirq_queue::RedisTarget;
use pirq_shared::layout::Layout;

/// Longest `Retry-After` a 429 carries, in seconds.
pub const MAX_RETRY_AFTER: u64 = 60;
/// How often the drain rate is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Fewest jobs the seconds bound admits, so a slow party still takes a few queries at a time.
pub const MIN_ADMIT: u64 = 16;
/// `Retry-After` of a 429 `storage_full`, in seconds.
pub const STORAGE_RETRY_AFTER: u64 = 5;

/// The party's current drain rate and Redis memory, shared by the handlers.
#[derive(Clone, Default)]
pub struct Drain {
    /// Jobs per second, as `f64` bits.
    rate: Arc<AtomicU64>,
    /// Redis `used_memory` at the last sample, bytes (0 = not sampled yet).
    used_memory: Arc<AtomicU64>,
    /// Jobs in the stream at the last sample: their results are still to be written.
    backlog: Arc<AtomicU64>,
    /// Result bytes of the jobs this gateway admitted since the last sample.
    admitted_since_sample: Arc<AtomicU64>,
    /// Mean result bytes of the jobs this gateway admitted, as `f64` bits (smoothed).
    mean_result: Arc<AtomicU64>,
}

impl Drain {
    /// Jobs answered per second, smoothed.
    pub fn rate(&self) -> f64 {
        f64::from_bits(self.rate.load(Ordering::Relaxed))
    }

    fn set(&self, rate: f64) {
        self.rate.store(rate.to_bits(), Ordering::Relaxed);
    }

    /// Redis's `used_memory` at the last sample, in bytes; 0 before the first.
    pub fn used_memory(&self) -> u64 {
        self.used_memory.load(Ordering::Relaxed)
    }

    /// What Redis will hold once the queued jobs are answered: `used_memory` at the last sample,
    /// plus the results still to be written for the backlog then, plus the results of the jobs
    /// this gateway admitted since. Counting the results ahead is what keeps the bound close:
    /// by the time they are written, the jobs were admitted long ago.
    pub fn projected_memory(&self) -> u64 {
        let mean = f64::from_bits(self.mean_result.load(Ordering::Relaxed));
        let ahead = (self.backlog.load(Ordering::Relaxed) as f64 * mean) as u64;
        self.used_memory()
            .saturating_add(ahead)
            .saturating_add(self.admitted_since_sample.load(Ordering::Relaxed))
    }

    /// Whether Redis will hold more than `max_bytes` (0 = no bound); see
    /// [`Drain::projected_memory`].
    pub fn memory_full(&self, max_bytes: u64) -> bool {
        max_bytes > 0 && self.used_memory() > 0 && self.projected_memory() > max_bytes
    }

    /// A job with a result of `result_bytes` was admitted.
    pub fn note_admitted(&self, result_bytes: u64) {
        self.admitted_since_sample
            .fetch_add(result_bytes, Ordering::Relaxed);
        let _ = self
            .mean_result
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                let old = f64::from_bits(old);
                let new = if old == 0.0 {
                    result_bytes as f64
                } else {
                    0.95 * old + 0.05 * result_bytes as f64
                };
                Some(new.to_bits())
            });
    }

    /// The backlog (jobs) under which a query is admitted now; 0 = no bound.
    pub fn admit_limit(&self, max_backlog: u64, max_backlog_secs: u64) -> u64 {
        admit_limit(max_backlog, max_backlog_secs, self.rate())
    }

    /// Seconds until the backlog is back under `limit` at the current rate.
    pub fn retry_after(&self, backlog: u64, limit: u64) -> u64 {
        retry_after(backlog, limit, self.rate())
    }

    /// Starts the sampler on its own connection, for the life of the process.
    pub fn spawn(&self, target: &RedisTarget, layout: Layout, timeout: Duration) {
        let drain = self.clone();
        let Ok(conn) = target.connection(timeout) else {
            return;
        };
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut prev: Option<(u64, u64, Instant)> = None;
            loop {
                tick.tick().await;
                if let Ok(used) = used_memory(&conn).await {
                    metrics::gauge!(pirq_shared::metrics::QUEUE_REDIS_MEMORY).set(used as f64);
                    drain.used_memory.store(used, Ordering::Relaxed);
                    drain.admitted_since_sample.store(0, Ordering::Relaxed);
                }
                let Ok(Some((len, added))) = stream_counts(&conn, &layout).await else {
                    prev = None;
                    continue;
                };
                drain.backlog.store(len, Ordering::Relaxed);
                let now = Instant::now();
                if let Some((plen, padded, at)) = prev.filter(|(plen, _, _)| *plen > 0 || len > 0) {
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

/// The backlog under which a query is admitted: `max_backlog` (0 = none), and while a drain rate
/// is known, `max_backlog_secs` (0 = none) of work at it, at least [`MIN_ADMIT`]. 0 = no bound.
pub fn admit_limit(max_backlog: u64, max_backlog_secs: u64, rate: f64) -> u64 {
    let by_count = if max_backlog == 0 {
        u64::MAX
    } else {
        max_backlog
    };
    let by_time = if max_backlog_secs == 0 || rate <= 1e-3 {
        u64::MAX
    } else {
        ((rate * max_backlog_secs as f64) as u64).max(MIN_ADMIT)
    };
    match by_count.min(by_time) {
        u64::MAX => 0,
        limit => limit,
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

    #[test]
    fn admission_is_bounded_by_seconds_of_work_at_the_measured_rate() {
        // No rate yet: the count alone.
        assert_eq!(admit_limit(10_000, 30, 0.0), 10_000);
        // 20 jobs/s (heavy queries): 30 s of work is 600 jobs.
        assert_eq!(admit_limit(10_000, 30, 20.0), 600);
        // Fast drain: the count bounds.
        assert_eq!(admit_limit(10_000, 30, 1000.0), 10_000);
        // A crawl still admits a few.
        assert_eq!(admit_limit(10_000, 30, 0.1), MIN_ADMIT);
        assert_eq!(admit_limit(0, 0, 50.0), 0);
        assert_eq!(admit_limit(0, 10, 50.0), 500);
    }
}
