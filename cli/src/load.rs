//! `pirq bench load`: drive two running parties with private queries and measure what a client
//! sees.
//!
//! Two ways to offer load:
//! - **open loop** (`--rate R`): query `i` is due at `start + i / R` whether or not earlier ones
//!   have finished, as independent clients would send them. Latency counts from the moment a
//!   query was *due*, not from when it was sent, so a stalled system shows up as latency
//!   instead of being hidden by a slower send rate (coordinated omission). Past
//!   `--max-in-flight` queries, due queries are counted as `skipped` rather than queued without
//!   bound in the generator.
//! - **closed loop** (`--concurrency C`): C clients each send their next query when the
//!   previous one is answered; the offered rate is whatever the system sustains.
//!
//! Every query fetches `--keys` random pages through the library's two-party fetch, the code of
//! `pirq query` and `pirq get` (`Client::fetch`: one DPF key pair per page, both halves
//! submitted concurrently, epochs and database digests checked, answers XORed; the parties'
//! info read once and kept), and, with `--verify FILE`, every page is compared with the
//! database file: a wrong page is an error, never a latency sample. Refusals (429, 503) are
//! retried after their `Retry-After` and reported as such beside the latencies.
//! `--kv-records FILE` turns each query into `--keys` key-value lookups (`docs/spec/kv.md` §6: `d`
//! DPF keys per lookup, all in one query per party): keys drawn from the records file (whose
//! values every answer must reproduce) or, with probability `--kv-absent`, random keys that must
//! come back absent.
//! `--submit-only` measures the gateway alone (its ceiling): each query is only submitted to
//! party A (`POST /v1/queries`, answered 202 once the job is on the Redis stream) and never
//! awaited, so no worker needs to run; latency is the POST round trip. Requests are
//! pre-generated so that key generation does not compete with the gateway for the CPU.
//!
//! Latencies go into an HDR histogram (µs, 3 significant digits); the report gives p50, p90, p99,
//! p99.9 and max, achieved queries/s and keys/s, and error counts by kind, as JSON (stdout or
//! `--json FILE`) and optionally as a table appended to a `docs/bench/` file (`--record`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use pirq_client::{Client, Options};
use pirq_db::PirDb;
use pirq_shared::dpf::generate;
use pirq_shared::wire::QueryRequest;
use rand::Rng;
use serde::Serialize;

use crate::record::{self, Table};

/// How often `--poll` asks a party for a result: every latency sample includes up to one
/// interval of polling, so a load run polls often (a poll costs the gateway one Redis read).
const POLL_INTERVAL: Duration = Duration::from_millis(5);

