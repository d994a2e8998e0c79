//! Gateways over TLS (`--tls-cert`/`--tls-key`): page lookups by HTTP/2 and HTTP/1.1 (chosen by
//! ALPN), long-poll and SSE over TLS, key-value and page lookups by the `pirq` CLI with
//! `--ca-cert` (and refused without it), the handshake timeout, failed handshakes counted and not
//! logged above debug, and certificate rotation on SIGHUP without dropping open connections.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use pirq_e2e::cli::{arg, pirq, pirq_command, pirq_ok};
use pirq_e2e::{http_client, metrics, Cluster, Party, PartyOptions, TestCa};
use pirq_shared::bits::xor_into;
use pirq_shared::dpf::generate;
use pirq_shared::wire::{QueryRequest, QueryResult, QueryStatus};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PAGES: u64 = 1000;
const PAGE_SIZE: u32 = 256;
/// ceil(log2(1000)).
const DOMAIN_BITS: u8 = 10;

fn tls_options(ca: &Arc<TestCa>, gateway_args: &[&str]) -> PartyOptions {
    PartyOptions {
        tls: Some(ca.clone()),
        gateway_args: gateway_args.iter().map(|s| s.to_string()).collect(),
        ..PartyOptions::default()
    }
}

fn request(key: Vec<u8>) -> Vec<u8> {
    QueryRequest {
        keys: vec![key],
        epoch: None,
    }
    .to_json()
}

/// `POST /v1/queries` with `Prefer: wait=10`: the final result and the HTTP version used.
async fn post_wait(http: &reqwest::Client, url: &str, key: Vec<u8>) -> (QueryResult, String) {
    let resp = http
        .post(format!("{url}/v1/queries"))
        .header("content-type", "application/json")
        .header("prefer", "wait=10")
        .body(request(key))
        .send()
        .await
        .expect("POST over TLS");
    let version = format!("{:?}", resp.version());
    assert_eq!(resp.status(), 200, "answered within the wait");
    let body = resp.bytes().await.unwrap();
    (QueryResult::from_json(&body).unwrap(), version)
}

fn combine(a: &QueryResult, b: &QueryResult) -> Vec<u8> {
    assert_eq!((a.status, b.status), (QueryStatus::Done, QueryStatus::Done));
    let mut page = a.pages[0].clone();
    xor_into(&mut page, &b.pages[0]);
    page
}

#[tokio::test]
async fn pages_over_tls_by_http2_and_http1_long_poll_and_sse() {
    let ca = Arc::new(TestCa::new().unwrap());
    let cluster = Cluster::start(PAGES, PAGE_SIZE, tls_options(&ca, &[]))
        .await
        .unwrap();
    assert!(cluster.a.url.starts_with("https://"), "{}", cluster.a.url);
    let h2 = http_client(Some(&ca)).unwrap();
    let root = reqwest::Certificate::from_pem(&std::fs::read(ca.ca_cert()).unwrap()).unwrap();
    let h1 = reqwest::Client::builder()
        .add_root_certificate(root)
        .http1_only()
        .build()
        .unwrap();
    let mut rng = rand::rng();
    for (index, http, version) in [(3u64, &h2, "HTTP/2.0"), (PAGES - 1, &h1, "HTTP/1.1")] {
        let (k0, k1) = generate(DOMAIN_BITS, index, &mut rng).unwrap();
        let (a, va) = post_wait(http, &cluster.a.url, k0.to_bytes()).await;
        let (b, vb) = post_wait(http, &cluster.b.url, k1.to_bytes()).await;
        assert_eq!((va.as_str(), vb.as_str()), (version, version));
        assert_eq!(combine(&a, &b), cluster.db.page(index), "page {index}");
    }

    // Submitted without waiting, then read by long-poll (HTTP/1.1) and by SSE (HTTP/2).
    let index = 517;
    let (k0, k1) = generate(DOMAIN_BITS, index, &mut rng).unwrap();
    let mut ids = Vec::new();
    for (party, key) in [(&cluster.a, k0), (&cluster.b, k1)] {
        let resp = h2
            .post(format!("{}/v1/queries", party.url))
            .header("content-type", "application/json")
            .body(request(key.to_bytes()))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 202);
        ids.push(resp.json::<QueryResult>().await.unwrap().id);
    }
    let polled = h1
        .get(format!("{}/v1/queries/{}?wait=10", cluster.a.url, ids[0]))
        .send()
        .await
        .unwrap();
    assert_eq!(polled.version(), reqwest::Version::HTTP_11);
    let a = QueryResult::from_json(&polled.bytes().await.unwrap()).unwrap();
    let events = h2
        .get(format!("{}/v1/queries/{}/events", cluster.b.url, ids[1]))
        .send()
        .await
        .unwrap();
    assert_eq!(events.version(), reqwest::Version::HTTP_2);
    assert_eq!(events.headers()["content-type"], "text/event-stream");
    let b = final_sse_result(events).await;
    assert_eq!(combine(&a, &b), cluster.db.page(index));
}

