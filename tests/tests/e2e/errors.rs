//! Every validation error: its HTTP status, its stable code, and the key it names.

use std::time::Duration;

use pirq_e2e::{Party, PartyOptions, TestDb};
use pirq_shared::dpf::generate;
use reqwest::header::CONTENT_TYPE;
use serde_json::{json, Value};

const PAGES: u64 = 1000; // domain bits 10, tree depth 3
const N: u8 = 10;

fn key(n: u8) -> Vec<u8> {
    generate(n, 1, &mut rand::rng()).unwrap().0.to_bytes()
}

fn b64(bytes: &[u8]) -> String {
    use base64_engine::encode;
    encode(bytes)
}

/// Minimal standard base64 with padding, so the test does not lean on the code under test.
mod base64_engine {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    pub fn encode(bytes: &[u8]) -> String {
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }
}

struct Answer {
    status: u16,
    body: Value,
    retry_after: Option<String>,
}

impl Answer {
    fn code(&self) -> &str {
        self.body["error"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("no error code in {}", self.body))
    }

    fn key_index(&self) -> Option<u64> {
        self.body["error"]["key_index"].as_u64()
    }

    fn assert(&self, status: u16, code: &str, key_index: Option<u64>, what: &str) {
        assert_eq!(self.status, status, "{what}: status, body {}", self.body);
        assert_eq!(self.code(), code, "{what}: code");
        assert_eq!(
            self.key_index(),
            key_index,
            "{what}: key_index in {}",
            self.body
        );
        let message = self.body["error"]["message"].as_str().unwrap_or("");
        assert!(!message.is_empty(), "{what}: message");
    }
}

async fn send(req: reqwest::RequestBuilder) -> Answer {
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let ct = resp
        .headers()
        .get(CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = resp.bytes().await.unwrap();
    let body: Value =
        serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("not JSON: {bytes:?}"));
    if status >= 400 {
        assert_eq!(ct.as_deref(), Some("application/json"), "errors are JSON");
    }
    Answer {
        status,
        body,
        retry_after,
    }
}

fn post_json(url: &str, body: Value) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .post(format!("{url}/v1/queries"))
        .json(&body)
}

#[tokio::test]
async fn every_validation_error_has_its_status_and_code() {
    let db = TestDb::create(PAGES, 256, 7).unwrap();
    let opts = PartyOptions {
        gateway_args: vec!["--body-limit".into(), "8192".into()],
        ..Default::default()
    };
    let party = Party::start(&db.path, "errors", opts).await.unwrap();
    let url = party.url.as_str();
    let http = reqwest::Client::new();
    let good = key(N);

    // Body-level errors.
    send(
        http.post(format!("{url}/v1/queries"))
            .header(CONTENT_TYPE, "application/json")
            .body("{not json"),
    )
    .await
    .assert(400, "invalid_json", None, "malformed JSON");
    send(post_json(url, json!({"keys": "AQID"}))).await.assert(
        400,
        "invalid_json",
        None,
        "keys not a list",
    );
    send(post_json(url, json!({"keys": [b64(&good)], "extra": 1})))
        .await
        .assert(400, "invalid_json", None, "unknown field");
    send(post_json(url, json!({"keys": [b64(&good), "not base64!"]})))
        .await
        .assert(400, "invalid_base64", Some(1), "bad base64");
    send(post_json(url, json!({"keys": []})))
        .await
        .assert(400, "no_keys", None, "no keys");
    let many: Vec<String> = (0..65).map(|_| b64(&key(N))).collect();
    send(post_json(url, json!({ "keys": many }))).await.assert(
        400,
        "too_many_keys",
        None,
        "65 keys",
    );
    send(
        http.post(format!("{url}/v1/queries"))
            .header(CONTENT_TYPE, "text/plain")
            .body("hello"),
    )
    .await
    .assert(415, "unsupported_media_type", None, "text/plain");
    send(
        http.post(format!("{url}/v1/queries"))
            .header(CONTENT_TYPE, "application/x-bincode")
            .body(vec![0xff, 0xff, 0xff]),
    )
    .await
    .assert(400, "invalid_bincode", None, "garbage bincode");
    let huge = format!(r#"{{"keys":["{}"]}}"#, "A".repeat(20_000));
    send(
        http.post(format!("{url}/v1/queries"))
            .header(CONTENT_TYPE, "application/json")
            .body(huge),
    )
    .await
    .assert(413, "body_too_large", None, "oversized body");

    // Key-level errors name the key: the bad key is at index 1, after a good one.
    let mut version = good.clone();
    version[0] = 2;
    let mut party_byte = good.clone();
    party_byte[1] = 2;
    let mut domain = good.clone();
    domain[2] = 0;
    let mut domain_big = good.clone();
    domain_big[2] = 41;
    let short_len = good[..good.len() - 1].to_vec();
    let mut control = good.clone();
    control[19 + 16] = 0b100;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("key_too_short", vec![1, 0]),
        ("key_version", version),
        ("key_party", party_byte),
        ("key_domain_bits", domain),
        ("key_domain_bits", domain_big),
        ("key_length", short_len),
        ("key_control_byte", control),
        ("key_domain_mismatch", key(N + 1)),
        ("key_domain_mismatch", key(N - 1)),
    ];
    for (code, bad) in &cases {
        let body = json!({"keys": [b64(&good), b64(bad)]});
        send(post_json(url, body))
            .await
            .assert(400, code, Some(1), code);
    }
    // The same through bincode.
    let req = pirq_shared::wire::QueryRequest {
        keys: vec![good.clone(), cases[1].1.clone()],
        epoch: None,
    };
    send(
        http.post(format!("{url}/v1/queries"))
            .header(CONTENT_TYPE, "application/x-bincode")
            .body(req.to_bincode()),
    )
    .await
    .assert(400, "key_version", Some(1), "bincode bad key");

    send(post_json(url, json!({"keys": [b64(&good)], "epoch": 5})))
        .await
        .assert(410, "epoch_unavailable", None, "epoch not served");

    // Ids and parameters.
    send(http.get(format!("{url}/v1/queries/nothex")))
        .await
        .assert(400, "invalid_id", None, "malformed id");
    send(http.get(format!("{url}/v1/queries/{}", "0".repeat(32))))
        .await
        .assert(404, "not_found", None, "unknown id");
    send(http.get(format!("{url}/v1/queries/{}/events", "0".repeat(32))))
        .await
        .assert(404, "not_found", None, "unknown id events");
    let ok = send(post_json(url, json!({"keys": [b64(&good)], "epoch": 0}))).await;
    assert_eq!(ok.status, 202, "{}", ok.body);
    let id = ok.body["id"].as_str().unwrap().to_string();
    send(http.get(format!("{url}/v1/queries/{id}?wait=soon")))
        .await
        .assert(400, "invalid_parameter", None, "wait not a number");
    send(http.get(format!("{url}/v1/queries/{id}?wait=-1")))
        .await
        .assert(400, "invalid_parameter", None, "negative wait");
    send(http.get(format!("{url}/v1/nothing"))).await.assert(
        404,
        "not_found",
        None,
        "unknown route",
    );
    send(http.delete(format!("{url}/v1/queries"))).await.assert(
        405,
        "method_not_allowed",
        None,
        "wrong method",
    );
}

