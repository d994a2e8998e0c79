//! [`ClientError`]: why a lookup failed, naming the party and the phase it was in.

use std::fmt;
use std::time::Duration;

use pirq_shared::wire::ErrorBody;

/// Where one party's part of a lookup was when it failed: named in timeouts and transport
/// errors, so that "party B, submit" tells a user which server stalled and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// `GET /v1/info` (connecting, the answer's head or its body).
    Info,
    /// `POST /v1/queries` until the answer's head arrives.
    Submit,
    /// Reading the body of an answer (the submit's, or a result read).
    Answer,
    /// Following the query's Server-Sent Events.
    Events,
    /// Polling or long-polling the query's status.
    Poll,
    /// Waiting as the party asked (`Retry-After`) or backing off before trying again.
    RetryWait,
    /// `POST /v1/admin/epochs`.
    Push,
    /// `GET /v1/manifests` (the publisher's epoch manifests, `docs/spec/signed.md` §4.3).
    Manifests,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Info => "info",
            Phase::Submit => "submit",
            Phase::Answer => "answer",
            Phase::Events => "events",
            Phase::Poll => "poll",
            Phase::RetryWait => "retry wait",
            Phase::Push => "push",
            Phase::Manifests => "manifests",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A duration as a person reads it: "3 s", "1.5 s", "250 ms".
pub(crate) struct Secs(pub Duration);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d < Duration::from_secs(1) {
            write!(f, "{} ms", d.as_millis())
        } else if d.subsec_millis() == 0 {
            write!(f, "{} s", d.as_secs())
        } else {
            write!(f, "{:.1} s", d.as_secs_f64())
        }
    }
}

/// Why a lookup failed. `party` fields read `party A (URL)` (or the URL alone for a [`Party`]
/// made on its own); every text that came from a party has been sanitized (SPEC §4.1).
///
/// [`Party`]: crate::Party
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The HTTP exchange failed (connection refused, TLS, a broken body); the cause is the
    /// error's source.
    #[error("{party}: {phase}: {}", transport_summary(.source))]
    Http {
        party: String,
        phase: Phase,
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
    /// A party's `/v1/info` has no `party` id, or one that is not 32 lowercase hex digits: the
    /// client cannot tell whether both URLs reach the same party, so it does not send keys.
    #[error(
        "party {label} ({party}) {}: the client cannot tell it from the other party, which \
         would then see both keys; a pirq gateway always says it (a proxy in between may have \
         removed it), or pass --allow-same-party (allow_same_party) for capacity benchmarks \
         against one party",
        match .said { Some(s) => format!("gives its party id as {s:?}, not 32 lowercase hex digits"), None => "does not give its party id in /v1/info".to_string() }
    )]
    UnknownParty {
        label: &'static str,
        party: String,
        said: Option<String>,
    },
    /// Both URLs present the same TLS identity (certificate public key): one operator holds
    /// both, and would see both keys.
    #[error(
        "{a} and {b} present the same TLS certificate public key: one operator would see both \
         keys and learn which pages are fetched; give the URLs of two different parties"
    )]
    SameTlsIdentity { a: String, b: String },
    /// A party has no live worker: a query would wait out its whole deadline.
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
    ///
    /// [`Party::wait`]: crate::Party::wait
    #[error("{party}: event stream ended without a result")]
    StreamEnded { party: String },
    /// The lookup's deadline passed while this party was in `phase`.
    #[error("{party}: {phase}: no answer within {} (the lookup's deadline)", Secs(*.after))]
    Timeout {
        party: String,
        phase: Phase,
        after: Duration,
    },
    /// A party sent more than the lookup can need: refused before it costs the client memory.
    #[error("{party}: {what} is larger than {limit} bytes: refused")]
    TooLarge {
        party: String,
        what: &'static str,
        limit: u64,
    },
    /// A party's base URL is not an `http://` or `https://` URL.
    #[error("party URL {url:?} is not an http(s) URL: {hint}")]
    BadUrl { url: String, hint: String },
    /// Plain `http://` to a host other than this machine, refused before connecting.
    #[error(
        "refusing plain http:// to {url}: whoever observes both of a client's connections reads \
         both DPF keys and learns the index; use https:// (plain HTTP only for loopback \
         addresses), or opt out explicitly with --insecure-http (insecure_http in the library)"
    )]
    InsecureHttp { url: String },
    /// The client could not be set up (a certificate file, a missing URL, the HTTP client).
    #[error("client configuration: {0}")]
    Config(String),
    /// The page XORed out of two answers failed the publisher's signature, or is stale
    /// (`docs/spec/signed.md` §3): one of the two parties altered its answer. Nothing of the
    /// lookup was returned.
    #[error(
        "the answers of {parties} failed the publisher's signature: {detail}; nothing was \
         returned (one of these parties altered its answer)"
    )]
    Forged { parties: String, detail: String },
    /// A page cannot be shown current because neither party serves the publisher's manifest
    /// of an epoch after the page last changed (`docs/spec/signed.md` §4.3): the publisher's
    /// or the operators' omission as likely as a party's lie. Nothing was returned.
    #[error(
        "the parties do not serve the publisher's manifest of epoch {epoch} ({parties}, GET \
         /v1/manifests): {detail}; nothing was returned. The publisher writes manifests \
         with --manifests (pirq epoch make, pirq kv update) and each party serves that file \
         with pirq-gateway --manifests"
    )]
    MissingManifest {
        parties: String,
        epoch: u64,
        detail: String,
    },
    /// A party says its newest epoch is older than the publisher's signed manifests (or pages
    /// this client has verified) show exists: it is stale, or lies to roll the client back.
    #[error(
        "{party} says its newest epoch is {claims}, but the publisher's signatures show epoch \
         {signed} exists: a stale or rolled-back party (or one the epoch was not pushed to \
         yet); nothing was sent"
    )]
    StaleParty {
        party: String,
        claims: u64,
        signed: u64,
    },
    /// The client is pinned to a publisher key, and the parties' database cannot be verified
    /// with it (unsigned, or signed by another key).
    #[error("{0}")]
    Unverifiable(String),
}

