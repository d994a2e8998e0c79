//! Access control (`--query-tokens`, `--token-rate`, `--ip-rate`) on real gateways: two parties of
//! two operators, each with its own tokens; `pirq query --token-a/--token-b` as a real process;
//! result reads (status, long-poll, SSE) guarded like submits and `/v1/info` open; 429
//! `rate_limited` with `Retry-After` per token and per client address; the tokens re-read on
//! SIGHUP; refusals counted; no token in any log.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use pirq_e2e::cli::pirq_command;
use pirq_e2e::{bin_dir, metrics, Party, PartyOptions, TestDb};

const PAGES: u64 = 200;
const PAGE_SIZE: u32 = 256;
const TOKEN_A: &str = "tok-a-7f3e91c2";
const TOKEN_B: &str = "tok-b-52d0aa18";
/// Party A's token after the SIGHUP reload.
const TOKEN_A2: &str = "tok-a-rotated-0c4b";

fn options(tokens: &Path, extra: &[&str]) -> PartyOptions {
    let mut gateway_args = vec!["--query-tokens".to_string(), tokens.display().to_string()];
    gateway_args.extend(extra.iter().map(|s| s.to_string()));
    PartyOptions {
        gateway_args,
        ..PartyOptions::default()
    }
}

/// `pirq query --index INDEX --out -` against the two parties, with `extra` flags.
fn pirq_query(a: &Party, b: &Party, index: u64, extra: &[&str]) -> Output {
    pirq_command(&["query", "--party-a", &a.url, "--party-b", &b.url])
        .args([
            "--index",
            &index.to_string(),
            "--out",
            "-",
            "--timeout",
            "30",
        ])
        .args(extra)
        .output()
        .expect("running pirq")
}

/// A POST whose body is not a query: the access rules answer before the body is read, and past
/// them the gateway answers 400. Status, `Retry-After`, error code.
async fn bad_post(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
) -> (u16, Option<u64>, String) {
    let mut req = http
        .post(format!("{url}/v1/queries"))
        .header("content-type", "application/json")
        .body("{}");
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let body: serde_json::Value = resp.json().await.unwrap_or_default();
    let code = body["error"]["code"].as_str().unwrap_or("").to_string();
    (status, retry, code)
}

/// `GET url` with an optional token: status and the `WWW-Authenticate` header.
async fn get(http: &reqwest::Client, url: &str, token: Option<&str>) -> (u16, Option<String>) {
    let mut req = http.get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let www = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    (resp.status().as_u16(), www)
}

/// `pirq_gateway_access_refusals_total{reason}` from a party's `/metrics`.
async fn refusals(party: &Party, reason: &str) -> u64 {
    let text = metrics::scrape(&party.http, &party.url).await;
    let series = format!("pirq_gateway_access_refusals_total{{reason=\"{reason}\"}}");
    metrics::value(&text, &series).unwrap_or_else(|| panic!("no {series} in /metrics")) as u64
}

