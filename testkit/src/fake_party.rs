//! A fake party: the documented HTTP API (docs/http-api.md) answered in-process, honestly except
//! for one chosen misbehaviour. Both clients (Rust, TypeScript) are tested against it; the
//! behaviours and what a client must do about each are in `FAKE_PARTY.md` at the repository
//! root. The `pirq-fake-party` binary runs one for tests in other languages.
//!
//! No Redis and no worker: the fake answers each key itself (full-domain DPF evaluation over a
//! small synthetic database), so an honest fake A and an honest fake B started with the same
//! database give correct pages.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use pirq_shared::digest::Digest;
use pirq_shared::dpf::{eval_full, DpfKey};
use pirq_shared::error::ErrorCode;
use pirq_shared::wire::{
    EpochRange, ErrorBody, ErrorEnvelope, Info, QueryRequest, QueryResult, QueryStatus, BINCODE,
};
use tokio::net::TcpListener;

/// What the fake party does wrong (one phase each; see `FAKE_PARTY.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    Honest,
    SilentConnect,
    SilentInfo,
    DribbleInfo,
    HugeInfo,
    SilentSubmit,
    DribbleAnswer,
    HugeAnswer,
    HugeAnswerDeclared,
    PendingSilent,
    SseKeepalive,
    SseHugeLine,
    BadId,
    HostileError,
    Retry503,
    Retry429,
    WrongDigest,
}

impl Behaviour {
    /// Every behaviour with its name on the command line.
    pub const ALL: [(&'static str, Behaviour); 17] = [
        ("honest", Behaviour::Honest),
        ("silent-connect", Behaviour::SilentConnect),
        ("silent-info", Behaviour::SilentInfo),
        ("dribble-info", Behaviour::DribbleInfo),
        ("huge-info", Behaviour::HugeInfo),
        ("silent-submit", Behaviour::SilentSubmit),
        ("dribble-answer", Behaviour::DribbleAnswer),
        ("huge-answer", Behaviour::HugeAnswer),
        ("huge-answer-declared", Behaviour::HugeAnswerDeclared),
        ("pending-silent", Behaviour::PendingSilent),
        ("sse-keepalive", Behaviour::SseKeepalive),
        ("sse-huge-line", Behaviour::SseHugeLine),
        ("bad-id", Behaviour::BadId),
        ("hostile-error", Behaviour::HostileError),
        ("retry-503", Behaviour::Retry503),
        ("retry-429", Behaviour::Retry429),
        ("wrong-digest", Behaviour::WrongDigest),
    ];

    pub fn parse(name: &str) -> Option<Behaviour> {
        Behaviour::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b)
    }

    pub fn name(self) -> &'static str {
        Behaviour::ALL
            .iter()
            .find(|(_, b)| *b == self)
            .map(|(n, _)| *n)
            .expect("every behaviour is listed")
    }
}

/// The bytes a "huge" behaviour sends: 1 GiB.
pub const HUGE_BYTES: u64 = 1 << 30;

/// How a fake party is set up.
#[derive(Clone, Debug)]
pub struct FakeConfig {
    pub behaviour: Behaviour,
    pub pages: u64,
    pub page_size: u32,
    /// Seed of the synthetic pages (`pirq_shared::synthetic`, as `pirq db gen --seed`).
    pub seed: u64,
    pub epoch: u64,
    /// The `party` id in `/v1/info` (random when `None`; `Some("")` leaves the field out, as a
    /// proxy that strips it).
    pub party_id: Option<String>,
    /// A query token: queries and result reads then need `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// PEM certificate chain and key: serve HTTPS.
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
    /// A key-value database of this many records ([`kv_key`] → [`kv_value`]) instead of
    /// synthetic pages (0: a page database).
    pub kv_records: u64,
}

/// The key of record `i` of a fake kv database.
pub fn kv_key(i: u64) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

/// The value of record `i` of a fake kv database (16 bytes).
pub fn kv_value(i: u64) -> Vec<u8> {
    format!("value-{i:010}").into_bytes()
}

/// The layout of a fake kv database: 2 choices, 16-byte values, keys of any length.
fn kv_layout() -> pirq_shared::kv::KvLayout {
    pirq_shared::kv::KvLayout {
        choices: 2,
        kind: pirq_shared::kv::ValueKind::Fixed,
        value_size: 16,
        key_size: 0,
        seed: [7; 32],
        encodings: Default::default(),
    }
}

