//! `pirq-client`: fetch pages and look up keys privately from two pirq parties.
//!
//! A [`Client`] talks to two parties that serve the same database. [`Client::fetch`] asks for
//! pages by index, [`Client::get`] and [`Client::get_many`] look keys up in a key-value
//! database (`docs/spec/kv.md`); neither party alone learns which pages or keys were wanted.
//! Each lookup generates a DPF key pair per page, sends one half to each party concurrently
//! (one `Prefer: wait` request a party: one round trip), checks that both answers were computed
//! from the same contents (the database digest, SPEC §2.1) and at the same epoch, and XORs them.
//!
//! ```no_run
//! # async fn demo() -> Result<(), pirq_client::ClientError> {
//! use std::time::Duration;
//!
//! let client = pirq_client::Client::builder()
//!     .party_a("https://pir-a.example.invalid")
//!     .party_b("https://pir-b.example.invalid")
//!     .deadline(Duration::from_secs(10)) // the whole lookup, every request included
//!     .ca_cert_file("ca.pem") // a private CA, besides the system's roots
//!     .build()?;
//! let pages = client.fetch(&[42]).await?; // page 42, at the newest epoch both parties serve
//! println!("{} bytes at epoch {}", pages.pages[0].len(), pages.epoch);
//! // a key-value database: the value, or None when the key is absent
//! let value = client.get(b"some key").await?;
//! # let _ = value; Ok(()) }
//! ```
//!
//! The client defends itself against a broken or hostile party: one deadline bounds the whole
//! lookup; what a party sends is bounded in bytes (`/v1/info` 64 KiB, an answer by what its
//! keys and the page size imply); request ids are checked before they become URLs; a party's
//! error text is stripped of control characters and cut short; plain `http://` is refused for
//! hosts other than this machine; two URLs of one party (same `party` id, or same TLS
//! certificate key) are refused. Both parties' `/v1/info` are read once and kept until an
//! answer shows that the parties moved on. `client/examples/` has runnable programs.
//!
//! [`Party`] is one party's HTTP API, for callers (and tests) that want the steps one by one.

mod builder;
mod deadline;
mod error;
mod kv;
mod party;
mod sse;
mod stats;
mod text;
mod url;
mod verify;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pirq_shared::bits::xor_into;
use pirq_shared::dpf::generate;

pub use builder::{http_client, ClientBuilder};
pub use deadline::Deadline;
pub use error::{ClientError, Phase};
pub use kv::Values;
pub use party::{
    Encoding, Party, Submitted, Wait, ENVELOPE_BYTES, INLINE_WAIT, MAX_INFO_BYTES, SUBMIT_ATTEMPTS,
};
pub use stats::Stats;
pub use text::{is_request_id, sanitize, MAX_PARTY_TEXT_CHARS};
pub use url::{check_party_url, check_url};
pub use verify::Verification;

/// A query's request id, as [`Submitted`] carries it and [`Party::status`] and [`Party::wait`]
/// take it: typed once, where it is checked (the spec crate's type, the gateways' too).
pub use pirq_shared::RequestId;

/// The publisher's key a client pins (`docs/spec/signed.md`).
pub use pirq_shared::signing::PublisherKey;

/// The types of this crate's signatures that come from pirq's shared crate.
pub use pirq_shared::digest::Digest;
pub use pirq_shared::kv::{
    Encoding as KvEncoding, Encodings as KvEncodings, KvError, KvInfo, KvParams, ValueKind,
};
pub use pirq_shared::update::EpochUpdate;
pub use pirq_shared::wire::{EpochRange, ErrorBody, Info, QueryRequest, QueryResult, QueryStatus};
/// The HTTP client crate of [`ClientBuilder::http_client`], at the version this crate uses.
pub use reqwest;

