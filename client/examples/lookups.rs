//! A throughput probe of the library's own lookup path (what `ops/bench/client-round-trips.sh`
//! runs, built from this tree and from an older one to compare):
//! `cargo run --release -p pirq-client --example lookups -- URL_A URL_B PAGES CLIENTS SECONDS`.
//!
//! CLIENTS tasks share one `Client` and each fetch one random page after another for SECONDS;
//! prints lookups/s and the p50/p99 latency. Only `Client::new` and `Client::fetch`, so the same
//! file builds against older versions of the crate.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [a, b, pages, clients, seconds] = &args[..] else {
        return Err("usage: lookups URL_A URL_B PAGES CLIENTS SECONDS".into());
    };
    let (pages, clients): (u64, usize) = (pages.parse()?, clients.parse()?);
    let run_for = Duration::from_secs_f64(seconds.parse()?);
    let client = pirq_client::Client::new(a, b)?;
    client.fetch(&[0]).await?; // warm: connections (and, where kept, the parties' info)
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let (client, latencies) = (client.clone(), latencies.clone());
            tokio::spawn(async move {
                let mut index = i as u64;
                while start.elapsed() < run_for {
                    index = (index * 6364136223846793005 + 1442695040888963407) % pages;
                    let t = Instant::now();
                    client.fetch(&[index]).await.expect("lookup");
                    latencies.lock().unwrap().push(t.elapsed());
                }
            })
        })
        .collect();
    for t in tasks {
        t.await?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut l = latencies.lock().unwrap().clone();
    l.sort();
    let ms = |q: f64| l[((l.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
    println!(
        "{:.1} lookups/s, p50 {:.2} ms, p99 {:.2} ms, {} lookups",
        l.len() as f64 / elapsed,
        ms(0.5),
        ms(0.99),
        l.len()
    );
    Ok(())
}