#[derive(Args, Debug)]
pub struct LoadArgs {
    // Not `crate::parties::PartiesArgs`: here `--party-b` is optional (`--submit-only` talks to
    // party A alone), and `--timeout` and `--poll` have a load run's values (60 s,
    // `POLL_INTERVAL`) instead of a single query's.
    /// Base URL of party A's gateway, e.g. http://127.0.0.1:8081.
    #[arg(long, env = "PIRQ_PARTY_A")]
    party_a: String,
    /// Base URL of party B's gateway. Required, except with --submit-only (which talks to
    /// party A alone).
    #[arg(long, env = "PIRQ_PARTY_B", required_unless_present = "submit_only")]
    party_b: Option<String>,
    /// The parties' table to look up in (`GET /v1/tables` lists them; default: the table
    /// `default`, the only one of a party that serves one database).
    #[arg(long, env = "PIRQ_TABLE", value_name = "NAME")]
    table: Option<String>,
    /// Accept party URLs that reach the same party (it then sees both keys of every pair):
    /// for capacity runs against one party only.
    #[arg(long)]
    allow_same_party: bool,
    /// Only submit queries to party A and never wait for answers: the gateway's own ceiling.
    #[arg(long, conflicts_with_all = ["verify", "poll", "sse"])]
    submit_only: bool,
    /// Open loop: queries offered per second, sent on schedule regardless of answers.
    #[arg(
        long,
        conflicts_with = "concurrency",
        required_unless_present = "concurrency"
    )]
    rate: Option<f64>,
    /// Closed loop: clients that each send a query as soon as their previous one is answered.
    #[arg(long)]
    concurrency: Option<usize>,
    /// Seconds of measured load.
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// Seconds of load before measuring starts (fills the pipeline, warms caches).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Pages (DPF keys) per query.
    #[arg(long, default_value_t = 1)]
    keys: usize,
    /// Compare every fetched page with this database file (the one both parties serve).
    #[arg(long, value_name = "FILE", required_unless_present_any = ["no_verify", "submit_only", "kv_records"])]
    verify: Option<PathBuf>,
    /// Key-value lookups instead of page fetches: records of the parties' kv database, in any
    /// format `pirq kv build` reads (by extension or --kv-format), keys and values read the way
    /// the table records; every value found is checked.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["verify", "submit_only"])]
    kv_records: Option<PathBuf>,
    /// With --kv-records: the records' format (default: from the extension, as kv build).
    #[arg(long, value_enum, requires = "kv_records")]
    kv_format: Option<crate::kv::records::Format>,
    /// With CSV --kv-records: the key column, by name (as kv build's --key-column).
    #[arg(long, value_name = "NAME", requires = "kv_records")]
    kv_key_column: Option<String>,
    /// With CSV --kv-records: the value column, by name (as kv build's --value-column).
    #[arg(long, value_name = "NAME", requires = "kv_records")]
    kv_value_column: Option<String>,
    /// With --kv-records: how many records of the file to draw keys from (its first N lines).
    #[arg(long, default_value_t = 100_000)]
    kv_sample: usize,
    /// With --kv-records: the fraction of lookups for random keys, which must be absent.
    #[arg(long, default_value_t = 0.5)]
    kv_absent: f64,
    /// Do not check the pages (only when no copy of the database is at hand).
    #[arg(long)]
    no_verify: bool,
    /// Check every page's publisher signature against this public key file (a signed
    /// database, docs/spec/signed.md), as `pirq query --publisher-key` does: its cost is then
    /// part of every lookup measured.
    #[arg(long, value_name = "FILE")]
    publisher_key: Option<std::path::PathBuf>,
    /// Wait for answers by polling (every 5 ms) instead of asking the party to hold them.
    #[arg(long, conflicts_with = "sse")]
    poll: bool,
    /// Wait for answers by Server-Sent Events alone, without asking the party to hold them
    /// (`Prefer: wait`): a submit and then a second request for every query.
    #[arg(long)]
    sse: bool,
    /// Send requests and read answers as bincode instead of JSON.
    #[arg(long)]
    bincode: bool,
    /// Seconds one query may take, every request and body read included, before it counts as
    /// a timeout error.
    #[arg(long, default_value_t = 60, value_parser = crate::parties::seconds)]
    timeout: u64,
    #[command(flatten)]
    transport: crate::parties::TransportArgs,
    #[command(flatten)]
    tokens: crate::parties::TokenArgs,
    /// Open loop only: most queries in flight; further due queries are skipped and counted.
    #[arg(long, default_value_t = 4096)]
    max_in_flight: u64,
    /// Write the JSON report here instead of stdout.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also append the results as a table to this markdown file (e.g. docs/bench/load.md).
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// No progress bar (for logs and CI).
    #[arg(long)]
    quiet: bool,
}

/// How load was offered.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Mode {
    Open { rate: f64 },
    Closed { concurrency: usize },
}

