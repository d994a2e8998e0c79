//! Issue 26 as a user meets it with the tools alone (no parties): `pirq db import` of a file or
//! of standard input, key-value tables of every kind built from records in every encoding and
//! read back exactly, and tools that never destroy a file: an output that is an input is refused
//! however it is named, a write that fails (a full disk, simulated with a file-size limit) is an
//! error that names the file, and SIGINT or SIGTERM leaves no temporary file behind.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use pirq_db::PirDb;

mod common;
use common::{db_gen_args, fails, hex_kv_build, ok, pirq, pirq_on_a_terminal, s, said, stderr};

/// An export of `n` JSON-lines records, `user-I` to `"v1 of I"`: the first version of the
/// content the diff and progress cases change.
fn user_export(n: usize) -> String {
    (0..n)
        .map(|i| format!("{{\"key\":\"user-{i}\",\"value\":\"v1 of {i}\"}}\n"))
        .collect()
}

/// The names in `dir`, sorted: what a tool left behind.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// `pirq` with `stdin` as its standard input.
fn pirq_with_stdin(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pirq"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// The value a key has in a kv database file (KV §4): `Some(vec![])` for a set's member.
fn local_get(db: &PirDb, key: &[u8]) -> Option<Vec<u8>> {
    let kv = db.kv().expect("a kv database");
    let tag = kv.tag(key);
    kv.candidates(&tag).iter().find_map(|&p| {
        kv.find(db.page(p).unwrap(), &tag)
            .unwrap()
            .map(<[u8]>::to_vec)
    })
}

#[test]
fn import_cuts_a_file_into_pages_and_records_its_length() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..2500u32).map(|i| (i * 7 % 251) as u8).collect();
    let input = dir.path().join("data.bin");
    std::fs::write(&input, &data).unwrap();
    let db = dir.path().join("data.pirdb");
    ok(&[
        "db",
        "import",
        "--input",
        s(&input),
        "--page-size",
        "256",
        "--out",
        s(&db),
    ]);
    let info: serde_json::Value = serde_json::from_str(&ok(&["db", "info", s(&db)])).unwrap();
    assert_eq!(
        (info["num_pages"].as_u64(), info["data_len"].as_u64()),
        (Some(10), Some(2500))
    );
    let opened = PirDb::open(&db).unwrap();
    assert_eq!(&opened.pages()[..2500], &data[..]);
    assert!(opened.pages()[2500..].iter().all(|b| *b == 0));
    assert!(ok(&["db", "verify", s(&db)]).contains("pages match"));

    // From standard input: the same pages and digest.
    let piped = dir.path().join("piped.pirdb");
    let out = pirq_with_stdin(
        &[
            "db",
            "import",
            "--input",
            "-",
            "--page-size",
            "256",
            "--out",
            s(&piped),
        ],
        &data,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let piped_db = PirDb::open(&piped).unwrap();
    assert_eq!(piped_db.pages(), opened.pages());
    assert_eq!(piped_db.recorded_digest(), opened.recorded_digest());

    // Nothing to import, and a page size that is not one.
    let empty = dir.path().join("empty.bin");
    std::fs::write(&empty, b"").unwrap();
    let err = fails(&["db", "import", "--input", s(&empty), "--out", s(&db)]);
    assert!(
        err.contains("empty.bin is empty: there is nothing to import"),
        "{err}"
    );
    let err = fails(&[
        "db",
        "import",
        "--input",
        s(&input),
        "--page-size",
        "300",
        "--out",
        s(&dir.path().join("x.pirdb")),
    ]);
    assert!(err.contains("page size 300"), "{err}");
    assert_eq!(PirDb::open(&db).unwrap().pages(), opened.pages(), "intact");
    assert_eq!(
        names(dir.path()),
        ["data.bin", "data.pirdb", "empty.bin", "piped.pirdb"]
    );
}

