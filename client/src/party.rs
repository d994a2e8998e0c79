//! One party's HTTP API: info, submit, and the three ways to wait for a result.

use std::time::{Duration, Instant};

use futures::StreamExt;
use pirq_shared::wire::{
    ErrorEnvelope, Info, QueryRequest, QueryResult, QueryStatus, BINCODE, JSON,
};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::StatusCode;

use crate::ClientError;

/// Tries of one submit when the party asks to come back later (429, 503) or the connection broke.
pub const SUBMIT_ATTEMPTS: u32 = 5;

/// The answer's `Retry-After` in seconds (default 1), capped at 5 s.
fn retry_after(resp: &reqwest::Response) -> Duration {
    let secs = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(1);
    Duration::from_secs(secs.min(5))
}

/// Checks a party's base URL before anything is sent: `host:port` without a scheme would
/// otherwise fail later as "relative URL without a base" (or, for `localhost:8080`, parse as a
/// URL of scheme `localhost`).
pub fn check_url(url: &str) -> Result<(), ClientError> {
    let bad = |hint: String| ClientError::BadUrl {
        url: url.to_string(),
        hint,
    };
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.has_host() => Ok(()),
        _ if !url.contains("://") => Err(bad(format!(
            "it has no scheme; write http://{url} (or https://)"
        ))),
        Ok(u) if !matches!(u.scheme(), "http" | "https") => Err(bad(format!(
            "scheme {:?}; write http://HOST:PORT or https://HOST:PORT",
            u.scheme()
        ))),
        Ok(_) => Err(bad("it names no host; write http://HOST:PORT".into())),
        Err(e) => Err(bad(format!("{e}; write http://HOST:PORT"))),
    }
}

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
    pub id: String,
    /// The `Location` header.
    pub location: String,
    /// The answer to the submit: pending, or final when the party answered at once (a replay
    /// of a finished query, or a `Prefer: wait` it could honour).
    pub result: QueryResult,
}

/// The longest a submit asks the gateway to hold its answer (`Prefer: wait`): below the
/// gateway's cap of 30 s and the idle timeouts of common proxies; a query not answered by then
/// is waited for as usual.
pub const INLINE_WAIT: Duration = Duration::from_secs(25);

/// One party's base URL and the HTTP client to reach it.
#[derive(Clone, Debug)]
pub struct Party {
    http: reqwest::Client,
    base: String,
}

