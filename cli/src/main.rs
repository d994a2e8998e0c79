//! `pirq`: the pirq command-line tool.
//!
//! Offline tools (database files, keys, local answers) work without any server; `query` talks to
//! two running parties; `bench` measures the scanner and the system.

mod answer;
mod bench;
mod db;
mod diff;
mod epoch;
mod eth;
mod get;
mod interrupt;
mod keys;
mod kv;
mod load;
mod manifests;
mod output;
mod parties;
mod publisher;
mod query;
mod record;
mod split;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "pirq",
    version,
    about = "Two-server private page retrieval: tools, client and benchmarks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Database files (.pirdb): generate, import, inspect, verify, sign, split, apply updates.
    #[command(subcommand)]
    Db(db::DbCommand),
    /// Publisher keys: make the key pair that signs databases (docs/spec/signed.md).
    #[command(subcommand)]
    Publisher(publisher::PublisherCommand),
    /// Epoch updates: make one, push one to a party.
    #[command(subcommand)]
    Epoch(EpochCommand),
    /// DPF keys: generate a pair for one index.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Answer one key locally, as one party would (raw page bytes out).
    Answer(answer::AnswerArgs),
    /// XOR two parties' answers into the retrieved page.
    Combine(answer::CombineArgs),
    /// Fetch pages privately from two running parties (verifies they serve the same database).
    Query(query::QueryArgs),
    /// Key-value databases: build one from records, generate records, update by key.
    #[command(subcommand)]
    Kv(kv::KvCommand),
    /// Ethereum state as tables, and a wallet's JSON-RPC endpoint answered privately from two
    /// parties (docs/eth.md): import a geth dump, follow blocks, serve.
    #[command(subcommand)]
    Eth(eth::EthCommand),
    /// Look keys up privately in a kv database served by two parties (values printed as the
    /// table records them: text, JSON or hex; exit 0 all found, 1 any absent, 2 error).
    Get(get::GetArgs),
    /// Benchmarks (results as a table, optionally recorded under docs/bench/).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Print a shell completion script (e.g. `pirq completions bash > /etc/bash_completion.d/pirq`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Subcommand)]
enum EpochCommand {
    /// Write a random update (whole-page replacements) for a database.
    Make(epoch::MakeArgs),
    /// Push an update file to a party (its gateway's admin route).
    Push(epoch::PushArgs),
}

/// Errors end the process with one line (`error: <what>: <why>`, each cause once), never a
/// backtrace, whatever `RUST_BACKTRACE` says: release builds have no symbols to show anyway.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The reader of standard output went away (`pirq … | head`): nothing to say to it.
        Err(e) if output::is_broken_pipe(&e) => {
            std::process::ExitCode::from(output::BROKEN_PIPE_STATUS as u8)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if writes_files(&cli.command) {
        interrupt::remove_temp_files_on_signal()?;
    }
    match cli.command {
        Command::Db(cmd) => db::run(cmd),
        Command::Keys(cmd) => keys::run(cmd),
        Command::Publisher(cmd) => publisher::run(cmd),
        Command::Epoch(EpochCommand::Make(args)) => epoch::make(args),
        Command::Epoch(EpochCommand::Push(args)) => epoch::push(args),
        Command::Answer(args) => answer::answer(args),
        Command::Combine(args) => answer::combine(args),
        Command::Query(args) => query::run(args),
        Command::Kv(cmd) => kv::run(cmd),
        Command::Eth(cmd) => eth::run(cmd),
        Command::Get(args) => get::run(args),
        Command::Bench(cmd) => bench::run(cmd),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            // Generated into memory first: clap_complete panics when its writer fails, and a
            // reader such as `head` may close standard output early.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "pirq", &mut script);
            output::print(script)
        }
    }
}

/// Commands that write a file (a database, an update, records): on SIGINT or SIGTERM they
/// remove their unfinished temporary file before exiting.
fn writes_files(command: &Command) -> bool {
    match command {
        Command::Db(db::DbCommand::Info { .. } | db::DbCommand::Verify(_)) => false,
        Command::Kv(kv::KvCommand::Get(_) | kv::KvCommand::Stats(_)) => false,
        Command::Db(_) | Command::Kv(_) | Command::Epoch(EpochCommand::Make(_)) => true,
        Command::Eth(cmd) => eth::writes_files(cmd),
        _ => false,
    }
}
