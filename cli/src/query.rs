//! `pirq query`: fetch pages privately from two running parties.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use pirq_client::{Client, Options};

#[derive(clap::Args, Debug)]
pub struct QueryArgs {
    /// Base URL of party A's gateway, e.g. http://127.0.0.1:8080.
    #[arg(long, env = "PIRQ_PARTY_A")]
    pub party_a: String,
    /// Base URL of party B's gateway.
    #[arg(long, env = "PIRQ_PARTY_B")]
    pub party_b: String,
    /// Page index to fetch; repeat for several (they go out as one query per party).
    #[arg(long = "index", required = true)]
    pub indices: Vec<u64>,
    /// Write each page to DIR/page-<index>.bin.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Wait by polling instead of Server-Sent Events.
    #[arg(long)]
    pub poll: bool,
    /// Send requests and read answers as bincode instead of JSON.
    #[arg(long)]
    pub bincode: bool,
    /// Seconds to wait for the answers.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// Accept party URLs that reach the same party. Never for real use: that party sees both
    /// keys and learns which pages are fetched; only for capacity benchmarks.
    #[arg(long)]
    pub allow_same_party: bool,
    /// Compare every page with this local copy of the database file and fail on a difference.
    #[arg(long, value_name = "FILE")]
    pub verify: Option<PathBuf>,
}

/// Runs `pirq query` on its own Tokio runtime.
pub fn run(args: QueryArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(run_async(args))
}

pub async fn run_async(args: QueryArgs) -> anyhow::Result<()> {
    let mut options = Options::from_flags(
        args.poll.then_some(Duration::from_millis(20)),
        args.bincode,
        Duration::from_secs(args.timeout),
    );
    options.allow_same_party = args.allow_same_party;
    let client = Client::with_options(&args.party_a, &args.party_b, options)?;
    let start = Instant::now();
    let fetched = client.fetch(&args.indices).await?;
    let elapsed = start.elapsed();

    let db = match &args.verify {
        Some(path) => Some(
            pirq_shared::db::PirDb::open(path)
                .with_context(|| format!("opening {}", path.display()))?,
        ),
        None => None,
    };
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if let Some(db) = &db {
        if db.header().epoch != fetched.epoch {
            bail!(
                "the parties answered at epoch {}, but {} is at epoch {}: verify against a \
                 snapshot of that epoch (pirq db apply)",
                fetched.epoch,
                args.verify.as_ref().unwrap().display(),
                db.header().epoch
            );
        }
    }
    let mut mismatches = 0;
    for (index, page) in args.indices.iter().zip(&fetched.pages) {
        let mut line = format!("page {index}: {} bytes", page.len());
        if let Some(dir) = &args.out {
            let path = dir.join(format!("page-{index}.bin"));
            std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
            line.push_str(&format!(", written to {}", path.display()));
        }
        if let Some(db) = &db {
            if db.page(*index) == Some(page.as_slice()) {
                line.push_str(", matches the database file");
            } else {
                line.push_str(", DIFFERS from the database file");
                mismatches += 1;
            }
        }
        println!("{line}");
    }
    println!(
        "{} page(s) at epoch {} in {:.1} ms (both parties, {})",
        fetched.pages.len(),
        fetched.epoch,
        elapsed.as_secs_f64() * 1e3,
        if args.poll {
            "polling"
        } else {
            "server-sent events"
        }
    );
    if mismatches > 0 {
        bail!(
            "{mismatches} page(s) differ from {}",
            args.verify.as_ref().unwrap().display()
        );
    }
    Ok(())
}
