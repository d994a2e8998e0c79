//! Key-value lookups end to end (`docs/spec/kv.md`): `pirq kv gen`/`build`/`update`, `pirq epoch
//! push`, `pirq db apply` and `pirq get` as real processes, two parties of real redis-server,
//! gateway and worker processes, and `Client::get` pinned to every epoch of the window. Every
//! answer is compared with a model of the table at that epoch.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pirq_client::{Client, Options, Party as PartyApi};
use pirq_db::PirDb;
use pirq_e2e::cli::{arg, pirq, pirq_command, pirq_fails, pirq_ok, succeeded};
use pirq_e2e::{cluster_tests_enabled, ClusterShape, Party, PartyOptions};
use rand::RngCore;

const TOKEN: &str = "kv-admin-token";
const VALUE_SIZE: usize = 32;
const KEY_SIZE: usize = 20;

type Records = Vec<(Vec<u8>, Vec<u8>)>;

/// The arguments of `pirq kv build` of the records file `records` into `out`: keys of 20 bytes
/// and values of 32 ([`KEY_SIZE`], [`VALUE_SIZE`]) on 512-byte pages, then `extra`.
fn kv_build<'a>(records: &'a Path, out: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "kv",
        "build",
        "--key-encoding",
        "hex",
        "--value-encoding",
        "hex",
        "--records",
        arg(records),
        "--value-size",
        "32",
        "--key-size",
        "20",
        "--page-size",
        "512",
        "--out",
        arg(out),
    ];
    args.extend_from_slice(extra);
    args
}

/// `pirq kv gen` into `dir/name`, read back.
fn gen(dir: &Path, name: &str, records: u64, seed: u64) -> (PathBuf, Records) {
    let path = dir.join(name);
    pirq_ok(&[
        "kv",
        "gen",
        "--records",
        &records.to_string(),
        "--key-size",
        &KEY_SIZE.to_string(),
        "--value-size",
        &VALUE_SIZE.to_string(),
        "--seed",
        &seed.to_string(),
        "--out",
        arg(&path),
    ]);
    let records = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let hex_of = |f: &str| hex::decode(v[f].as_str().unwrap()).unwrap();
            (hex_of("key"), hex_of("value"))
        })
        .collect();
    (path, records)
}

fn random_value() -> Vec<u8> {
    let mut v = vec![0u8; VALUE_SIZE];
    rand::rng().fill_bytes(&mut v);
    v
}

/// One epoch's changes, as `pirq kv update` lines and as their effect on the model.
struct Changes {
    lines: Vec<String>,
}

impl Changes {
    fn new() -> Changes {
        Changes { lines: Vec::new() }
    }

    fn set(&mut self, model: &mut HashMap<Vec<u8>, Vec<u8>>, key: &[u8], value: Vec<u8>) {
        self.lines.push(format!(
            r#"{{"key":"{}","value":"{}"}}"#,
            hex::encode(key),
            hex::encode(&value)
        ));
        model.insert(key.to_vec(), value);
    }