#[tokio::test]
async fn accepted_query_has_location_retry_after_and_a_hex_id() {
    let db = TestDb::create(PAGES, 256, 8).unwrap();
    let party = Party::start(&db.path, "accept", PartyOptions::default())
        .await
        .unwrap();
    let resp = post_json(&party.url, json!({"keys": [b64(&key(N))]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    let location = resp.headers()["location"].to_str().unwrap().to_string();
    assert!(resp.headers().contains_key("retry-after"));
    let body: Value = resp.json().await.unwrap();
    let id = body["id"].as_str().unwrap();
    assert_eq!(body["status"], "queued");
    assert_eq!(id.len(), 32);
    assert!(id
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    assert_eq!(location, format!("/v1/queries/{id}"));
    let done: Value = reqwest::get(format!("{}{location}?wait=10", party.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(done["pages"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn no_database_and_redis_down_are_503() {
    let db = TestDb::create(PAGES, 256, 9).unwrap();
    let opts = PartyOptions {
        no_worker: true,
        ..Default::default()
    };
    let mut party = Party::start(&db.path, "down", opts).await.unwrap();
    let good = key(N);
    let a = send(post_json(&party.url, json!({"keys": [b64(&good)]}))).await;
    a.assert(503, "no_database", None, "no worker ever registered");
    assert!(a.retry_after.is_some(), "503 carries Retry-After");
    send(reqwest::Client::new().get(format!("{}/v1/info", party.url)))
        .await
        .assert(503, "no_database", None, "info");
    send(reqwest::Client::new().get(format!("{}/readyz", party.url)))
        .await
        .assert(503, "no_database", None, "readyz");

    party.redis.proc.kill();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let a = send(post_json(&party.url, json!({"keys": [b64(&good)]}))).await;
    a.assert(503, "redis_unavailable", None, "redis down");
    assert!(a.retry_after.is_some());
    // pirq's words, never the Redis client's or the system's (they name addresses, internals).
    let message = a.body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("redis unavailable:"), "{message}");
    for leak in ["os error", "refused", "127.0.0.1", "broken pipe", "Io"] {
        assert!(!message.contains(leak), "{message}");
    }
    send(reqwest::Client::new().get(format!("{}/v1/queries/{}", party.url, "a".repeat(32))))
        .await
        .assert(503, "redis_unavailable", None, "status with redis down");
    let health = reqwest::get(format!("{}/healthz", party.url))
        .await
        .unwrap();
    assert_eq!(
        health.status().as_u16(),
        200,
        "the process itself is healthy"
    );

    // Redis comes back: the gateway recovers by itself.
    party.redis.restart().await.unwrap();
    party.start_worker().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let a = send(post_json(&party.url, json!({"keys": [b64(&good)]}))).await;
        if a.status == 202 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "gateway did not recover: {}",
            a.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
