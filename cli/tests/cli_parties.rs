//! `pirq query` and `pirq get` as a user runs them, against fake parties
//! (`pirq_testkit::fake_party`): `--timeout` holds within +1 s, a huge body costs no memory,
//! errors are printed once and without escape codes, `--out -` and `--json` give data.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use pirq_testkit::fake_party::{fake, kv_key, kv_value, Behaviour, FakeConfig, FakeParty};

mod common;
use common::pirq_on_a_terminal;

/// Runs `pirq ARGS` to completion; its output, wall time and peak resident memory (KiB).
async fn pirq(args: Vec<String>) -> (Output, Duration, i64) {
    pirq_with_env(args, Vec::new()).await
}

/// [`pirq`] with these environment variables set.
async fn pirq_with_env(args: Vec<String>, env: Vec<(String, String)>) -> (Output, Duration, i64) {
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        let child = Command::new(env!("CARGO_BIN_EXE_pirq"))
            .args(&args)
            .envs(env)
            .env_remove("PIRQ_PARTY_A")
            .env_remove("PIRQ_PARTY_B")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("running pirq");
        let pid = child.id() as libc::pid_t;
        // Read both pipes, then reap the child with wait4 for its own peak RSS (std's wait
        // would discard it).
        let mut child = child;
        let read = |mut pipe: Box<dyn std::io::Read + Send>| {
            std::thread::spawn(move || {
                let mut v = Vec::new();
                pipe.read_to_end(&mut v).unwrap();
                v
            })
        };
        let out = read(Box::new(child.stdout.take().unwrap()));
        let err = read(Box::new(child.stderr.take().unwrap()));
        let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
        drop(child); // not reaped: wait4 below does it
        let mut status = 0;
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: pid is our child, not yet reaped; status and usage are valid out-pointers.
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        assert_eq!(reaped, pid, "wait4");
        let status = std::os::unix::process::ExitStatusExt::from_raw(status);
        (
            Output {
                status,
                stdout,
                stderr,
            },
            start.elapsed(),
            usage.ru_maxrss,
        )
    })
    .await
    .unwrap()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn parties(a: &FakeParty, b: &FakeParty) -> Vec<String> {
    args(&["--party-a", &a.url, "--party-b", &b.url])
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn timeout_holds_and_the_error_is_printed_once() {
    for (behaviour, phase) in [
        (Behaviour::SilentConnect, "info"),
        (Behaviour::SilentInfo, "info"),
        (Behaviour::DribbleInfo, "info"),
        (Behaviour::SilentSubmit, "submit"),
        (Behaviour::DribbleAnswer, "answer"),
        (Behaviour::PendingSilent, "events"),
        (Behaviour::SseKeepalive, "events"),
    ] {
        let (a, b) = (fake(Behaviour::Honest).await, fake(behaviour).await);
        let mut cmd = args(&["query", "--index", "3", "--timeout", "2"]);
        cmd.extend(parties(&a, &b));
        let (out, took, _) = pirq(cmd).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{behaviour:?}: {err}");
        assert!(took < Duration::from_secs(3), "{behaviour:?}: {took:?}");
        let want = format!(
            "error: party B ({}): {phase}: no answer within 2 s (the lookup's deadline)\n",
            b.url
        );
        assert_eq!(err, want, "{behaviour:?}");
        assert!(out.stdout.is_empty());
    }
    // A transport error: the cause chain once, each cause once.
    let a = fake(Behaviour::Honest).await;
    let mut cmd = args(&["query", "--index", "3", "--party-a", &a.url]);
    cmd.extend(args(&["--party-b", "http://127.0.0.1:1"]));
    let (out, _, _) = pirq(cmd).await;
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: party B (http://127.0.0.1:1): info: cannot connect: "),
        "{err}"
    );
    assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
    assert!(!err.contains('\u{1b}'), "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_one_gigabyte_answer_costs_the_client_no_memory() {
    for behaviour in [Behaviour::HugeAnswer, Behaviour::HugeInfo] {
        let (a, b) = (fake(Behaviour::Honest).await, fake(behaviour).await);
        let mut cmd = args(&["query", "--index", "3", "--timeout", "60"]);
        cmd.extend(parties(&a, &b));
        let (out, _, max_rss_kib) = pirq(cmd).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("is larger than") && err.contains("party B"),
            "{err}"
        );
        assert!(
            max_rss_kib < 100 * 1024,
            "{behaviour:?}: peak RSS {max_rss_kib} KiB"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_error_text_reaches_the_terminal_clean() {
    let (a, b) = (
        fake(Behaviour::Honest).await,
        fake(Behaviour::HostileError).await,
    );
    let mut cmd = args(&["query", "--index", "3"]);
    cmd.extend(parties(&a, &b));
    let (out, _, _) = pirq(cmd).await;
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    let line = err.trim_end_matches('\n');
    assert!(!line.chars().any(char::is_control), "{line:?}");
    assert!(
        line.chars().count() < 450,
        "{} characters",
        line.chars().count()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn pages_to_stdout_and_as_json() {
    let (a, b) = (fake(Behaviour::Honest).await, fake(Behaviour::Honest).await);
    let page = |i| {
        let mut p = vec![0u8; 256];
        pirq_shared::synthetic::fill_page(FakeConfig::default().seed, i, &mut p);
        p
    };
    let mut cmd = args(&["query", "--index", "5", "--index", "9", "--out", "-"]);
    cmd.extend(parties(&a, &b));
    let (out, _, _) = pirq(cmd).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, [page(5), page(9)].concat());
    assert!(stderr(&out).contains("2 page(s) at epoch 0"));
    assert!(!std::path::Path::new("-").exists(), "no directory named -");

    for (how, encode) in [
        ("hex", (|b: &[u8]| hex::encode(b)) as fn(&[u8]) -> String),
        ("base64", |b: &[u8]| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(b)
        }),
    ] {
        let mut cmd = args(&[
            "query", "--index", "5", "--index", "9", "--json", "--bytes", how,
        ]);
        cmd.extend(parties(&a, &b));
        let (out, _, _) = pirq(cmd).await;
        assert!(out.status.success(), "{}", stderr(&out));
        let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        for (line, i) in lines.iter().zip([5u64, 9]) {
            assert_eq!(line["index"], i);
            assert_eq!(line["page"], encode(&page(i)));
            assert_eq!(line["epoch"], 0);
            assert_eq!(line["digest"].as_str().map(str::len), Some(64));
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn get_reads_a_keys_file_and_prints_json() {
    let kv = || FakeConfig {
        kv_records: 40,
        ..FakeConfig::default()
    };
    let (a, b) = (
        FakeParty::start(kv()).await.unwrap(),
        FakeParty::start(kv()).await.unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.txt");
    std::fs::write(&file, "key-1\nkey-39\r\n\nno such key\n").unwrap();
    let mut cmd = args(&["get", "--key-encoding", "utf8", "--json", "--keys-file"]);
    cmd.push(file.display().to_string());
    cmd.extend(parties(&a, &b));
    let (out, _, _) = pirq(cmd).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "one key is absent: {}",
        stderr(&out)
    );
    let err = stderr(&out);
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    // Keys are written back the way they were given (text here), values as the table records
    // them (this table records nothing: hex).
    assert_eq!(lines[0]["key"], "key-1");
    assert_eq!(kv_key(1), b"key-1");
    assert_eq!(lines[0]["value"], hex::encode(kv_value(1)));
    assert_eq!(lines[1]["value"], hex::encode(kv_value(39)));
    assert_eq!(lines[2]["key"], "no such key");
    // A keys file says how far it got: one summary line on standard error when it is no
    // terminal, without control characters.
    assert!(err.contains("looked up 3 keys: 2 found, 1 absent"), "{err}");
    assert!(!err.contains('\x1b') && !err.contains('\r'), "{err:?}");
    assert!(lines[2]["value"].is_null());
    // All three lookups went out as one query per party.
    use std::sync::atomic::Ordering;
    assert_eq!(b.stats.submits.load(Ordering::Relaxed), 1);

    // On a terminal: a bar over the keys, cleared before the same summary line.
    let mut cmd = args(&["get", "--key-encoding", "utf8", "--keys-file"]);
    cmd.push(file.display().to_string());
    cmd.extend(parties(&a, &b));
    let (status, said) = tokio::task::spawn_blocking(move || {
        pirq_on_a_terminal(&cmd.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    assert_eq!(status.code(), Some(1), "{said}");
    let cleared = said
        .rfind("\x1b[2K")
        .unwrap_or_else(|| panic!("no bar: {said:?}"));
    assert!(said[..cleared].contains("keys"), "{said:?}");
    assert!(
        said[cleared..].contains("looked up 3 keys: 2 found, 1 absent"),
        "{said:?}"
    );

    // A table that records no encodings (built before they were recorded) reads keys as hex:
    // plain output, grep's exit status.
    let mut cmd = args(&["get", "--key", &hex::encode(kv_key(2))]);
    cmd.extend(parties(&a, &b));
    let (out, _, _) = pirq(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("{}\n", hex::encode(kv_value(2)))
    );
}

/// `pirq bench load --kv-records` reads a CSV export as `pirq kv build` does, its key and value
/// columns named (issue 37 item 8): every value it finds checked; without the names the header
/// line is a record, refused.
#[tokio::test(flavor = "multi_thread")]
async fn bench_load_reads_csv_columns_by_name() {
    let kv = || FakeConfig {
        kv_records: 40,
        ..FakeConfig::default()
    };
    let (a, b) = (
        FakeParty::start(kv()).await.unwrap(),
        FakeParty::start(kv()).await.unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("export.csv");
    // The fake table records no encodings: keys and values are hex.
    let mut text = String::from("id,value,key\n");
    for i in 0..40 {
        text.push_str(&format!(
            "{i},{},{}\n",
            hex::encode(kv_value(i)),
            hex::encode(kv_key(i))
        ));
    }
    std::fs::write(&csv, text).unwrap();
    let report = dir.path().join("report.json");
    let load = |columns: &[&str]| {
        let mut cmd = args(&["bench", "load", "--kv-records"]);
        cmd.push(csv.display().to_string());
        cmd.extend(args(columns));
        cmd.extend(args(&[
            "--kv-absent",
            "0",
            "--duration",
            "1",
            "--warmup",
            "0",
            "--concurrency",
            "1",
            "--quiet",
            "--json",
        ]));
        cmd.push(report.display().to_string());
        cmd.extend(parties(&a, &b));
        pirq(cmd)
    };
    let (out, _, _) = load(&["--kv-key-column", "key", "--kv-value-column", "value"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(report["ok"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["errors"], serde_json::json!({}), "{report}");

    let (out, _, _) = load(&[]).await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("line 1"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn flags_that_cannot_work_are_refused() {
    let (out, _, _) = pirq(args(&[
        "query",
        "--index",
        "1",
        "--timeout",
        "0",
        "--party-a",
        "http://127.0.0.1:1",
        "--party-b",
        "http://127.0.0.1:2",
    ]))
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("must be at least 1 second"),
        "{}",
        stderr(&out)
    );

    let (out, took, _) = pirq(args(&[
        "query",
        "--index",
        "1",
        "--party-a",
        "http://pir-a.example.invalid:8080",
        "--party-b",
        "http://127.0.0.1:2",
    ]))
    .await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("refusing plain http://") && err.contains("--insecure-http"),
        "{err}"
    );
    assert!(
        took < Duration::from_secs(2),
        "refused before any connection: {took:?}"
    );

    // epoch push: the same rule, before the update file is even read.
    let (out, _, _) = pirq(args(&[
        "epoch",
        "push",
        "--party",
        "http://pir-a.example.invalid:8080",
        "--token",
        "t",
        "--from",
        "/nonexistent/update.bin",
    ]))
    .await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("refusing plain http://"), "{err}");

    for shell in ["bash", "zsh", "fish"] {
        let (out, _, _) = pirq(args(&["completions", shell])).await;
        assert!(out.status.success());
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(
            script.contains("pirq") && script.contains("query"),
            "{shell}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_roots_and_tokens_from_flags_or_the_environment() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_pem = ca_params.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca_params, ca_key);
    let party = |token: &'static str| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        FakeConfig {
            tls: Some((cert.pem().into_bytes(), key.serialize_pem().into_bytes())),
            token: Some(token.into()),
            ..FakeConfig::default()
        }
    };
    let a = FakeParty::start(party("secret-token-a")).await.unwrap();
    let b = FakeParty::start(party("secret-token-b")).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca_pem).unwrap();
    let ca = ca_file.display().to_string();

    let mut cmd = args(&["query", "--index", "4", "--ca-cert", &ca]);
    cmd.extend(args(&[
        "--token-a",
        "secret-token-a",
        "--token-b",
        "secret-token-b",
    ]));
    cmd.extend(parties(&a, &b));
    let (out, _, _) = pirq(cmd).await;
    assert!(out.status.success(), "{}", stderr(&out));

    let env = |ta: &str| {
        vec![
            ("PIRQ_CA_CERT".to_string(), ca.clone()),
            ("PIRQ_TOKEN_A".to_string(), ta.to_string()),
            ("PIRQ_TOKEN_B".to_string(), "secret-token-b".to_string()),
        ]
    };
    let mut cmd = args(&["query", "--index", "4"]);
    cmd.extend(parties(&a, &b));
    let (out, _, _) = pirq_with_env(cmd.clone(), env("secret-token-a")).await;
    assert!(out.status.success(), "{}", stderr(&out));

    // A wrong token: refused by party A, and no token appears in what is printed.
    let (out, _, _) = pirq_with_env(cmd.clone(), env("secret-token-wrong")).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("party A") && err.contains("unauthorized"),
        "{err}"
    );
    assert!(!err.contains("secret-token"), "{err}");
    // --help shows no token from the environment either.
    let (out, _, _) = pirq_with_env(args(&["query", "--help"]), env("secret-token-a")).await;
    assert!(!String::from_utf8_lossy(&out.stdout).contains("secret-token"));
    // Without the CA: the handshake fails, naming party A's info phase.
    let (out, _, _) = pirq(cmd).await;
    assert!(stderr(&out).contains("info: "), "{}", stderr(&out));
}

/// A listener standing in for a proxy on loopback: it answers every connection with a canned
/// push answer and keeps the first line of each request (`CONNECT host:443 …`, `POST
/// http://…`), so a test can tell whether `pirq` went through it.
fn recording_proxy() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut line = String::new();
            let _ = BufReader::new(&mut conn).read_line(&mut line);
            log.lock().unwrap().push(line.trim_end().to_string());
            let body = r#"{"epoch":7}"#;
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, seen)
}

/// A loopback port nobody listens on (bound, then closed).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Issue 36, items 1, 2 and 10: `localhost.` and its spellings are names a resolver sends to
/// DNS, so they get no plain HTTP; credentials in a party URL are refused unprinted; and no
/// proxy is ever taken from the environment (a proxy there read both keys and the admin
/// token), only `--proxy`, and then by CONNECT to https:// parties only.
#[tokio::test(flavor = "multi_thread")]
async fn no_plaintext_detours_dotted_localhost_environment_proxies_or_url_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let update = dir.path().join("update.json");
    std::fs::write(&update, r#"{"epoch": 1, "pages": []}"#).unwrap();
    let update = update.to_str().unwrap().to_string();

    for host in ["localhost.", "LOCALHOST.", "localhost%2e"] {
        let url = format!("http://{host}:8080");
        let (out, _, _) = pirq(args(&[
            "query",
            "--index",
            "1",
            "--party-a",
            &url,
            "--party-b",
            "http://127.0.0.1:2",
        ]))
        .await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("refusing plain http://"), "{host}: {err}");
        let (out, _, _) = pirq(args(&[
            "epoch", "push", "--party", &url, "--token", "t", "--from", &update,
        ]))
        .await;
        let err = stderr(&out);
        assert!(err.contains("refusing plain http://"), "{host}: {err}");
    }

    let (out, _, _) = pirq(args(&[
        "epoch",
        "push",
        "--party",
        "https://admin:secret-pass@pir.example.invalid",
        "--token",
        "t",
        "--from",
        &update,
    ]))
    .await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--token-a") && !err.contains("secret-pass"),
        "{err}"
    );

    // Every proxy variable pointing at the recording proxy: the push goes straight to the
    // (closed) party port and fails to connect; the proxy hears nothing.
    let (proxy, seen) = recording_proxy();
    let party = format!("http://127.0.0.1:{}", closed_port());
    let env: Vec<(String, String)> = [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ]
    .iter()
    .map(|v| (v.to_string(), proxy.clone()))
    .chain([("NO_PROXY".to_string(), String::new())])
    .collect();
    let (out, _, _) = pirq_with_env(
        args(&[
            "epoch", "push", "--party", &party, "--token", "admin-t", "--from", &update,
        ]),
        env.clone(),
    )
    .await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot connect"), "{err}");
    let (out, _, _) = pirq_with_env(
        args(&[
            "query",
            "--index",
            "1",
            "--party-a",
            &party,
            "--party-b",
            &party,
        ]),
        env,
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );

    // --proxy: an https party is reached by CONNECT through it; a plain-http one directly.
    let (out, _, _) = pirq(args(&[
        "epoch",
        "push",
        "--party",
        "https://pir-a.example.invalid:8443",
        "--proxy",
        &proxy,
        "--token",
        "t",
        "--from",
        &update,
    ]))
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let (out, _, _) = pirq(args(&[
        "epoch", "push", "--party", &party, "--proxy", &proxy, "--token", "t", "--from", &update,
    ]))
    .await;
    assert!(stderr(&out).contains("cannot connect"), "{}", stderr(&out));
    assert_eq!(
        *seen.lock().unwrap(),
        ["CONNECT pir-a.example.invalid:8443 HTTP/1.1"]
    );
}
