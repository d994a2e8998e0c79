//! The two messages of the protocol that carry a query's state: the query record `{Pp}:q:<id>`
//! (a string) and the frames of the status events on `{Pp}:done`.
//!
//! **One key, written once or twice.** A record is one string: a text header line, then, for a
//! `done` record, the answers back to back. A query whose client polls gets a `queued` record at
//! submit; every query gets its final record (`done` or `failed`) from the worker, in one `SET …
//! PX`, which replaces the `queued` one. Nothing else writes it: `running` is only announced
//! (a status event), never stored, so a poll reads `queued` until the answer is there.
//!
//! ```text
//! queued <keys> <accepted_ms> <idem|->[ held]
//! done <epoch> <page_size> <scan_us> <worker_us> <digest|-> <idem|->\n<pages>
//! failed <code> <key_index|-> <worker_us> <idem|-> <message>
//! ```
//!
//! (`-` for an absent value; `<idem>` is the query's `Idempotency-Key`, printable ASCII without
//! spaces; a message never holds a newline; ` held` marks the `queued` record a gateway wrote
//! for a request it held and stopped waiting for, whose answer may be a net in the key's record,
//! [`IdempotencyNet`].) The Lua scripts that write records
//! (`shard_combine.lua`, `fail.lua`) spell the same grammar.
//!
//! **Events carry the record.** A status event is a frame `<id> <length>\n<record>`; one
//! `SPUBLISH` carries the frames of several queries of one partition (all of a finished block),
//! and a final frame carries the whole final record, answers included: the gateway that holds
//! the client's request hands the answer over from the event, without reading Redis. A progress
//! frame's record is the bare status (`running`).

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use pirq_shared::digest::Digest;
use pirq_shared::error::ErrorCode;
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
    /// Reads a record (as `GET` returns it, or as a status event's frame carries it).
    pub fn decode(id: &RequestId, bytes: &[u8]) -> Result<QueryRecord, QueueError> {
        let (header, body) = match bytes.iter().position(|&b| b == b'\n') {
            Some(at) => (&bytes[..at], &bytes[at + 1..]),
            None => (bytes, &[][..]),
        };
        let header = std::str::from_utf8(header)
            .map_err(|_| malformed(format!("query {id}: the record's header is not text")))?;
        let mut words = header.splitn(7, ' ');
        let status = words
            .next()
            .and_then(QueryStatus::parse)
            .ok_or_else(|| malformed(format!("query {id} has no valid status")))?;
        let mut next = |what: &str| {
            words
                .next()
                .ok_or_else(|| malformed(format!("query {id}: the record has no {what}")))
        };
        let number = |word: &str, what: &str| {
            word.parse::<u64>()
                .map_err(|_| malformed(format!("query {id}: {what} {word:?} is not a number")))
        };
        let optional = |word: &str| (word != "-").then(|| word.to_string());
        let mut record = QueryRecord {
            result: QueryResult::pending(id.as_str(), status),
            scan_us: None,
            worker_us: None,
            idempotency_key: None,
        };
        match status {
            QueryStatus::Running => {}
            QueryStatus::Queued => {
                let _keys = number(next("key count")?, "key count")?;
                let _accepted = number(next("acceptance time")?, "acceptance time")?;
                record.idempotency_key = optional(next("idempotency key")?);
            }
            QueryStatus::Done => {
                let epoch = number(next("epoch")?, "epoch")?;
                let page_size = number(next("page size")?, "page size")?;
                record.scan_us = Some(number(next("scan time")?, "scan time")?);
                record.worker_us = Some(number(next("worker time")?, "worker time")?);
                let digest = next("digest")?;
                record.idempotency_key = optional(next("idempotency key")?);
                if page_size == 0 || !(body.len() as u64).is_multiple_of(page_size) {
                    return Err(malformed(format!(
                        "query {id}: answers are not whole pages"
                    )));
                }
                record.result.epoch = Some(epoch);
                record.result.digest = Digest::from_hex(digest);
                record.result.pages = body
                    .chunks(page_size as usize)
                    .map(<[u8]>::to_vec)
                    .collect();
            }
            QueryStatus::Failed => {
                let code = next("error code")?.to_string();
                let key_index = optional(next("key index")?);
                record.worker_us = Some(number(next("worker time")?, "worker time")?);
                record.idempotency_key = optional(next("idempotency key")?);
                // The rest of the line, spaces and all.
                let message = words.collect::<Vec<_>>().join(" ");
                let mut error = ErrorBody {
                    code,
                    message,
                    ..ErrorBody::new(ErrorCode::Internal, "")
                };
                if let Some(i) = key_index.and_then(|i| i.parse::<usize>().ok()) {
                    error = error.with_key_index(i);
                }
                record.result.error = Some(error);
            }
        }
        Ok(record)
    }
}

