//! Reliability of the job stream: crash reclaim, delivery limits, dead letters, hand-back at
//! shutdown.
//!
//! - **Reclaim**: the reader claims (`XAUTOCLAIM`) entries that sat unacknowledged longer than
//!   the claim-idle time ([`Consumer::claim_idle`]) with any consumer: those of a worker that died
//!   mid-window, and those handed back. A live worker keeps its own entries fresh
//!   ([`spawn_keeper`]), so a slow pass is never taken from it.
//! - **Delivery limit**: every delivery is counted by Redis. A job that fails while it has
//!   deliveries left is handed back to the group ([`Outcome::Retry`]) for any worker to try again;
//!   a job that fails on its last allowed delivery, or arrives already delivered more than
//!   `--max-deliveries` times (it kept killing workers), goes to the dead-letter stream with the
//!   reason and its query becomes `failed` with that reason ([`Outcome::DeadLetter`]).
//! - **Shutdown**: what the worker still holds when its last window is written (read but not
//!   started) is handed back at once ([`release_held`]), with the delivery it never ran not
//!   counted, so peers take it without waiting for the claim-idle time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use pirq_shared::error::ErrorCode;
use pirq_shared::wire::ErrorBody;
use tokio::sync::watch;

use pirq_queue::consumer::{Consumer, Delivery, EntryId, Outcome};
use pirq_queue::RequestId;
use pirq_shared::wire::Reply;

/// Applies the delivery limit to a window's outcomes: failures with deliveries left are handed
/// back, failures on the last allowed delivery are dead-lettered; entries that are not jobs at
/// all are dead-lettered at once (nobody waits for them, an operator may want to see them).
/// `deliveries` maps entry ids to their delivery counts.
pub fn apply_policy(
    outcomes: Vec<Outcome>,
    deliveries: &HashMap<EntryId, u64>,
    max_deliveries: u64,
) -> Vec<Outcome> {
    outcomes
        .into_iter()
        .map(|o| match o {
            Outcome::Failed {
                entry_id,
                request_id,
                error,
                reply,
                ..
            } => {
                let n = deliveries.get(&entry_id).copied().unwrap_or(1);
                if n < max_deliveries {
                    Outcome::Retry {
                        entry_id,
                        deliveries: n,
                    }
                } else {
                    dead_letter(entry_id, Some(request_id), error, n, reply)
                }
            }
            Outcome::Discard { entry_id } => {
                let n = deliveries.get(&entry_id).copied().unwrap_or(1);
                dead_letter(
                    entry_id,
                    None,
                    ErrorBody::new(
                        ErrorCode::InvalidJob,
                        "stream entry without a valid request id",
                    ),
                    n,
                    Reply::default(),
                )
            }
            other => other,
        })
        .collect()
}

fn dead_letter(
    entry_id: EntryId,
    request_id: Option<RequestId>,
    error: ErrorBody,
    deliveries: u64,
    reply: Reply,
) -> Outcome {
    let message = format!(
        "gave up after {deliveries} deliver{}: {}",
        if deliveries == 1 { "y" } else { "ies" },
        error.message
    );
    Outcome::DeadLetter {
        entry_id,
        request_id,
        error: ErrorBody { message, ..error },
        deliveries,
        reply,
    }
}

/// A delivery past the limit is dead-lettered before it runs: it was delivered more than
/// `max_deliveries` times and never answered, so it most likely kills or stalls workers.
pub fn over_limit(d: &Delivery, max_deliveries: u64) -> Option<Outcome> {
    if d.deliveries <= max_deliveries {
        return None;
    }
    tracing::warn!(
        entry = %d.entry_id, deliveries = d.deliveries,
        "job delivered too often without an answer; dead-lettering it"
    );
    Some(Outcome::DeadLetter {
        entry_id: d.entry_id.clone(),
        request_id: d.request_id,
        reply: d
            .job
            .as_ref()
            .map(|job| job.reply.clone())
            .unwrap_or_default(),
        error: ErrorBody::new(
            ErrorCode::DeliveryLimit,
            format!(
                "delivered {} times without an answer (limit {max_deliveries}); workers died or \
                 stalled on it",
                d.deliveries
            ),
        ),
        deliveries: d.deliveries,
    })
}

/// Refreshes the idle time of the entries this worker holds every third of the claim-idle time,
/// until `stop`.
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

/// Hands back every entry this consumer still holds (at shutdown, after the last window is
/// written): not acknowledged, immediately claimable by any worker, and the delivery that was
/// never run is not counted. Returns how many.
pub async fn release_held(queue: &Consumer) -> Result<usize, pirq_queue::QueueError> {
    let mut total = 0;
    loop {
        let held = queue.own_pending(500).await?;
        if held.is_empty() {
            return Ok(total);
        }
        let n = held.len();
        let back: Vec<(EntryId, u64)> = held
            .into_iter()
            .map(|(id, count)| (id, count.saturating_sub(1)))
            .collect();
        queue.release(&back).await?;
        let table = queue.layout().table_name().to_string();
        metrics::counter!(pirq_shared::metrics::WORKER_JOBS_RELEASED, pirq_shared::metrics::TABLE => table)
            .increment(n as u64);
        total += n;
        // Released entries stay listed under this consumer (with a huge idle time, and left
        // out of `own_pending`): the next round reads the next page of any partition that had
        // more, and an empty one ends.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry_id(id: &str) -> EntryId {
        EntryId {
            partition: 0,
            id: id.into(),
        }
    }

    fn failed(entry: &str) -> Outcome {
        Outcome::Failed {
            entry_id: entry_id(entry),
            request_id: RequestId::parse(&"a".repeat(32)).unwrap(),
            error: ErrorBody::new(ErrorCode::KeyLength, "key 0: bad length"),
            worker: Duration::ZERO,
            reply: Reply::default(),
        }
    }

    #[test]
    fn failures_retry_until_the_last_delivery_then_dead_letter() {
        let counts: HashMap<EntryId, u64> = [(entry_id("1-0"), 1), (entry_id("2-0"), 3)].into();
        let out = apply_policy(vec![failed("1-0"), failed("2-0")], &counts, 3);
        assert!(matches!(&out[0], Outcome::Retry { deliveries: 1, .. }));
        match &out[1] {
            Outcome::DeadLetter {
                error, deliveries, ..
            } => {
                assert_eq!(*deliveries, 3);
                assert_eq!(error.code, "key_length");
                assert!(error.message.starts_with("gave up after 3 deliveries"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn one_delivery_allowed_fails_at_once() {
        let counts = HashMap::new();
        let out = apply_policy(vec![failed("1-0")], &counts, 1);
        assert!(matches!(&out[0], Outcome::DeadLetter { .. }));
    }
}
