//! The partition count a party runs with, recorded in its Redis (`{P}:partitions`).
//!
//! Which partition a request lives in is its id modulo the count
//! (`pirq_shared::layout::Layout::partition_of_id`), so every gateway and worker of a party must
//! use the same count: a gateway with another one would look for records in the wrong
//! partitions, a worker would leave partitions unread. The first process to start records its
//! count; every later one compares and refuses to start on a difference
//! ([`agree`]). Changing the count is an operator's step (`docs/redis.md`, "Changing the
//! partition count").

use std::time::Duration;

use pirq_shared::layout::Layout;

use crate::{Connection, QueueError};

/// Why a process may not serve with its partition count.
#[derive(Debug, thiserror::Error)]
pub enum Disagreement {
    #[error(
        "this party's Redis records {recorded} partition(s) under the prefix {prefix:?} \
         (key {key}), but this process was started with --partitions {ours} (PIRQ_PARTITIONS); \
         start every gateway and worker of the party with --partitions {recorded}, or change \
         the party's count as docs/redis.md says (drain, stop, delete {key}, restart all with \
         the new count)"
    )]
    Count {
        recorded: String,
        ours: u32,
        prefix: String,
        key: String,
    },
    #[error("reading the party's partition count from Redis: {0}")]
    Queue(#[from] QueueError),
}

/// Records `layout`'s partition count if none is recorded yet (`SET … NX`), and checks it
/// against the recorded one, within `within`.
pub async fn agree(
    conn: &Connection,
    layout: &Layout,
    within: Duration,
) -> Result<(), Disagreement> {
    let key = layout.partition_count();
    let ours = layout.partitions();
    let mut conn = conn.conn.clone();
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg(&key).arg(ours).arg("NX").ignore();
    pipe.cmd("GET").arg(&key);
    let (recorded,): (Option<String>,) =
        tokio::time::timeout(within, crate::one_slot::send(&pipe, &mut conn))
            .await
            .map_err(|_| QueueError::Timeout(within))??;
    let recorded = recorded.unwrap_or_default();
    if recorded.trim().parse::<u32>().ok() == Some(ours) {
        return Ok(());
    }
    Err(Disagreement::Count {
        recorded,
        ours,
        prefix: layout.prefix().to_string(),
        key,
    })
}

/// [`agree`], retried while Redis cannot be reached (a party's processes may start before
/// their Redis): returns once Redis answered, with its verdict.
pub async fn agree_when_reachable(
    conn: &Connection,
    layout: &Layout,
    within: Duration,
) -> Result<(), Disagreement> {
    let mut delay = Duration::from_millis(100);
    loop {
        match agree(conn, layout, within).await {
            Err(Disagreement::Queue(e)) if e.is_transient() => {
                tracing::info!(error = %e, "redis not reachable yet; checking the partition count again shortly");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}
