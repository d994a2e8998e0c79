//! The HTTP server: accepts connections, caps how many are open, and times out slow ones.
//!
//! `axum::serve` has no knobs for this, so the gateway runs its own accept loop over hyper's
//! HTTP/1 connection (the same hyper axum uses):
//!
//! - **Header timeout** (`--header-timeout-ms`): hyper's `header_read_timeout`, armed when a
//!   connection opens and again after every answer, so a silent socket, a client dribbling its
//!   head a byte at a time and an idle keep-alive connection are all closed after it.
//! - **Body timeout** (`--body-timeout-ms`): in [`crate::body`], where bodies are read.
//! - **Idle timeout** (`--idle-timeout-ms`): a connection on which no byte moved either way for
//!   that long is closed, whatever it was doing (a client that stopped reading its answer).
//! - **Connection cap** (`--max-connections`): a connection holds a slot while it is open. With
//!   every slot taken, a new connection closes the oldest connection that is between requests
//!   (or never sent one: silent sockets are the first to go) and takes its slot; when every
//!   connection is in the middle of a request, the new one gets a canned 503
//!   `too_many_connections` and is closed. So sockets that send nothing can never lock out a
//!   client that sends a request, `/healthz` included.
//! - **Head size**: [`check_head`] answers 414 and 431 with JSON bodies for targets and heads
//!   past [`MAX_URI_BYTES`] and [`MAX_HEAD_BYTES`]; hyper's own buffer ([`READ_BUFFER_BYTES`])
//!   bounds what a connection may hold before that (past it hyper answers a bare 431).
//! - **TLS** (`--tls-cert`): the handshake runs in the connection's task once it holds a slot,
//!   within the header timeout; then HTTP/2 or HTTP/1.1 as the client chose by ALPN, with the
//!   same timeouts and caps ([`crate::tls`]). HTTP/2 has no header timeout in hyper: a silent
//!   HTTP/2 connection is closed by the idle timeout, and `MAX_HEAD_BYTES` bounds its header
//!   lists.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::Router;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use pirq_shared::error::ErrorCode;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};

use crate::error::ApiError;
use crate::tls::Tls;

/// Longest request target (path and query) answered; longer gets 414 `uri_too_long`.
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// Largest request head (target and headers) answered; larger gets 431 `headers_too_large`.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;
/// hyper's read buffer per connection: the most a request head can occupy before hyper itself
/// refuses it.
pub const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Refusals being written at once; past it a surplus connection is just closed.
const MAX_REFUSALS: usize = 64;

/// The knobs of [`serve`].
#[derive(Clone, Copy, Debug)]
pub struct ServerLimits {
    pub max_connections: u32,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
}

impl ServerLimits {
    /// The limits `config` asks for; the connection cap sized to the host where not given (this
    /// raises the process's soft open-files limit to its hard limit, see [`crate::caps`]).
    pub fn of(config: &crate::Config) -> ServerLimits {
        let descriptors = crate::caps::raise_descriptor_limit();
        ServerLimits {
            max_connections: crate::caps::connections(config.max_connections, descriptors),
            header_timeout: config.header_timeout(),
            idle_timeout: config.idle_timeout(),
        }
    }
}

/// HTTP/2 streams one connection may have open at once (hyper's default is 200).
const MAX_H2_STREAMS: u32 = 100;

/// The client's address, in every request's extensions (for `--ip-rate`).
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub std::net::SocketAddr);

/// What serves a listener's connections.
pub enum Served {
    /// This router, on the runtime that accepts.
    Here(Router),
    /// The connection lanes in turn (`--connection-threads`), each with its router.
    Lanes(Arc<crate::lanes::Lanes>),
}

