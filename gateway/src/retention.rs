//! How long a result is kept once a client has read it: bounded by bytes, not by time alone.
//!
//! A read result is kept only so that a client can read it again (a dropped connection, a replay
//! of its `Idempotency-Key` after an answer lost on the way). Kept for a fixed time, the memory
//! this takes grows with the party's throughput: at full speed on a GPU, 60 s of 4 KiB answers
//! filled a 2 GiB Redis in 20 s and every query after that was refused. So the time is derived
//! from a budget in bytes (`--fetched-result-bytes`): every gateway counts the bytes it hands
//! over into one Redis counter (`{P}:fetched_bytes`, once a second, see [`SAMPLE_EVERY`]); the
//! counter's growth is the party's read rate `r` in bytes/s, all gateways together; a read result
//! and its idempotency record are then kept `budget / r` (never longer than
//! `--fetched-result-ttl`, never shorter than [`MIN_TTL`]), so together they hold about `budget`
//! bytes of Redis whatever the throughput. The rate follows a rise at once and a fall smoothly,
//! so a burst shortens the time from the next second on.
//!
//! With a `--max-redis-memory` cap the budget defaults to a quarter of it (256 MiB at most, the
//! default without a cap): on a small Redis the read results alone would otherwise reach the cap
//! and turn every new query away (`storage_full`), as 60 s of load did to a 48 MB cap.
//!
//! The final record of a request the gateway held (`Prefer: wait`) is only a net for a missed
//! completion event; the gateway asks the worker to keep it this same time (at most 5 s,
//! `Reply::held_keep_ms`), so the nets share the budget too: kept a fixed 5 s they alone took a
//! 48 MB cap past 90 % at 3,600 queries a second.
//!
//! Results nobody has read yet are not affected: they are kept for the worker's `--result-ttl`
//! (a client that polls late still finds its answer), and admission (`--max-redis-memory`,
//! [`crate::backpressure`]) bounds them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pirq_queue::producer::Producer;

/// How often the counter is updated and the rate read.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// The shortest time a read result is kept, whatever the rate: a client that lost the answer
/// on the way can still read it again at once.
pub const MIN_TTL: Duration = Duration::from_millis(500);
/// Redis bytes a result record costs beside its pages (the hash, its fields and expiry, the
/// idempotency record): measured on Redis 7.0, a query of one 1 KiB page held ~3 KiB of
/// `used_memory` in its two records.
pub const RECORD_OVERHEAD: u64 = 2048;
/// The budget of read results without `--fetched-result-bytes` and without a cap.
pub const DEFAULT_BUDGET: u64 = 256 << 20;
/// With a `--max-redis-memory` cap and no `--fetched-result-bytes`, read results may hold this
/// share of the cap (1/4): the rest is for the backlog's jobs, results not read yet, and the
/// party's own keys.
pub const CAP_SHARE: u64 = 4;
/// Weight of the newest sample when the rate falls.
const SMOOTHING: f64 = 0.25;

/// The retention of read results, shared by the handlers and the sampler.
#[derive(Clone)]
pub struct Retention {
    inner: Arc<Inner>,
}

struct Inner {
    /// `--fetched-result-bytes`.
    budget: u64,
    /// `--fetched-result-ttl`.
    max_ttl: Duration,
    /// Bytes handed over since the last sample.
    handed: AtomicU64,
    /// The time a read result is kept now, in milliseconds.
    ttl_ms: AtomicU64,
}

impl Retention {
    /// Starts at the longest time, `max_ttl`, until a rate is measured.
    pub fn new(budget: u64, max_ttl: Duration) -> Retention {
        Retention {
            inner: Arc::new(Inner {
                budget,
                max_ttl,
                handed: AtomicU64::new(0),
                ttl_ms: AtomicU64::new(max_ttl.as_millis() as u64),
            }),
        }
    }

    /// How long a result read now is kept.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.inner.ttl_ms.load(Ordering::Relaxed))
    }

    /// A final result of `page_bytes` (its pages, all keys) was handed over to a client.
    pub fn handed_over(&self, page_bytes: u64) {
        self.inner
            .handed
            .fetch_add(page_bytes + RECORD_OVERHEAD, Ordering::Relaxed);
    }

    /// Starts the sampler for the life of the process. A failed sample keeps the time as it was.
    pub fn spawn(&self, producer: Producer) {
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last: Option<(u64, Instant)> = None;
            let mut rate = 0.0;
            loop {
                tick.tick().await;
                let bytes = inner.handed.swap(0, Ordering::Relaxed);
                let total = match producer.count_fetched(bytes).await {
                    Ok(total) => total,
                    Err(e) => {
                        inner.handed.fetch_add(bytes, Ordering::Relaxed);
                        tracing::debug!(error = %e, "counting fetched result bytes failed");
                        continue;
                    }
                };
                let now = Instant::now();
                if let Some((before, at)) = last {
                    let secs = now.duration_since(at).as_secs_f64().max(1e-3);
                    rate = follow(rate, total.saturating_sub(before) as f64 / secs);
                    let ttl = ttl_for(rate, inner.budget, inner.max_ttl);
                    inner
                        .ttl_ms
                        .store(ttl.as_millis() as u64, Ordering::Relaxed);
                }
                last = Some((total, now));
            }
        });
    }
}

