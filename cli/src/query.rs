//! `pirq query`: fetch pages privately from two running parties.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};

use crate::parties::{self, PartiesArgs};

#[derive(clap::Args, Debug)]
pub struct QueryArgs {
    #[command(flatten)]
    pub parties: PartiesArgs,
    /// Page index to fetch; repeat for several (they go out as one query per party).
    #[arg(long = "index", required = true)]
    pub indices: Vec<u64>,
    /// Write each page to DIR/page-<index>.bin.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
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
    parties::runtime()?.block_on(run_async(args))
}

pub async fn run_async(args: QueryArgs) -> anyhow::Result<()> {
    let mut options = args.parties.options();
    options.allow_same_party = args.allow_same_party;
    let client = args.parties.client(options)?;
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
        if args.parties.poll {
            "polling"
        } else {
            "answers held by the parties (Prefer: wait), else server-sent events"
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
