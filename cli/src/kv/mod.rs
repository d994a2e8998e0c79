//! `pirq kv …`: key-value databases (`docs/spec/kv.md`): build one from records, generate
//! synthetic records, turn changes by key into an epoch update.

mod build;
mod diff;
mod gen;
mod inspect;
pub mod records;
pub mod update;

pub use build::default_load;

use clap::Subcommand;
use sha2::{Digest, Sha256};

#[derive(Subcommand)]
pub enum KvCommand {
    /// Build a kv database (.pirdb) from a record file (JSON lines, CSV or fixed-width binary).
    Build(build::BuildArgs),
    /// Write synthetic records (deterministic in --seed) for tests and benchmarks.
    Gen(gen::GenArgs),
    /// Turn insert/change/delete lines into an epoch update (whole pages) for `pirq epoch push`.
    Update(update::UpdateArgs),
    /// The update that turns a table into a new full export of its records (inserts, changes,
    /// deletes), for `pirq epoch push`.
    Diff(diff::DiffArgs),
    /// Look keys up in a kv database file, offline (no party): check a build before it ships
    /// (exit 0 all found, 1 any absent, 2 error).
    Get(inspect::GetArgs),
    /// What a kv database file holds: records, load, value sizes, encodings, epoch, digest,
    /// signing.
    Stats(inspect::StatsArgs),
}

pub fn run(cmd: KvCommand) -> anyhow::Result<()> {
    match cmd {
        KvCommand::Build(args) => build::run(args),
        KvCommand::Gen(args) => gen::run(args),
        KvCommand::Update(args) => update::run(args),
        KvCommand::Diff(args) => diff::run(args),
        KvCommand::Get(args) => inspect::get(args),
        KvCommand::Stats(args) => inspect::stats(args),
    }
}

/// Bytes of a key unless told otherwise: `pirq kv gen --key-size`'s default, and the length of
/// the random keys that `pirq bench load --kv-records` looks up (and must find absent) in a table
/// of variable-length keys. 20 bytes is the size of the digests and addresses that serve as
/// keys most often (SHA-1, RIPEMD-160), and at least the 8 that make generated keys unique.
pub const DEFAULT_KEY_SIZE: usize = 20;

/// The layout's hash seed for a `--seed` number: the seed is public (it is in `/v1/info`), so
/// deriving it from a small number loses nothing and makes builds reproducible.
pub fn layout_seed(seed: u64) -> [u8; 32] {
    Sha256::new()
        .chain_update(b"pirq-kv-seed")
        .chain_update(seed.to_le_bytes())
        .finalize()
        .into()
}
