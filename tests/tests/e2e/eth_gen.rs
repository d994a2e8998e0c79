//! `pirq eth gen --tables` and `pirq eth import --changes` (docs/eth.md, docs/bench/eth.md):
//! the fast paths that make a state of Ethereum's size in a minute write the same bytes as the
//! slow, general ones. `gen --tables` writes exactly the files `eth import` writes of the dump
//! `gen --out` prints (whatever the number of threads), and a block's update made from its
//! changes alone (`--changes`, `--after` the updates before it) is exactly the update made from
//! the block's whole dump against the applied snapshot.

use std::path::Path;

use pirq_e2e::cli::{arg, pirq_command, pirq_ok};

/// A small state with everything the placement meets: contracts sharing codes (a code placed
/// once), storage, and tables full enough that records miss their first page.
const STATE: &[&str] = &[
    "--accounts",
    "3000",
    "--contract-every",
    "7",
    "--slots",
    "6",
    "--codes",
    "5",
    "--seed",
    "4",
    "--quiet",
];

fn gen(extra: &[&str]) {
    let mut args = vec!["eth", "gen"];
    args.extend_from_slice(STATE);
    args.extend_from_slice(extra);
    pirq_ok(&args);
}

/// The files of two table directories are the same bytes.
fn same_files(a: &Path, b: &Path, names: &[&str]) {
    for name in names {
        let x = std::fs::read(a.join(name)).unwrap();
        let y = std::fs::read(b.join(name)).unwrap();
        assert!(
            x == y,
            "{name} differs between {} and {}",
            a.display(),
            b.display()
        );
    }
}

const TABLES: [&str; 4] = ["accounts.pirdb", "code.pirdb", "storage.pirdb", "eth.json"];
const UPDATES: [&str; 3] = ["accounts.update", "code.update", "storage.update"];

#[test]
fn eth_gen_tables_are_the_bytes_eth_import_writes_of_its_dump() {
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str| dir.path().join(name);
    // The base state and one two blocks later (accounts changed and added, slots changed,
    // cleared and added; and with accounts deleted).
    for (name, extra) in [
        ("base", &[][..]),
        ("later", &["--changed", "200", "--blocks", "2"]),
        (
            "deleted",
            &["--changed", "200", "--blocks", "2", "--deleted", "40"],
        ),
    ] {
        let dump = d(&format!("{name}.jsonl"));
        let mut args = extra.to_vec();
        args.extend(["--out", arg(&dump)]);
        gen(&args);
        let imported = d(&format!("{name}-imported"));
        let import = |out: &Path, threads: &str| {
            let ran = pirq_command(&[
                "eth",
                "import",
                "--dump",
                arg(&dump),
                "--out",
                arg(out),
                "--block",
                "77",
                "--seed",
                "3",
                "--quiet",
            ])
            .env("RAYON_NUM_THREADS", threads)
            .output()
            .unwrap();
            assert!(ran.status.success(), "{ran:?}");
        };
        import(&imported, "4");
        let made = d(&format!("{name}-made"));
        let mut args = extra.to_vec();
        args.extend([
            "--tables",
            arg(&made),
            "--block",
            "77",
            "--layout-seed",
            "3",
        ]);
        gen(&args);
        same_files(&imported, &made, &TABLES);
        // The placement does not depend on the threads that ran it.
        let one_thread = d(&format!("{name}-one-thread"));
        import(&one_thread, "1");
        same_files(&imported, &one_thread, &TABLES);
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(made.join("eth.json")).unwrap()).unwrap();
        assert_eq!(report["block"], 77);
        assert_eq!(report["codes"], 5);
        let accounts = report["accounts"].as_u64().unwrap();
        if name == "deleted" {
            // 3,000 and 2 × 20 added, less about 2 × 40 deleted.
            assert!((2900..3030).contains(&accounts), "{report}");
        } else {
            assert!(accounts >= 3000, "{report}");
        }
    }
}

