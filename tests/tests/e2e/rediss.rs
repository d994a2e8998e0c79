//! Redis over TLS (`rediss://`): gateways and workers reach a `redis-server` that speaks TLS only
//! (`--port 0 --tls-port`), with a private CA (`--redis-ca-cert`), and with a client certificate
//! where Redis asks for one (`--redis-client-cert`/`--redis-client-key`).

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use pirq_client::{Client, Options};
use pirq_e2e::{bin_dir, Party, PartyOptions, Redis, TestCa, TestDb};

#[tokio::test]
async fn parties_over_rediss_answer_queries_with_and_without_client_certificates() {
    let ca = Arc::new(TestCa::new().unwrap());
    let db = TestDb::create(500, 256, 7).unwrap();
    let (a, b) = tokio::try_join!(
        Party::start(
            &db.path,
            "party-a",
            PartyOptions {
                redis_tls: Some(ca.clone()),
                redis_client_auth: true,
                ..PartyOptions::default()
            },
        ),
        Party::start(
            &db.path,
            "party-b",
            PartyOptions {
                redis_tls: Some(ca.clone()),
                ..PartyOptions::default()
            },
        ),
    )
    .unwrap();
    assert!(a.redis.url().starts_with("rediss://"));
    let client = Client::with_options(&a.url, &b.url, Options::default()).unwrap();
    let pages = client.fetch(&[0, 123, 499]).await.unwrap();
    for (page, index) in pages.pages.iter().zip([0, 123, 499]) {
        assert_eq!(page.as_slice(), db.page(index), "page {index}");
    }
    assert_eq!(a.readyz().await.0, 200);
    for party in [&a, &b] {
        let log = party.gateway.log_text();
        assert!(log.contains("rediss://127.0.0.1:"), "{log}");
        assert!(!log.contains("WARN") && !log.contains("ERROR"), "{log}");
    }
}

#[tokio::test]
async fn a_gateway_without_the_client_certificate_is_not_ready_and_says_why() {
    let ca = TestCa::new().unwrap();
    let redis = Redis::start_tls(&ca, true).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = pirq_e2e::free_port();
    let mut cmd = Command::new(bin_dir().join("pirq-gateway"));
    cmd.args([
        "--redis",
        &redis.url(),
        "--listen",
        &format!("127.0.0.1:{port}"),
    ])
    .arg("--redis-ca-cert")
    .arg(ca.ca_cert())
    .env("RUST_LOG", "info");
    let _gateway = pirq_e2e::Proc::spawn("pirq-gateway", cmd, dir.path().join("gw.log")).unwrap();
    let http = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/readyz");
    let mut status = None;
    for _ in 0..100 {
        if let Ok(resp) = http.get(&url).send().await {
            status = Some(resp.status().as_u16());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        status,
        Some(503),
        "Redis refuses a client without a certificate"
    );
}

#[test]
fn tls_files_without_rediss_are_refused_at_start() {
    let out = Command::new(bin_dir().join("pirq-gateway"))
        .args(["--redis", "redis://127.0.0.1:1", "--listen", "127.0.0.1:0"])
        .args(["--redis-ca-cert", "/nonexistent/ca.pem"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("need a rediss:// or rediss+cluster:// URL"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    let out = Command::new(bin_dir().join("pirq-worker"))
        .args([
            "--redis",
            "rediss://127.0.0.1:1",
            "--db",
            "/nonexistent.pirdb",
        ])
        .args(["--redis-ca-cert", "/nonexistent/ca.pem"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/ca.pem"), "{stderr}");
}