#[test]
fn sets_and_variable_values_in_every_encoding() {
    let dir = tempfile::tempdir().unwrap();
    // A set from CSV keys in UTF-8: taken exactly as written (the space, both spellings of é).
    let members = ["alice@example.com", " bob", "café", "cafe\u{301}", "名前"];
    let csv = dir.path().join("set.csv");
    let mut text = String::from("key\n");
    for m in members {
        text.push_str(&format!("\"{m}\"\n"));
    }
    std::fs::write(&csv, text).unwrap();
    let set = dir.path().join("set.pirdb");
    ok(&[
        "kv",
        "build",
        "--value-encoding",
        "hex",
        "--records",
        s(&csv),
        "--value-size",
        "0",
        "--key-encoding",
        "utf8",
        "--page-size",
        "256",
        "--seed",
        "1",
        "--out",
        s(&set),
    ]);
    let db = PirDb::open(&set).unwrap();
    let info: serde_json::Value = serde_json::from_str(&ok(&["db", "info", s(&set)])).unwrap();
    assert_eq!(info["kv"]["value_kind"], "set");
    assert_eq!(info["kv"]["version"], 2);
    for m in members {
        assert_eq!(local_get(&db, m.as_bytes()), Some(vec![]), "{m:?}");
    }
    for absent in ["bob", "Alice@example.com", "cafe"] {
        assert_eq!(local_get(&db, absent.as_bytes()), None, "{absent:?}");
    }

    // Variable-size values from JSON lines, keys in base64 and values in UTF-8.
    let values = ["", "x", "a longer value, with a comma", "ünïcødé"];
    let jsonl = dir.path().join("var.jsonl");
    let lines: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let key = base64_of(format!("key-{i}").as_bytes());
            serde_json::json!({"key": key, "value": v}).to_string()
        })
        .collect();
    std::fs::write(&jsonl, lines.join("\n") + "\n").unwrap();
    let var = dir.path().join("var.pirdb");
    let build = |max: &str| {
        pirq(&[
            "kv",
            "build",
            "--records",
            s(&jsonl),
            "--max-value-size",
            max,
            "--key-encoding",
            "base64",
            "--value-encoding",
            "utf8",
            "--page-size",
            "256",
            "--out",
            s(&var),
        ])
    };
    let out = build("30");
    assert!(out.status.success(), "{}", stderr(&out));
    let db = PirDb::open(&var).unwrap();
    for (i, v) in values.iter().enumerate() {
        let key = format!("key-{i}");
        assert_eq!(local_get(&db, key.as_bytes()), Some(v.as_bytes().to_vec()));
    }
    // A value longer than the largest is refused with its line; the old table stays.
    let out = build("10");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            "line 3: value is 28 bytes, more than this table's largest, 10 (--max-value-size)"
        ),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        local_get(&PirDb::open(&var).unwrap(), b"key-1"),
        Some(b"x".to_vec())
    );

    // An update of the variable table: a value grows, one shrinks to empty, one is deleted.
    let changes = dir.path().join("changes.jsonl");
    let change = |key: &str, value: Option<&str>| match value {
        Some(v) => serde_json::json!({"key": base64_of(key.as_bytes()), "value": v}),
        None => serde_json::json!({"key": base64_of(key.as_bytes()), "delete": true}),
    };
    let lines = [
        change("key-1", Some("now twenty-nine bytes long!!")),
        change("key-2", Some("")),
        change("key-3", None),
        change("key-9", Some("new")),
    ];
    let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    std::fs::write(&changes, text.join("\n") + "\n").unwrap();
    let update = dir.path().join("u1.json");
    ok(&[
        "kv",
        "update",
        "--db",
        s(&var),
        "--changes",
        s(&changes),
        "--key-encoding",
        "base64",
        "--value-encoding",
        "utf8",
        "--epoch",
        "1",
        "--out",
        s(&update),
    ]);
    let next = dir.path().join("var1.pirdb");
    ok(&[
        "db",
        "apply",
        "--db",
        s(&var),
        "--update",
        s(&update),
        "--out",
        s(&next),
    ]);
    let db = PirDb::open(&next).unwrap();
    let want = [
        ("key-0", Some("")),
        ("key-1", Some("now twenty-nine bytes long!!")),
        ("key-2", Some("")),
        ("key-3", None),
        ("key-9", Some("new")),
    ];
    for (key, value) in want {
        assert_eq!(
            local_get(&db, key.as_bytes()),
            value.map(|v| v.as_bytes().to_vec()),
            "{key}"
        );
    }

    // CSV without a header line: the first line is a record (the columns are the first two).
    let headless = dir.path().join("headless.csv");
    std::fs::write(&headless, "alice,1\n").unwrap();
    let h = dir.path().join("h.pirdb");
    ok(&[
        "kv",
        "build",
        "--records",
        s(&headless),
        "--max-value-size",
        "4",
        "--out",
        s(&h),
    ]);
    assert_eq!(ok(&["kv", "get", "--db", s(&h), "--key", "alice"]), "1\n");
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Every tool that writes a file refuses to write over one of its inputs, whatever the path
/// (the same name, a hard link, a symbolic link, standard input redirected from it), and the
/// input is intact afterwards.
#[test]
fn no_tool_writes_over_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let db = d.join("x.pirdb");
    ok(&db_gen_args("64", s(&db)));
    let records = d.join("r.jsonl");
    std::fs::write(&records, "{\"key\":\"0a\",\"value\":\"01\"}\n").unwrap();
    let kv = d.join("kv.pirdb");
    ok(&hex_kv_build(
        s(&records),
        "1",
        s(&kv),
        &["--page-size", "256"],
    ));
    let changes = d.join("c.jsonl");
    std::fs::write(&changes, "{\"key\":\"0b\",\"value\":\"02\"}\n").unwrap();
    let hard = d.join("hard.pirdb");
    std::fs::hard_link(&db, &hard).unwrap();
    let soft = d.join("soft.pirdb");
    std::os::unix::fs::symlink(&db, &soft).unwrap();
    let before: Vec<(std::path::PathBuf, Vec<u8>)> = [&db, &records, &kv, &changes]
        .iter()
        .map(|p| (p.to_path_buf(), std::fs::read(p).unwrap()))
        .collect();

    let cases: Vec<Vec<&str>> = vec![
        vec!["db", "import", "--input", s(&db), "--out", s(&hard)],
        vec!["db", "import", "--input", s(&soft), "--out", s(&db)],
        hex_kv_build(s(&records), "1", s(&records), &[]),
        vec![
            "kv",
            "update",
            "--db",
            s(&kv),
            "--changes",
            s(&changes),
            "--epoch",
            "1",
            "--out",
            s(&kv),
        ],
        vec![
            "kv",
            "update",
            "--db",
            s(&kv),
            "--changes",
            s(&changes),
            "--epoch",
            "1",
            "--out",
            s(&changes),
        ],
        vec![
            "epoch",
            "make",
            "--db",
            s(&db),
            "--epoch",
            "1",
            "--pages",
            "1",
            "--out",
            s(&soft),
        ],
    ];
    for args in &cases {
        let err = fails(args);
        assert!(err.contains("same file"), "{args:?}: {err}");
    }
    // Standard input redirected from the output file.
    let out = Command::new(env!("CARGO_BIN_EXE_pirq"))
        .args(["db", "import", "--input", "-", "--out", s(&db)])
        .stdin(std::fs::File::open(&db).unwrap())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("standard input is that same file"),
        "{}",
        stderr(&out)
    );
    for (path, bytes) in before {
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "{} changed",
            path.display()
        );
    }
    assert_eq!(
        names(d),
        [
            "c.jsonl",
            "hard.pirdb",
            "kv.pirdb",
            "r.jsonl",
            "soft.pirdb",
            "x.pirdb"
        ]
    );
}

