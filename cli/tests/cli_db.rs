//! The `pirq db` / `pirq epoch` file tools as a user runs them: outputs replace files atomically,
//! an output that is an input is refused with the input intact, digests are recorded and
//! verified, and mistakes get messages that say what to type.

use std::path::Path;

mod common;
use common::{fails, ok, s};

/// `pirq db gen`: `pages` synthetic pages of 256 bytes under `seed`, at `out`.
fn gen(out: &Path, pages: u64, seed: u64) {
    let (pages, seed) = (pages.to_string(), seed.to_string());
    ok(&[
        "db",
        "gen",
        "--pages",
        &pages,
        "--page-size",
        "256",
        "--seed",
        &seed,
        "--out",
        s(out),
    ]);
}

/// The arguments of `pirq db apply --db DB --update UPDATE --out OUT`.
fn apply<'a>(db: &'a Path, update: &'a Path, out: &'a Path) -> [&'a str; 8] {
    let (db, update, out) = (s(db), s(update), s(out));
    ["db", "apply", "--db", db, "--update", update, "--out", out]
}

#[test]
fn apply_in_place_is_refused_and_the_database_survives() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.pirdb");
    let update = dir.path().join("u1.bin");
    gen(&db, 64, 7);
    ok(&[
        "epoch",
        "make",
        "--db",
        s(&db),
        "--epoch",
        "1",
        "--pages",
        "3",
        "--out",
        s(&update),
    ]);
    let before = std::fs::read(&db).unwrap();

    let err = fails(&apply(&db, &update, &db));
    assert!(err.contains("same file"), "{err}");
    // Another name for the same file is the same file.
    let link = dir.path().join("link.pirdb");
    std::os::unix::fs::symlink(&db, &link).unwrap();
    let err = fails(&apply(&db, &update, &link));
    assert!(err.contains("same file"), "{err}");
    let err = fails(&apply(&db, &update, &update));
    assert!(err.contains("same file"), "{err}");
    assert_eq!(std::fs::read(&db).unwrap(), before, "the input is intact");

    // A real snapshot: its header records the chained digest, which verify checks with the
    // base and the updates, and which differs from the base's.
    let snap = dir.path().join("snap.pirdb");
    ok(&apply(&db, &update, &snap));
    let info = |p: &Path| -> serde_json::Value {
        serde_json::from_str(&ok(&["db", "info", s(p)])).unwrap()
    };
    let (base_info, snap_info) = (info(&db), info(&snap));
    assert_eq!(snap_info["epoch"], 1);
    assert_eq!(base_info["digest"].as_str().unwrap().len(), 64);
    assert_ne!(base_info["digest"], snap_info["digest"]);
    assert!(ok(&["db", "verify", s(&db)]).contains("pages match"));
    // Its pages are checked without its history, against the pages_digest it records; the
    // chained digest needs the history.
    let out = ok(&["db", "verify", s(&snap)]);
    assert!(out.contains("pages match pages_digest"), "{out}");
    assert!(out.contains("--base"), "{out}");
    let out = ok(&[
        "db",
        "verify",
        s(&snap),
        "--base",
        s(&db),
        "--update",
        s(&update),
    ]);
    assert!(out.contains("pages match"), "{out}");

    // Only the renamed files remain: no temporary file left behind.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["link.pirdb", "snap.pirdb", "u1.bin", "x.pirdb"]);
}

#[test]
fn verify_finds_a_damaged_page() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.pirdb");
    gen(&db, 16, 0);
    let mut bytes = std::fs::read(&db).unwrap();
    bytes[4096 + 5 * 256 + 17] ^= 1;
    std::fs::write(&db, &bytes).unwrap();
    let err = fails(&["db", "verify", s(&db)]);
    assert!(err.contains("damaged"), "{err}");
}

#[test]
fn mistakes_get_messages_that_say_what_to_type() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.pirdb");
    gen(&db, 16, 0);
    let out = dir.path().join("u.bin");
    let err = fails(&[
        "epoch",
        "make",
        "--db",
        s(&db),
        "--epoch",
        "0",
        "--pages",
        "1",
        "--out",
        s(&out),
    ]);
    assert!(err.contains("--epoch"), "{err}");

    // Something that is neither JSON nor bincode.
    let junk = dir.path().join("update.txt");
    std::fs::write(&junk, "epoch = 1, pages = [3: AAAA]\n").unwrap();
    let snap = dir.path().join("s.pirdb");
    let err = fails(&apply(&db, &junk, &snap));
    assert!(err.contains("is not a bincode update"), "{err}");
    assert!(err.contains("\"epoch\": 1"), "{err}");

    let err = fails(&[
        "query",
        "--party-a",
        "127.0.0.1:1",
        "--party-b",
        "http://127.0.0.1:2",
        "--index",
        "0",
    ]);
    assert!(err.contains("write http://127.0.0.1:1"), "{err}");
}

