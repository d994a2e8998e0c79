//! Signed Ethereum tables through block updates (docs/eth.md): `eth import --sign-key` signs
//! every table, each update (`--base … --sign-key K --manifests MDIR`) appends every table's
//! signed manifest, the parties serve them once they serve the update's epoch
//! (`pirq-gateway --table-manifests NAME=FILE`), and
//! `eth serve --publisher-key` verifies every read before and after the update. An endpoint
//! holding another publisher's key gets no value at all.

use std::time::{Duration, Instant};

use pirq_e2e::cli::{arg, pirq_ok};
use pirq_e2e::TestDb;
use serde_json::{json, Value};

use crate::eth::{parties_with, post, serve};

const TOKEN: &str = "eth-signed-admin-token";

/// The first account line of a dump: (address, balance as a JSON-RPC quantity).
fn first_account(dump: &std::path::Path) -> (String, String) {
    let text = std::fs::read_to_string(dump).unwrap();
    let line: Value = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v.get("address").is_some())
        .unwrap();
    let balance: u128 = line["balance"].as_str().unwrap().parse().unwrap();
    (
        line["address"].as_str().unwrap().to_string(),
        format!("{balance:#x}"),
    )
}

async fn balance(url: &str, address: &str) -> Value {
    let (status, answer) = post(
        url,
        json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getBalance", "params": [address, "latest"]})
            .to_string(),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// eth_blockNumber's answer (the whole response); null while the endpoint does not listen yet.
async fn block_number(url: &str) -> Value {
    let sent = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber"}).to_string())
        .send()
        .await;
    match sent {
        Ok(r) => r.json::<Value>().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eth_signed_tables_verify_before_and_after_a_block_update() {
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str| dir.path().join(name);
    let (secret, public) = (d("pub.key"), d("pub.pub"));
    let (other_secret, other_public) = (d("other.key"), d("other.pub"));
    for (sk, pk) in [(&secret, &public), (&other_secret, &other_public)] {
        pirq_ok(&[
            "publisher",
            "keygen",
            "--secret",
            arg(sk),
            "--public",
            arg(pk),
        ]);
    }
    let state = [
        "--accounts",
        "200",
        "--slots",
        "3",
        "--codes",
        "3",
        "--seed",
        "6",
    ];
    let (d0, d1) = (d("block0.jsonl"), d("block1.jsonl"));
    pirq_ok(&[&["eth", "gen"], &state[..], &["--quiet", "--out", arg(&d0)]].concat());
    pirq_ok(
        &[
            &["eth", "gen"],
            &state[..],
            &["--quiet", "--changed", "200", "--out", arg(&d1)],
        ]
        .concat(),
    );
    let s0 = d("s0");
    pirq_ok(&[
        "eth",
        "import",
        "--dump",
        arg(&d0),
        "--out",
        arg(&s0),
        "--block",
        "500",
        "--sign-key",
        arg(&secret),
        "--quiet",
    ]);
    // The publisher's manifests go to a staging directory; each party serves its copy of a
    // table's manifests once it serves the update's epoch (docs/http-api.md: a manifest of an
    // epoch a party does not serve yet makes clients refuse that party as stale).
    let (staged, manifests) = (d("staged"), d("manifests"));
    std::fs::create_dir(&staged).unwrap();
    std::fs::create_dir(&manifests).unwrap();
    pirq_ok(&[
        "eth",
        "import",
        "--dump",
        arg(&d1),
        "--base",
        arg(&s0),
        "--update-out",
        arg(&d("u1")),
        "--sign-key",
        arg(&secret),
        "--manifests",
        arg(&staged),
        "--quiet",
    ]);
    let served = ["accounts", "code", "storage"]
        .map(|t| {
            format!(
                "{t}={}",
                manifests.join(format!("{t}.manifests.json")).display()
            )
        })
        .join(",");
    let default = TestDb::create(16, 256, 3).unwrap();
    let (a, b) = parties_with(
        &s0,
        &default,
        &["--admin-token", TOKEN, "--table-manifests", &served],
    )
    .await;
    let (_serve, url) = serve(dir.path(), (&a, &b), &["--publisher-key", arg(&public)]);
    let other = d("other");
    std::fs::create_dir(&other).unwrap();
    let (_wrong, wrong_url) = serve(&other, (&a, &b), &["--publisher-key", arg(&other_public)]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let answer = block_number(&url).await;
        if answer["result"] == json!("0x1f4") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "eth serve never answered block 500: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    while block_number(&wrong_url).await.is_null() {
        assert!(
            Instant::now() < deadline,
            "the second eth serve never listened"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (address, before) = first_account(&d0);
    let (address1, after) = first_account(&d1);
    assert_eq!(address, address1);
    assert_ne!(
        before, after,
        "--changed 200 of 200 accounts changed the first"
    );
    assert_eq!(balance(&url, &address).await["result"], json!(before));
    // Pages signed by another publisher are no answer.
    let refused = balance(&wrong_url, &address).await;
    assert!(refused.get("result").is_none(), "{refused}");
    assert!(refused["error"]["code"].is_i64(), "{refused}");

    // Block 501: pushed to every table of both parties, its manifests already served.
    for party in [&a, &b] {
        for t in ["accounts", "code", "storage"] {
            pirq_ok(&[
                "epoch",
                "push",
                "--party",
                &party.url,
                "--token",
                TOKEN,
                "--table",
                t,
                "--from",
                arg(&d(&format!("u1/{t}.update"))),
            ]);
        }
    }
    for t in ["accounts", "code", "storage"] {
        let name = format!("{t}.manifests.json");
        let tmp = manifests.join(format!(".{name}"));
        std::fs::copy(staged.join(&name), &tmp).unwrap();
        std::fs::rename(&tmp, manifests.join(&name)).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let answer = block_number(&url).await;
        if answer["result"] == json!("0x1f5") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "block 501 never became visible: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(balance(&url, &address).await["result"], json!(after));
    let refused = balance(&wrong_url, &address).await;
    assert!(refused.get("result").is_none(), "{refused}");
}
