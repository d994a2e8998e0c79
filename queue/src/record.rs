//! The two messages of the protocol that carry a query's state: the query record `{P}:q:<id>`
//! (a hash) and the status event `"<id> <status>"` on `{P}:done`.
//!
//! Field names come from [`pirq_shared::layout::query_field`]; the Lua scripts that write the
//! record spell the same names, and `scripts`' tests check they still do.

use std::collections::HashMap;
use std::time::Duration;

use pirq_shared::digest::Digest;
use pirq_shared::error::ErrorCode;
use pirq_shared::layout::query_field as qf;
use pirq_shared::wire::{ErrorBody, QueryResult, QueryStatus};

use crate::{QueueError, RequestId};

/// A query record as the gateway reads it: the result the API answers with, plus the worker's
/// timings once it is done.
#[derive(Clone, Debug)]
pub struct QueryRecord {
    pub result: QueryResult,
    pub scan_us: Option<u64>,
    pub worker_us: Option<u64>,
    /// The `Idempotency-Key` the query came with, if any.
    pub idempotency_key: Option<String>,
}

impl QueryRecord {
    /// Reads the fields of `{P}:q:<id>` (as `HGETALL` returns them).
    pub fn parse(
        id: &RequestId,
        fields: &HashMap<String, Vec<u8>>,
    ) -> Result<QueryRecord, QueueError> {
        let text = |name: &str| fields.get(name).and_then(|v| std::str::from_utf8(v).ok());
        let number = |name: &str| text(name).and_then(|v| v.parse::<u64>().ok());
        let status = text(qf::STATUS)
            .and_then(QueryStatus::parse)
            .ok_or_else(|| malformed(format!("query {id} has no valid status")))?;
        let mut result = QueryResult::pending(id.as_str(), status);
        match status {
            QueryStatus::Queued | QueryStatus::Running => {}
            QueryStatus::Done => {
                let page_size = number(qf::PAGE_SIZE)
                    .filter(|p| *p > 0)
                    .ok_or_else(|| malformed(format!("query {id} is done without a page size")))?;
                let pages = fields
                    .get(qf::PAGES)
                    .ok_or_else(|| malformed(format!("query {id} is done without pages")))?;
                if !(pages.len() as u64).is_multiple_of(page_size) {
                    return Err(malformed(format!(
                        "query {id}: answers are not whole pages"
                    )));
                }
                result.epoch = number(qf::EPOCH);
                result.digest = text(qf::DIGEST).and_then(Digest::from_hex);
                result.pages = pages
                    .chunks(page_size as usize)
                    .map(<[u8]>::to_vec)
                    .collect();
            }
            QueryStatus::Failed => {
                let code = text(qf::ERROR_CODE).unwrap_or(ErrorCode::Internal.as_str());
                let mut error = ErrorBody {
                    code: code.to_string(),
                    message: text(qf::ERROR_MESSAGE).unwrap_or("").to_string(),
                    ..ErrorBody::new(ErrorCode::Internal, "")
                };
                if let Some(i) = number(qf::KEY_INDEX) {
                    error = error.with_key_index(i as usize);
                }
                result.error = Some(error);
            }
        }
        Ok(QueryRecord {
            result,
            scan_us: number(qf::SCAN_US),
            worker_us: number(qf::WORKER_US),
            idempotency_key: text(qf::IDEMPOTENCY_KEY).map(str::to_owned),
        })
    }
}

/// What a worker writes into the record of a query it answered.
#[derive(Clone, Copy, Debug)]
pub struct DoneFields<'a> {
    pub epoch: u64,
    pub page_size: usize,
    /// The answers back to back, one page per key.
    pub pages: &'a [u8],
    pub scan: Duration,
    pub worker: Duration,
}

