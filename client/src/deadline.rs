//! One deadline for a whole lookup, and the waits between tries that must fit inside it.

use std::future::Future;
use std::time::Duration;

use pirq_shared::backoff::Backoff;
use rand::Rng;
use tokio::time::Instant;

/// When a lookup must be over: every step of it (connecting, each request, each body read,
/// each wait between tries) is bounded by this one instant, so a party that accepts and says
/// nothing, or sends a byte a second, costs the caller at most the deadline.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    at: Instant,
    total: Duration,
}

impl Deadline {
    /// `total` from now.
    pub fn after(total: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + total,
            total,
        }
    }

    /// The whole allowance (what a timeout error reports).
    pub fn total(&self) -> Duration {
        self.total
    }

    /// Time left (zero once passed).
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// Whether waiting `wait` still leaves time for a try after it.
    pub fn leaves(&self, wait: Duration) -> bool {
        wait < self.remaining()
    }

    /// Runs `step`; `None` when the deadline passes first (the step is dropped, which closes
    /// its connection).
    pub async fn run<T>(&self, step: impl Future<Output = T>) -> Option<T> {
        tokio::time::timeout_at(self.at, step).await.ok()
    }
}

/// Waits between tries when the party gave no `Retry-After`: 100 ms doubling to 2 s (the one
/// back-off, `pirq_shared::backoff`, with the client's own steps).
pub(crate) fn backoff() -> Backoff {
    Backoff::new(Duration::from_millis(100), Duration::from_secs(2))
}

/// The wait before trying a refused request again: the party's `Retry-After`, but never less
/// than the next step of `backoff` (100 ms doubling to 2 s), jittered. A `Retry-After: 0`, or
/// one repeated without end, then costs the party a handful of requests a second at first and
/// one every 2–3 s after, never a busy loop; a longer `Retry-After` is honoured as said.
pub(crate) fn refusal_wait(retry_after: Option<Duration>, backoff: &mut Backoff) -> Duration {
    jitter(retry_after.unwrap_or_default().max(backoff.next_delay()))
}

/// `wait` stretched by a random 0–50 %: clients refused together come back spread out instead
/// of as the same burst, and never earlier than the party asked.
pub(crate) fn jitter(wait: Duration) -> Duration {
    wait.mul_f64(1.0 + rand::rng().random_range(0.0..0.5))
}

/// A `Retry-After` of delta-seconds (the form pirq's gateways send); `None` when absent or in
/// another form.
pub(crate) fn retry_after(resp: &reqwest::Response) -> Option<Duration> {
    resp.headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_never_shortens_and_adds_at_most_half() {
        for _ in 0..1000 {
            let j = jitter(Duration::from_secs(1));
            assert!(
                j >= Duration::from_secs(1) && j < Duration::from_millis(1500),
                "{j:?}"
            );
        }
    }

    #[test]
    fn backoff_doubles_to_two_seconds() {
        let mut b = backoff();
        let waits: Vec<u64> = (0..7).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 2000, 2000]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(100));
    }

    #[test]
    fn refusals_wait_at_least_the_backoff_and_at_least_what_the_party_asked() {
        let mut b = backoff();
        let zero = Some(Duration::ZERO);
        let waits: Vec<Duration> = (0..7).map(|_| refusal_wait(zero, &mut b)).collect();
        for (wait, floor) in waits.iter().zip([100, 200, 400, 800, 1600, 2000, 2000]) {
            let floor = Duration::from_millis(floor);
            assert!(*wait >= floor && *wait < floor.mul_f64(1.5), "{waits:?}");
        }
        let mut b = backoff();
        let asked = refusal_wait(Some(Duration::from_secs(5)), &mut b);
        assert!(asked >= Duration::from_secs(5), "{asked:?}");
        assert!(refusal_wait(None, &mut backoff()) >= Duration::from_millis(100));
    }

    #[tokio::test(start_paused = true)]
    async fn run_ends_at_the_deadline() {
        let d = Deadline::after(Duration::from_secs(3));
        assert!(d.leaves(Duration::from_secs(2)) && !d.leaves(Duration::from_secs(3)));
        let never = std::future::pending::<()>();
        assert_eq!(d.run(never).await, None);
        assert_eq!(d.remaining(), Duration::ZERO);
        assert_eq!(d.total(), Duration::from_secs(3));
    }
}