/// The `queued` record a gateway writes at submit for a query whose client polls.
pub fn queued(keys: usize, accepted_ms: u64, idempotency_key: Option<&str>) -> Vec<u8> {
    format!(
        "queued {keys} {accepted_ms} {}",
        idempotency_key.unwrap_or("-")
    )
    .into_bytes()
}

/// The mark after a `queued` record ([`queued`]) that a gateway writes for a request it held
/// and stopped waiting for (its wait ran out, Redis failed under it, it shut down) when it had
/// asked for the answer's net in the Idempotency-Key record: the worker, which cannot know that
/// the gateway gave up early, may still write the answer there and not here, so a read of this
/// record follows the key's record ([`held_net_key`]). Older readers ignore it.
pub const HELD_MARK: &str = " held";

/// [`queued`] with [`HELD_MARK`].
pub fn queued_after_hold(keys: usize, accepted_ms: u64, idempotency_key: &str) -> Vec<u8> {
    let mut record = queued(keys, accepted_ms, Some(idempotency_key));
    record.extend_from_slice(HELD_MARK.as_bytes());
    record
}

/// The Idempotency-Key whose record may hold the answer of a query whose record `bytes` is a
/// `queued` one marked [`HELD_MARK`].
pub fn held_net_key(bytes: &[u8]) -> Option<&str> {
    let header = std::str::from_utf8(bytes.strip_prefix(b"queued ")?).ok()?;
    let words: Vec<&str> = header.split(' ').collect();
    match words.as_slice() {
        [_, _, key, "held"] if *key != "-" => Some(key),
        _ => None,
    }
}

/// The `failed` record of a query (message on one line).
pub fn failed(error: &ErrorBody, worker: Duration, idempotency_key: Option<&str>) -> Vec<u8> {
    let key_index = error
        .key_index
        .map_or_else(|| "-".to_string(), |i| i.to_string());
    let message: String = error
        .message
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    format!(
        "failed {} {key_index} {} {} {message}",
        error.code,
        worker.as_micros(),
        idempotency_key.unwrap_or("-")
    )
    .into_bytes()
}

/// The header line of a `done` record (the answers follow it).
pub fn done_header(done: &DoneFields<'_>, idempotency_key: Option<&str>) -> Vec<u8> {
    format!(
        "done {} {} {} {} {} {}\n",
        done.epoch,
        done.page_size,
        done.scan.as_micros(),
        done.worker.as_micros(),
        done.digest.map_or_else(|| "-".to_string(), |d| d.to_hex()),
        idempotency_key.unwrap_or("-")
    )
    .into_bytes()
}

/// What a worker knows of a query it answered.
#[derive(Clone, Copy, Debug)]
pub struct DoneFields<'a> {
    pub epoch: u64,
    pub page_size: usize,
    /// The answers back to back, one page per key.
    pub pages: &'a Pages,
    pub scan: Duration,
    pub worker: Duration,
    pub digest: Option<Digest>,
}

/// A record on its way to Redis, as one command argument: a `done` record's answers are
/// written from the scanner's buffers, not copied out first.
#[derive(Clone, Debug)]
pub enum Written {
    /// A record held whole (`queued`, `running`, `failed`).
    Plain(Bytes),
    /// A `done` record: its header line, then the answers.
    Done { header: Bytes, pages: Pages },
}

impl Written {
    pub fn done(done: &DoneFields<'_>, idempotency_key: Option<&str>) -> Written {
        Written::Done {
            header: Bytes::from(done_header(done, idempotency_key)),
            pages: done.pages.clone(),
        }
    }

    /// The bare status of a progress event (`running`).
    pub fn progress(status: QueryStatus) -> Written {
        Written::Plain(Bytes::from_static(status.as_str().as_bytes()))
    }

