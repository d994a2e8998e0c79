//! `pirq eth` (issue 40, docs/eth.md): importing geth dumps (a header, hex with or without
//! `0x`, bad lines named by their line), and the JSON-RPC endpoint's errors and forwarding in
//! front of two real parties. The ethers v6 test (tests/eth) checks the values read through the
//! same endpoint against a dump, before and after a block update.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pirq_e2e::cli::{arg, pirq_command, pirq_fails};
use pirq_e2e::{free_port, strings, Party, PartyOptions, Proc, TestDb};
use serde_json::{json, Value};

const EMPTY_ROOT: &str = "56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421";
const EMPTY_CODE: &str = "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470";
/// The code 0x6000 and its keccak256 (ethers' `keccak256("0x6000")`).
const CODE: &str = "6000";
const CODE_HASH: &str = "07ad118d6cc8642c86c03827f276d8b791a65e5c99a3845faf186be720a1455d";
const RICH: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const CONTRACT: &str = "cccccccccccccccccccccccccccccccccccccccc";

fn eoa(address: &str, balance: &str, nonce: u64, p: &str) -> String {
    format!(
        r#"{{"balance":"{balance}","nonce":{nonce},"root":"{p}{EMPTY_ROOT}","codeHash":"{p}{EMPTY_CODE}","address":"{p}{address}"}}"#
    )
}

/// A contract line as geth prints it: storage before the address, values without leading
/// zeros (and a zero value, which is absent from the state).
fn contract(p: &str, code_hash: &str) -> String {
    format!(
        r#"{{"balance":"5","nonce":1,"root":"{p}{}","codeHash":"{p}{code_hash}","code":"{p}{CODE}","storage":{{"{p}{:064x}":"2a","{p}{:064x}":"00"}},"address":"{p}{CONTRACT}","key":"0x00"}}"#,
        "11".repeat(32),
        1,
        2,
    )
}

/// A small dump: a header line, two accounts and a contract, hex fields with `p` (`0x` or not).
fn dump(p: &str) -> String {
    format!(
        "{{\"root\":\"{p}{}\"}}\n{}\n{}\n{}\n",
        "ab".repeat(32),
        eoa(RICH, "1000000000000000000", 7, p),
        eoa(&"bb".repeat(20), "0", 0, p),
        contract(p, CODE_HASH),
    )
}

fn import(dir: &Path, name: &str, text: &str, extra: &[&str]) -> std::process::Output {
    let path = dir.join(format!("{name}.jsonl"));
    std::fs::write(&path, text).unwrap();
    let out = dir.join(name);
    let mut args = vec![
        "eth",
        "import",
        "--dump",
        arg(&path),
        "--out",
        arg(&out),
        "--quiet",
    ];
    args.extend_from_slice(extra);
    pirq_command(&args).output().unwrap()
}

