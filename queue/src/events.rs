//! The status events as a gateway hears them: one pub/sub subscription to every partition's
//! channel (`{P}:done`, `{P:1}:done`, …: each partition's workers announce on the channel under
//! its hash tag, so that a cluster client sends the announcement with the result), each
//! message's payload passed on as it came: its frames (`record::frames`) name the queries it
//! announces, and a gateway decodes only the frames of queries it waits for (a message carries
//! the answers of a whole finished block, most of them for other gateways' clients).
//!
//! The events are sharded pub/sub: workers `SPUBLISH`, the gateway `SSUBSCRIBE`s. On a Redis
//! Cluster a classic `PUBLISH` is broadcast over the cluster bus to every node, so each event
//! costs CPU on every primary and the queue stops scaling with primaries
//! (`docs/bench/queue-scale.md`); a sharded channel lives on the node serving its slot, and
//! `{P:p}:done` hashes to its partition's slot, so an announcement costs the node that wrote
//! the result and no other. Redis ≥ 7.0 has both commands on one Redis as on a cluster (one
//! Redis is one shard), so there is one path: the scripts and pipelines `SPUBLISH` everywhere,
//! and no argument tells them which Redis they run on.
//!
//! The subscription is a RESP3 connection whose messages come as pushes: on one Redis a
//! multiplexed connection (the `redis` crate has no `ssubscribe` there, so the command is sent
//! as it is, one channel per command: each is answered by exactly one confirmation, which the
//! connection takes as the command's reply); on a cluster the `redis` crate's cluster
//! connection, whose `ssubscribe` sends each channel to the node of its slot (one call per
//! channel: `SSUBSCRIBE` refuses channels of two slots). A node that gives up a slot (failover,
//! resharding) tells its subscribers with an `sunsubscribe` push; the stream ends then, as on a
//! dropped connection, and the caller subscribes again on a fresh connection.

use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use pirq_shared::layout::Layout;
use redis::cluster::ClusterConfig;
use redis::{PushInfo, PushKind, Value};

use crate::connect::Kind;
use crate::{QueueError, RedisTarget};

/// How long subscribing may take before it counts as failed (the caller retries with backoff).
pub const SUBSCRIBE_WITHIN: Duration = Duration::from_secs(5);

/// Subscribes to the party's status events on a connection of its own. The stream ends when
/// the connection drops (on a cluster, when any node's connection drops: the subscription's
/// node may be the one that failed); events published meanwhile are missed, so the caller
/// resubscribes and has every waiter read again.
pub async fn subscribe(
    target: &RedisTarget,
    layout: &Layout,
) -> Result<BoxStream<'static, Vec<u8>>, QueueError> {
    let channels = layout.events();
    let (tx, rx) = futures::channel::mpsc::unbounded::<PushInfo>();
    let alive: Box<dyn std::any::Any + Send> = match target.kind() {
        Kind::Single { events } => {
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(SUBSCRIBE_WITHIN))
                .set_response_timeout(Some(SUBSCRIBE_WITHIN))
                .set_push_sender(tx);
            let attempt = async {
                let mut conn = events
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                for channel in &channels {
                    redis::cmd("SSUBSCRIBE")
                        .arg(channel)
                        .query_async::<()>(&mut conn)
                        .await?;
                }
                Ok::<_, QueueError>(conn)
            };
            Box::new(within(attempt).await?)
        }
        Kind::Cluster { events } => {
            let config = ClusterConfig::new()
                .set_connection_timeout(SUBSCRIBE_WITHIN)
                .set_response_timeout(SUBSCRIBE_WITHIN)
                .set_push_sender(tx);
            let attempt = async {
                let mut conn = events.get_async_connection_with_config(config).await?;
                for channel in &channels {
                    conn.ssubscribe(channel).await?;
                }
                Ok::<_, QueueError>(conn)
            };
            Box::new(within(attempt).await?)
        }
    };
    Ok(rx
        // The connection lives as long as the stream: dropping it ends the pushes.
        .map(move |push| {
            let _alive = &alive;
            push
        })
        .take_while(|push| {
            std::future::ready(!matches!(
                push.kind,
                PushKind::Disconnection | PushKind::SUnsubscribe
            ))
        })
        // The payload is moved out, not copied: a message carries a whole finished block's
        // answers (hundreds of KiB at 4 KiB pages), and copying it per message showed in the
        // gateway's profile as large-chunk malloc and memmove.
        .filter_map(|push| async move {
            if push.kind != PushKind::SMessage {
                return None;
            }
            match push.data.into_iter().nth(1) {
                Some(Value::BulkString(payload)) => Some(payload),
                _ => None,
            }
        })
        .boxed())
}

async fn within<T>(
    attempt: impl std::future::Future<Output = Result<T, QueueError>>,
) -> Result<T, QueueError> {
    tokio::time::timeout(SUBSCRIBE_WITHIN, attempt)
        .await
        .map_err(|_| QueueError::Timeout(SUBSCRIBE_WITHIN))?
}