    fn delete(&mut self, model: &mut HashMap<Vec<u8>, Vec<u8>>, key: &[u8]) {
        self.lines
            .push(format!(r#"{{"key":"{}","delete":true}}"#, hex::encode(key)));
        assert!(
            model.remove(key).is_some(),
            "the test deletes only present keys"
        );
    }
}

async fn wait_epoch(party: &Party, epoch: u64) {
    let api = PartyApi::new(reqwest::Client::new(), &party.url);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if api.info().await.is_ok_and(|i| i.epoch.newest >= epoch) {
            return;
        }
        assert!(Instant::now() < deadline, "epoch {epoch} not applied");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The value of `key` in a local snapshot file (what a lookup must return at its epoch).
fn local_get(db: &PirDb, key: &[u8]) -> Option<Vec<u8>> {
    let kv = db.kv().expect("kv database");
    let tag = kv.tag(key);
    kv.candidates(&tag).iter().find_map(|&p| {
        kv.find(db.page(p).unwrap(), &tag)
            .unwrap()
            .map(<[u8]>::to_vec)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_and_updates_by_key_at_every_pinned_epoch() {
    lookups_and_updates(None, None).await;
}

/// The same with each party's queue in four partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_and_updates_by_key_in_four_partitions() {
    lookups_and_updates(Some(4), None).await;
}

/// The same with each party on a Redis Cluster of 3 primaries, its queue in four partitions on
/// all three primaries (`PIRQ_CLUSTER_TESTS=1`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_and_updates_by_key_on_a_redis_cluster() {
    if !cluster_tests_enabled("lookups_and_updates_by_key_on_a_redis_cluster") {
        return;
    }
    let shape = ClusterShape {
        primaries: 3,
        replicas: 0,
    };
    lookups_and_updates(Some(4), Some(shape)).await;
}

async fn lookups_and_updates(partitions: Option<u32>, redis_cluster: Option<ClusterShape>) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (records_path, records) = gen(d, "records.jsonl", 1000, 11);
    let (_, absent) = gen(d, "absent.jsonl", 1000, 12);
    let (_, fresh) = gen(d, "fresh.jsonl", 180, 13);

    // 512-byte pages hold 10 slots of 48 bytes: 1000 records at load 0.9 take 112 pages (1120
    // slots), and the updates below take it to 1090 records (0.97), where inserts must evict.
    let db0 = d.join("db0.pirdb");
    let built = pirq_ok(&kv_build(
        &records_path,
        &db0,
        &["--load", "0.9", "--seed", "7"],
    ))
    .stderr;
    assert!(built.contains("1000 records in 112 pages"), "{built}");

    let options = PartyOptions {
        gateway_args: vec!["--admin-token".into(), TOKEN.into()],
        worker_args: vec!["--epoch-window".into(), "8".into()],
        partitions,
        redis_cluster,
        ..PartyOptions::default()
    };
    let (a, b) = tokio::try_join!(
        Party::start(&db0, "kv-party-a", options.clone()),
        Party::start(&db0, "kv-party-b", options),
    )
    .unwrap();
    if let (Some(shape), Some(2..)) = (redis_cluster, partitions) {
        for party in [&a, &b] {
            party
                .assert_partitions_on_every_primary(shape.primaries)
                .await;
        }
    }

    // The model of every epoch, and three epochs of updates by key.
    let mut models = vec![records.iter().cloned().collect::<HashMap<_, _>>()];
    let mut snapshots = vec![db0.clone()];
    let mut evictions = 0u64;
    for epoch in 1..=3u64 {
        let mut model = models.last().unwrap().clone();
        let mut c = Changes::new();
        match epoch {
            1 => {
                for (k, v) in &fresh[..100] {
                    c.set(&mut model, k, v.clone());
                }
                for (k, _) in &records[..50] {
                    c.set(&mut model, k, random_value());
                }
                for (k, _) in &records[50..100] {
                    c.delete(&mut model, k);
                }
            }
            2 => {
                for (k, v) in &fresh[100..160] {
                    c.set(&mut model, k, v.clone());
                }
                for (k, _) in &fresh[..20] {
                    c.set(&mut model, k, random_value());
                }
                for (k, _) in &records[100..130] {
                    c.delete(&mut model, k);
                }
                // Keys deleted in epoch 1 come back.
                for (k, _) in &records[50..60] {
                    c.set(&mut model, k, random_value());
                }
            }
            _ => {
                for (k, _) in &fresh[20..40] {
                    c.delete(&mut model, k);
                }
                for (k, v) in &fresh[160..180] {
                    c.set(&mut model, k, v.clone());
                }
                for (k, _) in &records[200..250] {
                    c.set(&mut model, k, random_value());
                }
            }
        }
        let changes = d.join(format!("changes{epoch}.jsonl"));
        std::fs::write(&changes, c.lines.join("\n") + "\n").unwrap();
        let update = d.join(format!("update{epoch}.bin"));
        let prev = snapshots.last().unwrap().clone();
        let summary = pirq_ok(&[
            "kv",
            "update",
            "--db",
            arg(&prev),
            "--changes",
            arg(&changes),
            "--epoch",
            &epoch.to_string(),
            "--seed",
            &epoch.to_string(),
            "--out",
            arg(&update),
        ])
        .stderr;
        evictions += summary
            .split(", ")
            .find_map(|part| part.strip_suffix(" evictions"))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no eviction count in {summary:?}"));
        for party in [&a, &b] {
            let push = [
                "epoch",
                "push",
                "--party",
                &party.url,
                "--from",
                arg(&update),
            ];
            let out = pirq_command(&push).env("PIRQ_ADMIN_TOKEN", TOKEN).output();
            succeeded(&push, out.expect("running pirq"));
        }
        let next = d.join(format!("db{epoch}.pirdb"));
        pirq_ok(&[
            "db",
            "apply",
            "--db",
            arg(&prev),
            "--update",
            arg(&update),
            "--out",
            arg(&next),
        ]);
        snapshots.push(next);
        models.push(model);
    }
    assert!(
        evictions > 0,
        "no update had to evict: the test does not test eviction"
    );
    wait_epoch(&a, 3).await;
    wait_epoch(&b, 3).await;

    let all_keys: Vec<Vec<u8>> = records
        .iter()
        .chain(&fresh)
        .chain(&absent)
        .map(|(k, _)| k.clone())
        .collect();
    let client = Client::with_options(&a.url, &b.url, Options::default()).unwrap();
    for (epoch, model) in models.iter().enumerate() {
        // The snapshot files agree with the model (the update is complete and exact) ...
        let snapshot = PirDb::open(&snapshots[epoch]).unwrap();
        assert_eq!(snapshot.header().epoch, epoch as u64);
        for key in &all_keys {
            assert_eq!(local_get(&snapshot, key).as_ref(), model.get(key));
        }
        // ... and so do the parties, pinned to that epoch.
        let got = client
            .get_many_at(&all_keys, Some(epoch as u64))
            .await
            .unwrap();
        assert_eq!(got.epoch, epoch as u64);
        assert_eq!(got.values.len(), all_keys.len());
        let mut present = 0;
        for (key, value) in all_keys.iter().zip(&got.values) {
            assert_eq!(value.as_ref(), model.get(key), "epoch {epoch}");
            present += value.is_some() as usize;
        }
        assert_eq!(present, model.len());
    }
    // Unpinned: the newest epoch.
    assert_eq!(client.get_many(&all_keys[..10]).await.unwrap().epoch, 3);

    // `pirq get`: values in order, `absent`, and grep's exit statuses.
    let latest = models.last().unwrap();
    let (k1, k2) = (&records[300].0, &records[301].0);
    let hex_key = |k: &[u8]| hex::encode(k);
    let args = |keys: &[String]| {
        let mut v = vec![
            "get".to_string(),
            "--party-a".into(),
            a.url.clone(),
            "--party-b".into(),
            b.url.clone(),
        ];
        for k in keys {
            v.push("--key".into());
            v.push(k.clone());
        }
        v
    };
    let run = |keys: &[String]| {
        let argv = args(keys);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let out = pirq(&argv);
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, _) = run(&[hex_key(k1), hex_key(k2)]);
    assert_eq!(code, Some(0));
    assert_eq!(
        stdout,
        format!(
            "{}\n{}\n",
            hex::encode(&latest[k1]),
            hex::encode(&latest[k2])
        )
    );
    let deleted = &records[60].0; // deleted in epoch 1, not back
    let (code, stdout, _) = run(&[hex_key(k1), hex_key(&absent[0].0), hex_key(deleted)]);
    assert_eq!(code, Some(1));
    assert_eq!(
        stdout,
        format!("{}\nabsent\nabsent\n", hex::encode(&latest[k1]))
    );
    let (code, stdout, stderr) = run(&["zz".into()]);
    assert_eq!((code, stdout.as_str()), (Some(2), ""));
    assert!(stderr.contains("not hex"), "{stderr}");
    let (code, stdout, stderr) = run(&[hex::encode([1u8; 19])]);
    assert_eq!((code, stdout.as_str()), (Some(2), ""));
    assert!(
        stderr.contains("key is 19 bytes, this table's keys are 20"),
        "{stderr}"
    );
}

#[test]
fn bad_record_files_get_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_, records) = gen(d, "ok.jsonl", 40, 21);
    // One line of the JSON-lines format, from the key's and the value's hex.
    let line = |key: &str, value: &str| format!(r#"{{"key":"{key}","value":"{value}"}}"#);
    let out = d.join("out.pirdb");
    let build = |file: &str, contents: &[u8], extra: &[&str]| {
        let path = d.join(file);
        std::fs::write(&path, contents).unwrap();
        let mut args = kv_build(&path, &out, &["--seed", "1"]);
        args.extend_from_slice(extra);
        let err = pirq_fails(&args).stderr;
        // Nothing is left behind: no database, no temporary file.
        let names: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !names.iter().any(|n| n.contains("out.pirdb")),
            "{names:?} after {err}"
        );
        err
    };
    let lines: Vec<String> = records
        .iter()
        .map(|(k, v)| line(&hex::encode(k), &hex::encode(v)))
        .collect();
    let (key, value) = (hex::encode(&records[1].0), hex::encode(&records[1].1));

    // A duplicate key, with its line number.
    let dup = format!("{}\n{}\n{}\n", lines[0], lines[1], lines[0]);
    let err = build("dup.jsonl", dup.as_bytes(), &[]);
    assert!(err.contains("line 3: duplicate key"), "{err}");

    // Bad hex in a key, then in a value.
    let bad = format!(
        "{}\n{}\n",
        lines[0],
        line(&format!("{}zz", &key[..38]), &value)
    );
    let err = build("badkey.jsonl", bad.as_bytes(), &[]);
    assert!(
        err.contains("line 2: key \"") && err.contains("zz\" is not hex"),
        "{err}"
    );
    let bad = format!("{}\n\n{}\n", lines[0], line(&key, "xyz"));
    let err = build("badvalue.jsonl", bad.as_bytes(), &[]);
    assert!(err.contains("line 3: value \"xyz\" is not hex"), "{err}");

    // A value of the wrong size.
    let short = format!("{}\n{}\n", lines[0], line(&key, &value[..62]));
    let err = build("short.jsonl", short.as_bytes(), &[]);
    assert!(
        err.contains("line 2: value is 31 bytes, this table's values are 32"),
        "{err}"
    );

    // A table that cannot be placed: 40 records, 2 pages of 10 slots.
    let all = lines.join("\n") + "\n";
    let err = build("full.jsonl", all.as_bytes(), &["--pages", "2"]);
    assert!(err.contains("line 21: cannot place the record"), "{err}");
    assert!(err.contains("load factor of 1.0000"), "{err}");
    assert!(err.contains("--pages above 2"), "{err}");

    // CSV and fixed-width binary forms name their line / record too.
    let csv = format!(
        "key,value\n{},{}\n{},{}\n",
        hex::encode(&records[0].0),
        hex::encode(&records[0].1),
        hex::encode(&records[1].0),
        hex::encode(&records[1].1[..5])
    );
    let err = build("bad.csv", csv.as_bytes(), &[]);
    assert!(
        err.contains("line 3: value is 5 bytes, this table's values are 32"),
        "{err}"
    );
    let mut bin: Vec<u8> = records[..2]
        .iter()
        .flat_map(|(k, v)| [k.clone(), v.clone()].concat())
        .collect();
    bin.extend_from_slice(&[7; 30]);
    let err = build("bad.bin", &bin, &[]);
    assert!(
        err.contains("record 3: the file ends inside a record (30 of 52 bytes)"),
        "{err}"
    );

    // Standard input cannot be counted in advance.
    let err = pirq_fails(&[
        "kv",
        "build",
        "--key-encoding",
        "hex",
        "--value-encoding",
        "hex",
        "--records",
        "-",
        "--value-size",
        "32",
        "--out",
        arg(&out),
    ])
    .stderr;
    assert!(err.contains("give --count N"), "{err}");

    // The good file builds; a change file that deletes a missing key is refused by line.
    pirq_ok(&kv_build(&d.join("ok.jsonl"), &out, &[]));
    let changes = d.join("changes.jsonl");
    std::fs::write(
        &changes,
        format!(
            "{}\n{{\"key\":\"{}\",\"delete\":true}}\n",
            line(&hex::encode(&records[0].0), &hex::encode([9u8; 32])),
            hex::encode([3u8; 20])
        ),
    )
    .unwrap();
    let err = pirq_fails(&[
        "kv",
        "update",
        "--db",
        arg(&out),
        "--changes",
        arg(&changes),
        "--epoch",
        "1",
        "--out",
        arg(&d.join("u.bin")),
    ])
    .stderr;
    assert!(
        err.contains("line 2: delete of a key that is not in the table"),
        "{err}"
    );
    assert!(!d.join("u.bin").exists());
}

/// A table of text records built as users build one (no encoding flags), served by two real
/// parties: `pirq get` takes text keys and prints text values, `pirq bench load --kv-records`
/// reads the same records file, and `pirq kv diff` turns a new full export into an update
/// that both parties apply and answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_tables_answer_text_and_update_by_diff() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let line = |k: &str, v: &str| format!("{{\"key\":\"{k}\",\"value\":\"{v}\"}}\n");
    let v1: String = (0..300)
        .map(|i| line(&format!("user-{i}"), &format!("profile {i}")))
        .collect();
    std::fs::write(d.join("v1.jsonl"), &v1).unwrap();
    // A key that looks like hex stays the text.
    std::fs::write(d.join("v1.jsonl"), v1.clone() + &line("1234", "abcd")).unwrap();
    let db0 = d.join("text0.pirdb");
    let built = pirq_ok(&[
        "kv",
        "build",
        "--records",
        arg(&d.join("v1.jsonl")),
        "--max-value-size",
        "40",
        "--page-size",
        "512",
        "--seed",
        "3",
        "--out",
        arg(&db0),
    ])
    .stderr;
    assert!(built.contains("keys utf8, values utf8"), "{built}");
    let options = PartyOptions {
        gateway_args: vec!["--admin-token".into(), TOKEN.into()],
        ..PartyOptions::default()
    };
    let (a, b) = tokio::try_join!(
        Party::start(&db0, "text-a", options.clone()),
        Party::start(&db0, "text-b", options),
    )
    .unwrap();
    let get = |keys: &[&str]| {
        let mut argv = vec![
            "get",
            "--party-a",
            a.url.as_str(),
            "--party-b",
            b.url.as_str(),
        ];
        for k in keys {
            argv.extend(["--key", *k]);
        }
        let out = pirq(&argv);
        (out.status.code(), String::from_utf8(out.stdout).unwrap())
    };
    assert_eq!(
        get(&["user-7", "1234", "nobody"]),
        (Some(1), "profile 7\nabcd\nabsent\n".to_string())
    );

