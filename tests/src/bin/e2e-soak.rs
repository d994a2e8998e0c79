//! `e2e-soak`: the load and the checks of `ops/soak.sh` (issue 25). Against two running parties
//! that serve the same page database, for `--minutes`:
//!
//! - `--clients` loops each send one query of `--keys` random pages to both parties, pinned to
//!   the newest epoch both serve, wait for both answers (a held submit, then long-polls that
//!   survive a gateway's or a Redis's restart), and check the XOR of the answers against what
//!   the page holds **at the epoch answered**: the file, then every page this program replaced;
//! - every `--epoch-every` seconds it replaces `--epoch-pages` random pages with random bytes
//!   and pushes that epoch to both parties (it records the new contents first, so every answer
//!   can be checked).
//!
//! Counted: answered (both answers final and equal to the truth), wrong (final but not equal),
//! lost (a party accepted the query, 202, and never answered it within `--timeout`), refused
//! (a submit the party did not accept: 429/503 while Redis restarts; retried as a new query),
//! failed (a final `failed` answer, by code). Per minute: answered, p50, p99 and max of the time
//! from submit to both answers. The report is JSON (`--report`); the exit status is 1 when
//! anything was wrong or lost, or nothing was answered.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use pirq_client::{ClientError, Encoding, Party};
use pirq_db::PirDb;
use pirq_shared::dpf::generate;
use pirq_shared::update::{EpochUpdate, PageWrite};
use pirq_shared::wire::{QueryRequest, QueryResult, QueryStatus};
use rand::{Rng, RngCore};

#[derive(Parser, Debug)]
#[command(about = "Soak load with verified answers and epoch pushes (ops/soak.sh)")]
struct Args {
    #[arg(long)]
    party_a: String,
    #[arg(long)]
    party_b: String,
    /// The page database both parties serve (at epoch 0).
    #[arg(long)]
    db: PathBuf,
    /// Admin token of both gateways (epoch pushes).
    #[arg(long, env = "PIRQ_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: String,
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Concurrent query loops.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Pages per query.
    #[arg(long, default_value_t = 2)]
    keys: usize,
    /// Seconds between epoch pushes (0: none).
    #[arg(long, default_value_t = 5.0)]
    epoch_every: f64,
    /// Pages each epoch replaces.
    #[arg(long, default_value_t = 4)]
    epoch_pages: usize,
    /// Seconds an accepted query may take before it counts as lost.
    #[arg(long, default_value_t = 180)]
    timeout: u64,
    /// Where to write the JSON report.
    #[arg(long)]
    report: PathBuf,
}

/// A page's replacements: (epoch, contents) in increasing epoch order.
type History = Vec<(u64, Arc<Vec<u8>>)>;

/// What every page holds at every epoch: the file, overlaid by the pages each epoch replaced.
struct Truth {
    db: PirDb,
    writes: RwLock<HashMap<u64, History>>,
}

impl Truth {
    fn page_at(&self, index: u64, epoch: u64) -> Vec<u8> {
        let writes = self.writes.read().unwrap();
        if let Some(list) = writes.get(&index) {
            if let Some((_, page)) = list.iter().rev().find(|(e, _)| *e <= epoch) {
                return page.to_vec();
            }
        }
        self.db
            .page(index)
            .expect("index within the database")
            .to_vec()
    }

    fn record(&self, update: &EpochUpdate) {
        let mut writes = self.writes.write().unwrap();
        for w in &update.pages {
            writes
                .entry(w.index)
                .or_default()
                .push((update.epoch, Arc::new(w.page.clone())));
        }
    }
}

#[derive(Default)]
struct Counts {
    answered: AtomicU64,
    wrong: AtomicU64,
    lost: AtomicU64,
    refused: AtomicU64,
    agree_errors: AtomicU64,
    epochs_pushed: AtomicU64,
    push_retries: AtomicU64,
    failed: Mutex<BTreeMap<String, u64>>,
    /// minute -> latencies (seconds) of the queries answered that minute.
    minutes: Mutex<BTreeMap<u64, Vec<f64>>>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let db = PirDb::open(&args.db).with_context(|| format!("opening {}", args.db.display()))?;
    let truth = Arc::new(Truth {
        db,
        writes: RwLock::new(HashMap::new()),
    });
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(40))
        .build()?;
    let a = Party::new(http.clone(), &args.party_a);
    let b = Party::new(http, &args.party_b);
    let counts = Arc::new(Counts::default());
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.minutes * 60.0);

    let mut tasks = Vec::new();
    if args.epoch_every > 0.0 {
        tasks.push(tokio::spawn(push_epochs(
            a.clone(),
            b.clone(),
            args.admin_token.clone(),
            truth.clone(),
            counts.clone(),
            Duration::from_secs_f64(args.epoch_every),
            args.epoch_pages,
            end,
        )));
    }
    for _ in 0..args.clients {
        tasks.push(tokio::spawn(query_loop(
            a.clone(),
            b.clone(),
            truth.clone(),
            counts.clone(),
            args.keys,
            Duration::from_secs(args.timeout),
            start,
            end,
        )));
    }
    tokio::spawn(progress(counts.clone(), start, end));
    for t in tasks {
        t.await?;
    }

    let report = report(&counts, start);
    std::fs::write(&args.report, serde_json::to_vec_pretty(&report)?)?;
    let (answered, wrong, lost) = (
        counts.answered.load(Ordering::Relaxed),
        counts.wrong.load(Ordering::Relaxed),
        counts.lost.load(Ordering::Relaxed),
    );
    println!(
        "soak: answered {answered}, wrong {wrong}, accepted-and-lost {lost}, refused {}, failed {:?}, epochs pushed {}",
        counts.refused.load(Ordering::Relaxed),
        counts.failed.lock().unwrap(),
        counts.epochs_pushed.load(Ordering::Relaxed),
    );
    if wrong > 0 || lost > 0 || answered == 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// One epoch after another: record the new contents, then push to A and to B until each has