/// A write that fails is an error naming the file, never a crash, and leaves no temporary file:
/// the child runs under a file-size limit (RLIMIT_FSIZE, with SIGXFSZ ignored, so a write past
/// it fails with EFBIG as a write to a full disk fails with ENOSPC). `kv build` allocates its
/// mapped file before mapping it, so it fails there too instead of dying of SIGBUS.
#[test]
fn a_failed_write_is_an_error_and_leaves_nothing() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let records = d.join("r.jsonl");
    let lines: Vec<String> = (0..2000)
        .map(|i| format!("{{\"key\":\"{:08x}\",\"value\":\"{:08x}\"}}", i, i))
        .collect();
    std::fs::write(&records, lines.join("\n") + "\n").unwrap();
    let limited = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pirq"));
        cmd.args(args);
        // SAFETY: between fork and exec only async-signal-safe calls (signal, setrlimit).
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                let limit = libc::rlimit {
                    rlim_cur: 32 * 1024,
                    rlim_max: 32 * 1024,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.output().unwrap()
    };
    let out_db = d.join("out.pirdb");
    for args in [
        db_gen_args("1000", s(&out_db)),
        vec![
            "db",
            "import",
            "--input",
            s(&records),
            "--page-size",
            "256",
            "--out",
            s(&out_db),
        ],
        hex_kv_build(s(&records), "4", s(&out_db), &["--page-size", "256"]),
    ] {
        let out = limited(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("out.pirdb") && err.contains("File too large"),
            "{args:?}: {err}"
        );
        assert_eq!(names(d), ["r.jsonl"], "{args:?} left a file behind");
    }
}

