//! A fuzz run over `POST /v1/queries` bodies against a real gateway (issue 7): malformed JSON,
//! base64, bincode and keys, huge and empty bodies, wrong content types and idempotency keys.
//!
//! Oracle: the shared parsers decide whether an input is a valid query; a valid one must get
//! 202, every other one a 4xx with a JSON error body; nothing may get a 5xx or a dropped
//! connection, the gateway must stay up, and its resident memory must stay bounded. The count of
//! inputs and the answers by status are printed:
//! `cargo test -p pirq-e2e --test fuzz_http -- --nocapture` (`PIRQ_FUZZ_INPUTS`, `PIRQ_FUZZ_SEED`
//! change the run).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use futures::StreamExt;
use pirq_e2e::{Party, PartyOptions, TestDb};
use pirq_shared::dpf::{generate, DpfKey};
use pirq_shared::wire::QueryRequest;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const DOMAIN_BITS: u8 = 10;
const BODY_LIMIT: usize = 1 << 20;
const MAX_KEYS: usize = 64;

/// `(status, body)`, or why nothing was answered.
type Answer = Result<(u16, Vec<u8>), String>;

/// One HTTP input.
#[derive(Clone, Debug)]
struct Input {
    kind: &'static str,
    content_type: Option<String>,
    idempotency_key: Option<String>,
    body: Vec<u8>,
}

/// Whether the gateway must accept this input, by the shared parsers (the reference).
fn valid(input: &Input) -> bool {
    if input.body.len() > BODY_LIMIT {
        return false;
    }
    if let Some(k) = &input.idempotency_key {
        let inner = k
            .strip_prefix('"')
            .and_then(|k| k.strip_suffix('"'))
            .unwrap_or(k);
        let ok = !inner.is_empty()
            && inner.len() <= 255
            && !(k.starts_with('"') ^ (k.ends_with('"') && k.len() >= 2))
            && inner
                .bytes()
                .all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\');
        if !ok {
            return false;
        }
    }
    let media = input.content_type.as_deref().map(|c| {
        c.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    });
    let request = match media.as_deref() {
        None | Some("application/json") => QueryRequest::from_json(&input.body),
        Some("application/x-bincode") => QueryRequest::from_bincode(&input.body),
        Some(_) => return false,
    };
    let Ok(request) = request else { return false };
    if request.keys.is_empty() || request.keys.len() > MAX_KEYS {
        return false;
    }
    let keys_ok = request
        .keys
        .iter()
        .all(|k| DpfKey::parse(k).is_ok_and(|k| k.domain_bits() == DOMAIN_BITS));
    keys_ok && request.epoch.is_none_or(|e| e == 0)
}

fn json_body(keys: &[Vec<u8>], epoch: Option<&str>) -> Vec<u8> {
    let keys: Vec<String> = keys
        .iter()
        .map(|k| format!("\"{}\"", B64.encode(k)))
        .collect();
    let mut s = format!("{{\"keys\":[{}]", keys.join(","));
    if let Some(e) = epoch {
        s.push_str(&format!(",\"epoch\":{e}"));
    }
    s.push('}');
    s.into_bytes()
}

fn mutate(rng: &mut StdRng, mut bytes: Vec<u8>) -> Vec<u8> {
    for _ in 0..rng.random_range(1..=4) {
        let len = bytes.len();
        match rng.random_range(0..5) {
            0 if len > 0 => {
                let i = rng.random_range(0..len);
                bytes[i] ^= 1 << rng.random_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.random_range(0..len);
                bytes[i] = rng.random();
            }
            2 if len > 0 => {
                bytes.truncate(rng.random_range(0..len));
            }
            3 => {
                let i = rng.random_range(0..=len);
                let extra: Vec<u8> = (0..rng.random_range(1..8)).map(|_| rng.random()).collect();
                bytes.splice(i..i, extra);
            }
            _ if len > 1 => {
                let i = rng.random_range(0..len);
                bytes.remove(i);
            }
            _ => bytes.push(rng.random()),
        }
    }
    bytes
}

