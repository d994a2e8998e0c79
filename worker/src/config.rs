//! Worker configuration: every flag is also a `PIRQ_*` environment variable.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// A synthetic database (`--synthetic PAGES:PAGE_SIZE:SEED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyntheticDb {
    pub num_pages: u64,
    pub page_size: u32,
    pub seed: u64,
}

impl std::str::FromStr for SyntheticDb {
    type Err = String;

    fn from_str(s: &str) -> Result<SyntheticDb, String> {
        let bad = || format!("{s:?} is not PAGES:PAGE_SIZE:SEED (for example 41943040:4096:7)");
        let parts: Vec<&str> = s.split(':').collect();
        let [pages, size, seed] = parts[..] else {
            return Err(bad());
        };
        let db = SyntheticDb {
            num_pages: pages.parse().map_err(|_| bad())?,
            page_size: size.parse().map_err(|_| bad())?,
            seed: seed.parse().map_err(|_| bad())?,
        };
        let header = pirq_db::Header {
            page_size: db.page_size,
            num_pages: db.num_pages,
            epoch: 0,
        };
        header.validate().map_err(|e| format!("{s:?}: {e}"))?;
        Ok(db)
    }
}

/// One table a worker serves (`--table NAME=FILE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableArg {
    pub name: String,
    pub file: PathBuf,
}

impl std::str::FromStr for TableArg {
    type Err = String;

    fn from_str(s: &str) -> Result<TableArg, String> {
        let Some((name, file)) = s.split_once('=') else {
            return Err(format!(
                "{s:?} is not NAME=FILE (for example profiles=profiles.pirdb)"
            ));
        };
        pirq_shared::layout::check_table_name(name).map_err(|e| e.to_string())?;
        if file.is_empty() {
            return Err(format!("{s:?}: the table {name} names no file"));
        }
        Ok(TableArg {
            name: name.to_string(),
            file: PathBuf::from(file),
        })
    }
}

/// A `--table` value: a table, or none for an empty value (`PIRQ_TABLES=`).
fn table_or_none(s: &str) -> Result<Option<TableArg>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    s.parse().map(Some)
}

/// What one table is served from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableSource {
    File(PathBuf),
    Synthetic(SyntheticDb),
}

/// Which scanner answers the passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// The CPU scanner (always available).
    Cpu,
    /// The CUDA scanner (needs the `cuda` cargo feature and a GPU).
    Cuda,
    /// CUDA when compiled in and a GPU is present, else CPU.
    Auto,
}

/// A pirq worker: answers the queries of one party by scanning its page database.
#[derive(Parser, Debug, Clone)]
#[command(name = "pirq-worker", version, about, long_about = None)]
pub struct Config {
    /// `--redis` and `--prefix`, as every server of the party takes them.
    #[command(flatten)]
    pub redis: pirq_party::RedisArgs,

    /// `--partitions`, as every server of the party takes it.
    #[command(flatten)]
    pub partitions: pirq_party::PartitionArgs,

    /// The `.pirdb` page database file to serve, as the table `default` (the one the
    /// gateway's routes without a table name mean).
    #[arg(long, env = "PIRQ_DB", required_unless_present_any = ["synthetic", "tables"])]
    pub db: Option<PathBuf>,

    /// One more table to serve, `NAME=FILE` (a `.pirdb` file: pages or key-value, any page
    /// size); repeat it for several. Each table has its own job streams, epochs, digest and
    /// registration under the prefix, and the tables share this worker's scanner time equally
    /// while they have queries. `--table default=FILE` is `--db FILE`. Several at once in the
    /// environment: `PIRQ_TABLES=a=a.pirdb,b=b.pirdb`; an empty one is no table (how Compose
    /// passes a list left empty).
    #[arg(long = "table", env = "PIRQ_TABLES", value_delimiter = ',', value_parser = table_or_none)]
    pub tables: Vec<Option<TableArg>>,

    /// Serve synthetic pages instead of a file, generated on the GPU (`--backend cuda`):
    /// `PAGES:PAGE_SIZE:SEED`, page `p` as `pirq_shared::synthetic` makes it under SEED, at
    /// epoch 0. With `--shard`, only the shard's pages are generated: benches and tests of
    /// databases larger than the host could hold as a file.
    #[arg(long, env = "PIRQ_SYNTHETIC", conflicts_with = "db")]
    pub synthetic: Option<SyntheticDb>,