impl Default for FakeConfig {
    fn default() -> FakeConfig {
        FakeConfig {
            behaviour: Behaviour::Honest,
            pages: 256,
            page_size: 256,
            seed: 7,
            epoch: 0,
            party_id: None,
            token: None,
            tls: None,
            kv_records: 0,
        }
    }
}

/// What the fake was asked, for tests of round trips (`GET /fake/stats`).
#[derive(Debug, Default)]
pub struct FakeStats {
    pub info: AtomicU64,
    pub submits: AtomicU64,
    pub results: AtomicU64,
    pub events: AtomicU64,
    /// Requests refused for a missing or wrong token.
    pub unauthorized: AtomicU64,
}

impl FakeStats {
    fn json(&self) -> serde_json::Value {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        serde_json::json!({
            "info": n(&self.info),
            "submits": n(&self.submits),
            "results": n(&self.results),
            "events": n(&self.events),
            "unauthorized": n(&self.unauthorized),
        })
    }
}

struct Fake {
    config: FakeConfig,
    party_id: String,
    pages: Vec<u8>,
    /// The newest epoch served (`POST /fake/advance` moves it; the contents stay, the digest
    /// changes); the oldest is `config.epoch`.
    newest: AtomicU64,
    kv: Option<pirq_shared::kv::KvInfo>,
    stats: Arc<FakeStats>,
    /// Finished queries by id (for 202 submits read later).
    results: Mutex<HashMap<String, QueryResult>>,
}

/// A fake party of the default configuration that behaves as `behaviour`, for a test: panics
/// when it cannot start.
pub async fn fake(behaviour: Behaviour) -> FakeParty {
    FakeParty::start(FakeConfig {
        behaviour,
        ..FakeConfig::default()
    })
    .await
    .expect("fake party")
}