/// SIGINT and SIGTERM remove the temporary file of a tool that is writing one, and say so. The
/// tools wait on standard input (a pipe kept open) with their temporary file created.
#[test]
fn a_signal_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out_db = d.join("out.pirdb");
    let cases: [(&[&str], i32, &str); 2] = [
        (
            &[
                "db",
                "import",
                "--input",
                "-",
                "--page-size",
                "256",
                "--out",
                s(&out_db),
            ],
            libc::SIGINT,
            "SIGINT",
        ),
        (
            &hex_kv_build(
                "-",
                "4",
                s(&out_db),
                &["--count", "10", "--page-size", "256"],
            )[..],
            libc::SIGTERM,
            "SIGTERM",
        ),
    ];
    for (args, signal, name) in cases {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pirq"))
            .args(args)
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        // Import: a first page's worth, so its temporary file exists and it waits for more.
        stdin.write_all(&[7u8; 300]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while names(d).iter().all(|n| !n.contains(".tmp")) {
            assert!(
                Instant::now() < deadline,
                "{name}: no temporary file appeared"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: signals a child this test started.
        unsafe { libc::kill(child.id() as i32, signal) };
        let out = child.wait_with_output().unwrap();
        drop(stdin);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(128 + signal), "{err}");
        assert!(
            err.contains(&format!("interrupted by {name}: removed the unfinished")),
            "{err}"
        );
        assert!(err.contains("the output was not written"), "{err}");
        assert!(names(d).is_empty(), "{name} left {:?}", names(d));
    }
}

#[test]
fn numbers_out_of_range_and_empty_requests_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let db = d.join("x.pirdb");
    ok(&db_gen_args("300", s(&db)));
    let records = d.join("r.jsonl");
    std::fs::write(&records, "{\"key\":\"0a\",\"value\":\"01\"}\n").unwrap();
    let over = "9007199254740992"; // 2^53
    let limit = "above the highest epoch, 2^53-1 = 9007199254740991";
    let err = fails(&hex_kv_build(
        s(&records),
        "1",
        s(&d.join("k.pirdb")),
        &["--epoch", over],
    ));
    assert!(err.contains(limit), "{err}");
    let err = fails(&[
        "epoch",
        "make",
        "--db",
        s(&db),
        "--epoch",
        over,
        "--pages",
        "1",
        "--out",
        s(&d.join("u.bin")),
    ]);
    assert!(err.contains(limit), "{err}");
    // The highest epoch itself is fine.
    ok(&hex_kv_build(
        s(&records),
        "1",
        s(&d.join("k.pirdb")),
        &["--epoch", "9007199254740991"],
    ));
    let err = fails(&[
        "db",
        "split",
        s(&db),
        "--shards",
        "0",
        "--out-dir",
        s(&d.join("s")),
    ]);
    assert!(err.contains("shard count 0 outside 1..=1024"), "{err}");
    assert!(!d.join("s").exists());

    // Empty requests: nothing to build, change, replace or generate.
    let empty = d.join("empty.jsonl");
    std::fs::write(&empty, "\n").unwrap();
    let err = fails(&hex_kv_build(s(&empty), "1", s(&d.join("e.pirdb")), &[]));
    assert!(
        err.contains("empty.jsonl has no records: there is nothing to build"),
        "{err}"
    );
    let err = fails(&[
        "kv",
        "update",
        "--db",
        s(&d.join("k.pirdb")),
        "--changes",
        s(&empty),
        "--epoch",
        "9007199254740992",
        "--out",
        s(&d.join("u.bin")),
    ]);
    assert!(err.contains(limit), "{err}");
    ok(&hex_kv_build(s(&records), "1", s(&d.join("k0.pirdb")), &[]));
    let err = fails(&[
        "kv",
        "update",
        "--db",
        s(&d.join("k0.pirdb")),
        "--changes",
        s(&empty),
        "--epoch",
        "1",
        "--out",
        s(&d.join("u.bin")),
    ]);
    assert!(err.contains("has no change lines"), "{err}");
    let err = fails(&[
        "epoch",
        "make",
        "--db",
        s(&db),
        "--epoch",
        "1",
        "--pages",
        "0",
        "--out",
        s(&d.join("u.bin")),
    ]);
    assert!(err.contains("--pages"), "{err}");
    let err = fails(&[
        "kv",
        "gen",
        "--records",
        "0",
        "--out",
        s(&d.join("g.jsonl")),
    ]);
    assert!(err.contains("--records"), "{err}");
    assert!(!d.join("u.bin").exists() && !d.join("e.pirdb").exists());
}