/// `--fetched-result-bytes` that would fill `--max-redis-memory` by itself.
#[derive(Debug, thiserror::Error)]
#[error(
    "--fetched-result-bytes {budget} is not below --max-redis-memory {cap}: read results alone \
     would fill the cap and every new query would get 429 storage_full; lower it (without it the \
     budget is a quarter of the cap) or raise the cap"
)]
pub struct BudgetError {
    pub budget: u64,
    pub cap: u64,
}

/// The bytes read results may hold: `explicit` (`--fetched-result-bytes`), which must stay below
/// a cap `max_redis_memory` (0: none); without it [`DEFAULT_BUDGET`], or a quarter of the cap
/// when that is less.
pub fn budget(explicit: Option<u64>, max_redis_memory: u64) -> Result<u64, BudgetError> {
    let capped = max_redis_memory > 0;
    match explicit {
        Some(budget) if capped && budget >= max_redis_memory => Err(BudgetError {
            budget,
            cap: max_redis_memory,
        }),
        Some(budget) => Ok(budget),
        None if capped => Ok(DEFAULT_BUDGET.min((max_redis_memory / CAP_SHARE).max(1))),
        None => Ok(DEFAULT_BUDGET),
    }
}

/// The smoothed rate after a sample: a rise is taken at once (memory must not overshoot), a
/// fall slowly (one quiet second must not stretch every result's time to the maximum).
fn follow(rate: f64, sample: f64) -> f64 {
    if sample >= rate {
        sample
    } else {
        rate + SMOOTHING * (sample - rate)
    }
}

/// `budget / rate`, within [`MIN_TTL`] and `max_ttl`.
fn ttl_for(rate_bytes_per_sec: f64, budget: u64, max_ttl: Duration) -> Duration {
    if rate_bytes_per_sec <= 0.0 {
        return max_ttl;
    }
    let secs = budget as f64 / rate_bytes_per_sec;
    Duration::from_secs_f64(secs.min(max_ttl.as_secs_f64())).max(MIN_TTL.min(max_ttl))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_kept_is_the_budget_over_the_rate_within_bounds() {
        let max = Duration::from_secs(60);
        let budget = 256 << 20;
        assert_eq!(ttl_for(0.0, budget, max), max);
        // 1 MiB/s: 256 s of budget, capped at 60 s.
        assert_eq!(ttl_for((1 << 20) as f64, budget, max), max);
        // 64 MiB/s: 4 s.
        assert_eq!(
            ttl_for((64 << 20) as f64, budget, max),
            Duration::from_secs(4)
        );
        // Far past the budget: never below the floor.
        assert_eq!(ttl_for(1e15, budget, max), MIN_TTL);
        // A maximum under the floor wins.
        let short = Duration::from_millis(100);
        assert_eq!(ttl_for(1e15, budget, short), short);
    }

    #[test]
    fn the_budget_follows_a_redis_memory_cap() {
        // No cap: the default; the default cap (2 GiB): still the default, a quarter is more.
        assert_eq!(budget(None, 0).unwrap(), DEFAULT_BUDGET);
        assert_eq!(budget(None, 2 << 30).unwrap(), DEFAULT_BUDGET);
        // A small cap: a quarter of it.
        assert_eq!(budget(None, 48 << 20).unwrap(), 12 << 20);
        // Given: kept below the cap, refused at or above it.
        assert_eq!(budget(Some(40 << 20), 48 << 20).unwrap(), 40 << 20);
        assert_eq!(budget(Some(1 << 40), 0).unwrap(), 1 << 40);
        let refused = budget(Some(48 << 20), 48 << 20).unwrap_err().to_string();
        assert!(
            refused.contains("--fetched-result-bytes 50331648"),
            "{refused}"
        );
        assert!(refused.contains("--max-redis-memory 50331648"), "{refused}");
        assert!(budget(Some(64 << 20), 48 << 20).is_err());
    }

    #[test]
    fn the_rate_rises_at_once_and_falls_slowly() {
        assert_eq!(follow(10.0, 100.0), 100.0);
        let fallen = follow(100.0, 0.0);
        assert!(fallen > 50.0 && fallen < 100.0, "{fallen}");
    }

    #[test]
    fn bytes_handed_over_are_counted_with_their_records() {
        let r = Retention::new(1 << 20, Duration::from_secs(60));
        assert_eq!(r.ttl(), Duration::from_secs(60));
        r.handed_over(4096);
        r.handed_over(0);
        assert_eq!(
            r.inner.handed.load(Ordering::Relaxed),
            4096 + 2 * RECORD_OVERHEAD
        );
    }
}