/// The JSON report.
#[derive(Debug, Serialize)]
pub struct Report {
    pub mode: Mode,
    /// `fetch` (both parties, answers awaited) or `submit` (party A's gateway only).
    pub work: &'static str,
    /// DPF keys (pages) per query.
    pub keys_per_query: usize,
    /// Key-value lookups per query (`keys_per_query / d`), in kv mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lookups_per_query: Option<usize>,
    pub encoding: &'static str,
    pub wait: &'static str,
    pub verified: bool,
    pub duration_s: f64,
    /// Queries answered (and verified) inside the measured interval.
    pub ok: u64,
    /// Failed queries by kind (timeout, http, `api_<code>`, `failed_<code>`, wrong_page, ...).
    pub errors: BTreeMap<String, u64>,
    /// Open loop: queries that were due while `max_in_flight` were outstanding, never sent.
    pub skipped: u64,
    /// Submits the parties refused with 429 (backlog or storage full, rate limits) and with
    /// 503 (caps, Redis down), warm-up included; each was retried after its `Retry-After`
    /// (jittered) while the query's deadline allowed.
    pub refused_429: u64,
    pub refused_503: u64,
    /// Requests sent again (after a refusal, a failed connection, a broken event stream).
    pub retries: u64,
    /// `GET /v1/info` requests, both parties, warm-up included: about one per party while the
    /// epoch stays the same (the client keeps the parties' info between queries).
    pub info_requests: u64,
    pub achieved_qps: f64,
    pub achieved_keys_per_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub achieved_lookups_per_s: Option<f64>,
    pub latency_ms: Latency,
}

#[derive(Debug, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Latency {
        let ms = |us: u64| us as f64 / 1000.0;
        Latency {
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
            mean: h.mean() / 1000.0,
        }
    }
}

/// What the query tasks share: the parties, the database to check against, the tallies.
struct Shared {
    client: Client,
    /// Submit-only mode: the requests to cycle through.
    submit: Option<Vec<QueryRequest>>,
    next: AtomicU64,
    options: Options,
    db: Option<PirDb>,
    num_pages: u64,
    keys: usize,
    /// Kv mode: the layout and the records to look up.
    kv: Option<KvLookups>,
    /// Samples before this instant are warm-up and not counted.
    measure_from: Instant,
    tally: Mutex<Tally>,
    in_flight: AtomicU64,
}

/// What kv mode looks up: keys with known values, and how often to ask for a random one.
struct KvLookups {
    params: pirq_shared::kv::KvParams,
    records: Vec<(Vec<u8>, Vec<u8>)>,
    absent: f64,
}

/// The first `n` records of a records file, read as `pirq kv build` reads them with the table's
/// recorded encodings.
fn read_kv_records(
    path: &std::path::Path,
    format: Option<crate::kv::records::Format>,
    columns: &crate::kv::records::Columns,
    n: usize,
    params: &pirq_shared::kv::KvParams,
) -> anyhow::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    use crate::kv::records::{self, Encodings, Format, Records, Sizes};
    let format = Format::pick(format, path);
    if format != Format::Csv && (columns.key.is_some() || columns.value.is_some()) {
        bail!("--kv-key-column and --kv-value-column name CSV columns; --kv-records is not CSV");
    }
    let sizes = Sizes {
        key_size: params.layout.key_size as usize,
        kind: params.kind(),
        value_size: params.value_size(),
    };
    let mut reader = Records::new(
        records::open(path)?,
        format,
        sizes,
        Encodings::of_table(params.encodings()),
        columns.clone(),
    );
    std::iter::from_fn(|| reader.next_record())
        .take(n)
        .map(|r| {
            let r = r.with_context(|| format!("--kv-records {}", path.display()))?;
            Ok((r.key, r.value))
        })
        .collect()
}

struct Tally {
    latency_us: Histogram<u64>,
    ok: u64,
    errors: BTreeMap<String, u64>,
    skipped: u64,
}

