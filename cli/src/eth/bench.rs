//! `pirq eth bench`: wallets opening against `pirq eth serve`, measured (docs/bench/eth.md).
//!
//! Each client opens a wallet over and over: one JSON-RPC batch of 14 reads (a block number,
//! five balances, four nonces, two codes, two storage slots: what a wallet asks when it opens),
//! of accounts drawn from the dump's first `--sample` accounts and, for half the balances,
//! random (absent) addresses. Every answer is checked against the dump while the endpoint serves
//! the dump's block. With `--updates`, one block update is pushed to both parties every
//! `--push-every` seconds during the run, and the time from each push to the first wallet open
//! that sees the new block is measured (freshness), with the reads/s in the seconds after each
//! push beside the rest; with signed tables, `--manifests-from` installs each pushed epoch's
//! manifests where the parties serve them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use rand::seq::IndexedRandom;
use serde_json::{json, Value};

use super::dump::{self, Item};
use super::tables::{self, keccak256};

#[derive(Args)]
pub struct BenchArgs {
    /// The endpoint (`pirq eth serve`'s URL).
    #[arg(long, default_value = "http://127.0.0.1:8545/")]
    endpoint: String,
    /// The dump the parties' tables were imported from (its first --sample accounts are read).
    #[arg(long)]
    dump: PathBuf,
    /// The block the dump is (as given to eth import --block).
    #[arg(long, default_value_t = 0)]
    block: u64,
    /// Accounts of the dump to draw from.
    #[arg(long, default_value_t = 100_000)]
    sample: usize,
    /// Wallets opening at once (closed loop: each opens again as soon as it is answered).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Seconds of measured load.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Update directories (eth import --update-out) to push in turn during the run.
    #[arg(long, num_args = 1..)]
    updates: Vec<PathBuf>,
    /// Seconds between pushes.
    #[arg(long, default_value_t = 12)]
    push_every: u64,
    /// A party's gateway (or admin listener) to push to; give both parties.
    #[arg(long = "push-to")]
    push_to: Vec<String>,
    /// The parties' admin token.
    #[arg(long, env = "PIRQ_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Signed tables: the publisher's manifest directory (`eth import --manifests`), holding
    /// the manifests of every update in --updates. Once each push reaches both parties, every
    /// table's manifests up to the pushed epoch are installed into --manifests-to, as an
    /// operator installs them (docs/eth.md; a manifest of an epoch the parties do not serve yet
    /// would make clients refuse them as stale).
    #[arg(long, requires = "manifests_to", requires = "updates")]
    manifests_from: Option<PathBuf>,
    /// The directory the parties serve the manifest files from (`pirq-gateway
    /// --table-manifests NAME=DIR/NAME.manifests.json`): each is replaced by a rename.
    #[arg(long, requires = "manifests_from")]
    manifests_to: Option<PathBuf>,
}

/// What the dump says about one sampled account.
struct Sampled {
    address: [u8; 20],
    balance: String,
    nonce: String,
    code_hash: [u8; 32],
    slots: Vec<([u8; 32], String)>,
}

/// Reads per wallet open.
const READS: usize = 14;

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if !args.updates.is_empty() && (args.push_to.len() != 2 || args.token.is_none()) {
        bail!("--updates needs both parties (--push-to URL twice) and their admin token");
    }
    let sample = read_sample(&args)?;
    eprintln!(
        "{} accounts sampled from {}",
        sample.len(),
        args.dump.display()
    );
    let runtime = crate::parties::runtime()?;
    runtime.block_on(measure(args, Arc::new(sample)))
}

