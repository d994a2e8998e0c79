//! The end-to-end harness: real `redis-server`, `pirq-gateway` and `pirq-worker` processes on
//! free loopback ports and in temporary directories, grouped into parties.
//!
//! Binaries: the harness runs `cargo build -p pirq-gateway -p pirq-worker` (and the `pirq`
//! tool, which the kv suite drives) once per test
//! process (a no-op when they are fresh) into the same target directory and profile as the
//! test itself, found from the test executable's path. Set `PIRQ_E2E_BIN_DIR` to use prebuilt
//! binaries instead. Every process is killed when its handle drops; its log stays in the
//! temporary directory and is printed when a readiness wait fails.
//!
//! The processes, Redis and database files themselves are `pirq-testkit`'s (the queue's and the
//! gateway's own suites start their Redis the same way); they are re-exported here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::bail;
pub use pirq_testkit::{free_port, CertFiles, ClusterShape, Proc, Redis, TestCa, TestDb};
use redis::aio::ConnectionLike;
use tempfile::TempDir;

pub mod cli;
pub mod command_budget;
pub mod commandstats;
pub mod metrics;
pub mod requests;

/// `list` as owned strings (process arguments kept in [`PartyOptions`]).
pub fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// `used_memory` of a Redis, from `INFO memory`.
pub async fn redis_used_memory(conn: &mut impl ConnectionLike) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(conn)
        .await
        .expect("INFO memory");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory in INFO")
}

/// Runs `pirq-gateway` with `args` (and a free `--listen` address), expecting it to refuse to
/// start: returns what it printed, and fails the test with that text if it exited successfully.
pub fn gateway_refusal(args: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("gateway.log");
    let out = std::fs::File::create(&log).expect("gateway log");
    let status = Command::new(bin_dir().join("pirq-gateway"))
        .args(args)
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .stdout(out.try_clone().expect("gateway log"))
        .stderr(out)
        .status()
        .expect("running pirq-gateway");
    let text = std::fs::read_to_string(&log).expect("gateway log");
    assert!(!status.success(), "started anyway:\n{text}");
    text
}

