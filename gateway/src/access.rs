//! Who may query, and how fast: `--query-tokens`, `--token-rate`, `--ip-rate`. All optional;
//! without them a party answers everyone, as before.
//!
//! - **Tokens** (`--query-tokens FILE`, one a line; re-read on SIGHUP): `POST /v1/queries` and
//!   the result reads (`GET /v1/queries/{id}`, its long-poll and `/events`) need
//!   `Authorization: Bearer TOKEN`, else 401 `unauthorized`. `/v1/info`, `/healthz` and
//!   `/readyz` stay open, so a client can see what a party serves before it pays. Only the
//!   tokens' SHA-256 digests are kept; a presented token's digest is compared with every known
//!   digest without an early exit ([`subtle`]), so the answer's timing says nothing about how
//!   close a guess came. Tokens are never logged, and neither is the header.
//! - **Per-token rate** (`--token-rate N`): each token may submit N queries a second, in bursts
//!   of up to 2N; past it 429 `rate_limited` with `Retry-After`. Result reads are not counted
//!   (a client waiting on its own result is no more load).
//! - **Per-IP rate** (`--ip-rate N`), for parties without tokens: the same bound keyed by the
//!   client's address. Behind a proxy every client has the proxy's address: limit there instead.
//!
//! The limiters are `governor`'s GCRA, keyed; the IP limiter forgets idle addresses every few
//! seconds, so a spray of addresses cannot grow it without bound. Every refusal counts in
//! `pirq_gateway_access_refusals_total{reason}`.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use axum::extract::Request;
use axum::http::{header, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use pirq_shared::error::ErrorCode;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::server::PeerAddr;

/// A token's SHA-256: what is kept and compared, never the token.
type TokenDigest = [u8; 32];

/// Why a request was refused: the `reason` label of the refusals counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No token, or one not in `--query-tokens`.
    Unauthorized,
    /// Over `--token-rate`.
    TokenRate,
    /// Over `--ip-rate`.
    IpRate,
}

impl Refusal {
    pub const ALL: [Refusal; 3] = [Refusal::Unauthorized, Refusal::TokenRate, Refusal::IpRate];

    pub fn label(self) -> &'static str {
        match self {
            Refusal::Unauthorized => "unauthorized",
            Refusal::TokenRate => "token_rate",
            Refusal::IpRate => "ip_rate",
        }
    }
}

/// Registers the refusals counter at zero for every reason, so `rate()` works from the first
/// scrape whether or not access control is on.
pub fn register_refusals() {
    for reason in Refusal::ALL {
        metrics::counter!(pirq_shared::metrics::GATEWAY_ACCESS_REFUSALS, "reason" => reason.label())
            .absolute(0);
    }
}

fn count(reason: Refusal) {
    metrics::counter!(pirq_shared::metrics::GATEWAY_ACCESS_REFUSALS, "reason" => reason.label())
        .increment(1);
}

/// The access rules of one gateway, shared by every request.
#[derive(Clone, Default)]
pub struct Access {
    tokens: Option<Arc<Tokens>>,
    token_rate: Option<Arc<DefaultKeyedRateLimiter<TokenDigest>>>,
    ip_rate: Option<Arc<DefaultKeyedRateLimiter<IpAddr>>>,
}

/// The tokens of `--query-tokens`, swapped whole on reload.
pub struct Tokens {
    path: PathBuf,
    digests: RwLock<Arc<Vec<TokenDigest>>>,
}

impl Tokens {
    /// Reads the file: one token a line; blank lines and lines starting with `#` are skipped,
    /// surrounding whitespace is not part of a token. A file without a token is an error (it
    /// would refuse every query), and so is a line that cannot be sent in a header.
    pub fn load(path: &Path) -> anyhow::Result<Tokens> {
        Ok(Tokens {
            path: path.to_path_buf(),
            digests: RwLock::new(Arc::new(read_tokens(path)?)),
        })
    }

    /// Reads the file again; on failure the tokens in use stay (and the error says why).
    pub fn reload(&self) -> anyhow::Result<()> {
        let fresh = read_tokens(&self.path)?;
        *self.digests.write().expect("tokens lock") = Arc::new(fresh);
        Ok(())
    }

