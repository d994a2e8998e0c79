//! One party's HTTP API: info, submit, and the three ways to wait for a result, each step
//! bounded in time (the lookup's [`Deadline`]) and in bytes (what the step can need).

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pirq_shared::wire::{
    ErrorBody, ErrorEnvelope, Info, QueryRequest, QueryResult, QueryStatus, BINCODE, JSON,
};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::{RequestBuilder, Response, StatusCode};

use crate::deadline::{backoff, jitter, refusal_wait, retry_after, Deadline};
use crate::error::Phase;
use crate::sse;
use crate::stats::Counters;
use crate::text::{is_request_id, sanitize, sanitize_bytes, sanitize_error};
use crate::{ClientError, DEFAULT_TIMEOUT};
use pirq_shared::RequestId;

/// Tries of one submit whose connection failed (a gateway restarting: 0.1 to 1.6 s between,
/// about 3 s in all). Refusals with `Retry-After` (429, 503) are retried for as long as the
/// deadline allows instead: the party said when to come back.
pub const SUBMIT_ATTEMPTS: u32 = 5;

/// The most bytes of `/v1/info` a client reads.
pub const MAX_INFO_BYTES: usize = 64 << 10;

/// The most bytes of `GET /v1/manifests` a client reads (the gateway serves no more).
pub const MAX_MANIFESTS_BYTES: usize = 32 << 20;

/// The most bytes of an error body, and the room an answer may take beyond its pages (id,
/// status, epoch, digest, field names).
pub const ENVELOPE_BYTES: usize = 64 << 10;

/// The largest page the spec allows (SPEC §2): the bound of an answer when the party's page
/// size is not known yet.
const MAX_PAGE_SIZE: u32 = 65536;

/// Body encoding used for requests and answers (SSE events are always JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Json,
    Bincode,
}

impl Encoding {
    fn media_type(self) -> &'static str {
        match self {
            Encoding::Json => JSON,
            Encoding::Bincode => BINCODE,
        }
    }
}

/// How to wait for a result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Ask the party to hold the submit's answer until the query is final (`Prefer: wait`, up
    /// to [`INLINE_WAIT`]): one round trip a query. A query still pending then is followed by
    /// its events.
    Inline,
    /// Follow the query's Server-Sent Events.
    Events,
    /// Read the status every `interval`.
    Poll { interval: Duration },
    /// Long-poll the status (`?wait=30`).
    LongPoll,
}

/// A query accepted by a party.
#[derive(Clone, Debug)]
pub struct Submitted {
    /// The request id, checked to be one (32 lowercase hex digits) before it was kept.
    pub id: RequestId,
    /// The `Location` header (not followed: the client builds result URLs from `id`).
    pub location: String,
    /// The answer to the submit: pending, or final when the party answered at once (a replay
    /// of a finished query, or a `Prefer: wait` it could honour).
    pub result: QueryResult,
}

/// The longest a submit asks the gateway to hold its answer (`Prefer: wait`): below the
/// gateway's cap of 30 s and the idle timeouts of common proxies; a query not answered by then
/// is waited for as usual.
pub const INLINE_WAIT: Duration = Duration::from_secs(25);

/// One party's base URL, the HTTP client to reach it, and what the client learned of it.
#[derive(Clone)]
pub struct Party {
    http: reqwest::Client,
    base: String,
    /// Where the database routes are: `{base}/v1` for the table `default`, else
    /// `{base}/v1/tables/NAME` (issue 38).
    api: String,
    /// The admin route that appends the table's next epoch.
    admin_epochs: String,
    /// How errors name it: `party A (URL)`, or the URL alone.
    name: String,
    /// Sent as `Authorization: Bearer` with every request (never logged, never in `Debug`).
    token: Option<String>,
    /// The page size and key limit of its last `/v1/info` (0: none read yet): bound its
    /// answers.
    page_size: Arc<AtomicU32>,
    max_keys: Arc<AtomicU32>,
    counters: Arc<Counters>,
}

