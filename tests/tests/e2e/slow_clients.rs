//! Connection limits and timeouts, with real sockets against a real gateway: the admin token is
//! checked before any body byte is read, too-large bodies are refused at once, slow and silent
//! clients are dropped, silent sockets past the connection cap cannot lock out `/healthz`, and
//! every error the HTTP layer produces has a JSON body.
//!
//! Timeouts here are short (hundreds of ms) and every wait has a generous ceiling: the tests
//! assert *that* a slow client is dropped, never how fast.

use std::time::{Duration, Instant};

use pirq_e2e::{Party, PartyOptions, TestDb};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOKEN: &str = "test-admin-token";
/// Ceiling for anything the server should do within its (sub-second) timeouts.
const CEILING: Duration = Duration::from_secs(10);

async fn party(extra: &[&str]) -> (TestDb, Party) {
    let db = TestDb::create(64, 256, 7).unwrap();
    let mut args: Vec<String> = vec!["--admin-token".into(), TOKEN.into()];
    args.extend(extra.iter().map(|s| s.to_string()));
    let party = Party::start(
        &db.path,
        "slow",
        PartyOptions {
            gateway_args: args,
            no_worker: true,
            ..PartyOptions::default()
        },
    )
    .await
    .unwrap();
    (db, party)
}

fn addr(party: &Party) -> String {
    party.url.trim_start_matches("http://").to_string()
}

/// Reads until the server closes or `within` passes; what was read, and whether it closed.
async fn read_until_closed(tcp: &mut TcpStream, within: Duration) -> (Vec<u8>, bool) {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (got, false);
        }
        match tokio::time::timeout(left, tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (got, true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (got, false),
        }
    }
}

/// Status and JSON error code of a raw HTTP answer.
fn status_and_code(raw: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(raw);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    let code = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
        .unwrap_or_else(|| format!("<no JSON error body: {body:?}>"));
    (status, code)
}