/// A table records how its keys and values are written (KV §2): text keys by default, so a
/// key that looks like hex stays the text; values print the way they were given; tables that
/// record nothing read as hex; a key that cannot be what the table expects names the encoding
/// and the flag. Checked offline with `pirq kv get` and `pirq kv stats`.
#[test]
fn tables_record_their_encodings() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let records = file(
        "people.jsonl",
        "{\"key\":\"1234\",\"value\":\"abcd\"}\n{\"key\":\"Ann Smith\",\"value\":\"caf\u{e9}\"}\n",
    );
    let text = dir.path().join("text.pirdb");
    let built = said(&[
        "kv",
        "build",
        "--records",
        s(&records),
        "--max-value-size",
        "64",
        "--out",
        s(&text),
    ]);
    assert!(built.contains("keys utf8, values utf8"), "{built}");
    let get = |db: &Path, args: &[&str]| {
        let mut all = vec!["kv", "get", "--db", s(db)];
        all.extend_from_slice(args);
        pirq(&all)
    };
    let out = get(
        &text,
        &["--key", "1234", "--key", "Ann Smith", "--key-hex", "1234"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "abcd\ncafé\nabsent\n");
    let hexed = get(&text, &["--key", "1234", "--value-format", "hex"]);
    assert_eq!(String::from_utf8_lossy(&hexed.stdout), "61626364\n");
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&["kv", "stats", s(&text), "--json"])).unwrap();
    assert_eq!(stats["records"], 2);
    assert_eq!(stats["key_encoding"], "utf8");
    assert_eq!(stats["value_encoding"], "utf8");
    assert_eq!(stats["values"]["max"], 5);
    assert!(ok(&["kv", "stats", s(&text)]).contains("keys: utf8, any length"));

    // JSON values of any type, stored compact, printed back as JSON.
    let json_records = file(
        "profiles.jsonl",
        "{\"key\":\"ann\",\"value\":{\"age\": 31, \"tags\": [\"a\", \"b\"]}}\n\
         {\"key\":\"bob\",\"value\":7}\n{\"key\":\"cy\",\"value\":\"text\"}\n",
    );
    let json = dir.path().join("json.pirdb");
    ok(&[
        "kv",
        "build",
        "--records",
        s(&json_records),
        "--max-value-size",
        "64",
        "--value-encoding",
        "json",
        "--out",
        s(&json),
    ]);
    let out = get(&json, &["--key", "ann", "--key", "bob", "--key", "cy"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "{\"age\":31,\"tags\":[\"a\",\"b\"]}\n7\n\"text\"\n"
    );
    // Without --value-encoding json a JSON object is refused, naming the flag.
    let err = fails(&[
        "kv",
        "build",
        "--records",
        s(&json_records),
        "--max-value-size",
        "64",
        "--out",
        s(&dir.path().join("no.pirdb")),
    ]);
    assert!(err.contains("line 1: the value is a JSON object"), "{err}");
    assert!(err.contains("--value-encoding json"), "{err}");

    // Hex keys recorded: a key that is not hex names the encoding and the flag.
    let hex_records = file("hex.jsonl", "{\"key\":\"0a0b\",\"value\":\"ff\"}\n");
    let hex = dir.path().join("hex.pirdb");
    ok(&[
        "kv",
        "build",
        "--records",
        s(&hex_records),
        "--max-value-size",
        "4",
        "--key-encoding",
        "hex",
        "--value-encoding",
        "hex",
        "--out",
        s(&hex),
    ]);
    assert_eq!(
        String::from_utf8_lossy(&get(&hex, &["--key", "0A0B"]).stdout),
        "ff\n"
    );
    let out = get(&hex, &["--key", "alice"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("key \"alice\" is not hex"), "{err}");
    assert!(err.contains("this table's keys are hex"), "{err}");
    assert!(err.contains("--key-text"), "{err}");

    // A table built before encodings were recorded (bytes 74 and 75 zero) reads as hex.
    let mut bytes = std::fs::read(&hex).unwrap();
    bytes[74] = 0;
    bytes[75] = 0;
    let old = dir.path().join("old.pirdb");
    std::fs::write(&old, bytes).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&get(&old, &["--key", "0a0b"]).stdout),
        "ff\n"
    );
    assert!(ok(&["kv", "stats", s(&old)]).contains("keys: not recorded (hex)"));
}

