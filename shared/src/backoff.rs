//! The one retry back-off: `first`, doubling, capped at `max`, back to `first` after a success.
//!
//! Every retry loop in pirq backs off this way: a party's servers waiting for Redis
//! (`pirq_party::Backoff`, which adds the sleep) and the client waiting out a refusing party
//! (with jitter and the party's `Retry-After` on top). One policy, one place to change it.

use std::time::Duration;

/// Exponential back-off: `first`, then twice the last delay, at most `max`.
#[derive(Clone, Debug)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            next: first,
        }
    }

    /// The delay to wait now; the one after it doubles (up to the cap).
    pub fn next_delay(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(self.max);
        now
    }

    /// After a success: the next failure waits `first` again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        let delays: Vec<u64> = (0..8).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(delays, [50, 100, 200, 400, 800, 1600, 2000, 2000]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(50));
    }

    #[test]
    fn a_cap_below_the_first_delay_is_reached_at_once() {
        let mut b = Backoff::new(Duration::from_millis(300), Duration::from_millis(500));
        let delays: Vec<u64> = (0..3).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(delays, [300, 500, 500]);
    }
}