/// Serves `app` on `listener` (over TLS when `tls` is given) until `shutdown` resolves; then
/// stops accepting, lets every connection finish the request it is in, and returns once all are
/// closed.
pub async fn serve(
    listener: TcpListener,
    app: Served,
    limits: ServerLimits,
    tls: Option<Tls>,
    shutdown: impl Future<Output = ()>,
) {
    let max = limits.max_connections;
    let slots = Arc::new(Semaphore::new(max as usize));
    let refusals = Arc::new(Semaphore::new(MAX_REFUSALS));
    let open = Arc::new(Registry::default());
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors or similar: wait for connections to close.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // No Nagle: an SSE stream writes small events that must leave at once, not wait for
        // the client's delayed ACK of the previous one (that cost ~25 ms per result before).
        let _ = tcp.set_nodelay(true);
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => Some(slot),
            Err(_) if open.close_oldest_idle() => {
                tokio::time::timeout(Duration::from_millis(500), slots.clone().acquire_owned())
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
            Err(_) => None,
        };
        let Some(slot) = slot else {
            crate::caps::refused(crate::caps::Cap::Connections);
            if let Ok(permit) = refusals.clone().try_acquire_owned() {
                tokio::spawn(async move {
                    refuse(tcp).await;
                    drop(permit);
                });
            }
            continue;
        };
        let conn = open.add();
        let open = open.clone();
        let tls = tls.clone();
        let connection = move |app, tcp: std::io::Result<TcpStream>| async move {
            match tcp {
                Ok(tcp) => serve_connection(tcp, peer, app, limits, tls, &conn).await,
                Err(e) => tracing::debug!(error = %e, "handing a connection to its lane failed"),
            }
            open.remove(conn.id);
            drop(slot);
        };
        match &app {
            Served::Here(app) => tokio::spawn(connection(app.clone(), Ok(tcp))),
            Served::Lanes(lanes) => {
                let (lane, app) = lanes.next();
                let app = app.clone();
                // Registered with the lane's own reactor, not this runtime's: else this runtime
                // sees every request arrive and wakes the lane for it, an `eventfd` write a
                // request (docs/bench/host-path.md).
                let tcp = tcp.into_std();
                lane.spawn(async move { connection(app, tcp.and_then(TcpStream::from_std)).await })
            }
        };
    }
    drop(listener);
    open.close_all();
    open.wait_empty().await;
}

/// One connection, until it closes, is closed for a newcomer, or goes idle.
async fn serve_connection(
    tcp: TcpStream,
    peer: std::net::SocketAddr,
    app: Router,
    limits: ServerLimits,
    tls: Option<Tls>,
    conn: &Arc<Conn>,
) {
    let io = Activity::new(tcp);
    let last = io.last.clone();
    let service = {
        let conn = conn.clone();
        hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            let busy = Busy::enter(&conn);
            let mut app = app.clone();
            req.extensions_mut().insert(PeerAddr(peer));
            async move {
                let resp = tower::Service::call(&mut app, req.map(Body::new)).await?;
                // Busy until the answer's body is dropped, i.e. written or abandoned: an event
                // stream counts as busy for as long as it runs.
                Ok::<_, std::convert::Infallible>(resp.map(move |b| {
                    Body::new(b.map_frame(move |f| {
                        let _ = &busy;
                        f
                    }))
                }))
            }
        })
    };
    match tls {
        None => {
            let http = http_builder(limits, false);
            let served = http.serve_connection(TokioIo::new(io), service);
            drive(served, limits, &last, conn).await;
        }
        Some(tls) => {
            // A newcomer may close this connection while it is still in its handshake.
            let stream = tokio::select! {
                s = tls.accept(io, limits.header_timeout) => s,
                _ = conn.close.notified() => None,
            };
            let Some(stream) = stream else { return };
            let http = http_builder(limits, crate::tls::negotiated_h2(&stream));
            let served = http.serve_connection(TokioIo::new(stream), service);
            drive(served, limits, &last, conn).await;
        }
    }
}

/// The HTTP side of a connection: HTTP/2 only where the client chose it by ALPN, HTTP/1.1
/// otherwise (never guessed from the first bytes, so the header timeout runs from the start).
fn http_builder(limits: ServerLimits, h2: bool) -> auto::Builder<TokioExecutor> {
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(READ_BUFFER_BYTES)
        .keep_alive(true);
    http.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_H2_STREAMS)
        .max_header_list_size(MAX_HEAD_BYTES as u32);
    if h2 {
        http.http2_only()
    } else {
        http.http1_only()
    }
}

/// Runs a connection until it ends, closing it gracefully when asked and at once when idle.
async fn drive<C>(served: C, limits: ServerLimits, last: &AtomicU64, conn: &Arc<Conn>)
where
    C: hyper_util::server::graceful::GracefulConnection,
{
    tokio::pin!(served);
    let mut closing = false;
    loop {
        tokio::select! {
            _ = served.as_mut() => return,
            _ = conn.close.notified(), if !closing => {
                // Idle: closes now; in a request: after its answer.
                served.as_mut().graceful_shutdown();
                closing = true;
            }
            _ = idle(last, limits.idle_timeout) => {
                tracing::debug!("closing a connection idle for {:?}", limits.idle_timeout);
                return;
            }
        }
    }
}

