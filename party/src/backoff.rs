//! The retry back-off of every loop that waits for Redis to come back: 50 ms, doubling, capped
//! at 2 s. The policy is `pirq_shared::backoff::Backoff`'s (the client's retries use it too);
//! this adds the wait on the party's runtime and the party's default.

use std::time::Duration;

/// [`pirq_shared::backoff::Backoff`] with a sleep.
#[derive(Clone, Debug)]
pub struct Backoff(pirq_shared::backoff::Backoff);

impl Default for Backoff {
    /// 50 ms doubling up to 2 s: a Redis restart is noticed within 2 s of its return, and a
    /// Redis that stays down costs one attempt every 2 s.
    fn default() -> Backoff {
        Backoff::new(Duration::from_millis(50), Duration::from_secs(2))
    }
}

impl Backoff {
    pub fn new(first: Duration, max: Duration) -> Backoff {
        Backoff(pirq_shared::backoff::Backoff::new(first, max))
    }

    /// The delay to wait now; the one after it doubles (up to the cap).
    pub fn next_delay(&mut self) -> Duration {
        self.0.next_delay()
    }

    /// Sleeps for [`next_delay`](Self::next_delay).
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }

    /// After a success: the next failure waits `first` again.
    pub fn reset(&mut self) {
        self.0.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_party_default_is_50_ms_doubling_to_2_s() {
        let mut b = Backoff::default();
        let delays: Vec<u64> = (0..8).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(delays, [50, 100, 200, 400, 800, 1600, 2000, 2000]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(50));
    }
}
