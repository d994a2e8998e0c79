//! `pirq answer` (one party's local answer) and `pirq combine` (XOR of two answers).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::Args;
use pirq_db::outfile::Contents;
use pirq_db::PirDb;
use pirq_scan::cpu::CpuScanner;
use pirq_scan::Scanner;
use pirq_shared::bits::xor_into;
use pirq_shared::dpf::DpfKey;

#[derive(Args)]
pub struct AnswerArgs {
    /// The party's database.
    #[arg(long)]
    db: PathBuf,
    /// The party's key file (raw bytes, from `pirq keys gen`).
    #[arg(long)]
    key: PathBuf,
    /// Where the answer (page_size raw bytes) goes.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args)]
pub struct CombineArgs {
    /// Party A's answer.
    a: PathBuf,
    /// Party B's answer.
    b: PathBuf,
    /// Where the page goes (a new file is created 0600: it is what the lookup kept private).
    #[arg(long)]
    out: PathBuf,
}

pub fn answer(args: AnswerArgs) -> anyhow::Result<()> {
    let db = Arc::new(PirDb::open(&args.db)?);
    let bytes = read(&args.key)?;
    let key = DpfKey::parse(&bytes)
        .with_context(|| format!("{} is not a valid DPF v1 key", args.key.display()))?;
    let scanner = CpuScanner::new(db, 0)?;
    let answers = scanner.pass(&[key])?;
    pirq_db::outfile::write(&args.out, Contents::Public, answers.answer(0))
        .with_context(|| format!("writing {}", args.out.display()))
}

pub fn combine(args: CombineArgs) -> anyhow::Result<()> {
    let (mut a, b) = (read(&args.a)?, read(&args.b)?);
    if a.len() != b.len() {
        bail!(
            "answers differ in length: {} is {} bytes, {} is {}",
            args.a.display(),
            a.len(),
            args.b.display(),
            b.len()
        );
    }
    xor_into(&mut a, &b);
    // The retrieved page is what the lookup kept private: the owner's only.
    pirq_db::outfile::write(&args.out, Contents::Secret, &a)
        .with_context(|| format!("writing {}", args.out.display()))
}

fn read(path: &PathBuf) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}
