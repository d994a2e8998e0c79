//! Entries written straight into a party's job stream `{P}:jobs`, past the gateway: the jobs a
//! test needs before any gateway runs, or that no gateway would accept (poison).

use pirq_shared::layout::{job_field, Layout};
use pirq_shared::wire::Job;
use redis::aio::ConnectionLike;

/// A job of one 40-byte key, accepted at 1, with the default reply settings: for tests of the
/// queue's submit, which carries the job without reading its keys.
pub fn one_key_job() -> Job {
    Job {
        keys: vec![vec![0u8; 40]],
        epoch: None,
        accepted_ms: 1,
        reply: Default::default(),
    }
}

/// Seconds the `queued` record written by [`enqueue`] lives.
pub const QUEUED_TTL_S: u64 = 600;

/// A `queued` record of one key, accepted at 0, without an Idempotency-Key.
pub const QUEUED_RECORD: &str = "queued 1 0 -";

/// What a gateway's submit leaves behind for a polled query, in one `MULTI`: the record
/// `{P}:q:<id>` `queued` with one key (`pirq_queue::record`'s grammar, expiring after
/// [`QUEUED_TTL_S`]) and the stream entry `id=<id> job=<job>`. `job` is a bincode `wire::Job`,
/// or any bytes at all for a poison entry.
pub async fn enqueue(
    conn: &mut impl ConnectionLike,
    layout: &Layout,
    id: &str,
    job: &[u8],
) -> redis::RedisResult<()> {
    redis::pipe()
        .atomic()
        .cmd("SET")
        .arg(layout.query(id))
        .arg(QUEUED_RECORD)
        .arg("EX")
        .arg(QUEUED_TTL_S)
        .ignore()
        .cmd("XADD")
        // The partition the id lives in, as a gateway would (the record's, one slot).
        .arg(layout.partition(layout.partition_of_id(id)).jobs())
        .arg("*")
        .arg(job_field::ID)
        .arg(id)
        .arg(job_field::JOB)
        .arg(job)
        .ignore()
        .query_async(conn)
        .await
}

/// A stream entry that is no job at all: its one field `junk=<value>`, no request id (so nobody
/// waits for an answer). Returns its entry id.
pub async fn enqueue_junk(
    conn: &mut impl ConnectionLike,
    layout: &Layout,
    value: impl redis::ToRedisArgs,
) -> redis::RedisResult<String> {
    redis::cmd("XADD")
        .arg(layout.jobs())
        .arg("*")
        .arg("junk")
        .arg(value)
        .query_async(conn)
        .await
}
