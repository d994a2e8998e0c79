//! `pirq eth serve`: a wallet's JSON-RPC endpoint whose state reads go to two pirq parties as
//! private lookups (`docs/eth.md`).
//!
//! Every read, whatever its method and whether the account exists, costs each party the same:
//! one lookup in each of the three tables (`accounts` with the address, `storage` with
//! address ‖ slot, `code` with the account's code hash), a random key of the right length
//! standing in wherever the method needs none, plus the metadata record once a request. The
//! code lookup waits for the account's answer (it needs the code hash), so every read is the
//! same two rounds: accounts and storage together, then code. A batch of K reads is K lookups
//! in each table, in one query per table and party.
//!
//! One block across tables: the tables' epochs name the same block (`super::update`), so a
//! read takes accounts and storage at one epoch (asking both again at the older one when the
//! parties answered two, as during a push; signed tables at the newer one, since a verifying
//! client never goes back) and code at that same epoch. The block number comes
//! from the metadata record read with the accounts.
//!
//! Nothing a call names (addresses, slots, values) is logged.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use clap::Args;
use pirq_client::{Client, ClientError};
use serde_json::{json, Value};

use super::rpc::{self, BlockTag, Call, Method, Read, RpcError};
use super::tables::{self, storage_key, Account, Meta, META_KEY};

#[derive(Args)]
pub struct ServeArgs {
    /// Party A's base URL (https://; http:// only for this machine).
    #[arg(long)]
    party_a: String,
    /// Party B's base URL: another operator.
    #[arg(long)]
    party_b: String,
    /// Where the JSON-RPC endpoint listens (the wallet's RPC URL is http://ADDR/). Keep it on
    /// the wallet's own machine: the calls are in plain text between the wallet and this
    /// endpoint.
    #[arg(long, default_value = "127.0.0.1:8545")]
    listen: SocketAddr,
    /// The publisher's public key: every page read is verified against it (signed tables).
    #[arg(long)]
    publisher_key: Option<PathBuf>,
    /// Where calls of other methods go (eth_call, eth_sendRawTransaction, …): a node's
    /// JSON-RPC URL, https:// (http:// only for this machine). Those calls are NOT private.
    /// Without it they are refused (-32601).
    #[arg(long)]
    upstream: Option<String>,
    /// The chain id eth_chainId answers (without it eth_chainId goes upstream, or is refused).
    #[arg(long)]
    chain_id: Option<u64>,
    /// Seconds a request may take, the parties' lookups (or the upstream's answer) included.
    #[arg(long, default_value_t = 30, value_parser = crate::parties::seconds)]
    timeout: u64,
    /// Most calls in one batch.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1000))]
    max_batch: u64,
    /// Largest request body, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    max_body_bytes: usize,
    #[command(flatten)]
    transport: crate::parties::TransportArgs,
    #[command(flatten)]
    tokens: crate::parties::TokenArgs,
}

/// Largest upstream answer read (a big eth_getLogs), in bytes.
const MAX_UPSTREAM_BYTES: usize = 32 << 20;

struct Eth {
    accounts: Client,
    code: Client,
    storage: Client,
    chain_id: Option<u64>,
    upstream: Option<Upstream>,
    max_batch: usize,
}