/// Default deadline of one lookup (`Options::timeout`, `pirq query --timeout`): a party's
/// gateway admits at most `--max-backlog-secs` (30 s by default) of work ahead of a query, so
/// two minutes is a stuck party, not a busy one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// How [`Client`] talks to the parties.
#[derive(Clone, Debug)]
pub struct Options {
    pub wait: Wait,
    pub encoding: Encoding,
    /// The deadline of one whole lookup.
    pub timeout: Duration,
    /// Accept two URLs of the same party. Only for capacity benchmarks: that party sees both
    /// keys of every pair.
    pub allow_same_party: bool,
    /// Accept plain `http://` to hosts other than this machine (see
    /// [`ClientBuilder::insecure_http`]).
    pub insecure_http: bool,
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
            ..Options::default()
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
            insecure_http: false,
        }
    }
}

/// Pages fetched together, with the epoch and the database digest they are from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pages {
    pub epoch: u64,
    /// The digest (SPEC §2.1) both parties answered from.
    pub digest: Option<Digest>,
    /// `pages[i]` is the page at `indices[i]`: the whole stored page, a signed database's
    /// signature tail included (its data is the first [`Pages::usable`] bytes).
    pub pages: Vec<Vec<u8>>,
    /// Bytes of each page that hold data (SPEC §2.5): the page size less a signature tail.
    pub usable: usize,
    /// What was checked about the pages against the publisher's signatures.
    pub verification: Verification,
}

/// What both parties' `/v1/info` agree on, kept between lookups.
#[derive(Clone, Debug)]
pub(crate) struct Agreement {
    /// Party A's info (the geometry and layout both share).
    pub(crate) info: pirq_shared::wire::Info,
    /// The newest epoch both serve.
    pub(crate) epoch: u64,
    /// Whether both parties' newest epoch is `epoch` (else lookups pin it).
    pub(crate) same_newest: bool,
    /// The smaller of the two key limits.
    pub(crate) max_keys: usize,
    /// The signing block to verify pages with: the parties' database is signed and this
    /// client pins its publisher's key, or verifies against the key both advertise.
    pub(crate) signing: Option<pirq_shared::signing::SigningBlock>,
    /// Whether `signing`'s key is one the client pinned.
    pub(crate) pinned: bool,
}

impl Agreement {
    /// What lookups under this agreement check.
    fn verification(&self) -> Verification {
        match (&self.signing, &self.info.signing) {
            (Some(_), _) if self.pinned => Verification::Verified,
            (Some(_), _) => Verification::Advertised,
            (None, Some(_)) => Verification::Unchecked,
            (None, None) => Verification::Unsigned,
        }
    }

    /// Bytes of a page that hold data (SPEC §2.5).
    pub(crate) fn usable(&self) -> usize {
        let tail = self.info.signing.as_ref().map_or(0, |s| s.tail_len);
        self.info.page_size.saturating_sub(tail) as usize
    }
}

/// A client of two parties that serve the same database. Cheap to clone; clones share the
/// parties' info and the counters.
#[derive(Clone, Debug)]
pub struct Client {
    a: Party,
    b: Party,
    options: Options,
    /// Both parties' agreed info; refreshed when an answer says the parties moved on.
    agreement: Arc<tokio::sync::Mutex<Option<Agreement>>>,
    /// Set when an answer shows the kept info is out of date, or a lookup failed.
    stale: Arc<AtomicBool>,
    counters: Arc<stats::Counters>,
    /// The pinned publisher key and the newest signed epochs seen.
    verifier: Arc<verify::Verifier>,
}

/// One chunk's combined answer, or the sign that the parties answered different epochs (an
/// unpinned lookup during an epoch change).
enum Chunk {
    Pages {
        epoch: u64,
        digest: Option<Digest>,
        pages: Vec<Vec<u8>>,
    },
    EpochsDiffer,
}

/// The epoch a lookup's chunks answered, and its digest.
type Answered = (u64, Option<Digest>);

impl Chunk {
    /// The pages of a lookup's chunks in order, and the epoch and digest they answered; `None`
    /// when a chunk found the parties at different epochs (an epoch change under way: the
    /// caller reads the new info and asks again pinned).
    fn join(parts: Vec<Chunk>, lookups: usize) -> (Vec<Vec<u8>>, Option<Answered>) {
        let mut pages = Vec::with_capacity(lookups);
        let mut answered = None;
        for part in parts {
            match part {
                Chunk::Pages {
                    epoch,
                    digest,
                    pages: p,
                } => {
                    answered = Some((epoch, digest));
                    pages.extend(p);
                }
                Chunk::EpochsDiffer => return (pages, None),
            }
        }
        (pages, answered)
    }
}

