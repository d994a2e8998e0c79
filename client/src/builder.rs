//! [`ClientBuilder`]: a client of two parties, configured for a real program.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::stats::Counters;
use crate::url::check_party_url;
use crate::{Client, ClientError, Encoding, Options, Party, Wait};

/// How long a connection may take to open (inside the lookup's deadline in any case).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Builds a [`Client`]: [`Client::builder`].
///
/// ```
/// # fn main() -> Result<(), pirq_client::ClientError> {
/// let client = pirq_client::Client::builder()
///     .party_a("https://pir-a.example.invalid")
///     .party_b("https://pir-b.example.invalid")
///     .deadline(std::time::Duration::from_secs(10))
///     .token_a("token-issued-by-a")
///     .build()?;
/// # let _ = client;
/// # Ok(()) }
/// ```
#[derive(Default)]
pub struct ClientBuilder {
    party_a: Option<String>,
    party_b: Option<String>,
    options: Options,
    roots: Vec<reqwest::Certificate>,
    token_a: Option<String>,
    token_b: Option<String>,
    http: Option<reqwest::Client>,
    /// The first error of a setter that can fail (a certificate file), reported by `build`.
    error: Option<ClientError>,
    publisher: Option<crate::PublisherKey>,
    min_epoch: u64,
    proxy: Option<String>,
    no_verify: bool,
    /// The parties' table looked up in (`None`: `default`).
    table: Option<String>,
}

impl ClientBuilder {
    /// Party A's base URL (`https://host:port`; `http://` only for loopback hosts unless
    /// [`ClientBuilder::insecure_http`]).
    pub fn party_a(mut self, url: impl Into<String>) -> Self {
        self.party_a = Some(url.into());
        self
    }

    /// Party B's base URL: a different party, run by a different operator.
    pub fn party_b(mut self, url: impl Into<String>) -> Self {
        self.party_b = Some(url.into());
        self
    }

