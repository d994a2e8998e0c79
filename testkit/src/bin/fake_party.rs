//! `pirq-fake-party`: one fake party (`pirq_testkit::fake_party`) for tests in other languages
//! (the TypeScript client's). Prints `listening on URL` as its first line, then serves until
//! killed. The behaviours are listed in `FAKE_PARTY.md`.

use std::path::PathBuf;

use clap::Parser;
use pirq_testkit::fake_party::{Behaviour, FakeConfig, FakeParty};

#[derive(Parser)]
#[command(
    name = "pirq-fake-party",
    about = "A misbehaving pirq party for client tests"
)]
struct Args {
    /// Address to listen on (port 0: a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// What it does wrong: one of FAKE_PARTY.md's names (honest, silent-connect, ...).
    #[arg(long, default_value = "honest", value_parser = behaviour)]
    behaviour: Behaviour,
    #[arg(long, default_value_t = 256)]
    pages: u64,
    #[arg(long, default_value_t = 256)]
    page_size: u32,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    #[arg(long, default_value_t = 0)]
    epoch: u64,
    /// The `party` id in /v1/info (32 hex digits; random by default).
    #[arg(long)]
    party_id: Option<String>,
    /// Serve a key-value database of this many records (`key-<i>` → `value-<i, 10 digits>`).
    #[arg(long, default_value_t = 0)]
    kv_records: u64,
    /// Require `Authorization: Bearer TOKEN` on queries and result reads.
    #[arg(long)]
    token: Option<String>,
    /// Serve HTTPS with this PEM certificate chain (and --tls-key).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

fn behaviour(name: &str) -> Result<Behaviour, String> {
    Behaviour::parse(name).ok_or_else(|| {
        let names: Vec<&str> = Behaviour::ALL.iter().map(|(n, _)| *n).collect();
        format!("unknown behaviour; one of: {}", names.join(", "))
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some((std::fs::read(cert)?, std::fs::read(key)?)),
        _ => None,
    };
    let party = FakeParty::start_on(
        &args.listen,
        FakeConfig {
            behaviour: args.behaviour,
            pages: args.pages,
            page_size: args.page_size,
            seed: args.seed,
            epoch: args.epoch,
            party_id: args.party_id,
            token: args.token,
            tls,
            kv_records: args.kv_records,
        },
    )
    .await?;
    println!("listening on {}", party.url);
    std::future::pending::<()>().await;
    Ok(())
}
