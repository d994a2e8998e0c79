//! `--durability fsync`: answer 202 only once the job is on disk.
//!
//! What the Redis offers is probed, never assumed:
//!
//! - `WAITAOF` known (`COMMAND INFO`, Redis ≥ 7.2): after the submit, `WAITAOF 1 0 <timeout>`
//!   must report the local AOF fsynced; else 503 `not_durable`. Needs `appendonly yes`.
//! - otherwise (Redis 7.0 here): Redis must run `appendonly yes` with `appendfsync always`, so
//!   that it fsyncs the AOF before it replies to the submit. Checked at start (the gateway
//!   refuses to start otherwise, with the reason) and again every [`RECHECK`]: while it does
//!   not hold (a Redis restarted with another configuration), submits get 503 `not_durable`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pirq_queue::sampler::{durability_features, persistence};
use pirq_queue::{Connection, RedisTarget};

/// How often the `appendfsync always` configuration is checked again.
pub const RECHECK: Duration = Duration::from_secs(5);

/// How long a starting gateway waits for Redis to answer the durability probe: a gateway
/// started beside its Redis (compose, systemd) outlasts that Redis's start, and one pointed at
/// a Redis that never comes up says so within half a minute instead of hanging.
pub const STARTUP_PROBE_WITHIN: Duration = Duration::from_secs(30);

/// How a durable accept is obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `--durability ack`: nothing to wait for.
    Ack,
    /// `WAITAOF 1 0` after each submit.
    WaitAof,
    /// Redis fsyncs before replying (`appendfsync always`).
    AppendfsyncAlways,
}

/// The mode, and whether its precondition holds right now.
#[derive(Clone)]
pub struct Durable {
    pub mode: Mode,
    ok: Arc<AtomicBool>,
}

impl Durable {
    pub fn ack() -> Durable {
        Durable {
            mode: Mode::Ack,
            ok: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Whether submits may be answered 202 now.
    pub fn holds(&self) -> bool {
        self.ok.load(Ordering::Relaxed)
    }

    /// Probes Redis (retrying while it is unreachable, up to `within`) and picks the mode.
    /// Errors say why `--durability fsync` cannot be honoured.
    pub async fn probe(target: &RedisTarget, within: Duration) -> Result<Durable, String> {
        let conn = target
            .connection(Duration::from_secs(2))
            .map_err(|e| e.to_string())?;
        let deadline = tokio::time::Instant::now() + within;
        let (version, waitaof) = loop {
            match durability_features(&conn).await {
                Ok(v) => break v,
                Err(e) if tokio::time::Instant::now() < deadline => {
                    tracing::warn!(error = %e, "redis not reachable to check durability; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => {
                    return Err(format!(
                        "--durability fsync: cannot reach redis to check its persistence: {e}"
                    ))
                }
            }
        };
        let (appendonly, appendfsync) = persistence(&conn).await;
        if waitaof {
            if appendonly.as_deref() == Some("no") {
                return Err(format!(
                    "--durability fsync: redis {version} has WAITAOF but appendonly is off; \
                     set `appendonly yes` (redis.conf or CONFIG SET), or use --durability ack"
                ));
            }
            tracing::info!(redis = %version, "durable accept through WAITAOF");
            return Ok(Durable {
                mode: Mode::WaitAof,
                ok: Arc::new(AtomicBool::new(true)),
            });
        }
        match (appendonly.as_deref(), appendfsync.as_deref()) {
            (Some("yes"), Some("always")) => {
                tracing::info!(redis = %version, "durable accept through appendfsync always (no WAITAOF)");
                let d = Durable {
                    mode: Mode::AppendfsyncAlways,
                    ok: Arc::new(AtomicBool::new(true)),
                };
                d.spawn_recheck(conn);
                Ok(d)
            }
            (a, f) => Err(format!(
                "--durability fsync: redis {version} has no WAITAOF (needs 7.2), so it must run \
                 with `appendonly yes` and `appendfsync always`, but it has appendonly={} \
                 appendfsync={}; set both (redis.conf, or CONFIG SET appendonly yes and CONFIG SET \
                 appendfsync always), or use --durability ack",
                a.unwrap_or("unknown (CONFIG GET refused)"),
                f.unwrap_or("unknown (CONFIG GET refused)")
            )),
        }
    }

    fn spawn_recheck(&self, conn: Connection) {
        let ok = self.ok.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RECHECK).await;
                let (a, f) = persistence(&conn).await;
                let holds = match (a.as_deref(), f.as_deref()) {
                    (Some("yes"), Some("always")) => true,
                    // One of the reads failed (Redis unreachable, or the first command after a
                    // reconnect): that says nothing about its configuration. Keep the last
                    // verdict; submits fail with 503 anyway while Redis is really down.
                    (None, _) | (_, None) => continue,
                    _ => false,
                };
                if ok.swap(holds, Ordering::Relaxed) != holds {
                    if holds {
                        tracing::info!("redis fsyncs every write again; durable accepts resume");
                    } else {
                        tracing::error!(
                            appendonly = ?a, appendfsync = ?f,
                            "redis no longer runs appendfsync always; refusing queries with 503"
                        );
                    }
                }
            }
        });
    }
}