impl Shared {
    /// Runs one query due at `due` and records its outcome.
    async fn one(&self, due: Instant) {
        let outcome = match &self.submit {
            Some(requests) => self.submit_one(requests).await,
            None if self.kv.is_some() => self.lookup_random().await,
            None => self.fetch_random().await,
        };
        let done = Instant::now();
        if due < self.measure_from {
            return;
        }
        let mut t = self.tally.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Ok(()) => {
                t.ok += 1;
                let us = done.duration_since(due).as_micros() as u64;
                t.latency_us.saturating_record(us.max(1));
            }
            Err(kind) => *t.errors.entry(kind).or_default() += 1,
        }
    }

    /// Submits the next pre-made request to party A; `Err` names the failure.
    async fn submit_one(&self, requests: &[QueryRequest]) -> Result<(), String> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) as usize % requests.len();
        let (a, _) = self.client.parties();
        a.submit(&requests[i], self.options.encoding)
            .await
            .map(|_| ())
            .map_err(|e| e.kind())
    }

    /// Fetches `keys` random pages from both parties (the library's two-party fetch, as
    /// `pirq query` does it) and checks them; `Err` names the failure.
    async fn fetch_random(&self) -> Result<(), String> {
        let indices: Vec<u64> = {
            let mut rng = rand::rng();
            (0..self.keys)
                .map(|_| rng.random_range(0..self.num_pages))
                .collect()
        };
        let fetched = self.client.fetch(&indices).await.map_err(|e| e.kind())?;
        if let Some(db) = &self.db {
            if fetched.epoch != db.header().epoch {
                return Err("wrong_epoch".into());
            }
            for (page, &index) in fetched.pages.iter().zip(&indices) {
                if db.page(index) != Some(page.as_slice()) {
                    return Err("wrong_page".into());
                }
            }
        }
        Ok(())
    }
}

impl Shared {
    /// `keys` lookups in one query per party (KV §6); every answer is checked: `Err` names the
    /// failure.
    async fn lookup_random(&self) -> Result<(), String> {
        let kv = self.kv.as_ref().expect("kv mode");
        let p = &kv.params;
        let mut keys = Vec::with_capacity(self.keys);
        let mut wanted = Vec::with_capacity(self.keys);
        {
            let mut rng = rand::rng();
            for _ in 0..self.keys {
                if rng.random_bool(kv.absent) {
                    let len = match p.layout.key_size {
                        0 => crate::kv::DEFAULT_KEY_SIZE,
                        n => n as usize,
                    };
                    keys.push((0..len).map(|_| rng.random()).collect::<Vec<u8>>());
                    wanted.push(None);
                } else {
                    let (k, v) = &kv.records[rng.random_range(0..kv.records.len())];
                    keys.push(k.clone());
                    wanted.push(Some(v));
                }
            }
        }
        let got = self.client.get_many(&keys).await.map_err(|e| e.kind())?;
        for (found, want) in got.values.iter().zip(&wanted) {
            if found.as_deref() != want.map(Vec::as_slice) {
                return Err("wrong_value".into());
            }
        }
        Ok(())
    }
}

pub fn run(args: LoadArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(run_async(args))
}

async fn run_async(args: LoadArgs) -> anyhow::Result<()> {
    let mode = mode(&args)?;
    let (client, options) = client(&args)?;
    let (info, epoch, max_keys) = if args.submit_only {
        let info = client
            .parties()
            .0
            .info()
            .await
            .context("reading party A's info")?;
        let max_keys = info.max_keys_per_query as usize;
        (info.clone(), info.epoch.newest, max_keys)
    } else {
        client.agree().await.context("reading both parties' info")?
    };
    let kv = kv_lookups(&args, &info)?;
    let dpf_keys = args.keys * kv.as_ref().map_or(1, |kv| kv.params.choices());
    if dpf_keys > max_keys {
        bail!(
            "--keys {} ({dpf_keys} DPF keys) exceeds the parties' limit of {max_keys} keys per query",
            args.keys
        );
    }
    let db = verify_db(&args, &info, epoch)?;
    let submit = args
        .submit_only
        .then(|| premade_requests(&info, epoch, args.keys))
        .transpose()?;

    let warmup = Duration::from_secs_f64(args.warmup);
    let measured = Duration::from_secs_f64(args.duration);
    let start = Instant::now();
    let shared = Arc::new(Shared {
        client,
        submit,
        next: AtomicU64::new(0),
        options,
        db,
        num_pages: info.num_pages,
        keys: args.keys,
        kv,
        measure_from: start + warmup,
        tally: Mutex::new(Tally {
            latency_us: Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds"),
            ok: 0,
            errors: BTreeMap::new(),
            skipped: 0,
        }),
        in_flight: AtomicU64::new(0),
    });
    let end = start + warmup + measured;
    let bar = progress(&shared, warmup + measured, args.quiet);

    match mode {
        Mode::Open { rate } => open_loop(&shared, rate, end, args.max_in_flight).await,
        Mode::Closed { concurrency } => closed_loop(&shared, concurrency, end).await,
    }
    // Queries still in flight at the end finish (or time out) and are counted: they were due
    // inside the measured interval.
    while shared.in_flight.load(Ordering::Acquire) > 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bar.finish_and_clear();

    let report = report(&args, mode, &shared, dpf_keys, measured);
    emit(&args, &report)?;
    let failed: u64 = report.errors.values().sum();
    if report.ok == 0 {
        bail!("no query succeeded ({failed} failed)");
    }
    Ok(())
}

