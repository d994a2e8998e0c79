//! `pirq-client`: fetch pages privately from two pirq parties.
//!
//! [`Client::fetch`] is the whole protocol in one async call: read both parties' `/v1/info`
//! and refuse databases that differ, one party reached twice, or a party without live workers;
//! generate a DPF key pair per wanted index, submit one half to each party concurrently, wait
//! for both answers (Server-Sent Events by default, or polling), check that both were computed
//! from the same contents (the database digest each result carries, SPEC §2.1), and XOR them
//! into the pages. Neither party alone learns which pages were fetched.
//!
//! [`Client::get`] looks keys up in a key-value database (`docs/spec/kv.md`) the same way: each
//! key's candidate pages are fetched privately and searched for the key's tag.
//!
//! [`Party`] is one party's HTTP API, for callers (and tests) that want the steps one by one.

mod kv;
mod party;

use std::time::Duration;

use pirq_shared::bits::xor_into;
use pirq_shared::dpf::generate;
use pirq_shared::wire::{ErrorBody, Info, QueryRequest};

pub use kv::Values;
pub use party::{check_url, Encoding, Party, Submitted, Wait};

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{party}: {source}")]
    Http {
        party: String,
        source: reqwest::Error,
    },
    /// The party answered with an error body.
    #[error("{party}: HTTP {status}: {} ({})", .error.message, .error.code)]
    Api {
        party: String,
        status: u16,
        error: Box<ErrorBody>,
    },
    /// The query was accepted but failed on the party.
    #[error("{party}: query {id} failed: {} ({})", .error.message, .error.code)]
    Failed {
        party: String,
        id: String,
        error: Box<ErrorBody>,
    },
    /// The two parties do not serve the same database.
    #[error("the parties serve different databases: {0}")]
    Mismatch(String),
    /// Both URLs reach the same party, which would then see both keys of every pair.
    #[error(
        "{a} and {b} are the same party (id {party}): it would see both keys and learn which \
         pages are fetched; give the URLs of two different parties (--allow-same-party is for \
         capacity benchmarks only)"
    )]
    SameParty { a: String, b: String, party: String },
    /// A party has no live worker: a query would wait out its whole timeout.
    #[error("party {label} ({party}) has no live workers: start a pirq-worker for it")]
    NoWorkers { label: &'static str, party: String },
    #[error("index {index} is outside the database of {num_pages} pages")]
    IndexOutOfRange { index: u64, num_pages: u64 },
    /// A key-value lookup asked of parties that serve a page database.
    #[error("not a key-value database: {0}")]
    NotKv(String),
    /// A key the database's layout cannot hold (wrong length).
    #[error("key {index}: {reason}")]
    BadKey {
        index: usize,
        reason: pirq_shared::kv::KvError,
    },
    /// The party answered something that does not follow the API.
    #[error("{party}: {detail}")]
    Protocol { party: String, detail: String },
    /// The party's event stream ended before the result (its gateway stopped); [`Party::wait`]
    /// waits again.
    #[error("{party}: event stream ended without a result")]
    StreamEnded { party: String },
    #[error("{party}: no result within {after:?}")]
    Timeout { party: String, after: Duration },
    /// A party's base URL is not an `http://` or `https://` URL.
    #[error("party URL {url:?} is not an http(s) URL: {hint}")]
    BadUrl { url: String, hint: String },
}

/// Default longest wait for one query's answers (`Options::timeout`, `pirq query --timeout`,
/// `pirq get --timeout`): a party's gateway admits at most `--max-backlog-secs` (30 s by default)
/// of work ahead of a query, so two minutes is a stuck party, not a busy one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// How [`Client::fetch`] talks to the parties.
#[derive(Clone, Debug)]
pub struct Options {
    pub wait: Wait,
    pub encoding: Encoding,
    /// Longest wait for one query's answers.
    pub timeout: Duration,
    /// Accept two URLs of the same party. Only for capacity benchmarks: that party sees both
    /// keys of every pair.
    pub allow_same_party: bool,
}