    /// How many distinct tokens are in use (for the log; never the tokens).
    pub fn len(&self) -> usize {
        self.digests.read().expect("tokens lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The digest of `token` if it is one of ours. Every known digest is compared, each in
    /// constant time, whatever matched.
    fn find(&self, token: &str) -> Option<TokenDigest> {
        let digest: TokenDigest = Sha256::digest(token.as_bytes()).into();
        let known = self.digests.read().expect("tokens lock").clone();
        let found = known
            .iter()
            .fold(subtle::Choice::from(0), |found, d| found | d.ct_eq(&digest));
        bool::from(found).then_some(digest)
    }
}

fn read_tokens(path: &Path) -> anyhow::Result<Vec<TokenDigest>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the query tokens {}", path.display()))?;
    let mut digests = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let token = line.trim();
        if token.is_empty() || token.starts_with('#') {
            continue;
        }
        // What a client can put after `Bearer `: printable ASCII without spaces. The line is
        // named by number only: it may be a token with a typo.
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            anyhow::bail!(
                "{} line {}: a token is printable ASCII without spaces",
                path.display(),
                n + 1
            );
        }
        digests.push(Sha256::digest(token.as_bytes()).into());
    }
    digests.sort_unstable();
    digests.dedup();
    anyhow::ensure!(
        !digests.is_empty(),
        "{} has no tokens (one a line; # starts a comment): every query would be refused",
        path.display()
    );
    Ok(digests)
}

/// N a second, bursts of 2N.
fn quota(per_second: NonZeroU32) -> Quota {
    let burst = per_second.saturating_mul(NonZeroU32::new(2).expect("2 > 0"));
    Quota::per_second(per_second).allow_burst(burst)
}

impl Access {
    /// The rules of the flags; `tokens` already loaded (so SIGHUP can reload the same set).
    /// Starts a task (the IP limiter's upkeep), so call it inside the runtime.
    pub fn new(
        tokens: Option<Arc<Tokens>>,
        token_rate: Option<NonZeroU32>,
        ip_rate: Option<NonZeroU32>,
    ) -> Access {
        let ip_rate = ip_rate.map(|n| {
            let limiter = Arc::new(RateLimiter::keyed(quota(n)));
            forget_idle_addresses(Arc::downgrade(&limiter));
            limiter
        });
        Access {
            tokens,
            token_rate: token_rate.map(|n| Arc::new(RateLimiter::keyed(quota(n)))),
            ip_rate,
        }
    }

    /// The rules of `config`: reads `--query-tokens`.
    pub fn of(config: &crate::Config) -> anyhow::Result<Access> {
        let tokens = match &config.query_tokens {
            Some(path) => Some(Arc::new(Tokens::load(path)?)),
            None => None,
        };
        Ok(Access::new(tokens, config.token_rate, config.ip_rate))
    }

    /// The tokens, for SIGHUP to reload; `None` without `--query-tokens`.
    pub fn tokens(&self) -> Option<Arc<Tokens>> {
        self.tokens.clone()
    }

    /// The check of one request to a query route (submit and result reads, before any body is
    /// read; [`crate::front`]): `Err` with why it is turned away, whose answer counts the
    /// refusal. Only submits (POST) count against the rates.
    pub fn check(&self, req: &Request) -> Result<(), Denied> {
        let submit = req.method() == Method::POST;
        if let Some(tokens) = &self.tokens {
            let Some(digest) = bearer(req).and_then(|t| tokens.find(t)) else {
                return Err(Denied::unauthorized());
            };
            if let (true, Some(limiter)) = (submit, &self.token_rate) {
                limiter
                    .check_key(&digest)
                    .map_err(|until| Denied::rate(Refusal::TokenRate, &until))?;
            }
        } else if let (true, Some(limiter)) = (submit, &self.ip_rate) {
            if let Some(PeerAddr(peer)) = req.extensions().get::<PeerAddr>() {
                limiter
                    .check_key(&peer.ip())
                    .map_err(|until| Denied::rate(Refusal::IpRate, &until))?;
            }
        }
        Ok(())
    }
}

/// A request turned away: why, and for a rate limit how long until the next is let in.
#[derive(Debug)]
pub struct Denied {
    reason: Refusal,
    wait: Duration,
}

impl Denied {
    fn unauthorized() -> Denied {
        Denied {
            reason: Refusal::Unauthorized,
            wait: Duration::ZERO,
        }
    }

    fn rate(
        reason: Refusal,
        until: &governor::NotUntil<<DefaultClock as Clock>::Instant>,
    ) -> Denied {
        Denied {
            reason,
            wait: until.wait_time_from(DefaultClock::default().now()),
        }
    }
}

/// The answer, counted in `pirq_gateway_access_refusals_total`.
impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        count(self.reason);
        match self.reason {
            Refusal::Unauthorized => unauthorized(),
            reason => rate_limited(reason, self.wait),
        }
    }
}

/// The token of `Authorization: Bearer TOKEN` (the scheme in any case, RFC 9110 §11.1).
fn bearer(req: &Request) -> Option<&str> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

