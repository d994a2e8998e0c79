//! `pirq-queue`: the party's Redis protocol, both sides, in one place.
//!
//! The Redis records are the real interface between a party's two servers; this crate is their
//! only author. The gateway is the [`producer`], the worker the [`consumer`]; both speak through
//! the codecs here, so a renamed field is one edit that both sides see.
//!
//! | module | what it owns |
//! | --- | --- |
//! | [`request_id`] | [`RequestId`]: mint, parse, display |
//! | [`record`] | the query record `{P}:q:<id>` ([`QueryRecord`]) and the status event ([`StatusEvent`]) |
//! | [`registration`] | the database registration `{P}:db` (one database per prefix, its id and digests) and worker heartbeats ([`Registration`]) |
//! | [`digests`] | the digest chain (SPEC §2.1) of the epochs a worker answers |
//! | [`producer`] | submit (with backlog bound and idempotency), load, the epoch append |
//! | [`consumer`] | windows through the consumer group, running/done/failed, ack, reclaim, release |
//! | [`scripts`] | the Lua scripts (`queue/lua/*.lua`), loaded once |
//! | [`probe`] | what this Redis offers (`XACKDEL`, `WAITAOF`, version) |
//! | [`reply`] | raw reply parsing (stream entries, pending lists; RESP2 and RESP3) |
//!
//! ## A request id's way
//!
//! 1. The gateway mints a [`RequestId`] and runs [`scripts::SUBMIT`]: the record `{P}:q:<id>`
//!    becomes `queued` (with a TTL) and a job entry `id=<id> job=<bincode>` joins `{P}:jobs`, in
//!    one step ([`producer::Producer::submit`]).
//! 2. A worker reads the entry through the consumer group ([`consumer::Consumer::read`]); the id is
//!    parsed back ([`RequestId::from_bytes`]) or the entry is discarded.
//! 3. The worker marks the window's records `running` ([`scripts::MARK_RUNNING`]), publishing
//!    `"<id> running"` ([`StatusEvent`]) on `{P}:done`.
//! 4. It writes `done` ([`record::DoneFields`]) or `failed` ([`scripts::FAIL`]), publishes the
//!    event and acknowledges the entry, all in one `MULTI` ([`consumer::Consumer::finish`]).
//! 5. The gateway's subscriber wakes the requests waiting for the id; they read the record
//!    ([`producer::Producer::load`] → [`QueryRecord`]) and answer the client.

pub mod consumer;
pub mod digests;
pub mod probe;
pub mod producer;
pub mod record;
pub mod registration;
pub mod reply;
pub mod request_id;
pub mod scripts;

use std::time::Duration;

pub use record::{QueryRecord, StatusEvent};
pub use registration::{RegisteredDb, Registration};
pub use request_id::RequestId;

/// A Redis failure: unreachable, timed out, or an answer of the wrong shape.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("{0}")]
    Redis(#[from] redis::RedisError),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("malformed {what} in redis: {detail}")]
    Malformed { what: &'static str, detail: String },
}