impl Client {
    /// A builder: party URLs, deadline, CA roots, tokens, an own HTTP client.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// A client of the parties at these base URLs with default options.
    pub fn new(party_a: &str, party_b: &str) -> Result<Client, ClientError> {
        Client::builder().party_a(party_a).party_b(party_b).build()
    }

    /// A client of the parties at these base URLs with `options`.
    pub fn with_options(
        party_a: &str,
        party_b: &str,
        options: Options,
    ) -> Result<Client, ClientError> {
        Client::builder()
            .party_a(party_a)
            .party_b(party_b)
            .options(options)
            .build()
    }

    pub(crate) fn from_parts(
        a: Party,
        b: Party,
        options: Options,
        counters: Arc<stats::Counters>,
        verifier: verify::Verifier,
    ) -> Client {
        Client {
            a,
            b,
            options,
            agreement: Arc::new(tokio::sync::Mutex::new(None)),
            stale: Arc::new(AtomicBool::new(false)),
            counters,
            verifier: Arc::new(verifier),
        }
    }

    /// The newest epoch the publisher's signatures have shown this client for the database
    /// `db_id` (`docs/spec/signed.md` §4.4): answers at an older epoch are refused.
    pub fn newest_signed_epoch(&self, db_id: &[u8; 32]) -> Option<u64> {
        self.verifier.newest_signed(db_id)
    }

    /// The parties' names for an error about both: "party A (url) and party B (url)".
    fn pair_name(&self) -> String {
        format!(
            "party A ({}) and party B ({})",
            self.a.base(),
            self.b.base()
        )
    }

