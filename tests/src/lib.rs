//! The end-to-end harness: real `redis-server`, `pirq-gateway` and `pirq-worker` processes on
//! free loopback ports and in temporary directories, grouped into parties.
//!
//! Binaries: the harness runs `cargo build -p pirq-gateway -p pirq-worker` (and the `pirq`
//! tool, which the kv suite drives) once per test
//! process (a no-op when they are fresh) into the same target directory and profile as the
//! test itself, found from the test executable's path. Set `PIRQ_E2E_BIN_DIR` to use prebuilt
//! binaries instead. Every process is killed when its handle drops; its log stays in the
//! temporary directory and is printed when a readiness wait fails.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use pirq_shared::db::{self, synthetic, PirDb};
use tempfile::TempDir;

/// Directory holding `pirq-gateway` and `pirq-worker`, built on first use.
pub fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Ok(dir) = std::env::var("PIRQ_E2E_BIN_DIR") {
            return PathBuf::from(dir);
        }
        // target/<profile>/deps/<test exe> or target/<profile>/<bin> → target/<profile>
        let exe = std::env::current_exe().expect("test executable path");
        let mut profile_dir = exe.parent().expect("executable directory").to_path_buf();
        if profile_dir.file_name().is_some_and(|n| n == "deps") {
            profile_dir.pop();
        }
        let target_dir = profile_dir.parent().expect("target dir").to_path_buf();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-q", "-p", "pirq-gateway", "-p", "pirq-worker"])
            .args(["-p", "pirq-cli", "--bin", "pirq"])
            .args(["--bin", "pirq-gateway", "--bin", "pirq-worker"])
            .arg("--target-dir")
            .arg(&target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("running cargo build");
        assert!(
            status.success(),
            "cargo build of pirq-gateway/pirq-worker failed"
        );
        profile_dir
    })
}

/// A free TCP port on 127.0.0.1 (free when asked; the caller binds it right away).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding port 0")
}

/// A child process killed on drop, with its log file.
pub struct Proc {
    child: Option<Child>,
    pub log: PathBuf,
    pub name: String,
}

