//! The worker's health as an orchestrator asks for it (Compose or Kubernetes health checks), on
//! the metrics listener beside `/metrics`:
//!
//! - `GET /healthz`, liveness: 200 whenever the worker's async runtime answers. It never asks
//!   Redis, so an orchestrator does not restart every worker of a party through a Redis outage
//!   (they reconnect by themselves and resume; a restart would only reload the database).
//! - `GET /readyz`, readiness: 200 only while the worker serves — the database is loaded and
//!   its digest known, the updates stream caught up, the worker registered, its job-stream reads
//!   succeeding and Redis answering a `PING` within [`PING_TIMEOUT`]. Otherwise 503 with the
//!   reason; within a second or two of Redis going away, and 200 again once it is back.
//!
//! The serve loop and `main` move the [`Stage`] forward and report each read of the job stream;
//! this module only answers from that state and its own `PING`.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pirq_queue::{Connection, QueueError, RedisTarget};

/// How long `/readyz` waits for Redis to answer its `PING`: an orchestrator's probe times out
/// after a few seconds, and an unready answer must come before that.
pub const PING_TIMEOUT: Duration = Duration::from_secs(1);

/// Where a worker is in its life, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Stage {
    /// Opening the database and starting the scanner.
    Loading = 0,
    /// Database ready; waiting for Redis, applying the updates stream, registering.
    Joining = 1,
    /// Registered and consuming the job stream.
    Serving = 2,
    /// Finishing the window in flight before exiting (or replaced by another database).
    Stopping = 3,
}

impl Stage {
    fn from_u8(v: u8) -> Stage {
        match v {
            0 => Stage::Loading,
            1 => Stage::Joining,
            2 => Stage::Serving,
            _ => Stage::Stopping,
        }
    }

    /// Why a worker at this stage is not ready, or `None` at [`Stage::Serving`].
    fn not_ready(self) -> Option<&'static str> {
        match self {
            Stage::Loading => Some("loading the database"),
            Stage::Joining => {
                Some("joining the party: waiting for Redis, applying epochs, registering")
            }
            Stage::Serving => None,
            Stage::Stopping => Some("stopping"),
        }
    }
}

/// The state `/readyz` answers from. Shared (`Arc`) by `main`, the serve loop and the listener.
pub struct Health {
    stage: AtomicU8,
    /// Whether the last read of the job stream succeeded (`XREADGROUP`, `XAUTOCLAIM`).
    reads_ok: AtomicBool,
    /// Its own reconnecting connection: the consumer's are busy in blocking reads.
    redis: Connection,
}

impl Health {
    /// Nothing connects yet; the connection is made on the first `/readyz`.
    pub fn new(target: &RedisTarget) -> Result<Arc<Health>, QueueError> {
        let redis = target.worker_connection(Duration::ZERO)?;
        Ok(Arc::new(Health {
            stage: AtomicU8::new(Stage::Loading as u8),
            reads_ok: AtomicBool::new(true),
            redis,
        }))
    }

    pub fn stage(&self) -> Stage {
        Stage::from_u8(self.stage.load(Ordering::Relaxed))
    }

    /// Moves to `stage`; never back from [`Stage::Stopping`].
    pub fn set_stage(&self, stage: Stage) {
        let _ = self
            .stage
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                (now != Stage::Stopping as u8).then_some(stage as u8)
            });
    }

    /// The serve loop's report of each read of the job stream.
    pub fn note_read(&self, ok: bool) {
        self.reads_ok.store(ok, Ordering::Relaxed);
    }

    /// `Ok` when ready, else why not (a sentence for the 503 body and the orchestrator's log).
    pub async fn ready(&self) -> Result<(), String> {
        if let Some(why) = self.stage().not_ready() {
            return Err(why.to_string());
        }
        match self.redis.ping(PING_TIMEOUT).await {
            Ok(()) => {}
            Err(QueueError::Timeout(_)) => {
                return Err(format!(
                    "redis unreachable: no answer to PING within {} ms",
                    PING_TIMEOUT.as_millis()
                ))
            }
            Err(e) => return Err(format!("redis unreachable: {e}")),
        }
        if !self.reads_ok.load(Ordering::Relaxed) {
            return Err("reading the job stream fails".to_string());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unreachable_health() -> Arc<Health> {
        // A port nothing listens on: the lazy connection never connects.
        let target = RedisTarget::open("redis://127.0.0.1:1", Default::default()).unwrap();
        Health::new(&target).unwrap()
    }

    #[tokio::test]
    async fn each_stage_before_serving_says_why_it_is_not_ready() {
        let health = unreachable_health();
        assert_eq!(health.ready().await.unwrap_err(), "loading the database");
        health.set_stage(Stage::Joining);
        assert!(health.ready().await.unwrap_err().starts_with("joining"));
        health.set_stage(Stage::Serving);
        assert!(health
            .ready()
            .await
            .unwrap_err()
            .starts_with("redis unreachable"));
    }

    #[tokio::test]
    async fn stopping_is_final() {
        let health = unreachable_health();
        health.set_stage(Stage::Stopping);
        health.set_stage(Stage::Serving);
        assert_eq!(health.stage(), Stage::Stopping);
        assert_eq!(health.ready().await.unwrap_err(), "stopping");
    }
}