    pub fn len(&self) -> usize {
        match self {
            Written::Plain(b) => b.len(),
            Written::Done { header, pages } => header.len() + pages.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn write_to(&self, out: &mut impl Write) {
        let result = match self {
            Written::Plain(b) => out.write_all(b),
            Written::Done { header, pages } => out
                .write_all(header)
                .and_then(|()| pages.parts.iter().try_for_each(|p| out.write_all(p))),
        };
        result.expect("writing into memory cannot fail");
    }

    /// The bytes joined (a copy; for tests and tools, not the write path).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        self.write_to(&mut v);
        v
    }
}

impl ToRedisArgs for Written {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        let mut arg = out.writer_for_next_arg();
        self.write_to(&mut arg);
    }
}

/// An `Idempotency-Key` record (`{Pp}:idem:<key>`) holding a held query's net, as one command
/// argument: `"<fingerprint> <id>\n<record>"`. The gateway's submit claims the key with
/// `"<fingerprint> <id>"`; an unsharded worker that answers a held query well before its
/// gateway's deadline, when the gateway gave the fingerprint
/// ([`pirq_shared::wire::Reply::idempotency_fingerprint`]), writes the answer's final record
/// after it instead of under the query's own key: the record kept only as a net for a missed
/// event then costs no key and no `PEXPIRE` of its own. Read back by [`idempotency_value`].
pub struct IdempotencyNet<'a> {
    pub fingerprint: &'a str,
    pub id: &'a RequestId,
    pub record: &'a Written,
}

impl ToRedisArgs for IdempotencyNet<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        let mut arg = out.writer_for_next_arg();
        writeln!(arg, "{} {}", self.fingerprint, self.id).expect("writing into memory cannot fail");
        self.record.write_to(&mut arg);
    }
}

/// An `Idempotency-Key` record as read: its `"<fingerprint> <id>"` head, and the final record
/// of a held query's net when one follows ([`IdempotencyNet`]).
pub fn idempotency_value(bytes: &[u8]) -> (String, Option<&[u8]>) {
    match bytes.iter().position(|&b| b == b'\n') {
        Some(at) => (
            String::from_utf8_lossy(&bytes[..at]).into_owned(),
            Some(&bytes[at + 1..]),
        ),
        None => (String::from_utf8_lossy(bytes).into_owned(), None),
    }
}

/// The frames of one status event message, as one `SPUBLISH` argument:
/// `<id> <length>\n<record>` for each query, back to back. A final record longer than
/// [`EVENT_RECORD_MAX`] goes as an empty frame (`<id> 0\n`): "final, read the record".
#[derive(Clone, Debug, Default)]
pub struct Frames {
    frames: Vec<(RequestId, Option<Written>)>,
}

/// The longest record a status event carries. Every gateway of the party hears every message
/// of a partition, and Redis drops a subscriber whose unread messages pass its pub/sub output
/// buffer limit (32 MiB by default): a table of 32 KiB pages answered three keys a query at
/// thousands of queries a second did that on an H200 (2026-11-28, `pirq eth`), and every
/// drop made every waiter read again. A longer record is announced with an empty frame and
/// read by the one gateway that waits for it (`GET`), at the pace it reads.
pub const EVENT_RECORD_MAX: usize = 16 * 1024;

impl Frames {
    /// `record` in the message, or an empty frame (read the record) when it is longer than
    /// [`EVENT_RECORD_MAX`].
    pub fn push(&mut self, id: RequestId, record: Written) {
        let carried = (record.len() <= EVENT_RECORD_MAX).then_some(record);
        self.frames.push((id, carried));
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }
}

impl ToRedisArgs for Frames {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        let mut arg = out.writer_for_next_arg();
        for (id, record) in &self.frames {
            let len = record.as_ref().map_or(0, Written::len);
            writeln!(arg, "{id} {len}").expect("writing into memory cannot fail");
            if let Some(record) = record {
                record.write_to(&mut arg);
            }
        }
    }
}

/// The frames of a status event message, in order; parsing stops at the first malformed frame
/// (nothing in a message is trusted to build a key).
pub fn frames(payload: &[u8]) -> impl Iterator<Item = (RequestId, &[u8])> + '_ {
    let mut rest = payload;
    std::iter::from_fn(move || {
        let newline = rest.iter().position(|&b| b == b'\n')?;
        let head = std::str::from_utf8(&rest[..newline]).ok()?;
        let (id, len) = head.split_once(' ')?;
        let id = RequestId::parse(id).ok()?;
        let len: usize = len.parse().ok()?;
        let body = rest.get(newline + 1..newline + 1 + len)?;
        rest = &rest[newline + 1 + len..];
        Some((id, body))
    })
}

