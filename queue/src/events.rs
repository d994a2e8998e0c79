//! The status events as a gateway hears them: one pub/sub subscription to every partition's
//! channel (`{P}:done`, `{P:1}:done`, …: each partition's workers announce on the channel under
//! its hash tag, so that a cluster client sends the announcement with the result), each
//! message parsed into a [`StatusEvent`] (messages that are not one are skipped).
//!
//! On a Redis Cluster a `PUBLISH` reaches every node, so the subscription may sit on any of
//! them (one `SUBSCRIBE` naming every channel; a plain channel, unlike a sharded one, is not
//! held to a slot); it is made through the `redis` crate's cluster connection (RESP3, where messages come
//! as pushes), which finds a live node from the slot map.

use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use pirq_shared::layout::Layout;
use redis::cluster::ClusterConfig;
use redis::{PushKind, Value};

use crate::connect::Kind;
use crate::{QueueError, RedisTarget, StatusEvent};

/// How long subscribing may take before it counts as failed (the caller retries with backoff).
pub const SUBSCRIBE_WITHIN: Duration = Duration::from_secs(5);

/// Subscribes to the party's status events on a connection of its own. The stream ends when
/// the connection drops (on a cluster, when any node's connection drops: the subscription's
/// node may be the one that failed); events published meanwhile are missed, so the caller
/// resubscribes and has every waiter read again.
pub async fn subscribe(
    target: &RedisTarget,
    layout: &Layout,
) -> Result<BoxStream<'static, StatusEvent>, QueueError> {
    let channels = layout.events();
    match target.kind() {
        Kind::Single(client) => {
            let attempt = async {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(&channels).await?;
                Ok::<_, QueueError>(pubsub)
            };
            let pubsub = within(attempt).await?;
            Ok(pubsub
                .into_on_message()
                .filter_map(|msg| async move { StatusEvent::parse(msg.get_payload_bytes()) })
                .boxed())
        }
        Kind::Cluster { events } => {
            let (tx, rx) = futures::channel::mpsc::unbounded::<redis::PushInfo>();
            let config = ClusterConfig::new()
                .set_connection_timeout(SUBSCRIBE_WITHIN)
                .set_response_timeout(SUBSCRIBE_WITHIN)
                .set_push_sender(tx);
            let attempt = async {
                let mut conn = events.get_async_connection_with_config(config).await?;
                conn.subscribe(&channels).await?;
                Ok::<_, QueueError>(conn)
            };
            let conn = within(attempt).await?;
            Ok(rx
                // The connection lives as long as the stream: dropping it ends the pushes.
                .map(move |push| {
                    let _alive = &conn;
                    push
                })
                .take_while(|push| std::future::ready(push.kind != PushKind::Disconnection))
                .filter_map(|push| async move {
                    match (push.kind, push.data.get(1)) {
                        (PushKind::Message, Some(Value::BulkString(payload))) => {
                            StatusEvent::parse(payload)
                        }
                        _ => None,
                    }
                })
                .boxed())
        }
    }
}

async fn within<T>(
    attempt: impl std::future::Future<Output = Result<T, QueueError>>,
) -> Result<T, QueueError> {
    tokio::time::timeout(SUBSCRIBE_WITHIN, attempt)
        .await
        .map_err(|_| QueueError::Timeout(SUBSCRIBE_WITHIN))?
}