/// it (a push that failed in flight may have landed: the party's epoch says so).
#[allow(clippy::too_many_arguments)]
async fn push_epochs(
    a: Party,
    b: Party,
    token: String,
    truth: Arc<Truth>,
    counts: Arc<Counts>,
    every: Duration,
    pages: usize,
    end: Instant,
) {
    let (num_pages, page_size) = (truth.db.num_pages(), truth.db.page_size());
    let mut epoch = loop {
        match (a.info().await, b.info().await) {
            (Ok(ia), Ok(ib)) => break ia.epoch.newest.max(ib.epoch.newest),
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    };
    assert_eq!(epoch, 0, "the soak starts from a database at epoch 0");
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    while Instant::now() < end {
        tick.tick().await;
        epoch += 1;
        let update = {
            let mut rng = rand::rng();
            EpochUpdate {
                epoch,
                pages: (0..pages)
                    .map(|_| {
                        let mut page = vec![0u8; page_size];
                        rng.fill_bytes(&mut page);
                        PageWrite {
                            index: rng.random_range(0..num_pages),
                            page,
                        }
                    })
                    .collect(),
            }
        };
        truth.record(&update);
        for party in [&a, &b] {
            loop {
                match party.push_epoch(&token, &update).await {
                    Ok(_) => break,
                    Err(e) => {
                        if party.info().await.is_ok_and(|i| i.epoch.newest >= epoch) {
                            break;
                        }
                        counts.push_retries.fetch_add(1, Ordering::Relaxed);
                        if counts.push_retries.load(Ordering::Relaxed) % 10 == 1 {
                            eprintln!(
                                "soak: pushing epoch {epoch} to {}: {e}; retrying",
                                party.base()
                            );
                        }
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
        }
        counts.epochs_pushed.fetch_add(1, Ordering::Relaxed);
    }
}

/// How long a submit asks the gateway to hold its answer (the client library's default).
const HOLD: Duration = Duration::from_secs(25);

enum Outcome {
    Final(QueryResult),
    Refused,
    Lost,
}

/// Submits and waits for one party's answer. Errors after acceptance (a gateway or Redis
/// restarting) are retried until `deadline`.
async fn ask(party: &Party, request: &QueryRequest, deadline: Instant) -> Outcome {
    let submitted = match party
        .submit_waiting(request, Encoding::Json, Some(HOLD))
        .await
    {
        Ok(s) => s,
        Err(_) => return Outcome::Refused,
    };
    if matches!(
        submitted.result.status,
        QueryStatus::Done | QueryStatus::Failed
    ) {
        return Outcome::Final(submitted.result);
    }
    while Instant::now() < deadline {
        match party.status(&submitted.id, Encoding::Json, Some(10)).await {
            Ok(r) if matches!(r.status, QueryStatus::Done | QueryStatus::Failed) => {
                return Outcome::Final(r)
            }
            Ok(_) => {}
            Err(ClientError::Api { status: 404, .. }) => {
                // Gone: the record expired or was lost with Redis.
                return Outcome::Lost;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    Outcome::Lost
}

#[allow(clippy::too_many_arguments)]
async fn query_loop(
    a: Party,
    b: Party,
    truth: Arc<Truth>,
    counts: Arc<Counts>,
    keys: usize,
    timeout: Duration,
    start: Instant,
    end: Instant,
) {
    while Instant::now() < end {
        // The newest epoch both serve, as the client library pins it.
        let (info, epoch) = match (a.info().await, b.info().await) {
            (Ok(ia), Ok(ib)) => {
                let epoch = ia.epoch.newest.min(ib.epoch.newest);
                (ia, epoch)
            }
            _ => {
                counts.agree_errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let (indices, req_a, req_b) = {
            let mut rng = rand::rng();
            let indices: Vec<u64> = (0..keys)
                .map(|_| rng.random_range(0..info.num_pages))
                .collect();
            let (mut ka, mut kb) = (Vec::new(), Vec::new());
            for &i in &indices {
                let (k0, k1) = generate(info.domain_bits, i, &mut rng).expect("key generation");
                ka.push(k0.to_bytes());
                kb.push(k1.to_bytes());
            }
            let req = |keys| QueryRequest {
                keys,
                epoch: Some(epoch),
            };
            (indices, req(ka), req(kb))
        };
        let t0 = Instant::now();
        let deadline = t0 + timeout;
        let (ra, rb) = tokio::join!(ask(&a, &req_a, deadline), ask(&b, &req_b, deadline));
        let latency = t0.elapsed().as_secs_f64();
        let mut finals = Vec::new();
        for outcome in [ra, rb] {
            match outcome {
                Outcome::Final(r) => finals.push(r),
                Outcome::Refused => {
                    counts.refused.fetch_add(1, Ordering::Relaxed);
                }
                Outcome::Lost => {
                    counts.lost.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if finals.len() != 2 {
            // One side refused or lost: nothing to combine; back off a little.
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let (ra, rb) = (&finals[0], &finals[1]);
        let failed: Vec<&QueryResult> = finals
            .iter()
            .filter(|r| r.status == QueryStatus::Failed)
            .collect();
        if !failed.is_empty() {
            let mut f = counts.failed.lock().unwrap();
            for r in failed {
                let code = r
                    .error
                    .as_ref()
                    .map(|e| e.code.clone())
                    .unwrap_or_else(|| "unknown".into());
                *f.entry(code).or_default() += 1;
            }
            continue;
        }
        let right = ra.epoch == Some(epoch)
            && rb.epoch == Some(epoch)
            && ra.digest.is_some()
            && ra.digest == rb.digest
            && ra.pages.len() == indices.len()
            && rb.pages.len() == indices.len()
            && indices.iter().enumerate().all(|(k, &i)| {
                let page: Vec<u8> = ra.pages[k]
                    .iter()
                    .zip(&rb.pages[k])
                    .map(|(x, y)| x ^ y)
                    .collect();
                page == truth.page_at(i, epoch)
            });
        if right {
            counts.answered.fetch_add(1, Ordering::Relaxed);
            let minute = (t0 - start).as_secs() / 60;
            counts
                .minutes
                .lock()
                .unwrap()
                .entry(minute)
                .or_default()
                .push(latency);
        } else {
            counts.wrong.fetch_add(1, Ordering::Relaxed);
            eprintln!(
                "soak: WRONG answer at epoch {epoch} for pages {indices:?} (epochs {:?}/{:?})",
                ra.epoch, rb.epoch
            );
        }
    }
}

async fn progress(counts: Arc<Counts>, start: Instant, end: Instant) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    tick.tick().await;
    while Instant::now() < end {
        tick.tick().await;
        eprintln!(
            "soak: {:.0} min: answered {}, wrong {}, lost {}, refused {}, epochs {}",
            start.elapsed().as_secs_f64() / 60.0,
            counts.answered.load(Ordering::Relaxed),
            counts.wrong.load(Ordering::Relaxed),
            counts.lost.load(Ordering::Relaxed),
            counts.refused.load(Ordering::Relaxed),
            counts.epochs_pushed.load(Ordering::Relaxed),
        );
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i]
}

fn report(counts: &Counts, start: Instant) -> serde_json::Value {
    let minutes: Vec<serde_json::Value> = counts
        .minutes
        .lock()
        .unwrap()
        .iter()
        .map(|(m, lat)| {
            let mut l = lat.clone();
            l.sort_by(f64::total_cmp);
            serde_json::json!({
                "minute": m,
                "answered": l.len(),
                "p50_ms": quantile(&l, 0.5) * 1e3,
                "p99_ms": quantile(&l, 0.99) * 1e3,
                "max_ms": l.last().copied().unwrap_or(0.0) * 1e3,
            })
        })
        .collect();
    serde_json::json!({
        "seconds": start.elapsed().as_secs_f64(),
        "answered": counts.answered.load(Ordering::Relaxed),
        "wrong": counts.wrong.load(Ordering::Relaxed),
        "accepted_and_lost": counts.lost.load(Ordering::Relaxed),
        "refused": counts.refused.load(Ordering::Relaxed),
        "failed": *counts.failed.lock().unwrap(),
        "agree_errors": counts.agree_errors.load(Ordering::Relaxed),
        "epochs_pushed": counts.epochs_pushed.load(Ordering::Relaxed),
        "push_retries": counts.push_retries.load(Ordering::Relaxed),
        "minutes": minutes,
    })
}