/// What a status event says of one query.
#[derive(Clone, Debug)]
pub enum Notice {
    /// The query moved on but is not final (`running`).
    Progress(QueryStatus),
    /// The query is final: its record, answers included.
    Final(Arc<QueryRecord>),
    /// The query is final, its record too long for the event ([`EVENT_RECORD_MAX`]): read it.
    Read,
}

impl Notice {
    /// A frame's record read as a notice; `None` for one that is not a record.
    pub fn decode(id: &RequestId, record: &[u8]) -> Option<Notice> {
        if record.is_empty() {
            return Some(Notice::Read);
        }
        let record = QueryRecord::decode(id, record).ok()?;
        Some(if record.result.status.is_final() {
            Notice::Final(Arc::new(record))
        } else {
            Notice::Progress(record.result.status)
        })
    }
}

/// A job's answers on their way to Redis: the buffers the scanner answered into, in key order
/// (one, unless the job had more keys than the rotation holds and joined in parts), written
/// into a command straight from those buffers. The worker copies answer bytes once between the
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

/// Milliseconds since the Unix epoch now: the one clock helper, re-exported where the records'
/// deadlines are read.
pub use pirq_shared::clock::unix_ms;

fn malformed(detail: String) -> QueueError {
    QueueError::Malformed {
        what: "query record",
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(pages: &Pages) -> DoneFields<'_> {
        DoneFields {
            epoch: 3,
            page_size: 4,
            pages,
            scan: Duration::from_micros(5),
            worker: Duration::from_micros(9),
            digest: Some(Digest::from_hex(&"ab".repeat(32)).unwrap()),
        }
    }

    #[test]
    fn an_idempotency_record_carries_a_held_querys_net_after_its_claim() {
        let id = RequestId::mint();
        let pages = Pages::new(vec![Bytes::from(vec![7u8; 4]), Bytes::from(vec![b'\n'; 8])]);
        let written = Written::done(&done(&pages), Some("key-1"));
        let fp = "00112233445566778899aabbccddeeff";
        let args = IdempotencyNet {
            fingerprint: fp,
            id: &id,
            record: &written,
        }
        .to_redis_args();
        assert_eq!(args.len(), 1, "one argument");
        let (head, net) = idempotency_value(&args[0]);
        assert_eq!(
            head,
            format!("{fp} {id}"),
            "the claim as the submit wrote it"
        );
        let record = QueryRecord::decode(&id, net.unwrap()).unwrap();
        assert_eq!(record.result.status, QueryStatus::Done);
        assert_eq!(
            record.result.pages,
            vec![vec![7u8; 4], vec![b'\n'; 4], vec![b'\n'; 4]]
        );
        assert_eq!(record.idempotency_key.as_deref(), Some("key-1"));
        // The claim alone, as the submit writes it: no net.
        let claim = format!("{fp} {id}");
        assert_eq!(idempotency_value(claim.as_bytes()), (claim.clone(), None));
    }

    #[test]
    fn a_queued_record_after_a_hold_names_the_key_that_may_hold_the_answer() {
        let id = RequestId::mint();
        let marked = queued_after_hold(2, 1_700_000_000_000, "key-1");
        assert_eq!(held_net_key(&marked), Some("key-1"));
        // Read as any queued record (older gateways ignore the mark).
        let record = QueryRecord::decode(&id, &marked).unwrap();
        assert_eq!(record.result.status, QueryStatus::Queued);
        assert_eq!(record.idempotency_key.as_deref(), Some("key-1"));
        assert_eq!(held_net_key(&queued(2, 1, Some("key-1"))), None);
        assert_eq!(held_net_key(b"done 1 4 5 9 - key-1\nabcd"), None);
    }

    #[test]
    fn a_done_record_reads_back_what_a_worker_writes() {
        let id = RequestId::mint();
        // Two parts (a job joined in two parts), read back as one answer string.
        let pages = Pages::new(vec![Bytes::from(vec![7u8; 4]), Bytes::from(vec![8u8; 8])]);
        let written = Written::done(&done(&pages), Some("key-1"));
        let args = written.to_redis_args();
        assert_eq!(args.len(), 1, "one argument");
        let record = QueryRecord::decode(&id, &args[0]).unwrap();
        assert_eq!(record.result.status, QueryStatus::Done);
        assert_eq!(record.result.epoch, Some(3));
        assert_eq!(record.result.digest, done(&pages).digest);
        assert_eq!(
            record.result.pages,
            vec![vec![7u8; 4], vec![8u8; 4], vec![8u8; 4]]
        );
        assert_eq!((record.scan_us, record.worker_us), (Some(5), Some(9)));
        assert_eq!(record.idempotency_key.as_deref(), Some("key-1"));
        // Answers may hold any byte, newlines included.
        let pages = Pages::from(b"\n\n \n".to_vec());
        let record = QueryRecord::decode(&id, &Written::done(&done(&pages), None).to_vec());
        assert_eq!(record.unwrap().result.pages, vec![b"\n\n \n".to_vec()]);
    }

    #[test]
    fn queued_and_failed_records_read_back() {
        let id = RequestId::mint();
        let q = QueryRecord::decode(&id, &queued(3, 17, Some("k"))).unwrap();
        assert_eq!(q.result.status, QueryStatus::Queued);
        assert_eq!(q.idempotency_key.as_deref(), Some("k"));
        let q = QueryRecord::decode(&id, &queued(3, 17, None)).unwrap();
        assert_eq!(q.idempotency_key, None);

        let error = ErrorBody::new(ErrorCode::KeyLength, "two\nlines and spaces").with_key_index(2);
        let f = QueryRecord::decode(&id, &failed(&error, Duration::from_micros(4), None)).unwrap();
        let got = f.result.error.unwrap();
        assert_eq!(f.result.status, QueryStatus::Failed);
        assert_eq!(
            (got.code.as_str(), got.message.as_str(), got.key_index),
            ("key_length", "two lines and spaces", Some(2))
        );
        assert_eq!(f.worker_us, Some(4));
    }

    #[test]
    fn malformed_records_are_errors_not_panics() {
        let id = RequestId::mint();
        for bad in [
            &b""[..],
            b"sleeping",
            b"done",
            b"done 1 2 3 4 - -\nabc",
            b"done 1 0 3 4 - -\n",
            b"done x 4 3 4 - -\nabcd",
            b"queued 1",
            b"failed",
            b"\xff\xfe",
        ] {
            assert!(
                matches!(
                    QueryRecord::decode(&id, bad),
                    Err(QueueError::Malformed { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn frames_round_trip_and_stop_at_junk() {
        let (a, b) = (RequestId::mint(), RequestId::mint());
        let pages = Pages::from(vec![1u8, b'\n', 3, 4]);
        let mut frames = Frames::default();
        frames.push(a, Written::progress(QueryStatus::Running));
        frames.push(b, Written::done(&done(&pages), None));
        let payload = frames.to_redis_args().remove(0);
        let read: Vec<_> = super::frames(&payload).collect();
        assert_eq!(read.len(), 2);
        assert_eq!(read[0].0, a);
        assert!(matches!(
            Notice::decode(&a, read[0].1),
            Some(Notice::Progress(QueryStatus::Running))
        ));
        match Notice::decode(&b, read[1].1) {
            Some(Notice::Final(r)) => assert_eq!(r.result.pages, vec![pages.to_vec()]),
            other => panic!("{other:?}"),
        }
        for junk in [
            &b"abc 4\nabcd"[..],
            b"",
            b"0123456789abcdef0123456789abcdef",
            b"\xff done",
        ] {
            assert_eq!(super::frames(junk).count(), 0);
        }
        // A record over the bound goes as an empty frame: read it.
        let big = Pages::from(vec![7u8; EVENT_RECORD_MAX + 1]);
        let mut frames = Frames::default();
        frames.push(a, Written::done(&done(&big), None));
        frames.push(b, Written::progress(QueryStatus::Running));
        let payload = frames.to_redis_args().remove(0);
        let read: Vec<_> = super::frames(&payload).collect();
        assert_eq!((read.len(), read[0].1.len()), (2, 0));
        assert!(matches!(Notice::decode(&a, read[0].1), Some(Notice::Read)));
        assert!(matches!(
            Notice::decode(&b, read[1].1),
            Some(Notice::Progress(QueryStatus::Running))
        ));
        // A frame longer than the message is not read.
        let cut = format!("{a} 100\nrunning");
        assert_eq!(super::frames(cut.as_bytes()).count(), 0);
    }
}
