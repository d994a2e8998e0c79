//! Issue 26 end to end: a user's own data through real parties (redis-server, gateway and
//! worker processes, two parties). A file imported with `pirq db import` comes back from
//! `pirq query` byte for byte; a set answers `pirq get --key-text` with `present` / `absent` and
//! grep's exit statuses; a table of variable-size values gives back exactly the stored bytes,
//! the empty value and the largest included. The parties switch databases with `--replace-db`,
//! as an operator would.

use pirq_client::{Client, Options};
use pirq_e2e::cli::{arg, pirq, pirq_ok};
use pirq_e2e::{serve_database, Party, PartyOptions};

/// `pirq get` against both parties with `keys` as `--key-text`: (exit code, stdout).
fn get_text(a: &Party, b: &Party, keys: &[&str]) -> (Option<i32>, String) {
    let mut args = vec!["get", "--party-a", &a.url, "--party-b", &b.url];
    for k in keys {
        args.extend(["--key-text", k]);
    }
    let out = pirq(&args);
    (out.status.code(), String::from_utf8(out.stdout).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_pages_a_set_and_variable_values_through_two_parties() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // 1. An imported file: 10 pages of 256 bytes, the last one 196 bytes of data and padding.
    let data: Vec<u8> = (0..2500u32).map(|i| (i * 13 % 256) as u8).collect();
    std::fs::write(d.join("data.bin"), &data).unwrap();
    let imported = d.join("data.pirdb");
    pirq_ok(&[
        "db",
        "import",
        "--input",
        arg(&d.join("data.bin")),
        "--page-size",
        "256",
        "--out",
        arg(&imported),
    ]);
    let (mut a, mut b) = tokio::try_join!(
        Party::start(&imported, "own-a", PartyOptions::default()),
        Party::start(&imported, "own-b", PartyOptions::default()),
    )
    .unwrap();
    let pages = d.join("pages");
    pirq_ok(&[
        "query",
        "--party-a",
        &a.url,
        "--party-b",
        &b.url,
        "--index",
        "3",
        "--index",
        "9",
        "--out",
        arg(&pages),
    ]);
    let page = |p: usize| std::fs::read(pages.join(format!("page-{p}.bin"))).unwrap();
    assert_eq!(page(3), &data[768..1024]);
    assert_eq!(&page(9)[..196], &data[2304..]);
    assert!(page(9)[196..].iter().all(|b| *b == 0));

    // 2. A set of text keys.
    let members: Vec<String> = (0..200).map(|i| format!("user-{i}@example.com")).collect();
    let mut csv = String::from("key\n");
    for m in &members {
        csv.push_str(m);
        csv.push('\n');
    }
    std::fs::write(d.join("set.csv"), csv).unwrap();
    let set = d.join("set.pirdb");
    pirq_ok(&[
        "kv",
        "build",
        "--value-encoding",
        "hex",
        "--records",
        arg(&d.join("set.csv")),
        "--value-size",
        "0",
        "--key-encoding",
        "utf8",
        "--page-size",
        "256",
        "--out",
        arg(&set),
    ]);
    serve_database(&mut [&mut a, &mut b], &set).await;
    assert_eq!(
        get_text(&a, &b, &[&members[7], &members[199]]),
        (Some(0), "present\npresent\n".into())
    );
    assert_eq!(
        get_text(
            &a,
            &b,
            &[&members[7], "user-200@example.com", "USER-7@example.com"]
        ),
        (Some(1), "present\nabsent\nabsent\n".into())
    );

    // 3. Variable-size values, up to 40 bytes: every length from 0 to 40.
    let values: Vec<Vec<u8>> = (0..=40u8)
        .map(|n| (0..n).map(|i| i ^ n).collect())
        .collect();
    let lines: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            format!(
                "{{\"key\":\"{}\",\"value\":\"{}\"}}",
                hex::encode(format!("k{i}")),
                hex::encode(v)
            )
        })
        .collect();
    std::fs::write(d.join("var.jsonl"), lines.join("\n") + "\n").unwrap();
    let var = d.join("var.pirdb");
    pirq_ok(&[
        "kv",
        "build",
        "--key-encoding",
        "hex",
        "--value-encoding",
        "hex",
        "--records",
        arg(&d.join("var.jsonl")),
        "--max-value-size",
        "40",
        "--page-size",
        "256",
        "--out",
        arg(&var),
    ]);
    serve_database(&mut [&mut a, &mut b], &var).await;
    let keys: Vec<Vec<u8>> = (0..values.len())
        .map(|i| format!("k{i}").into_bytes())
        .chain([b"k41".to_vec()])
        .collect();
    let client = Client::with_options(&a.url, &b.url, Options::default()).unwrap();
    let got = client.get_many(&keys).await.unwrap();
    for (i, want) in values.iter().enumerate() {
        assert_eq!(got.values[i].as_ref(), Some(want), "k{i}");
    }
    assert_eq!(got.values[values.len()], None);
    let (code, stdout) = get_text(&a, &b, &["k0", "k3", "k41"]);
    assert_eq!(code, Some(1));
    assert_eq!(stdout, format!("\n{}\nabsent\n", hex::encode(&values[3])));
}