/// A transport error in a few words; the full chain is the error's source.
fn transport_summary(e: &reqwest::Error) -> &'static str {
    if e.is_connect() {
        "cannot connect"
    } else if e.is_body() || e.is_decode() {
        "the answer's body broke off"
    } else if e.is_timeout() {
        "timed out"
    } else {
        "the HTTP exchange failed"
    }
}

impl ClientError {
    /// A short, countable name of the failure (for tallies such as `pirq bench load`'s).
    pub fn kind(&self) -> String {
        match self {
            ClientError::Http { .. } => "http".into(),
            ClientError::Api { error, .. } => format!("api_{}", error.code),
            ClientError::Failed { error, .. } => format!("failed_{}", error.code),
            ClientError::Timeout { .. } => "timeout".into(),
            ClientError::TooLarge { .. } => "too_large".into(),
            ClientError::Mismatch(_) => "mismatch".into(),
            ClientError::IndexOutOfRange { .. } => "index_out_of_range".into(),
            ClientError::Protocol { .. } => "protocol".into(),
            ClientError::StreamEnded { .. } => "stream_ended".into(),
            ClientError::NotKv(_) => "not_kv".into(),
            ClientError::BadKey { .. } => "bad_key".into(),
            ClientError::BadUrl { .. } => "bad_url".into(),
            ClientError::InsecureHttp { .. } => "insecure_http".into(),
            ClientError::SameParty { .. } => "same_party".into(),
            ClientError::UnknownParty { .. } => "unknown_party".into(),
            ClientError::SameTlsIdentity { .. } => "same_tls_identity".into(),
            ClientError::NoWorkers { .. } => "no_workers".into(),
            ClientError::Config(_) => "config".into(),
            ClientError::Forged { .. } => "forged".into(),
            ClientError::Unverifiable(_) => "unverifiable".into(),
            ClientError::MissingManifest { .. } => "missing_manifest".into(),
            ClientError::StaleParty { .. } => "stale_party".into(),
        }
    }
}