fn inputs(seed: u64, count: usize) -> Vec<Input> {
    let mut rng = StdRng::seed_from_u64(seed);
    let key = |rng: &mut StdRng| {
        generate(DOMAIN_BITS, rng.random_range(0..1000), &mut rand::rng())
            .unwrap()
            .0
            .to_bytes()
    };
    let json = Some("application/json".to_string());
    let bincode = Some("application/x-bincode".to_string());
    let mut out = Vec::with_capacity(count);
    let fixed: Vec<(&'static str, Option<String>, Vec<u8>)> = vec![
        ("empty body", None, vec![]),
        ("empty body, bincode", bincode.clone(), vec![]),
        ("json null", json.clone(), b"null".to_vec()),
        ("json array", json.clone(), b"[]".to_vec()),
        ("json empty object", json.clone(), b"{}".to_vec()),
        ("keys null", json.clone(), br#"{"keys":null}"#.to_vec()),
        ("keys numbers", json.clone(), br#"{"keys":[1,2]}"#.to_vec()),
        (
            "keys not base64",
            json.clone(),
            br#"{"keys":["@@@@"]}"#.to_vec(),
        ),
        (
            "keys bad padding",
            json.clone(),
            br#"{"keys":["AAA"]}"#.to_vec(),
        ),
        ("keys empty", json.clone(), br#"{"keys":[]}"#.to_vec()),
        (
            "unknown field",
            json.clone(),
            br#"{"keys":["AAAA"],"x":1}"#.to_vec(),
        ),
        (
            "epoch negative",
            json.clone(),
            json_body(&[key(&mut rng)], Some("-1")),
        ),
        (
            "epoch huge",
            json.clone(),
            json_body(&[key(&mut rng)], Some("1e999")),
        ),
        (
            "epoch string",
            json.clone(),
            json_body(&[key(&mut rng)], Some("\"0\"")),
        ),
        (
            "epoch u64 max",
            json.clone(),
            json_body(&[key(&mut rng)], Some("18446744073709551615")),
        ),
        (
            "epoch 0",
            json.clone(),
            json_body(&[key(&mut rng)], Some("0")),
        ),
        ("deep nesting", json.clone(), {
            let mut v = b"{\"keys\":".to_vec();
            v.extend(std::iter::repeat_n(b'[', 100_000));
            v
        }),
        ("BOM", json.clone(), {
            let mut v = vec![0xef, 0xbb, 0xbf];
            v.extend(json_body(&[key(&mut rng)], None));
            v
        }),
        (
            "65 keys",
            json.clone(),
            json_body(&vec![key(&mut rng); 65], None),
        ),
        (
            "64 keys",
            json.clone(),
            json_body(&vec![key(&mut rng); 64], None),
        ),
        ("body at the limit", json.clone(), {
            let mut v = json_body(&[key(&mut rng)], None);
            v.resize(BODY_LIMIT, b' ');
            v
        }),
        (
            "body over the limit",
            json.clone(),
            vec![b' '; BODY_LIMIT + 1],
        ),
        ("8 MiB body", bincode.clone(), vec![0xfd; 8 << 20]),
        ("bincode huge length", bincode.clone(), {
            let mut v = vec![253];
            v.extend(u64::MAX.to_le_bytes());
            v
        }),
        ("bincode huge key length", bincode.clone(), {
            let mut v = vec![1, 253];
            v.extend((u64::MAX / 2).to_le_bytes());
            v
        }),
        ("bincode trailing byte", bincode.clone(), {
            let mut v = QueryRequest {
                keys: vec![key(&mut rng)],
                epoch: None,
            }
            .to_bincode();
            v.push(0);
            v
        }),
        (
            "text/plain",
            Some("text/plain".into()),
            json_body(&[key(&mut rng)], None),
        ),
        (
            "JSON upper case",
            Some("Application/JSON; charset=utf-8".into()),
            json_body(&[key(&mut rng)], None),
        ),
        (
            "multipart",
            Some("multipart/form-data; boundary=x".into()),
            b"--x--".to_vec(),
        ),
        (
            "content type garbage",
            Some(";;=;,".into()),
            json_body(&[key(&mut rng)], None),
        ),
    ];
    for (kind, content_type, body) in fixed {
        out.push(Input {
            kind,
            content_type,
            idempotency_key: None,
            body,
        });
    }
    while out.len() < count {
        let n = rng.random_range(1..=3);
        let keys: Vec<Vec<u8>> = (0..n).map(|_| key(&mut rng)).collect();
        let request = QueryRequest {
            keys: keys.clone(),
            epoch: None,
        };
        let input = match rng.random_range(0..9) {
            0 => Input {
                kind: "valid json",
                content_type: if rng.random() { json.clone() } else { None },
                idempotency_key: None,
                body: request.to_json(),
            },
            1 => Input {
                kind: "mutated json",
                content_type: json.clone(),
                idempotency_key: None,
                body: mutate(&mut rng, request.to_json()),
            },
            2 => Input {
                kind: "mutated bincode",
                content_type: bincode.clone(),
                idempotency_key: None,
                body: mutate(&mut rng, request.to_bincode()),
            },
            3 | 4 => {
                // Keys corrupted before encoding: valid JSON/bincode, bad key bytes.
                let keys: Vec<Vec<u8>> = keys.into_iter().map(|k| mutate(&mut rng, k)).collect();
                let r = QueryRequest { keys, epoch: None };
                let bin = rng.random();
                Input {
                    kind: "mutated key",
                    content_type: if bin { bincode.clone() } else { json.clone() },
                    idempotency_key: None,
                    body: if bin { r.to_bincode() } else { r.to_json() },
                }
            }
            5 => {
                // Base64 text corrupted inside valid JSON.
                let text = B64.encode(&keys[0]);
                let corrupted = mutate(&mut rng, text.into_bytes());
                let mut body = b"{\"keys\":[\"".to_vec();
                body.extend(
                    corrupted
                        .iter()
                        .filter(|b| **b != b'"' && **b != b'\\' && **b >= 0x20),
                );
                body.extend(b"\"]}");
                Input {
                    kind: "mutated base64",
                    content_type: json.clone(),
                    idempotency_key: None,
                    body,
                }
            }
            6 => {
                let len = rng.random_range(0..4096);
                let bin = rng.random();
                Input {
                    kind: "random bytes",
                    content_type: if bin { bincode.clone() } else { json.clone() },
                    idempotency_key: None,
                    body: (0..len).map(|_| rng.random()).collect(),
                }
            }
            7 => {
                let kinds = [
                    "text/html",
                    "application/octet-stream",
                    "application/jsonx",
                    "",
                    "*/*",
                ];
                Input {
                    kind: "wrong content type",
                    content_type: Some(kinds[rng.random_range(0..kinds.len())].to_string()),
                    idempotency_key: None,
                    body: request.to_json(),
                }
            }
            _ => {
                let keys = [
                    format!("{:032x}", rng.random::<u128>()),
                    String::new(),
                    "\"".into(),
                    "\"\"".into(),
                    "a b".into(),
                    "x".repeat(256),
                    format!("\"{:032x}\"", rng.random::<u128>()),
                ];
                Input {
                    kind: "idempotency key",
                    content_type: json.clone(),
                    idempotency_key: Some(keys[rng.random_range(0..keys.len())].clone()),
                    body: request.to_json(),
                }
            }
        };
        out.push(input);
    }
    out
}

#[tokio::test]
async fn fuzzed_bodies_get_only_4xx_and_bounded_memory() {
    let count: usize = std::env::var("PIRQ_FUZZ_INPUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000);
    let seed: u64 = std::env::var("PIRQ_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    let db = TestDb::create(1 << DOMAIN_BITS, 256, 9).unwrap();
    let mut party = Party::start(&db.path, "fuzz", PartyOptions::default())
        .await
        .unwrap();
    // The database stays registered; valid inputs just queue (no scanning during the run).
    party.stop_workers();
    let inputs = inputs(seed, count);
    let rss_before = party.gateway.rss_kib().unwrap();
    let http = reqwest::Client::new();
    let url = party.url.clone();
    let start = Instant::now();
    let answers: Vec<(Input, Answer)> = futures::stream::iter(inputs)
        .map(|input| {
            let (http, url) = (http.clone(), url.clone());
            async move {
                let mut req = http
                    .post(format!("{url}/v1/queries"))
                    .body(input.body.clone());
                if let Some(ct) = &input.content_type {
                    req = req.header("content-type", ct);
                }
                if let Some(k) = &input.idempotency_key {
                    req = req.header("idempotency-key", k);
                }
                let answer = match req.timeout(Duration::from_secs(20)).send().await {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        Ok((
                            status,
                            r.bytes().await.map(|b| b.to_vec()).unwrap_or_default(),
                        ))
                    }
                    Err(e) => Err(e.to_string()),
                };
                (input, answer)
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let took = start.elapsed();
    let rss_after = party.gateway.rss_kib().unwrap_or(0);

    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    let mut wrong = Vec::new();
    for (input, answer) in &answers {
        let expect_valid = valid(input);
        match answer {
            Ok((status, body)) => {
                *by_status.entry(status.to_string()).or_default() += 1;
                let ok = if expect_valid {
                    *status == 202
                } else {
                    (400..500).contains(status)
                        && serde_json::from_slice::<serde_json::Value>(body)
                            .is_ok_and(|v| v["error"]["code"].is_string())
                };
                if !ok {
                    wrong.push(format!(
                        "{} (valid: {expect_valid}, {} bytes): {status} {}",
                        input.kind,
                        input.body.len(),
                        String::from_utf8_lossy(&body[..body.len().min(200)])
                    ));
                }
            }
            Err(e) => {
                // 413 bodies may be cut off while still being sent; anything else is a failure.
                if input.body.len() > BODY_LIMIT {
                    *by_status
                        .entry("413 (connection closed)".into())
                        .or_default() += 1;
                } else {
                    wrong.push(format!("{}: no answer: {e}", input.kind));
                }
            }
        }
    }
    println!(
        "fuzz (seed {seed}): {} inputs in {took:.1?}, answers by status {by_status:?}; gateway \
         RSS {} KiB before, {} KiB after",
        answers.len(),
        rss_before,
        rss_after
    );
    assert!(
        wrong.is_empty(),
        "{} wrong answers:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert!(party.gateway.is_running(), "the gateway died");
    let health = reqwest::get(format!("{url}/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);
    assert!(
        rss_after < rss_before + 64 * 1024,
        "gateway memory grew from {rss_before} KiB to {rss_after} KiB"
    );
}