    /// Serve the file without checking its pages against the digest its header records (for
    /// an operator who ran `pirq db verify` offline). Without it the worker hashes every page of
    /// the file while it loads them and refuses to serve a file that does not match.
    #[arg(long, env = "PIRQ_SKIP_VERIFY")]
    pub skip_verify: bool,

    /// Serve shard I of S (`I/S`, I = 0..S-1): only pages of that range are loaded and scanned,
    /// and answers are partials that Redis XORs together. Every shard needs at least one live
    /// worker; any number of workers may serve the same shard (replicas). Default: the whole
    /// database, unsharded.
    #[arg(long, env = "PIRQ_SHARD")]
    pub shard: Option<pirq_shared::shard::ShardSpec>,

    /// Scanner backend.
    #[arg(long, env = "PIRQ_BACKEND", value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,

    /// CPU scanner threads (0 = one per core).
    #[arg(long, env = "PIRQ_THREADS", default_value_t = 0)]
    pub threads: usize,

    /// Most keys in one window (one scanner pass answers them all). A job is never split
    /// between windows; a job larger than this forms a window of its own.
    #[arg(long, env = "PIRQ_MAX_BATCH_KEYS",
          default_value_t = pirq_scan::DEFAULT_MAX_BATCH_KEYS as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_batch_keys: u32,

    /// Seconds a finished result is kept in Redis for clients to fetch.
    #[arg(long, env = "PIRQ_RESULT_TTL", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub result_ttl: u64,

    /// Milliseconds between heartbeats; a worker whose heartbeat is 3 intervals old counts as
    /// gone.
    #[arg(long, env = "PIRQ_HEARTBEAT_MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(10..))]
    pub heartbeat_ms: u64,

    /// Milliseconds one `XREADGROUP` blocks waiting for jobs before it is sent again.
    #[arg(long, env = "PIRQ_BLOCK_MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub block_ms: u64,

    /// Milliseconds a job may sit unacknowledged with a worker before another worker claims it
    /// (`XAUTOCLAIM`): how soon the jobs of a worker that died are answered elsewhere. Default:
    /// 10 × the longest window this worker has run, between 5000 and 20000. A live worker
    /// refreshes the jobs it holds, so a slow pass is never taken from it.
    #[arg(long, env = "PIRQ_CLAIM_IDLE_MS", value_parser = clap::value_parser!(u64).range(10..))]
    pub claim_idle_ms: Option<u64>,

    /// Deliveries a job gets: one that fails on its last delivery, or is found delivered more
    /// often (it kept killing workers), goes to the dead-letter stream `{P}:dead` and its query
    /// becomes `failed` with the reason. Failures with deliveries left are retried at once.
    #[arg(long, env = "PIRQ_MAX_DELIVERIES",
          default_value_t = pirq_queue::consumer::DEFAULT_MAX_DELIVERIES,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_deliveries: u64,

    /// Approximate cap on the dead-letter stream's length (`XADD MAXLEN ~`).
    #[arg(long, env = "PIRQ_DEAD_LETTER_MAX",
          default_value_t = pirq_queue::consumer::DEFAULT_DEAD_LETTER_MAX,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub dead_letter_max: u64,

    /// Serve Prometheus metrics (`GET /metrics`) and the health probes (`GET /healthz`,
    /// `GET /readyz`) on this address; off when not given.
    #[arg(long, env = "PIRQ_METRICS_LISTEN")]
    pub metrics_listen: Option<std::net::SocketAddr>,

    /// CUDA device this worker uses (run one worker per GPU).
    #[arg(long, env = "PIRQ_GPU", default_value_t = 0)]
    pub gpu: usize,

    /// CUDA workspaces: each has its own stream and buffers, so one window's keys are uploaded
    /// and expanded while another's scan runs. 1 to 16.
    #[arg(long, env = "PIRQ_WORKSPACES",
          default_value_t = pirq_scan::DEFAULT_WORKSPACES as u64,
          value_parser = clap::value_parser!(u64).range(1..=16))]
    pub workspaces: u64,

    /// Epochs answered exactly: the base and up to this many minus one later epochs. Older
    /// epochs are folded into the base as new ones arrive.
    #[arg(long, env = "PIRQ_EPOCH_WINDOW",
          default_value_t = pirq_scan::DEFAULT_EPOCH_WINDOW as u64,
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub epoch_window: u64,

    /// Milliseconds a job pinned to an epoch this worker has not applied yet waits for it
    /// (another worker or the gateway may be a moment ahead) before it fails.
    #[arg(long, env = "PIRQ_EPOCH_WAIT_MS", default_value_t = 2000)]
    pub epoch_wait_ms: u64,

    /// Folded epochs kept in the updates stream for workers that restart from their `.pirdb`
    /// file; older entries, folded by every live worker, are trimmed. A worker whose file is
    /// older than what the stream keeps starts from a snapshot (`pirq db apply`).
    #[arg(long, env = "PIRQ_UPDATES_RETAIN", default_value_t = 1024)]
    pub updates_retain: u64,

    /// Make this worker's database the party's even when another one (another shape or
    /// digest) is registered under the prefix: its registration, digests and updates stream are
    /// dropped, and the workers serving it stop. Without this flag such a worker refuses to
    /// start.
    #[arg(long, env = "PIRQ_REPLACE_DB")]
    pub replace_db: bool,

    /// Consumer name in the group (default: host name, process id and a random suffix).
    #[arg(long, env = "PIRQ_CONSUMER")]
    pub consumer: Option<String>,
}