/// Open or closed loop, from the flags, which are checked here.
fn mode(args: &LoadArgs) -> anyhow::Result<Mode> {
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !positive(args.duration) || !(positive(args.warmup) || args.warmup == 0.0) || args.keys == 0
    {
        bail!("--duration must be > 0, --warmup >= 0 and --keys >= 1");
    }
    Ok(match (args.rate, args.concurrency) {
        (Some(rate), None) if positive(rate) => Mode::Open { rate },
        (None, Some(c)) if c > 0 => Mode::Closed { concurrency: c },
        _ => bail!("give --rate R > 0 (open loop) or --concurrency C > 0 (closed loop)"),
    })
}

/// The client of the two parties the flags name, and the options its queries go with.
fn client(args: &LoadArgs) -> anyhow::Result<(Client, Options)> {
    let mut options = Options::from_flags(
        args.poll.then_some(POLL_INTERVAL),
        args.bincode,
        Duration::from_secs(args.timeout),
    );
    if args.sse {
        options.wait = pirq_client::Wait::Events;
    }
    // --submit-only talks to party A alone.
    options.allow_same_party = args.allow_same_party || args.submit_only;
    options.insecure_http = args.transport.insecure_http;
    let party_b = args.party_b.as_deref().unwrap_or(&args.party_a);
    let builder = args
        .transport
        .builder()?
        .party_a(&args.party_a)
        .party_b(party_b)
        .options(options.clone());
    let mut builder = args.tokens.apply(builder);
    if let Some(path) = &args.publisher_key {
        builder = builder.publisher_key_file(path);
    }
    if let Some(table) = &args.table {
        builder = builder.table(table);
    }
    Ok((builder.build()?, options))
}

/// With `--kv-records`: the records to look up (a sample of the file), checked against the
/// table the parties serve.
fn kv_lookups(
    args: &LoadArgs,
    info: &pirq_shared::wire::Info,
) -> anyhow::Result<Option<KvLookups>> {
    let Some(path) = &args.kv_records else {
        return Ok(None);
    };
    let kv = info
        .kv
        .as_ref()
        .context("--kv-records: the parties serve a page database")?;
    let params = kv
        .params(info.page_size, info.num_pages)
        .map_err(|e| anyhow::anyhow!("the parties' kv layout: {e}"))?;
    let columns = crate::kv::records::Columns {
        key: args.kv_key_column.clone(),
        value: args.kv_value_column.clone(),
    };
    let records = read_kv_records(path, args.kv_format, &columns, args.kv_sample, &params)?;
    if records.is_empty() || !(0.0..=1.0).contains(&args.kv_absent) {
        bail!("--kv-records needs at least one record and --kv-absent in 0..=1");
    }
    Ok(Some(KvLookups {
        params,
        records,
        absent: args.kv_absent,
    }))
}

