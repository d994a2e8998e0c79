//! `--durability fsync|replica`: answer 202 only once the job is on disk, or on a replica.
//!
//! What the Redis offers is probed, never assumed.
//!
//! `fsync`:
//!
//! - `WAITAOF` known (`COMMAND INFO`, Redis ≥ 7.2): after the submit, `WAITAOF 1 0 <timeout>`
//!   must report the local AOF fsynced; else 503 `not_durable`. Needs `appendonly yes`.
//! - otherwise (Redis 7.0 here): Redis must run `appendonly yes` with `appendfsync always`, so
//!   that it fsyncs the AOF before it replies to the submit. Checked at start (the gateway
//!   refuses to start otherwise, with the reason) and again every [`RECHECK`]: while it does
//!   not hold (a Redis restarted with another configuration), submits get 503 `not_durable`.
//!
//! `replica` (`pirq_queue::replication`): after the submit, `WAIT 1 <timeout>` on the primary
//! that took it must report a replica; else 503 `not_durable`. The primary serving each
//! partition must have a replica online (`INFO replication`): checked at start (the gateway
//! refuses to start otherwise) and every [`RECHECK`]; while a partition's primary has none (a
//! replica down, or just promoted and not yet given one), its submits get 503 `not_durable`
//! at once instead of waiting out the timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pirq_queue::replication::{replicas, PartitionReplicas};
use pirq_queue::sampler::{durability_features, persistence};
use pirq_queue::{Connection, QueueError, RedisTarget};
use pirq_shared::layout::Layout;

/// How often the `appendfsync always` configuration, or the replicas, are checked again.
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
    /// `WAIT 1` after each submit (`--durability replica`).
    Replica,
}

impl Mode {
    /// The `--durability` value that chose this mode, for messages.
    pub fn flag(self) -> &'static str {
        match self {
            Mode::Ack => "ack",
            Mode::WaitAof | Mode::AppendfsyncAlways => "fsync",
            Mode::Replica => "replica",
        }
    }
}

/// The mode, and whether its precondition holds right now.
#[derive(Clone)]
pub struct Durable {
    pub mode: Mode,
    /// Whether the precondition holds, per partition for `replica` (each partition's primary
    /// has its own replicas), one for the whole Redis otherwise.
    ok: Arc<[AtomicBool]>,
}

impl Durable {
    pub fn ack() -> Durable {
        Durable::holding(Mode::Ack, 1)
    }

    fn holding(mode: Mode, flags: u32) -> Durable {
        Durable {
            mode,
            ok: (0..flags).map(|_| AtomicBool::new(true)).collect(),
        }
    }

    /// Whether submits in `partition` may be answered 202 now.
    pub fn holds(&self, partition: u32) -> bool {
        let flag = (partition as usize).min(self.ok.len() - 1);
        self.ok[flag].load(Ordering::Relaxed)
    }

    /// Probes Redis (retrying while it is unreachable, up to `within`) and picks the mode.
    /// Errors say why `--durability fsync` cannot be honoured.
    pub async fn probe(target: &RedisTarget, within: Duration) -> Result<Durable, String> {
        let conn = target
            .connection(Duration::from_secs(2))
            .map_err(|e| e.to_string())?;
        let (version, waitaof) = until_reachable(within, "fsync", "its persistence", || {
            durability_features(&conn)
        })
        .await?;
        let (appendonly, appendfsync) = persistence(&conn).await;
        if waitaof {
            if appendonly.as_deref() == Some("no") {
                return Err(format!(
                    "--durability fsync: redis {version} has WAITAOF but appendonly is off; \
                     set `appendonly yes` (redis.conf or CONFIG SET), or use --durability ack"
                ));
            }
            tracing::info!(redis = %version, "durable accept through WAITAOF");
            return Ok(Durable::holding(Mode::WaitAof, 1));
        }
        match (appendonly.as_deref(), appendfsync.as_deref()) {
            (Some("yes"), Some("always")) => {
                tracing::info!(redis = %version, "durable accept through appendfsync always (no WAITAOF)");
                let d = Durable::holding(Mode::AppendfsyncAlways, 1);
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
                if ok[0].swap(holds, Ordering::Relaxed) != holds {
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

    /// `--durability replica`: checks (retrying while Redis is unreachable, up to `within`)
    /// that the primary serving each partition has a replica online. Errors say which does not.
    pub async fn probe_replica(
        target: &RedisTarget,
        layout: &Layout,
        within: Duration,
    ) -> Result<Durable, String> {
        let conn = target
            .connection(Duration::from_secs(2))
            .map_err(|e| e.to_string())?;
        let found = until_reachable(within, "replica", "its replicas", || {
            replicas(&conn, layout)
        })
        .await?;
        if let Some(bad) = found.iter().find(|p| !p.can_confirm()) {
            return Err(format!(
                "--durability replica: {}; every primary serving the party needs a replica \
                 online (one Redis: start a replica with `replicaof`; a cluster: give each \
                 primary a replica), or use --durability ack",
                no_replica(bad, target.is_cluster())
            ));
        }
        tracing::info!(
            partitions = found.len(),
            "durable accept through WAIT 1 (a replica confirms each submit)"
        );
        let d = Durable::holding(Mode::Replica, layout.partitions());
        d.spawn_replica_recheck(conn, layout.clone(), target.is_cluster());
        Ok(d)
    }

    fn spawn_replica_recheck(&self, conn: Connection, layout: Layout, cluster: bool) {
        let ok = self.ok.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RECHECK).await;
                // Redis unreachable (a primary failing over): that says nothing about the
                // replicas. Keep the last verdict; the submits' own WAIT decides meanwhile.
                let Ok(found) = replicas(&conn, &layout).await else {
                    continue;
                };
                for p in &found {
                    let holds = p.can_confirm();
                    if ok[p.partition as usize].swap(holds, Ordering::Relaxed) != holds {
                        if holds {
                            tracing::info!(
                                partition = p.partition,
                                "a replica is online again; durable accepts resume"
                            );
                        } else {
                            tracing::warn!(
                                partition = p.partition,
                                "{}; refusing its queries with 503 not_durable",
                                no_replica(p, cluster)
                            );
                        }
                    }
                }
            }
        });
    }
}

/// Why `p`'s primary cannot confirm a submit, in words.
fn no_replica(p: &PartitionReplicas, cluster: bool) -> String {
    let node = if cluster {
        format!("the redis primary serving partition {}", p.partition)
    } else {
        "redis".to_string()
    };
    if p.role != "master" {
        format!("{node} is not a primary (role {})", p.role)
    } else {
        format!("{node} has no replica online (INFO replication)")
    }
}

/// Runs a start-up `check` of `--durability MODE` until Redis answers it, retrying every 500 ms
/// for up to `within` (a gateway started beside its Redis outlasts that Redis's start); the
/// warning and the final error name `what` it checks.
async fn until_reachable<T, F, Fut>(
    within: Duration,
    mode: &str,
    what: &str,
    mut check: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, QueueError>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match check().await {
            Ok(v) => return Ok(v),
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::warn!(error = %e, "redis not reachable to check {what}; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => {
                return Err(format!(
                    "--durability {mode}: cannot reach redis to check {what}: {e}"
                ))
            }
        }
    }
}