/// One whole answer (head and a `Content-Length` body) from a connection that stays open.
async fn read_one_answer(tcp: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= length {
                return got;
            }
        }
        let n = tokio::time::timeout(CEILING, tcp.read(&mut buf))
            .await
            .expect("no whole answer in time")
            .expect("the connection failed");
        assert!(n > 0, "closed before a whole answer: {text:?}");
        got.extend_from_slice(&buf[..n]);
    }
}

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[tokio::test]
async fn admin_token_is_checked_before_the_body_and_large_bodies_are_refused_at_once() {
    let (_db, party) = party(&["--max-update-bytes", "4194304"]).await;
    let addr = addr(&party);
    let rss_before = party.gateway.rss_kib().unwrap();

    // A wrong token with a huge declared body that never comes: 401 at once.
    for auth in ["Bearer wrong", "Basic abc"] {
        let mut tcp = TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST /v1/admin/epochs HTTP/1.1\r\nhost: x\r\nauthorization: {auth}\r\n\
             content-type: application/x-bincode\r\ncontent-length: 272629760\r\n\r\n"
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        let (raw, _) = read_until_closed(&mut tcp, CEILING).await;
        assert_eq!(status_and_code(&raw), (401, "unauthorized".into()));
    }

    // The right token (any case of the scheme) and a declared length over the limit: 413 JSON
    // before a byte of the body.
    let mut tcp = TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /v1/admin/epochs HTTP/1.1\r\nhost: x\r\nauthorization: bEaReR {TOKEN}\r\n\
         content-length: 272629760\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let (raw, _) = read_until_closed(&mut tcp, CEILING).await;
    assert_eq!(status_and_code(&raw), (413, "body_too_large".into()));

    // An endless chunked body with the right token: cut at the limit, 413 JSON.
    let mut tcp = TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /v1/admin/epochs HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\n\
         transfer-encoding: chunked\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let chunk = format!("100000\r\n{}\r\n", "x".repeat(0x100000));
    let (mut rd, mut wr) = tcp.into_split();
    let writer = tokio::spawn(async move {
        let mut sent = 0usize;
        // At most 64 MiB: far past the 4 MiB limit; the server stops reading long before.
        while sent < 64 << 20 {
            if wr.write_all(chunk.as_bytes()).await.is_err() {
                break;
            }
            sent += chunk.len();
        }
        sent
    });
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(CEILING, rd.read_to_end(&mut raw)).await;
    writer.abort();
    assert_eq!(status_and_code(&raw), (413, "body_too_large".into()));

    // Twelve wrong-token uploads of 32 MiB at once: none of it is held.
    let mut uploads = Vec::new();
    for _ in 0..12 {
        let addr = addr.clone();
        uploads.push(tokio::spawn(async move {
            let mut tcp = TcpStream::connect(&addr).await.unwrap();
            let head = "POST /v1/admin/epochs HTTP/1.1\r\nhost: x\r\nauthorization: Bearer no\r\n\
                        content-length: 33554432\r\n\r\n";
            let _ = tcp.write_all(head.as_bytes()).await;
            let block = vec![0u8; 1 << 20];
            for _ in 0..32 {
                if tcp.write_all(&block).await.is_err() {
                    break;
                }
            }
        }));
    }
    for u in uploads {
        let _ = tokio::time::timeout(CEILING, u).await;
    }
    let rss_after = party.gateway.rss_kib().unwrap();
    println!("admin uploads: gateway RSS {rss_before} KiB before, {rss_after} KiB after");
    assert!(
        rss_after < rss_before + 32 * 1024,
        "gateway RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
}

/// A request refused for its headers alone (`text/plain`, a bad `Idempotency-Key`) is answered
/// after its body, and its connection stays open. Answering before the body and closing left the
/// body's bytes unread in the socket; the kernel then reset the connection and a client could
/// lose the answer (the HTTP fuzz test met it once in 4,000 requests on CI).
#[tokio::test]
async fn a_refused_header_waits_for_the_body_and_keeps_the_connection() {
    let (_db, party) = party(&[]).await;
    let addr = addr(&party);
    for (header, code) in [
        ("content-type: text/plain", (415, "unsupported_media_type")),
        ("idempotency-key: a b", (400, "invalid_idempotency_key")),
    ] {
        let mut tcp = TcpStream::connect(&addr).await.unwrap();
        let body = br#"{"keys":[]}"#;
        let head = format!(
            "POST /v1/queries HTTP/1.1\r\nhost: x\r\n{header}\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        // The body comes late: nothing may be answered before it.
        let mut buf = [0u8; 4096];
        let early = tokio::time::timeout(Duration::from_millis(300), tcp.read(&mut buf)).await;
        assert!(early.is_err(), "{header}: answered before the body came");
        tcp.write_all(body).await.unwrap();
        let answer = read_one_answer(&mut tcp).await;
        let (status, error) = status_and_code(&answer);
        assert_eq!((status, error.as_str()), code, "{header}");
        // The same connection still serves.
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let answer = read_one_answer(&mut tcp).await;
        assert!(
            answer.starts_with(b"HTTP/1.1 200"),
            "{header}: the connection was not kept: {:?}",
            String::from_utf8_lossy(&answer)
        );
    }
}

#[tokio::test]
async fn slow_and_silent_clients_are_dropped() {
    let (_db, party) = party(&[
        "--header-timeout-ms",
        "300",
        "--body-timeout-ms",
        "300",
        "--idle-timeout-ms",
        "1000",
    ])
    .await;
    let addr = addr(&party);

    // A head dribbled one byte at a time is cut.
    let mut tcp = TcpStream::connect(&addr).await.unwrap();
    let start = Instant::now();
    let dribble = b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut cut = false;
    for b in dribble {
        if tcp.write_all(&[*b]).await.is_err() {
            cut = true;
            break;
        }
        let mut probe = [0u8; 64];
        if let Ok(Ok(0)) =
            tokio::time::timeout(Duration::from_millis(100), tcp.read(&mut probe)).await
        {
            cut = true;
            break;
        }
        if start.elapsed() > CEILING {
            break;
        }
    }
    println!("dribbled head cut after {:?}", start.elapsed());
    assert!(cut, "a dribbled head was still open after {CEILING:?}");

    // A silent socket, and an idle keep-alive connection after one answer, are closed.
    let mut silent = TcpStream::connect(&addr).await.unwrap();
    let mut idle = TcpStream::connect(&addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let start = Instant::now();
    let (_, closed) = read_until_closed(&mut silent, CEILING).await;
    println!("silent socket closed after {:?}", start.elapsed());
    assert!(closed, "a silent socket was still open after {CEILING:?}");
    let (raw, closed) = read_until_closed(&mut idle, CEILING).await;
    assert!(String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 200"));
    assert!(closed, "an idle keep-alive connection was still open");

    // A body announced and never sent: 408 JSON.
    let mut tcp = TcpStream::connect(&addr).await.unwrap();
    tcp.write_all(
        b"POST /v1/queries HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
          content-length: 1000\r\n\r\n",
    )
    .await
    .unwrap();
    let (raw, _) = read_until_closed(&mut tcp, CEILING).await;
    assert_eq!(status_and_code(&raw), (408, "body_timeout".into()));
}

#[tokio::test]
async fn silent_sockets_past_the_cap_do_not_lock_out_healthz() {
    // Default (10 s) header timeout: only the cap's eviction can make room here.
    let (_db, party) = party(&["--max-connections", "50"]).await;
    let addr = addr(&party);
    let pid = party.gateway.pid();
    let fds_before = open_descriptors(pid);
    let rss_before = party.gateway.rss_kib().unwrap();
    let mut silent = Vec::new();
    for _ in 0..300 {
        if let Ok(s) = TcpStream::connect(&addr).await {
            silent.push(s);
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let fds = open_descriptors(pid);
    let http = reqwest::Client::builder()
        .timeout(CEILING)
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    for _ in 0..5 {
        let resp = http.get(format!("{}/healthz", party.url)).send().await;
        let status = resp.map(|r| r.status().as_u16()).unwrap_or(0);
        assert_eq!(status, 200, "/healthz with 300 silent sockets open");
    }
    let rss = party.gateway.rss_kib().unwrap();
    println!(
        "300 silent sockets, cap 50: gateway descriptors {fds_before} → {fds}, RSS {rss_before} → {rss} KiB"
    );
    assert!(
        fds < fds_before + 50 + 10,
        "the gateway holds {fds} descriptors (cap 50, {fds_before} before)"
    );
    drop(silent);
}

#[tokio::test]
async fn every_http_error_has_a_json_body() {
    let (_db, party) = party(&[]).await;
    let http = reqwest::Client::new();
    let url = &party.url;
    let check = |status: u16, code: &str, resp: (u16, String)| {
        assert_eq!(resp, (status, code.to_string()));
    };
    async fn send(req: reqwest::RequestBuilder) -> (u16, String) {
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let body: serde_json::Value = resp.json().await.unwrap_or_default();
        (
            status,
            body["error"]["code"]
                .as_str()
                .unwrap_or("<none>")
                .to_string(),
        )
    }
    // 414, 431.
    let long = format!("{url}/v1/queries/{}", "a".repeat(10_000));
    check(414, "uri_too_long", send(http.get(long)).await);
    let big = "b".repeat(40_000);
    check(
        431,
        "headers_too_large",
        send(http.get(format!("{url}/healthz")).header("x-big", big)).await,
    );
    // Malformed ids: 400, never echoed; a path that is not UTF-8 too.
    let resp = http
        .get(format!("{url}/v1/queries/secret-looking-id"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let text = resp.text().await.unwrap();
    assert!(
        text.contains("invalid_id") && !text.contains("secret-looking-id"),
        "{text}"
    );
    check(
        400,
        "invalid_id",
        send(http.get(format!("{url}/v1/queries/%FF%FE/events"))).await,
    );
    // Admin: 413 JSON, and a lower-case scheme is accepted (the body is then judged).
    check(
        413,
        "body_too_large",
        send(
            http.post(format!("{url}/v1/admin/epochs"))
                .bearer_auth(TOKEN)
                .body(vec![0u8; 1024])
                .header("content-length", "999999999999"),
        )
        .await,
    );
    check(
        400,
        "invalid_update",
        send(
            http.post(format!("{url}/v1/admin/epochs"))
                .header("authorization", format!("bearer {TOKEN}"))
                .header("content-type", "application/json")
                .body("{}"),
        )
        .await,
    );
}
