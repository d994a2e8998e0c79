//! What the commands that ask two running parties (`pirq query`, `pirq get`) share: the flags
//! that name the parties and say how to wait, the client they make, and the runtime it runs on.

use std::time::Duration;

use anyhow::Context;
use pirq_client::{Client, Options};

/// How often `--poll` asks a party for a result: well under a pass at any database size, so
/// polling adds little latency, and light for the gateway (one Redis read a poll).
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// `--party-a`, `--party-b`, `--poll`, `--bincode`, `--timeout`; `#[command(flatten)]` them.
#[derive(clap::Args, Debug)]
pub struct PartiesArgs {
    /// Base URL of party A's gateway, e.g. http://127.0.0.1:8080.
    #[arg(long, env = "PIRQ_PARTY_A")]
    pub party_a: String,
    /// Base URL of party B's gateway.
    #[arg(long, env = "PIRQ_PARTY_B")]
    pub party_b: String,
    /// Wait by polling instead of Server-Sent Events.
    #[arg(long)]
    pub poll: bool,
    /// Send requests and read answers as bincode instead of JSON.
    #[arg(long)]
    pub bincode: bool,
    /// Seconds to wait for the answers.
    #[arg(long, default_value_t = pirq_client::DEFAULT_TIMEOUT.as_secs())]
    pub timeout: u64,
}

impl PartiesArgs {
    /// The client options these flags describe.
    pub fn options(&self) -> Options {
        Options::from_flags(
            self.poll.then_some(POLL_INTERVAL),
            self.bincode,
            Duration::from_secs(self.timeout),
        )
    }

    /// A client of the two parties with `options`.
    pub fn client(&self, options: Options) -> Result<Client, pirq_client::ClientError> {
        Client::with_options(&self.party_a, &self.party_b, options)
    }
}

/// The Tokio runtime a command's queries run on: two threads carry two parties' requests.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}
