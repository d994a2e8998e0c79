//! `--admin-listen`: the admin routes and `/metrics` answer only on the admin address (plain or,
//! with `--admin-tls`, HTTPS) and 404 on the public one, where `/v1/*`, `/healthz` and `/readyz`
//! stay; `pirq epoch push` works against the admin address. Without the flag everything is on
//! one port, and the log says so once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pirq_e2e::cli::{arg, pirq_command};
use pirq_e2e::{free_port, Party, PartyOptions, TestCa, TestDb};
use pirq_shared::update::{EpochUpdate, PageWrite};

const TOKEN: &str = "admin-split-token";

async fn status(http: &reqwest::Client, method: &str, url: &str) -> u16 {
    let req = match method {
        "POST" => http
            .post(url)
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body("{}"),
        _ => http.get(url),
    };
    req.send().await.expect(url).status().as_u16()
}

fn push(party_url: &str, update: &std::path::Path) -> std::process::Output {
    pirq_command(&["epoch", "push", "--party", party_url, "--from", arg(update)])
        .env("PIRQ_ADMIN_TOKEN", TOKEN)
        .output()
        .expect("running pirq")
}

#[tokio::test]
async fn admin_routes_and_metrics_answer_only_on_the_admin_address() {
    let db = TestDb::create(64, 256, 3).unwrap();
    let admin_port = free_port();
    let admin = format!("http://127.0.0.1:{admin_port}");
    let party = Party::start(
        &db.path,
        "split",
        PartyOptions {
            gateway_args: vec![
                "--admin-token".into(),
                TOKEN.into(),
                "--admin-listen".into(),
                format!("127.0.0.1:{admin_port}"),
            ],
            ..PartyOptions::default()
        },
    )
    .await
    .unwrap();
    let http = &party.http;
    let public = &party.url;
    // Public: the query API and the probes; no admin route, no metrics.
    assert_eq!(status(http, "GET", &format!("{public}/v1/info")).await, 200);
    assert_eq!(status(http, "GET", &format!("{public}/healthz")).await, 200);
    assert_eq!(status(http, "GET", &format!("{public}/metrics")).await, 404);
    assert_eq!(
        status(http, "POST", &format!("{public}/v1/admin/epochs")).await,
        404
    );
    // Admin: metrics, the admin route (a bad body is its own error, not 404), the probes; no
    // query API.
    assert_eq!(status(http, "GET", &format!("{admin}/metrics")).await, 200);
    assert_eq!(status(http, "GET", &format!("{admin}/healthz")).await, 200);
    assert_eq!(status(http, "GET", &format!("{admin}/v1/info")).await, 404);
    assert_ne!(
        status(http, "POST", &format!("{admin}/v1/admin/epochs")).await,
        404
    );

    // `pirq epoch push` against the admin address appends the epoch; against the public one it
    // is refused.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("update.json");
    let update = EpochUpdate {
        epoch: 1,
        pages: vec![PageWrite {
            index: 5,
            page: vec![7u8; 256],
        }],
    };
    std::fs::write(&file, update.to_json()).unwrap();
    let refused = push(public, &file);
    assert!(!refused.status.success());
    let out = push(&admin, &file);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while party.info().await["epoch"]["newest"] != 1 {
        assert!(Instant::now() < deadline, "epoch 1 not applied");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = party.gateway.log_text();
    assert!(log.contains("admin routes and /metrics listening"), "{log}");
    assert!(!log.contains("on the public listener"), "{log}");
}

#[tokio::test]
async fn admin_tls_serves_the_admin_address_over_https_and_one_port_is_noted_once() {
    let ca = Arc::new(TestCa::new().unwrap());
    let db = TestDb::create(16, 256, 4).unwrap();
    let admin_port = free_port();
    let party = Party::start(
        &db.path,
        "admintls",
        PartyOptions {
            tls: Some(ca.clone()),
            gateway_args: vec![
                "--admin-listen".into(),
                format!("127.0.0.1:{admin_port}"),
                "--admin-tls".into(),
            ],
            no_worker: true,
            ..PartyOptions::default()
        },
    )
    .await
    .unwrap();
    let admin = format!("https://127.0.0.1:{admin_port}");
    assert_eq!(
        status(&party.http, "GET", &format!("{admin}/metrics")).await,
        200
    );
    assert_eq!(
        status(&party.http, "GET", &format!("{}/metrics", party.url)).await,
        404
    );

    // Without --admin-listen: one port, and one INFO line that says so.
    let single = Party::start(
        &db.path,
        "single",
        PartyOptions {
            no_worker: true,
            ..PartyOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        status(&single.http, "GET", &format!("{}/metrics", single.url)).await,
        200
    );
    let log = single.gateway.log_text();
    assert_eq!(
        log.matches("are on the public listener").count(),
        1,
        "{log}"
    );
    assert!(!log.contains("WARN"), "{log}");
}