/// A running fake party; stopped on drop.
pub struct FakeParty {
    pub url: String,
    pub addr: SocketAddr,
    pub stats: Arc<FakeStats>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeParty {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeParty {
    /// Starts a fake party on `127.0.0.1` (a free port).
    pub async fn start(config: FakeConfig) -> anyhow::Result<FakeParty> {
        FakeParty::start_on("127.0.0.1:0", config).await
    }

    /// Starts a fake party listening on `listen`.
    pub async fn start_on(listen: &str, config: FakeConfig) -> anyhow::Result<FakeParty> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let tls = match &config.tls {
            Some((cert, key)) => Some(tls_acceptor(cert, key)?),
            None => None,
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let host = addr.to_string();
        let fake = Arc::new(Fake::new(config));
        let stats = fake.stats.clone();
        let task = tokio::spawn(serve(listener, tls, fake));
        Ok(FakeParty {
            url: format!("{scheme}://{host}"),
            addr,
            stats,
            task,
        })
    }
}

impl Fake {
    fn new(config: FakeConfig) -> Fake {
        let ps = config.page_size as usize;
        let mut pages = vec![0u8; config.pages as usize * ps];
        let mut kv = None;
        if config.kv_records > 0 {
            let params =
                pirq_shared::kv::KvParams::new(kv_layout(), config.page_size, config.pages)
                    .expect("a valid fake kv layout");
            kv = Some(params.info());
            let mut table = pirq_shared::kv::Table::empty(params, &mut pages, config.seed);
            for i in 0..config.kv_records {
                table
                    .insert(&params.tag(&kv_key(i)), &kv_value(i))
                    .expect("the fake kv database has room");
            }
        } else {
            for (p, page) in pages.chunks_mut(ps).enumerate() {
                pirq_shared::synthetic::fill_page(config.seed, p as u64, page);
            }
        }
        let party_id = config
            .party_id
            .clone()
            .unwrap_or_else(|| format!("{:032x}", rand::random::<u128>()));
        Fake {
            newest: AtomicU64::new(config.epoch),
            config,
            party_id,
            pages,
            kv,
            stats: Arc::new(FakeStats::default()),
            results: Mutex::new(HashMap::new()),
        }
    }

    fn digest_at(&self, epoch: u64) -> Digest {
        Digest::content(self.config.page_size, self.config.pages, epoch, &self.pages)
    }

    fn window(&self) -> EpochRange {
        EpochRange {
            oldest: self.config.epoch,
            newest: self.newest.load(Ordering::Relaxed),
        }
    }

    fn info(&self) -> Info {
        let window = self.window();
        Info {
            num_pages: self.config.pages,
            page_size: self.config.page_size,
            domain_bits: pirq_shared::dpf::domain_bits(self.config.pages),
            epoch: window,
            max_keys_per_query: 64,
            workers: 1,
            digest: Some(self.digest_at(window.newest)),
            // An empty id stands for a party (or a proxy in front of it) that says none.
            party: (!self.party_id.is_empty()).then(|| self.party_id.clone()),
            kv: self.kv.clone(),
            signing: None,
            shards: Vec::new(),
        }
    }

    /// The honest answer to `keys`: the XOR of the pages each key selects.
    fn answer(&self, request: &QueryRequest) -> Result<QueryResult, ErrorBody> {
        let window = self.window();
        let epoch = request.epoch.unwrap_or(window.newest);
        if !window.contains(epoch) {
            return Err(
                ErrorBody::new(ErrorCode::EpochUnavailable, "epoch not served").with_window(window),
            );
        }
        let ps = self.config.page_size as usize;
        let mut answers = Vec::with_capacity(request.keys.len());
        for (i, bytes) in request.keys.iter().enumerate() {
            let key = DpfKey::parse(bytes).map_err(|e| {
                ErrorBody::new(ErrorCode::InvalidJson, e.to_string()).with_key_index(i)
            })?;
            let bits = eval_full(&key);
            let mut acc = vec![0u8; ps];
            for (p, page) in self.pages.chunks(ps).enumerate() {
                if (bits[p / 64] >> (p % 64)) & 1 == 1 {
                    pirq_shared::bits::xor_into(&mut acc, page);
                }
            }
            answers.push(acc);
        }
        let digest = match self.config.behaviour {
            Behaviour::WrongDigest => Digest([0xee; 32]),
            _ => self.digest_at(epoch),
        };
        Ok(QueryResult {
            id: new_id(),
            status: QueryStatus::Done,
            epoch: Some(epoch),
            pages: answers,
            error: None,
            digest: Some(digest),
        })
    }

    fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.config.token else {
            return true;
        };
        let ok = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v == format!("Bearer {token}"));
        if !ok {
            self.stats.unauthorized.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }
}

fn new_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

async fn serve(listener: TcpListener, tls: Option<tokio_rustls::TlsAcceptor>, fake: Arc<Fake>) {
    let silent = fake.config.behaviour == Behaviour::SilentConnect;
    let router = router(fake);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        if silent {
            // Hold the connection open, never read nor write.
            tokio::spawn(async move {
                let _held = stream;
                std::future::pending::<()>().await;
            });
            continue;
        }
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let tls = tls.clone();
        tokio::spawn(async move {
            let http = hyper::server::conn::http1::Builder::new();
            match tls {
                Some(acceptor) => {
                    if let Ok(stream) = acceptor.accept(stream).await {
                        let io = hyper_util::rt::TokioIo::new(stream);
                        let _ = http.serve_connection(io, service).await;
                    }
                }
                None => {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = http.serve_connection(io, service).await;
                }
            }
        });
    }
}

fn router(fake: Arc<Fake>) -> Router {
    Router::new()
        .route("/v1/info", get(info))
        .route("/v1/queries", post(submit))
        .route("/v1/queries/{id}", get(result))
        .route("/v1/queries/{id}/events", get(events))
        .route("/fake/stats", get(stats))
        .route("/fake/advance", post(advance))
        .layer(cors())
        .with_state(fake)
}

/// CORS for any origin, as a gateway with `--cors-origin '*'` (http-api.md): the TypeScript
/// client's Chromium tests call fake parties from a page on another origin, and read
/// `Retry-After` to honour it. `Authorization` is allowed by name (a wildcard never covers it).
fn cors() -> tower_http::cors::CorsLayer {
    use axum::http::{HeaderName, Method};
    tower_http::cors::CorsLayer::new()
        .allow_origin(tower_http::cors::Any)
        .allow_methods([Method::GET, Method::POST])
        .allow_headers([
            header::CONTENT_TYPE,
            header::ACCEPT,
            header::AUTHORIZATION,
            HeaderName::from_static("idempotency-key"),
            HeaderName::from_static("prefer"),
        ])
        .expose_headers([
            header::LOCATION,
            header::RETRY_AFTER,
            HeaderName::from_static("preference-applied"),
        ])
}

