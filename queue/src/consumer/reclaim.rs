//! Reclaim: entries that sat unacknowledged past the claim-idle time with any consumer (a worker
//! that died mid-window, or entries handed back) are claimed (`XAUTOCLAIM`); a live worker keeps
//! its own entries fresh ([`spawn_keeper`]), so a slow pass is never taken from it; at shutdown
//! what it still holds is handed back at once ([`Consumer::release_held`]), the delivery it
//! never ran not counted, so peers take it without waiting for the claim-idle time.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pirq_shared::metrics as m;
use redis::Value;
use tokio::sync::watch;

use super::{Consumer, Delivery, EntryId};
use crate::{one_slot, reply, QueueError};

/// Idle time given to an entry handed back to the group: longer than any `--claim-idle-ms`, so
/// the next `XAUTOCLAIM` of any worker takes it (about 49 days).
const RELEASED_IDLE_MS: u64 = u32::MAX as u64;

/// The floor of the derived claim-idle time.
pub const MIN_AUTO_CLAIM_IDLE: Duration = Duration::from_secs(5);

/// Longest derived claim-idle time: one very slow window (a Redis stall counts into it) must not
/// make a dead worker's jobs wait minutes for a peer.
pub const MAX_AUTO_CLAIM_IDLE: Duration = Duration::from_secs(20);

impl Consumer {
    /// How long an entry may sit with a consumer before another worker claims it: the flag, or
    /// 10 × the recent longest window, between [`MIN_AUTO_CLAIM_IDLE`] and
    /// [`MAX_AUTO_CLAIM_IDLE`]. Entries a live worker holds never reach it: the keeper refreshes
    /// them ([`Consumer::touch_inflight`]) every third of it.
    pub fn claim_idle(&self) -> Duration {
        self.policy.claim_idle.unwrap_or_else(|| {
            auto_claim_idle(Duration::from_micros(
                self.longest_window_us.load(Ordering::Relaxed),
            ))
        })
    }