    // The load generator reads the records file the table's way and checks every value.
    let report = d.join("load.json");
    pirq_ok(&[
        "bench",
        "load",
        "--party-a",
        a.url.as_str(),
        "--party-b",
        b.url.as_str(),
        "--kv-records",
        arg(&d.join("v1.jsonl")),
        "--keys",
        "2",
        "--concurrency",
        "2",
        "--duration",
        "2",
        "--warmup",
        "0",
        "--quiet",
        "--json",
        arg(&report),
    ]);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(report["ok"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["errors"], serde_json::json!({}), "{report}");

    // A new full export: user-0 changed, user-1 gone, user-300 new.
    let v2 = v1
        .replace("\"profile 0\"", "\"moved\"")
        .replace(&line("user-1", "profile 1"), "")
        + &line("user-300", "new");
    std::fs::write(d.join("v2.jsonl"), &v2).unwrap();
    let update = d.join("u1.bin");
    let said = pirq_ok(&[
        "kv",
        "diff",
        "--table",
        arg(&db0),
        "--records",
        arg(&d.join("v2.jsonl")),
        "--out",
        arg(&update),
    ])
    .stderr;
    assert!(said.contains("1 inserted, 1 changed, 2 deleted"), "{said}");
    for party in [&a, &b] {
        let push = [
            "epoch",
            "push",
            "--party",
            &party.url,
            "--from",
            arg(&update),
        ];
        let out = pirq_command(&push).env("PIRQ_ADMIN_TOKEN", TOKEN).output();
        succeeded(&push, out.expect("running pirq"));
    }
    wait_epoch(&a, 1).await;
    wait_epoch(&b, 1).await;
    assert_eq!(
        get(&["user-0", "user-1", "user-300", "user-2"]),
        (Some(1), "moved\nabsent\nnew\nprofile 2\n".to_string())
    );
}