fn error(status: StatusCode, body: ErrorBody) -> Response {
    let body = serde_json::to_vec(&ErrorEnvelope { error: body }).expect("serializes");
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A body of `total` bytes of `byte`, sent in 64 KiB chunks as fast as the peer reads.
fn huge_body(byte: u8, total: u64) -> Body {
    let chunk = Bytes::from(vec![byte; 64 << 10]);
    let n = total / chunk.len() as u64;
    Body::from_stream(futures::stream::iter(
        (0..n).map(move |_| Ok::<_, Infallible>(chunk.clone())),
    ))
}

/// `bytes` one byte every `every`.
fn dribble(bytes: Vec<u8>, every: Duration) -> Body {
    Body::from_stream(futures::stream::unfold(0usize, move |i| {
        let bytes = bytes.clone();
        async move {
            if i >= bytes.len() {
                return None;
            }
            tokio::time::sleep(every).await;
            Some((Ok::<_, Infallible>(Bytes::from(vec![bytes[i]])), i + 1))
        }
    }))
}

/// A body that never sends a byte.
fn silent_body() -> Body {
    Body::from_stream(futures::stream::pending::<Result<Bytes, Infallible>>())
}

async fn stats(State(fake): State<Arc<Fake>>) -> Response {
    axum::Json(fake.stats.json()).into_response()
}

/// Moves the newest epoch on by one (same contents, a new digest).
async fn advance(State(fake): State<Arc<Fake>>) -> Response {
    let newest = fake.newest.fetch_add(1, Ordering::Relaxed) + 1;
    axum::Json(serde_json::json!({ "epoch": newest })).into_response()
}

async fn info(State(fake): State<Arc<Fake>>) -> Response {
    fake.stats.info.fetch_add(1, Ordering::Relaxed);
    let json = serde_json::to_vec(&fake.info()).expect("serializes");
    let body = match fake.config.behaviour {
        Behaviour::SilentInfo => std::future::pending().await,
        Behaviour::DribbleInfo => dribble(json, Duration::from_millis(500)),
        Behaviour::HugeInfo => huge_body(b' ', HUGE_BYTES),
        _ => Body::from(json),
    };
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn wants_bincode(headers: &HeaderMap, name: header::HeaderName) -> bool {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(BINCODE))
}

fn encode(result: &QueryResult, bincode: bool) -> (&'static str, Vec<u8>) {
    if bincode {
        (BINCODE, result.to_bincode())
    } else {
        ("application/json", result.to_json())
    }
}

async fn submit(State(fake): State<Arc<Fake>>, headers: HeaderMap, body: Bytes) -> Response {
    let n = fake.stats.submits.fetch_add(1, Ordering::Relaxed);
    if !fake.authorized(&headers) {
        return error(
            StatusCode::UNAUTHORIZED,
            ErrorBody::new(ErrorCode::Unauthorized, "a query token is needed"),
        );
    }
    let behaviour = fake.config.behaviour;
    match behaviour {
        Behaviour::SilentSubmit => return std::future::pending().await,
        Behaviour::HostileError => {
            let message = format!("\u{1b}[31mred\u{7}\r\n\u{9b}2J{}", "A".repeat(5000));
            return error(
                StatusCode::BAD_REQUEST,
                ErrorBody {
                    code: "bad\u{1b}[0m_code".into(),
                    message,
                    key_index: None,
                    window: None,
                },
            );
        }
        Behaviour::Retry503 | Behaviour::Retry429 if n < 2 => {
            let (status, code) = if behaviour == Behaviour::Retry503 {
                (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::TooManyWaiters)
            } else {
                (StatusCode::TOO_MANY_REQUESTS, ErrorCode::BacklogFull)
            };
            let mut resp = error(status, ErrorBody::new(code, "come back later"));
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            return resp;
        }
        _ => {}
    }
    let bincode_in = wants_bincode(&headers, header::CONTENT_TYPE);
    let bincode_out = wants_bincode(&headers, header::ACCEPT);
    let request = if bincode_in {
        QueryRequest::from_bincode(&body)
    } else {
        QueryRequest::from_json(&body)
    };
    let request = match request {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, ErrorBody::new(e.code, e.message)),
    };
    let mut result = match fake.answer(&request) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::GONE, e),
    };
    let held = headers.contains_key("prefer");
    let pending_only = matches!(
        behaviour,
        Behaviour::PendingSilent
            | Behaviour::SseKeepalive
            | Behaviour::SseHugeLine
            | Behaviour::BadId
    );
    let (status, sent) = if held && !pending_only {
        (StatusCode::OK, result.clone())
    } else {
        let mut pending = QueryResult::pending(result.id.clone(), QueryStatus::Queued);
        if behaviour == Behaviour::BadId {
            pending.id = "../../v1/info?x=".into();
        }
        (StatusCode::ACCEPTED, pending)
    };
    if !pending_only {
        result.id = sent.id.clone();
        fake.results
            .lock()
            .expect("not poisoned")
            .insert(result.id.clone(), result);
    }
    let (media, bytes) = encode(&sent, bincode_out);
    let location = format!("/v1/queries/{}", sent.id);
    let body = match behaviour {
        Behaviour::DribbleAnswer => dribble(bytes, Duration::from_millis(500)),
        Behaviour::HugeAnswer => huge_body(b' ', HUGE_BYTES),
        Behaviour::HugeAnswerDeclared => {
            return Response::builder()
                .status(status)
                .header(header::CONTENT_TYPE, media)
                .header(header::CONTENT_LENGTH, HUGE_BYTES)
                .body(huge_body(b' ', HUGE_BYTES))
                .expect("valid response")
        }
        _ => Body::from(bytes),
    };
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, media)
        .header(header::LOCATION, location)
        .body(body)
        .expect("valid response")
}