impl Party {
    pub fn new(http: reqwest::Client, base: &str) -> Party {
        Party {
            http,
            base: base.trim_end_matches('/').to_string(),
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    pub(crate) fn protocol(&self, detail: String) -> ClientError {
        ClientError::Protocol {
            party: self.base.clone(),
            detail,
        }
    }

    fn http_err(&self, source: reqwest::Error) -> ClientError {
        ClientError::Http {
            party: self.base.clone(),
            source,
        }
    }

    /// Turns a non-success answer into [`ClientError::Api`].
    async fn api_error(&self, resp: reqwest::Response) -> ClientError {
        let status = resp.status().as_u16();
        let body = resp.bytes().await.unwrap_or_default();
        match serde_json::from_slice::<ErrorEnvelope>(&body) {
            Ok(env) => ClientError::Api {
                party: self.base.clone(),
                status,
                error: Box::new(env.error),
            },
            Err(_) => self.protocol(format!("HTTP {status} without an error body")),
        }
    }

    /// Pushes the next epoch's page replacements (`POST /v1/admin/epochs`, bincode body) with
    /// the party's admin token; returns the epoch the party appended.
    pub async fn push_epoch(
        &self,
        token: &str,
        update: &pirq_shared::update::EpochUpdate,
    ) -> Result<u64, ClientError> {
        let resp = self
            .http
            .post(format!("{}/v1/admin/epochs", self.base))
            .bearer_auth(token)
            .header(CONTENT_TYPE, pirq_shared::wire::BINCODE)
            .body(update.to_bincode())
            .send()
            .await
            .map_err(|e| self.http_err(e))?;
        if !resp.status().is_success() {
            return Err(self.api_error(resp).await);
        }
        let body: serde_json::Value = resp.json().await.map_err(|e| self.http_err(e))?;
        body["epoch"]
            .as_u64()
            .ok_or_else(|| self.protocol("push answer without an epoch".into()))
    }

    pub async fn info(&self) -> Result<Info, ClientError> {
        let resp = self
            .http
            .get(format!("{}/v1/info", self.base))
            .send()
            .await
            .map_err(|e| self.http_err(e))?;
        if !resp.status().is_success() {
            return Err(self.api_error(resp).await);
        }
        resp.json().await.map_err(|e| self.http_err(e))
    }

    /// `POST /v1/queries`; the body and the answer in `encoding`.
    ///
    /// Every submit carries a fresh `Idempotency-Key`, so it can be sent again safely: a 429
    /// (backlog full) or 503 (Redis down, not durable yet) is retried after the party's
    /// `Retry-After` (at most [`SUBMIT_ATTEMPTS`] times, each wait capped at 5 s), and so is a
    /// connection that broke before an answer; the party maps the retries to one request id.
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
        let prefer = wait.map(|w| format!("wait={}", w.as_secs_f64().ceil().max(1.0) as u64));
        let body = match encoding {
            Encoding::Json => request.to_json(),
            Encoding::Bincode => request.to_bincode(),
        };
        let idempotency_key = format!("{:032x}", rand::random::<u128>());
        let mut attempt = 1;
        let resp = loop {
            let mut post = self
                .http
                .post(format!("{}/v1/queries", self.base))
                .header(CONTENT_TYPE, encoding.media_type())
                .header(ACCEPT, encoding.media_type())
                .header("Idempotency-Key", &idempotency_key);
            if let Some(prefer) = &prefer {
                post = post.header("Prefer", prefer);
            }
            let sent = post.body(body.clone()).send().await;
            let retry_in = match &sent {
                Ok(r) if matches!(r.status().as_u16(), 429 | 503) => Some(retry_after(r)),
                Ok(_) => None,
                // A gateway restarting: 0.2, 0.4, 0.8, 1.6 s (3 s in all) before giving up.
                Err(e) if e.is_connect() || e.is_request() => {
                    Some(Duration::from_millis(200 << (attempt - 1)))
                }
                Err(_) => None,
            };
            match retry_in {
                Some(wait) if attempt < SUBMIT_ATTEMPTS => {
                    attempt += 1;
                    tokio::time::sleep(wait).await;
                }
                _ => break sent.map_err(|e| self.http_err(e))?,
            }
        };
        // 202: queued now; 200: this key's request was answered already (a replay).
        if !matches!(resp.status(), StatusCode::ACCEPTED | StatusCode::OK) {
            return Err(self.api_error(resp).await);
        }
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let result = self.decode(resp, encoding).await?;
        Ok(Submitted {
            id: result.id.clone(),
            location,
            result,
        })
    }

    async fn decode(
        &self,
        resp: reqwest::Response,
        encoding: Encoding,
    ) -> Result<QueryResult, ClientError> {
        let bytes = resp.bytes().await.map_err(|e| self.http_err(e))?;
        let decoded = match encoding {
            Encoding::Json => QueryResult::from_json(&bytes),
            Encoding::Bincode => QueryResult::from_bincode(&bytes),
        };
        decoded.map_err(|e| self.protocol(format!("undecodable result: {e}")))
    }

    /// `GET /v1/queries/{id}` once, optionally long-polling `wait_secs`.
    pub async fn status(
        &self,
        id: &str,
        encoding: Encoding,
        wait_secs: Option<u32>,
    ) -> Result<QueryResult, ClientError> {
        let mut url = format!("{}/v1/queries/{id}", self.base);
        if let Some(w) = wait_secs {
            url.push_str(&format!("?wait={w}"));
        }
        let resp = self
            .http
            .get(url)
            .header(ACCEPT, encoding.media_type())
            .send()
            .await
            .map_err(|e| self.http_err(e))?;
        match resp.status() {
            StatusCode::OK | StatusCode::ACCEPTED => self.decode(resp, encoding).await,
            _ => Err(self.api_error(resp).await),
        }
    }

    /// Waits for the final result of `id`; a `failed` result is an error.
    pub async fn wait(
        &self,
        id: &str,
        encoding: Encoding,
        how: Wait,
        timeout: Duration,
    ) -> Result<QueryResult, ClientError> {
        // The query lives in the party's Redis, not in the gateway: a gateway restart (refused
        // connections, an event stream ended early, 502/503 from a proxy or a gateway coming up)
        // is waited out with back-off, within `timeout`.
        let fut = async {
            let mut backoff = Backoff::new();
            loop {
                let attempt = async {
                    match how {
                        Wait::Inline | Wait::Events => self.wait_events(id).await,
                        Wait::Poll { interval } => loop {
                            let r = self.status(id, encoding, None).await?;
                            if r.status.is_final() {
                                break Ok(r);
                            }
                            backoff.reset();
                            tokio::time::sleep(interval).await;
                        },
                        Wait::LongPoll => loop {
                            let r = self.status(id, encoding, Some(30)).await?;
                            if r.status.is_final() {
                                break Ok(r);
                            }
                            backoff.reset();
                        },
                    }
                }
                .await;
                match attempt {
                    Err(e) if is_transient(&e) => tokio::time::sleep(backoff.next()).await,
                    other => break other,
                }
            }
        };
        let result =
            tokio::time::timeout(timeout, fut)
                .await
                .map_err(|_| ClientError::Timeout {
                    party: self.base.clone(),
                    after: timeout,
                })??;
        self.settle(id, result)
    }

    /// A final result as the caller takes it: `failed` becomes [`ClientError::Failed`].
    fn settle(&self, id: &str, result: QueryResult) -> Result<QueryResult, ClientError> {
        if result.status == QueryStatus::Failed {
            let error = result.error.unwrap_or_else(|| {
                pirq_shared::wire::ErrorBody::new(
                    pirq_shared::error::ErrorCode::Internal,
                    "failed without an error",
                )
            });
            return Err(ClientError::Failed {
                party: self.base.clone(),
                id: id.to_string(),
                error: Box::new(error),
            });
        }
        Ok(result)
    }

    /// Follows the SSE stream until its `result` event.
    async fn wait_events(&self, id: &str) -> Result<QueryResult, ClientError> {
        let resp = self
            .http
            .get(format!("{}/v1/queries/{id}/events", self.base))
            .header(ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(|e| self.http_err(e))?;
        if !resp.status().is_success() {
            return Err(self.api_error(resp).await);
        }
        let mut stream = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        while let Some(chunk) = stream.next().await {
            buf.extend_from_slice(&chunk.map_err(|e| self.http_err(e))?);
            while let Some(end) = find_event_end(&buf) {
                let raw: Vec<u8> = buf.drain(..end.1).collect();
                let (event, data) = parse_event(&raw[..end.0]);
                match event.as_str() {
                    "result" => {
                        return QueryResult::from_json(data.as_bytes())
                            .map_err(|e| self.protocol(format!("undecodable result event: {e}")))
                    }
                    "error" => {
                        return Err(match serde_json::from_str::<ErrorEnvelope>(&data) {
                            Ok(env) => ClientError::Api {
                                party: self.base.clone(),
                                status: 200,
                                error: Box::new(env.error),
                            },
                            Err(_) => self.protocol(format!("undecodable error event: {data}")),
                        })
                    }
                    _ => {}
                }
            }
        }
        Err(ClientError::StreamEnded {
            party: self.base.clone(),
        })
    }

    /// Submits and waits: one party's half of a fetch.
    pub async fn query(
        &self,
        request: &QueryRequest,
        encoding: Encoding,
        how: Wait,
        timeout: Duration,
    ) -> Result<QueryResult, ClientError> {
        let start = Instant::now();
        // Most queries are answered within one pass: holding the answer saves the second
        // request and the events between.
        let inline = (how == Wait::Inline).then(|| timeout.min(INLINE_WAIT));
        let submitted = self.submit_waiting(request, encoding, inline).await?;
        if submitted.result.status.is_final() {
            return self.settle(&submitted.id, submitted.result);
        }
        self.wait(
            &submitted.id,
            encoding,
            how,
            timeout.saturating_sub(start.elapsed()),
        )
        .await
    }
}

/// Whether waiting again may succeed: the connection failed or broke, the event stream ended
/// before its result (the gateway stopped), or the party asked to come back (429, 502, 503,
/// 504). Anything else (404, a failed query, a malformed answer) is final.
fn is_transient(e: &ClientError) -> bool {
    match e {
        ClientError::Http { source, .. } => {
            source.is_connect() || source.is_request() || source.is_body() || source.is_timeout()
        }
        ClientError::StreamEnded { .. } => true,
        ClientError::Api { status, .. } => matches!(status, 429 | 502 | 503 | 504),
        ClientError::Protocol { detail, .. } => detail.starts_with("HTTP 50"),
        _ => false,
    }
}

/// Waits between attempts: 100 ms, doubling to 2 s.
struct Backoff(Duration);

impl Backoff {
    fn new() -> Backoff {
        Backoff(Duration::from_millis(100))
    }

    fn next(&mut self) -> Duration {
        let now = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(2));
        now
    }

    fn reset(&mut self) {
        *self = Backoff::new();
    }
}

/// `(end of the event's text, end including the blank line)` of the first complete event.
fn find_event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf
        .windows(2)
        .position(|w| w == b"\n\n")
        .map(|i| (i, i + 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// The `event` name and the joined `data` lines of one SSE event.
fn parse_event(raw: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(raw);
    let mut event = String::from("message");
    let mut data: Vec<&str> = Vec::new();
    for line in text.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = value.to_string(),
            "data" => data.push(value),
            _ => {}
        }
    }
    (event, data.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn party_urls_need_a_scheme() {
        assert!(check_url("http://127.0.0.1:8080").is_ok());
        assert!(check_url("https://pir.example.org/").is_ok());
        for (bad, says) in [
            ("127.0.0.1:8080", "write http://127.0.0.1:8080"),
            ("localhost:8080", "write http://localhost:8080"),
            ("ftp://host:1", "scheme \"ftp\""),
            ("http://", "write http://HOST:PORT"),
        ] {
            let e = check_url(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn sse_events_parse() {
        let buf = b"event: status\ndata: {\"a\":1}\n\n: keep-alive\n\nevent:result\r\ndata:x\r\ndata:y\r\n\r\n";
        let (end, next) = find_event_end(buf).unwrap();
        assert_eq!(
            parse_event(&buf[..end]),
            ("status".into(), "{\"a\":1}".into())
        );
        let rest = &buf[next..];
        let (_, next2) = find_event_end(rest).unwrap();
        let rest = &rest[next2..];
        let (end, _) = find_event_end(rest).unwrap();
        assert_eq!(parse_event(&rest[..end]), ("result".into(), "x\ny".into()));
    }
}