/// Sets from a list of keys, CSV columns by name with quoted fields, and errors that name the
/// line.
#[test]
fn lists_and_csv_columns() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("breached.txt");
    std::fs::write(&list, "5baa61e4c9b93f3f\n\n7c4a8d09ca3762af\r\n").unwrap();
    let set = dir.path().join("set.pirdb");
    // Redirected, a build says what it did in one line (or one JSON object), no control
    // characters.
    let out = pirq(&["kv", "build", "--records", s(&list), "--out", s(&set)]);
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("wrote ") && !err.contains('\x1b') && !err.contains('\r'),
        "{err:?}"
    );
    let summary: serde_json::Value = serde_json::from_str(&ok(&[
        "kv",
        "build",
        "--records",
        s(&list),
        "--out",
        s(&set),
        "--json",
    ]))
    .unwrap();
    assert_eq!(
        (
            summary["records"].as_u64(),
            summary["key_encoding"].as_str()
        ),
        (Some(2), Some("utf8"))
    );
    let out = pirq(&[
        "kv",
        "get",
        "--db",
        s(&set),
        "--key",
        "5baa61e4c9b93f3f",
        "--key",
        "7c4a8d09ca3762af",
        "--key",
        "0000",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "present\npresent\nabsent\n"
    );
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&["kv", "stats", s(&set), "--json"])).unwrap();
    assert_eq!(
        (stats["records"].as_u64(), stats["kind"].as_str()),
        (Some(2), Some("set"))
    );
    let err = fails(&[
        "kv",
        "build",
        "--records",
        s(&list),
        "--value-size",
        "4",
        "--out",
        s(&dir.path().join("x.pirdb")),
    ]);
    assert!(err.contains("--format lines builds a set"), "{err}");

    let csv = dir.path().join("people.csv");
    std::fs::write(
        &csv,
        "id,email,name\n1,ann@x.org,\"Smith, Ann\"\n2,bob@x.org,Bob\n3,cy\n",
    )
    .unwrap();
    let table = dir.path().join("csv.pirdb");
    let build = |extra: &[&str]| {
        let mut args = vec![
            "kv",
            "build",
            "--records",
            s(&csv),
            "--max-value-size",
            "32",
            "--out",
            s(&table),
            "--key-column",
            "email",
        ];
        args.extend_from_slice(extra);
        pirq(&args)
    };
    let out = build(&["--value-column", "name"]);
    let err = stderr(&out);
    assert!(
        err.contains("line 4: 2 fields, the header line has 3"),
        "{err}"
    );
    std::fs::write(
        &csv,
        "id,email,name\n1,ann@x.org,\"Smith, Ann\"\n2,bob@x.org,Bob\n",
    )
    .unwrap();
    assert!(build(&["--value-column", "name"]).status.success());
    let out = pirq(&["kv", "get", "--db", s(&table), "--key", "ann@x.org"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Smith, Ann\n");
    let err = stderr(&build(&["--value-column", "nom"]));
    assert!(
        err.contains(
            "line 1: --value-column \"nom\" is not a column of the header line (its \
                      columns: id, email, name)"
        ),
        "{err}"
    );
}

/// A reader that closes standard output early (`pirq … | head`) ends the command with 0 or 141
/// (a shell's SIGPIPE status), never a panic.
#[test]
fn a_closed_stdout_is_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (records, table) = (dir.path().join("r.jsonl"), dir.path().join("t.pirdb"));
    let lines: String = (0..2000)
        .map(|i| format!("{{\"key\":\"user-{i}\",\"value\":\"value of {i}\"}}\n"))
        .collect();
    std::fs::write(&records, lines).unwrap();
    ok(&[
        "kv",
        "build",
        "--records",
        s(&records),
        "--max-value-size",
        "16",
        "--out",
        s(&table),
    ]);
    let many_keys: Vec<String> = (0..2000).map(|i| format!("user-{i}")).collect();
    let mut kv_get = vec!["kv", "get", "--db", s(&table)];
    for k in &many_keys {
        kv_get.extend(["--key", k.as_str()]);
    }
    for args in [
        &["completions", "bash"][..],
        &["--help"][..],
        &["kv", "gen", "--records", "200000", "--out", "-"][..],
        &["kv", "stats", s(&table), "--json"][..],
        &["db", "info", s(&table)][..],
        &kv_get[..],
    ] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pirq"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert!(
            matches!(out.status.code(), Some(0 | 141)),
            "{:?}: {:?} {err}",
            &args[..args.len().min(2)],
            out.status
        );
        assert!(
            !err.contains("panicked"),
            "{:?}: {err}",
            &args[..args.len().min(2)]
        );
    }
}

/// `pirq db diff`: a new version of your own imported file becomes an update of the pages that
/// changed (signed, its manifest appended, as `epoch make` writes them); applied to the old
/// database it gives the new one. A layout change is refused with the advice to rebuild.
#[test]
fn db_diff_turns_your_new_content_into_an_update() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    let (secret, public) = (p("pub.key"), p("pub.pub"));
    ok(&[
        "publisher",
        "keygen",
        "--secret",
        s(&secret),
        "--public",
        s(&public),
    ]);
    let mut data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(p("v1.bin"), &data).unwrap();
    data[5000] ^= 0xff;
    data[19_999] ^= 0xff;
    std::fs::write(p("v2.bin"), &data).unwrap();
    for (input, out) in [("v1.bin", "old.pirdb"), ("v2.bin", "new.pirdb")] {
        ok(&[
            "db",
            "import",
            "--input",
            s(&p(input)),
            "--page-size",
            "1024",
            "--out",
            s(&p(out)),
            "--sign-key",
            s(&secret),
        ]);
    }
    let said = said(&[
        "db",
        "diff",
        "--old",
        s(&p("old.pirdb")),
        "--new",
        s(&p("new.pirdb")),
        "--out",
        s(&p("u1.bin")),
        "--sign-key",
        s(&secret),
        "--manifests",
        s(&p("manifests.json")),
    ]);
    assert!(said.contains("epoch 1, 2 of 22 pages replaced"), "{said}");
    assert!(said.contains("appended the manifest of epoch 1"), "{said}");
    ok(&[
        "db",
        "apply",
        "--db",
        s(&p("old.pirdb")),
        "--update",
        s(&p("u1.bin")),
        "--out",
        s(&p("snap.pirdb")),
    ]);
    let (snap, new) = (
        PirDb::open(p("snap.pirdb")).unwrap(),
        PirDb::open(p("new.pirdb")).unwrap(),
    );
    let usable = snap.usable();
    for i in 0..snap.num_pages() {
        assert_eq!(
            snap.page(i).unwrap()[..usable],
            new.page(i).unwrap()[..usable],
            "page {i}"
        );
    }
    ok(&[
        "db",
        "verify",
        s(&p("snap.pirdb")),
        "--publisher-key",
        s(&public),
    ]);
    // Unsigned against signed, and another length: new databases, not updates.
    std::fs::write(p("v3.bin"), &data[..10_000]).unwrap();
    ok(&[
        "db",
        "import",
        "--input",
        s(&p("v3.bin")),
        "--page-size",
        "1024",
        "--out",
        s(&p("short.pirdb")),
        "--sign-key",
        s(&secret),
    ]);
    let err = fails(&[
        "db",
        "diff",
        "--old",
        s(&p("old.pirdb")),
        "--new",
        s(&p("short.pirdb")),
        "--out",
        s(&p("u2.bin")),
        "--sign-key",
        s(&secret),
    ]);
    assert!(
        err.contains("cannot change the layout: rebuild the database"),
        "{err}"
    );
    assert!(!p("u2.bin").exists());
}