/// With `--verify`: the database every answer is checked against, which must be the one the
/// parties serve at `epoch`.
fn verify_db(
    args: &LoadArgs,
    info: &pirq_shared::wire::Info,
    epoch: u64,
) -> anyhow::Result<Option<PirDb>> {
    let Some(path) = &args.verify else {
        return Ok(None);
    };
    let db = PirDb::open(path).with_context(|| format!("opening {}", path.display()))?;
    let h = db.header();
    if h.num_pages != info.num_pages || h.page_size != info.page_size {
        bail!(
            "{} has {} pages of {} bytes; the parties serve {} pages of {} bytes",
            path.display(),
            h.num_pages,
            h.page_size,
            info.num_pages,
            info.page_size
        );
    }
    if h.epoch != epoch {
        bail!(
            "{} is at epoch {}, the parties serve epoch {epoch}: pages would not match",
            path.display(),
            h.epoch
        );
    }
    Ok(Some(db))
}

/// The run's report from its tally and the client's counters.
fn report(
    args: &LoadArgs,
    mode: Mode,
    shared: &Shared,
    dpf_keys: usize,
    measured: Duration,
) -> Report {
    let t = shared.tally.lock().unwrap_or_else(|e| e.into_inner());
    let stats = shared.client.stats();
    let secs = measured.as_secs_f64();
    let lookups = shared.kv.is_some().then_some(args.keys);
    Report {
        mode,
        work: match (args.submit_only, lookups.is_some()) {
            (true, _) => "submit",
            (false, true) => "kv-get",
            (false, false) => "fetch",
        },
        keys_per_query: dpf_keys,
        lookups_per_query: lookups,
        encoding: if args.bincode { "bincode" } else { "json" },
        wait: match (args.submit_only, args.poll, args.sse) {
            (true, _, _) => "none",
            (false, true, _) => "poll",
            (false, false, true) => "sse",
            (false, false, false) => "inline",
        },
        verified: shared.db.is_some() || lookups.is_some(),
        duration_s: secs,
        ok: t.ok,
        errors: t.errors.clone(),
        skipped: t.skipped,
        refused_429: stats.refused_429,
        refused_503: stats.refused_503,
        retries: stats.retries,
        info_requests: stats.info_requests,
        achieved_qps: t.ok as f64 / secs,
        achieved_keys_per_s: (t.ok * dpf_keys as u64) as f64 / secs,
        achieved_lookups_per_s: lookups.map(|l| (t.ok * l as u64) as f64 / secs),
        latency_ms: Latency::of(&t.latency_us),
    }
}