    /// Records how long a window took (read to outcomes): a longer window than the recent
    /// longest replaces it, a shorter one pulls it down by an eighth of the difference, so a
    /// one-off slow window (a Redis stall) stops counting after a few dozen normal ones.
    pub fn note_window(&self, took: Duration) {
        let took = took.as_micros() as u64;
        let _ = self
            .longest_window_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(decayed_longest(old, took))
            });
    }

    /// Claims up to `count` entries that sat unacknowledged with any consumer (this one
    /// included) for at least `min_idle`: a worker that died, or entries handed back. `cursor`
    /// carries the `XAUTOCLAIM` scan position between calls (start with `"0-0"`). Each claim
    /// counts as a delivery.
    pub async fn claim(
        &self,
        partition: u32,
        min_idle: Duration,
        count: usize,
        cursor: &mut String,
    ) -> Result<Vec<Delivery>, QueueError> {
        let mut conn = self.writer.clone();
        let reply: redis::RedisResult<Value> = redis::cmd("XAUTOCLAIM")
            .arg(self.keys(partition).jobs())
            .arg(&self.group)
            .arg(&self.consumer)
            .arg(min_idle.as_millis() as u64)
            .arg(cursor.as_str())
            .arg("COUNT")
            .arg(count.max(1))
            .query_async(&mut conn)
            .await;
        let reply = match reply {
            Err(e) if e.code() == Some("NOGROUP") => {
                self.ensure_group_in(partition).await?;
                return Ok(Vec::new());
            }
            other => other?,
        };
        let Some((next, entries)) = reply::autoclaim(reply) else {
            return Ok(Vec::new());
        };
        if let Some(next) = next {
            *cursor = next;
        }
        let received = Instant::now();
        let mut deliveries: Vec<Delivery> = entries
            .into_iter()
            .map(|(entry_id, fields)| self.delivery(partition, entry_id, fields, received))
            .collect();
        self.drop_gone(partition, &mut deliveries).await?;
        self.hold(&deliveries);
        self.fill_delivery_counts(partition, &mut deliveries)
            .await?;
        if !deliveries.is_empty() {
            metrics::counter!(m::WORKER_JOBS_RECLAIMED, m::TABLE => self.layout().table_name().to_string())
                .increment(deliveries.len() as u64);
        }
        Ok(deliveries)
    }

    /// Entries this consumer still holds in the group of any partition (up to `count` a
    /// partition), with their delivery counts, leaving out those it already handed back (idle
    /// past [`RELEASED_IDLE_MS`] / 2).
    pub async fn own_pending(&self, count: usize) -> Result<Vec<(EntryId, u64)>, QueueError> {
        let mut conn = self.writer.clone();
        let mut held = Vec::new();
        for (p, keys) in self.partitions.iter().enumerate() {
            let reply: Value = redis::cmd("XPENDING")
                .arg(keys.jobs())
                .arg(&self.group)
                .arg("-")
                .arg("+")
                .arg(count.max(1))
                .arg(&self.consumer)
                .query_async(&mut conn)
                .await?;
            held.extend(
                reply::pending(reply)
                    .into_iter()
                    .filter(|(_, _, idle)| *idle < RELEASED_IDLE_MS / 2)
                    .map(|(id, count, _)| {
                        let entry = EntryId {
                            partition: p as u32,
                            id,
                        };
                        (entry, count)
                    }),
            );
        }
        Ok(held)
    }

    /// Hands entries back to the group without acknowledging them: their idle time is set past
    /// any claim-idle time, so the next `XAUTOCLAIM` of any worker takes them, and their
    /// delivery count is set to the given value (the claim adds one).
    pub async fn release(&self, entries: &[(EntryId, u64)]) -> Result<(), QueueError> {
        if entries.is_empty() {
            return Ok(());
        }
        // One pipeline per partition (one hash slot each), sent at once.
        let mut ordered: Vec<&(EntryId, u64)> = entries.iter().collect();
        ordered.sort_by_key(|(id, _)| id.partition);
        let sends = ordered
            .chunk_by(|a, b| a.0.partition == b.0.partition)
            .map(|partition| {
                let mut pipe = redis::pipe();
                for (id, count) in partition {
                    self.release_cmd(&mut pipe, id, *count);
                }
                let mut conn = self.writer.clone();
                async move { one_slot::send::<()>(&pipe, &mut conn).await }
            });
        futures::future::try_join_all(sends).await?;
        self.forget(entries.iter().map(|(id, _)| id));
        Ok(())
    }

    pub(super) fn release_cmd(
        &self,
        pipe: &mut redis::Pipeline,
        entry: &EntryId,
        retry_count: u64,
    ) {
        pipe.cmd("XCLAIM")
            .arg(self.keys(entry.partition).jobs())
            .arg(&self.group)
            .arg(&self.consumer)
            .arg(0)
            .arg(&entry.id)
            .arg("IDLE")
            .arg(RELEASED_IDLE_MS)
            .arg("RETRYCOUNT")
            .arg(retry_count)
            .arg("JUSTID")
            .ignore();
    }

    /// Refreshes the idle time of every entry this worker holds (`XCLAIM … JUSTID` to itself,
    /// which does not count a delivery), so no peer claims a job that is only slow.
    pub async fn touch_inflight(&self) -> Result<usize, QueueError> {
        let mut ids: Vec<EntryId> = self.inflight.lock().unwrap().iter().cloned().collect();
        if ids.is_empty() {
            return Ok(0);
        }
        ids.sort_by_key(|e| e.partition);
        // One command per 500 entries of a partition (each on one stream), all sent at once.
        let claims = ids
            .chunk_by(|a, b| a.partition == b.partition)
            .flat_map(|partition| partition.chunks(500))
            .map(|chunk| {
                let mut cmd = redis::cmd("XCLAIM");
                cmd.arg(self.keys(chunk[0].partition).jobs())
                    .arg(&self.group)
                    .arg(&self.consumer)
                    .arg(0)
                    .arg(chunk.iter().map(|e| e.id.as_str()).collect::<Vec<_>>())
                    .arg("JUSTID");
                let mut conn = self.writer.clone();
                async move { cmd.query_async::<()>(&mut conn).await }
            });
        futures::future::try_join_all(claims).await?;
        Ok(ids.len())
    }

    /// Starts refreshing these entries (read, not yet acknowledged or handed back).
    pub(super) fn hold(&self, deliveries: &[Delivery]) {
        let mut set = self.inflight.lock().unwrap();
        set.extend(deliveries.iter().map(|d| d.entry_id.clone()));
    }

    /// Stops refreshing these entries (acknowledged, handed back, or given up on: then they
    /// become claimable after the claim-idle time).
    pub fn forget<'a>(&self, ids: impl IntoIterator<Item = &'a EntryId>) {
        let mut set = self.inflight.lock().unwrap();
        for id in ids {
            set.remove(id);
        }
    }

    /// Entries currently held.
    pub fn inflight(&self) -> usize {
        self.inflight.lock().unwrap().len()
    }
}

