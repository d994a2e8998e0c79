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
//!
//! Per table (issue 38): a named table's keys have hash tags of their own (`{P:t:NAME}`,
//! `{P:t:NAME:p}`: `pirq_shared::layout`), so on a Redis Cluster its partitions' slots may sit on
//! other primaries than the table `default`'s, and one probe of `default` says nothing of them.
//! The start-up check covers every table the party lists then (`{P}:tables`); a table's own
//! state ([`Durable::for_table`], made when a request first names it) probes its partitions'
//! primaries at once and re-checks them every [`RECHECK`]. On one Redis every table is on the
//! one node, and the probes agree.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use pirq_queue::replication::{replicas, PartitionReplicas};
use pirq_queue::sampler::{durability_features, persistence, table_names};
use pirq_queue::{Connection, QueueError, RedisTarget};
use pirq_shared::layout::{Layout, DEFAULT_TABLE};

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
    /// that the primary serving each partition has a replica online, the partitions of the
    /// table `default` (`layout`) and of every named table the party lists now. Errors say
    /// which does not. The state returned is `default`'s (a named table's: [`Durable::for_table`]).
    pub async fn probe_replica(
        target: &RedisTarget,
        layout: &Layout,
        within: Duration,
    ) -> Result<Durable, String> {
        let conn = target
            .connection(Duration::from_secs(2))
            .map_err(|e| e.to_string())?;
        let found = until_reachable(within, "replica", "its replicas", || {
            every_table_replicas(&conn, layout)
        })
        .await?;
        for (table, partitions) in &found {
            if let Some(bad) = partitions.iter().find(|p| !p.can_confirm()) {
                return Err(format!(
                    "--durability replica: {}; every primary serving the party needs a replica \
                     online (one Redis: start a replica with `replicaof`; a cluster: give each \
                     primary a replica), or use --durability ack",
                    no_replica(bad, table, target.is_cluster())
                ));
            }
        }
        tracing::info!(
            partitions = layout.partitions(),
            tables = found.len(),
            "durable accept through WAIT 1 (a replica confirms each submit)"
        );
        let d = Durable::holding(Mode::Replica, layout.partitions());
        d.spawn_replica_recheck(conn, layout.clone(), target.is_cluster());
        Ok(d)
    }

    /// The state of the named table `layout`'s submits: under `--durability replica` its own
    /// (its partitions' primaries probed now, and every [`RECHECK`] while the state lives; a
    /// probe that cannot reach Redis leaves them holding, the submits' own `WAIT` deciding),
    /// else this one (`fsync` is about the node the party's commands without a key go to).
    pub async fn for_table(&self, target: &RedisTarget, layout: &Layout) -> Durable {
        if self.mode != Mode::Replica {
            return self.clone();
        }
        let d = Durable::holding(Mode::Replica, layout.partitions());
        let Ok(conn) = target.connection(Duration::from_secs(2)) else {
            return d;
        };
        let cluster = target.is_cluster();
        if let Ok(found) = replicas(&conn, layout).await {
            d.apply(&found, layout.table_name(), cluster);
        }
        d.spawn_replica_recheck(conn, layout.clone(), cluster);
        d
    }

    /// Sets each partition's flag from what its primary said; logs a change.
    fn apply(&self, found: &[PartitionReplicas], table: &str, cluster: bool) {
        apply_to(&self.ok, found, table, cluster);
    }

    /// Re-checks `layout`'s partitions every [`RECHECK`] for as long as this state (a clone of
    /// it) lives: a table's state made twice by two first requests at once leaves no task behind.
    fn spawn_replica_recheck(&self, conn: Connection, layout: Layout, cluster: bool) {
        let ok: Weak<[AtomicBool]> = Arc::downgrade(&self.ok);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RECHECK).await;
                if ok.strong_count() == 0 {
                    return;
                }
                // Redis unreachable (a primary failing over): that says nothing about the
                // replicas. Keep the last verdict; the submits' own WAIT decides meanwhile.
                let Ok(found) = replicas(&conn, &layout).await else {
                    continue;
                };
                let Some(ok) = ok.upgrade() else {
                    return;
                };
                apply_to(&ok, &found, layout.table_name(), cluster);
            }
        });
    }
}

/// `INFO replication` of the primary of every partition of the table `default` (`layout`) and
/// of each named table the party lists (`{P}:tables`), by table name.
async fn every_table_replicas(
    conn: &Connection,
    layout: &Layout,
) -> Result<Vec<(String, Vec<PartitionReplicas>)>, QueueError> {
    let mut found = vec![(DEFAULT_TABLE.to_string(), replicas(conn, layout).await?)];
    for name in table_names(conn, layout).await? {
        // A listed name is a valid one (workers check theirs before they list it).
        let Ok(table) = layout.table(&name) else {
            continue;
        };
        found.push((name, replicas(conn, &table).await?));
    }
    Ok(found)
}

/// [`Durable::apply`] on the flags `ok`.
fn apply_to(ok: &[AtomicBool], found: &[PartitionReplicas], table: &str, cluster: bool) {
    for p in found {
        let holds = p.can_confirm();
        let Some(flag) = ok.get(p.partition as usize) else {
            continue;
        };
        if flag.swap(holds, Ordering::Relaxed) != holds {
            if holds {
                tracing::info!(
                    table,
                    partition = p.partition,
                    "a replica is online again; durable accepts resume"
                );
            } else {
                tracing::warn!(
                    table,
                    partition = p.partition,
                    "{}; refusing its queries with 503 not_durable",
                    no_replica(p, table, cluster)
                );
            }
        }
    }
}

/// Why `p`'s primary (of a partition of `table`) cannot confirm a submit, in words.
fn no_replica(p: &PartitionReplicas, table: &str, cluster: bool) -> String {
    let node = match (cluster, table) {
        (false, _) => "redis".to_string(),
        (true, DEFAULT_TABLE) => format!("the redis primary serving partition {}", p.partition),
        (true, _) => format!(
            "the redis primary serving partition {} of table {table}",
            p.partition
        ),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(partition: u32, role: &str, online: u32) -> PartitionReplicas {
        PartitionReplicas {
            partition,
            role: role.into(),
            online,
        }
    }

    #[test]
    fn a_refusal_names_the_table_whose_primary_has_no_replica_on_a_cluster() {
        let none = partition(2, "master", 0);
        assert_eq!(
            no_replica(&none, "users", true),
            "the redis primary serving partition 2 of table users has no replica online \
             (INFO replication)"
        );
        assert_eq!(
            no_replica(&none, DEFAULT_TABLE, true),
            "the redis primary serving partition 2 has no replica online (INFO replication)"
        );
        // One Redis: one node for every table.
        assert_eq!(
            no_replica(&none, "users", false),
            "redis has no replica online (INFO replication)"
        );
        assert!(no_replica(&partition(0, "slave", 0), "users", true).contains("not a primary"));
    }

    #[test]
    fn each_partition_s_flag_follows_its_primary() {
        let d = Durable::holding(Mode::Replica, 3);
        d.apply(
            &[
                partition(0, "master", 1),
                partition(1, "master", 0),
                partition(2, "slave", 1),
            ],
            "users",
            true,
        );
        assert_eq!(
            (0..3).map(|p| d.holds(p)).collect::<Vec<_>>(),
            [true, false, false]
        );
        d.apply(&[partition(1, "master", 2)], "users", true);
        assert!(d.holds(1));
        // A reading of a partition the state does not have changes nothing.
        d.apply(&[partition(7, "master", 0)], "users", true);
        assert!((0..3).all(|p| p == 2 || d.holds(p)));
    }
}
