//! The examples of `client/examples/` run against fake parties (built here when a filtered
//! `cargo test --test examples` did not build them).

use std::path::PathBuf;
use std::process::Command;

use pirq_testkit::fake_party::{kv_value, FakeConfig, FakeParty};

/// The example's binary under `target/<profile>/examples/` (beside this test's own `deps/`):
/// `<name>`, or the newest `<name>-<hash>` that cargo built; built with the test's profile
/// first when a filtered `cargo test --test examples` did not build it.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>");
    let examples = dir.join("examples");
    let find = || -> Option<PathBuf> {
        let plain = examples.join(name);
        if plain.is_file() {
            return Some(plain);
        }
        std::fs::read_dir(&examples)
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                let file = p.file_name().and_then(|f| f.to_str()).unwrap_or_default();
                file.strip_prefix(name)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|hash| !hash.contains('.'))
            })
            .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
    };
    if let Some(path) = find() {
        return path;
    }
    let mut build = Command::new(env!("CARGO"));
    build.args(["build", "-p", "pirq-client", "--examples"]);
    if dir.ends_with("release") {
        build.arg("--release");
    }
    assert!(
        build.status().expect("running cargo").success(),
        "building the examples"
    );
    find().unwrap_or_else(|| panic!("no {name} example under {}", examples.display()))
}

/// Runs an example with the parties' URLs in its environment; its standard output.
async fn run(name: &str, a: &FakeParty, b: &FakeParty, args: &[&str]) -> String {
    let path = example(name);
    let (a, b) = (a.url.clone(), b.url.clone());
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&path)
            .args(&args)
            .env("PIRQ_PARTY_A", a)
            .env("PIRQ_PARTY_B", b)
            .env_remove("PIRQ_CA_CERT")
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", path.display()))
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name}: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread")]
async fn the_examples_run() {
    let a = FakeParty::start(FakeConfig::default()).await.unwrap();
    let b = FakeParty::start(FakeConfig::default()).await.unwrap();
    let mut page = vec![0u8; 256];
    pirq_shared::synthetic::fill_page(FakeConfig::default().seed, 42, &mut page);
    let first: String = page[..8].iter().map(|b| format!("{b:02x}")).collect();
    let out = run("page_lookup", &a, &b, &["42"]).await;
    assert_eq!(
        out.trim(),
        format!("page 42: 256 bytes at epoch 0, first bytes {first}")
    );

    let kv = || FakeConfig {
        kv_records: 50,
        ..FakeConfig::default()
    };
    let (a, b) = (
        FakeParty::start(kv()).await.unwrap(),
        FakeParty::start(kv()).await.unwrap(),
    );
    let value = |i| String::from_utf8(kv_value(i)).unwrap();
    let out = run("kv_get", &a, &b, &["key-3"]).await;
    assert_eq!(out.trim(), format!("key-3: {}", value(3)));
    assert_eq!(
        run("kv_get", &a, &b, &["nope"]).await.trim(),
        "nope: absent"
    );
    let out = run("batch", &a, &b, &["key-1", "nope", "key-49"]).await;
    assert_eq!(
        out,
        format!(
            "key-1: {}\nnope: absent\nkey-49: {}\n3 keys at epoch 0; /v1/info read 2 times for two lookups\n",
            value(1),
            value(49)
        )
    );
}