/// Resolves once no byte moved for `limit` (by the stamp in `last`).
async fn idle(last: &AtomicU64, limit: Duration) {
    loop {
        let since =
            Duration::from_millis(monotonic_ms().saturating_sub(last.load(Ordering::Relaxed)));
        if since >= limit {
            return;
        }
        tokio::time::sleep(limit - since).await;
    }
}

/// Writes the canned 503 (within a second) and closes.
async fn refuse(mut tcp: TcpStream) {
    let body = serde_json::to_vec(&pirq_shared::wire::ErrorEnvelope {
        error: pirq_shared::wire::ErrorBody::new(
            ErrorCode::TooManyConnections,
            "this gateway holds its most connections (--max-connections) and all are busy",
        ),
    })
    .expect("serializes");
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        tcp.write_all(head.as_bytes()).await?;
        tcp.write_all(&body).await?;
        tcp.shutdown().await
    })
    .await;
}

/// JSON 414 and 431 for request targets and heads past [`MAX_URI_BYTES`] and [`MAX_HEAD_BYTES`]:
/// the first check of every request, matched or not ([`crate::front`] and the router's
/// fallbacks).
pub fn check_head<B>(req: &axum::http::Request<B>) -> Result<(), ApiError> {
    let target = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().len())
        .unwrap_or(0);
    if target > MAX_URI_BYTES {
        return Err(ApiError::new(
            ErrorCode::UriTooLong,
            format!("the request target is longer than {MAX_URI_BYTES} bytes"),
        ));
    }
    let head: usize = target
        + req
            .headers()
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 4)
            .sum::<usize>();
    if head > MAX_HEAD_BYTES {
        return Err(ApiError::new(
            ErrorCode::HeadersTooLarge,
            format!("the request head is larger than {MAX_HEAD_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// The open connections, oldest first.
#[derive(Default)]
struct Registry {
    conns: Mutex<BTreeMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    emptied: Notify,
}

#[derive(Default)]
struct Conn {
    id: u64,
    /// Requests in progress (their answers not yet written).
    busy: AtomicUsize,
    /// Asked to close already.
    closing: AtomicBool,
    close: Notify,
}

impl Registry {
    fn add(&self) -> Arc<Conn> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            id,
            ..Conn::default()
        });
        self.conns
            .lock()
            .expect("registry")
            .insert(id, conn.clone());
        conn
    }

    fn remove(&self, id: u64) {
        let mut conns = self.conns.lock().expect("registry");
        conns.remove(&id);
        if conns.is_empty() {
            self.emptied.notify_waiters();
        }
    }

    /// Asks the oldest connection that is between requests to close; false when there is none.
    fn close_oldest_idle(&self) -> bool {
        let conns = self.conns.lock().expect("registry");
        let victim = conns
            .values()
            .find(|c| c.busy.load(Ordering::Acquire) == 0 && !c.closing.load(Ordering::Acquire));
        match victim {
            Some(c) => {
                c.closing.store(true, Ordering::Release);
                c.close.notify_one();
                true
            }
            None => false,
        }
    }

    fn close_all(&self) {
        for c in self.conns.lock().expect("registry").values() {
            c.closing.store(true, Ordering::Release);
            c.close.notify_one();
        }
    }

    async fn wait_empty(&self) {
        loop {
            let emptied = self.emptied.notified();
            if self.conns.lock().expect("registry").is_empty() {
                return;
            }
            emptied.await;
        }
    }
}

/// Marks its connection busy while alive.
struct Busy(Arc<Conn>);

impl Busy {
    fn enter(conn: &Arc<Conn>) -> Busy {
        conn.busy.fetch_add(1, Ordering::AcqRel);
        Busy(conn.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Milliseconds since this process first asked: a monotonic clock for the idle timeout (an
/// `AtomicU64` holds it where an `Instant` would need a lock), never the wall clock of
/// `pirq_shared::clock`.
fn monotonic_ms() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// A socket that stamps the time of every byte read or written, for the idle timeout.
struct Activity {
    tcp: TcpStream,
    last: Arc<AtomicU64>,
}

impl Activity {
    fn new(tcp: TcpStream) -> Activity {
        Activity {
            tcp,
            last: Arc::new(AtomicU64::new(monotonic_ms())),
        }
    }

    fn stamp(&self) {
        self.last.store(monotonic_ms(), Ordering::Relaxed);
    }
}

impl AsyncRead for Activity {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.tcp).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.stamp();
        }
        r
    }
}

impl AsyncWrite for Activity {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.tcp).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.stamp();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.stamp();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}
