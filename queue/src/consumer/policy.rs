//! The delivery rules and the retry/dead-letter decision: Redis counts every delivery of an
//! entry; a job that fails while it has deliveries left is handed back to the group
//! ([`Outcome::Retry`]) for any worker to try again; a job that fails on its last allowed
//! delivery, or arrives already delivered more than `--max-deliveries` times (it kept killing
//! workers), goes to the dead-letter stream with the reason and its query becomes `failed` with
//! that reason ([`Outcome::DeadLetter`]). The worker asks ([`Policy::settle`],
//! [`Policy::screen`]); the rule lives here, beside the stream it governs.

use std::time::Duration;

use pirq_shared::error::ErrorCode;
use pirq_shared::wire::{ErrorBody, Reply};

use super::{Delivery, EntryId, Outcome};
use crate::RequestId;

/// The delivery rules: how long an entry may sit unacknowledged with a consumer before another
/// takes it, how often it may be delivered, and the dead-letter stream's cap.
#[derive(Clone, Debug)]
pub struct Policy {
    /// `None`: derived from the longest window seen ([`super::Consumer::claim_idle`]).
    pub claim_idle: Option<Duration>,
    pub max_deliveries: u64,
    pub dead_letter_max: u64,
}

/// Deliveries a job gets by default (`--max-deliveries`): one failure may be bad luck (its
/// worker was killed for another reason), three in a row make the job the likely cause, so it
/// is dead-lettered and its query answered `failed` instead of taking down worker after worker.
pub const DEFAULT_MAX_DELIVERIES: u64 = 3;

/// Default approximate cap on the dead-letter stream (`--dead-letter-max`): room to inspect an
/// incident's poison jobs, and a bound so that a flood of them cannot grow Redis without end.
pub const DEFAULT_DEAD_LETTER_MAX: u64 = 10_000;

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            claim_idle: None,
            max_deliveries: DEFAULT_MAX_DELIVERIES,
            dead_letter_max: DEFAULT_DEAD_LETTER_MAX,
        }
    }
}

impl Policy {
    /// The delivery limit applied to one job's outcome after `deliveries` deliveries: a failure
    /// with deliveries left is handed back for another try, a failure on the last allowed
    /// delivery is dead-lettered; an entry that is not a job at all is dead-lettered at once
    /// (nobody waits for it, an operator may want to see it). Other outcomes stay as they are.
    pub fn settle(&self, outcome: Outcome, deliveries: u64) -> Outcome {
        match outcome {
            Outcome::Failed {
                entry_id,
                request_id,
                error,
                reply,
                ..
            } => {
                if deliveries < self.max_deliveries {
                    Outcome::Retry {
                        entry_id,
                        deliveries,
                    }
                } else {
                    dead_letter(entry_id, Some(request_id), error, deliveries, reply)
                }
            }
            Outcome::Discard { entry_id } => dead_letter(
                entry_id,
                None,
                ErrorBody::new(
                    ErrorCode::InvalidJob,
                    "stream entry without a valid request id",
                ),
                deliveries,
                Reply::default(),
            ),
            other => other,
        }
    }

    /// Splits what was read into the deliveries to run and the dead letters of those past the
    /// limit: delivered more than `max_deliveries` times and never answered, such a job most
    /// likely kills or stalls workers, so it is given up before it runs.
    pub fn screen(&self, deliveries: Vec<Delivery>) -> (Vec<Delivery>, Vec<Outcome>) {
        let (dead, run): (Vec<Delivery>, Vec<Delivery>) = deliveries
            .into_iter()
            .partition(|d| d.deliveries > self.max_deliveries);
        let dead = dead.iter().filter_map(|d| self.over_limit(d)).collect();
        (run, dead)
    }

    /// The dead letter of a delivery past the limit, `None` within it.
    fn over_limit(&self, d: &Delivery) -> Option<Outcome> {
        let max_deliveries = self.max_deliveries;
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
                    "delivered {} times without an answer (limit {max_deliveries}); workers died \
                     or stalled on it",
                    d.deliveries
                ),
            ),
            deliveries: d.deliveries,
        })
    }
}

/// Gives up on an entry: the reason says after how many deliveries.
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

#[cfg(test)]
mod tests {
    use std::time::Instant;

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

    fn policy(max_deliveries: u64) -> Policy {
        Policy {
            max_deliveries,
            ..Policy::default()
        }
    }

    #[test]
    fn failures_retry_until_the_last_delivery_then_dead_letter() {
        let policy = policy(3);
        let retry = policy.settle(failed("1-0"), 1);
        assert!(matches!(retry, Outcome::Retry { deliveries: 1, .. }));
        match policy.settle(failed("2-0"), 3) {
            Outcome::DeadLetter {
                error, deliveries, ..
            } => {
                assert_eq!(deliveries, 3);
                assert_eq!(error.code, "key_length");
                assert!(error.message.starts_with("gave up after 3 deliveries"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn one_delivery_allowed_fails_at_once() {
        let out = policy(1).settle(failed("1-0"), 1);
        match out {
            Outcome::DeadLetter { error, .. } => {
                assert!(error.message.starts_with("gave up after 1 delivery:"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_entry_that_is_not_a_job_is_dead_lettered_at_once() {
        let out = policy(3).settle(
            Outcome::Discard {
                entry_id: entry_id("1-0"),
            },
            1,
        );
        match out {
            Outcome::DeadLetter {
                request_id, error, ..
            } => {
                assert_eq!(request_id, None);
                assert_eq!(error.code, "invalid_job");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn deliveries_past_the_limit_are_dead_lettered_before_they_run() {
        let delivery = |id: &str, deliveries: u64| Delivery {
            entry_id: entry_id(id),
            request_id: None,
            job: Err(pirq_shared::wire::WireError {
                code: ErrorCode::InvalidJob,
                message: "none".into(),
                key_index: None,
            }),
            received: Instant::now(),
            deliveries,
            gone: false,
        };
        let (run, dead) = policy(3).screen(vec![delivery("1-0", 3), delivery("2-0", 4)]);
        assert_eq!(run.len(), 1);
        assert_eq!(run[0].entry_id, entry_id("1-0"));
        match dead.as_slice() {
            [Outcome::DeadLetter {
                entry_id: e,
                error,
                deliveries: 4,
                ..
            }] => {
                assert_eq!(*e, entry_id("2-0"));
                assert_eq!(error.code, "delivery_limit");
                assert!(error.message.contains("(limit 3)"), "{}", error.message);
            }
            other => panic!("{other:?}"),
        }
    }
}