/// Reads an SSE stream until its `result` event; the result it carries.
async fn final_sse_result(events: reqwest::Response) -> QueryResult {
    let mut body = events.bytes_stream();
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let chunk = tokio::time::timeout(Duration::from_secs(20), body.next())
            .await
            .expect("an event within 20 s")
            .expect("the stream goes on")
            .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        for event in text.split("\n\n") {
            if let Some(data) = event.strip_prefix("event: result\ndata: ") {
                return QueryResult::from_json(data.as_bytes()).unwrap();
            }
        }
    }
    panic!("no result event in {text:?}");
}

#[tokio::test]
async fn the_cli_looks_keys_and_pages_up_over_tls_with_ca_cert() {
    let ca = Arc::new(TestCa::new().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let (records, kv) = (
        dir.path().join("records.jsonl"),
        dir.path().join("kv.pirdb"),
    );
    pirq_ok(&[
        "kv",
        "gen",
        "--records",
        "300",
        "--key-size",
        "20",
        "--value-size",
        "32",
        "--seed",
        "23",
        "--out",
        arg(&records),
    ]);
    pirq_ok(&[
        "kv",
        "build",
        "--key-encoding",
        "hex",
        "--value-encoding",
        "hex",
        "--records",
        arg(&records),
        "--key-size",
        "20",
        "--value-size",
        "32",
        "--page-size",
        "512",
        "--out",
        arg(&kv),
    ]);
    let (a, b) = tokio::try_join!(
        Party::start(&kv, "kv-a", tls_options(&ca, &[])),
        Party::start(&kv, "kv-b", tls_options(&ca, &[])),
    )
    .unwrap();
    assert!(a.url.starts_with("https://") && b.url.starts_with("https://"));
    let first: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&records)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let (key, value) = (
        first["key"].as_str().unwrap(),
        first["value"].as_str().unwrap(),
    );
    let absent = "07".repeat(20);
    let ca_cert = arg(ca.ca_cert());
    let parties = ["--party-a", &a.url, "--party-b", &b.url];

    // `pirq get`: the value, then `absent` (exit 1), answered in the POST (Prefer: wait) and by
    // long-polling (--poll).
    for extra in [&[][..], &["--poll"][..]] {
        let mut args = vec!["get", "--ca-cert", ca_cert, "--key", key, "--key", &absent];
        args.extend_from_slice(&parties);
        args.extend_from_slice(extra);
        let out = pirq(&args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            format!("{value}\nabsent\n")
        );
    }

    // `pirq query` of pages, checked against the file, with the CA from PIRQ_CA_CERT too.
    let mut args = vec![
        "query",
        "--index",
        "0",
        "--index",
        "5",
        "--verify",
        arg(&kv),
    ];
    args.extend_from_slice(&parties);
    args.extend_from_slice(&["--ca-cert", ca_cert]);
    pirq_ok(&args);
    let by_env = pirq_command(&args[..args.len() - 2])
        .args(["--poll", "--bincode"])
        .env("PIRQ_CA_CERT", ca_cert)
        .output()
        .unwrap();
    assert!(
        by_env.status.success(),
        "{}",
        String::from_utf8_lossy(&by_env.stderr)
    );

    // Without the CA the certificate is not trusted: refused, nothing printed.
    let mut args = vec!["get", "--key", key, "--timeout", "10"];
    args.extend_from_slice(&parties);
    let out = pirq(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert!(!out.status.success() && out.stdout.is_empty(), "{stderr}");
    assert!(stderr.contains("certificate"), "{stderr}");
}

/// A TLS connection to `party` that trusts `ca`: the stream and the certificate it was shown.
async fn connect(
    party: &Party,
    ca: &TestCa,
) -> (
    tokio_rustls::client::TlsStream<TcpStream>,
    CertificateDer<'static>,
) {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca.ca_cert()).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let addr = party.url.trim_start_matches("https://");
    let tcp = TcpStream::connect(addr).await.unwrap();
    let stream = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("TLS handshake");
    let cert = stream.get_ref().1.peer_certificates().unwrap()[0].clone();
    (stream, cert)
}