impl Options {
    /// The options the CLI flags describe: poll every `poll` (else ask the party to hold the
    /// answer, then follow its events), bincode or JSON.
    pub fn from_flags(poll: Option<Duration>, bincode: bool, timeout: Duration) -> Options {
        Options {
            wait: match poll {
                Some(interval) => Wait::Poll { interval },
                None => Wait::Inline,
            },
            encoding: if bincode {
                Encoding::Bincode
            } else {
                Encoding::Json
            },
            timeout,
            allow_same_party: false,
        }
    }
}

impl Default for Options {
    fn default() -> Options {
        Options {
            wait: Wait::Inline,
            encoding: Encoding::Json,
            timeout: DEFAULT_TIMEOUT,
            allow_same_party: false,
        }
    }
}

/// Pages fetched together, with the epoch they are from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pages {
    pub epoch: u64,
    /// `pages[i]` is the page at `indices[i]`.
    pub pages: Vec<Vec<u8>>,
}

/// A client of two parties that serve the same database.
#[derive(Clone, Debug)]
pub struct Client {
    a: Party,
    b: Party,
    options: Options,
}

impl Client {
    /// A client of the parties at these base URLs (`http://host:port`).
    pub fn new(party_a: &str, party_b: &str) -> Result<Client, ClientError> {
        Client::with_options(party_a, party_b, Options::default())
    }

