//! What the commands that talk to parties (`pirq query`, `pirq get`, `pirq bench load`,
//! `pirq epoch push`) share: the flags that name the parties, say how to reach them (TLS roots,
//! plain HTTP, tokens) and how long to wait, the client they make, and its runtime.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use pirq_client::{Client, ClientBuilder, Options};

/// How often `--poll` asks a party for a result: well under a pass at any database size, so
/// polling adds little latency, and light for the gateway (one Redis read a poll).
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// `--party-a`, `--party-b`, `--poll`, `--bincode`, `--timeout`, the transport and the tokens;
/// `#[command(flatten)]` them.
#[derive(clap::Args, Debug)]
pub struct PartiesArgs {
    /// Base URL of party A's gateway, e.g. https://pir-a.example.org (http:// only for
    /// 127.0.0.0/8, ::1 and localhost, unless --insecure-http).
    #[arg(long, env = "PIRQ_PARTY_A")]
    pub party_a: String,
    /// Base URL of party B's gateway (another operator than party A's).
    #[arg(long, env = "PIRQ_PARTY_B")]
    pub party_b: String,
    /// Wait by polling instead of Server-Sent Events.
    #[arg(long)]
    pub poll: bool,
    /// Send requests and read answers as bincode instead of JSON.
    #[arg(long)]
    pub bincode: bool,
    /// Seconds the whole lookup may take: connecting, every request, every body read, waiting.
    #[arg(long, default_value_t = pirq_client::DEFAULT_TIMEOUT.as_secs(),
          value_parser = seconds)]
    pub timeout: u64,
    #[command(flatten)]
    pub transport: TransportArgs,
    #[command(flatten)]
    pub tokens: TokenArgs,
    /// Verify every page against this publisher's public key file (`pirq publisher keygen
    /// --public`; a secret key file is refused): a page that fails its signature or is stale fails the
    /// lookup before anything is printed or written; an unsigned database is refused.
    #[arg(long, env = "PIRQ_PUBLISHER_KEY", value_name = "FILE")]
    pub publisher_key: Option<PathBuf>,
    /// Do not verify a signed database's pages. Without this (and without --publisher-key)
    /// every page is verified against the publisher key both parties advertise.
    #[arg(long, conflicts_with_all = ["publisher_key", "min_epoch"])]
    pub no_verify: bool,
    /// Refuse answers at an epoch below N (the parties could otherwise serve an old, genuinely
    /// signed epoch; docs/spec/signed.md §4.4). Needs --publisher-key.
    #[arg(long, value_name = "N", requires = "publisher_key")]
    pub min_epoch: Option<u64>,
    /// The parties' table to look up in (`GET /v1/tables` lists them; default: the table
    /// `default`, the only one of a party that serves one database).
    #[arg(long, env = "PIRQ_TABLE", value_name = "NAME")]
    pub table: Option<String>,
}

/// A `--timeout` value: whole seconds, at least 1 (a zero deadline could never be met).
pub fn seconds(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("must be at least 1 second (0 would fail every lookup at once)".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("not a whole number of seconds".into()),
    }
}

/// How to reach a party: `--ca-cert`, `--insecure-http`.
#[derive(clap::Args, Debug, Clone)]
pub struct TransportArgs {
    /// Trust this PEM CA certificate besides the system's roots (a private CA, tests).
    #[arg(long, env = "PIRQ_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Accept plain http:// to hosts other than this machine. Whoever observes both
    /// connections then reads both DPF keys and learns the index: only for a network that
    /// nobody else can observe.
    #[arg(long)]
    pub insecure_http: bool,
    /// Reach https:// parties through this proxy (http://HOST:PORT), by CONNECT tunnels only:
    /// it sees the host names, never a request. Plain-http parties never use it, and no proxy
    /// is ever taken from HTTP_PROXY, HTTPS_PROXY or ALL_PROXY (docs/security.md).
    #[arg(long, value_name = "URL")]
    pub proxy: Option<String>,
}

impl TransportArgs {
    /// The CA roots `--ca-cert` names.
    pub fn roots(&self) -> anyhow::Result<Vec<pirq_client::reqwest::Certificate>> {
        let Some(path) = &self.ca_cert else {
            return Ok(Vec::new());
        };
        let pem =
            std::fs::read(path).with_context(|| format!("reading --ca-cert {}", path.display()))?;
        let certs = pirq_client::reqwest::Certificate::from_pem_bundle(&pem)
            .with_context(|| format!("--ca-cert {}: not PEM certificates", path.display()))?;
        anyhow::ensure!(
            !certs.is_empty(),
            "--ca-cert {}: no certificate in it",
            path.display()
        );
        Ok(certs)
    }

    /// A builder with these transport settings.
    pub fn builder(&self) -> anyhow::Result<ClientBuilder> {
        let mut builder = Client::builder().insecure_http(self.insecure_http);
        if let Some(path) = &self.ca_cert {
            builder = builder.ca_cert_file(path);
        }
        if let Some(proxy) = &self.proxy {
            builder = builder.proxy(proxy);
        }
        Ok(builder)
    }
}

/// `--token-a`, `--token-b`: query tokens of parties that require them.
#[derive(clap::Args, Debug, Clone)]
pub struct TokenArgs {
    /// Party A's query token (sent as `Authorization: Bearer`; never printed).
    #[arg(long, env = "PIRQ_TOKEN_A", hide_env_values = true)]
    pub token_a: Option<String>,
    /// Party B's query token (party B is another operator, with its own tokens).
    #[arg(long, env = "PIRQ_TOKEN_B", hide_env_values = true)]
    pub token_b: Option<String>,
}

impl TokenArgs {
    pub fn apply(&self, mut builder: ClientBuilder) -> ClientBuilder {
        if let Some(t) = &self.token_a {
            builder = builder.token_a(t);
        }
        if let Some(t) = &self.token_b {
            builder = builder.token_b(t);
        }
        builder
    }
}

impl PartiesArgs {
    /// The client options these flags describe.
    pub fn options(&self) -> Options {
        Options {
            insecure_http: self.transport.insecure_http,
            ..Options::from_flags(
                self.poll.then_some(POLL_INTERVAL),
                self.bincode,
                Duration::from_secs(self.timeout),
            )
        }
    }

    /// A client of the two parties with `options`.
    pub fn client(&self, options: Options) -> anyhow::Result<Client> {
        let builder = self
            .transport
            .builder()?
            .party_a(&self.party_a)
            .party_b(&self.party_b)
            .options(options);
        let mut builder = self.tokens.apply(builder);
        if let Some(path) = &self.publisher_key {
            builder = builder.publisher_key_file(path);
        }
        if let Some(epoch) = self.min_epoch {
            builder = builder.min_epoch(epoch);
        }
        if let Some(table) = &self.table {
            builder = builder.table(table);
        }
        if self.no_verify {
            eprintln!(
                "warning: --no-verify: pages of a signed database are NOT checked against the \
                 publisher's signatures; a party can alter, roll back or invent answers"
            );
        }
        Ok(builder.no_verify(self.no_verify).build()?)
    }
}

/// What a command that prints answers says, once, about how a signed database was verified
/// when no key was pinned.
pub fn note_unverified(verification: pirq_client::Verification) {
    match verification {
        pirq_client::Verification::Unchecked => eprintln!(
            "warning: the parties serve a signed database and --no-verify was given: the \
             answers were NOT verified"
        ),
        pirq_client::Verification::Advertised => eprintln!(
            "note: verified against the publisher key both parties advertise; pin it with \
             --publisher-key FILE so that a database re-signed by another key is refused too"
        ),
        _ => {}
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