    pub fn parties(&self) -> (&Party, &Party) {
        (&self.a, &self.b)
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    /// What the client has counted so far (info requests, refusals, retries).
    pub fn stats(&self) -> Stats {
        self.counters.snapshot()
    }

    /// A new deadline of the configured length, for a lookup starting now.
    fn deadline(&self) -> Deadline {
        Deadline::after(self.options.timeout)
    }

    /// Both parties' info, read now and checked to describe the same database; returns party
    /// A's info, the epoch to pin (the newest one both serve) and the smaller per-query key
    /// limit. Refuses one party reached twice (unless [`Options::allow_same_party`]) and a
    /// party without live workers. The result is kept for later lookups.
    pub async fn agree(&self) -> Result<(pirq_shared::wire::Info, u64, usize), ClientError> {
        self.agree_at(None).await
    }

    /// [`Client::agree`], pinning `epoch` instead of the newest common one when given (it must
    /// be in both parties' windows).
    pub async fn agree_at(
        &self,
        epoch: Option<u64>,
    ) -> Result<(pirq_shared::wire::Info, u64, usize), ClientError> {
        let d = self.deadline();
        let mut kept = self.lock_agreement(&d).await?;
        let agreement = self.refresh(&d, &mut kept).await?;
        let epoch = epoch.unwrap_or(agreement.epoch);
        self.check_epoch(&agreement, epoch)?;
        Ok((agreement.info, epoch, agreement.max_keys))
    }

    async fn lock_agreement<'a>(
        &'a self,
        d: &Deadline,
    ) -> Result<tokio::sync::MutexGuard<'a, Option<Agreement>>, ClientError> {
        d.run(self.agreement.lock())
            .await
            .ok_or_else(|| ClientError::Timeout {
                party: format!("{} and {}", self.a.name(), self.b.name()),
                phase: Phase::Info,
                after: d.total(),
            })
    }

    /// The kept agreement, or a fresh one when there is none or it is out of date. Lookups
    /// that start together wait for one refresh instead of each reading `/v1/info`.
    pub(crate) async fn agreement(&self, d: &Deadline) -> Result<Agreement, ClientError> {
        let mut kept = self.lock_agreement(d).await?;
        match &*kept {
            Some(a) if !self.stale.load(Ordering::Acquire) => Ok(a.clone()),
            _ => self.refresh(d, &mut kept).await,
        }
    }

    /// Reads both parties' info and checks that they describe the same database.
    async fn refresh(
        &self,
        d: &Deadline,
        kept: &mut Option<Agreement>,
    ) -> Result<Agreement, ClientError> {
        self.stale.store(false, Ordering::Release);
        let ((ia, key_a), (ib, key_b)) = futures::try_join!(self.a.info_by(d), self.b.info_by(d))?;
        if !self.options.allow_same_party {
            // A party that does not say who it is (or says it in another form) cannot be told
            // apart from the other one: a proxy that strips `party` would otherwise send both
            // keys of every pair to one party unchecked.
            for (label, party, info) in [("A", &self.a, &ia), ("B", &self.b, &ib)] {
                if !info.party.as_deref().is_some_and(text::is_party_id) {
                    return Err(ClientError::UnknownParty {
                        label,
                        party: party.base().to_string(),
                        said: info.party.as_deref().map(text::sanitize),
                    });
                }
            }
            if ia.party == ib.party {
                return Err(ClientError::SameParty {
                    a: self.a.base().to_string(),
                    b: self.b.base().to_string(),
                    party: text::sanitize(ia.party.as_deref().unwrap_or_default()),
                });
            }
            if key_a.is_some() && key_a == key_b {
                return Err(ClientError::SameTlsIdentity {
                    a: self.a.base().to_string(),
                    b: self.b.base().to_string(),
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
            let show = |kv: &Option<KvInfo>| match kv {
                Some(kv) => text::sanitize(&serde_json::to_string(kv).unwrap_or_default()),
                None => "no kv layout".into(),
            };
            return Err(differ("kv layout", &show(&ia.kv), &show(&ib.kv)));
        }
        let signing = self.verifier.agree(&ia.signing, &ib.signing)?;
        if let Some(block) = &signing {
            // Read at every refresh, whatever the epoch (epoch 0 included): the manifests are
            // what shows a party that claims an old window to be lying (signed.md §4.4).
            self.read_manifests(block, d).await?;
            let signed = self.verifier.newest_signed(&block.db_id).unwrap_or(0);
            for (party, info) in [(&self.a, &ia), (&self.b, &ib)] {
                if info.epoch.newest < signed {
                    return Err(ClientError::StaleParty {
                        party: party.name().to_string(),
                        claims: info.epoch.newest,
                        signed,
                    });
                }
            }
        }
        // Pin the newest epoch both answer: a party ahead still has it in its window.
        let epoch = ia.epoch.newest.min(ib.epoch.newest);
        if !ia.epoch.contains(epoch) || !ib.epoch.contains(epoch) {
            return Err(ClientError::Mismatch(format!(
                "no common epoch: party A serves {}..={}, party B {}..={}",
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
        let agreement = Agreement {
            epoch,
            same_newest: ia.epoch.newest == ib.epoch.newest,
            max_keys: ia.max_keys_per_query.min(ib.max_keys_per_query).max(1) as usize,
            info: ia,
            pinned: self.verifier.publisher.is_some(),
            signing,
        };
        *kept = Some(agreement.clone());
        Ok(agreement)
    }

    /// Whether both parties serve `epoch`, per the kept info.
    fn check_epoch(&self, a: &Agreement, epoch: u64) -> Result<(), ClientError> {
        if epoch > a.epoch || !a.info.epoch.contains(epoch) {
            return Err(ClientError::Mismatch(format!(
                "epoch {epoch} is not served by both parties (the newest both serve is {})",
                a.epoch
            )));
        }
        Ok(())
    }

    /// Fetches the pages at `indices` without telling either party which ones, at the newest
    /// epoch both parties serve; the whole lookup within the configured deadline.
    pub async fn fetch(&self, indices: &[u64]) -> Result<Pages, ClientError> {
        let d = self.deadline();
        self.fetch_grouped(indices, 1, None, &d).await
    }

    /// [`Client::fetch`] at `epoch` (any epoch in both parties' windows).
    pub async fn fetch_at(&self, indices: &[u64], epoch: u64) -> Result<Pages, ClientError> {
        let d = self.deadline();
        self.fetch_grouped(indices, 1, Some(epoch), &d).await
    }

    /// Fetches `indices` in as few queries per party as the parties' key limit allows, never
    /// splitting a group of `group` consecutive indices (a kv lookup's candidates) across two
    /// queries. A failed lookup drops the kept info, so the next one starts afresh.
    pub(crate) async fn fetch_grouped(
        &self,
        indices: &[u64],
        group: usize,
        epoch: Option<u64>,
        d: &Deadline,
    ) -> Result<Pages, ClientError> {
        let result = self.fetch_grouped_once(indices, group, epoch, d).await;
        if let Err(e) = &result {
            if !matches!(
                e,
                ClientError::IndexOutOfRange { .. } | ClientError::BadKey { .. }
            ) {
                self.stale.store(true, Ordering::Release);
            }
        }
        result
    }

    async fn fetch_grouped_once(
        &self,
        indices: &[u64],
        group: usize,
        epoch: Option<u64>,
        d: &Deadline,
    ) -> Result<Pages, ClientError> {
        let mut agreement = self.agreement(d).await?;
        if let Some(e) = epoch {
            if self.check_epoch(&agreement, e).is_err() {
                // Perhaps the parties moved on since their info was read.
                let mut kept = self.lock_agreement(d).await?;
                agreement = self.refresh(d, &mut kept).await?;
            }
        }
        for attempt in 0..2 {
            let info = &agreement.info;
            if let Some(&index) = indices.iter().find(|&&i| i >= info.num_pages) {
                return Err(ClientError::IndexOutOfRange {
                    index,
                    num_pages: info.num_pages,
                });
            }
            if let Some(e) = epoch {
                self.check_epoch(&agreement, e)?;
            }
            let per_query = agreement.max_keys / group * group;
            if per_query == 0 {
                return Err(ClientError::Mismatch(format!(
                    "the parties take {} keys per query, one lookup needs {group}",
                    agreement.max_keys
                )));
            }
            let chunks: Vec<&[u64]> = indices.chunks(per_query).collect();
            // One query a party at the parties' common newest epoch can go unpinned (each
            // answers its newest; they agree unless an epoch change is under way). Several
            // queries must answer one epoch, and parties at different newest epochs must be
            // told which: those pin it.
            let pin = epoch.or((attempt > 0 || chunks.len() > 1 || !agreement.same_newest)
                .then_some(agreement.epoch));
            let parts =
                futures::future::try_join_all(chunks.iter().map(|chunk| {
                    self.fetch_chunk(chunk, info.domain_bits, info.page_size, pin, d)
                }))
                .await?;
            let (pages, answered) = Chunk::join(parts, indices.len());
            match answered {
                Some((answered_epoch, digest)) if pages.len() == indices.len() => {
                    let digest_changed = answered_epoch == info.epoch.newest
                        && info.digest.is_some()
                        && digest != info.digest;
                    if answered_epoch != agreement.epoch || digest_changed || !agreement.same_newest
                    {
                        // The parties moved on: read their info before the next lookup. So
                        // too while they were at two newest epochs (a push under way): lookups
                        // pinned to the older one answer it without a word that the other
                        // party has caught up, and would keep to it for good.
                        self.stale.store(true, Ordering::Release);
                    }
                    // Every page checked before any is returned (docs/spec/signed.md §3).
                    if let Some(block) = &agreement.signing {
                        // Asked at the epoch of info read before another lookup saw a newer
                        // one signed (a push under way): this client's own stale pin, not the
                        // parties' doing. Read their info again and ask again; a party that
                        // claims an old newest epoch is refused there (§4.4).
                        if epoch.is_none()
                            && attempt == 0
                            && answered_epoch == agreement.epoch
                            && answered_epoch < self.verifier.floor(&block.db_id)
                        {
                            let mut kept = self.lock_agreement(d).await?;
                            agreement = self.refresh(d, &mut kept).await?;
                            continue;
                        }
                        if self.verifier.wants_manifests(&block.db_id, answered_epoch) {
                            self.read_manifests(block, d).await?;
                        }
                        self.verifier.check(
                            block,
                            &self.pair_name(),
                            indices,
                            answered_epoch,
                            digest,
                            &pages,
                        )?;
                    }
                    return Ok(Pages {
                        epoch: answered_epoch,
                        digest,
                        pages,
                        usable: agreement.usable(),
                        verification: agreement.verification(),
                    });
                }
                _ if attempt == 0 => {
                    let mut kept = self.lock_agreement(d).await?;
                    agreement = self.refresh(d, &mut kept).await?;
                }
                _ => break,
            }
        }
        Err(ClientError::Mismatch(
            "the parties answered different epochs twice: an epoch change is under way; \
             try again"
                .into(),
        ))
    }

    /// Reads both parties' publisher manifests (`docs/spec/signed.md` §4.3) and keeps those
    /// that verify. A party that serves none, or fails to, is no error here: a manifest still
    /// missing refuses the pages that need it. The lookup's deadline is.
    async fn read_manifests(
        &self,
        block: &pirq_shared::signing::SigningBlock,
        d: &Deadline,
    ) -> Result<(), ClientError> {
        let (a, b) = futures::join!(self.a.manifests_by(d), self.b.manifests_by(d));
        let mut manifests = Vec::new();
        for read in [a, b] {
            match read {
                Ok(list) => manifests.extend(list),
                Err(e @ ClientError::Timeout { .. }) => return Err(e),
                Err(_) => {}
            }
        }
        self.verifier.add_manifests(block, manifests);
        Ok(())
    }

    /// One query per party for up to `max_keys` indices.
    async fn fetch_chunk(
        &self,
        indices: &[u64],
        domain_bits: u8,
        page_size: u32,
        epoch: Option<u64>,
        d: &Deadline,
    ) -> Result<Chunk, ClientError> {
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
            epoch,
        };
        let req_b = QueryRequest {
            keys: keys_b,
            epoch,
        };
        let o = &self.options;
        let (ra, rb) = futures::try_join!(
            self.a.query_by(&req_a, o.encoding, o.wait, d),
            self.b.query_by(&req_b, o.encoding, o.wait, d),
        )?;
        for (party, r) in [(&self.a, &ra), (&self.b, &rb)] {
            let Some(answered) = r.epoch else {
                return Err(party.protocol("answered without an epoch".into()));
            };
            if epoch.is_some_and(|e| e != answered) {
                return Err(party.protocol(format!(
                    "answered epoch {answered}, {} was asked for",
                    epoch.unwrap_or_default()
                )));
            }
            if r.pages.len() != indices.len() {
                return Err(party.protocol(format!(
                    "{} answers for {} keys",
                    r.pages.len(),
                    indices.len()
                )));
            }
            if let Some(p) = r.pages.iter().find(|p| p.len() != page_size as usize) {
                return Err(party.protocol(format!(
                    "answered a page of {} bytes; its pages are {page_size} bytes",
                    p.len()
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
        if ra.epoch != rb.epoch {
            return Ok(Chunk::EpochsDiffer);
        }
        let epoch = ra.epoch.unwrap_or_default();
        // Answers computed from different contents XOR into a wrong page that looks like any
        // other: never combine them.
        if ra.digest != rb.digest {
            let hex = |d: Option<Digest>| d.map(|d| d.to_hex()).unwrap_or_default();
            return Err(ClientError::Mismatch(format!(
                "at epoch {epoch} party A answered from database digest {}, party B from {}: \
                 they serve different contents, so their answers were not combined",
                hex(ra.digest),
                hex(rb.digest)
            )));
        }
        let pages = ra
            .pages
            .into_iter()
            .zip(rb.pages)
            .map(|(mut pa, pb)| {
                xor_into(&mut pa, &pb);
                pa
            })
            .collect();
        Ok(Chunk::Pages {
            epoch,
            digest: ra.digest,
            pages,
        })
    }
}
