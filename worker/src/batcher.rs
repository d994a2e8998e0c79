//! Windows: group jobs into scanner passes by keys, not by jobs.
//!
//! Like Triton's dynamic batcher (max batch size, max queue delay): a window closes as soon as
//! it holds `max_keys` keys, or when its first job has waited `max_wait`, whichever comes first.
//! A full window never waits, and jobs that are already buffered are always taken without
//! waiting. A job is never split: one that would overflow a non-empty window is carried over to
//! open the next one, and one larger than `max_keys` forms a window by itself.
//!
//! [`Batcher::next_window_by`] closes by a [`Close`] rule of the window policy
//! ([`crate::policy`]) instead: stop waiting once the window has `enough` keys, and, while a
//! scan runs that this window must not run beside, keep taking jobs until that scan ends.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::time::timeout_at;

use crate::policy::Close;
use pirq_queue::consumer::Delivery;

/// Resolves when the scans a held window waits for have ended, with when the last of them ended
/// and how many keys it answered.
pub type Idle = Pin<Box<dyn Future<Output = (Instant, usize)> + Send>>;

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
        let close = Close {
            enough: self.max_keys,
            gather: self.max_wait,
            gather_max: self.max_wait,
            gather_from: None,
            until_idle: false,
            expect_back: 0,
        };
        self.next_window_by(close, None).await
    }

    /// The next window, closed by `close`: buffered jobs are always taken (up to `max_keys`);
    /// it then waits for more until it has `close.enough` keys, or `idle` (when given: the end
    /// of the scans running now) has resolved and `close.gather` has passed since the later of
    /// its first job's arrival, `close.gather_from` and (with `gather_from`) that end.
    pub async fn next_window_by(&mut self, close: Close, idle: Option<Idle>) -> Option<Window> {
        let first = match self.carry.take() {
            Some(d) => d,
            None => self.rx.recv().await?,
        };
        let first_received = first.received;
        let start = close
            .gather_from
            .map_or(first_received, |t| t.max(first_received));
        let mut gather_start = tokio::time::Instant::from_std(start);
        let mut deadline = gather_start + close.gather;
        let mut extended = false;
        let enough = close.enough.clamp(1, self.max_keys);
        // When the scanner became free: jobs received before waited through the last scan.
        let mut free_at = close.gather_from.filter(|_| idle.is_none());
        let mut expect_back = close.expect_back;
        // With keys expected back from the last scan: (keys that waited through it, keys that
        // came after it ended).
        let returned = |w: &Window, free_at: Option<Instant>, expect_back: usize| {
            let free_at = free_at.filter(|_| expect_back > 0)?;
            let waited: usize = w
                .deliveries
                .iter()
                .filter(|d| d.received <= free_at)
                .map(Delivery::keys)
                .sum();
            Some((waited, w.keys - waited))
        };
        let all_back = |w: &Window, free_at: Option<Instant>, expect_back: usize| {
            returned(w, free_at, expect_back).is_some_and(|(_, back)| back >= expect_back)
        };
        // The last pass's clients coming back: most of them are, and far faster than jobs came
        // during the scan (see `Close::gather_max`).
        let burst = |w: &Window, free_at: Option<Instant>, expect_back: usize| {
            returned(w, free_at, expect_back)
                .is_some_and(|(waited, back)| back * 2 >= expect_back && back >= waited * 2)
        };
        let mut idle = idle;
        let mut window = Window::default();
        window.push(first);
        while window.keys < self.max_keys {
            let next = match self.rx.try_recv() {
                Ok(d) => d,
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty)
                    if window.keys >= enough || all_back(&window, free_at, expect_back) =>
                {
                    break
                }
                Err(mpsc::error::TryRecvError::Empty) => match idle.as_mut() {
                    Some(wait) => {
                        tokio::select! {
                            d = self.rx.recv() => match d { Some(d) => d, None => break },
                            (ended, answered) = wait => {
                                idle = None;
                                if close.gather_from.is_some() {
                                    // Counted from the end of the scans waited for, and the
                                    // keys expected back are those the last of them answered.
                                    let from = tokio::time::Instant::from_std(ended.max(first_received));
                                    if from + close.gather > deadline {
                                        gather_start = from;
                                        deadline = from + close.gather;
                                    }
                                    free_at = Some(ended);
                                    expect_back = answered;
                                }
                                continue
                            }
                        }
                    }
                    None => match timeout_at(deadline, self.rx.recv()).await {
                        Ok(Some(d)) => d,
                        Ok(None) => break,
                        Err(_)
                            if !extended
                                && close.gather_max > close.gather
                                && burst(&window, free_at, expect_back) =>
                        {
                            extended = true;
                            deadline = gather_start + close.gather_max;
                            continue;
                        }
                        Err(_) => break,
                    },
                },
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
            request_id: Some(pirq_queue::RequestId::parse(&"0".repeat(32)).unwrap()),
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
    async fn a_held_window_takes_jobs_until_the_running_scan_ends() {
        let (tx, rx) = mpsc::channel(16);
        let mut b = Batcher::new(rx, 100, Duration::ZERO);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let idle: Idle = Box::pin(async move {
            let _ = done_rx.await;
            (Instant::now(), 0)
        });
        let close = Close {
            enough: 50,
            gather: Duration::ZERO,
            gather_max: Duration::ZERO,
            gather_from: None,
            until_idle: true,
            expect_back: 0,
        };
        tx.send(job(1)).await.unwrap();
        let feeder = tx.clone();
        tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                feeder.send(job(2)).await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = done_tx.send(());
        });
        // Gather time zero, yet every job sent before the scan ended is in the window.
        let w = b.next_window_by(close, Some(idle)).await.unwrap();
        assert_eq!((w.deliveries.len(), w.keys), (4, 7));
    }

    #[tokio::test]
    async fn a_held_window_with_enough_keys_starts_at_once() {
        let (tx, rx) = mpsc::channel(16);
        let mut b = Batcher::new(rx, 100, Duration::ZERO);
        let idle: Idle = Box::pin(std::future::pending());
        let close = Close {
            enough: 4,
            gather: Duration::from_secs(3600),
            gather_max: Duration::from_secs(3600),
            gather_from: None,
            until_idle: true,
            expect_back: 0,
        };
        for k in [2, 3, 1] {
            tx.send(job(k)).await.unwrap();
        }
        let w = tokio::time::timeout(Duration::from_secs(1), b.next_window_by(close, Some(idle)))
            .await
            .expect("enough keys: no waiting for the running scan")
            .unwrap();
        // Buffered jobs are all taken, past `enough`.
        assert_eq!(w.keys, 6);
    }

    /// A window of the burst case: 8 keys expected back, gather 100 ms, extended to 400 ms.
    fn burst_close(free_at: Instant) -> Close {
        Close {
            enough: 50,
            gather: Duration::from_millis(100),
            gather_max: Duration::from_millis(400),
            gather_from: Some(free_at),
            until_idle: false,
            expect_back: 8,
        }
    }

    #[tokio::test]
    async fn a_burst_of_clients_coming_back_extends_the_gather_until_all_are_back() {
        let (tx, rx) = mpsc::channel(16);
        let mut b = Batcher::new(rx, 100, Duration::ZERO);
        let free_at = Instant::now();
        // 6 of the 8 keys the last pass answered come back at once, 2 stragglers after the
        // plain gather time (100 ms) but within the extended one (400 ms).
        for _ in 0..6 {
            tx.send(job(1)).await.unwrap();
        }
        let late = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            late.send(job(2)).await.unwrap();
        });
        let start = Instant::now();
        let w = b.next_window_by(burst_close(free_at), None).await.unwrap();
        assert_eq!(w.keys, 8, "the stragglers made the window");
        assert!(
            start.elapsed() < Duration::from_millis(390),
            "closed once all were back, not at the extended limit"
        );
    }

    #[tokio::test]
    async fn jobs_at_an_even_rate_are_not_a_burst_and_wait_only_the_gather_time() {
        let (tx, rx) = mpsc::channel(16);
        let mut b = Batcher::new(rx, 100, Duration::ZERO);
        // 4 keys arrived during the scan, 2 after it: arrivals as steady as before, not a
        // closed loop's clients coming back.
        for _ in 0..4 {
            tx.send(job(1)).await.unwrap();
        }
        let free_at = Instant::now();
        tokio::time::sleep(Duration::from_millis(5)).await;
        for _ in 0..2 {
            tx.send(job(1)).await.unwrap();
        }
        let late = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let _ = late.send(job(5)).await;
        });
        let w = b.next_window_by(burst_close(free_at), None).await.unwrap();
        assert_eq!(
            w.keys, 6,
            "closed at the plain gather time, before the late job"
        );
    }

    #[tokio::test]
    async fn the_gather_time_counts_from_when_the_scanner_became_free() {
        let (tx, rx) = mpsc::channel(16);
        let mut b = Batcher::new(rx, 100, Duration::ZERO);
        // A job that waited through a scan that ended just now...
        let mut old = job(1);
        old.received = Instant::now() - Duration::from_secs(5);
        tx.send(old).await.unwrap();
        let close = Close {
            enough: 50,
            gather: Duration::from_millis(300),
            gather_max: Duration::from_millis(300),
            gather_from: Some(Instant::now()),
            until_idle: false,
            expect_back: 0,
        };
        // ...still waits for the jobs that arrive within the gather time after that end.
        let late = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            late.send(job(2)).await.unwrap();
        });
        let w = b.next_window_by(close, None).await.unwrap();
        assert_eq!(w.keys, 3);
    }

    #[tokio::test]
    async fn the_wait_ends_once_the_last_pass_keys_are_back() {
        let (tx, rx) = mpsc::channel(16);
        let mut b = Batcher::new(rx, 100, Duration::ZERO);
        // Two jobs waited through the last scan; it answered 3 keys, whose clients come back.
        let scan_end = Instant::now();
        for _ in 0..2 {
            let mut old = job(1);
            old.received = scan_end - Duration::from_secs(1);
            tx.send(old).await.unwrap();
        }
        let close = Close {
            enough: 50,
            gather: Duration::from_secs(3600),
            gather_max: Duration::from_secs(3600),
            gather_from: Some(scan_end),
            until_idle: false,
            expect_back: 3,
        };
        let late = tx.clone();
        tokio::spawn(async move {
            for k in [1, 2] {
                tokio::time::sleep(Duration::from_millis(20)).await;
                late.send(job(k)).await.unwrap();
            }
        });
        let w = tokio::time::timeout(Duration::from_secs(5), b.next_window_by(close, None))
            .await
            .expect("closes once 2 + 3 keys are in, not after the gather time")
            .unwrap();
        assert_eq!((w.deliveries.len(), w.keys), (4, 5));
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
