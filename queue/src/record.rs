//! The two messages of the protocol that carry a query's state: the query record `{P}:q:<id>`
//! (a hash) and the status event `"<id> <status>"` on `{P}:done`.
//!
//! Field names come from [`pirq_shared::layout::query_field`]; the Lua scripts that write the
//! record spell the same names, and `scripts`' tests check they still do.

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use bytes::Bytes;

use pirq_shared::digest::Digest;
use pirq_shared::error::ErrorCode;
use pirq_shared::layout::query_field as qf;
use pirq_shared::wire::{ErrorBody, QueryResult, QueryStatus};
use redis::{RedisWrite, ToRedisArgs};

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

/// A job's answers on their way to Redis: the buffers the scanner answered into, in key order
/// (one, unless the job had more keys than the rotation holds and joined in parts), written as
/// one argument straight from those buffers. The worker copies answer bytes once between the
/// scanner and the socket's write: into the Redis command ([`ToRedisArgs`] below); the client
/// library then packs the commands and frames them (docs/bench/worker-cpu.md).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pages {
    parts: Vec<Bytes>,
}

impl Pages {
    /// The answers of parts joined in order, read as one byte string.
    pub fn new(parts: Vec<Bytes>) -> Pages {
        Pages { parts }
    }

    /// Bytes in all.
    pub fn len(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes joined (a copy; for tests and tools, not the write path).
    pub fn to_vec(&self) -> Vec<u8> {
        self.parts.concat()
    }
}

impl From<Vec<u8>> for Pages {
    fn from(bytes: Vec<u8>) -> Pages {
        Pages::new(vec![Bytes::from(bytes)])
    }
}

impl From<Bytes> for Pages {
    fn from(bytes: Bytes) -> Pages {
        Pages::new(vec![bytes])
    }
}

/// One argument: the parts written into the command's buffer one after another.
impl ToRedisArgs for Pages {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        match self.parts.as_slice() {
            [one] => out.write_arg(one),
            parts => {
                let mut arg = out.writer_for_next_arg();
                for part in parts {
                    arg.write_all(part)
                        .expect("writing into memory cannot fail");
                }
            }
        }
    }
}

/// What a worker writes into the record of a query it answered: `HSET`'s field-value pairs
/// ([`ToRedisArgs`]), the answers written from their buffers, not copied out first.
#[derive(Clone, Copy, Debug)]
pub struct DoneFields<'a> {
    pub epoch: u64,
    pub page_size: usize,
    /// The answers back to back, one page per key.
    pub pages: &'a Pages,
    pub scan: Duration,
    pub worker: Duration,
}

impl ToRedisArgs for DoneFields<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        out.write_arg(qf::STATUS.as_bytes());
        out.write_arg(QueryStatus::Done.as_str().as_bytes());
        out.write_arg(qf::EPOCH.as_bytes());
        out.write_arg_fmt(self.epoch);
        out.write_arg(qf::PAGE_SIZE.as_bytes());
        out.write_arg_fmt(self.page_size);
        out.write_arg(qf::PAGES.as_bytes());
        self.pages.write_redis_args(out);
        out.write_arg(qf::SCAN_US.as_bytes());
        out.write_arg_fmt(self.scan.as_micros());
        out.write_arg(qf::WORKER_US.as_bytes());
        out.write_arg_fmt(self.worker.as_micros());
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
        // Two parts (a job joined in two parts), read back as one answer string.
        let pages = Pages::new(vec![Bytes::from(vec![7u8; 4]), Bytes::from(vec![8u8; 8])]);
        let done = DoneFields {
            epoch: 3,
            page_size: 4,
            pages: &pages,
            scan: Duration::from_micros(5),
            worker: Duration::from_micros(9),
        };
        let args = done.to_redis_args();
        assert_eq!(args.len(), 12, "six field-value pairs");
        let map: HashMap<String, Vec<u8>> = args
            .chunks_exact(2)
            .map(|kv| (String::from_utf8(kv[0].clone()).unwrap(), kv[1].clone()))
            .collect();
        let record = QueryRecord::parse(&id, &map).unwrap();
        assert_eq!(record.result.status, QueryStatus::Done);
        assert_eq!(record.result.epoch, Some(3));
        assert_eq!(
            record.result.pages,
            vec![vec![7u8; 4], vec![8u8; 4], vec![8u8; 4]]
        );
        assert_eq!((record.scan_us, record.worker_us), (Some(5), Some(9)));
        assert_eq!(pages.len(), 12);
        assert_eq!(pages.to_vec(), [[7u8; 4], [8; 4], [8; 4]].concat());
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