    /// The longest a whole lookup may take, every request and body read included
    /// (default [`crate::DEFAULT_TIMEOUT`]).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.options.timeout = deadline;
        self
    }

    /// How to wait for answers (default [`Wait::Inline`]: one round trip a lookup).
    pub fn wait(mut self, wait: Wait) -> Self {
        self.options.wait = wait;
        self
    }

    /// Request and answer bodies as JSON (default) or bincode.
    pub fn encoding(mut self, encoding: Encoding) -> Self {
        self.options.encoding = encoding;
        self
    }

    /// Trusts the PEM certificate(s) in `pem` as roots, besides the system's (a private CA).
    pub fn ca_cert_pem(mut self, pem: &[u8]) -> Self {
        match reqwest::Certificate::from_pem_bundle(pem) {
            Ok(certs) if !certs.is_empty() => self.roots.extend(certs),
            Ok(_) => self.fail("no PEM certificate in the CA data".into()),
            Err(e) => self.fail(format!("CA certificate: {e}")),
        }
        self
    }

    /// [`ClientBuilder::ca_cert_pem`] of a file.
    pub fn ca_cert_file(self, path: impl AsRef<Path>) -> Self {
        let path = path.as_ref();
        match std::fs::read(path) {
            Ok(pem) => self.ca_cert_pem(&pem),
            Err(e) => {
                let mut s = self;
                s.fail(format!("reading CA certificate {}: {e}", path.display()));
                s
            }
        }
    }

    /// Sent to party A as `Authorization: Bearer` (its `--query-tokens`); never logged.
    pub fn token_a(mut self, token: impl Into<String>) -> Self {
        self.token_a = Some(token.into());
        self
    }

    /// Party B's token (the parties are different operators, with different tokens).
    pub fn token_b(mut self, token: impl Into<String>) -> Self {
        self.token_b = Some(token.into());
        self
    }

    /// Uses this HTTP client (proxies, TLS settings, connection pools of the caller's own)
    /// instead of one built here; CA roots must then be given to it, not to the builder.
    /// Build it with `redirect(Policy::none())` (a party must not send the client elsewhere)
    /// and `tls_info(true)` (else the same-TLS-identity check has nothing to compare).
    pub fn http_client(mut self, http: reqwest::Client) -> Self {
        self.http = Some(http);
        self
    }

    /// Reaches `https://` parties through this proxy (`http://HOST:PORT`), by `CONNECT`
    /// tunnels only: the proxy sees which hosts are reached, never a byte of a request, and
    /// TLS (and the same-identity check) runs end to end. Plain-`http://` parties are never
    /// proxied. Without this, no proxy is used, whatever `HTTP_PROXY`, `HTTPS_PROXY` or
    /// `ALL_PROXY` say: a proxy taken silently from the environment would see both keys of
    /// plain-HTTP loopback traffic, and admin tokens.
    pub fn proxy(mut self, url: impl Into<String>) -> Self {
        self.proxy = Some(url.into());
        self
    }

    /// Accepts plain `http://` to hosts other than this machine. Whoever observes both
    /// connections then learns the index: only for networks where nobody can.
    pub fn insecure_http(mut self, insecure: bool) -> Self {
        self.options.insecure_http = insecure;
        self
    }

    /// Accepts two URLs of the same party. Only for capacity benchmarks: that party sees both
    /// keys of every pair.
    pub fn allow_same_party(mut self, allow: bool) -> Self {
        self.options.allow_same_party = allow;
        self
    }

    /// Verify every page against this publisher key (`docs/spec/signed.md` §3): lookups then
    /// refuse an unsigned database, one signed by another key, and any page whose signature or
    /// freshness fails, before returning anything.
    pub fn publisher_key(mut self, key: crate::PublisherKey) -> Self {
        self.publisher = Some(key);
        self
    }

    /// Does not verify a signed database's pages at all. Without this and without a pinned
    /// key ([`ClientBuilder::publisher_key`]), the client verifies every page against the
    /// publisher key both parties advertise ([`crate::Verification::Advertised`]): an altered,
    /// stale or rolled-back answer is then refused as with a pinned key.
    pub fn no_verify(mut self, no_verify: bool) -> Self {
        self.no_verify = no_verify;
        self
    }

    /// [`ClientBuilder::publisher_key`] read from a public key file.
    pub fn publisher_key_file(mut self, path: impl AsRef<Path>) -> Self {
        match crate::PublisherKey::read_file(path.as_ref()) {
            Ok(key) => self.publisher = Some(key),
            Err(e) => self.fail(e.to_string()),
        }
        self
    }

    /// Refuse answers at an epoch below `epoch` (with a pinned key; besides the newest signed
    /// epoch the client has seen, which it never goes back from).
    pub fn min_epoch(mut self, epoch: u64) -> Self {
        self.min_epoch = epoch;
        self
    }

    /// All of [`Options`] at once.
    pub fn options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    fn fail(&mut self, why: String) {
        self.error.get_or_insert(ClientError::Config(why));
    }

    /// Look up in the parties' table `name` (issue 38: `GET /v1/tables` lists a party's tables)
    /// rather than their table `default`: every request goes to the table's routes, and the
    /// digest, epoch and signing checks are the table's.
    pub fn table(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        match pirq_shared::layout::check_table_name(&name) {
            Ok(()) => self.table = Some(name),
            Err(e) => self.fail(e.to_string()),
        }
        self
    }

    /// The client; checks both URLs (before any connection) and the settings.
    pub fn build(self) -> Result<Client, ClientError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let (Some(a), Some(b)) = (self.party_a, self.party_b) else {
            return Err(ClientError::Config(
                "both party URLs are needed (party_a, party_b)".into(),
            ));
        };
        if self.options.timeout.is_zero() {
            return Err(ClientError::Config(
                "the deadline must be above zero".into(),
            ));
        }
        let insecure = self.options.insecure_http;
        check_party_url(&a, insecure)?;
        check_party_url(&b, insecure)?;
        let http = match self.http {
            Some(_) if !self.roots.is_empty() || self.proxy.is_some() => {
                return Err(ClientError::Config(
                    "CA certificates and a proxy go to the caller's own HTTP client \
                     (http_client), not to the builder"
                        .into(),
                ))
            }
            Some(http) => http,
            None => http_client(self.roots, self.proxy.as_deref())?,
        };
        let counters = Arc::new(Counters::default());
        let table = self.table.as_deref();
        let party_a = Party::labelled(http.clone(), &a, "A", self.token_a, counters.clone())
            .with_table(table);
        let party_b =
            Party::labelled(http, &b, "B", self.token_b, counters.clone()).with_table(table);
        if self.min_epoch > 0 && self.publisher.is_none() {
            return Err(ClientError::Config(
                "a minimum epoch needs a publisher key: without one the epoch a party reports \
                 cannot be checked"
                    .into(),
            ));
        }
        if self.no_verify && self.publisher.is_some() {
            return Err(ClientError::Config(
                "a publisher key to verify with and no_verify (--no-verify) contradict each \
                 other"
                    .into(),
            ));
        }
        let mut verifier = crate::verify::Verifier::new(self.publisher, self.min_epoch);
        verifier.verify_advertised = !self.no_verify;
        Ok(Client::from_parts(
            party_a,
            party_b,
            self.options,
            counters,
            verifier,
        ))
    }
}

