//! A real `redis-server` per test: on a free port, in its own directory, killed on drop.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use redis::aio::{ConnectionManager, MultiplexedConnection};
use tempfile::TempDir;

use crate::process::{free_port, Proc};
use crate::tls::{CertFiles, TestCa};

/// The `redis-server` the suites run against: `$PIRQ_REDIS_SERVER` when set (scripts/test.sh runs
/// the durability and fault suites a second time with Redis 7.4 from
/// `scripts/install-redis74.sh`), else the one on `PATH`.
pub fn redis_server() -> String {
    std::env::var("PIRQ_REDIS_SERVER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "redis-server".to_string())
}

/// Whether every Redis of the suites runs in cluster mode ([`Redis::start_cluster_mode`]):
/// `PIRQ_REDIS_CLUSTER_MODE=1` runs any suite so, to find a script, transaction or pipeline whose
/// keys would span two slots of a Redis Cluster.
pub fn cluster_mode_from_env() -> bool {
    std::env::var("PIRQ_REDIS_CLUSTER_MODE").is_ok_and(|v| v == "1")
}

/// A `redis-server` on a free port in its own directory: without persistence, or with an
/// append-only file fsynced on every write ([`Redis::start_aof`]), or over TLS only
/// ([`Redis::start_tls`]); in cluster mode with every slot its own
/// ([`Redis::start_cluster_mode`]).
pub struct Redis {
    pub proc: Proc,
    pub port: u16,
    pub(crate) dir: TempDir,
    pub(crate) aof: bool,
    pub(crate) tls: Option<RedisTls>,
    pub(crate) cluster_mode: bool,
    /// The other nodes of a real Redis Cluster ([`Redis::start_cluster`]).
    pub(crate) cluster: Option<crate::redis_cluster::ClusterNodes>,
}

/// The `redis-cli` beside [`redis_server`] (same directory when `$PIRQ_REDIS_SERVER` names
/// one), else the one on `PATH`.
pub fn redis_cli() -> String {
    let server = redis_server();
    match Path::new(&server).parent() {
        Some(dir) if !dir.as_os_str().is_empty() && dir.join("redis-cli").exists() => {
            dir.join("redis-cli").display().to_string()
        }
        _ => "redis-cli".to_string(),
    }
}

/// The files of a Redis that speaks TLS only (`--port 0 --tls-port PORT`).
#[derive(Clone, Debug)]
pub struct RedisTls {
    /// The CA that signed the server's certificate (and the client's).
    pub ca_cert: PathBuf,
    pub server: CertFiles,
    /// The certificate clients must show (`--tls-auth-clients yes`); `None`: none asked for.
    pub client: Option<CertFiles>,
}

impl RedisTls {
    /// The flags a gateway or worker needs to reach this Redis.
    pub fn client_args(&self) -> Vec<String> {
        let mut args = vec![
            "--redis-ca-cert".to_string(),
            self.ca_cert.display().to_string(),
        ];
        if let Some(client) = &self.client {
            args.extend([
                "--redis-client-cert".to_string(),
                client.cert.display().to_string(),
                "--redis-client-key".to_string(),
                client.key.display().to_string(),
            ]);
        }
        args
    }
}

impl Redis {
    /// Starts one on a free port; tries another port if the first was taken meanwhile.
    pub async fn start() -> anyhow::Result<Redis> {
        Redis::start_with(false).await
    }

    /// Starts one with `appendonly yes` and `appendfsync always`: every write it acknowledged
    /// survives a kill -9.
    pub async fn start_aof() -> anyhow::Result<Redis> {
        Redis::start_with(true).await
    }

    /// Starts one that speaks TLS only (`--port 0 --tls-port`), with a certificate from `ca`;
    /// with `client_auth` it also asks clients for a certificate from `ca`.
    pub async fn start_tls(ca: &TestCa, client_auth: bool) -> anyhow::Result<Redis> {
        let tls = RedisTls {
            ca_cert: ca.ca_cert().to_path_buf(),
            server: ca.issue("redis-server")?,
            client: if client_auth {
                Some(ca.issue("redis-client")?)
            } else {
                None
            },
        };
        Redis::start_inner(false, Some(tls)).await
    }

    /// Starts one in cluster mode (`--cluster-enabled yes`) that owns all 16384 slots alone: a
    /// client needs no cluster support to use it (no key is ever elsewhere), and it refuses, as
    /// every Redis Cluster node does, a script, `MULTI` or multi-key command whose keys hash to
    /// more than one slot (`CROSSSLOT`).
    pub async fn start_cluster_mode() -> anyhow::Result<Redis> {
        Redis::start_inner_mode(false, None, true).await
    }

    async fn start_with(aof: bool) -> anyhow::Result<Redis> {
        Redis::start_inner(aof, None).await
    }

    async fn start_inner(aof: bool, tls: Option<RedisTls>) -> anyhow::Result<Redis> {
        Redis::start_inner_mode(aof, tls, cluster_mode_from_env()).await
    }

    async fn start_inner_mode(
        aof: bool,
        tls: Option<RedisTls>,
        cluster_mode: bool,
    ) -> anyhow::Result<Redis> {
        let mut last = None;
        for _attempt in 0..3 {
            let dir = tempfile::tempdir()?;
            let port = free_port();
            let mut redis = Redis {
                proc: Redis::spawn(dir.path(), port, aof, tls.as_ref(), cluster_mode)?,
                port,
                dir,
                aof,
                tls: tls.clone(),
                cluster_mode,
                cluster: None,
            };
            match redis.wait_ready().await {
                Ok(()) => return Ok(redis),
                Err(e) => {
                    redis.proc.kill();
                    last = Some(e);
                }
            }
        }
        Err(last.expect("three attempts"))
    }

    fn spawn(
        dir: &Path,
        port: u16,
        aof: bool,
        tls: Option<&RedisTls>,
        cluster_mode: bool,
    ) -> anyhow::Result<Proc> {
        let mut cmd = Command::new(redis_server());
        match tls {
            None => cmd.args(["--port", &port.to_string()]),
            Some(tls) => cmd
                .args(["--port", "0", "--tls-port", &port.to_string()])
                .arg("--tls-cert-file")
                .arg(&tls.server.cert)
                .arg("--tls-key-file")
                .arg(&tls.server.key)
                .arg("--tls-ca-cert-file")
                .arg(&tls.ca_cert)
                .args([
                    "--tls-auth-clients",
                    if tls.client.is_some() { "yes" } else { "no" },
                ]),
        };
        cmd.args(["--bind", "127.0.0.1", "--save", ""]);
        if aof {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        if cluster_mode {
            cmd.args(["--cluster-enabled", "yes", "--cluster-config-file"])
                .arg(dir.join("nodes.conf"));
        }
        cmd.arg("--dir").arg(dir);
        Proc::spawn("redis-server", cmd, dir.join("redis.log"))
            .context("is redis-server installed? (scripts/install-deps.sh)")
    }

    /// Kills it (SIGKILL), leaves it down for `down`, and starts it again on the same port and
    /// directory (with AOF, it loads what it acknowledged).
    pub async fn restart_after(&mut self, down: Duration) -> anyhow::Result<()> {
        self.proc.kill();
        tokio::time::sleep(down).await;
        self.restart().await
    }

    /// Starts it again on the same port (after [`Proc::kill`]).
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        if self.cluster.is_some() {
            bail!("restarting a Redis Cluster's node is not supported here");
        }
        self.proc.kill();
        self.proc = Redis::spawn(
            self.dir.path(),
            self.port,
            self.aof,
            self.tls.as_ref(),
            self.cluster_mode,
        )?;
        self.wait_ready().await
    }

    /// `redis://127.0.0.1:PORT`, or `rediss://` when it speaks TLS; for a Redis Cluster,
    /// `redis+cluster://` with every node.
    pub fn url(&self) -> String {
        if self.cluster.is_some() {
            let nodes: Vec<String> = self
                .node_ports()
                .iter()
                .map(|p| format!("127.0.0.1:{p}"))
                .collect();
            return format!("redis+cluster://{}", nodes.join(","));
        }
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The TLS files when it speaks TLS.
    pub fn tls(&self) -> Option<&RedisTls> {
        self.tls.as_ref()
    }

    /// The flags a gateway or worker needs to reach it beyond `--redis` (its TLS files).
    pub fn client_args(&self) -> Vec<String> {
        self.tls
            .as_ref()
            .map(RedisTls::client_args)
            .unwrap_or_default()
    }

    /// A client of this server (for code under test that opens its own connections); of a
    /// Redis Cluster, its first node only ([`Redis::cluster_client`] reaches them all).
    pub fn open(&self) -> anyhow::Result<redis::Client> {
        if self.cluster.is_some() {
            return Ok(redis::Client::open(format!(
                "redis://127.0.0.1:{}",
                self.port
            ))?);
        }
        let Some(tls) = &self.tls else {
            return Ok(redis::Client::open(self.url())?);
        };
        let client_tls = match &tls.client {
            Some(c) => Some(redis::ClientTlsConfig {
                client_cert: std::fs::read(&c.cert)?,
                client_key: std::fs::read(&c.key)?,
            }),
            None => None,
        };
        Ok(redis::Client::build_with_tls(
            self.url(),
            redis::TlsCertificates {
                client_tls,
                root_cert: Some(std::fs::read(&tls.ca_cert)?),
            },
        )?)
    }

    /// One multiplexed connection.
    pub async fn client(&self) -> anyhow::Result<MultiplexedConnection> {
        Ok(self.open()?.get_multiplexed_async_connection().await?)
    }

    /// A reconnecting connection, the kind the gateway and the worker hold.
    pub async fn manager(&self) -> anyhow::Result<ConnectionManager> {
        Ok(ConnectionManager::new(self.open()?).await?)
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut c) = self.client().await {
                // Ours, not another test's server that took the port first.
                let info = redis::cmd("INFO")
                    .arg("server")
                    .query_async::<String>(&mut c)
                    .await;
                let pid = format!("process_id:{}\r", self.proc.pid());
                if info.is_ok_and(|i| i.contains(&pid))
                    && (!self.cluster_mode || own_every_slot(&mut c).await)
                {
                    return Ok(());
                }
            }
            if Instant::now() > deadline || !self.proc.is_running() {
                bail!("redis-server did not start:\n{}", self.proc.log_text());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// In cluster mode: claims every slot (a restarted node has them from its `nodes.conf`) and
/// answers whether the cluster serves (`cluster_state:ok`).
async fn own_every_slot(c: &mut MultiplexedConnection) -> bool {
    let state = |info: &str| info.contains("cluster_state:ok");
    let Ok(info) = redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async::<String>(c)
        .await
    else {
        return false;
    };
    if state(&info) {
        return true;
    }
    if info.contains("cluster_slots_assigned:0\r") {
        let _ = redis::cmd("CLUSTER")
            .arg("ADDSLOTSRANGE")
            .arg(0)
            .arg(16383)
            .query_async::<()>(c)
            .await;
    }
    false
}