/// `pirq kv diff`: a new full export of a text table's records becomes the update of its
/// inserts, changes and deletes; applied, the table answers the export's values. A record that
/// does not fit the table's layout is refused with the advice to build a new table.
#[test]
fn kv_diff_turns_a_new_export_into_an_update() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    let v1 = user_export(500);
    std::fs::write(p("v1.jsonl"), &v1).unwrap();
    ok(&[
        "kv",
        "build",
        "--records",
        s(&p("v1.jsonl")),
        "--max-value-size",
        "24",
        "--out",
        s(&p("t.pirdb")),
    ]);
    // v2: user-0 changed, user-1 deleted, user-500 inserted.
    let v2 = v1
        .replace("\"v1 of 0\"", "\"v2 of 0\"")
        .replace("{\"key\":\"user-1\",\"value\":\"v1 of 1\"}\n", "")
        + "{\"key\":\"user-500\",\"value\":\"new\"}\n";
    std::fs::write(p("v2.jsonl"), &v2).unwrap();
    let said = said(&[
        "kv",
        "diff",
        "--table",
        s(&p("t.pirdb")),
        "--records",
        s(&p("v2.jsonl")),
        "--out",
        s(&p("u.bin")),
    ]);
    assert!(
        said.contains("epoch 1, 1 inserted, 1 changed, 1 deleted"),
        "{said}"
    );
    ok(&[
        "db",
        "apply",
        "--db",
        s(&p("t.pirdb")),
        "--update",
        s(&p("u.bin")),
        "--out",
        s(&p("t1.pirdb")),
    ]);
    let out = pirq(&[
        "kv",
        "get",
        "--db",
        s(&p("t1.pirdb")),
        "--key",
        "user-0",
        "--key",
        "user-1",
        "--key",
        "user-500",
        "--key",
        "user-2",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "v2 of 0\nabsent\nnew\nv1 of 2\n"
    );
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&["kv", "stats", s(&p("t1.pirdb")), "--json"])).unwrap();
    assert_eq!(
        (stats["records"].as_u64(), stats["epoch"].as_u64()),
        (Some(500), Some(1))
    );
    // The same records again: nothing to write. A value too long for the table: a new table.
    let err = fails(&[
        "kv",
        "diff",
        "--table",
        s(&p("t1.pirdb")),
        "--records",
        s(&p("v2.jsonl")),
        "--out",
        s(&p("u2.bin")),
    ]);
    assert!(err.contains("no update to write"), "{err}");
    std::fs::write(
        p("v3.jsonl"),
        "{\"key\":\"a\",\"value\":\"far too long for this table's values\"}\n",
    )
    .unwrap();
    let err = fails(&[
        "kv",
        "diff",
        "--table",
        s(&p("t1.pirdb")),
        "--records",
        s(&p("v3.jsonl")),
        "--out",
        s(&p("u3.bin")),
    ]);
    assert!(err.contains("needs a new table, pirq kv build"), "{err}");
}