struct Upstream {
    http: pirq_client::reqwest::Client,
    url: String,
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let timeout = Duration::from_secs(args.timeout);
    let client = |table: &str| -> anyhow::Result<Client> {
        let builder = args
            .transport
            .builder()?
            .party_a(&args.party_a)
            .party_b(&args.party_b)
            .deadline(timeout)
            .table(table);
        let mut builder = args.tokens.apply(builder);
        if let Some(path) = &args.publisher_key {
            builder = builder.publisher_key_file(path);
        }
        Ok(builder.build()?)
    };
    let upstream = match &args.upstream {
        None => None,
        Some(url) => {
            // The party rule: https, or http to this machine (a node beside the endpoint).
            pirq_client::check_url(url).context("--upstream")?;
            let http = pirq_client::reqwest::Client::builder()
                .no_proxy()
                .timeout(timeout)
                .redirect(pirq_client::reqwest::redirect::Policy::none())
                .build()
                .context("building the upstream HTTP client")?;
            Some(Upstream {
                http,
                url: url.clone(),
            })
        }
    };
    let eth = Arc::new(Eth {
        accounts: client(tables::ACCOUNTS)?,
        code: client(tables::CODE)?,
        storage: client(tables::STORAGE)?,
        chain_id: args.chain_id,
        upstream,
        max_batch: args.max_batch as usize,
    });
    let app = Router::new()
        .route("/", post(handle))
        .layer(DefaultBodyLimit::max(args.max_body_bytes))
        .with_state(eth.clone());
    let runtime = crate::parties::runtime()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        let local = listener.local_addr()?;
        tracing::info!(
            listen = %local,
            upstream = eth.upstream.as_ref().map(|u| upstream_host(&u.url)).unwrap_or_default(),
            "eth JSON-RPC endpoint answering from two parties"
        );
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .context("serving")?;
        anyhow::Ok(())
    })?;
    Ok(())
}

/// The upstream's host, for the log (its path may hold an API key).
fn upstream_host(url: &str) -> String {
    pirq_client::reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_string))
        .unwrap_or_default()
}

async fn handle(State(eth): State<Arc<Eth>>, body: Bytes) -> Response {
    let reply = |value: Value| {
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            value.to_string(),
        )
            .into_response()
    };
    let single_error = |code, message: String| {
        reply(rpc::response(
            Value::Null,
            Err(RpcError::new(code, message)),
        ))
    };
    let parsed: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return single_error(rpc::PARSE_ERROR, format!("the body is not JSON: {e}")),
    };
    let (calls, batch) = match parsed {
        Value::Array(calls) if calls.is_empty() => {
            return single_error(rpc::INVALID_REQUEST, "an empty batch".into())
        }
        Value::Array(calls) if calls.len() > eth.max_batch => {
            return single_error(
                rpc::INVALID_REQUEST,
                format!(
                    "a batch of {} calls: at most {} (--max-batch)",
                    calls.len(),
                    eth.max_batch
                ),
            )
        }
        Value::Array(calls) => (calls, true),
        one => (vec![one], false),
    };
    let answers = eth.answer(calls).await;
    match (batch, answers.len()) {
        // Only notifications: nothing to answer.
        (_, 0) => StatusCode::NO_CONTENT.into_response(),
        (true, _) => reply(Value::Array(answers)),
        (false, _) => reply(answers.into_iter().next().expect("one answer")),
    }
}

/// A read waiting for its answer: where its answer goes and under which id.
struct Pending {
    at: usize,
    id: Value,
    read: Read,
    block: BlockTag,
}