async fn result(
    State(fake): State<Arc<Fake>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    fake.stats.results.fetch_add(1, Ordering::Relaxed);
    if !fake.authorized(&headers) {
        return error(
            StatusCode::UNAUTHORIZED,
            ErrorBody::new(ErrorCode::Unauthorized, "a query token is needed"),
        );
    }
    if matches!(
        fake.config.behaviour,
        Behaviour::PendingSilent | Behaviour::SseKeepalive | Behaviour::SseHugeLine
    ) {
        return std::future::pending().await;
    }
    let found = fake.results.lock().expect("not poisoned").get(&id).cloned();
    match found {
        Some(r) => {
            let (media, bytes) = encode(&r, wants_bincode(&headers, header::ACCEPT));
            ([(header::CONTENT_TYPE, media)], bytes).into_response()
        }
        None => error(
            StatusCode::NOT_FOUND,
            ErrorBody::new(ErrorCode::NotFound, "no such query"),
        ),
    }
}

async fn events(
    State(fake): State<Arc<Fake>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    fake.stats.events.fetch_add(1, Ordering::Relaxed);
    if !fake.authorized(&headers) {
        return error(
            StatusCode::UNAUTHORIZED,
            ErrorBody::new(ErrorCode::Unauthorized, "a query token is needed"),
        );
    }
    let body = match fake.config.behaviour {
        Behaviour::PendingSilent => silent_body(),
        Behaviour::SseKeepalive => Body::from_stream(futures::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Some((
                Ok::<_, Infallible>(Bytes::from_static(b": keep-alive\n\n")),
                (),
            ))
        })),
        Behaviour::SseHugeLine => {
            let head = futures::stream::once(async {
                Ok::<_, Infallible>(Bytes::from_static(b"event: result\ndata: "))
            });
            let chunk = Bytes::from(vec![b'x'; 64 << 10]);
            let tail = futures::stream::iter(
                (0..HUGE_BYTES / chunk.len() as u64).map(move |_| Ok(chunk.clone())),
            );
            Body::from_stream(futures::StreamExt::chain(head, tail))
        }
        _ => {
            let found = fake.results.lock().expect("not poisoned").get(&id).cloned();
            let Some(r) = found else {
                return error(
                    StatusCode::NOT_FOUND,
                    ErrorBody::new(ErrorCode::NotFound, "no such query"),
                );
            };
            let json = String::from_utf8(r.to_json()).expect("JSON is UTF-8");
            Body::from(format!(
                "event: status\ndata: {{\"status\":\"queued\"}}\n\n: keep-alive\n\nevent: result\ndata: {json}\n\n"
            ))
        }
    };
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// A TLS acceptor for the PEM chain and key (HTTP/1.1 only).
fn tls_acceptor(cert_pem: &[u8], key_pem: &[u8]) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(cert_pem).collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(key_pem)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