/// Runs `binary` (of [`bin_dir`]) with `args` until it exits, within 60 s (killed then): its
/// exit status and its output. For processes that must refuse to start.
pub fn run_until_exit(binary: &str, args: &[String]) -> (Option<i32>, String) {
    let mut child = Command::new(bin_dir().join(binary))
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

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

/// A connection to one Redis or to a Redis Cluster ([`Party::redis_keys`]).
#[derive(Clone)]
pub enum RedisConn {
    One(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for RedisConn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            RedisConn::One(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            RedisConn::One(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::One(c) => c.get_db(),
            RedisConn::Cluster(c) => c.get_db(),
        }
    }
}

/// Whether the slow Redis Cluster tests run (`PIRQ_CLUSTER_TESTS=1`: kv lookups and a worker
/// killed on a 3-primary cluster, a primary failing over under load). Elsewhere such a test
/// returns at once and says so on stderr, naming `test`.
pub fn cluster_tests_enabled(test: &str) -> bool {
    let on = std::env::var("PIRQ_CLUSTER_TESTS").is_ok_and(|v| v == "1");
    if !on {
        eprintln!("skipping {test}: set PIRQ_CLUSTER_TESTS=1 to run it on a Redis Cluster");
    }
    on
}

/// Where a suite's parties keep their records, for the suites that run on both (issue 29: pages,
/// kv, epochs, shards and the kill -9 reclaim, on one Redis and on a Redis Cluster). A test body
/// takes it, and two `#[tokio::test]`s call the body, one for each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// One `redis-server` per party (as `PIRQ_PARTITIONS` and `PIRQ_REDIS_CLUSTER_MODE` say).
    OneRedis,
    /// A real Redis Cluster of [`Backend::PRIMARIES`] primaries per party, its queue in
    /// [`Backend::PARTITIONS`] partitions that sit on every primary (`PIRQ_CLUSTER_TESTS=1`
    /// only: slow).
    Cluster,
}

impl Backend {
    pub const PRIMARIES: usize = 3;
    /// Four partitions of the test prefixes (`party-a`, `party-b`, …) land on all three
    /// primaries ([`Backend::check`] asserts it).
    pub const PARTITIONS: u32 = 4;

    /// Whether `test` runs: always on one Redis, with `PIRQ_CLUSTER_TESTS=1` on a cluster (else
    /// it says so on stderr).
    pub fn runs(self, test: &str) -> bool {
        match self {
            Backend::OneRedis => true,
            Backend::Cluster => cluster_tests_enabled(test),
        }
    }

    /// `options` with the party's Redis set to this backend.
    pub fn options(self, options: PartyOptions) -> PartyOptions {
        match self {
            Backend::OneRedis => options,
            Backend::Cluster => PartyOptions {
                redis_cluster: Some(ClusterShape {
                    primaries: Self::PRIMARIES,
                    replicas: 0,
                }),
                partitions: Some(Self::PARTITIONS),
                ..options
            },
        }
    }

    /// Panics unless `party` runs on this backend: on a cluster, with its partitions on every
    /// primary (a cluster test whose partitions share one node would prove little).
    pub async fn check(self, party: &Party) {
        if self == Backend::Cluster {
            party
                .assert_partitions_on_every_primary(Self::PRIMARIES)
                .await;
        }
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
    /// Serve HTTPS: each party's gateway gets its own certificate from this CA (`--tls-cert`),
    /// its URL is `https://127.0.0.1:PORT`, and the harness's requests trust the CA.
    pub tls: Option<Arc<TestCa>>,
    /// Redis over TLS only (`rediss://`, `--port 0 --tls-port`) with a certificate from this CA;
    /// the gateway and workers get `--redis-ca-cert` (and a client certificate with
    /// `redis_client_auth`).
    pub redis_tls: Option<Arc<TestCa>>,
    /// With `redis_tls`: Redis asks clients for a certificate (`--tls-auth-clients yes`).
    pub redis_client_auth: bool,
    /// Redis in cluster mode, owning every slot ([`Redis::start_cluster_mode`]): refuses what a
    /// Redis Cluster refuses (keys of two slots in one script, `MULTI` or command).
    pub redis_cluster_mode: bool,
    /// A real Redis Cluster of this shape ([`Redis::start_cluster`]); the processes get its
    /// `redis+cluster://` URL.
    pub redis_cluster: Option<ClusterShape>,
    /// `--partitions` of the gateway and workers; `None`: `$PIRQ_PARTITIONS` (so that a whole
    /// suite runs partitioned with `PIRQ_PARTITIONS=4 cargo test …`), else 1.
    pub partitions: Option<u32>,
}

impl PartyOptions {
    /// The partition count the party's processes are started with.
    pub fn partitions(&self) -> u32 {
        self.partitions.unwrap_or_else(|| {
            std::env::var("PIRQ_PARTITIONS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1)
        })
    }
}

/// One party: its own Redis, one gateway, and its workers.
pub struct Party {
    pub redis: Redis,
    pub gateway: Proc,
    pub workers: Vec<Proc>,
    pub url: String,
    pub prefix: String,
    /// The gateway's certificate and key when the party serves HTTPS.
    pub tls: Option<CertFiles>,
    /// An HTTP client that trusts the party (its CA when it serves HTTPS).
    pub http: reqwest::Client,
    db_path: PathBuf,
    options: PartyOptions,
    dir: TempDir,
}

impl Party {
    pub async fn start(db: &Path, prefix: &str, options: PartyOptions) -> anyhow::Result<Party> {
        let redis = if let Some(ca) = &options.redis_tls {
            Redis::start_tls(ca, options.redis_client_auth).await?
        } else if options.redis_aof {
            Redis::start_aof().await?
        } else if let Some(shape) = options.redis_cluster {
            Redis::start_cluster(shape).await?
        } else if options.redis_cluster_mode {
            Redis::start_cluster_mode().await?
        } else {
            Redis::start().await?
        };
        let dir = tempfile::tempdir()?;
        let tls = match &options.tls {
            Some(ca) => Some(ca.issue(&format!("gateway-{prefix}"))?),
            None => None,
        };
        let http = http_client(options.tls.as_deref())?;
        let mut args = tls_args(tls.as_ref());
        args.extend(redis.client_args());
        args.extend(["--partitions".to_string(), options.partitions().to_string()]);
        args.extend_from_slice(&options.gateway_args);
        let (gateway, url) =
            Party::spawn_gateway(dir.path(), &redis.url(), prefix, &args, &http).await?;
        let mut party = Party {
            redis,
            gateway,
            workers: Vec::new(),
            url,
            prefix: prefix.to_string(),
            tls,
            http,
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
        http: &reqwest::Client,
    ) -> anyhow::Result<(Proc, String)> {
        let scheme = if extra.iter().any(|a| a == "--tls-cert") {
            "https"
        } else {
            "http"
        };
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
            let url = format!("{scheme}://127.0.0.1:{port}");
            if wait_http_ok(
                http,
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
        let mut cmd = self.worker_command(self.workers.len());
        cmd.arg("--db")
            .arg(db)
            .args(&self.options.worker_args)
            .args(extra);
        self.spawn_worker(cmd)?;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            self.newest_worker_starting(deadline, "register")?;
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

    /// The command of the party's `n`-th worker, before its tables: its Redis, prefix, CPU
    /// backend, a fast heartbeat, one scan thread.
    fn worker_command(&self, n: usize) -> Command {
        let mut cmd = Command::new(bin_dir().join("pirq-worker"));
        cmd.args([
            "--redis",
            &self.redis.url(),
            "--prefix",
            &self.prefix,
            "--backend",
            "cpu",
        ])
        .args(["--heartbeat-ms", "200", "--consumer", &format!("w{n}")])
        .args(["--partitions", &self.options.partitions().to_string()])
        .args(self.redis.client_args())
        // One scan thread unless the test says otherwise: two parties share this machine.
        .env("PIRQ_THREADS", "1")
        .env("RUST_LOG", "info");
        cmd
    }

    /// A worker serving the named tables `tables` alone (`--table NAME=FILE` each, no `--db`:
    /// issue 38), started once every one of them counts it among its live workers (`GET
    /// /v1/tables`). The party's `worker_args` are not given to it.
    pub async fn start_table_worker(&mut self, tables: &[(&str, &Path)]) -> anyhow::Result<()> {
        let mut cmd = self.worker_command(self.workers.len());
        for (name, file) in tables {
            cmd.arg("--table").arg(format!("{name}={}", file.display()));
        }
        self.spawn_worker(cmd)?;
        let names: Vec<&str> = tables.iter().map(|(name, _)| *name).collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.newest_worker_starting(deadline, "register its tables")?;
            if self.tables_served(&names).await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts the party's next worker from `cmd` (its log `worker-<n>.log`).
    fn spawn_worker(&mut self, cmd: Command) -> anyhow::Result<()> {
        let log = self
            .dir
            .path()
            .join(format!("worker-{}.log", self.workers.len()));
        self.workers.push(Proc::spawn("pirq-worker", cmd, log)?);
        Ok(())
    }

    /// An error with its log once the newest worker has exited or `deadline` has passed before
    /// it did what the caller waits for (`what`).
    fn newest_worker_starting(&mut self, deadline: Instant, what: &str) -> anyhow::Result<()> {
        let worker = self.workers.last_mut().expect("a worker was started");
        if !worker.is_running() || Instant::now() > deadline {
            bail!("pirq-worker did not {what}:\n{}", worker.log_text());
        }
        Ok(())
    }

    /// Whether `GET /v1/tables` lists each of `names` with a live worker (false while the
    /// gateway does not answer).
    pub async fn tables_served(&self, names: &[&str]) -> bool {
        let listed = self.tables().await;
        names.iter().all(|name| {
            listed["tables"].as_array().is_some_and(|tables| {
                tables
                    .iter()
                    .any(|t| t["name"] == *name && t["workers"].as_u64() >= Some(1))
            })
        })
    }

    /// Waits (within 60 s) until [`Party::tables_served`] holds for `names`; panics, with what
    /// the party lists, if it never does.
    pub async fn wait_tables_served(&self, names: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.tables_served(names).await {
            assert!(
                Instant::now() < deadline,
                "{} does not serve every table of {names:?} after 60 s: {}",
                self.url,
                self.tables().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `GET /v1/tables` as JSON (`null` while the gateway does not answer).
    async fn tables(&self) -> serde_json::Value {
        match self
            .http
            .get(format!("{}/v1/tables", self.url))
            .send()
            .await
        {
            Ok(r) => r.json().await.unwrap_or_default(),
            Err(_) => serde_json::Value::Null,
        }
    }

    /// `workers` from `/v1/info`, `None` while the party has no database registered.
    pub async fn live_workers(&self) -> Option<u64> {
        let resp = self
            .http
            .get(format!("{}/v1/info", self.url))
            .send()
            .await
            .ok()?;
        let info: serde_json::Value = resp.json().await.ok()?;
        info["workers"].as_u64()
    }

    /// `GET /readyz`: the status and the JSON body (`null` without one).
    pub async fn readyz(&self) -> (u16, serde_json::Value) {
        let resp = self
            .http
            .get(format!("{}/readyz", self.url))
            .send()
            .await
            .expect("GET /readyz");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or_default())
    }

    /// `GET /v1/info`, its JSON body (an error's body too).
    pub async fn info(&self) -> serde_json::Value {
        self.http
            .get(format!("{}/v1/info", self.url))
            .send()
            .await
            .expect("GET /v1/info")
            .json()
            .await
            .expect("a JSON body")
    }

    /// `used_memory` of the party's Redis (its first node on a cluster).
    pub async fn used_memory(&self) -> u64 {
        redis_used_memory(&mut self.redis().await.expect("a connection to Redis")).await
    }

    /// A connection to the party's Redis.
    pub async fn redis(&self) -> anyhow::Result<redis::aio::MultiplexedConnection> {
        self.redis.client().await
    }

    /// A connection that reaches the party's keys whether its Redis is one server or a Redis
    /// Cluster (where [`Party::redis`] reaches the first node only).
    pub async fn redis_keys(&self) -> anyhow::Result<RedisConn> {
        Ok(match self.redis.cluster() {
            Some(_) => RedisConn::Cluster(self.redis.cluster_client().await?),
            None => RedisConn::One(self.redis.client().await?),
        })
    }

    /// The party's key names, in its partitions.
    pub fn layout(&self) -> pirq_shared::layout::Layout {
        pirq_shared::layout::Layout::new(&self.prefix)
            .expect("valid prefix")
            .with_partitions(self.options.partitions())
            .expect("a valid partition count")
    }

    /// The primaries (ports) serving the party's partitions on its Redis Cluster, one per
    /// partition, as the nodes say (`CLUSTER KEYSLOT`, `CLUSTER SLOTS`).
    pub async fn partition_primaries(&self) -> anyhow::Result<Vec<u16>> {
        let mut ports = Vec::new();
        for (_, keys) in self.layout().all_partitions() {
            ports.push(self.redis.primary_for(&keys.jobs()).await?);
        }
        Ok(ports)
    }

    /// Panics unless the party runs on a Redis Cluster of `primaries` primaries and its
    /// partitions sit on every one of them: a test of partitions on a cluster means nothing
    /// while they all share one node (each pipeline would go to the same one).
    pub async fn assert_partitions_on_every_primary(&self, primaries: usize) {
        assert!(self.redis.url().starts_with("redis+cluster://"));
        let ports = self.partition_primaries().await.expect("CLUSTER SLOTS");
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            primaries,
            "partitions of {} on primaries {ports:?}",
            self.prefix
        );
    }

    /// Starts the gateway again (after it exited), with extra flags.
    pub async fn restart_gateway(&mut self, extra: &[String]) -> anyhow::Result<()> {
        self.gateway.kill();
        let mut args = tls_args(self.tls.as_ref());
        args.extend(self.redis.client_args());
        args.extend([
            "--partitions".to_string(),
            self.options.partitions().to_string(),
        ]);
        args.extend_from_slice(&self.options.gateway_args);
        args.extend_from_slice(extra);
        let (gateway, url) = Party::spawn_gateway(
            self.dir.path(),
            &self.redis.url(),
            &self.prefix,
            &args,
            &self.http,
        )
        .await?;
        self.gateway = gateway;
        self.url = url;
        Ok(())
    }

    /// SIGTERM to the gateway, `down` with none, then a new gateway on the same address (what a
    /// client sees of a gateway restart).
    pub async fn restart_gateway_in_place(&mut self, down: Duration) -> anyhow::Result<()> {
        self.gateway.terminate(Duration::from_secs(15));
        tokio::time::sleep(down).await;
        let listen = self
            .url
            .split_once("://")
            .map_or("", |(_, a)| a)
            .to_string();
        let mut cmd = Command::new(bin_dir().join("pirq-gateway"));
        cmd.args(["--redis", &self.redis.url(), "--prefix", &self.prefix])
            .args(["--listen", &listen])
            .args(tls_args(self.tls.as_ref()))
            .args(self.redis.client_args())
            .args(["--partitions", &self.options.partitions().to_string()])
            .args(&self.options.gateway_args)
            .env("RUST_LOG", "info");
        let log = self.dir.path().join(format!(
            "gateway-{}-restarted.log",
            listen.replace([':', '.'], "_")
        ));
        let mut proc = Proc::spawn("pirq-gateway", cmd, log)?;
        if !wait_http_ok(
            &self.http,
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

/// Every one of `parties` serves `db` from now on: their workers are replaced
/// (`--replace-db`, as an operator switches databases), the gateways have read the new
/// registration, and the submit path's copy of it (kept up to a second,
/// gateway/src/dbinfo.rs) has expired, so that queries are checked against the new database.
pub async fn serve_database(parties: &mut [&mut Party], db: &Path) {
    let digest = pirq_db::PirDb::open(db)
        .expect("a database")
        .recorded_digest()
        .expect("a database with its digest")
        .to_hex();
    for party in parties.iter_mut() {
        party.stop_workers();
        party.start_worker_on(db, &["--replace-db"]).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    for party in parties.iter() {
        while party.info().await["digest"] != digest.as_str() {
            assert!(
                Instant::now() < deadline,
                "the gateway kept the old database"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
}

/// `--tls-cert`/`--tls-key` for `tls`, nothing without.
pub fn tls_args(tls: Option<&CertFiles>) -> Vec<String> {
    match tls {
        Some(files) => vec![
            "--tls-cert".into(),
            files.cert.display().to_string(),
            "--tls-key".into(),
            files.key.display().to_string(),
        ],
        None => Vec::new(),
    }
}

/// A reqwest client that trusts `ca` (and only the system roots without it).
pub fn http_client(ca: Option<&TestCa>) -> anyhow::Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder();
    if let Some(ca) = ca {
        let pem = std::fs::read(ca.ca_cert())?;
        builder = builder.add_root_certificate(reqwest::Certificate::from_pem(&pem)?);
    }
    Ok(builder.build()?)
}

async fn wait_http_ok(
    http: &reqwest::Client,
    url: &str,
    within: Duration,
    proc: &mut Proc,
) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if !proc.is_running() {
            return false;
        }
        if let Ok(r) = http.get(url).send().await {
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
    use redis::aio::ConnectionLike;

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

    /// Entries of the job streams (waiting + unacknowledged), every partition's.
    pub async fn stream_len(conn: &mut impl ConnectionLike, layout: &Layout) -> u64 {
        let mut total = 0;
        for (_, keys) in layout.all_partitions() {
            total += redis::cmd("XLEN")
                .arg(keys.jobs())
                .query_async::<u64>(conn)
                .await
                .unwrap_or(0);
        }
        total
    }

    /// Entries of the job streams delivered and not acknowledged, of one consumer or all, every
    /// partition's.
    pub async fn pending(
        conn: &mut impl ConnectionLike,
        layout: &Layout,
        consumer: Option<&str>,
    ) -> usize {
        let mut total = 0;
        for (_, keys) in layout.all_partitions() {
            let mut cmd = redis::cmd("XPENDING");
            cmd.arg(keys.jobs())
                .arg(GROUP)
                .arg("-")
                .arg("+")
                .arg(100_000);
            if let Some(c) = consumer {
                cmd.arg(c);
            }
            let reply: Vec<redis::Value> = cmd.query_async(conn).await.unwrap_or_default();
            total += reply.len();
        }
        total
    }
}
