//! `e2e-latency`: idle end-to-end latency of one-page queries through two real parties.
//!
//! Starts two parties (redis-server + pirq-gateway + one CPU pirq-worker each, release builds
//! when run with `--release`) on a synthetic database, then sends single-key queries one after
//! another, so the system is idle when each arrives. For every query it measures, on the
//! client, key generation → both answers received → XOR (end to end), checks the page against
//! the database file, and reads each party's scanner time for that query from the
//! `Server-Timing` header of `GET /v1/queries/{id}`. The overhead of the system is end to end
//! minus the slower party's scan.
//!
//! ```text
//! cargo run --release -p pirq-e2e --bin e2e-latency -- --pages 65536 --page-size 4096 --queries 200
//! ```

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use pirq_client::{Encoding, Options, Wait};
use pirq_e2e::{Cluster, PartyOptions};
use pirq_shared::bits::xor_into;
use pirq_shared::dpf::generate;
use pirq_shared::wire::QueryRequest;
use rand::Rng;

#[derive(Parser)]
struct Args {
    /// Pages in the database (65536 × 4096 B = 256 MiB).
    #[arg(long, default_value_t = 65536)]
    pages: u64,
    #[arg(long, default_value_t = 4096)]
    page_size: u32,
    /// Measured queries.
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// Queries sent first and not measured.
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    /// Scanner threads per worker.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// How the client waits: sse, poll or longpoll.
    #[arg(long, default_value = "sse")]
    wait: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let wait = match args.wait.as_str() {
        "sse" => Wait::Events,
        "poll" => Wait::Poll {
            interval: Duration::from_millis(1),
        },
        "longpoll" => Wait::LongPoll,
        other => bail!("--wait {other}: use sse, poll or longpoll"),
    };
    let options = PartyOptions {
        worker_args: vec!["--threads".into(), args.threads.to_string()],
        ..Default::default()
    };
    eprintln!(
        "starting two parties on a {} MiB database…",
        (args.pages * args.page_size as u64) >> 20
    );
    let cluster = Cluster::start(args.pages, args.page_size, options).await?;
    let client = cluster.client(Options {
        wait,
        encoding: Encoding::Json,
        timeout: Duration::from_secs(60),
        ..Default::default()
    });
    let (info, epoch, _) = client.agree().await?;
    let (pa, pb) = client.parties();
    let http = reqwest::Client::new();
    let mut rng = rand::rng();

    let mut e2e = Vec::new();
    let mut scan = Vec::new();
    let mut overhead = Vec::new();
    let mut keys = Vec::new();
    let mut submit = Vec::new();
    let mut worker = Vec::new();
    for q in 0..args.warmup + args.queries {
        let index = rng.random_range(0..args.pages);
        let start = Instant::now();
        let (k0, k1) = generate(info.domain_bits, index, &mut rand::rng())?;
        let ra = QueryRequest {
            keys: vec![k0.to_bytes()],
            epoch: Some(epoch),
        };
        let rb = QueryRequest {
            keys: vec![k1.to_bytes()],
            epoch: Some(epoch),
        };
        let t_keys = start.elapsed();
        let (sa, sb) = tokio::try_join!(
            pa.submit(&ra, Encoding::Json),
            pb.submit(&rb, Encoding::Json)
        )?;
        let t_submit = start.elapsed();
        let (a, b) = tokio::try_join!(
            pa.wait(&sa.id, Encoding::Json, wait, Duration::from_secs(60)),
            pb.wait(&sb.id, Encoding::Json, wait, Duration::from_secs(60)),
        )?;
        let mut page = a.pages.into_iter().next().context("no answer")?;
        xor_into(&mut page, &b.pages[0]);
        let elapsed = start.elapsed();
        if page != cluster.db.page(index) {
            bail!("page {index} differs from the database file");
        }
        let (scan_a, worker_a) = server_timing(&http, pa.base(), sa.id.as_str()).await?;
        let (scan_b, worker_b) = server_timing(&http, pb.base(), sb.id.as_str()).await?;
        if q >= args.warmup {
            let s = scan_a.max(scan_b);
            e2e.push(elapsed.as_secs_f64() * 1e3);
            scan.push(s);
            overhead.push(elapsed.as_secs_f64() * 1e3 - s);
            keys.push(t_keys.as_secs_f64() * 1e3);
            submit.push((t_submit - t_keys).as_secs_f64() * 1e3);
            worker.push(worker_a.max(worker_b));
        }
    }
    println!(
        "| metric (ms, {} queries, wait {}) | p50 | p90 | p99 | mean |",
        args.queries, args.wait
    );
    println!("|---|---|---|---|---|");
    for (name, v) in [
        ("end to end", &mut e2e),
        ("scan (slower party)", &mut scan),
        ("end to end − scan", &mut overhead),
        ("  of which: key generation", &mut keys),
        ("  of which: both POSTs answered 202", &mut submit),
        (
            "worker: job read → result ready (slower party)",
            &mut worker,
        ),
    ] {
        v.sort_by(f64::total_cmp);
        let p = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.2} |",
            p(0.5),
            p(0.9),
            p(0.99),
            mean
        );
    }
    Ok(())
}

/// The `scan;dur=` and `worker;dur=` of a finished query, in milliseconds.
async fn server_timing(http: &reqwest::Client, base: &str, id: &str) -> anyhow::Result<(f64, f64)> {
    let resp = http.get(format!("{base}/v1/queries/{id}")).send().await?;
    let timing = resp
        .headers()
        .get("server-timing")
        .and_then(|v| v.to_str().ok())
        .context("no Server-Timing header")?
        .to_string();
    let field = |name: &str| {
        timing
            .split(',')
            .find_map(|part| part.trim().strip_prefix(name))
            .and_then(|v| v.parse::<f64>().ok())
            .with_context(|| format!("no {name} in {timing:?}"))
    };
    Ok((field("scan;dur=")?, field("worker;dur=")?))
}