/// The HTTP client of a [`Client`] built without one (and of the CLI's `epoch push`): HTTP/1.1,
/// no redirects (a party may not send the client to another host, nor from https to http), the
/// peer certificate kept for the same-identity check, the system's and `roots` as trust
/// anchors, connections opened within 10 s; no proxy from the environment, and `proxy` (when
/// given) for `https://` parties only ([`ClientBuilder::proxy`]).
///
/// HTTP/1.1 said outright: the client's reqwest is built without HTTP/2, but a build that also
/// holds a crate asking for it (the workspace's test build: the e2e suite's own HTTP/2 client,
/// whose binaries the suite runs) would otherwise offer `h2` by ALPN and speak it to a party.
pub fn http_client(
    roots: Vec<reqwest::Certificate>,
    proxy: Option<&str>,
) -> Result<reqwest::Client, ClientError> {
    let mut builder = reqwest::Client::builder()
        // reqwest reads HTTP_PROXY/HTTPS_PROXY/ALL_PROXY by default: never for party traffic.
        .no_proxy()
        .http1_only()
        .connect_timeout(CONNECT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .tls_info(true)
        .user_agent(concat!("pirq-client/", env!("CARGO_PKG_VERSION")));
    for root in roots {
        builder = builder.add_root_certificate(root);
    }
    if let Some(proxy) = proxy {
        builder = builder.proxy(connect_proxy(proxy)?);
    }
    builder
        .build()
        .map_err(|e| ClientError::Config(format!("building the HTTP client: {e}")))
}

/// `--proxy URL` as reqwest's proxy of `https://` targets only, which it reaches by `CONNECT`:
/// a plain-HTTP party would otherwise be sent to the proxy as a whole request, keys and token
/// included.
fn connect_proxy(url: &str) -> Result<reqwest::Proxy, ClientError> {
    let bad = |why: &str| ClientError::Config(format!("proxy: {why}; write http://HOST:PORT"));
    let parsed = reqwest::Url::parse(url).map_err(|_| bad("not a URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") || !parsed.has_host() {
        return Err(bad("not an http:// or https:// URL with a host"));
    }
    reqwest::Proxy::https(parsed).map_err(|_| bad("not a proxy URL reqwest takes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_must_be_an_http_url() {
        assert!(connect_proxy("http://127.0.0.1:3128").is_ok());
        assert!(connect_proxy("https://proxy.example.invalid").is_ok());
        for bad in [
            "127.0.0.1:3128",
            "socks5://127.0.0.1:1",
            "ftp://x",
            "http://",
        ] {
            let e = connect_proxy(bad).unwrap_err().to_string();
            assert!(e.contains("write http://HOST:PORT"), "{bad}: {e}");
        }
    }
}
