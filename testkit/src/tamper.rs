//! A tampering party: an HTTP proxy in front of a real party's gateway that forwards every
//! request and answer as they are, except that it XORs chosen bytes into the pages of the query
//! results it passes on (JSON results: `POST /v1/queries` answered inline, `GET
//! /v1/queries/{id}`), keeping their digest stamp. What a party that serves the right file and
//! then lies in its answers does; a verifying client must refuse every such answer
//! (`docs/spec/signed.md` §3).
//!
//! Clients under test poll (`--poll`): a result read from an event stream is passed on untouched.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use base64::Engine as _;
use tokio::net::TcpListener;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// What the proxy XORs into each answer page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Tamper {
    /// Nothing: an honest relay.
    #[default]
    Nothing,
    /// These bytes, from the start of the page (a shorter delta leaves the rest alone).
    Xor(Vec<u8>),
    /// `delta` at `offset` of the page.
    XorAt { offset: usize, delta: Vec<u8> },
    /// The `i`-th delta into the `i`-th page of each answer (from the start of the page; pages
    /// past the list are left alone): `old ⊕ new` of the pages a lookup asks for hands the
    /// client their older, validly signed versions (a rollback, `docs/spec/signed.md` §4).
    XorEach(Vec<Vec<u8>>),
    /// No page is altered; `/v1/info` claims this epoch window instead of the party's: a party
    /// that pretends not to have the newest epochs, to roll a client back to an old but
    /// genuinely signed one (`docs/spec/signed.md` §4.4).
    ClaimWindow { oldest: u64, newest: u64 },
}

impl Tamper {
    /// XORs the delta into `page`, the `position`-th of its answer; whether a byte changed.
    fn apply(&self, position: usize, page: &mut [u8]) -> bool {
        let (offset, delta) = match self {
            Tamper::Nothing | Tamper::ClaimWindow { .. } => return false,
            Tamper::Xor(d) => (0, d),
            Tamper::XorAt { offset, delta } => (*offset, delta),
            Tamper::XorEach(deltas) => match deltas.get(position) {
                Some(d) => (0, d),
                None => return false,
            },
        };
        let mut changed = false;
        for (b, d) in page.iter_mut().skip(offset).zip(delta) {
            *b ^= d;
            changed |= *d != 0;
        }
        changed
    }
}

struct Relay {
    upstream: String,
    http: reqwest::Client,
    tamper: Mutex<Tamper>,
    tampered: AtomicU64,
}

/// A running tampering proxy; stops when dropped.
pub struct TamperProxy {
    /// The proxy's base URL (`http://127.0.0.1:<port>`): give it to a client as a party.
    pub url: String,
    relay: Arc<Relay>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TamperProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TamperProxy {
    /// A proxy for the party at `upstream` (a gateway's base URL), relaying honestly until
    /// [`TamperProxy::set`].
    pub async fn start(upstream: &str) -> anyhow::Result<TamperProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr: SocketAddr = listener.local_addr()?;
        let relay = Arc::new(Relay {
            upstream: upstream.trim_end_matches('/').to_string(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()?,
            tamper: Mutex::new(Tamper::Nothing),
            tampered: AtomicU64::new(0),
        });
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(relay.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(TamperProxy {
            url: format!("http://{addr}"),
            relay,
            task,
        })
    }

    /// What to XOR into the pages of the answers from now on.
    pub fn set(&self, tamper: Tamper) {
        *self.relay.tamper.lock().expect("not poisoned") = tamper;
    }

    /// How many answer pages were altered so far.
    pub fn tampered(&self) -> u64 {
        self.relay.tampered.load(Ordering::Relaxed)
    }
}

async fn forward(State(relay): State<Arc<Relay>>, request: Request) -> Response {
    match relay_once(&relay, request).await {
        Ok(r) => r,
        Err(e) => Response::builder()
            .status(StatusCode::BAD_GATEWAY)
            .body(Body::from(format!("tamper proxy: {e}")))
            .expect("a plain response"),
    }
}

async fn relay_once(relay: &Relay, request: Request) -> anyhow::Result<Response> {
    let (parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let body: Bytes = axum::body::to_bytes(body, 64 << 20).await?;
    let mut headers = parts.headers.clone();
    headers.remove(header::HOST);
    let upstream = relay
        .http
        .request(parts.method, format!("{}{path}", relay.upstream))
        .headers(headers)
        .body(body)
        .send()
        .await?;
    let status = upstream.status();
    let mut headers: HeaderMap = upstream.headers().clone();
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let mut bytes = upstream.bytes().await?.to_vec();
    if is_json {
        let tamper = relay.tamper.lock().expect("not poisoned").clone();
        if let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(&bytes) {
            if let (Tamper::ClaimWindow { oldest, newest }, "/v1/info") = (&tamper, path.as_str()) {
                value["epoch"] = serde_json::json!({ "oldest": oldest, "newest": newest });
                relay.tampered.fetch_add(1, Ordering::Relaxed);
                bytes = serde_json::to_vec(&value)?;
            }
            if let Some(pages) = value.get_mut("pages").and_then(|p| p.as_array_mut()) {
                let mut changed = false;
                for (position, page) in pages.iter_mut().enumerate() {
                    let Some(mut raw) = page.as_str().and_then(|s| B64.decode(s).ok()) else {
                        continue;
                    };
                    if tamper.apply(position, &mut raw) {
                        relay.tampered.fetch_add(1, Ordering::Relaxed);
                        *page = serde_json::Value::String(B64.encode(&raw));
                        changed = true;
                    }
                }
                if changed {
                    bytes = serde_json::to_vec(&value)?;
                }
            }
        }
    }
    headers.remove(header::CONTENT_LENGTH);
    headers.remove(header::TRANSFER_ENCODING);
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    Ok(response)
}
