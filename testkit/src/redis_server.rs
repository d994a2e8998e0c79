//! A real `redis-server` per test: on a free port, in its own directory, killed on drop.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use redis::aio::{ConnectionManager, MultiplexedConnection};
use tempfile::TempDir;

use crate::process::{free_port, Proc};

/// The `redis-server` the suites run against: `$PIRQ_REDIS_SERVER` when set (scripts/test.sh runs
/// the durability and fault suites a second time with Redis 7.4 from
/// `scripts/install-redis74.sh`), else the one on `PATH`.
pub fn redis_server() -> String {
    std::env::var("PIRQ_REDIS_SERVER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "redis-server".to_string())
}

/// A `redis-server` on a free port in its own directory: without persistence, or with an
/// append-only file fsynced on every write ([`Redis::start_aof`]).
pub struct Redis {
    pub proc: Proc,
    pub port: u16,
    dir: TempDir,
    aof: bool,
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

    async fn start_with(aof: bool) -> anyhow::Result<Redis> {
        let mut last = None;
        for _attempt in 0..3 {
            let dir = tempfile::tempdir()?;
            let port = free_port();
            let mut redis = Redis {
                proc: Redis::spawn(dir.path(), port, aof)?,
                port,
                dir,
                aof,
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

    fn spawn(dir: &Path, port: u16, aof: bool) -> anyhow::Result<Proc> {
        let mut cmd = Command::new(redis_server());
        cmd.args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ]);
        if aof {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
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
        self.proc.kill();
        self.proc = Redis::spawn(self.dir.path(), self.port, self.aof)?;
        self.wait_ready().await
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A client of this server (for code under test that opens its own connections).
    pub fn open(&self) -> anyhow::Result<redis::Client> {
        Ok(redis::Client::open(self.url())?)
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
                if info.is_ok_and(|i| i.contains(&pid)) {
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
