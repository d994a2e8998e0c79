//! What a party's Redis must offer, checked when a gateway or worker starts: a process refuses
//! a Redis that lacks it, with a line that says what to do, instead of failing later on every
//! status event.
//!
//! - Sharded pub/sub (`SPUBLISH` and `SSUBSCRIBE`, Redis 7.0): every status event of the party
//!   goes that way ([`crate::events`]). An older Redis answers `ERR unknown command` to both, so
//!   the gateway would never hear that an answer is ready and the worker's result writes (a
//!   script that ends with `SPUBLISH`) would fail.
//!
//! Asked with `COMMAND INFO` rather than read from the version: a Redis that renamed or removed
//! the command lacks it too.

use crate::{probe, Connection, QueueError};

/// Why a party's Redis cannot serve it, or why asking failed.
#[derive(Debug, thiserror::Error)]
pub enum Unsupported {
    #[error(
        "the party's Redis ({version}) has no SPUBLISH: pirq's status events are sharded \
         pub/sub (SPUBLISH and SSUBSCRIBE, Redis 7.0 or newer; docs/redis.md); run the party \
         on Redis 7.0 or newer"
    )]
    NoShardedPubSub { version: String },
    #[error("asking the party's Redis what it offers: {0}")]
    Queue(#[from] QueueError),
}

/// Checks that the party's Redis (on a cluster, the node of the party's slot: every node runs
/// the same server) offers what pirq needs.
pub async fn check(conn: &Connection) -> Result<(), Unsupported> {
    let mut node = conn.conn.node();
    let version = probe::server_version(&mut node)
        .await
        .map_err(QueueError::from)?;
    let sharded = probe::command_exists(&mut node, "SPUBLISH")
        .await
        .map_err(QueueError::from)?;
    if sharded {
        Ok(())
    } else {
        Err(Unsupported::NoShardedPubSub { version })
    }
}
