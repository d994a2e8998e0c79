//! `pirq keys gen`: a DPF key pair for one index, as raw key bytes (SPEC §1.3).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use pirq_shared::dpf::generate;

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Generate the two parties' keys for index --index in a domain of --n bits.
    Gen(GenArgs),
}

#[derive(Args)]
pub struct GenArgs {
    /// Domain bits (the database's: `pirq db info` prints them).
    #[arg(long)]
    n: u8,
    /// The index to retrieve.
    #[arg(long)]
    index: u64,
    /// Where party A's key goes.
    #[arg(long)]
    out_a: PathBuf,
    /// Where party B's key goes.
    #[arg(long)]
    out_b: PathBuf,
}

pub fn run(cmd: KeysCommand) -> anyhow::Result<()> {
    let KeysCommand::Gen(args) = cmd;
    let (a, b) = generate(args.n, args.index, &mut rand::rng())?;
    std::fs::write(&args.out_a, a.to_bytes())
        .with_context(|| format!("writing {}", args.out_a.display()))?;
    std::fs::write(&args.out_b, b.to_bytes())
        .with_context(|| format!("writing {}", args.out_b.display()))?;
    Ok(())
}