    pub fn with_options(
        party_a: &str,
        party_b: &str,
        options: Options,
    ) -> Result<Client, ClientError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|source| ClientError::Http {
                party: "client".into(),
                source,
            })?;
        party::check_url(party_a)?;
        party::check_url(party_b)?;
        Ok(Client {
            a: Party::new(http.clone(), party_a),
            b: Party::new(http, party_b),
            options,
        })
    }

    pub fn parties(&self) -> (&Party, &Party) {
        (&self.a, &self.b)
    }

    /// Both parties' info, checked to describe the same database; returns the epoch to pin
    /// (the newest one both serve) and the smaller per-query key limit. Refuses one party
    /// reached twice (unless [`Options::allow_same_party`]) and a party without live workers.
    pub async fn agree(&self) -> Result<(Info, u64, usize), ClientError> {
        self.agree_at(None).await
    }

    /// [`Client::agree`], pinning `epoch` instead of the newest common one when given (it must
    /// be in both parties' windows).
    pub async fn agree_at(&self, epoch: Option<u64>) -> Result<(Info, u64, usize), ClientError> {
        let (ia, ib) = futures::try_join!(self.a.info(), self.b.info())?;
        if let (Some(pa), Some(pb)) = (&ia.party, &ib.party) {
            if pa == pb && !self.options.allow_same_party {
                return Err(ClientError::SameParty {
                    a: self.a.base().to_string(),
                    b: self.b.base().to_string(),
                    party: pa.clone(),
                });
            }
        }
        for (label, party, info) in [("A", &self.a, &ia), ("B", &self.b, &ib)] {
            if info.workers == 0 {
                return Err(ClientError::NoWorkers {
                    label,
                    party: party.base().to_string(),
                });
            }
        }
        let differ = |what: &str, x: &dyn std::fmt::Display, y: &dyn std::fmt::Display| {
            ClientError::Mismatch(format!("{what}: party A has {x}, party B has {y}"))
        };
        if ia.num_pages != ib.num_pages {
            return Err(differ("num_pages", &ia.num_pages, &ib.num_pages));
        }
        if ia.page_size != ib.page_size {
            return Err(differ("page_size", &ia.page_size, &ib.page_size));
        }
        if ia.domain_bits != ib.domain_bits {
            return Err(differ("domain_bits", &ia.domain_bits, &ib.domain_bits));
        }
        if ia.kv != ib.kv {
            let show = |kv: &Option<pirq_shared::kv::KvInfo>| match kv {
                Some(kv) => serde_json::to_string(kv).unwrap_or_default(),
                None => "no kv layout".into(),
            };
            return Err(differ("kv layout", &show(&ia.kv), &show(&ib.kv)));
        }
        // Pin the newest epoch both answer: a party ahead still has it in its window.
        let epoch = epoch.unwrap_or(ia.epoch.newest.min(ib.epoch.newest));
        if !ia.epoch.contains(epoch) || !ib.epoch.contains(epoch) {
            return Err(ClientError::Mismatch(format!(
                "no common epoch {epoch}: party A serves {}..={}, party B {}..={}",
                ia.epoch.oldest, ia.epoch.newest, ib.epoch.oldest, ib.epoch.newest
            )));
        }
        // At the same newest epoch the advertised digests must agree already; the answers'
        // digests are checked in any case (fetch_chunk).
        if let (Some(da), Some(db)) = (ia.digest, ib.digest) {
            if ia.epoch.newest == ib.epoch.newest && da != db {
                return Err(ClientError::Mismatch(format!(
                    "at epoch {} party A's database has digest {da}, party B's {db}",
                    ia.epoch.newest
                )));
            }
        }
        let max_keys = ia.max_keys_per_query.min(ib.max_keys_per_query).max(1) as usize;
        Ok((ia, epoch, max_keys))
    }

    /// Fetches the pages at `indices` without telling either party which ones.
    pub async fn fetch(&self, indices: &[u64]) -> Result<Pages, ClientError> {
        let (info, epoch, max_keys) = self.agree().await?;
        if let Some(&index) = indices.iter().find(|&&i| i >= info.num_pages) {
            return Err(ClientError::IndexOutOfRange {
                index,
                num_pages: info.num_pages,
            });
        }
        let chunks = indices
            .chunks(max_keys)
            .map(|chunk| self.fetch_chunk(chunk, info.domain_bits, epoch));
        let parts = futures::future::try_join_all(chunks).await?;
        Ok(Pages {
            epoch,
            pages: parts.into_iter().flatten().collect(),
        })
    }

    /// One query per party for up to `max_keys` indices.
    async fn fetch_chunk(
        &self,
        indices: &[u64],
        domain_bits: u8,
        epoch: u64,
    ) -> Result<Vec<Vec<u8>>, ClientError> {
        let mut keys_a = Vec::with_capacity(indices.len());
        let mut keys_b = Vec::with_capacity(indices.len());
        {
            let mut rng = rand::rng();
            for &index in indices {
                let (k0, k1) =
                    generate(domain_bits, index, &mut rng).map_err(|e| ClientError::Protocol {
                        party: "client".into(),
                        detail: e.to_string(),
                    })?;
                keys_a.push(k0.to_bytes());
                keys_b.push(k1.to_bytes());
            }
        }
        let req_a = QueryRequest {
            keys: keys_a,
            epoch: Some(epoch),
        };
        let req_b = QueryRequest {
            keys: keys_b,
            epoch: Some(epoch),
        };
        let o = &self.options;
        let (ra, rb) = futures::try_join!(
            self.a.query(&req_a, o.encoding, o.wait, o.timeout),
            self.b.query(&req_b, o.encoding, o.wait, o.timeout),
        )?;
        for (party, r) in [(&self.a, &ra), (&self.b, &rb)] {
            if r.epoch != Some(epoch) {
                return Err(party.protocol(format!(
                    "answered epoch {:?}, {epoch} was asked for",
                    r.epoch
                )));
            }
            if r.pages.len() != indices.len() {
                return Err(party.protocol(format!(
                    "{} answers for {} keys",
                    r.pages.len(),
                    indices.len()
                )));
            }
            if r.digest.is_none() {
                return Err(party.protocol(
                    "answered without a database digest (SPEC §2.1): its gateway or workers \
                     predate digests; upgrade the party"
                        .into(),
                ));
            }
        }
        // Answers computed from different contents XOR into a wrong page that looks like any
        // other: never combine them.
        if ra.digest != rb.digest {
            let hex =
                |d: Option<pirq_shared::digest::Digest>| d.map(|d| d.to_hex()).unwrap_or_default();
            return Err(ClientError::Mismatch(format!(
                "at epoch {epoch} party A answered from database digest {}, party B from {}: \
                 they serve different contents, so their answers were not combined",
                hex(ra.digest),
                hex(rb.digest)
            )));
        }
        ra.pages
            .into_iter()
            .zip(rb.pages)
            .map(|(mut pa, pb)| {
                if pa.len() != pb.len() {
                    return Err(ClientError::Mismatch(format!(
                        "answer sizes {} and {}",
                        pa.len(),
                        pb.len()
                    )));
                }
                xor_into(&mut pa, &pb);
                Ok(pa)
            })
            .collect()
    }
}