impl Eth {
    /// The answers of `calls`, in their order, notifications left out.
    async fn answer(&self, calls: Vec<Value>) -> Vec<Value> {
        let mut answers: Vec<Option<Value>> = vec![None; calls.len()];
        let mut reads = Vec::new();
        let mut forwards = Vec::new();
        for (at, raw) in calls.into_iter().enumerate() {
            let call = match rpc::parse_call(raw) {
                Ok(call) => call,
                Err((id, e)) => {
                    answers[at] = Some(rpc::response(id, Err(e)));
                    continue;
                }
            };
            let id = call.id.clone();
            let answer = |result| id.clone().map(|id| rpc::response(id, result));
            match rpc::classify(&call) {
                Err(e) => answers[at] = answer(Err(e)),
                Ok(Method::ChainId) => match (self.chain_id, &self.upstream) {
                    (Some(c), _) => {
                        answers[at] = answer(Ok(json!(tables::quantity(&c.to_be_bytes()))))
                    }
                    (None, Some(_)) => forwards.push((at, call)),
                    (None, None) => answers[at] = answer(Err(not_here(&call.method))),
                },
                // A read nobody waits for is not made.
                Ok(Method::Read(read, block)) => {
                    if let Some(id) = id {
                        reads.push(Pending {
                            at,
                            id,
                            read,
                            block,
                        })
                    }
                }
                Ok(Method::Other) if self.upstream.is_some() => forwards.push((at, call)),
                Ok(Method::Other) => answers[at] = answer(Err(not_here(&call.method))),
            }
        }
        let (read_answers, forwarded) = futures::join!(
            self.read_all(&reads),
            futures::future::join_all(forwards.iter().map(|(_, c)| self.forward(c)))
        );
        for (pending, answer) in reads.iter().zip(read_answers) {
            answers[pending.at] = Some(rpc::response(pending.id.clone(), answer));
        }
        for ((at, call), answer) in forwards.iter().zip(forwarded) {
            answers[*at] = call.id.clone().map(|id| rpc::response(id, answer));
        }
        answers.into_iter().flatten().collect()
    }

    /// Every read of a request, privately, at one block.
    async fn read_all(&self, reads: &[Pending]) -> Vec<Result<Value, RpcError>> {
        if reads.is_empty() {
            return Vec::new();
        }
        let list: Vec<Read> = reads.iter().map(|p| p.read).collect();
        match self.private_reads(&list).await {
            Ok((block, values)) => reads
                .iter()
                .zip(values)
                .map(|(p, v)| rpc::check_block(p.block, block).and(v))
                .collect(),
            Err(e) => reads.iter().map(|_| Err(e.clone())).collect(),
        }
    }

    /// Looks `reads` up in the three tables at one epoch: the block served and each answer.
    async fn private_reads(
        &self,
        reads: &[Read],
    ) -> Result<(u64, Vec<Result<Value, RpcError>>), RpcError> {
        let mut account_keys: Vec<Vec<u8>> = reads
            .iter()
            .map(|r| match r.address() {
                Some(a) => a.to_vec(),
                None => rand::random::<[u8; 20]>().to_vec(),
            })
            .collect();
        account_keys.push(META_KEY.to_vec());
        let storage_keys: Vec<Vec<u8>> = reads
            .iter()
            .map(|r| match r {
                Read::Storage(a, slot) => storage_key(a, slot).to_vec(),
                _ => rand::random::<[u8; 52]>().to_vec(),
            })
            .collect();
        let mut pin = None;
        for attempt in 0..ATTEMPTS {
            let last = attempt + 1 == ATTEMPTS;
            let (accounts, storage) = match futures::try_join!(
                self.accounts.get_many_at(&account_keys, pin),
                self.storage.get_many_at(&storage_keys, pin)
            ) {
                Ok(answers) => answers,
                Err(e) if !last && push_under_way(&e) => {
                    tokio::time::sleep(PUSH_PAUSE).await;
                    continue;
                }
                Err(e) => return Err(party_error(e)),
            };
            if accounts.epoch != storage.epoch {
                // A push under way. Unsigned: both at the older epoch, which both still serve.
                // Signed: a verifying client never goes back to an epoch older than one it has
                // seen signed (docs/spec/signed.md §4.4), so both at the newer, once the table
                // behind serves it (a moment later: the push of every table is under way).
                pin = Some(if verifying(&accounts) || verifying(&storage) {
                    accounts.epoch.max(storage.epoch)
                } else {
                    accounts.epoch.min(storage.epoch)
                });
                continue;
            }
            let epoch = accounts.epoch;
            let verified = verifying(&accounts);
            let mut values = accounts.values;
            let meta = values.pop().flatten().ok_or_else(|| {
                internal("the accounts table has no metadata record (not made by pirq eth import)")
            })?;
            let meta = Meta::from_bytes(&meta).map_err(internal)?;
            let found: Vec<Option<Account>> = values
                .iter()
                .map(|v| match v {
                    None => Ok(None),
                    Some(bytes) => Account::from_bytes(bytes)
                        .map(Some)
                        .ok_or_else(|| internal("an account record of the wrong size")),
                })
                .collect::<Result<_, _>>()?;
            let code_keys: Vec<Vec<u8>> = reads
                .iter()
                .zip(&found)
                .map(|(r, a)| match (r, a) {
                    (Read::Code(_), Some(a)) if a.has_code() => a.code_hash.to_vec(),
                    _ => rand::random::<[u8; 32]>().to_vec(),
                })
                .collect();
            let code = match self.code.get_many_at(&code_keys, Some(epoch)).await {
                Ok(code) => code,
                // Signed: the code table has not reached this epoch yet (never older: as above).
                Err(e) if !last && verified && push_under_way(&e) => {
                    pin = Some(epoch);
                    tokio::time::sleep(PUSH_PAUSE).await;
                    continue;
                }
                // The code table has not reached this epoch (or left it): all at its newest.
                Err(ClientError::Mismatch(_)) if !last => {
                    let (_, newest, _) = self.code.kv_layout(None).await.map_err(party_error)?;
                    pin = Some(newest.min(epoch));
                    continue;
                }
                Err(e) => return Err(party_error(e)),
            };
            let answers = reads
                .iter()
                .zip(&found)
                .zip(storage.values.iter().zip(&code.values))
                .map(|((read, account), (slot, code))| {
                    answer(
                        read,
                        account.as_ref(),
                        slot.as_deref(),
                        code.as_deref(),
                        &meta,
                    )
                })
                .collect();
            return Ok((meta.block, answers));
        }
        Err(RpcError::new(
            rpc::INTERNAL_ERROR,
            "the parties' tables are at different epochs (an update is being pushed): try again",
        ))
    }