impl fmt::Debug for Party {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Party")
            .field("name", &self.name)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Party {
    /// A party at `base` (`https://host:port`), reached with `http`. The URL is not checked
    /// here: [`crate::Client`]'s constructors check it ([`crate::check_party_url`]).
    pub fn new(http: reqwest::Client, base: &str) -> Party {
        let base = base.trim_end_matches('/').to_string();
        Party {
            http,
            name: base.clone(),
            api: format!("{base}/v1"),
            admin_epochs: format!("{base}/v1/admin/epochs"),
            base,
            token: None,
            page_size: Arc::new(AtomicU32::new(0)),
            max_keys: Arc::new(AtomicU32::new(0)),
            counters: Arc::new(Counters::default()),
        }
    }

    /// Named `party {label} (URL)` in errors, sending `token` with every request, counting into
    /// `counters`.
    pub(crate) fn labelled(
        http: reqwest::Client,
        base: &str,
        label: &str,
        token: Option<String>,
        counters: Arc<Counters>,
    ) -> Party {
        let mut p = Party::new(http, base);
        p.name = format!("party {label} ({})", p.base);
        p.token = token;
        p.counters = counters;
        p
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// The same party, asked about its table `table` (`None` or `default`: the routes without a
    /// table name). The name is not checked here: [`crate::ClientBuilder::table`] checks it.
    pub fn with_table(mut self, table: Option<&str>) -> Party {
        match table {
            Some(name) if name != pirq_shared::layout::DEFAULT_TABLE => {
                self.api = format!("{}/v1/tables/{name}", self.base);
                self.admin_epochs = format!("{}/v1/admin/tables/{name}/epochs", self.base);
            }
            _ => {
                self.api = format!("{}/v1", self.base);
                self.admin_epochs = self.admin_epochs.clone();
            }
        }
        self
    }

    /// How errors name this party.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn protocol(&self, detail: String) -> ClientError {
        ClientError::Protocol {
            party: self.name.clone(),
            detail,
        }
    }

    fn http_err(&self, phase: Phase, source: reqwest::Error) -> ClientError {
        ClientError::Http {
            party: self.name.clone(),
            phase,
            source: source.without_url(),
        }
    }

    fn timeout(&self, phase: Phase, d: &Deadline) -> ClientError {
        ClientError::Timeout {
            party: self.name.clone(),
            phase,
            after: d.total(),
        }
    }

    fn too_large(&self, what: &'static str, limit: usize) -> ClientError {
        ClientError::TooLarge {
            party: self.name.clone(),
            what,
            limit: limit as u64,
        }
    }

    /// `step` within the deadline; past it, a timeout naming `phase`.
    async fn within<T>(
        &self,
        d: &Deadline,
        phase: Phase,
        step: impl std::future::Future<Output = Result<T, ClientError>>,
    ) -> Result<T, ClientError> {
        d.run(step)
            .await
            .unwrap_or_else(|| Err(self.timeout(phase, d)))
    }

    /// Sends a request (with the party's token) and waits for the answer's head.
    async fn send(
        &self,
        request: RequestBuilder,
        phase: Phase,
        d: &Deadline,
    ) -> Result<Response, ClientError> {
        let request = match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        self.within(d, phase, async {
            request.send().await.map_err(|e| self.http_err(phase, e))
        })
        .await
    }

    /// The answer's body, read chunk by chunk and refused as soon as it passes `limit` (and
    /// before reading when its `Content-Length` says it would): a party cannot make the
    /// client hold more than the step needs.
    async fn body(
        &self,
        mut resp: Response,
        limit: usize,
        what: &'static str,
        phase: Phase,
        d: &Deadline,
    ) -> Result<Vec<u8>, ClientError> {
        if resp.content_length().is_some_and(|n| n > limit as u64) {
            return Err(self.too_large(what, limit));
        }
        let expected = resp.content_length().unwrap_or(0) as usize;
        self.within(d, phase, async {
            let mut buf = Vec::with_capacity(expected.min(limit));
            while let Some(chunk) = resp.chunk().await.map_err(|e| self.http_err(phase, e))? {
                if buf.len() + chunk.len() > limit {
                    return Err(self.too_large(what, limit));
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(buf)
        })
        .await
    }

    /// Turns a non-success answer into [`ClientError::Api`] (its text sanitized).
    async fn api_error(&self, resp: Response, phase: Phase, d: &Deadline) -> ClientError {
        let status = resp.status().as_u16();
        let body = match self
            .body(resp, ENVELOPE_BYTES, "an error body", phase, d)
            .await
        {
            Ok(body) => body,
            Err(e) => return e,
        };
        match serde_json::from_slice::<ErrorEnvelope>(&body) {
            Ok(env) => ClientError::Api {
                party: self.name.clone(),
                status,
                error: Box::new(sanitize_error(env.error)),
            },
            Err(_) => self.protocol(format!("HTTP {status} without an error body")),
        }
    }

    /// The most bytes an answer to `keys` keys may take in `encoding`: the pages (base64 in
    /// JSON) and [`ENVELOPE_BYTES`].
    pub fn answer_limit(&self, keys: usize, encoding: Encoding) -> usize {
        let page = match self.page_size.load(Ordering::Relaxed) {
            0 => MAX_PAGE_SIZE,
            n => n.min(MAX_PAGE_SIZE),
        } as usize;
        let per_key = match encoding {
            Encoding::Json => page.div_ceil(3) * 4 + 4,
            Encoding::Bincode => page + 10,
        };
        keys.max(1).saturating_mul(per_key) + ENVELOPE_BYTES
    }

    /// Pushes the next epoch's page replacements (`POST /v1/admin/epochs`, bincode body) with
    /// the party's admin token; returns the epoch the party appended. Bounded by
    /// [`DEFAULT_TIMEOUT`].
    pub async fn push_epoch(
        &self,
        token: &str,
        update: &pirq_shared::update::EpochUpdate,
    ) -> Result<u64, ClientError> {
        let d = Deadline::after(DEFAULT_TIMEOUT);
        let request = self
            .http
            .post(self.admin_epochs.clone())
            .bearer_auth(token)
            .header(CONTENT_TYPE, pirq_shared::wire::BINCODE)
            .body(update.to_bincode());
        let resp = self
            .within(&d, Phase::Push, async {
                request
                    .send()
                    .await
                    .map_err(|e| self.http_err(Phase::Push, e))
            })
            .await?;
        if !resp.status().is_success() {
            return Err(self.api_error(resp, Phase::Push, &d).await);
        }
        let body = self
            .body(resp, ENVELOPE_BYTES, "the push answer", Phase::Push, &d)
            .await?;
        let body: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|_| self.protocol("push answer is not JSON".into()))?;
        body["epoch"]
            .as_u64()
            .ok_or_else(|| self.protocol("push answer without an epoch".into()))
    }

    /// `GET /v1/info`, bounded by [`DEFAULT_TIMEOUT`].
    pub async fn info(&self) -> Result<Info, ClientError> {
        Ok(self.info_by(&Deadline::after(DEFAULT_TIMEOUT)).await?.0)
    }

    /// `GET /v1/info` within `d`, at most [`MAX_INFO_BYTES`]; with the public key (DER
    /// SubjectPublicKeyInfo) of the party's TLS certificate when the HTTP client reports it
    /// (`tls_info`).
    pub(crate) async fn info_by(
        &self,
        d: &Deadline,
    ) -> Result<(Info, Option<Vec<u8>>), ClientError> {
        self.counters.info();
        let resp = self
            .send(self.http.get(format!("{}/info", self.api)), Phase::Info, d)
            .await?;
        if !resp.status().is_success() {
            return Err(self.api_error(resp, Phase::Info, d).await);
        }
        let identity = resp
            .extensions()
            .get::<reqwest::tls::TlsInfo>()
            .and_then(|tls| tls.peer_certificate())
            .and_then(public_key_of);
        let body = self
            .body(resp, MAX_INFO_BYTES, "/v1/info", Phase::Info, d)
            .await?;
        let info: Info = serde_json::from_slice(&body).map_err(|e| {
            self.protocol(format!(
                "/v1/info is not the documented shape: {}",
                sanitize(&e.to_string())
            ))
        })?;
        if let Some(id) = &info.party {
            if id.len() > 64 {
                return Err(self.protocol("/v1/info: party id longer than 64 characters".into()));
            }
        }
        check_geometry(&info).map_err(|why| self.protocol(format!("/v1/info: {why}")))?;
        self.page_size.store(info.page_size, Ordering::Relaxed);
        self.max_keys
            .store(info.max_keys_per_query, Ordering::Relaxed);
        Ok((info, identity))
    }

    /// `GET /v1/manifests` within `d`, at most [`MAX_MANIFESTS_BYTES`]: the publisher's epoch
    /// manifests this party serves (`docs/spec/signed.md` §4.2), shape-checked, not verified;
    /// empty when it serves none (404 `no_manifests`).
    pub(crate) async fn manifests_by(
        &self,
        d: &Deadline,
    ) -> Result<Vec<pirq_shared::signing::Manifest>, ClientError> {
        let resp = self
            .send(
                self.http.get(format!("{}/manifests", self.api)),
                Phase::Manifests,
                d,
            )
            .await?;
        if !resp.status().is_success() {
            return match self.api_error(resp, Phase::Manifests, d).await {
                ClientError::Api { error, .. } if error.code == "no_manifests" => Ok(Vec::new()),
                e => Err(e),
            };
        }
        let body = self
            .body(
                resp,
                MAX_MANIFESTS_BYTES,
                "/v1/manifests",
                Phase::Manifests,
                d,
            )
            .await?;
        pirq_shared::signing::Manifest::parse_list(&body)
            .map_err(|e| self.protocol(format!("/v1/manifests: {}", sanitize(&e.to_string()))))
    }

    /// `POST /v1/queries`; the body and the answer in `encoding`, bounded by
    /// [`DEFAULT_TIMEOUT`].
    ///
    /// Every submit carries a fresh `Idempotency-Key`, so it can be sent again safely: a 429
    /// (backlog full) or 503 (a cap, or Redis down) is retried after the party's
    /// `Retry-After` but no sooner than a back-off of 100 ms doubling to 2 s, jittered, while
    /// the deadline leaves room; a connection that failed is
    /// retried up to [`SUBMIT_ATTEMPTS`] times. The party maps the retries to one request id.
    pub async fn submit(
        &self,
        request: &QueryRequest,
        encoding: Encoding,
    ) -> Result<Submitted, ClientError> {
        self.submit_waiting(request, encoding, None).await
    }

    /// [`Party::submit`], asking the gateway to hold its answer up to `wait` (`Prefer: wait`,
    /// whole seconds) until the query is final: then the query took one round trip.
    pub async fn submit_waiting(
        &self,
        request: &QueryRequest,
        encoding: Encoding,
        wait: Option<Duration>,
    ) -> Result<Submitted, ClientError> {
        let d = Deadline::after(DEFAULT_TIMEOUT);
        self.submit_by(request, encoding, wait, &d).await
    }

    pub(crate) async fn submit_by(
        &self,
        request: &QueryRequest,
        encoding: Encoding,
        wait: Option<Duration>,
        d: &Deadline,
    ) -> Result<Submitted, ClientError> {
        let prefer = wait.map(|w| format!("wait={}", w.as_secs_f64().ceil().max(1.0) as u64));
        let body = match encoding {
            Encoding::Json => request.to_json(),
            Encoding::Bincode => request.to_bincode(),
        };
        let idempotency_key = format!("{:032x}", rand::random::<u128>());
        let mut backoff = backoff();
        let mut failed_connects = 0;
        let resp = loop {
            let mut post = self
                .http
                .post(format!("{}/queries", self.api))
                .header(CONTENT_TYPE, encoding.media_type())
                .header(ACCEPT, encoding.media_type())
                .header("Idempotency-Key", &idempotency_key);
            if let Some(prefer) = &prefer {
                post = post.header("Prefer", prefer);
            }
            let wait = match self.send(post.body(body.clone()), Phase::Submit, d).await {
                Ok(r) if matches!(r.status().as_u16(), 429 | 503) => {
                    self.counters.refused(r.status().as_u16());
                    let wait = refusal_wait(retry_after(&r), &mut backoff);
                    if !d.leaves(wait) {
                        return Err(self.api_error(r, Phase::Submit, d).await);
                    }
                    wait
                }
                Ok(r) => break r,
                // A gateway restarting, or a connection that broke before an answer.
                Err(ClientError::Http { source, .. })
                    if (source.is_connect() || source.is_request())
                        && failed_connects + 1 < SUBMIT_ATTEMPTS =>
                {
                    failed_connects += 1;
                    jitter(backoff.next_delay())
                }
                Err(e) => return Err(e),
            };
            self.counters.retry();
            self.sleep(wait, d).await?;
        };
        // 202: queued now; 200: final (held by `Prefer: wait`, or a replay).
        if !matches!(resp.status(), StatusCode::ACCEPTED | StatusCode::OK) {
            return Err(self.api_error(resp, Phase::Submit, d).await);
        }
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(sanitize)
            .unwrap_or_default();
        let limit = self.answer_limit(request.keys.len(), encoding);
        let result = self.decode(resp, encoding, limit, Phase::Answer, d).await?;
        Ok(Submitted {
            id: self.request_id(&result)?,
            location,
            result,
        })
    }

    /// Sleeps `wait`, or fails with a timeout (phase retry wait) if the deadline comes first.
    async fn sleep(&self, wait: Duration, d: &Deadline) -> Result<(), ClientError> {
        self.within(d, Phase::RetryWait, async {
            tokio::time::sleep(wait).await;
            Ok(())
        })
        .await
    }

    /// A result body, at most `limit` bytes, with a request id checked before anyone uses it.
    async fn decode(
        &self,
        resp: Response,
        encoding: Encoding,
        limit: usize,
        phase: Phase,
        d: &Deadline,
    ) -> Result<QueryResult, ClientError> {
        let bytes = self.body(resp, limit, "the answer", phase, d).await?;
        let decoded = match encoding {
            Encoding::Json => QueryResult::from_json(&bytes),
            Encoding::Bincode => QueryResult::from_bincode(&bytes),
        };
        let result = decoded.map_err(|e| {
            self.protocol(format!("undecodable result: {}", sanitize(&e.to_string())))
        })?;
        self.checked(result)
    }

    /// Refuses a result whose id is not a request id (SPEC §4.1): it would become part of the
    /// next URL.
    fn checked(&self, mut result: QueryResult) -> Result<QueryResult, ClientError> {
        if !is_request_id(&result.id) {
            return Err(self.protocol(format!(
                "answered request id {:?}, not 32 lowercase hex digits: refused before it is \
                 used in a URL",
                sanitize(&result.id)
            )));
        }
        result.error = result.error.map(sanitize_error);
        Ok(result)
    }

    /// The typed id of a result [`Party::checked`] let through.
    fn request_id(&self, result: &QueryResult) -> Result<RequestId, ClientError> {
        RequestId::parse(&result.id).map_err(|_| {
            self.protocol(format!(
                "answered request id {:?}, not 32 lowercase hex digits",
                sanitize(&result.id)
            ))
        })
    }

    /// `GET /v1/queries/{id}` once, optionally long-polling `wait_secs`; bounded by
    /// [`DEFAULT_TIMEOUT`].
    pub async fn status(
        &self,
        id: &RequestId,
        encoding: Encoding,
        wait_secs: Option<u32>,
    ) -> Result<QueryResult, ClientError> {
        let d = Deadline::after(DEFAULT_TIMEOUT);
        let keys = self.default_keys();
        self.status_by(id, encoding, wait_secs, keys, &d).await
    }

    /// The answer bound of a result read for a query of unknown size: the party's key limit,
    /// or 1,024 keys before its info was read.
    fn default_keys(&self) -> usize {
        match self.max_keys.load(Ordering::Relaxed) {
            0 => 1024,
            n => n as usize,
        }
    }

    async fn status_by(
        &self,
        id: &RequestId,
        encoding: Encoding,
        wait_secs: Option<u32>,
        keys: usize,
        d: &Deadline,
    ) -> Result<QueryResult, ClientError> {
        let mut url = format!("{}/queries/{id}", self.api);
        if let Some(w) = wait_secs {
            url.push_str(&format!("?wait={w}"));
        }
        let request = self.http.get(url).header(ACCEPT, encoding.media_type());
        let resp = self.send(request, Phase::Poll, d).await?;
        match resp.status() {
            StatusCode::OK | StatusCode::ACCEPTED => {
                let limit = self.answer_limit(keys, encoding);
                self.decode(resp, encoding, limit, Phase::Answer, d).await
            }
            _ => Err(self.api_error(resp, Phase::Poll, d).await),
        }
    }

    /// Waits for the final result of `id`, at most `timeout`; a `failed` result is an error.
    pub async fn wait(
        &self,
        id: &RequestId,
        encoding: Encoding,
        how: Wait,
        timeout: Duration,
    ) -> Result<QueryResult, ClientError> {
        let keys = self.default_keys();
        self.wait_by(id, encoding, how, keys, &Deadline::after(timeout))
            .await
    }

    pub(crate) async fn wait_by(
        &self,
        id: &RequestId,
        encoding: Encoding,
        how: Wait,
        keys: usize,
        d: &Deadline,
    ) -> Result<QueryResult, ClientError> {
        // The query lives in the party's Redis, not in the gateway: a gateway restart (refused
        // connections, an event stream ended early, 502/503 from a proxy or a gateway coming up)
        // is waited out with back-off, within the deadline.
        let mut backoff = backoff();
        let result = loop {
            let attempt = match how {
                Wait::Inline | Wait::Events => self.wait_events(id, keys, d).await,
                Wait::Poll { interval } => loop {
                    match self.status_by(id, encoding, None, keys, d).await {
                        Ok(r) if r.status.is_final() => break Ok(r),
                        Ok(_) => {
                            backoff.reset();
                            self.sleep(interval, d).await?;
                        }
                        Err(e) => break Err(e),
                    }
                },
                Wait::LongPoll => loop {
                    let asked = tokio::time::Instant::now();
                    match self.status_by(id, encoding, Some(30), keys, d).await {
                        Ok(r) if r.status.is_final() => break Ok(r),
                        // A long-poll answered pending at once (a gateway that does not hold,
                        // or a hostile one): pace the next, never a busy loop.
                        Ok(_) if asked.elapsed() < Duration::from_millis(100) => {
                            self.sleep(jitter(Duration::from_millis(100)), d).await?;
                        }
                        Ok(_) => backoff.reset(),
                        Err(e) => break Err(e),
                    }
                },
            };
            match attempt {
                Err(e) if is_transient(&e) => {
                    self.counters.retry();
                    self.sleep(jitter(backoff.next_delay()), d).await?;
                }
                other => break other?,
            }
        };
        if result.id != id.as_str() {
            return Err(self.protocol(format!(
                "asked for query {id}, answered query {:?}",
                sanitize(&result.id)
            )));
        }
        self.settle(id, result)
    }

    /// A final result as the caller takes it: `failed` becomes [`ClientError::Failed`].
    fn settle(&self, id: &RequestId, result: QueryResult) -> Result<QueryResult, ClientError> {
        if result.status == QueryStatus::Failed {
            let error = result.error.unwrap_or_else(|| {
                ErrorBody::new(
                    pirq_shared::error::ErrorCode::Internal,
                    "failed without an error",
                )
            });
            return Err(ClientError::Failed {
                party: self.name.clone(),
                id: id.to_string(),
                error: Box::new(error),
            });
        }
        Ok(result)
    }

    /// Follows the SSE stream until its `result` event; an event (or an unfinished line) over
    /// the answer bound of `keys` keys is refused.
    async fn wait_events(
        &self,
        id: &RequestId,
        keys: usize,
        d: &Deadline,
    ) -> Result<QueryResult, ClientError> {
        let request = self
            .http
            .get(format!("{}/queries/{id}/events", self.api))
            .header(ACCEPT, "text/event-stream");
        let mut resp = self.send(request, Phase::Events, d).await?;
        if !resp.status().is_success() {
            return Err(self.api_error(resp, Phase::Events, d).await);
        }
        let limit = self.answer_limit(keys, Encoding::Json);
        let mut buf: Vec<u8> = Vec::new();
        loop {
            let chunk = self
                .within(d, Phase::Events, async {
                    resp.chunk()
                        .await
                        .map_err(|e| self.http_err(Phase::Events, e))
                })
                .await?;
            let Some(chunk) = chunk else {
                return Err(ClientError::StreamEnded {
                    party: self.name.clone(),
                });
            };
            buf.extend_from_slice(&chunk);
            while let Some((text_end, event_end)) = sse::find_event_end(&buf) {
                let raw: Vec<u8> = buf.drain(..event_end).collect();
                let (event, data) = sse::parse_event(&raw[..text_end]);
                match event.as_str() {
                    "result" => {
                        let result = QueryResult::from_json(data.as_bytes()).map_err(|e| {
                            self.protocol(format!(
                                "undecodable result event: {}",
                                sanitize(&e.to_string())
                            ))
                        })?;
                        return self.checked(result);
                    }
                    "error" => {
                        return Err(match serde_json::from_str::<ErrorEnvelope>(&data) {
                            Ok(env) => ClientError::Api {
                                party: self.name.clone(),
                                status: 200,
                                error: Box::new(sanitize_error(env.error)),
                            },
                            Err(_) => self.protocol(format!(
                                "undecodable error event: {}",
                                sanitize_bytes(data.as_bytes())
                            )),
                        })
                    }
                    _ => {}
                }
            }
            if buf.len() > limit {
                return Err(self.too_large("an event-stream event", limit));
            }
        }
    }

    /// Submits and waits, at most `timeout` in all: one party's half of a fetch.
    pub async fn query(
        &self,
        request: &QueryRequest,
        encoding: Encoding,
        how: Wait,
        timeout: Duration,
    ) -> Result<QueryResult, ClientError> {
        self.query_by(request, encoding, how, &Deadline::after(timeout))
            .await
    }

    pub(crate) async fn query_by(
        &self,
        request: &QueryRequest,
        encoding: Encoding,
        how: Wait,
        d: &Deadline,
    ) -> Result<QueryResult, ClientError> {
        // Most queries are answered within one pass: holding the answer saves the second
        // request and the events between.
        let inline = (how == Wait::Inline).then(|| d.remaining().min(INLINE_WAIT));
        let submitted = self.submit_by(request, encoding, inline, d).await?;
        if submitted.result.status.is_final() {
            return self.settle(&submitted.id, submitted.result);
        }
        self.wait_by(&submitted.id, encoding, how, request.keys.len(), d)
            .await
    }
}

/// What `/v1/info` may say of the database (SPEC §2): a party claiming an impossible geometry
/// is refused before its numbers size anything.
fn check_geometry(info: &Info) -> Result<(), String> {
    let ps = info.page_size;
    if !(256..=MAX_PAGE_SIZE).contains(&ps) || !ps.is_power_of_two() {
        return Err(format!(
            "page_size {ps} is not a power of two in 256..=65536"
        ));
    }
    if info.num_pages == 0 || info.domain_bits == 0 || info.domain_bits > 40 {
        return Err(format!(
            "{} pages in a domain of {} bits",
            info.num_pages, info.domain_bits
        ));
    }
    if info.domain_bits != pirq_shared::dpf::domain_bits(info.num_pages) {
        return Err(format!(
            "domain_bits {} does not fit {} pages",
            info.domain_bits, info.num_pages
        ));
    }
    if info.max_keys_per_query == 0 || info.epoch.oldest > info.epoch.newest {
        return Err("no keys per query, or an empty epoch window".into());
    }
    Ok(())
}

/// The DER SubjectPublicKeyInfo of a DER certificate: what "the same TLS identity" compares
/// (a renewed certificate for the same key is the same identity).
fn public_key_of(der: &[u8]) -> Option<Vec<u8>> {
    let der = rustls_pki_types::CertificateDer::from(der);
    let cert = webpki::EndEntityCert::try_from(&der).ok()?;
    Some(cert.subject_public_key_info().as_ref().to_vec())
}

/// Whether waiting again may succeed: the connection failed or broke, the event stream ended
/// before its result (the gateway stopped), or the party asked to come back (429, 502, 503,
/// 504). Anything else (404, a failed query, a malformed or oversized answer, the deadline)
/// is final.
fn is_transient(e: &ClientError) -> bool {
    match e {
        ClientError::Http { source, .. } => {
            source.is_connect() || source.is_request() || source.is_body()
        }
        ClientError::StreamEnded { .. } => true,
        ClientError::Api { status, .. } => matches!(status, 429 | 502 | 503 | 504),
        ClientError::Protocol { detail, .. } => detail.starts_with("HTTP 50"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(num_pages: u64, page_size: u32, domain_bits: u8) -> Info {
        serde_json::from_value(serde_json::json!({
            "num_pages": num_pages, "page_size": page_size, "domain_bits": domain_bits,
            "epoch": {"oldest": 0, "newest": 0}, "max_keys_per_query": 64, "workers": 1,
        }))
        .unwrap()
    }

    #[test]
    fn impossible_geometry_is_refused() {
        assert!(check_geometry(&info(1000, 4096, 10)).is_ok());
        assert!(check_geometry(&info(1, 256, 1)).is_ok());
        for bad in [
            info(1000, 4095, 10),
            info(1000, 128, 10),
            info(1000, 131072, 10),
            info(0, 4096, 1),
            info(1000, 4096, 9),
            info(1000, 4096, 41),
        ] {
            assert!(check_geometry(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn answers_are_bounded_by_their_keys_and_page_size() {
        let p = Party::new(reqwest::Client::new(), "http://127.0.0.1:1");
        // Before any info: the largest page the spec allows.
        assert_eq!(
            p.answer_limit(1, Encoding::Bincode),
            65536 + 10 + ENVELOPE_BYTES
        );
        p.page_size.store(4096, Ordering::Relaxed);
        assert_eq!(
            p.answer_limit(8, Encoding::Json),
            8 * (4096usize.div_ceil(3) * 4 + 4) + ENVELOPE_BYTES
        );
        assert_eq!(p.default_keys(), 1024);
    }
}
