//! `pirq db gen` and `pirq db info`.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use pirq_shared::db::{self, synthetic, Header, PirDb};

#[derive(Subcommand)]
pub enum DbCommand {
    /// Write a synthetic database at epoch 0 (deterministic in --seed).
    Gen(GenArgs),
    /// Fold epoch updates into a new database file (a snapshot at the last update's epoch).
    Apply(crate::epoch::ApplyArgs),
    /// Print a database file's header fields as JSON.
    Info {
        /// The .pirdb file.
        file: PathBuf,
    },
}

#[derive(Args)]
pub struct GenArgs {
    /// Number of pages.
    #[arg(long)]
    pages: u64,
    /// Page size in bytes: a power of two from 256 to 65536.
    #[arg(long, default_value_t = 4096)]
    page_size: u32,
    /// Seed of the synthetic contents (same seed, same bytes, on every machine).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output file.
    #[arg(long)]
    out: PathBuf,
}

pub fn run(cmd: DbCommand) -> anyhow::Result<()> {
    match cmd {
        DbCommand::Gen(args) => gen(args),
        DbCommand::Apply(args) => crate::epoch::apply(args),
        DbCommand::Info { file } => info(file),
    }
}

fn gen(args: GenArgs) -> anyhow::Result<()> {
    let header = Header {
        page_size: args.page_size,
        num_pages: args.pages,
        epoch: 0,
    };
    header.validate()?;
    let bar = progress_bar(header.pages_len());
    db::write(
        &args.out,
        &header,
        |p, page| synthetic::fill_page(args.seed, p, page),
        |done| bar.set_position(done),
    )
    .with_context(|| format!("writing {}", args.out.display()))?;
    bar.finish_and_clear();
    eprintln!(
        "wrote {} ({} pages of {} bytes, domain bits {})",
        args.out.display(),
        header.num_pages,
        header.page_size,
        header.domain_bits()
    );
    Ok(())
}

/// A byte progress bar, drawn only for writes big enough to watch (and only on a terminal).
fn progress_bar(total: u64) -> ProgressBar {
    if total < 64 << 20 {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .expect("valid template"),
    );
    bar
}

fn info(file: PathBuf) -> anyhow::Result<()> {
    let db = PirDb::open(&file)?;
    let h = db.header();
    let mut info = serde_json::json!({
        "page_size": h.page_size,
        "num_pages": h.num_pages,
        "epoch": h.epoch,
        "domain_bits": h.domain_bits(),
        "pages_bytes": h.pages_len(),
    });
    if let Some(kv) = db.kv() {
        info["kv"] = serde_json::to_value(kv.info())?;
    }
    println!("{}", serde_json::to_string_pretty(&info)?);
    Ok(())
}