impl Consumer {
    /// Hands back every entry this consumer still holds (at shutdown, after the last window is
    /// written): not acknowledged, immediately claimable by any worker, and the delivery that was
    /// never run is not counted. Returns how many.
    pub async fn release_held(&self) -> Result<usize, QueueError> {
        let mut total = 0;
        loop {
            let held = self.own_pending(500).await?;
            if held.is_empty() {
                return Ok(total);
            }
            let n = held.len();
            let back: Vec<(EntryId, u64)> = held
                .into_iter()
                .map(|(id, count)| (id, count.saturating_sub(1)))
                .collect();
            self.release(&back).await?;
            let table = self.layout().table_name().to_string();
            metrics::counter!(m::WORKER_JOBS_RELEASED, m::TABLE => table).increment(n as u64);
            total += n;
            // Released entries stay listed under this consumer (with a huge idle time, and left
            // out of `own_pending`): the next round reads the next page of any partition that
            // had more, and an empty one ends.
        }
    }
}

/// Refreshes the idle time of the entries `queue` holds every third of the claim-idle time
/// ([`Consumer::touch_inflight`]), until `stop`.
pub fn spawn_keeper(
    queue: Arc<Consumer>,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let period = (queue.claim_idle() / 3).max(Duration::from_millis(50));
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            if let Err(e) = queue.touch_inflight().await {
                tracing::warn!(error = %e, "refreshing held jobs failed; retrying");
            }
        }
    })
}

/// The recent longest window after one of `took` µs.
fn decayed_longest(old: u64, took: u64) -> u64 {
    if took >= old {
        took
    } else {
        old - (old - took) / 8
    }
}

/// 10 × the recent longest window, within [`MIN_AUTO_CLAIM_IDLE`]..=[`MAX_AUTO_CLAIM_IDLE`].
fn auto_claim_idle(longest: Duration) -> Duration {
    (longest * 10).clamp(MIN_AUTO_CLAIM_IDLE, MAX_AUTO_CLAIM_IDLE)
}

#[cfg(test)]
mod claim_idle_tests {
    use super::*;

    #[test]
    fn claim_idle_is_capped_and_decays_after_a_stall() {
        assert_eq!(
            auto_claim_idle(Duration::from_millis(10)),
            MIN_AUTO_CLAIM_IDLE
        );
        assert_eq!(
            auto_claim_idle(Duration::from_secs(10)),
            MAX_AUTO_CLAIM_IDLE
        );
        // A 10 s stall, then 50 ms windows: back to the minimum within 40 windows.
        let mut longest = decayed_longest(50_000, 10_000_000);
        assert_eq!(longest, 10_000_000);
        for _ in 0..40 {
            longest = decayed_longest(longest, 50_000);
        }
        assert_eq!(
            auto_claim_idle(Duration::from_micros(longest)),
            MIN_AUTO_CLAIM_IDLE
        );
        // A longer window counts at once.
        assert_eq!(decayed_longest(longest, 900_000), 900_000);
    }
}
