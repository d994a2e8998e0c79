//! `pirq-queue`: the party's Redis protocol, both sides, in one place.
//!
//! The Redis records are the real interface between a party's two servers; this crate is their
//! only author. The gateway is the [`producer`], the worker the [`consumer`]; both speak through
//! the codecs here, so a renamed field is one edit that both sides see.
//!
//! | module | what it owns |
//! | --- | --- |
//! | [`record`] | the query record `{P}:q:<id>` ([`QueryRecord`]) and the frames of the status events ([`record::Frames`], [`record::Notice`]) |
//! | [`registration`] | the database registration `{P}:db` (one database per prefix, its id and digests) and worker heartbeats ([`Registration`], written through a worker's [`Registry`]) |
//! | [`digests`] | the digest chain (SPEC §2.1) of the epochs a worker answers |
//! | [`producer`] | submit (batched per partition, with backlog bound and idempotency), load, the epoch append |
//! | [`consumer`] | the delivery lifecycle, one module a job: read, reclaim and hand back, the retry/dead-letter policy, a window's start and finish |
//! | [`scripts`] | the Lua scripts (`queue/lua/*.lua`), loaded once; `script_fields` (a test) holds every name they spell to `pirq_shared::layout` |
//! | [`probe`] | what this Redis offers (`XACKDEL`, `WAITAOF`, version) |
//! | [`reply`] | raw reply parsing (stream entries, pending lists; RESP2 and RESP3) |
//! | [`connect`] | [`RedisTarget`] (what `--redis` names: URL, TLS files) and [`Connection`], the only handles on Redis outside this crate |
//! | [`events`] | the status events a gateway listens to (`{P}:done` and each partition's `{P:p}:done`, pub/sub) |
//! | [`one_slot`] | every pipeline in one hash slot (checked before it is sent), as a Redis Cluster needs |
//! | [`updates`] | the updates stream as a worker reads and trims it |
//! | [`replication`] | `--durability replica`: `WAIT` for a replica after a submit, and which primaries have one |
//! | [`sampler`] | what a gateway reads about its Redis for metrics, admission and durability |
//!
//! ## A request id's way
//!
//! 1. The gateway mints a [`RequestId`] and hands the job to its partition's submitter, which
//!    sends the submits that arrived meanwhile as one batch of two pipelines, the keys' claims
//!    then the jobs ([`producer::Producer::submit`]): each job entry `id=<id> job=<bincode>`
//!    joins `{P}:jobs`;
//!    only a query whose client polls gets a `queued` record `{P}:q:<id>` (with a TTL). A client
//!    that waits (`Prefer: wait`) is answered from the completion event.
//! 2. A worker reads the entry through the consumer group ([`consumer::Consumer::read`]); the id is
//!    parsed back ([`RequestId::from_bytes`]) or the entry is discarded.
//! 3. For queries whose clients follow events, the worker announces `running` (one `SPUBLISH` of
//!    frames per partition, [`consumer::Consumer::mark_running`]); nothing is written.
//! 4. It writes the final record (`done`, [`record::Written::done`], or `failed`,
//!    [`scripts::FAIL`]) in one `SET … PX`, publishes the block's frames (answers included) in one
//!    `SPUBLISH`, and acknowledges and deletes the block's entries in one `XACK` and one `XDEL`
//!    ([`consumer::Consumer::finish`]).
//! 5. The gateway's subscriber hands the final record in the frame to the requests waiting for the
//!    id; a poll reads it ([`producer::Producer::load`] → [`QueryRecord`]).

pub mod connect;
pub mod consumer;
pub mod digests;
pub mod events;
pub(crate) mod one_slot;
pub mod partitions;
pub(crate) mod probe;
pub mod producer;
pub mod record;
pub mod registration;
pub mod replication;
pub(crate) mod reply;
pub mod requirements;
pub mod sampler;
#[cfg(test)]
mod script_fields;
pub(crate) mod scripts;
pub mod updates;

use std::time::Duration;

use pirq_shared::error::ErrorCode;

pub use connect::{Connection, RedisTarget};
/// The request id is the spec crate's (a client checks it too); re-exported where the queue's
/// callers have always found it.
pub use pirq_shared::request_id::{self, RequestId};
pub use record::{Notice, QueryRecord};
pub use registration::{RegisteredDb, Registration, Registry, WorkerRecord};

/// A Redis failure: unreachable, timed out, refused, or an answer of the wrong shape.
///
/// `Display` is for logs (it carries Redis's own words); what a client may be told is
/// [`QueueError::code`] and [`QueueError::public_message`], which never do.
#[derive(Clone, Debug, thiserror::Error)]
pub enum QueueError {
    #[error("{0}")]
    Redis(RedisFailure),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("malformed {what} in redis: {detail}")]
    Malformed { what: &'static str, detail: String },
}

/// An error from the Redis client, kept opaque so that no crate outside this one sees a type of
/// the `redis` crate.
#[derive(Clone, Debug)]
pub struct RedisFailure(redis::RedisError);

impl std::fmt::Display for RedisFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl From<redis::RedisError> for QueueError {
    fn from(e: redis::RedisError) -> QueueError {
        QueueError::Redis(RedisFailure(e))
    }
}

