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
    /// Where party A's key goes (a new file is created 0600).
    #[arg(long)]
    out_a: PathBuf,
    /// Where party B's key goes.
    #[arg(long)]
    out_b: PathBuf,
}

pub fn run(cmd: KeysCommand) -> anyhow::Result<()> {
    let KeysCommand::Gen(args) = cmd;
    let (a, b) = generate(args.n, args.index, &mut rand::rng())?;
    // Either key and the other's holder learn the index: both are written 0600.
    let secret = pirq_db::outfile::Contents::Secret;
    pirq_db::outfile::write(&args.out_a, secret, &a.to_bytes())
        .with_context(|| format!("writing {}", args.out_a.display()))?;
    pirq_db::outfile::write(&args.out_b, secret, &b.to_bytes())
        .with_context(|| format!("writing {}", args.out_b.display()))?;
    Ok(())
}
