//! Issue 27's offline tools (`docs/spec/signed.md`): publisher keys, signed databases from
//! every writer, `pirq db verify --publisher-key` refusing a flipped byte and another
//! publisher, signed updates and `pirq db apply` keeping every page signed.

use std::path::{Path, PathBuf};

use pirq_db::PirDb;
use pirq_shared::signing::PublisherKey;

mod common;
// Here `ok` is everything a tool said: the signing tools report on standard error.
use common::{fails, hex_kv_build, pirq, s, said as ok, stderr};

/// `dir/g.pirdb`: 100 pages of 256 bytes signed with `secret`.
fn signed_gen(dir: &Path, secret: &str) -> PathBuf {
    let gen = dir.join("g.pirdb");
    ok(&[
        "db",
        "gen",
        "--pages",
        "100",
        "--page-size",
        "256",
        "--out",
        s(&gen),
        "--sign-key",
        secret,
    ]);
    gen
}

/// A key pair in `dir` named `name`: (secret file, public file).
fn keygen(dir: &Path, name: &str) -> (String, String) {
    let secret = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub"));
    let said = ok(&[
        "publisher",
        "keygen",
        "--secret",
        s(&secret),
        "--public",
        s(&public),
    ]);
    let secret_text = std::fs::read_to_string(&secret).unwrap();
    assert!(
        !said.contains(secret_text.trim()),
        "keygen printed the secret key"
    );
    (s(&secret).to_string(), s(&public).to_string())
}

#[test]
fn keygen_writes_a_private_secret_and_a_pinnable_public_key() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (secret, public) = keygen(dir.path(), "pub");
    let mode = std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&public).unwrap();
    assert!(
        text.starts_with("pirq-publisher-public-v1:") && text.len() == 25 + 65,
        "the prefix, 64 hex digits and a newline: {text:?}"
    );
    PublisherKey::parse_file(&text).unwrap();
    // Issue 36, item 6: the secret where the public key goes is refused, and not printed.
    let secret_hex = std::fs::read_to_string(&secret).unwrap();
    let secret_hex = secret_hex.trim().rsplit(':').next().unwrap().to_string();
    let err = fails(&[
        "query",
        "--index",
        "1",
        "--party-a",
        "http://127.0.0.1:1",
        "--party-b",
        "http://127.0.0.2:1",
        "--publisher-key",
        &secret,
    ]);
    assert!(err.contains("SECRET key file"), "{err}");
    assert!(!err.contains(&secret_hex[..16]), "{err}");
    // Never over an existing key.
    let err = fails(&[
        "publisher",
        "keygen",
        "--secret",
        &secret,
        "--public",
        &format!("{public}.2"),
    ]);
    assert!(err.contains("exists"), "{err}");
    // A secret others can read is refused by the tools that sign.
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = dir.path().join("g.pirdb");
    let err = fails(&[
        "db",
        "gen",
        "--pages",
        "10",
        "--page-size",
        "256",
        "--out",
        s(&out),
        "--sign-key",
        &secret,
    ]);
    assert!(err.contains("chmod 600"), "{err}");
    assert!(!out.exists());
}