#[test]
fn eth_import_changes_make_the_update_a_whole_dump_makes() {
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str| dir.path().join(name);
    gen(&["--tables", arg(&d("s0")), "--layout-seed", "8"]);
    for k in ["1", "2"] {
        // Each block also deletes about 10 accounts (`"deleted": true` lines listing their slots).
        let blocks = ["--changed", "150", "--blocks", k, "--deleted", "10"];
        let whole = d(&format!("d{k}.jsonl"));
        let changes = d(&format!("c{k}.jsonl"));
        gen(&[&blocks[..], &["--out", arg(&whole)]].concat());
        gen(&[&blocks[..], &["--changes-only", "--out", arg(&changes)]].concat());
        let text = std::fs::read_to_string(&changes).unwrap();
        // The header and the block's ~150 changed and 15 added accounts, not the state.
        let lines = text.lines().count();
        assert!((100..400).contains(&lines), "{lines} lines of changes");
        assert!(text.contains(":\"0\""), "no cleared slot in the changes");
        assert!(
            text.contains("\"deleted\":true,\"storage\"") && text.contains("\"deleted\":true}"),
            "no deleted contract and account in the changes"
        );
    }
    // Block 1 on the base: from the whole dump and from the changes.
    let update = |base: &str, input: &str, file: &Path, after: &[&str], out: &str| {
        let (base, out) = (d(base), d(out));
        let mut args = vec![
            "eth",
            "import",
            "--base",
            arg(&base),
            input,
            arg(file),
            "--update-out",
            arg(&out),
            "--quiet",
        ];
        if !after.is_empty() {
            args.push("--after");
            args.extend_from_slice(after);
        }
        pirq_ok(&args);
    };
    update("s0", "--dump", &d("d1.jsonl"), &[], "u1-whole");
    update("s0", "--changes", &d("c1.jsonl"), &[], "u1");
    same_files(&d("u1-whole"), &d("u1"), &UPDATES);
    // Block 2: from the whole dump against the applied snapshot s1, and from the changes
    // against s0 with block 1's update on top.
    std::fs::create_dir(d("s1")).unwrap();
    for t in ["accounts", "code", "storage"] {
        pirq_ok(&[
            "db",
            "apply",
            "--db",
            arg(&d(&format!("s0/{t}.pirdb"))),
            "--update",
            arg(&d(&format!("u1/{t}.update"))),
            "--out",
            arg(&d(&format!("s1/{t}.pirdb"))),
            "--quiet",
        ]);
    }
    update("s1", "--dump", &d("d2.jsonl"), &[], "u2-whole");
    let u1 = d("u1");
    update("s0", "--changes", &d("c2.jsonl"), &[arg(&u1)], "u2");
    same_files(&d("u2-whole"), &d("u2"), &UPDATES);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d("u2/eth.json")).unwrap()).unwrap();
    assert_eq!(report["epoch"], 2, "{report}");
    // An update out of order is refused, naming the file.
    let ran = pirq_command(&[
        "eth",
        "import",
        "--base",
        arg(&d("s0")),
        "--changes",
        arg(&d("c2.jsonl")),
        "--after",
        arg(&d("u2")),
        "--update-out",
        arg(&d("u3")),
    ])
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert!(!ran.status.success());
    assert!(
        stderr.contains("is epoch 2, but the base is at epoch 0"),
        "{stderr}"
    );
}

/// The account lines of a dump or changes file, parsed.
fn account_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.get("address").is_some())
        .collect()
}