/// Issue 37 item 7: the long tools of a table's life (kv build, kv diff, kv update, db apply)
/// draw a progress bar on a terminal, none with --quiet, and none where standard error is not a
/// terminal; one summary line at the end in every case, and no control characters in redirected
/// output.
#[test]
fn long_work_shows_a_bar_on_a_terminal_only() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    let v1 = user_export(300);
    std::fs::write(p("v1.jsonl"), &v1).unwrap();
    std::fs::write(p("v2.jsonl"), v1.replace("\"v1 of 7\"", "\"v2 of 7\"")).unwrap();
    std::fs::write(
        p("changes.jsonl"),
        "{\"key\":\"user-8\",\"value\":\"v2 of 8\"}\n",
    )
    .unwrap();
    let (v1, v2, changes, t, update) = (
        p("v1.jsonl"),
        p("v2.jsonl"),
        p("changes.jsonl"),
        p("t.pirdb"),
        p("update.bin"),
    );
    ok(&[
        "kv",
        "build",
        "--records",
        s(&v1),
        "--max-value-size",
        "16",
        "--seed",
        "1",
        "--out",
        s(&t),
    ]);
    ok(&[
        "kv",
        "diff",
        "--table",
        s(&t),
        "--records",
        s(&v2),
        "--out",
        s(&update),
    ]);
    // Each tool, its own output file a run (`{}`), and the start of its summary line.
    let tools: [(&[&str], &str); 4] = [
        (
            &[
                "kv",
                "build",
                "--records",
                s(&v1),
                "--max-value-size",
                "16",
                "--out",
                "{}",
            ],
            "wrote ",
        ),
        (
            &[
                "kv",
                "diff",
                "--table",
                s(&t),
                "--records",
                s(&v2),
                "--out",
                "{}",
            ],
            "epoch 1, 0 inserted, 1 changed, 0 deleted",
        ),
        (
            &[
                "kv",
                "update",
                "--db",
                s(&t),
                "--changes",
                s(&changes),
                "--epoch",
                "1",
                "--out",
                "{}",
            ],
            "epoch 1, 0 inserted, 1 changed, 0 deleted",
        ),
        (
            &[
                "db",
                "apply",
                "--db",
                s(&t),
                "--update",
                s(&update),
                "--out",
                "{}",
            ],
            "at epoch 1 (1 pages replaced)",
        ),
    ];
    for (run, (tool, summary)) in tools.iter().enumerate() {
        let name = tool[..2].join(" ");
        // The tool's arguments, writing to a file of its own for `how`, with --quiet or not.
        let args = |how: &str, quiet: bool| -> Vec<String> {
            let out = p(&format!("out-{run}-{how}"));
            let mut args: Vec<String> = tool.iter().map(|a| a.replace("{}", s(&out))).collect();
            if quiet {
                args.push("--quiet".into());
            }
            args
        };

        // Redirected: the summary line alone, no control characters.
        let piped = args("piped", false);
        let err = stderr(&pirq(&piped.iter().map(String::as_str).collect::<Vec<_>>()));
        assert!(err.contains(summary), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(!err.contains(['\x1b', '\r']), "{name}: {err:?}");

        // On a terminal: a bar, cleared before the summary line, which is all that is left.
        let tty = args("tty", false);
        let (status, said) =
            pirq_on_a_terminal(&tty.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(status.success(), "{name}: {said}");
        let cleared = said
            .rfind("\x1b[2K")
            .unwrap_or_else(|| panic!("{name}: no bar: {said:?}"));
        assert!(said[cleared..].contains(summary), "{name}: {said:?}");
        assert!(said[..cleared].contains("eta"), "{name}: {said:?}");

        // On a terminal with --quiet: no bar, the same summary line.
        let quiet = args("quiet", true);
        let (status, said) =
            pirq_on_a_terminal(&quiet.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(status.success(), "{name}: {said}");
        let said = said.replace("\r\n", "\n");
        assert!(said.contains(summary), "{name}: {said}");
        assert!(!said.contains(['\x1b', '\r']), "{name} --quiet: {said:?}");
    }

    // kv stats reads every page: a bar on a terminal, gone before the figures (on standard
    // output); nothing on standard error otherwise.
    let (status, said) = pirq_on_a_terminal(&["kv", "stats", s(&t)]);
    assert!(status.success(), "{said}");
    let cleared = said
        .rfind("\x1b[2K")
        .unwrap_or_else(|| panic!("kv stats: no bar: {said:?}"));
    assert!(said[..cleared].contains("pages"), "{said:?}");
    assert_eq!(
        said[cleared..].trim_start_matches("\x1b[2K"),
        "",
        "{said:?}"
    );
    let (status, said) = pirq_on_a_terminal(&["kv", "stats", s(&t), "--quiet"]);
    assert!(
        status.success() && said.is_empty(),
        "kv stats --quiet: {said:?}"
    );
    let stats = pirq(&["kv", "stats", s(&t)]);
    assert!(String::from_utf8_lossy(&stats.stdout).contains("records: 300"));
    assert_eq!(stderr(&stats), "");

    // kv diff and kv update --json: the summary as one object on standard output, for scripts.
    for (run, tool) in tools[1..3].iter().enumerate() {
        let out = p(&format!("json-{run}"));
        let mut args: Vec<&str> = tool
            .0
            .iter()
            .map(|a| if *a == "{}" { s(&out) } else { a })
            .collect();
        args.push("--json");
        let done = pirq(&args);
        assert!(done.status.success(), "{}", stderr(&done));
        assert_eq!(stderr(&done), "");
        let summary: serde_json::Value = serde_json::from_slice(&done.stdout).unwrap();
        assert_eq!(
            summary,
            serde_json::json!({"out": s(&out), "epoch": 1, "inserted": 0, "changed": 1,
                "deleted": 0, "evictions": 0, "pages_replaced": 1})
        );
    }
}