#[test]
fn signed_databases_verify_and_tampering_or_another_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (secret, public) = keygen(d, "a");
    let (_, other_public) = keygen(d, "b");
    let gen = d.join("g.pirdb");
    ok(&[
        "db",
        "gen",
        "--pages",
        "300",
        "--page-size",
        "512",
        "--out",
        s(&gen),
        "--sign-key",
        &secret,
    ]);
    let said = ok(&["db", "verify", s(&gen), "--publisher-key", &public]);
    assert!(
        said.contains("all 300 pages carry valid signatures"),
        "{said}"
    );
    let info: serde_json::Value = serde_json::from_str(&ok(&["db", "info", s(&gen)])).unwrap();
    assert_eq!(info["usable"], 440);
    assert_eq!(info["signing"]["scheme"], "ed25519");
    assert_eq!(
        info["signing"]["publisher_key"],
        std::fs::read_to_string(&public)
            .unwrap()
            .trim()
            .trim_start_matches("pirq-publisher-public-v1:")
    );
    let err = fails(&["db", "verify", s(&gen), "--publisher-key", &other_public]);
    assert!(err.contains("is signed by publisher key"), "{err}");

    // One flipped bit anywhere in a page, its tail included: refused, naming the page.
    for at in [3usize, 439, 440, 511] {
        let mut bytes = std::fs::read(&gen).unwrap();
        bytes[4096 + 512 * 17 + at] ^= 0x10;
        let bad = d.join(format!("bad{at}.pirdb"));
        std::fs::write(&bad, &bytes).unwrap();
        let err = fails(&["db", "verify", s(&bad), "--publisher-key", &public]);
        assert!(
            err.contains("page 17: the signature does not verify"),
            "{at}: {err}"
        );
    }

    // Imported bytes: pages of U = 256 - 72 bytes; signing an unsigned import cuts it again.
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 253) as u8).collect();
    let input = d.join("data.bin");
    std::fs::write(&input, &data).unwrap();
    let imported = d.join("i.pirdb");
    ok(&[
        "db",
        "import",
        "--input",
        s(&input),
        "--page-size",
        "256",
        "--out",
        s(&imported),
        "--sign-key",
        &secret,
    ]);
    let unsigned = d.join("iu.pirdb");
    ok(&[
        "db",
        "import",
        "--input",
        s(&input),
        "--page-size",
        "256",
        "--out",
        s(&unsigned),
    ]);
    let resigned = d.join("is.pirdb");
    ok(&[
        "db",
        "sign",
        "--db",
        s(&unsigned),
        "--sign-key",
        &secret,
        "--out",
        s(&resigned),
    ]);
    for file in [&imported, &resigned] {
        ok(&["db", "verify", s(file), "--publisher-key", &public]);
        let db = PirDb::open(file).unwrap();
        assert_eq!(db.num_pages(), 5000u64.div_ceil(184));
        let usable: Vec<u8> = (0..db.num_pages())
            .flat_map(|p| db.page(p).unwrap()[..184].to_vec())
            .take(5000)
            .collect();
        assert_eq!(usable, data, "{}", file.display());
    }
    // A plain file whose tails hold data cannot be signed in place.
    let plain = d.join("u.pirdb");
    ok(&[
        "db",
        "gen",
        "--pages",
        "10",
        "--page-size",
        "256",
        "--out",
        s(&plain),
    ]);
    let err = fails(&[
        "db",
        "sign",
        "--db",
        s(&plain),
        "--sign-key",
        &secret,
        "--out",
        s(&d.join("x.pirdb")),
    ]);
    assert!(
        err.contains("page 0 has data in its last 72 bytes"),
        "{err}"
    );
}

#[test]
fn signed_updates_keep_every_page_signed_and_unsigned_ones_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (secret, public) = keygen(d, "a");
    let (other_secret, _) = keygen(d, "b");
    let gen = signed_gen(d, &secret);
    let signed = d.join("e1.bin");
    let make = |manifests: Option<&Path>| {
        let mut args = vec![
            "epoch".to_string(),
            "make".into(),
            "--db".into(),
            s(&gen).into(),
            "--epoch".into(),
            "1".into(),
            "--pages".into(),
            "5".into(),
            "--out".into(),
            s(&signed).into(),
            "--sign-key".into(),
            secret.clone(),
        ];
        if let Some(m) = manifests {
            args.extend(["--manifests".into(), s(m).into()]);
        }
        args
    };
    let run = |args: Vec<String>| pirq(&args.iter().map(String::as_str).collect::<Vec<_>>());
    // Issue 36, items 9 and 10: --sign-key without --manifests is refused (every verifying
    // client would refuse the pages it did not replace), and a manifest that cannot be
    // appended leaves no update file behind.
    let out = run(make(None));
    assert!(
        stderr(&out).contains("--sign-key needs --manifests"),
        "{}",
        stderr(&out)
    );
    let out = run(make(Some(&d.join("no-such-dir/manifests.json"))));
    assert!(!out.status.success());
    assert!(
        !signed.exists(),
        "the update was left behind: {}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_dir(d)
            .unwrap()
            .filter(|e| e
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with('.'))
            .count(),
        0,
        "a temporary file was left behind"
    );
    let out = run(make(Some(&d.join("manifests.json"))));
    assert!(out.status.success(), "{}", stderr(&out));
    let snapshot = d.join("g1.pirdb");
    ok(&[
        "db",
        "apply",
        "--db",
        s(&gen),
        "--update",
        s(&signed),
        "--out",
        s(&snapshot),
    ]);
    ok(&["db", "verify", s(&snapshot), "--publisher-key", &public]);
    let db = PirDb::open(&snapshot).unwrap();
    let changed: Vec<u64> = (0..100)
        .filter(|&p| pirq_shared::signing::changed_epoch(db.page(p).unwrap()) == 1)
        .collect();
    assert!(!changed.is_empty() && changed.len() <= 5, "{changed:?}");

    let unsigned = d.join("e1u.bin");
    ok(&[
        "epoch",
        "make",
        "--db",
        s(&gen),
        "--epoch",
        "1",
        "--pages",
        "5",
        "--out",
        s(&unsigned),
    ]);
    let err = fails(&[
        "db",
        "apply",
        "--db",
        s(&gen),
        "--update",
        s(&unsigned),
        "--out",
        s(&d.join("x.pirdb")),
    ]);
    assert!(
        err.contains("is not signed by the database's publisher"),
        "{err}"
    );
    let err = fails(&[
        "epoch",
        "make",
        "--db",
        s(&gen),
        "--epoch",
        "1",
        "--pages",
        "5",
        "--out",
        s(&d.join("e1x.bin")),
        "--sign-key",
        &other_secret,
    ]);
    assert!(
        err.contains("the database is signed by publisher key"),
        "{err}"
    );
}

