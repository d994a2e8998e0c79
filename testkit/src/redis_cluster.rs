//! A real Redis Cluster on 127.0.0.1 for a test: `primaries` `redis-server --cluster-enabled
//! yes` nodes with `replicas` replicas each, joined by `redis-cli --cluster create`, all killed
//! on drop (`scripts/redis-cluster.sh` starts the same for a person or a bench).
//!
//! It is a [`Redis`] whose [`Redis::url`] is `redis+cluster://` with every node: the harness
//! hands it to gateways and workers like any other. Its own process and port are the first
//! node's; [`Redis::cluster`] has them all.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use redis::cluster_async::ClusterConnection;

use crate::process::{free_port, Proc};
use crate::redis_server::{redis_cli, Redis};

/// How long a node may be unreachable before the cluster counts it failed and promotes one of
/// its replicas (`cluster-node-timeout`, ms): short, so a failover test takes seconds.
pub const NODE_TIMEOUT_MS: u64 = 1000;

/// The cluster's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterShape {
    pub primaries: usize,
    /// Replicas of each primary.
    pub replicas: usize,
}

/// The nodes of a test's Redis Cluster, in the order `redis-cli --cluster create` got them
/// (the first `primaries` start as primaries).
pub struct ClusterNodes {
    pub shape: ClusterShape,
    /// Every node but the first (which is the [`Redis`]'s own `proc` and `port`).
    pub others: Vec<ClusterNode>,
}

/// One node besides the first.
pub struct ClusterNode {
    pub proc: Proc,
    pub port: u16,
}