/// `pirq db split`: one file per shard, each holding exactly its range of pages with the shard
/// block and the whole database's digest; the split of a shard file is refused.
#[test]
fn split_writes_one_file_per_shard() {
    use pirq_db::PirDb;
    use pirq_shared::shard::ShardSpec;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("big.pirdb");
    let out = dir.path().join("shards");
    gen(&db, 1000, 3);
    let report = ok(&["db", "split", s(&db), "--shards", "3", "--out-dir", s(&out)]);
    assert!(report.contains("big.shard-2-of-3.pirdb"), "{report}");
    let whole = PirDb::open(&db).unwrap();
    for (index, range) in ShardSpec::all_ranges(3, 1000)
        .unwrap()
        .into_iter()
        .enumerate()
    {
        let path = out.join(format!("big.shard-{index}-of-3.pirdb"));
        let part = PirDb::open(&path).unwrap();
        let origin = part.shard().expect("shard block");
        assert_eq!(origin.spec, ShardSpec::new(index as u32, 3).unwrap());
        assert_eq!((part.first_page(), part.total_pages()), (range.start, 1000));
        assert_eq!(part.num_pages(), range.end - range.start);
        assert_eq!(part.recorded_digest(), whole.recorded_digest());
        for p in range.clone() {
            assert_eq!(part.page(p - range.start).unwrap(), whole.page(p).unwrap());
        }
        let info = ok(&["db", "info", s(&path)]);
        assert!(
            info.contains(&format!("\"shard\": \"{index}/3\"")),
            "{info}"
        );
    }
    let again = out.join("big.shard-0-of-3.pirdb");
    let err = fails(&[
        "db",
        "split",
        s(&again),
        "--shards",
        "2",
        "--out-dir",
        s(&out),
    ]);
    assert!(err.contains("is a shard file already"), "{err}");
    let err = fails(&["db", "split", s(&db), "--shards", "5", "--out-dir", s(&out)]);
    assert!(err.contains("would leave shards empty"), "{err}");
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Issue 36, items 4 and 6: every tool's output is a regular file or nothing (a FIFO is
/// refused and stays a FIFO), is written by rename (a symlink at the path is replaced, its
/// target untouched), keeps an existing file's mode, and DPF keys and retrieved pages are
/// created 0600.
#[test]
fn outputs_refuse_special_files_replace_symlinks_and_keep_modes() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str| dir.path().join(name);
    let fifo = d("fifo");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let db = d("x.pirdb");
    gen(&db, 64, 7);
    let input = d("input.bin");
    std::fs::write(&input, vec![7u8; 1000]).unwrap();

    // A FIFO as --out of a database writer, a key writer, an update writer: refused, kept.
    for args in [
        vec![
            "db",
            "gen",
            "--pages",
            "4",
            "--page-size",
            "256",
            "--out",
            s(&fifo),
        ],
        vec![
            "db",
            "import",
            "--input",
            s(&input),
            "--page-size",
            "256",
            "--out",
            s(&fifo),
        ],
        vec![
            "keys",
            "gen",
            "--n",
            "6",
            "--index",
            "3",
            "--out-a",
            s(&fifo),
            "--out-b",
            s(&d("b.key")),
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
            s(&fifo),
        ],
    ] {
        let err = fails(&args);
        assert!(
            err.contains("a FIFO") && err.contains("refusing"),
            "{args:?}: {err}"
        );
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
    }

    // Symlinks at the key paths: replaced by the keys, their targets untouched; keys 0600.
    let target = d("precious");
    std::fs::write(&target, b"precious").unwrap();
    let (key_a, key_b) = (d("a.key"), d("b.key"));
    std::os::unix::fs::symlink(&target, &key_a).unwrap();
    ok(&[
        "keys",
        "gen",
        "--n",
        "6",
        "--index",
        "3",
        "--out-a",
        s(&key_a),
        "--out-b",
        s(&key_b),
    ]);
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    assert!(!std::fs::symlink_metadata(&key_a)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!((mode_of(&key_a), mode_of(&key_b)), (0o600, 0o600));

    // answer and combine: the same rules; the combined page is created 0600.
    let (ans_a, ans_b, page) = (d("a.ans"), d("b.ans"), d("page.bin"));
    std::os::unix::fs::symlink(&target, &ans_a).unwrap();
    ok(&[
        "answer",
        "--db",
        s(&db),
        "--key",
        s(&key_a),
        "--out",
        s(&ans_a),
    ]);
    ok(&[
        "answer",
        "--db",
        s(&db),
        "--key",
        s(&key_b),
        "--out",
        s(&ans_b),
    ]);
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    ok(&["combine", s(&ans_a), s(&ans_b), "--out", s(&page)]);
    assert_eq!(mode_of(&page), 0o600);
    let err = fails(&["combine", s(&ans_a), s(&ans_b), "--out", s(&fifo)]);
    assert!(err.contains("a FIFO"), "{err}");

    // An existing database of mode 0600 stays 0600 when it is written again.
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o600)).unwrap();
    gen(&db, 64, 8);
    assert_eq!(mode_of(&db), 0o600);
}
