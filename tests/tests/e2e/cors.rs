//! `--cors-origin`: a real gateway answers browser preflights for the origins it names, only
//! those, puts the headers on error answers too, and sends none without the flag.

use std::process::Command;

use pirq_e2e::{bin_dir, Party, PartyOptions, TestDb};
use reqwest::{Client, Method, Response};

const APP: &str = "http://app.example:3000";

async fn preflight(client: &Client, url: &str, origin: &str) -> Response {
    client
        .request(Method::OPTIONS, format!("{url}/v1/queries"))
        .header("Origin", origin)
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "content-type,idempotency-key",
        )
        .send()
        .await
        .unwrap()
}

/// `GET /v1/info` as a page of `origin` asks for it.
async fn info_from(client: &Client, url: &str, origin: &str) -> Response {
    client
        .get(format!("{url}/v1/info"))
        .header("Origin", origin)
        .send()
        .await
        .unwrap()
}

fn header(response: &Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_ascii_lowercase())
}

#[tokio::test]
async fn named_origins_only() {
    let db = TestDb::create(16, 256, 1).unwrap();
    let options = PartyOptions {
        gateway_args: vec![
            "--cors-origin".into(),
            format!("https://other.example,{APP}"),
        ],
        no_worker: true,
        ..Default::default()
    };
    let party = Party::start(&db.path, "cors", options).await.unwrap();
    let client = Client::new();

    let ok = preflight(&client, &party.url, APP).await;
    assert!(ok.status().is_success(), "preflight: {}", ok.status());
    assert_eq!(
        header(&ok, "access-control-allow-origin").as_deref(),
        Some(APP)
    );
    let allowed = header(&ok, "access-control-allow-headers").unwrap();
    assert!(allowed.contains("idempotency-key") && allowed.contains("content-type"));
    // Query tokens (`--query-tokens`) travel in Authorization.
    assert!(allowed.contains("authorization"), "{allowed}");
    assert!(header(&ok, "access-control-allow-methods")
        .unwrap()
        .contains("post"));

    let other = preflight(&client, &party.url, "http://evil.example").await;
    assert_eq!(header(&other, "access-control-allow-origin"), None);

    // An error answer (no worker registered a database yet) carries the headers, so a page can
    // read its code; Retry-After is exposed to scripts.
    let info = info_from(&client, &party.url, APP).await;
    assert_eq!(info.status(), 503);
    assert_eq!(
        header(&info, "access-control-allow-origin").as_deref(),
        Some(APP)
    );
    assert!(header(&info, "access-control-expose-headers")
        .unwrap()
        .contains("retry-after"));
}

#[tokio::test]
async fn off_by_default() {
    let db = TestDb::create(16, 256, 1).unwrap();
    let options = PartyOptions {
        no_worker: true,
        ..Default::default()
    };
    let party = Party::start(&db.path, "nocors", options).await.unwrap();
    let client = Client::new();
    let response = preflight(&client, &party.url, APP).await;
    assert!(!response.status().is_success());
    assert_eq!(header(&response, "access-control-allow-origin"), None);
    let info = info_from(&client, &party.url, APP).await;
    assert_eq!(header(&info, "access-control-allow-origin"), None);
}

#[test]
fn a_malformed_origin_stops_the_gateway_at_start() {
    let out = Command::new(bin_dir().join("pirq-gateway"))
        .args(["--cors-origin", "https://app.example/"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("without a path"), "{stderr}");
}
