//! `pirq query`: fetch pages privately from two running parties.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};

use crate::output::{BytesAs, JsonLine};
use crate::parties::{self, PartiesArgs};

#[derive(clap::Args, Debug)]
pub struct QueryArgs {
    #[command(flatten)]
    pub parties: PartiesArgs,
    /// Page index to fetch; repeat for several (they go out as one query per party).
    #[arg(long = "index", required = true)]
    pub indices: Vec<u64>,
    /// Write each page to `DIR/page-<index>.bin`; `-` writes the page bytes, in the order of
    /// --index, to standard output (the report then goes to standard error).
    #[arg(long, value_name = "DIR|-")]
    pub out: Option<PathBuf>,
    /// One JSON object per page on standard output: {"index", "page", "epoch", "digest"}.
    #[arg(long, conflicts_with = "out")]
    pub json: bool,
    /// How --json writes page bytes.
    #[arg(long, value_enum, default_value_t = BytesAs::Hex, requires = "json")]
    pub bytes: BytesAs,
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
    // Opened before the lookup: a wrong path fails before the parties are asked.
    let db = match &args.verify {
        Some(path) => Some(
            pirq_db::PirDb::open(path).with_context(|| format!("opening {}", path.display()))?,
        ),
        None => None,
    };
    let start = Instant::now();
    let fetched = client.fetch(&args.indices).await?;
    let elapsed = start.elapsed();
    parties::note_unverified(fetched.verification);

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
    let to_stdout = args.out.as_deref() == Some(std::path::Path::new("-"));
    let dir = args.out.as_ref().filter(|_| !to_stdout);
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut stdout = std::io::stdout().lock();
    // Reports go to stderr whenever stdout carries data (page bytes or JSON).
    let mut report: Box<dyn Write> = if to_stdout || args.json {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    let mut mismatches = 0;
    for (index, page) in args.indices.iter().zip(&fetched.pages) {
        // A page's data: its usable bytes (SPEC §2.5), without a signed database's tail.
        let page = &page[..fetched.usable];
        let mut line = format!("page {index}: {} bytes", page.len());
        let matches = db
            .as_ref()
            .map(|db| db.page(*index).map(|p| &p[..fetched.usable]) == Some(page));
        if to_stdout {
            stdout
                .write_all(page)
                .context("writing pages to standard output")?;
        } else if args.json {
            let mut json = JsonLine::new();
            json.num("index", *index)
                .bytes("page", page, args.bytes)
                .num("epoch", fetched.epoch)
                .digest(fetched.digest);
            if let Some(m) = matches {
                json.bool("matches_file", m);
            }
            writeln!(stdout, "{}", json.finish()).context("writing standard output")?;
        } else if let Some(dir) = dir {
            let path = dir.join(format!("page-{index}.bin"));
            // What the lookup kept private: the owner's only.
            pirq_db::outfile::write(&path, pirq_db::outfile::Contents::Secret, page)
                .with_context(|| format!("writing {}", path.display()))?;
            line.push_str(&format!(", written to {}", path.display()));
        }
        match matches {
            Some(true) => line.push_str(", matches the database file"),
            Some(false) => {
                line.push_str(", DIFFERS from the database file");
                mismatches += 1;
            }
            None => {}
        }
        if !args.json {
            writeln!(report, "{line}")?;
        }
    }
    stdout.flush()?;
    writeln!(
        report,
        "{} page(s) at epoch {}{} in {:.1} ms (both parties, {})",
        fetched.pages.len(),
        fetched.epoch,
        if matches!(
            fetched.verification,
            pirq_client::Verification::Verified | pirq_client::Verification::Advertised
        ) {
            ", every page's publisher signature verified"
        } else {
            ""
        },
        elapsed.as_secs_f64() * 1e3,
        if args.parties.poll {
            "polling"
        } else {
            "answers held by the parties (Prefer: wait), else server-sent events"
        }
    )?;
    if mismatches > 0 {
        bail!(
            "{mismatches} page(s) differ from {}",
            args.verify.as_ref().unwrap().display()
        );
    }
    Ok(())
}
