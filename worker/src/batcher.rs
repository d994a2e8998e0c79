//! Windows: group jobs into scanner passes by keys, not by jobs.
//!
//! Like Triton's dynamic batcher (max batch size, max queue delay): a window closes as soon as
//! it holds `max_keys` keys, or when its first job has waited `max_wait`, whichever comes first.
//! A full window never waits, and jobs that are already buffered are always taken without
//! waiting. A job is never split: one that would overflow a non-empty window is carried over to
//! open the next one, and one larger than `max_keys` forms a window by itself.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::timeout_at;

use crate::queue::Delivery;

/// The jobs of one scanner pass.
#[derive(Debug, Default)]
pub struct Window {
    pub deliveries: Vec<Delivery>,
    pub keys: usize,
}

impl Window {
    fn push(&mut self, d: Delivery) {
        self.keys += d.keys();
        self.deliveries.push(d);
    }

    /// Splits off the jobs pinned to an epoch after `newest` (not applied here yet): they wait
    /// for it apart, so the rest of the window is answered at once. `None` when there are none.
    pub fn split_pinned_ahead(self, newest: u64) -> (Window, Option<Window>) {
        let (now, ahead): (Vec<Delivery>, Vec<Delivery>) =
            self.deliveries.into_iter().partition(|d| {
                d.job
                    .as_ref()
                    .ok()
                    .and_then(|j| j.epoch)
                    .is_none_or(|e| e <= newest)
            });
        let window = |deliveries: Vec<Delivery>| Window {
            keys: deliveries.iter().map(Delivery::keys).sum(),
            deliveries,
        };
        let ahead = (!ahead.is_empty()).then(|| window(ahead));
        (window(now), ahead)
    }
}

pub struct Batcher {
    rx: mpsc::Receiver<Delivery>,
    carry: Option<Delivery>,
    max_keys: usize,
    max_wait: Duration,
}

impl Batcher {
    /// Batches the deliveries arriving on `rx`.
    pub fn new(rx: mpsc::Receiver<Delivery>, max_keys: usize, max_wait: Duration) -> Batcher {
        Batcher {
            rx,
            carry: None,
            max_keys: max_keys.max(1),
            max_wait,
        }
    }

    /// The next window; waits for its first job as long as it takes. `None` once the sender is
    /// gone and nothing is left.
    pub async fn next_window(&mut self) -> Option<Window> {
        let first = match self.carry.take() {
            Some(d) => d,
            None => self.rx.recv().await?,
        };
        let deadline = tokio::time::Instant::from_std(first.received) + self.max_wait;
        let mut window = Window::default();
        window.push(first);
        while window.keys < self.max_keys {
            let next = match self.rx.try_recv() {
                Ok(d) => d,
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) => {
                    match timeout_at(deadline, self.rx.recv()).await {
                        Ok(Some(d)) => d,
                        Ok(None) | Err(_) => break,
                    }
                }
            };
            if window.keys + next.keys() > self.max_keys {
                self.carry = Some(next);
                break;
            }
            window.push(next);
        }
        Some(window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pirq_shared::wire::Job;
    use std::time::Instant;

    fn job(keys: usize) -> Delivery {
        Delivery {
            entry_id: "0-1".into(),
            request_id: Some("0".repeat(32)),
            job: Ok(Job {
                keys: vec![vec![0u8; 4]; keys],
                epoch: None,
                accepted_ms: 0,
            }),
            received: Instant::now(),
            deliveries: 1,
            gone: false,
        }
    }

    #[tokio::test]
    async fn full_window_does_not_wait() {
        let (tx, rx) = mpsc::channel(16);
        let mut b = Batcher::new(rx, 4, Duration::from_secs(3600));
        for k in [2, 2, 1] {
            tx.send(job(k)).await.unwrap();
        }
        let w = tokio::time::timeout(Duration::from_secs(1), b.next_window())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((w.deliveries.len(), w.keys), (2, 4));
        // The third job was taken off the channel but belongs to the next window.
        drop(tx);
        let w = b.next_window().await.unwrap();
        assert_eq!((w.deliveries.len(), w.keys), (1, 1));
        assert!(b.next_window().await.is_none());
    }

    #[tokio::test]
    async fn overflowing_job_is_carried_and_big_jobs_stand_alone() {
        let (tx, rx) = mpsc::channel(16);
        let mut b = Batcher::new(rx, 4, Duration::ZERO);
        for k in [3, 2, 9, 1] {
            tx.send(job(k)).await.unwrap();
        }
        drop(tx);
        let mut sizes = Vec::new();
        while let Some(w) = b.next_window().await {
            sizes.push(w.keys);
        }
        assert_eq!(sizes, vec![3, 2, 9, 1]);
    }

    #[tokio::test]
    async fn buffered_jobs_join_without_waiting() {
        let (tx, rx) = mpsc::channel(16);
        let mut b = Batcher::new(rx, 100, Duration::ZERO);
        for _ in 0..5 {
            tx.send(job(1)).await.unwrap();
        }
        let w = b.next_window().await.unwrap();
        assert_eq!(w.keys, 5);
    }

    #[tokio::test]
    async fn waits_for_stragglers_until_the_deadline() {
        let (tx, rx) = mpsc::channel(16);
        let mut b = Batcher::new(rx, 100, Duration::from_millis(200));
        tx.send(job(1)).await.unwrap();
        let late = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            late.send(job(2)).await.unwrap();
        });
        let start = Instant::now();
        let w = b.next_window().await.unwrap();
        assert_eq!(w.keys, 3);
        assert!(
            start.elapsed() >= Duration::from_millis(150),
            "closes at the deadline"
        );
    }
}