impl DoneFields<'_> {
    /// `(field, value)` pairs for `HSET`.
    pub fn pairs(&self) -> [(&'static str, Vec<u8>); 6] {
        let num = |n: u64| n.to_string().into_bytes();
        [
            (qf::STATUS, QueryStatus::Done.as_str().as_bytes().to_vec()),
            (qf::EPOCH, num(self.epoch)),
            (qf::PAGE_SIZE, num(self.page_size as u64)),
            (qf::PAGES, self.pages.to_vec()),
            (qf::SCAN_US, num(self.scan.as_micros() as u64)),
            (qf::WORKER_US, num(self.worker.as_micros() as u64)),
        ]
    }
}

fn malformed(detail: String) -> QueueError {
    QueueError::Malformed {
        what: "query record",
        detail,
    }
}

/// A status change, published by workers on `{P}:done` as `"<id> <status>"` (the
/// `mark_running` script builds the same text in Lua). Gateways wake the requests waiting for
/// the id; the record itself is then read again, so the event carries nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusEvent {
    pub id: RequestId,
    pub status: QueryStatus,
}

impl StatusEvent {
    pub fn encode(&self) -> String {
        format!("{} {}", self.id, self.status.as_str())
    }

    /// `None` for a payload that is not an event (never trusted to build a key).
    pub fn parse(payload: &[u8]) -> Option<StatusEvent> {
        let text = std::str::from_utf8(payload).ok()?;
        let (id, status) = text.split_once(' ')?;
        Some(StatusEvent {
            id: RequestId::parse(id).ok()?,
            status: QueryStatus::parse(status)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &[u8])]) -> HashMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_vec()))
            .collect()
    }

    #[test]
    fn events_round_trip_and_reject_junk() {
        let event = StatusEvent {
            id: RequestId::mint(),
            status: QueryStatus::Running,
        };
        assert_eq!(StatusEvent::parse(event.encode().as_bytes()), Some(event));
        for junk in [
            &b"abc done"[..],
            b"",
            b"0123456789abcdef0123456789abcdef",
            b"\xff done",
        ] {
            assert_eq!(StatusEvent::parse(junk), None);
        }
        let id = RequestId::mint();
        assert_eq!(
            StatusEvent::parse(format!("{id} sleeping").as_bytes()),
            None
        );
    }

    #[test]
    fn a_done_record_reads_back_what_a_worker_writes() {
        let id = RequestId::mint();
        let pages = [7u8; 8];
        let done = DoneFields {
            epoch: 3,
            page_size: 4,
            pages: &pages,
            scan: Duration::from_micros(5),
            worker: Duration::from_micros(9),
        };
        let map: HashMap<String, Vec<u8>> = done
            .pairs()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let record = QueryRecord::parse(&id, &map).unwrap();
        assert_eq!(record.result.status, QueryStatus::Done);
        assert_eq!(record.result.epoch, Some(3));
        assert_eq!(record.result.pages, vec![vec![7u8; 4]; 2]);
        assert_eq!((record.scan_us, record.worker_us), (Some(5), Some(9)));
    }

    #[test]
    fn malformed_records_are_errors_not_panics() {
        let id = RequestId::mint();
        for bad in [
            fields(&[]),
            fields(&[(qf::STATUS, b"sleeping")]),
            fields(&[(qf::STATUS, b"done"), (qf::PAGES, b"abc")]),
            fields(&[
                (qf::STATUS, b"done"),
                (qf::PAGE_SIZE, b"2"),
                (qf::PAGES, b"abc"),
            ]),
        ] {
            assert!(matches!(
                QueryRecord::parse(&id, &bad),
                Err(QueueError::Malformed { .. })
            ));
        }
        let failed = fields(&[
            (qf::STATUS, b"failed"),
            (qf::ERROR_CODE, b"invalid_key"),
            (qf::KEY_INDEX, b"2"),
        ]);
        let error = QueryRecord::parse(&id, &failed)
            .unwrap()
            .result
            .error
            .unwrap();
        assert_eq!(
            (error.code.as_str(), error.key_index),
            ("invalid_key", Some(2))
        );
    }
}
