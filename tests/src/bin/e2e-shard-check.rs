//! `e2e-shard-check`: checks a running party whose pages are the seeded synthetic generator's
//! (workers started with `--synthetic PAGES:PAGE_SIZE:SEED`, sharded or not), through its
//! gateway, and times it.
//!
//! One party alone cannot reveal a page, but it can answer both keys of a DPF pair: every query
//! carries the pairs of `--pairs` random indices (2 × pairs keys), and for each index the XOR of
//! the two answers must be the generator's page (`pirq_shared::synthetic`), byte for byte.
//! First `--sequential` queries one after another (latency of an idle party), then `--queries`
//! with `--concurrency` in flight (throughput).
//!
//! ```text
//! e2e-shard-check --url http://127.0.0.1:8080 --pages 41943040 --page-size 4096 --seed 7
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use pirq_client::{Encoding, Party, Wait};
use pirq_shared::dpf::generate;
use pirq_shared::synthetic;
use pirq_shared::wire::QueryRequest;
use rand::Rng;

#[derive(Parser)]
struct Args {
    /// The party's gateway.
    #[arg(long)]
    url: String,
    #[arg(long)]
    pages: u64,
    #[arg(long, default_value_t = 4096)]
    page_size: usize,
    #[arg(long)]
    seed: u64,
    /// Index pairs per query (2 keys each).
    #[arg(long, default_value_t = 1)]
    pairs: usize,
    /// Queries sent one after another.
    #[arg(long, default_value_t = 20)]
    sequential: usize,
    /// Queries sent with `--concurrency` in flight.
    #[arg(long, default_value_t = 0)]
    queries: usize,
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Arc::new(Args::parse());
    let party = Arc::new(Party::new(reqwest::Client::new(), &args.url));
    let info = party.info().await.context("GET /v1/info")?;
    if info.num_pages != args.pages {
        bail!(
            "the party serves {} pages, not {}",
            info.num_pages,
            args.pages
        );
    }
    println!(
        "party: {} pages of {} B, {} workers, shards: {}",
        info.num_pages,
        info.page_size,
        info.workers,
        serde_json::to_string(&info.shards)?
    );
    let mut latencies = Vec::new();
    for _ in 0..args.sequential {
        let t = Instant::now();
        one_query(&party, &args, info.domain_bits).await?;
        latencies.push(t.elapsed().as_secs_f64() * 1e3);
    }
    latencies.sort_by(f64::total_cmp);
    if !latencies.is_empty() {
        println!(
            "sequential: {} queries of {} keys, all exact; latency ms p50 {:.2} min {:.2} max {:.2}",
            latencies.len(),
            2 * args.pairs,
            latencies[latencies.len() / 2],
            latencies[0],
            latencies[latencies.len() - 1]
        );
    }
    if args.queries > 0 {
        let t = Instant::now();
        let sem = Arc::new(tokio::sync::Semaphore::new(args.concurrency.max(1)));
        let mut tasks = Vec::new();
        for _ in 0..args.queries {
            let (party, args, sem) = (party.clone(), args.clone(), sem.clone());
            let n = info.domain_bits;
            tasks.push(tokio::spawn(async move {
                let _permit = sem.acquire_owned().await;
                one_query(&party, &args, n).await
            }));
        }
        for task in tasks {
            task.await??;
        }
        let wall = t.elapsed().as_secs_f64();
        println!(
            "concurrent: {} queries of {} keys ({} in flight), all exact, in {:.2} s: {:.0} keys/s",
            args.queries,
            2 * args.pairs,
            args.concurrency,
            wall,
            (args.queries * 2 * args.pairs) as f64 / wall
        );
    }
    Ok(())
}

/// One query of `pairs` key pairs, checked against the generator.
async fn one_query(party: &Party, args: &Args, domain_bits: u8) -> anyhow::Result<()> {
    let mut indices = Vec::with_capacity(args.pairs);
    let (mut first, mut second) = (Vec::new(), Vec::new());
    {
        let mut rng = rand::rng();
        for _ in 0..args.pairs {
            let index = rng.random_range(0..args.pages);
            let (k0, k1) = generate(domain_bits, index, &mut rng)?;
            indices.push(index);
            first.push(k0.to_bytes());
            second.push(k1.to_bytes());
        }
    }
    first.extend(second);
    let request = QueryRequest {
        keys: first,
        epoch: None,
    };
    let result = party
        .query(
            &request,
            Encoding::Bincode,
            Wait::Events,
            Duration::from_secs(120),
        )
        .await?;
    if result.pages.len() != 2 * args.pairs {
        bail!("{} answers for {} keys", result.pages.len(), 2 * args.pairs);
    }
    let mut want = vec![0u8; args.page_size];
    for (i, &index) in indices.iter().enumerate() {
        let mut page = result.pages[i].clone();
        pirq_shared::bits::xor_into(&mut page, &result.pages[args.pairs + i]);
        synthetic::fill_page(args.seed, index, &mut want);
        if page != want {
            bail!("page {index} differs from the generator's");
        }
    }
    Ok(())
}