/// What kind of failure, as the mapping to pirq's error codes sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// No connection, or it broke (Redis down, restarting, cut off).
    Unreachable,
    /// Connected but no answer in time.
    Timeout,
    /// Redis is out of memory (`maxmemory` reached, `OOM`).
    OutOfMemory,
    /// Redis cannot take writes for now: loading its data, a replica being promoted, a cluster
    /// slot moving or down (`LOADING`, `READONLY`, `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`).
    NotServing,
    /// Redis refused a command of the protocol (a bug, or a Redis too old for it).
    Refused,
    /// A record or reply of the wrong shape.
    Malformed,
}

impl QueueError {
    /// The failure's kind.
    pub fn kind(&self) -> FailureKind {
        match self {
            QueueError::Timeout(_) => FailureKind::Timeout,
            QueueError::Malformed { .. } => FailureKind::Malformed,
            QueueError::Redis(RedisFailure(e)) => {
                if e.is_timeout() {
                    return FailureKind::Timeout;
                }
                if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
                    return FailureKind::Unreachable;
                }
                match e.code() {
                    Some("OOM") => FailureKind::OutOfMemory,
                    Some(
                        "LOADING" | "READONLY" | "MASTERDOWN" | "CLUSTERDOWN" | "TRYAGAIN"
                        | "MOVED" | "ASK" | "BUSY",
                    ) => FailureKind::NotServing,
                    Some(_) => FailureKind::Refused,
                    None => match e.kind() {
                        redis::ErrorKind::Parse | redis::ErrorKind::UnexpectedReturnType => {
                            FailureKind::Malformed
                        }
                        redis::ErrorKind::ClusterConnectionNotFound => FailureKind::NotServing,
                        redis::ErrorKind::Io => FailureKind::Unreachable,
                        _ => FailureKind::Refused,
                    },
                }
            }
        }
    }

    /// The Redis error code (`NOGROUP`, `BUSYGROUP`, …) of a refused command.
    pub fn redis_code(&self) -> Option<&str> {
        match self {
            QueueError::Redis(RedisFailure(e)) => e.code(),
            _ => None,
        }
    }

    /// The pirq error code a client is answered with.
    pub fn code(&self) -> ErrorCode {
        match self.kind() {
            FailureKind::Unreachable | FailureKind::Timeout | FailureKind::NotServing => {
                ErrorCode::RedisUnavailable
            }
            FailureKind::OutOfMemory => ErrorCode::StorageFull,
            FailureKind::Refused | FailureKind::Malformed => ErrorCode::Internal,
        }
    }

    /// What a client may be told: pirq's own words for the kind, never Redis's text (which can
    /// name keys, scripts, addresses or configuration).
    pub fn public_message(&self) -> String {
        match (self.kind(), self) {
            (_, QueueError::Timeout(d)) => {
                format!("redis unavailable: no answer within {} ms", d.as_millis())
            }
            (FailureKind::Timeout, _) => "redis unavailable: no answer in time".into(),
            (FailureKind::Unreachable, _) => "redis unavailable: not reachable".into(),
            (FailureKind::NotServing, _) => {
                "redis unavailable: not taking writes for now (loading or failing over)".into()
            }
            (FailureKind::OutOfMemory, _) => {
                "the party's redis is out of memory; results expire, try again shortly".into()
            }
            (FailureKind::Refused, _) => "the party's redis refused a queue command".into(),
            (FailureKind::Malformed, QueueError::Malformed { what, .. }) => {
                format!("malformed {what} in the party's redis")
            }
            (FailureKind::Malformed, _) => "malformed record in the party's redis".into(),
        }
    }

    /// Whether trying again soon may succeed (Redis down, slow, busy, failing over or full).
    pub fn is_transient(&self) -> bool {
        !matches!(self.kind(), FailureKind::Refused | FailureKind::Malformed)
    }
}

#[cfg(test)]
mod error_tests {
    use super::*;

    fn server(kind: redis::ServerErrorKind, text: &str) -> QueueError {
        redis::RedisError::from((redis::ErrorKind::Server(kind), "x", text.to_string())).into()
    }

    #[test]
    fn redis_text_never_reaches_the_public_message() {
        let io: QueueError = redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "secret-host:6379 refused",
        ))
        .into();
        assert_eq!(io.code(), ErrorCode::RedisUnavailable);
        assert!(!io.public_message().contains("secret"));
        let timeout = QueueError::Timeout(Duration::from_millis(1500));
        assert_eq!(timeout.code(), ErrorCode::RedisUnavailable);
        assert_eq!(
            timeout.public_message(),
            "redis unavailable: no answer within 1500 ms"
        );
        let malformed = QueueError::Malformed {
            what: "query record",
            detail: "field secret".into(),
        };
        assert_eq!(malformed.code(), ErrorCode::Internal);
        assert!(!malformed.public_message().contains("secret"));
        assert!(!malformed.is_transient());
        let oom: QueueError = redis::make_extension_error(
            "OOM".into(),
            Some("command not allowed when used memory > 'maxmemory'".into()),
        )
        .into();
        assert_eq!(oom.code(), ErrorCode::StorageFull);
        assert!(!oom.public_message().contains("maxmemory'"));
        let failover = server(
            redis::ServerErrorKind::ReadOnly,
            "You can't write against a read only replica.",
        );
        assert_eq!(failover.code(), ErrorCode::RedisUnavailable);
        assert!(failover.is_transient());
        let refused = server(
            redis::ServerErrorKind::ResponseError,
            "unknown command 'XACKDEL', with args beginning with: secret",
        );
        assert_eq!(refused.code(), ErrorCode::Internal);
        assert_eq!(refused.redis_code(), Some("ERR"));
        assert!(!refused.public_message().contains("secret"));
    }
}
