//! Signed Ethereum tables through block updates (docs/eth.md): `eth import --sign-key` signs
//! every table, each update (`--base … --sign-key K --manifests MDIR`) appends every table's
//! signed manifest, the parties serve them once they serve the update's epoch
//! (`pirq-gateway --table-manifests NAME=FILE`), and
//! `eth serve --publisher-key` verifies every read before and after the update. An endpoint
//! holding another publisher's key gets no value at all. A signed publisher follows the chain
//! with `--after` (the updates made since the base, never applied): the same update, and the
//! same manifest, as after `pirq db apply`.

use std::path::Path;
use std::time::{Duration, Instant};

use pirq_e2e::cli::{arg, pirq_command, pirq_ok, publisher_keygen};
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

/// The gateways' `--table-manifests` value for the three tables' manifest files in `dir`.
fn table_manifests_flag(dir: &Path) -> String {
    TABLES
        .map(|t| format!("{t}={}", dir.join(format!("{t}.manifests.json")).display()))
        .join(",")
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
    let (secret, public) = publisher_keygen(dir.path(), "pub");
    let (_, other_public) = publisher_keygen(dir.path(), "other");
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
    let served = table_manifests_flag(&manifests);
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
        push_block(&party.url, &d("u1"));
    }
    copy_manifests(&staged, &manifests);
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

/// What `eth serve` must answer for one account of a dump: balance and nonce as JSON-RPC
/// quantities, the code as data, storage slot -> 32-byte word.
#[derive(Clone, Default, PartialEq, Debug)]
struct Want {
    balance: String,
    nonce: String,
    code: String,
    storage: std::collections::BTreeMap<String, String>,
}