    /// Sends `call` to the upstream node as it came; its result or error is the answer.
    async fn forward(&self, call: &Call) -> Result<Value, RpcError> {
        let upstream = self
            .upstream
            .as_ref()
            .expect("forwarded only with an upstream");
        let failed =
            |why: String| RpcError::new(rpc::INTERNAL_ERROR, format!("the upstream node: {why}"));
        let mut response = upstream
            .http
            .post(&upstream.url)
            .json(&call.raw)
            .send()
            .await
            .map_err(|e| failed(without_url(e)))?;
        if !response.status().is_success() {
            return Err(failed(format!("HTTP {}", response.status())));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| failed(without_url(e)))? {
            if body.len() + chunk.len() > MAX_UPSTREAM_BYTES {
                return Err(failed(format!(
                    "an answer above {MAX_UPSTREAM_BYTES} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        let value: Value = serde_json::from_slice(&body)
            .map_err(|_| failed("an answer that is not JSON".into()))?;
        if let Some(result) = value.get("result") {
            return Ok(result.clone());
        }
        match value.get("error") {
            Some(e) => Err(RpcError::new(
                e.get("code")
                    .and_then(Value::as_i64)
                    .unwrap_or(rpc::INTERNAL_ERROR),
                e.get("message")
                    .and_then(Value::as_str)
                    .map(pirq_client::sanitize)
                    .unwrap_or_default(),
            )),
            None => Err(failed("an answer with neither result nor error".into())),
        }
    }
}

/// The answer of one read from its records (absent ones read as a node reads them: 0, 0x).
fn answer(
    read: &Read,
    account: Option<&Account>,
    slot: Option<&[u8]>,
    code: Option<&[u8]>,
    meta: &Meta,
) -> Result<Value, RpcError> {
    Ok(match read {
        Read::Balance(_) => json!(tables::quantity(&account.map_or([0; 32], |a| a.balance))),
        Read::Nonce(_) => json!(tables::quantity(
            &account.map_or(0, |a| a.nonce).to_be_bytes()
        )),
        Read::Code(_) => match (account, code) {
            (Some(a), Some(code)) if a.has_code() => json!(tables::data(code)),
            (Some(a), None) if a.has_code() => {
                return Err(internal(
                    "the code table lacks an account's code (tables of different imports?)",
                ))
            }
            _ => json!("0x"),
        },
        // An absent account's slots are zero, as a node answers, whatever the storage table
        // still holds (a block's changes may delete an account without listing every slot).
        Read::Storage(..) => match (account, slot) {
            (Some(_), Some(v)) => json!(tables::data(v)),
            _ => json!(tables::data(&[0; 32])),
        },
        Read::BlockNumber => json!(tables::quantity(&meta.block.to_be_bytes())),
    })
}

fn not_here(method: &str) -> RpcError {
    // Geth's words for a method it lacks, which wallets (ethers among them) recognise.
    RpcError::new(
        rpc::METHOD_NOT_FOUND,
        format!(
            "the method {} does not exist/is not available here: this endpoint answers \
             eth_getBalance, eth_getTransactionCount, eth_getCode, eth_getStorageAt, \
             eth_blockNumber and eth_chainId privately (other methods need --upstream, and are \
             not private there)",
            tables::shorten(method)
        ),
    )
}

fn internal(why: impl std::fmt::Display) -> RpcError {
    RpcError::new(rpc::INTERNAL_ERROR, why.to_string())
}

/// How many times a read is made while the tables' epochs differ (a push under way), and the
/// pause before asking again where it must wait for a table to catch up (signed tables): the
/// pushes of one block's tables land within a moment of each other.
const ATTEMPTS: usize = 8;
const PUSH_PAUSE: Duration = Duration::from_millis(50);

/// Whether `values` were checked against the publisher's signatures (signed tables).
fn verifying(values: &pirq_client::Values) -> bool {
    matches!(
        values.verification,
        pirq_client::Verification::Verified | pirq_client::Verification::Advertised
    )
}

/// An error a push under way makes, gone a moment later: a table not yet at the epoch asked
/// for (the parties' windows), or, just after a signed update reaches the parties, its
/// manifest not served yet (the operator installs it next; docs/spec/signed.md §4.3).
fn push_under_way(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Mismatch(_) | ClientError::MissingManifest { .. }
    )
}

/// A party's failure, as the wallet sees it and the log records it (the parties' URLs and
/// epochs, never a key).
fn party_error(e: ClientError) -> RpcError {
    tracing::warn!(kind = %e.kind(), "a private read failed: {e}");
    internal(format!("the parties could not answer: {e}"))
}

/// A reqwest error without the URL (the upstream's may hold an API key).
fn without_url(e: pirq_client::reqwest::Error) -> String {
    if e.is_timeout() {
        return "no answer in time".into();
    }
    e.without_url().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eth::tables::{EMPTY_CODE_HASH, EMPTY_ROOT};

    /// A slot the storage table still holds reads 0 when its account is absent (a block's
    /// changes deleted it without listing that slot), as a node answers; present, its value.
    #[test]
    fn an_absent_account_s_slots_read_zero_whatever_the_storage_table_holds() {
        let read = Read::Storage([7; 20], [1; 32]);
        let meta = Meta {
            block: 5,
            state_root: [0; 32],
        };
        let account = Account {
            balance: [0; 32],
            nonce: 1,
            code_hash: EMPTY_CODE_HASH,
            storage_root: EMPTY_ROOT,
        };
        let stale = [9u8; 32];
        let zero = json!(tables::data(&[0; 32]));
        assert_eq!(
            answer(&read, None, Some(&stale), None, &meta).unwrap(),
            zero
        );
        assert_eq!(
            answer(&read, Some(&account), None, None, &meta).unwrap(),
            zero
        );
        assert_eq!(
            answer(&read, Some(&account), Some(&stale), None, &meta).unwrap(),
            json!(tables::data(&stale))
        );
    }
}