fn read_sample(args: &BenchArgs) -> anyhow::Result<Vec<Sampled>> {
    let mut sample: Vec<Sampled> = Vec::new();
    const ENOUGH: &str = "enough accounts sampled";
    let input = crate::kv::records::open(&args.dump)?;
    let tmp = std::env::temp_dir();
    let read = dump::read(input, usize::MAX, &tmp, &mut |item| {
        match item {
            Item::Account {
                address, account, ..
            } => {
                if sample.len() == args.sample {
                    return Err(ENOUGH.into());
                }
                sample.push(Sampled {
                    address,
                    balance: tables::quantity(&account.balance),
                    nonce: tables::quantity(&account.nonce.to_be_bytes()),
                    code_hash: account.code_hash,
                    slots: Vec::new(),
                });
            }
            Item::Slot {
                address,
                slot,
                value,
            } => {
                if let Some(s) = sample.last_mut().filter(|s| s.address == address) {
                    if s.slots.len() < 4 {
                        s.slots.push((slot, tables::data(&value)));
                    }
                }
            }
            // A whole dump has none (the reader refuses them).
            Item::Deleted { .. } => {}
        }
        Ok(())
    });
    match read {
        Ok(_) => {}
        Err(e) if format!("{e:#}").contains(ENOUGH) => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", args.dump.display())),
    }
    if sample.is_empty() {
        bail!("{} holds no account", args.dump.display());
    }
    Ok(sample)
}