impl Proc {
    fn spawn(name: &str, mut cmd: Command, log: PathBuf) -> anyhow::Result<Proc> {
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        let child = cmd.spawn().with_context(|| format!("starting {name}"))?;
        Ok(Proc {
            child: Some(child),
            log,
            name: name.to_string(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// SIGTERM, then wait up to `grace` for a clean exit (SIGKILL after).
    pub fn terminate(&mut self, grace: Duration) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM and returns at once (the process keeps its handle).
    pub fn signal_term(&self) {
        if let Some(child) = self.child.as_ref() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
        }
    }

    /// Waits up to `within` for the process to exit; its exit status, `None` if still running.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Resident memory of the process in KiB (Linux `/proc`), `None` when gone.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    }

    /// SIGKILL now.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

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
            .context("is redis-server installed?")
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

    pub async fn client(&self) -> anyhow::Result<redis::aio::MultiplexedConnection> {
        Ok(redis::Client::open(self.url())?
            .get_multiplexed_async_connection()
            .await?)
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

/// A database file with deterministic synthetic pages.
pub struct TestDb {
    pub path: PathBuf,
    pub db: PirDb,
    _dir: TempDir,
}

impl TestDb {
    pub fn create(num_pages: u64, page_size: u32, seed: u64) -> anyhow::Result<TestDb> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("test.pirdb");
        let header = db::Header {
            page_size,
            num_pages,
            epoch: 0,
        };
        db::write(
            &path,
            &header,
            |p, page| synthetic::fill_page(seed, p, page),
            |_| {},
        )?;
        let db = PirDb::open(&path)?;
        Ok(TestDb {
            path,
            db,
            _dir: dir,
        })
    }

    pub fn page(&self, index: u64) -> &[u8] {
        self.db.page(index).expect("index inside the database")
    }
}

/// Flags for a party's processes beyond the essentials.
#[derive(Clone, Debug, Default)]
pub struct PartyOptions {
    pub gateway_args: Vec<String>,
    pub worker_args: Vec<String>,
    /// Start no worker (a test starts one later with [`Party::start_worker`]).
    pub no_worker: bool,
    /// Redis with an append-only file fsynced on every write ([`Redis::start_aof`]).
    pub redis_aof: bool,
}

/// One party: its own Redis, one gateway, and its workers.
pub struct Party {
    pub redis: Redis,
    pub gateway: Proc,
    pub workers: Vec<Proc>,
    pub url: String,
    pub prefix: String,
    db_path: PathBuf,
    options: PartyOptions,
    dir: TempDir,
}

impl Party {
    pub async fn start(db: &Path, prefix: &str, options: PartyOptions) -> anyhow::Result<Party> {
        let redis = Redis::start_with(options.redis_aof).await?;
        let dir = tempfile::tempdir()?;
        let (gateway, url) =
            Party::spawn_gateway(dir.path(), &redis.url(), prefix, &options.gateway_args).await?;
        let mut party = Party {
            redis,
            gateway,
            workers: Vec::new(),
            url,
            prefix: prefix.to_string(),
            db_path: db.to_path_buf(),
            options,
            dir,
        };
        if !party.options.no_worker {
            party.start_worker().await?;
        }
        Ok(party)
    }

    async fn spawn_gateway(
        dir: &Path,
        redis: &str,
        prefix: &str,
        extra: &[String],
    ) -> anyhow::Result<(Proc, String)> {
        let mut last_log = String::new();
        for _attempt in 0..3 {
            let port = free_port();
            let mut cmd = Command::new(bin_dir().join("pirq-gateway"));
            cmd.args([
                "--redis",
                redis,
                "--prefix",
                prefix,
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .args(extra)
            .env("RUST_LOG", "info");
            let mut proc =
                Proc::spawn("pirq-gateway", cmd, dir.join(format!("gateway-{port}.log")))?;
            let url = format!("http://127.0.0.1:{port}");
            if wait_http_ok(
                &format!("{url}/healthz"),
                Duration::from_secs(10),
                &mut proc,
            )
            .await
            {
                // A gateway that lost the port race exits at once; the answer came from
                // another test's gateway then.
                tokio::time::sleep(Duration::from_millis(50)).await;
                if proc.is_running() {
                    return Ok((proc, url));
                }
            }
            last_log = proc.log_text();
        }
        bail!("pirq-gateway did not start:\n{last_log}")
    }

    /// Starts one more worker and waits until the gateway counts it.
    pub async fn start_worker(&mut self) -> anyhow::Result<()> {
        self.start_worker_with(&[]).await
    }

    /// [`Party::start_worker`] with flags beyond the party's `worker_args` (later ones win).
    pub async fn start_worker_with(&mut self, extra: &[&str]) -> anyhow::Result<()> {
        let db = self.db_path.clone();
        self.start_worker_on(&db, extra).await
    }

    /// [`Party::start_worker_with`] serving another database file than the party's. A worker
    /// that exits instead of registering is an error that carries its log.
    pub async fn start_worker_on(&mut self, db: &Path, extra: &[&str]) -> anyhow::Result<()> {
        let n = self.workers.len();
        let mut cmd = Command::new(bin_dir().join("pirq-worker"));
        cmd.args([
            "--redis",
            &self.redis.url(),
            "--prefix",
            &self.prefix,
            "--backend",
            "cpu",
        ])
        .arg("--db")
        .arg(db)
        .args(["--heartbeat-ms", "200", "--consumer", &format!("w{n}")])
        .args(&self.options.worker_args)
        .args(extra)
        // One scan thread unless the test says otherwise: two parties share this machine.
        .env("PIRQ_THREADS", "1")
        .env("RUST_LOG", "info");
        let proc = Proc::spawn(
            "pirq-worker",
            cmd,
            self.dir.path().join(format!("worker-{n}.log")),
        )?;
        self.workers.push(proc);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if !self.workers.last_mut().unwrap().is_running() || Instant::now() > deadline {
                bail!(
                    "pirq-worker did not register:\n{}",
                    self.workers.last().unwrap().log_text()
                );
            }
            // Counted again each time: a worker replaced by this one (--replace-db) stops.
            let want = self
                .workers
                .iter_mut()
                .map(Proc::is_running)
                .filter(|r| *r)
                .count() as u64;
            if self.live_workers().await.unwrap_or(0) >= want {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `workers` from `/v1/info`, `None` while the party has no database registered.
    pub async fn live_workers(&self) -> Option<u64> {
        let resp = reqwest::get(format!("{}/v1/info", self.url)).await.ok()?;
        let info: serde_json::Value = resp.json().await.ok()?;
        info["workers"].as_u64()
    }

    /// A connection to the party's Redis.
    pub async fn redis(&self) -> anyhow::Result<redis::aio::MultiplexedConnection> {
        self.redis.client().await
    }

    /// The party's key names.
    pub fn layout(&self) -> pirq_shared::layout::Layout {
        pirq_shared::layout::Layout::new(&self.prefix).expect("valid prefix")
    }

    /// Starts the gateway again (after it exited), with extra flags.
    pub async fn restart_gateway(&mut self, extra: &[String]) -> anyhow::Result<()> {
        self.gateway.kill();
        let mut args = self.options.gateway_args.clone();
        args.extend_from_slice(extra);
        let (gateway, url) =
            Party::spawn_gateway(self.dir.path(), &self.redis.url(), &self.prefix, &args).await?;
        self.gateway = gateway;
        self.url = url;
        Ok(())
    }

    /// SIGTERM to the gateway, `down` with none, then a new gateway on the same address (what a
    /// client sees of a gateway restart).
    pub async fn restart_gateway_in_place(&mut self, down: Duration) -> anyhow::Result<()> {
        self.gateway.terminate(Duration::from_secs(15));
        tokio::time::sleep(down).await;
        let listen = self.url.trim_start_matches("http://").to_string();
        let mut cmd = Command::new(bin_dir().join("pirq-gateway"));
        cmd.args(["--redis", &self.redis.url(), "--prefix", &self.prefix])
            .args(["--listen", &listen])
            .args(&self.options.gateway_args)
            .env("RUST_LOG", "info");
        let log = self.dir.path().join(format!(
            "gateway-{}-restarted.log",
            listen.replace([':', '.'], "_")
        ));
        let mut proc = Proc::spawn("pirq-gateway", cmd, log)?;
        if !wait_http_ok(
            &format!("{}/healthz", self.url),
            Duration::from_secs(10),
            &mut proc,
        )
        .await
        {
            bail!("pirq-gateway did not restart:\n{}", proc.log_text());
        }
        self.gateway = proc;
        Ok(())
    }

    /// Stops every worker gracefully (they deregister).
    pub fn stop_workers(&mut self) {
        for w in &mut self.workers {
            w.terminate(Duration::from_secs(10));
        }
        self.workers.clear();
    }

    /// Kills every worker with SIGKILL: no deregistration, jobs left pending in the group.
    pub fn kill_workers(&mut self) {
        for w in &mut self.workers {
            w.kill();
        }
        self.workers.clear();
    }
}

async fn wait_http_ok(url: &str, within: Duration, proc: &mut Proc) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if !proc.is_running() {
            return false;
        }
        if let Ok(r) = reqwest::get(url).await {
            if r.status().is_success() {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Two parties serving the same database: the whole system.
pub struct Cluster {
    pub db: TestDb,
    pub a: Party,
    pub b: Party,
}

impl Cluster {
    pub async fn start(
        num_pages: u64,
        page_size: u32,
        options: PartyOptions,
    ) -> anyhow::Result<Cluster> {
        let db = TestDb::create(num_pages, page_size, rand::random())?;
        let (a, b) = tokio::try_join!(
            Party::start(&db.path, "party-a", options.clone()),
            Party::start(&db.path, "party-b", options),
        )?;
        Ok(Cluster { db, a, b })
    }

    pub fn client(&self, options: pirq_client::Options) -> pirq_client::Client {
        pirq_client::Client::with_options(&self.a.url, &self.b.url, options).expect("client")
    }
}

/// Helpers of the fault suites: raw HTTP submits and waits, stream inspection.
pub mod fault {
    use std::time::{Duration, Instant};

    use base64::Engine as _;
    use pirq_shared::layout::{Layout, GROUP};
    use pirq_shared::wire::QueryRequest;
    use redis::aio::MultiplexedConnection;

    /// One `POST /v1/queries` (JSON): `(status, body, Retry-After)`; `Err` when nothing
    /// answered (connection refused or reset).
    pub async fn post(
        http: &reqwest::Client,
        url: &str,
        request: &QueryRequest,
        idempotency_key: Option<&str>,
    ) -> Result<(u16, serde_json::Value, Option<u64>), reqwest::Error> {
        let mut req = http
            .post(format!("{url}/v1/queries"))
            .header("content-type", "application/json")
            .body(request.to_json());
        if let Some(k) = idempotency_key {
            req = req.header("idempotency-key", k);
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        let retry = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let body = resp.json().await.unwrap_or(serde_json::Value::Null);
        Ok((status, body, retry))
    }

    /// Submits until a 202 (retrying 503s and refused connections); the id and the number of
    /// refusals seen. Panics on any other answer.
    pub async fn submit_until_accepted(
        http: &reqwest::Client,
        url: &str,
        request: &QueryRequest,
        within: Duration,
    ) -> (String, u32) {
        let deadline = Instant::now() + within;
        let mut refused = 0;
        loop {
            match post(http, url, request, None).await {
                Ok((202, body, _)) => {
                    return (body["id"].as_str().expect("id").to_string(), refused)
                }
                Ok((503, _, _)) | Err(_) => refused += 1,
                Ok((status, body, _)) => panic!("submit answered {status}: {body}"),
            }
            assert!(Instant::now() < deadline, "no 202 within {within:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `GET /v1/queries/{id}?wait=5` until the query is final (done or failed) or `within`
    /// passed; the JSON result, `None` on timeout. 503s and refused connections are retried;
    /// 404 is final (`Some` with the error body).
    pub async fn wait_final(
        http: &reqwest::Client,
        url: &str,
        id: &str,
        within: Duration,
    ) -> Option<serde_json::Value> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let resp = http
                .get(format!("{url}/v1/queries/{id}?wait=5"))
                .send()
                .await;
            if let Ok(resp) = resp {
                let status = resp.status().as_u16();
                if let Ok(body) = resp.json::<serde_json::Value>().await {
                    if status == 200 || status == 404 {
                        return Some(body);
                    }
                }
            } else {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        None
    }

    /// The pages of a done result, decoded.
    pub fn pages(result: &serde_json::Value) -> Vec<Vec<u8>> {
        result["pages"]
            .as_array()
            .map(|pages| {
                pages
                    .iter()
                    .map(|p| {
                        base64::engine::general_purpose::STANDARD
                            .decode(p.as_str().unwrap_or(""))
                            .unwrap_or_default()
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Entries of the job stream (waiting + unacknowledged).
    pub async fn stream_len(conn: &mut MultiplexedConnection, layout: &Layout) -> u64 {
        redis::cmd("XLEN")
            .arg(layout.jobs())
            .query_async(conn)
            .await
            .unwrap_or(0)
    }

    /// Entries of the job stream delivered and not acknowledged, of one consumer or all.
    pub async fn pending(
        conn: &mut MultiplexedConnection,
        layout: &Layout,
        consumer: Option<&str>,
    ) -> usize {
        let mut cmd = redis::cmd("XPENDING");
        cmd.arg(layout.jobs())
            .arg(GROUP)
            .arg("-")
            .arg("+")
            .arg(100_000);
        if let Some(c) = consumer {
            cmd.arg(c);
        }
        let reply: Vec<redis::Value> = cmd.query_async(conn).await.unwrap_or_default();
        reply.len()
    }
}
