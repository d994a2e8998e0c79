//! The status events as a gateway hears them: one pub/sub subscription to `{P}:done`, each
//! message parsed into a [`StatusEvent`] (messages that are not one are skipped).

use std::time::Duration;

use futures::{Stream, StreamExt};
use pirq_shared::layout::Layout;

use crate::{QueueError, RedisTarget, StatusEvent};

/// How long subscribing may take before it counts as failed (the caller retries with backoff).
pub const SUBSCRIBE_WITHIN: Duration = Duration::from_secs(5);

/// Subscribes to the party's status events on a connection of its own. The stream ends when
/// the connection drops; events published meanwhile are missed, so the caller resubscribes and
/// has every waiter read again.
pub async fn subscribe(
    target: &RedisTarget,
    layout: &Layout,
) -> Result<impl Stream<Item = StatusEvent> + Send + 'static, QueueError> {
    let channel = layout.events();
    let attempt = async {
        let mut pubsub = target.client().get_async_pubsub().await?;
        pubsub.subscribe(&channel).await?;
        Ok::<_, QueueError>(pubsub)
    };
    let pubsub = tokio::time::timeout(SUBSCRIBE_WITHIN, attempt)
        .await
        .map_err(|_| QueueError::Timeout(SUBSCRIBE_WITHIN))??;
    Ok(pubsub
        .into_on_message()
        .filter_map(|msg| async move { StatusEvent::parse(msg.get_payload_bytes()) }))
}