/// One wallet open: the calls and what each must answer (`None`: not checked).
fn wallet_open(sample: &[Sampled]) -> (Value, Vec<Option<Expect>>) {
    let mut rng = rand::rng();
    let mut calls = vec![json!({"jsonrpc": "2.0", "id": 0, "method": "eth_blockNumber"})];
    let mut expect = vec![None];
    let pick = || sample.choose(&mut rand::rng()).expect("a sample");
    let mut add = |method: &str, params: Value, e: Option<Expect>| {
        let id = calls.len();
        calls.push(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        expect.push(e);
    };
    for i in 0..5 {
        if i % 2 == 0 {
            let a = pick();
            add(
                "eth_getBalance",
                json!([tables::data(&a.address), "latest"]),
                Some(Expect::Exact(a.balance.clone())),
            );
        } else {
            let nobody: [u8; 20] = rand::Rng::random(&mut rng);
            add(
                "eth_getBalance",
                json!([tables::data(&nobody), "latest"]),
                Some(Expect::Exact("0x0".into())),
            );
        }
    }
    for _ in 0..4 {
        let a = pick();
        add(
            "eth_getTransactionCount",
            json!([tables::data(&a.address), "latest"]),
            Some(Expect::Exact(a.nonce.clone())),
        );
    }
    for _ in 0..2 {
        let a = sample
            .iter()
            .filter(|s| s.code_hash != tables::EMPTY_CODE_HASH)
            .collect::<Vec<_>>()
            .choose(&mut rand::rng())
            .copied()
            .unwrap_or_else(pick);
        add(
            "eth_getCode",
            json!([tables::data(&a.address), "latest"]),
            Some(Expect::CodeHash(a.code_hash)),
        );
    }
    for _ in 0..2 {
        let with_slots: Vec<&Sampled> = sample.iter().filter(|s| !s.slots.is_empty()).collect();
        match with_slots.choose(&mut rand::rng()) {
            Some(a) => {
                let (slot, value) = a.slots.choose(&mut rand::rng()).expect("a slot");
                add(
                    "eth_getStorageAt",
                    json!([tables::data(&a.address), tables::data(slot), "latest"]),
                    Some(Expect::Exact(value.clone())),
                );
            }
            None => {
                let a = pick();
                add(
                    "eth_getStorageAt",
                    json!([tables::data(&a.address), "0x0", "latest"]),
                    None,
                );
            }
        }
    }
    debug_assert_eq!(calls.len(), READS);
    (Value::Array(calls), expect)
}

enum Expect {
    Exact(String),
    /// Code whose keccak256 is this (`0x` for the empty code's).
    CodeHash([u8; 32]),
}

impl Expect {
    fn holds(&self, got: &Value) -> bool {
        let Some(text) = got.as_str() else {
            return false;
        };
        match self {
            Expect::Exact(want) => text == want,
            Expect::CodeHash(h) => tables::parse_hex(text).is_ok_and(|c| keccak256(&c) == *h),
        }
    }
}

#[derive(Default)]
struct Counters {
    opens: AtomicU64,
    errors: AtomicU64,
    checked: AtomicU64,
    mismatches: AtomicU64,
    other_block: AtomicU64,
    /// The newest block any open saw.
    newest: AtomicU64,
}

async fn measure(args: BenchArgs, sample: Arc<Vec<Sampled>>) -> anyhow::Result<()> {
    let http = pirq_client::reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()?;
    let counters = Arc::new(Counters::default());
    let latencies = Arc::new(Mutex::new(hdrhistogram::Histogram::<u64>::new(3)?));
    // Opens finished per second of the run.
    let seconds = Arc::new(Mutex::new(vec![0u64; args.duration as usize + 1]));
    let start = Instant::now();
    let end = start + Duration::from_secs(args.duration);
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (http, sample, counters, latencies, seconds, url) = (
            http.clone(),
            sample.clone(),
            counters.clone(),
            latencies.clone(),
            seconds.clone(),
            args.endpoint.clone(),
        );
        let block = args.block;
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let (body, expect) = wallet_open(&sample);
                let sent = Instant::now();
                let answer: Result<Value, _> = async {
                    http.post(&url)
                        .json(&body)
                        .send()
                        .await?
                        .json::<Value>()
                        .await
                }
                .await;
                let took = sent.elapsed();
                let Ok(Value::Array(answers)) = answer else {
                    counters.errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let served = answers
                    .first()
                    .and_then(|a| a["result"].as_str())
                    .and_then(|b| u64::from_str_radix(b.trim_start_matches("0x"), 16).ok());
                let Some(served) = served.filter(|_| answers.len() == READS) else {
                    counters.errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                counters.newest.fetch_max(served, Ordering::Relaxed);
                if served == block {
                    for (a, e) in answers.iter().zip(&expect) {
                        if let Some(e) = e {
                            counters.checked.fetch_add(1, Ordering::Relaxed);
                            if !e.holds(&a["result"]) {
                                counters.mismatches.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                } else {
                    counters.other_block.fetch_add(1, Ordering::Relaxed);
                }
                counters.opens.fetch_add(1, Ordering::Relaxed);
                let _ = latencies
                    .lock()
                    .expect("not poisoned")
                    .record(took.as_micros() as u64);
                let at = (Instant::now() - start).as_secs() as usize;
                if let Some(s) = seconds.lock().expect("not poisoned").get_mut(at) {
                    *s += 1;
                }
            }
        }));
    }
    let freshness = push_updates(&args, &counters, start, end).await?;
    for t in tasks {
        t.await?;
    }
    report(
        &args,
        &counters,
        &latencies.lock().expect("not poisoned"),
        &seconds.lock().expect("not poisoned"),
        &freshness,
    );
    Ok(())
}

/// Pushes each update directory's tables to both parties every `--push-every` seconds; for each
/// push: when it finished (seconds into the run) and how long until an open saw its block.
async fn push_updates(
    args: &BenchArgs,
    counters: &Counters,
    start: Instant,
    end: Instant,
) -> anyhow::Result<Vec<(f64, Option<f64>)>> {
    let mut out = Vec::new();
    if args.updates.is_empty() {
        tokio::time::sleep_until(end.into()).await;
        return Ok(out);
    }
    let http = pirq_client::http_client(Vec::new(), None)?;
    let token = args.token.clone().expect("checked");
    for (n, dir) in args.updates.iter().enumerate() {
        let at = start + Duration::from_secs(args.push_every * (n as u64 + 1));
        if at >= end {
            break;
        }
        tokio::time::sleep_until(at.into()).await;
        let report: Value = serde_json::from_slice(
            &std::fs::read(dir.join("eth.json"))
                .with_context(|| format!("{}/eth.json", dir.display()))?,
        )?;
        let block = report["block"].as_u64().context("eth.json has no block")?;
        let mut epoch = None;
        for table in tables::ALL {
            let update = crate::epoch::read_update(&dir.join(format!("{table}.update")))?;
            epoch = Some(update.epoch);
            let pushes = args.push_to.iter().map(|url| {
                let party = pirq_client::Party::new(http.clone(), url).with_table(Some(table));
                let (token, update) = (token.clone(), update.clone());
                async move { party.push_epoch(&token, &update).await }
            });
            futures::future::try_join_all(pushes).await?;
        }
        let pushed = Instant::now();
        if let (Some(from), Some(to), Some(epoch)) =
            (&args.manifests_from, &args.manifests_to, epoch)
        {
            install_manifests(from, to, epoch)?;
        }
        let mut seen = None;
        while Instant::now() < end {
            if counters.newest.load(Ordering::Relaxed) >= block {
                seen = Some(pushed.elapsed().as_secs_f64());
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        out.push(((pushed - start).as_secs_f64(), seen));
    }
    tokio::time::sleep_until(end.into()).await;
    Ok(out)
}

/// Installs each table's manifests of epochs up to `epoch` from the publisher's directory
/// `from` into `to` (a temporary file renamed over each): what the parties serve once they
/// serve `epoch`.
fn install_manifests(from: &Path, to: &Path, epoch: u64) -> anyhow::Result<()> {
    use pirq_shared::signing::Manifest;
    for table in tables::ALL {
        let name = format!("{table}.manifests.json");
        let source = from.join(&name);
        let bytes =
            std::fs::read(&source).with_context(|| format!("reading {}", source.display()))?;
        let list = Manifest::parse_list(&bytes).with_context(|| source.display().to_string())?;
        let upto: Vec<Manifest> = list.into_iter().filter(|m| m.epoch <= epoch).collect();
        if upto.last().map(|m| m.epoch) != Some(epoch) {
            bail!(
                "{} has no manifest of epoch {epoch}, the epoch just pushed",
                source.display()
            );
        }
        let target = to.join(&name);
        pirq_db::write_atomically(&target, |f| {
            std::io::Write::write_all(f, &Manifest::list_to_json(&upto))
        })
        .with_context(|| format!("writing {}", target.display()))?;
    }
    Ok(())
}

fn report(
    args: &BenchArgs,
    c: &Counters,
    latencies: &hdrhistogram::Histogram<u64>,
    seconds: &[u64],
    freshness: &[(f64, Option<f64>)],
) {
    let opens = c.opens.load(Ordering::Relaxed);
    let secs = args.duration as f64;
    let ms = |q: f64| latencies.value_at_quantile(q) as f64 / 1000.0;
    // Each read is one lookup a table: accounts and storage d = 2 DPF keys, code d = 3; plus
    // the metadata lookup (d = 2) once an open.
    let keys_per_open = READS as u64 * 7 + 2;
    let after_push: Vec<u64> = seconds
        .iter()
        .enumerate()
        .filter(|(s, _)| {
            freshness
                .iter()
                .any(|(p, _)| (*s as f64) >= *p && (*s as f64) < p + 3.0)
        })
        .map(|(_, n)| *n)
        .collect();
    let steady: Vec<u64> = seconds
        .iter()
        .enumerate()
        .skip(2)
        .take(seconds.len().saturating_sub(3))
        .filter(|(s, _)| {
            !freshness
                .iter()
                .any(|(p, _)| (*s as f64) >= *p && (*s as f64) < p + 3.0)
        })
        .map(|(_, n)| *n)
        .collect();
    let mean = |v: &[u64]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<u64>() as f64 / v.len() as f64
        }
    };
    let summary = json!({
        "endpoint_concurrency": args.concurrency,
        "seconds": args.duration,
        "wallet_opens": opens,
        "wallet_opens_per_s": opens as f64 / secs,
        "reads_per_s": (opens * READS as u64) as f64 / secs,
        "party_keys_per_s": (opens * keys_per_open) as f64 / secs,
        "open_ms": {"p50": ms(0.5), "p90": ms(0.9), "p99": ms(0.99), "max": latencies.max() as f64 / 1000.0},
        "errors": c.errors.load(Ordering::Relaxed),
        "values_checked": c.checked.load(Ordering::Relaxed),
        "mismatches": c.mismatches.load(Ordering::Relaxed),
        "opens_at_other_blocks": c.other_block.load(Ordering::Relaxed),
        "pushes": freshness.iter().map(|(at, seen)| json!({"at_s": at, "visible_after_s": seen})).collect::<Vec<_>>(),
        "opens_per_s_steady": mean(&steady),
        "opens_per_s_3s_after_pushes": mean(&after_push),
    });
    println!("{summary}");
}