#[test]
fn import_reads_a_header_and_hex_with_or_without_0x_alike() {
    let dir = tempfile::tempdir().unwrap();
    let mut tables = Vec::new();
    for (name, p) in [("with", "0x"), ("bare", "")] {
        let out = import(
            dir.path(),
            name,
            &dump(p),
            &["--block", "42", "--seed", "9"],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let state = dir.path().join(name);
        let report: Value =
            serde_json::from_slice(&std::fs::read(state.join("eth.json")).unwrap()).unwrap();
        assert_eq!(report["block"], 42);
        assert_eq!(report["accounts"], 3);
        // The zero value is absent: one slot.
        assert_eq!(report["storage_slots"], 1);
        assert_eq!(report["codes"], 1);
        assert_eq!(report["state_root"], format!("0x{}", "ab".repeat(32)));
        tables.push(
            ["accounts", "code", "storage"]
                .map(|t| std::fs::read(state.join(format!("{t}.pirdb"))).unwrap()),
        );
    }
    // The same state whatever the spelling: the same bytes, table by table.
    assert!(
        tables[0] == tables[1],
        "0x and bare hex gave different tables"
    );
    // Without the header line, the state root is not known.
    let headless: String = dump("0x")
        .lines()
        .skip(1)
        .map(|l| format!("{l}\n"))
        .collect();
    let out = import(dir.path(), "headless", &headless, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("headless").join("eth.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (report["block"].clone(), report["state_root"].clone()),
        (json!(0), Value::Null)
    );
}

#[test]
fn bad_dumps_are_refused_with_their_line_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let good = dump("0x");
    let lines: Vec<&str> = good.lines().collect();
    let with_line = |at: usize, line: &str| {
        let mut l = lines.clone();
        l.insert(at, line);
        l.join("\n") + "\n"
    };
    let header = lines[0];
    let cases: Vec<(String, &str)> = vec![
        (with_line(2, "{\"balance\": 1"), "line 3: "),
        (with_line(3, "not json"), "line 4: "),
        (with_line(2, header), "line 3: a line with only \"root\""),
        (
            with_line(
                1,
                &eoa(RICH, "12", 1, "0x").replace(&format!(",\"address\":\"0x{RICH}\""), ""),
            ),
            "line 2: the account has no \"address\"",
        ),
        (
            with_line(4, &eoa(RICH, "3", 0, "0x")),
            "line 5: duplicate address",
        ),
        (
            with_line(1, &eoa(&"dd".repeat(20), "-1", 0, "0x")),
            "line 2: balance",
        ),
        (
            with_line(1, &eoa(&"dd".repeat(20), "0x10", 0, "0x")),
            "line 2: balance",
        ),
        (
            with_line(1, &eoa(&"dd".repeat(19), "1", 0, "0x")),
            "line 2: address",
        ),
        (
            with_line(
                1,
                &contract("0x", &"12".repeat(32)).replace(CONTRACT, &"ee".repeat(20)),
            ),
            "line 2: codeHash is not keccak256",
        ),
        (
            with_line(
                1,
                &contract("0x", CODE_HASH)
                    .replace(&format!(",\"code\":\"0x{CODE}\""), "")
                    .replace(CONTRACT, &"ee".repeat(20)),
            ),
            "line 2: the account's codeHash is not the empty code's",
        ),
        (
            with_line(
                1,
                &eoa(&"ee".repeat(20), "1", 0, "0x").replace(EMPTY_ROOT, &"11".repeat(32)),
            ),
            "line 2: the account has storage",
        ),
        (
            with_line(1, &contract("0x", CODE_HASH).replace("\"2a\"", "\"2g\"")),
            "line 2: storage value",
        ),
        (header.to_string() + "\n", "holds no account"),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let name = format!("bad{i}");
        let out = import(dir.path(), &name, text, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "case {i} was accepted:\n{text}");
        assert!(
            stderr.contains(want),
            "case {i}: wanted {want:?}, got {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        let written: Vec<_> = std::fs::read_dir(dir.path().join(&name))
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(written.is_empty(), "case {i} left {written:?}");
    }
    // Standard input cannot be read twice.
    let ran = pirq_fails(&["eth", "import", "--dump", "-", "--out", arg(dir.path())]);
    assert!(
        ran.stderr.contains("--dump must be a file"),
        "{}",
        ran.stderr
    );
}

/// A JSON-RPC node on loopback that answers eth_gasPrice and eth_chainId and records the
/// methods it was sent.
fn fake_upstream() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/rpc", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut len = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            let call: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let method = call["method"].as_str().unwrap_or_default().to_string();
            record.lock().unwrap().push(method.clone());
            let answer = match method.as_str() {
                "eth_gasPrice" => json!({"jsonrpc": "2.0", "id": call["id"], "result": "0x3b9aca00"}),
                "eth_chainId" => json!({"jsonrpc": "2.0", "id": call["id"], "result": "0x1"}),
                _ => json!({"jsonrpc": "2.0", "id": call["id"], "error": {"code": -32000, "message": "upstream says no"}}),
            }
            .to_string();
            let _ = write!(
                &stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    (url, seen)
}

/// Two parties serving the tables of `state` (beside a default table, which the harness waits
/// for), each named table with a live worker.
/// `pirq eth serve` in front of `parties` on a free loopback port, with `extra` flags, its log
/// in `dir`: the process and the endpoint's URL.
pub(crate) fn serve(dir: &Path, parties: (&Party, &Party), extra: &[&str]) -> (Proc, String) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec![
        "eth",
        "serve",
        "--party-a",
        &parties.0.url,
        "--party-b",
        &parties.1.url,
        "--listen",
        &listen,
    ];
    args.extend_from_slice(extra);
    let proc = Proc::spawn("eth-serve", pirq_command(&args), dir.join("serve.log")).unwrap();
    (proc, format!("http://127.0.0.1:{port}/"))
}

async fn parties(state: &Path, default: &TestDb) -> (Party, Party) {
    parties_with(state, default, &[]).await
}

/// Two parties serving the three tables of `state` (and `default`), their gateways started
/// with `gateway_args` too.
pub(crate) async fn parties_with(
    state: &Path,
    default: &TestDb,
    gateway_args: &[&str],
) -> (Party, Party) {
    let table = |t: &str| format!("{t}={}", state.join(format!("{t}.pirdb")).display());
    let options = PartyOptions {
        gateway_args: strings(gateway_args),
        worker_args: strings(&[
            "--table",
            &table("accounts"),
            "--table",
            &table("code"),
            "--table",
            &table("storage"),
        ]),
        ..PartyOptions::default()
    };
    let a = Party::start(&default.path, "eth-a", options.clone())
        .await
        .unwrap();
    let b = Party::start(&default.path, "eth-b", options).await.unwrap();
    for party in [&a, &b] {
        party
            .wait_tables_served(&["default", "accounts", "code", "storage"])
            .await;
    }
    (a, b)
}

pub(crate) async fn post(url: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_json_rpc_errors_and_forwards_only_other_methods() {
    let dir = tempfile::tempdir().unwrap();
    let out = import(dir.path(), "state", &dump(""), &["--block", "77"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let default = TestDb::create(16, 256, 1).unwrap();
    let (a, b) = parties(&dir.path().join("state"), &default).await;
    let (upstream, seen) = fake_upstream();
    let (mut serve, url) = serve(
        dir.path(),
        (&a, &b),
        &[
            "--upstream",
            &upstream,
            "--max-batch",
            "4",
            "--max-body-bytes",
            "4096",
        ],
    );
    let call = |id: u64, method: &str, params: Value| json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ok = reqwest::Client::new()
            .post(&url)
            .json(&call(0, "eth_blockNumber", json!([])))
            .send()
            .await
            .is_ok();
        if ok {
            break;
        }
        assert!(
            serve.is_running() && Instant::now() < deadline,
            "{}",
            serve.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let rich = format!("0x{RICH}");
    let (status, r) = post(
        &url,
        call(1, "eth_getBalance", json!([rich, "latest"])).to_string(),
    )
    .await;
    assert_eq!(
        (status, r["result"].clone()),
        (200, json!("0xde0b6b3a7640000"))
    );
    let (_, r) = post(
        &url,
        call(
            2,
            "eth_getStorageAt",
            json!([format!("0x{CONTRACT}"), "0x1", "0x4d"]),
        )
        .to_string(),
    )
    .await;
    assert_eq!(r["result"], json!(format!("0x{:064x}", 0x2a)));
    let (_, r) = post(
        &url,
        call(3, "eth_getCode", json!([format!("0x{CONTRACT}"), "latest"])).to_string(),
    )
    .await;
    assert_eq!(r["result"], json!(format!("0x{CODE}")));

    // Errors: each is JSON-RPC's, with the call's id where it has one.
    let error = |r: &Value| (r["id"].clone(), r["error"]["code"].as_i64().unwrap_or(0));
    let (_, r) = post(&url, "{not json").await;
    assert_eq!(error(&r), (Value::Null, -32700));
    let (_, r) = post(&url, "[]").await;
    assert_eq!(error(&r), (Value::Null, -32600));
    let five: Vec<Value> = (0..5)
        .map(|i| call(i, "eth_blockNumber", json!([])))
        .collect();
    let (_, r) = post(&url, Value::Array(five).to_string()).await;
    assert_eq!(error(&r), (Value::Null, -32600));
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("at most 4"));
    let (_, r) = post(
        &url,
        json!({"jsonrpc": "1.0", "id": 9, "method": "eth_blockNumber"}).to_string(),
    )
    .await;
    assert_eq!(error(&r), (json!(9), -32600));
    let (_, r) = post(
        &url,
        call(10, "eth_getBalance", json!(["0x1234", "latest"])).to_string(),
    )
    .await;
    assert_eq!(error(&r), (json!(10), -32602));
    let (_, r) = post(
        &url,
        call(11, "eth_getBalance", json!([rich, "pending"])).to_string(),
    )
    .await;
    assert_eq!(error(&r), (json!(11), -32000));
    let (_, r) = post(
        &url,
        call(12, "eth_getBalance", json!([rich, "0x4c"])).to_string(),
    )
    .await;
    assert_eq!(error(&r), (json!(12), -32000));
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("answers block 0x4d"),
        "{r}"
    );
    // Only notifications: no answer at all.
    let (status, _) = post(
        &url,
        json!([{"jsonrpc": "2.0", "method": "eth_blockNumber"}]).to_string(),
    )
    .await;
    assert_eq!(status, 204);
    // A body over --max-body-bytes is refused before it is read whole.
    let (status, _) = post(&url, format!("[{}]", " ".repeat(5000))).await;
    assert_eq!(status, 413);

    // Other methods go upstream with their id; the upstream's errors come back as they are.
    let batch = json!([
        call(20, "eth_gasPrice", json!([])),
        call(21, "eth_chainId", json!([])),
        call(22, "eth_getBalance", json!([rich, "latest"])),
        call(23, "eth_call", json!([{"to": rich}, "latest"])),
    ]);
    let (_, r) = post(&url, batch.to_string()).await;
    assert_eq!(
        r[0],
        json!({"jsonrpc": "2.0", "id": 20, "result": "0x3b9aca00"})
    );
    assert_eq!(r[1]["result"], json!("0x1"));
    assert_eq!(r[2]["result"], json!("0xde0b6b3a7640000"));
    assert_eq!(error(&r[3]), (json!(23), -32000));
    let mut forwarded = seen.lock().unwrap().clone();
    forwarded.sort();
    assert_eq!(
        forwarded,
        ["eth_call", "eth_chainId", "eth_gasPrice"],
        "a private read went upstream"
    );

    // Nothing a call named is in the endpoint's log, and nothing went wrong there.
    serve.terminate(Duration::from_secs(3));
    let log = serve.log_text();
    assert!(!log.contains(RICH) && !log.contains(CONTRACT), "{log}");
    assert!(!log.contains("WARN") && !log.contains("ERROR"), "{log}");

    // An upstream in plain HTTP to another machine is refused at start.
    let ran = pirq_fails(&[
        "eth",
        "serve",
        "--party-a",
        &a.url,
        "--party-b",
        &b.url,
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "http://node.example.invalid:8545",
    ]);
    assert!(ran.stderr.contains("--upstream"), "{}", ran.stderr);
}

/// What one party's gateway has counted: query POSTs per eth table, and DPF keys accepted.
async fn shape(party: &Party) -> ([f64; 3], f64) {
    let text = pirq_e2e::metrics::scrape(&party.http, &party.url).await;
    let posts = ["accounts", "code", "storage"].map(|t| {
        text.lines()
            .filter(|l| l.starts_with("pirq_gateway_http_requests_total{"))
            .filter(|l| l.contains("method=\"POST\"") && l.contains(&format!("table=\"{t}\"")))
            .filter(|l| l.contains("/queries\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    });
    let keys =
        pirq_e2e::metrics::sum(&text, "pirq_gateway_keys_accepted_total").unwrap_or_default();
    (posts, keys)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_costs_each_party_the_same_keys_whatever_the_method_and_the_account() {
    let dir = tempfile::tempdir().unwrap();
    let out = import(dir.path(), "state", &dump("0x"), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let default = TestDb::create(16, 256, 2).unwrap();
    let (a, b) = parties(&dir.path().join("state"), &default).await;
    let (mut serve, url) = serve(dir.path(), (&a, &b), &[]);
    let call = |method: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string()
    };
    let (rich, contract) = (format!("0x{RICH}"), format!("0x{CONTRACT}"));
    let nobody = format!("0x{}", "77".repeat(20));
    let reads = [
        call("eth_getBalance", json!([rich, "latest"])),
        call("eth_getBalance", json!([nobody, "latest"])),
        call("eth_getTransactionCount", json!([rich, "latest"])),
        call("eth_getCode", json!([contract, "latest"])),
        call("eth_getCode", json!([rich, "latest"])),
        call("eth_getCode", json!([nobody, "latest"])),
        call("eth_getStorageAt", json!([contract, "0x1", "latest"])),
        call("eth_getStorageAt", json!([contract, "0x5", "latest"])),
        call("eth_getStorageAt", json!([nobody, "0x1", "latest"])),
        call("eth_blockNumber", json!([])),
    ];
    // The first read also reads each table's /v1/info; the ones after it cost queries only.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answered = reqwest::Client::new()
            .post(&url)
            .header("content-type", "application/json")
            .body(reads[0].clone())
            .send()
            .await;
        if let Ok(r) = answered {
            if r.status() == 200 {
                break;
            }
        }
        assert!(
            serve.is_running() && Instant::now() < deadline,
            "{}",
            serve.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for read in &reads {
        let before = [shape(&a).await, shape(&b).await];
        let (status, r) = post(&url, read.clone()).await;
        assert!(status == 200 && r["result"].is_string(), "{read}: {r}");
        let after = [shape(&a).await, shape(&b).await];
        for (party, (x, y)) in before.iter().zip(&after).enumerate() {
            let posts: Vec<f64> = (0..3).map(|t| y.0[t] - x.0[t]).collect();
            // One query a table; 2 + 2 keys for accounts (the address, the metadata record),
            // 2 for storage (d = 2), 3 for code (d = 3).
            assert_eq!(posts, [1.0, 1.0, 1.0], "party {party}, {read}");
            assert_eq!(y.1 - x.1, 9.0, "party {party}, {read}");
        }
    }
    serve.terminate(Duration::from_secs(3));
}