impl Config {
    /// Every table this worker serves, by name, the default one (`--db`, `--synthetic`) first:
    /// a name given twice is refused.
    pub fn table_sources(&self) -> Result<Vec<(String, TableSource)>, String> {
        let default = match (&self.synthetic, &self.db) {
            (Some(s), _) => Some(TableSource::Synthetic(*s)),
            (None, Some(path)) => Some(TableSource::File(path.clone())),
            (None, None) => None,
        };
        let mut tables: Vec<(String, TableSource)> = default
            .map(|d| (pirq_shared::layout::DEFAULT_TABLE.to_string(), d))
            .into_iter()
            .collect();
        for t in self.tables.iter().flatten() {
            if tables.iter().any(|(name, _)| *name == t.name) {
                return Err(if t.name == pirq_shared::layout::DEFAULT_TABLE {
                    "the table default is given twice (--db FILE is --table default=FILE)".into()
                } else {
                    format!("the table {} is given twice (--table)", t.name)
                });
            }
            tables.push((t.name.clone(), TableSource::File(t.file.clone())));
        }
        if tables.is_empty() {
            return Err("give the database: --db FILE, --table NAME=FILE or --synthetic".into());
        }
        Ok(tables)
    }

    pub fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.heartbeat_ms)
    }

    pub fn epoch_wait(&self) -> Duration {
        Duration::from_millis(self.epoch_wait_ms)
    }

    pub fn block(&self) -> Duration {
        Duration::from_millis(self.block_ms)
    }

    /// The delivery rules of [`pirq_queue::consumer::Consumer`].
    pub fn policy(&self) -> pirq_queue::consumer::Policy {
        pirq_queue::consumer::Policy {
            claim_idle: self.claim_idle_ms.map(Duration::from_millis),
            max_deliveries: self.max_deliveries,
            dead_letter_max: self.dead_letter_max,
        }
    }

    /// The consumer name: the flag, or `<host>-<pid>-<random>`.
    pub fn consumer_name(&self) -> String {
        if let Some(c) = &self.consumer {
            return c.clone();
        }
        let host = std::fs::read_to_string("/etc/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "worker".into());
        format!(
            "{host}-{}-{:04x}",
            std::process::id(),
            rand::random::<u16>()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_come_from_db_and_table_flags_and_a_name_twice_is_refused() {
        let config = Config::try_parse_from([
            "pirq-worker",
            "--db",
            "main.pirdb",
            "--table",
            "small=s.pirdb",
            "--table",
            "kv=k.pirdb",
        ])
        .unwrap();
        let names: Vec<String> = config
            .table_sources()
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["default", "small", "kv"]);
        let only_tables = Config::try_parse_from(["pirq-worker", "--table", "a=a.pirdb"]).unwrap();
        assert_eq!(only_tables.table_sources().unwrap().len(), 1);
        let twice =
            Config::try_parse_from(["pirq-worker", "--db", "x", "--table", "default=y"]).unwrap();
        assert!(twice.table_sources().unwrap_err().contains("twice"));
        for bad in ["nofile", "a.b=x", "=x", "a="] {
            assert!(
                Config::try_parse_from(["pirq-worker", "--table", bad]).is_err(),
                "{bad}"
            );
        }
        assert!(Config::try_parse_from(["pirq-worker"]).is_err());
        // An empty list (Compose's PIRQ_TABLES left empty) is no table, not a bad one.
        let empty = Config::try_parse_from(["pirq-worker", "--db", "x", "--table", ""]).unwrap();
        assert_eq!(empty.table_sources().unwrap().len(), 1);
    }
}