#[tokio::test]
async fn query_tokens_guard_queries_and_result_reads_and_reload_on_sighup() {
    let db = TestDb::create(PAGES, PAGE_SIZE, 23).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (tokens_a, tokens_b) = (dir.path().join("a.tokens"), dir.path().join("b.tokens"));
    std::fs::write(&tokens_a, format!("# party A's clients\n{TOKEN_A}\n")).unwrap();
    std::fs::write(&tokens_b, format!("{TOKEN_B}\n")).unwrap();
    let (a, b) = tokio::try_join!(
        Party::start(
            &db.path,
            "party-a",
            options(&tokens_a, &["--token-rate", "2"])
        ),
        Party::start(&db.path, "party-b", options(&tokens_b, &[])),
    )
    .unwrap();
    let http = &a.http;

    // The CLI: each party's own token fetches the page; none, or the two swapped, are refused
    // with the party's 401, and the token is not echoed.
    let ok = pirq_query(&a, &b, 42, &["--token-a", TOKEN_A, "--token-b", TOKEN_B]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(ok.stdout, db.page(42));
    for extra in [
        &[][..],
        &["--token-a", TOKEN_A][..],
        &["--token-a", TOKEN_B, "--token-b", TOKEN_A][..],
    ] {
        let refused = pirq_query(&a, &b, 42, extra);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{extra:?} was let in");
        assert!(stderr.contains("unauthorized"), "{extra:?}: {stderr}");
        assert!(
            !stderr.contains(TOKEN_A) && !stderr.contains(TOKEN_B),
            "{stderr}"
        );
    }

    // Open: what the party serves, and the probes.
    assert_eq!(get(http, &format!("{}/v1/info", a.url), None).await.0, 200);
    assert_eq!(get(http, &format!("{}/readyz", a.url), None).await.0, 200);

    // Result reads need the token too: status, long-poll, events.
    let key = pirq_shared::dpf::generate(8, 9, &mut rand::rng())
        .unwrap()
        .0;
    let accepted = http
        .post(format!("{}/v1/queries", a.url))
        .bearer_auth(TOKEN_A)
        .header("content-type", "application/json")
        .body(
            pirq_shared::wire::QueryRequest {
                keys: vec![key.to_bytes()],
                epoch: None,
            }
            .to_json(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 202);
    let id = accepted
        .json::<pirq_shared::wire::QueryResult>()
        .await
        .unwrap()
        .id;
    let result = format!("{}/v1/queries/{id}", a.url);
    for url in [
        result.clone(),
        format!("{result}?wait=5"),
        format!("{result}/events"),
    ] {
        for wrong in [None, Some(TOKEN_B)] {
            let (status, www) = get(http, &url, wrong).await;
            assert_eq!(status, 401, "{url} with {wrong:?}");
            assert_eq!(www.as_deref(), Some("Bearer"));
        }
    }
    assert_eq!(
        get(http, &format!("{result}?wait=10"), Some(TOKEN_A))
            .await
            .0,
        200
    );
    let events = http
        .get(format!("{result}/events"))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    assert_eq!(events.headers()["content-type"], "text/event-stream");
    drop(events);

    // --token-rate 2: bursts of 4, then 429 rate_limited with Retry-After. Party B has no rate.
    let mut limited = None;
    for sent in 1..=20 {
        let (status, retry, code) = bad_post(http, &a.url, Some(TOKEN_A)).await;
        if status == 429 {
            limited = Some((sent, retry, code));
            break;
        }
        assert_eq!(status, 400, "the body is checked once past the rules");
    }
    let (sent, retry, code) = limited.expect("no 429 in 20 quick submits at --token-rate 2");
    assert!(sent <= 8, "429 only after {sent} submits");
    assert_eq!(code, "rate_limited");
    assert!(retry.is_some_and(|s| s >= 1), "Retry-After {retry:?}");
    for _ in 0..10 {
        assert_eq!(bad_post(http, &b.url, Some(TOKEN_B)).await.0, 400);
    }
    // Reads are not metered: a status read of the limited token still answers.
    assert_eq!(get(http, &result, Some(TOKEN_A)).await.0, 200);
    assert!(refusals(&a, "unauthorized").await >= 6);
    assert!(refusals(&a, "token_rate").await >= 1);
    assert_eq!(refusals(&b, "token_rate").await, 0);

    // SIGHUP re-reads the file: the new token in, the old one out.
    std::fs::write(&tokens_a, format!("{TOKEN_A2}\n")).unwrap();
    a.gateway.hangup();
    let deadline = Instant::now() + Duration::from_secs(5);
    while bad_post(http, &a.url, Some(TOKEN_A2)).await.0 == 401 {
        assert!(Instant::now() < deadline, "the new token was not taken");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(bad_post(http, &a.url, Some(TOKEN_A)).await.0, 401);
    let ok = pirq_query(&a, &b, 199, &["--token-a", TOKEN_A2, "--token-b", TOKEN_B]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(ok.stdout, db.page(199));

    for party in [&a, &b] {
        let log = party.gateway.log_text();
        for token in [TOKEN_A, TOKEN_A2, TOKEN_B] {
            assert!(!log.contains(token), "a token in the log:\n{log}");
        }
        assert!(!log.contains("WARN") && !log.contains("ERROR"), "{log}");
        assert!(log.contains("query tokens loaded"), "{log}");
    }
    assert!(
        a.gateway
            .log_text()
            .contains("SIGHUP: reloaded query tokens"),
        "{}",
        a.gateway.log_text()
    );
}

#[tokio::test]
async fn ip_rate_bounds_each_client_address_and_bad_flags_are_refused() {
    let db = TestDb::create(16, 256, 5).unwrap();
    let party = Party::start(
        &db.path,
        "iprate",
        PartyOptions {
            gateway_args: vec!["--ip-rate".into(), "1".into()],
            no_worker: true,
            ..PartyOptions::default()
        },
    )
    .await
    .unwrap();
    let http = &party.http;
    let mut limited = None;
    for sent in 1..=20 {
        let (status, retry, code) = bad_post(http, &party.url, None).await;
        if status == 429 {
            limited = Some((sent, retry, code));
            break;
        }
    }
    let (sent, retry, code) = limited.expect("no 429 in 20 quick submits at --ip-rate 1");
    assert!(sent <= 5, "429 only after {sent} submits");
    assert_eq!(code, "rate_limited");
    assert!(retry.is_some_and(|s| s >= 1), "Retry-After {retry:?}");
    // Only submits are metered.
    assert_eq!(
        get(http, &format!("{}/healthz", party.url), None).await.0,
        200
    );
    assert_eq!(
        get(
            http,
            &format!("{}/v1/queries/{}", party.url, "0".repeat(32)),
            None
        )
        .await
        .0,
        404
    );
    assert!(refusals(&party, "ip_rate").await >= 1);
    assert_eq!(refusals(&party, "unauthorized").await, 0);

    // Flags that cannot work together, and token files that cannot be used, stop the start
    // with a line that says why (and never the file's contents).
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.tokens");
    std::fs::write(&empty, "# nobody yet\n").unwrap();
    let spaced = dir.path().join("spaced.tokens");
    std::fs::write(&spaced, "secret with spaces\n").unwrap();
    let missing = dir.path().join("missing.tokens");
    let cases: [(Vec<&str>, &str); 5] = [
        (vec!["--token-rate", "5"], "--query-tokens"),
        (
            vec!["--ip-rate", "5", "--query-tokens", empty.to_str().unwrap()],
            "cannot be used with",
        ),
        (vec!["--query-tokens", empty.to_str().unwrap()], "no tokens"),
        (
            vec!["--query-tokens", spaced.to_str().unwrap()],
            "line 1: a token is printable ASCII without spaces",
        ),
        (
            vec!["--query-tokens", missing.to_str().unwrap()],
            "reading the query tokens",
        ),
    ];
    for (args, why) in cases {
        let out = Command::new(bin_dir().join("pirq-gateway"))
            .args(["--listen", "127.0.0.1:0", "--redis", "redis://127.0.0.1:1"])
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} started");
        assert!(stderr.contains(why), "{args:?}: {stderr}");
        assert!(!stderr.contains("secret"), "{stderr}");
    }
}