fn unauthorized() -> Response {
    let mut resp = ApiError::new(
        ErrorCode::Unauthorized,
        "this party needs a query token: send Authorization: Bearer TOKEN (ask its operator)",
    )
    .into_response();
    resp.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    resp
}

fn rate_limited(reason: Refusal, wait: Duration) -> Response {
    let flag = match reason {
        Refusal::IpRate => "--ip-rate",
        _ => "--token-rate",
    };
    // Whole seconds, rounded up: a client that waits that long is let in again.
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    ApiError::new(
        ErrorCode::RateLimited,
        format!("more queries a second than this party allows ({flag}); retry after Retry-After"),
    )
    .retry_after(seconds.max(1))
    .into_response()
}

/// Every few seconds, drops the addresses whose bucket is full again (they would be allowed a
/// whole burst anyway), until the limiter is gone.
fn forget_idle_addresses(limiter: std::sync::Weak<DefaultKeyedRateLimiter<IpAddr>>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        loop {
            tick.tick().await;
            let Some(limiter) = limiter.upgrade() else {
                return;
            };
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method, auth: Option<&str>) -> Request {
        let mut b = axum::http::Request::builder()
            .method(method)
            .uri("/v1/queries");
        if let Some(a) = auth {
            b = b.header(header::AUTHORIZATION, a);
        }
        let mut req = b.body(axum::body::Body::empty()).unwrap();
        req.extensions_mut()
            .insert(PeerAddr("127.0.0.7:5000".parse().unwrap()));
        req
    }

    fn n(v: u32) -> Option<NonZeroU32> {
        NonZeroU32::new(v)
    }

    #[test]
    fn tokens_file_skips_blanks_and_comments_and_reloads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "# ops\n  alpha \n\nbeta\nbeta\n").unwrap();
        let tokens = Tokens::load(&path).unwrap();
        assert_eq!(tokens.len(), 2);
        assert!(tokens.find("alpha").is_some());
        assert!(tokens.find("beta").is_some());
        assert!(tokens.find("# ops").is_none());
        assert!(tokens.find("alph").is_none());
        std::fs::write(&path, "gamma\n").unwrap();
        tokens.reload().unwrap();
        assert!(tokens.find("alpha").is_none());
        assert!(tokens.find("gamma").is_some());
        // A broken file, an empty one, a missing one: the tokens in use stay.
        for bad in ["two words\n", "# nothing\n\n"] {
            std::fs::write(&path, bad).unwrap();
            let err = tokens.reload().unwrap_err().to_string();
            assert!(!err.contains("two words"), "the line is not echoed: {err}");
        }
        std::fs::remove_file(&path).unwrap();
        assert!(tokens.reload().is_err());
        assert!(tokens.find("gamma").is_some(), "failed reloads keep them");
        assert!(Tokens::load(&path).is_err());
    }

    #[tokio::test]
    async fn bearer_tokens_and_rates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "alpha\nomega\n").unwrap();
        let access = Access::new(Some(Arc::new(Tokens::load(&path).unwrap())), n(1), None);
        for bad in [
            None,
            Some("Bearer beta"),
            Some("Basic alpha"),
            Some("Bearer "),
            Some("alpha"),
        ] {
            for method in [Method::POST, Method::GET] {
                let refused = access
                    .check(&request(method, bad))
                    .unwrap_err()
                    .into_response();
                assert_eq!(refused.status(), 401, "{bad:?}");
                assert_eq!(refused.headers()[header::WWW_AUTHENTICATE], "Bearer");
            }
        }
        // Burst 2N = 2 submits, then 429 with a Retry-After; reads are not counted, and each
        // token has its own bucket.
        for _ in 0..2 {
            access
                .check(&request(Method::POST, Some("bearer alpha")))
                .unwrap();
        }
        let limited = access
            .check(&request(Method::POST, Some("Bearer alpha")))
            .unwrap_err()
            .into_response();
        assert_eq!(limited.status(), 429);
        assert_eq!(limited.headers()[header::RETRY_AFTER], "1");
        access
            .check(&request(Method::GET, Some("Bearer alpha")))
            .unwrap();
        access
            .check(&request(Method::POST, Some("Bearer omega")))
            .unwrap();

        let by_ip = Access::new(None, None, n(2));
        for _ in 0..4 {
            by_ip.check(&request(Method::POST, None)).unwrap();
        }
        assert_eq!(
            by_ip
                .check(&request(Method::POST, None))
                .unwrap_err()
                .reason,
            Refusal::IpRate
        );
        by_ip.check(&request(Method::GET, None)).unwrap();
        assert!(Access::default()
            .check(&request(Method::POST, None))
            .is_ok());
    }
}