/// Requests for submit-only mode: party A's halves of key pairs for random indices.
fn premade_requests(
    info: &pirq_shared::wire::Info,
    epoch: u64,
    keys: usize,
) -> anyhow::Result<Vec<QueryRequest>> {
    let mut rng = rand::rng();
    (0..256)
        .map(|_| {
            let keys = (0..keys)
                .map(|_| {
                    let index = rng.random_range(0..info.num_pages);
                    Ok(generate(info.domain_bits, index, &mut rng)?.0.to_bytes())
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            Ok(QueryRequest {
                keys,
                epoch: Some(epoch),
            })
        })
        .collect()
}

/// Sends query `i` at `start + i / rate` until `end`.
async fn open_loop(shared: &Arc<Shared>, rate: f64, end: Instant, max_in_flight: u64) {
    let start = Instant::now();
    for i in 0u64.. {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        if due >= end {
            break;
        }
        tokio::time::sleep_until(due.into()).await;
        if shared.in_flight.load(Ordering::Acquire) >= max_in_flight {
            if due >= shared.measure_from {
                shared
                    .tally
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .skipped += 1;
            }
            continue;
        }
        shared.in_flight.fetch_add(1, Ordering::AcqRel);
        let s = shared.clone();
        tokio::spawn(async move {
            s.one(due).await;
            s.in_flight.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// `concurrency` clients, each with one query outstanding, until `end`.
async fn closed_loop(shared: &Arc<Shared>, concurrency: usize, end: Instant) {
    let clients = (0..concurrency).map(|_| {
        let s = shared.clone();
        tokio::spawn(async move {
            while Instant::now() < end {
                s.in_flight.fetch_add(1, Ordering::AcqRel);
                s.one(Instant::now()).await;
                s.in_flight.fetch_sub(1, Ordering::AcqRel);
            }
        })
    });
    futures::future::join_all(clients).await;
}

/// A bar over the run's seconds with the tallies so far.
fn progress(shared: &Arc<Shared>, total: Duration, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total.as_millis() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {msg}")
            .expect("valid template"),
    );
    let s = shared.clone();
    let b = bar.clone();
    let start = Instant::now();
    tokio::spawn(async move {
        while !b.is_finished() {
            let (ok, err) = {
                let t = s.tally.lock().unwrap_or_else(|e| e.into_inner());
                (t.ok, t.errors.values().sum::<u64>())
            };
            let phase = if Instant::now() < s.measure_from {
                "warm-up"
            } else {
                "measuring"
            };
            b.set_position(start.elapsed().as_millis() as u64);
            b.set_message(format!(
                "{phase}: {ok} ok, {err} errors, {} in flight",
                s.in_flight.load(Ordering::Relaxed)
            ));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    bar
}

/// Prints a summary, writes the JSON report and the optional markdown record.
fn emit(args: &LoadArgs, r: &Report) -> anyhow::Result<()> {
    let work = match r.lookups_per_query {
        Some(l) => format!("kv-get ({l} lookups of {} keys)", r.keys_per_query / l),
        None => r.work.to_string(),
    };
    let offered = match r.mode {
        Mode::Open { rate } => format!("{work}, open loop, {rate} q/s offered"),
        Mode::Closed { concurrency } => format!("{work}, closed loop, {concurrency} clients"),
    };
    let mut table = Table::new(&[
        "mode",
        "keys/query",
        "ok",
        "errors",
        "skipped",
        "429s",
        "503s",
        "retries",
        "q/s",
        "keys/s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms",
    ]);
    table.row(vec![
        offered,
        r.keys_per_query.to_string(),
        r.ok.to_string(),
        r.errors.values().sum::<u64>().to_string(),
        r.skipped.to_string(),
        r.refused_429.to_string(),
        r.refused_503.to_string(),
        r.retries.to_string(),
        format!("{:.1}", r.achieved_qps),
        format!("{:.1}", r.achieved_keys_per_s),
        format!("{:.2}", r.latency_ms.p50),
        format!("{:.2}", r.latency_ms.p90),
        format!("{:.2}", r.latency_ms.p99),
        format!("{:.2}", r.latency_ms.p999),
        format!("{:.2}", r.latency_ms.max),
    ]);
    eprint!("{}", table.to_markdown());
    if !r.errors.is_empty() {
        eprintln!("errors: {:?}", r.errors);
    }
    let json = serde_json::to_string_pretty(r)?;
    match &args.json {
        Some(path) => pirq_db::outfile::write(
            path,
            pirq_db::outfile::Contents::Public,
            (json + "\n").as_bytes(),
        )
        .with_context(|| format!("writing {}", path.display()))?,
        None => crate::outln!("{json}"),
    }
    if let Some(file) = &args.record {
        let body = format!(
            "{}\n{} encoding, {} wait, answers {}; {} s measured after {} s warm-up.\n",
            table.to_markdown(),
            r.encoding,
            r.wait,
            match (r.work, r.verified) {
                ("submit", _) => "not awaited (submit only)",
                ("kv-get", _) => "verified (values of the records file; random keys absent)",
                (_, true) => "verified against the database file",
                (_, false) => "not verified",
            },
            args.duration,
            args.warmup,
        );
        record::append(file, "pirq bench load", &body, &record::load_average())?;
    }
    Ok(())
}