/// The manifests in `file`, each checked against the database's signing block.
fn manifests_of(file: &Path, db: &Path) -> Vec<pirq_shared::signing::Manifest> {
    use pirq_shared::signing::Manifest;
    let list = Manifest::parse_list(&std::fs::read(file).unwrap()).unwrap();
    let block = *PirDb::open(db).unwrap().signing().unwrap();
    Manifest::check_chain(&list, &block).unwrap();
    list
}

#[test]
fn signed_updates_append_their_manifests_and_a_bad_manifest_file_is_never_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (secret, _) = keygen(d, "a");
    let (other_secret, _) = keygen(d, "b");
    let gen = signed_gen(d, &secret);
    let manifests = d.join("manifests.json");
    let make = |epoch: &str, out: &Path, key: &str| {
        pirq(&[
            "epoch",
            "make",
            "--db",
            s(&gen),
            "--epoch",
            epoch,
            "--pages",
            "4",
            "--seed",
            epoch,
            "--out",
            s(out),
            "--sign-key",
            key,
            "--manifests",
            s(&manifests),
        ])
    };
    // Epoch 1 creates the file, epoch 2 (made from the same base) appends to it.
    let (e1, e2) = (d.join("e1.bin"), d.join("e2.json"));
    for (epoch, out) in [("1", &e1), ("2", &e2)] {
        let said = make(epoch, out, &secret);
        assert!(said.status.success(), "{}", stderr(&said));
        assert!(
            stderr(&said).contains(&format!("appended the manifest of epoch {epoch}")),
            "{}",
            stderr(&said)
        );
    }
    let list = manifests_of(&manifests, &gen);
    assert_eq!(list.iter().map(|m| m.epoch).collect::<Vec<_>>(), [1, 2]);
    // Each manifest names exactly the pages its update replaced, and the digest a party that
    // applied the updates stamps (the snapshot's).
    let snapshot = d.join("g2.pirdb");
    ok(&[
        "db",
        "apply",
        "--db",
        s(&gen),
        "--update",
        s(&e1),
        "--update",
        s(&e2),
        "--out",
        s(&snapshot),
    ]);
    let snap = PirDb::open(&snapshot).unwrap();
    assert_eq!(list[1].digest, snap.digest());
    for m in &list {
        let update = pirq_shared::update::EpochUpdate::parse_file(
            &std::fs::read(if m.epoch == 1 { &e1 } else { &e2 }).unwrap(),
        )
        .unwrap();
        let mut pages: Vec<u64> = update.pages.iter().map(|w| w.index).collect();
        pages.sort_unstable();
        pages.dedup();
        assert_eq!(m.pages, pages, "epoch {}", m.epoch);
    }
    for p in 0..100 {
        let changed = pirq_shared::signing::changed_epoch(snap.page(p).unwrap());
        let newest = list
            .iter()
            .rev()
            .find(|m| m.replaced(p))
            .map_or(0, |m| m.epoch);
        assert_eq!(changed, newest, "page {p}");
    }

    // Refused, and the file and the update left as they were: an epoch already in the file,
    // one after a gap, another publisher's key, an altered file.
    let before = std::fs::read(&manifests).unwrap();
    let x = d.join("x.bin");
    for (epoch, key, says) in [
        (
            "2",
            &secret,
            "ends at epoch 2: the next manifest is epoch 3, not 2",
        ),
        (
            "4",
            &secret,
            "ends at epoch 2: the next manifest is epoch 3, not 4",
        ),
        (
            "3",
            &other_secret,
            "the database is signed by publisher key",
        ),
    ] {
        let out = make(epoch, &x, key);
        assert!(!out.status.success(), "epoch {epoch}");
        assert!(stderr(&out).contains(says), "{}", stderr(&out));
        assert!(!x.exists());
        assert_eq!(std::fs::read(&manifests).unwrap(), before);
    }
    let mut altered = String::from_utf8(before.clone()).unwrap();
    let at = altered.find("\"signature\": \"").unwrap() + 20;
    let digit = if &altered[at..at + 1] == "0" {
        "1"
    } else {
        "0"
    };
    altered.replace_range(at..at + 1, digit);
    std::fs::write(&manifests, &altered).unwrap();
    let out = make("3", &x, &secret);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("is not this database's manifest file"),
        "{}",
        stderr(&out)
    );
    assert!(!x.exists());
    assert_eq!(std::fs::read_to_string(&manifests).unwrap(), altered);
    // The manifest file is never one of the command's other files.
    let out = pirq(&[
        "epoch",
        "make",
        "--db",
        s(&gen),
        "--epoch",
        "1",
        "--pages",
        "1",
        "--out",
        s(&x),
        "--sign-key",
        &secret,
        "--manifests",
        s(&gen),
    ]);
    assert!(stderr(&out).contains("is also"), "{}", stderr(&out));
    // A new file starts at the epoch after the database's.
    let fresh = d.join("fresh.json");
    let out = pirq(&[
        "epoch",
        "make",
        "--db",
        s(&gen),
        "--epoch",
        "2",
        "--pages",
        "1",
        "--out",
        s(&x),
        "--sign-key",
        &secret,
        "--manifests",
        s(&fresh),
    ]);
    assert!(
        stderr(&out).contains("holds no manifest yet"),
        "{}",
        stderr(&out)
    );
    assert!(!fresh.exists() && !x.exists());

    // kv update: the manifest names the pages the update replaced.
    let records = d.join("r.jsonl");
    let lines: Vec<String> = (0..50)
        .map(|i| serde_json::json!({"key": format!("{i:04x}"), "value": "00ff"}).to_string())
        .collect();
    std::fs::write(&records, lines.join("\n") + "\n").unwrap();
    let kv = d.join("kv.pirdb");
    ok(&hex_kv_build(
        s(&records),
        "2",
        s(&kv),
        &["--page-size", "256", "--sign-key", &secret],
    ));
    let changes = d.join("c.jsonl");
    std::fs::write(
        &changes,
        "{\"key\":\"0003\",\"value\":\"abcd\"}\n{\"key\":\"0100\",\"value\":\"0001\"}\n",
    )
    .unwrap();
    let kv_manifests = d.join("kv-manifests.json");
    let kv1 = d.join("kv1.json");
    ok(&[
        "kv",
        "update",
        "--db",
        s(&kv),
        "--changes",
        s(&changes),
        "--epoch",
        "1",
        "--out",
        s(&kv1),
        "--sign-key",
        &secret,
        "--manifests",
        s(&kv_manifests),
    ]);
    let list = manifests_of(&kv_manifests, &kv);
    let update =
        pirq_shared::update::EpochUpdate::parse_file(&std::fs::read(&kv1).unwrap()).unwrap();
    let mut pages: Vec<u64> = update.pages.iter().map(|w| w.index).collect();
    pages.sort_unstable();
    assert_eq!(list.len(), 1);
    assert_eq!((list[0].epoch, &list[0].pages), (1, &pages));
    // Without --sign-key there is nothing to sign a manifest with.
    let out = pirq(&[
        "kv",
        "update",
        "--db",
        s(&kv),
        "--changes",
        s(&changes),
        "--epoch",
        "1",
        "--out",
        s(&x),
        "--manifests",
        s(&kv_manifests),
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--sign-key"), "{}", stderr(&out));
}