/// One keep-alive `GET /healthz` on an open HTTP/1.1 connection; its status line.
async fn healthz_on(stream: &mut tokio_rustls::client::TlsStream<TcpStream>) -> String {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("an answer")
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]).to_string();
    text.lines().next().unwrap_or("").to_string()
}

fn leaf_der(path: &std::path::Path) -> CertificateDer<'static> {
    CertificateDer::pem_file_iter(path)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn sighup_rotates_the_certificate_without_dropping_open_connections() {
    let ca = Arc::new(TestCa::new().unwrap());
    let db = pirq_e2e::TestDb::create(16, 256, 1).unwrap();
    let party = Party::start(&db.path, "rot", tls_options(&ca, &[]))
        .await
        .unwrap();
    let files = party.tls.clone().unwrap();
    let (mut open, first) = connect(&party, &ca).await;
    assert_eq!(first, leaf_der(&files.cert));
    assert_eq!(healthz_on(&mut open).await, "HTTP/1.1 200 OK");

    // A broken key file: SIGHUP keeps the certificate in use (and says so).
    let next = ca.issue("rotated").unwrap();
    std::fs::write(&files.key, "not a key").unwrap();
    party.gateway.hangup();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, still) = connect(&party, &ca).await;
    assert_eq!(still, first);

    // The new pair in place: new connections get it, the open one still answers.
    std::fs::copy(&next.cert, &files.cert).unwrap();
    std::fs::copy(&next.key, &files.key).unwrap();
    party.gateway.hangup();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, shown) = connect(&party, &ca).await;
        if shown == leaf_der(&next.cert) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate was not served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(healthz_on(&mut open).await, "HTTP/1.1 200 OK");
    let log = party.gateway.log_text();
    assert!(
        log.contains("SIGHUP: kept the TLS certificate in use"),
        "{log}"
    );
    assert!(log.contains("SIGHUP: reloaded TLS certificate"), "{log}");
}

#[tokio::test]
async fn failed_and_silent_handshakes_are_counted_closed_and_not_logged() {
    let ca = Arc::new(TestCa::new().unwrap());
    let db = pirq_e2e::TestDb::create(16, 256, 1).unwrap();
    let party = Party::start(
        &db.path,
        "hs",
        tls_options(&ca, &["--header-timeout-ms", "500"]),
    )
    .await
    .unwrap();
    let addr = party.url.trim_start_matches("https://").to_string();

    // Plain HTTP sent to the TLS port: no HTTP answer, the connection ends.
    let mut plain = TcpStream::connect(&addr).await.unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut buf))
        .await
        .expect("closed");
    assert!(!String::from_utf8_lossy(&buf).contains("200 OK"));

    // A client that connects and says nothing is closed after the header timeout.
    let started = Instant::now();
    let mut silent = TcpStream::connect(&addr).await.unwrap();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut byte))
        .await
        .expect("closed within 5 s");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(started.elapsed() >= Duration::from_millis(400));

    // A client that does not trust the certificate (no CA): its handshake fails.
    let untrusting = reqwest::Client::new();
    assert!(untrusting
        .get(format!("{}/healthz", party.url))
        .send()
        .await
        .is_err());

    // The server sees the last failure a moment after the client gave up.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let failures = handshake_failures(&party).await;
        if failures >= 3 {
            break;
        }
        assert!(Instant::now() < deadline, "{failures} failures counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = party.gateway.log_text();
    assert!(
        !log.contains("WARN") && !log.contains("ERROR") && !log.contains("handshake"),
        "{log}"
    );
}

/// `pirq_gateway_tls_handshake_failures_total` from the party's `/metrics`.
async fn handshake_failures(party: &Party) -> u64 {
    let text = metrics::scrape(&party.http, &party.url).await;
    metrics::value(&text, "pirq_gateway_tls_handshake_failures_total").expect("the counter") as u64
}