impl Redis {
    /// Starts a Redis Cluster of `shape` on free ports (the cluster bus on port + 10000), waits
    /// until every node says `cluster_state:ok`, and returns it as one [`Redis`].
    pub async fn start_cluster(shape: ClusterShape) -> anyhow::Result<Redis> {
        if shape.primaries < 3 {
            bail!("a Redis Cluster needs at least 3 primaries");
        }
        let dir = tempfile::tempdir()?;
        let count = shape.primaries * (1 + shape.replicas);
        let mut nodes = Vec::new();
        for i in 0..count {
            let port = loop {
                // The cluster bus takes port + 10000: both must be free.
                let port = free_port();
                if port < 55535 && std::net::TcpListener::bind(("127.0.0.1", port + 10000)).is_ok()
                {
                    break port;
                }
            };
            let node_dir = dir.path().join(format!("node-{i}"));
            std::fs::create_dir_all(&node_dir)?;
            let proc = spawn_node(&node_dir, port)?;
            nodes.push(ClusterNode { proc, port });
        }
        for node in &mut nodes {
            wait_answers(node).await?;
        }
        let mut create = Command::new(redis_cli());
        create.args(["--cluster", "create"]);
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        create.args([
            "--cluster-replicas",
            &shape.replicas.to_string(),
            "--cluster-yes",
        ]);
        let out = create
            .output()
            .context("running redis-cli --cluster create (is redis-cli installed?)")?;
        if !out.status.success() {
            bail!(
                "redis-cli --cluster create failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut nodes = nodes.into_iter();
        let first = nodes.next().expect("three nodes at least");
        let redis = Redis {
            proc: first.proc,
            port: first.port,
            dir,
            aof: false,
            tls: None,
            cluster_mode: true,
            cluster: Some(ClusterNodes {
                shape,
                others: nodes.collect(),
            }),
        };
        redis.wait_cluster_ok(Duration::from_secs(90)).await?;
        Ok(redis)
    }

    /// The cluster's nodes, when this is a Redis Cluster ([`Redis::start_cluster`]).
    pub fn cluster(&self) -> Option<&ClusterNodes> {
        self.cluster.as_ref()
    }

    /// Every node's port, the first node's first.
    pub fn node_ports(&self) -> Vec<u16> {
        let mut ports = vec![self.port];
        if let Some(c) = &self.cluster {
            ports.extend(c.others.iter().map(|n| n.port));
        }
        ports
    }

    /// A cluster connection (the `redis` crate's: it follows the slot map), for tests that read
    /// or damage a cluster's keys directly.
    pub async fn cluster_client(&self) -> anyhow::Result<ClusterConnection> {
        let nodes: Vec<String> = self
            .node_ports()
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect();
        Ok(redis::cluster::ClusterClient::new(nodes)?
            .get_async_connection()
            .await?)
    }

    /// The port of the primary serving `key`'s slot now, as the first node that answers says
    /// (`CLUSTER SLOTS`); asked node by node, so that a killed node costs one refused
    /// connection, not a cluster client's retries.
    pub async fn primary_for(&self, key: &str) -> anyhow::Result<u16> {
        let mut slot = None;
        for port in self.node_ports() {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
            let connect = client.get_multiplexed_async_connection();
            let Ok(Ok(mut conn)) = tokio::time::timeout(Duration::from_millis(500), connect).await
            else {
                continue;
            };
            let Ok(key_slot) = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(key)
                .query_async::<i64>(&mut conn)
                .await
            else {
                continue;
            };
            slot = Some(key_slot);
            // Each range: [start, end, [host, port, id, …] of the primary, replicas …].
            let Ok(ranges) = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async::<Vec<redis::Value>>(&mut conn)
                .await
            else {
                continue;
            };
            let int = |v: &redis::Value| match v {
                redis::Value::Int(n) => Some(*n),
                _ => None,
            };
            for range in &ranges {
                let redis::Value::Array(items) = range else {
                    continue;
                };
                let (Some(start), Some(end)) =
                    (items.first().and_then(int), items.get(1).and_then(int))
                else {
                    continue;
                };
                if !(start..=end).contains(&key_slot) {
                    continue;
                }
                if let Some(redis::Value::Array(primary)) = items.get(2) {
                    if let Some(port) = primary.get(1).and_then(int) {
                        return Ok(port as u16);
                    }
                }
            }
        }
        bail!("no node says which primary serves slot {slot:?}")
    }

    /// SIGKILLs the node on `port` (the first node included); it stays down.
    pub fn kill_node(&mut self, port: u16) {
        if port == self.port {
            self.proc.kill();
        } else if let Some(c) = &mut self.cluster {
            for node in c.others.iter_mut().filter(|n| n.port == port) {
                node.proc.kill();
            }
        }
    }

    /// Waits until every node still running says `cluster_state:ok` and serves every slot, and
    /// every replica has its primary's data (`master_link_status:up`: a replica without it is
    /// never promoted).
    pub async fn wait_cluster_ok(&self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            let mut all_ok = true;
            for port in self.node_ports() {
                let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
                    continue;
                };
                let Ok(mut c) = client.get_multiplexed_async_connection().await else {
                    continue; // a node killed on purpose
                };
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async(&mut c)
                    .await
                    .unwrap_or_default();
                if !info.contains("cluster_state:ok") || !info.contains("cluster_slots_ok:16384") {
                    all_ok = false;
                }
                let replication: String = redis::cmd("INFO")
                    .arg("replication")
                    .query_async(&mut c)
                    .await
                    .unwrap_or_default();
                if replication.contains("role:slave")
                    && !replication.contains("master_link_status:up")
                {
                    all_ok = false;
                    if Instant::now() > deadline {
                        eprintln!("replica 127.0.0.1:{port} not synced:\n{replication}");
                    }
                }
            }
            if all_ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the Redis Cluster did not reach cluster_state:ok within {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn spawn_node(dir: &Path, port: u16) -> anyhow::Result<Proc> {
    let mut cmd = Command::new(crate::redis_server());
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .args(["--cluster-enabled", "yes"])
        .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
        // A replica's first copy at once (not after the default 5 s): until it has one, it
        // refuses to be promoted.
        .args(["--repl-diskless-sync-delay", "0"])
        .arg("--cluster-config-file")
        .arg(dir.join("nodes.conf"))
        .arg("--dir")
        .arg(dir);
    Proc::spawn("redis-server", cmd, dir.join("redis.log"))
        .context("is redis-server installed? (scripts/install-deps.sh)")
}

async fn wait_answers(node: &mut ClusterNode) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let client = redis::Client::open(format!("redis://127.0.0.1:{}", node.port))?;
    loop {
        if let Ok(mut c) = client.get_multiplexed_async_connection().await {
            let info = redis::cmd("INFO")
                .arg("server")
                .query_async::<String>(&mut c)
                .await;
            // Ours, not another test's server that took the port first.
            let pid = format!("process_id:{}\r", node.proc.pid());
            if info.is_ok_and(|i| i.contains(&pid)) {
                return Ok(());
            }
        }
        if Instant::now() > deadline || !node.proc.is_running() {
            bail!("redis-server did not start:\n{}", node.proc.log_text());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