/// A dump's accounts by address, as a node answers them (an absent account: [`absent`]).
fn read_dump(dump: &Path) -> std::collections::BTreeMap<String, Want> {
    let text = std::fs::read_to_string(dump).unwrap();
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let Some(address) = v["address"].as_str() else {
            continue;
        };
        let balance: u128 = v["balance"].as_str().unwrap().parse().unwrap();
        let storage = v["storage"]
            .as_object()
            .map(|slots| {
                slots
                    .iter()
                    .map(|(slot, value)| {
                        let digits = value.as_str().unwrap().trim_start_matches("0x");
                        (slot.clone(), format!("0x{digits:0>64}"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.insert(
            address.to_string(),
            Want {
                balance: format!("{balance:#x}"),
                nonce: format!("{:#x}", v["nonce"].as_u64().unwrap()),
                code: v["code"].as_str().unwrap_or("0x").to_string(),
                storage,
            },
        );
    }
    out
}

/// An account a state lacks: every read 0.
fn absent() -> Want {
    Want {
        balance: "0x0".into(),
        nonce: "0x0".into(),
        code: "0x".into(),
        storage: Default::default(),
    }
}

/// Reads `addresses` (and the storage `slots` of each) through `url` in one JSON-RPC batch and
/// checks every answer is `state`'s (verified pages: `eth serve --publisher-key` answers only
/// those).
async fn check_reads(
    url: &str,
    state: &std::collections::BTreeMap<String, Want>,
    reads: &[(String, Vec<String>)],
    block: &str,
) {
    // (method, params, the answer wanted)
    let mut asked: Vec<(&str, Value, String)> = Vec::new();
    for (address, slots) in reads {
        let w = state.get(address).cloned().unwrap_or_else(absent);
        asked.push((
            "eth_getBalance",
            json!([address, "latest"]),
            w.balance.clone(),
        ));
        asked.push((
            "eth_getTransactionCount",
            json!([address, "latest"]),
            w.nonce.clone(),
        ));
        asked.push(("eth_getCode", json!([address, "latest"]), w.code.clone()));
        for slot in slots {
            let word = w.storage.get(slot).cloned();
            asked.push((
                "eth_getStorageAt",
                json!([address, slot, "latest"]),
                word.unwrap_or_else(|| format!("0x{}", "0".repeat(64))),
            ));
        }
    }
    let calls: Vec<Value> = asked
        .iter()
        .enumerate()
        .map(|(i, (method, params, _))| {
            json!({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
        })
        .collect();
    let want: Vec<&String> = asked.iter().map(|(_, _, w)| w).collect();
    let (status, answers) = post(url, Value::Array(calls).to_string()).await;
    assert_eq!(status, 200, "{answers}");
    let answers = answers.as_array().expect("a batch answer");
    assert_eq!(answers.len(), want.len());
    for (i, w) in want.iter().enumerate() {
        let answer = answers
            .iter()
            .find(|a| a["id"] == json!(i))
            .expect("an answer to every call");
        assert_eq!(
            answer["result"],
            json!(w),
            "read {i} at block {block}: {answer}"
        );
    }
}

/// Appends to the changes file `changes[last]` the deletion of two accounts of the dump `base`
/// that no file of `changes` has a line of: a contract, listing every slot it holds, and an
/// account without code. Their addresses.
fn delete_untouched(base: &Path, changes: &[&Path]) -> Vec<String> {
    let lines = |path: &Path| -> Vec<Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v.get("address").is_some())
            .collect()
    };
    let touched: Vec<Value> = changes
        .iter()
        .flat_map(|c| lines(c))
        .map(|v| v["address"].clone())
        .collect();
    let accounts = lines(base);
    let pick = |contract: bool| {
        accounts
            .iter()
            .find(|v| v.get("code").is_some() == contract && !touched.contains(&v["address"]))
            .expect("an account no block touches")
            .clone()
    };
    let (contract, eoa) = (pick(true), pick(false));
    let slots: serde_json::Map<String, Value> = contract["storage"]
        .as_object()
        .expect("a contract with storage")
        .keys()
        .map(|k| (k.clone(), json!("0")))
        .collect();
    assert!(!slots.is_empty());
    let last = changes.last().unwrap();
    let mut text = std::fs::read_to_string(last).unwrap();
    for line in [
        json!({"address": contract["address"], "deleted": true, "storage": slots}),
        json!({"address": eoa["address"], "deleted": true}),
    ] {
        text.push_str(&format!("{line}\n"));
    }
    std::fs::write(last, text).unwrap();
    [contract, eoa]
        .iter()
        .map(|v| v["address"].as_str().unwrap().to_string())
        .collect()
}

/// Waits until `url` answers `block` (hex) as eth_blockNumber.
async fn wait_block(url: &str, block: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = block_number(url).await;
        if answer["result"] == json!(block) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "eth serve never answered block {block}: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const TABLES: [&str; 3] = ["accounts", "code", "storage"];

/// Copies every table's manifest file from `from` into `to` (created), renaming each over the
/// old one as an operator installs them.
fn copy_manifests(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for t in TABLES {
        let name = format!("{t}.manifests.json");
        let tmp = to.join(format!(".{name}"));
        std::fs::copy(from.join(&name), &tmp).unwrap();
        std::fs::rename(&tmp, to.join(&name)).unwrap();
    }
}

/// Pushes a block's update of every table (`updates/NAME.update`) to the party at `url`.
fn push_block(url: &str, updates: &Path) {
    for t in TABLES {
        pirq_ok(&[
            "epoch",
            "push",
            "--party",
            url,
            "--token",
            TOKEN,
            "--table",
            t,
            "--from",
            arg(&updates.join(format!("{t}.update"))),
        ]);
    }
}

/// The files `names` of two directories hold the same bytes.
fn same_bytes(a: &Path, b: &Path, names: &[String]) {
    for name in names {
        let (x, y) = (
            std::fs::read(a.join(name)).unwrap(),
            std::fs::read(b.join(name)).unwrap(),
        );
        assert!(
            x == y,
            "{name} differs between {} and {}",
            a.display(),
            b.display()
        );
    }
}

/// A signed publisher follows the chain without rewriting the tables: block 2's update made
/// from its changes `--after` block 1's (never applied) is signed for epoch 2, its manifest
/// appended to the manifests of block 1, and is byte for byte the update (and the manifest)
/// made against the snapshot `pirq db apply` writes of block 1. Both blocks pushed to two real
/// parties read, verified, the dumps' values (and the endpoint moves on to block 1 after
/// reading while only party A had it). A manifest file one epoch behind or ahead of the
/// updates, an update that is not the one the manifests name, or no key, is refused before
/// anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eth_signed_tables_follow_blocks_after_updates_not_applied() {
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str| dir.path().join(name);
    let (secret, public) = publisher_keygen(dir.path(), "pub");
    let state = [
        "--accounts",
        "300",
        "--contract-every",
        "4",
        "--slots",
        "3",
        "--codes",
        "3",
        "--seed",
        "11",
        "--quiet",
    ];
    let gen = |extra: &[&str]| pirq_ok(&[&["eth", "gen"], &state[..], extra].concat());
    let s0 = d("s0");
    gen(&[
        "--tables",
        arg(&s0),
        "--block",
        "700",
        "--layout-seed",
        "5",
        "--sign-key",
        arg(&secret),
    ]);
    gen(&["--out", arg(&d("d0.jsonl"))]);
    for k in ["1", "2"] {
        let blocks = ["--changed", "40", "--blocks", k];
        gen(&[&blocks[..], &["--out", arg(&d(&format!("d{k}.jsonl")))]].concat());
        gen(&[
            &blocks[..],
            &["--changes-only", "--out", arg(&d(&format!("c{k}.jsonl")))],
        ]
        .concat());
    }
    // Block 2 also deletes two accounts neither block changes, a contract (listing its slots)
    // and an account without code: after it they read as absent.
    let deleted = delete_untouched(&d("d0.jsonl"), &[&d("c1.jsonl"), &d("c2.jsonl")]);
    // `eth import --base BASE --changes C --update-out OUT [--after U…]`, signed with `manifests`
    // as MDIR (or unsigned when None): its output.
    let update = |base: &Path,
                  changes: &str,
                  after: &[&Path],
                  out: &str,
                  manifests: Option<&Path>|
     -> std::process::Output {
        let (changes, out) = (d(changes), d(out));
        let mut args = vec![
            "eth",
            "import",
            "--base",
            arg(base),
            "--changes",
            arg(&changes),
            "--update-out",
            arg(&out),
            "--quiet",
        ];
        if let Some(m) = manifests {
            args.extend(["--sign-key", arg(&secret), "--manifests", arg(m)]);
        }
        if !after.is_empty() {
            args.push("--after");
            args.extend(after.iter().map(|p| arg(p)));
        }
        pirq_command(&args).output().unwrap()
    };
    let ok = |o: std::process::Output| {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let (u1, u2) = (d("u1"), d("u2"));
    let staged = d("staged");
    std::fs::create_dir(&staged).unwrap();
    ok(update(&s0, "c1.jsonl", &[], "u1", Some(&staged)));
    copy_manifests(&staged, &d("m1"));
    ok(update(&s0, "c2.jsonl", &[&u1], "u2", Some(&staged)));
    copy_manifests(&staged, &d("m2"));
    // Signed on all cores, the same bytes as on one: the update and its manifest.
    let one_core = d("one-core");
    copy_manifests(&d("m1"), &one_core);
    let ran = pirq_command(&[
        "eth",
        "import",
        "--base",
        arg(&s0),
        "--changes",
        arg(&d("c2.jsonl")),
        "--update-out",
        arg(&d("u2-one-core")),
        "--quiet",
        "--sign-key",
        arg(&secret),
        "--manifests",
        arg(&one_core),
        "--after",
        arg(&u1),
    ])
    .env("RAYON_NUM_THREADS", "1")
    .output()
    .unwrap();
    ok(ran);

    // The same block made against the snapshot of block 1: the same bytes, update and manifest.
    let s1 = d("s1");
    std::fs::create_dir(&s1).unwrap();
    for t in TABLES {
        pirq_ok(&[
            "db",
            "apply",
            "--db",
            arg(&s0.join(format!("{t}.pirdb"))),
            "--update",
            arg(&u1.join(format!("{t}.update"))),
            "--out",
            arg(&s1.join(format!("{t}.pirdb"))),
            "--quiet",
        ]);
    }
    let applied = d("applied");
    copy_manifests(&d("m1"), &applied);
    ok(update(&s1, "c2.jsonl", &[], "u2-applied", Some(&applied)));
    let updates: Vec<String> = TABLES.iter().map(|t| format!("{t}.update")).collect();
    let manifest_files: Vec<String> = TABLES
        .iter()
        .map(|t| format!("{t}.manifests.json"))
        .collect();
    same_bytes(&u2, &d("u2-applied"), &updates);
    same_bytes(&staged, &applied, &manifest_files);
    same_bytes(&u2, &d("u2-one-core"), &updates);
    same_bytes(&staged, &one_core, &manifest_files);
    let report: Value =
        serde_json::from_slice(&std::fs::read(u2.join("eth.json")).unwrap()).unwrap();
    assert_eq!(
        (report["epoch"].as_u64(), report["block"].as_u64()),
        (Some(2), Some(702))
    );
    // Every page of block 2's update is signed by the publisher for its table's database as
    // changed at epoch 2, and the manifest of epoch 2 lists exactly those pages.
    for t in TABLES {
        let db = pirq_db::PirDb::open(s0.join(format!("{t}.pirdb"))).unwrap();
        let block = db.signing().copied().expect("a signed table");
        let bytes = std::fs::read(u2.join(format!("{t}.update"))).unwrap();
        let update = pirq_shared::update::EpochUpdate::parse_file(&bytes).unwrap();
        assert_eq!(update.epoch, 2);
        for w in &update.pages {
            assert_eq!(
                block.verify_page(w.index, &w.page).unwrap(),
                2,
                "{t} page {}",
                w.index
            );
        }
        let list: Value = serde_json::from_slice(
            &std::fs::read(staged.join(format!("{t}.manifests.json"))).unwrap(),
        )
        .unwrap();
        let epochs: Vec<u64> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["epoch"].as_u64().unwrap())
            .collect();
        assert_eq!(epochs, [1, 2], "{t}");
        let mut pages: Vec<u64> = update.pages.iter().map(|w| w.index).collect();
        pages.sort_unstable();
        assert_eq!(list[1]["pages"], json!(pages), "{t}");
        if t == "accounts" {
            assert!(!pages.is_empty(), "block 2 changed no account page");
        }
    }

    // Refusals, each before anything is written: the named epochs in the message, the
    // manifest file as it was, no update directory.
    let refused = |o: std::process::Output, out: &str, needles: &[&str]| {
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        for n in needles {
            assert!(stderr.contains(n), "{n:?} not in {stderr}");
        }
        assert!(!d(out).exists(), "{out} written by a refused update");
    };
    let behind = d("behind");
    copy_manifests(&d("m1"), &behind);
    refused(
        update(&s0, "c2.jsonl", &[&u1, &u2], "u3-behind", Some(&behind)),
        "u3-behind",
        &[
            "ends at epoch 1",
            "(at epoch 0)",
            "epochs 1 to 2",
            "exactly epoch 2",
        ],
    );
    same_bytes(&behind, &d("m1"), &manifest_files);
    let ahead = d("ahead");
    copy_manifests(&d("m2"), &ahead);
    refused(
        update(&s0, "c2.jsonl", &[&u1], "u2-ahead", Some(&ahead)),
        "u2-ahead",
        &[
            "ends at epoch 2",
            "(at epoch 0)",
            "(epoch 1)",
            "exactly epoch 1",
        ],
    );
    same_bytes(&ahead, &d("m2"), &manifest_files);
    // An epoch-1 update other than the one the manifests name (block 2's changes on s0).
    let other = d("other-m");
    std::fs::create_dir(&other).unwrap();
    ok(update(&s0, "c2.jsonl", &[], "u1-other", Some(&other)));
    let wrong = d("wrong");
    copy_manifests(&d("m1"), &wrong);
    refused(
        update(&s0, "c2.jsonl", &[&d("u1-other")], "u2-wrong", Some(&wrong)),
        "u2-wrong",
        &["is not the update of epoch 1"],
    );
    same_bytes(&wrong, &d("m1"), &manifest_files);
    // A signed table's update, even after others, is signed.
    refused(
        update(&s0, "c2.jsonl", &[&u1], "u2-unsigned", None),
        "u2-unsigned",
        &["is a signed database", "--sign-key"],
    );

    // Both blocks through two real parties, read verified by eth serve --publisher-key.
    let (d0, d1, mut d2) = (
        read_dump(&d("d0.jsonl")),
        read_dump(&d("d1.jsonl")),
        read_dump(&d("d2.jsonl")),
    );
    for a in &deleted {
        assert!(d2.remove(a).is_some(), "{a} in block 2's dump");
    }
    // Accounts block 1 changed, block 2 changed, and block 2 added; each with every slot any
    // of the three states holds.
    let changed = |from: &std::collections::BTreeMap<String, Want>,
                   to: &std::collections::BTreeMap<String, Want>| {
        to.iter()
            .filter(|(a, w)| from.get(*a) != Some(w))
            .map(|(a, _)| a.clone())
            .collect::<Vec<_>>()
    };
    let (in1, in2) = (changed(&d0, &d1), changed(&d1, &d2));
    let added: Vec<String> = in2
        .iter()
        .filter(|a| !d1.contains_key(*a))
        .cloned()
        .collect();
    let has_slots = |a: &String| d1.get(a).is_some_and(|w| !w.storage.is_empty());
    let mut picked: Vec<String> = Vec::new();
    for list in [&in1, &in2] {
        picked.extend(list.iter().filter(|a| has_slots(a)).take(2).cloned());
        picked.extend(list.iter().filter(|a| !has_slots(a)).take(2).cloned());
    }
    picked.extend(added.iter().take(2).cloned());
    picked.extend(deleted.iter().cloned());
    picked.sort();
    picked.dedup();
    assert!(
        picked.len() >= 6 && !added.is_empty(),
        "the blocks change too little: {picked:?}"
    );
    let reads: Vec<(String, Vec<String>)> = picked
        .into_iter()
        .map(|a| {
            let mut slots: Vec<String> = [&d0, &d1, &d2]
                .iter()
                .filter_map(|s| s.get(&a))
                .flat_map(|w| w.storage.keys().cloned())
                .collect();
            slots.sort();
            slots.dedup();
            (a, slots)
        })
        .collect();

    let served = d("served");
    std::fs::create_dir(&served).unwrap();
    let table_manifests = table_manifests_flag(&served);
    let default = TestDb::create(16, 256, 3).unwrap();
    let (a, b) = parties_with(
        &s0,
        &default,
        &[
            "--admin-token",
            TOKEN,
            "--table-manifests",
            &table_manifests,
        ],
    )
    .await;
    let (_serve, url) = serve(dir.path(), (&a, &b), &["--publisher-key", arg(&public)]);
    wait_block(&url, "0x2bc").await;
    check_reads(&url, &d0, &reads, "700").await;
    for (k, state, block) in [(1, &d1, "0x2bd"), (2, &d2, "0x2be")] {
        for party in [&a, &b] {
            push_block(&party.url, &d(&format!("u{k}")));
            if k == 1 && party.url == a.url {
                // Party A ahead: reads are of the block both serve, and once party B catches
                // up they move on (a client must not keep to the epoch it pinned while the
                // parties' newest epochs differed).
                check_reads(&url, &d0, &reads, "700, party A at 701").await;
                assert_eq!(block_number(&url).await["result"], json!("0x2bc"));
            }
        }
        copy_manifests(&d(&format!("m{k}")), &served);
        wait_block(&url, block).await;
        check_reads(&url, state, &reads, block).await;
    }
}
