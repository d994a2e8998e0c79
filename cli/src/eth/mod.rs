//! `pirq eth …`: Ethereum state as pirq tables, and a wallet's JSON-RPC endpoint that reads them
//! privately from two parties (`docs/eth.md`).
//!
//! The state of one block is three key-value tables (`docs/spec/kv.md`), served by each party
//! with `pirq-worker --table NAME=DIR/NAME.pirdb`:
//! - `accounts`: address (20 bytes) → [`Account`](tables::Account) (balance, nonce, code hash,
//!   storage root; 104 bytes, fixed), plus one metadata record under
//!   [`META_KEY`](tables::META_KEY) ([`Meta`](tables::Meta): the block);
//! - `code`: code hash (32 bytes) → code (variable, up to 24,576 bytes, EIP-170);
//! - `storage`: address ‖ slot (52 bytes) → value (32 bytes, fixed); zero values are absent.
//!
//! The tables move together: an import writes all three at epoch 0, and each block update is
//! one epoch on every table (an empty one where nothing changed), so epoch `e` of every table is
//! the same block, the one the `accounts` table's metadata record names at epoch `e`.

mod bench;
mod build;
mod dump;
mod gen;
mod import;
mod rpc;
mod serve;
mod tables;
mod update;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum EthCommand {
    /// Turn a `geth dump --iterative` JSON-lines dump into the tables accounts, code and storage
    /// (DIR/NAME.pirdb, for `pirq-worker --table NAME=FILE`), on all cores; with --base, the
    /// block update of every table instead (UDIR/NAME.update, for `pirq epoch push --table
    /// NAME`), from the block's whole dump or its changes (--changes).
    Import(import::ImportArgs),
    /// Answer a wallet's JSON-RPC (eth_getBalance, eth_getTransactionCount, eth_getCode,
    /// eth_getStorageAt, eth_blockNumber, eth_chainId) by private reads from two parties.
    Serve(serve::ServeArgs),
    /// Write a synthetic dump (geth's `dump --iterative` lines) of N accounts with code and
    /// storage, deterministic in --seed; --changed M writes the same state one block later
    /// (--changes-only: that block's changes alone); --tables DIR writes instead the tables
    /// `eth import` makes of the dump, the same bytes, on all cores.
    Gen(gen::GenArgs),
    /// Open wallets against `pirq eth serve` (batches of 14 reads checked against the dump),
    /// optionally pushing block updates meanwhile: opens/s, latency, freshness (one JSON line).
    Bench(bench::BenchArgs),
}

pub fn run(cmd: EthCommand) -> anyhow::Result<()> {
    match cmd {
        EthCommand::Import(args) => import::run(args),
        EthCommand::Serve(args) => serve::run(args),
        EthCommand::Gen(args) => gen::run(args),
        EthCommand::Bench(args) => bench::run(args),
    }
}

/// Whether the command writes files (so an interrupt removes its unfinished ones).
pub fn writes_files(cmd: &EthCommand) -> bool {
    matches!(cmd, EthCommand::Import(_) | EthCommand::Gen(_))
}
