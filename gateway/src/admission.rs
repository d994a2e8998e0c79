//! Admission: whether the party takes one more query now. A submit meets the gates in this
//! order, each with its own answer:
//!
//! 1. **Tokens and rates** (`--query-tokens`, `--token-rate`, `--ip-rate`): [`crate::access`],
//!    a middleware before any body is read (401, 429).
//! 2. **Caps** of the host: connections ([`crate::server`], [`crate::caps`]) and, for a request
//!    held for its answer, a waiter slot ([`crate::waiters`]; without one it is queued and
//!    answered 202).
//! 3. **Keys**: at least one, at most `--max-keys-per-query` ([`key_count`], 400).
//! 4. **Durability** (`--durability fsync|replica`): whether a durable accept can be had now
//!    for the request's partition ([`durable_now`], 503 `not_durable`).
//! 5. **Memory** (`--max-redis-memory`): Redis with the results still to come under the cap
//!    ([`memory`], 507 `storage_full`).
//! 6. **Backlog** (`--max-backlog`, `--max-backlog-secs`): the bound the submit enforces
//!    ([`backlog_limit`]) and the answer when it refuses ([`backlog_full`], 429).
//!
//! The numbers behind 5 and 6 are sampled by [`crate::backpressure`], the durability state by
//! [`crate::durability`]; the checks and their answers are here, in one place.

use pirq_queue::RequestId;
use pirq_shared::error::ErrorCode;

use crate::durability::Mode;
use crate::error::ApiError;
use crate::state::AppState;

/// A query's key count against `--max-keys-per-query`.
pub fn key_count(count: usize, max: usize) -> Result<(), ApiError> {
    if count == 0 {
        return Err(ApiError::new(
            ErrorCode::NoKeys,
            "a query needs at least one key",
        ));
    }
    if count > max {
        return Err(ApiError::new(
            ErrorCode::TooManyKeys,
            format!("{count} keys in one query, at most {max} are accepted"),
        ));
    }
    Ok(())
}

/// Whether request `id` can be accepted durably now: its partition's primary has a replica
/// online (`replica`), or Redis fsyncs every write (`fsync`); always under `ack`.
pub fn durable_now(st: &AppState, id: &RequestId) -> Result<(), ApiError> {
    let partition = st.producer.layout().partition_of_id(id.as_str());
    if st.durable.holds(partition) {
        return Ok(());
    }
    let why = match st.durable.mode {
        Mode::Replica => "the redis primary of this request's partition has no replica online now",
        _ => "redis does not fsync every write now (appendfsync always)",
    };
    Err(ApiError::not_durable(st.durable.mode.flag(), why))
}

/// Redis' memory, with the results still to come, against `--max-redis-memory`.
pub fn memory(st: &AppState) -> Result<(), ApiError> {
    if !st.drain.memory_full(st.config.max_redis_memory) {
        return Ok(());
    }
    Err(ApiError::new(
        ErrorCode::StorageFull,
        format!(
            "redis holds {} MiB with the results still to come, over this gateway's \
             --max-redis-memory of {} MiB; results expire, and sooner once fetched",
            st.drain.projected_memory() >> 20,
            st.config.max_redis_memory >> 20
        ),
    )
    .retry_after(crate::backpressure::STORAGE_RETRY_AFTER))
}

/// The backlog bound the submit enforces now: `--max-backlog` jobs, or fewer when
/// `--max-backlog-secs` of work at the party's drain rate is less.
pub fn backlog_limit(st: &AppState) -> u64 {
    st.drain
        .admit_limit(st.config.max_backlog, st.config.max_backlog_secs)
}

/// The answer when the backlog was full (`backlog` jobs waiting, `limit` the bound), counted
/// in `pirq_gateway_queries_throttled_total`, with `Retry-After` from the drain rate.
pub fn backlog_full(st: &AppState, backlog: u64, limit: u64) -> ApiError {
    metrics::counter!(pirq_shared::metrics::GATEWAY_QUERIES_THROTTLED).increment(1);
    let rate = st.drain.rate();
    let retry = st.drain.retry_after(backlog, limit);
    ApiError::new(
        ErrorCode::BacklogFull,
        format!(
            "{backlog} jobs are waiting (limit now {limit}: --max-backlog {} jobs, \
             --max-backlog-secs {} s of work); draining {rate:.1} jobs/s",
            st.config.max_backlog, st.config.max_backlog_secs
        ),
    )
    .retry_after(retry)
}
