//! The retry back-off of every loop that waits for Redis to come back: 50 ms, doubling, capped.
//!
//! One helper instead of the same three lines in each loop, so every retry of a party backs off
//! alike and a change of policy is one edit.

use std::time::Duration;

/// Exponential back-off: `first`, then twice the last delay, at most `max`.
#[derive(Clone, Debug)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Default for Backoff {
    /// 50 ms doubling up to 2 s: a Redis restart is noticed within 2 s of its return, and a
    /// Redis that stays down costs one attempt every 2 s.
    fn default() -> Backoff {
        Backoff::new(Duration::from_millis(50), Duration::from_secs(2))
    }
}

impl Backoff {
    pub fn new(first: Duration, max: Duration) -> Backoff {
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

    /// Sleeps for [`next_delay`](Self::next_delay).
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
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
        let mut b = Backoff::default();
        let delays: Vec<u64> = (0..8).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(delays, [50, 100, 200, 400, 800, 1600, 2000, 2000]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(50));
    }
}