/// A block's changes that delete accounts (`{"address": A, "deleted": true, "storage": {slot:
/// "0", …}}`) make the update of the block's whole dump without them: the accounts' records
/// and every slot they held gone, the codes they shared with others kept. A deletion that lists
/// none of a contract's slots, or of an account on another line, is refused naming its line.
#[test]
fn eth_import_changes_delete_accounts_as_a_whole_dump_without_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str| dir.path().join(name);
    gen(&["--tables", arg(&d("s0")), "--layout-seed", "8"]);
    gen(&["--out", arg(&d("d0.jsonl"))]);
    let blocks = ["--changed", "150", "--blocks", "1"];
    gen(&[&blocks[..], &["--out", arg(&d("d1.jsonl"))]].concat());
    gen(&[
        &blocks[..],
        &["--changes-only", "--out", arg(&d("c1.jsonl"))],
    ]
    .concat());
    let changes_text = std::fs::read_to_string(d("c1.jsonl")).unwrap();
    let in_block: Vec<String> = account_lines(&d("c1.jsonl"))
        .iter()
        .map(|v| v["address"].as_str().unwrap().to_string())
        .collect();
    // Two accounts the block leaves alone: a contract (with slots) and an account without code.
    let base = account_lines(&d("d0.jsonl"));
    let untouched = |with_storage: bool| {
        base.iter()
            .find(|v| {
                v.get("storage").is_some() == with_storage
                    && !in_block.contains(&v["address"].as_str().unwrap().to_string())
            })
            .unwrap()
            .clone()
    };
    let (contract, eoa) = (untouched(true), untouched(false));
    let slots = contract["storage"].as_object().unwrap();
    assert!(slots.len() >= 2, "{contract}");
    let cleared: serde_json::Map<String, serde_json::Value> =
        slots.keys().map(|k| (k.clone(), "0".into())).collect();
    let deletions = [
        serde_json::json!({"address": contract["address"], "deleted": true, "storage": cleared}),
        serde_json::json!({"deleted": true, "address": eoa["address"]}),
    ];
    let mut text = changes_text.clone();
    for line in &deletions {
        text.push_str(&format!("{line}\n"));
    }
    std::fs::write(d("c1-deleted.jsonl"), &text).unwrap();
    // The whole dump of the same block: the two lines left out.
    let gone = [&contract["address"], &eoa["address"]];
    let whole: String = std::fs::read_to_string(d("d1.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            !gone.contains(&&v["address"])
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(d("d1-deleted.jsonl"), whole).unwrap();
    let update = |input: &str, file: &str, out: &str| {
        pirq_command(&[
            "eth",
            "import",
            "--base",
            arg(&d("s0")),
            input,
            arg(&d(file)),
            "--update-out",
            arg(&d(out)),
            "--quiet",
        ])
        .output()
        .unwrap()
    };
    for (input, file, out) in [
        ("--dump", "d1-deleted.jsonl", "u-whole"),
        ("--changes", "c1-deleted.jsonl", "u"),
    ] {
        let ran = update(input, file, out);
        assert!(ran.status.success(), "{ran:?}");
    }
    same_files(&d("u-whole"), &d("u"), &UPDATES);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d("u/eth.json")).unwrap()).unwrap();
    assert_eq!(report["deleted_accounts"], 2, "{report}");
    let tables = report["tables"].as_array().unwrap();
    assert_eq!(tables[0]["deleted"], 2, "{report}");
    assert!(
        tables[2]["deleted"].as_u64().unwrap() >= slots.len() as u64,
        "{report}"
    );
    assert_eq!(tables[1]["deleted"], 0, "codes stay: {report}");

    // Refused, each naming its line (the last): a contract deleted without its slots, and an
    // account the file already gave.
    let lines = changes_text.lines().count() + 1;
    let no_slots = serde_json::json!({"address": contract["address"], "deleted": true});
    let twice = serde_json::json!({"address": in_block[0], "deleted": true});
    for (line, want) in [
        (no_slots, "has storage in the base"),
        (twice, "is on an earlier line too"),
    ] {
        std::fs::write(d("c1-bad.jsonl"), format!("{changes_text}{line}\n")).unwrap();
        let _ = std::fs::remove_dir_all(d("u-bad"));
        let ran = update("--changes", "c1-bad.jsonl", "u-bad");
        let stderr = String::from_utf8_lossy(&ran.stderr);
        assert!(!ran.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!("line {lines}: ")) && stderr.contains(want),
            "line {lines}, {want:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!d("u-bad/accounts.update").exists());
    }
}
