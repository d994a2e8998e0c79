//! `.pirdb` header validation, round trip and the synthetic generator.

use std::io::Write;

use pirq_db::{self as db, DbError, Header, PirDb, HEADER_LEN};
use pirq_shared::synthetic;

/// The header of `num_pages` pages of `page_size` bytes at `epoch`.
fn header(page_size: u32, num_pages: u64, epoch: u64) -> Header {
    Header {
        page_size,
        num_pages,
        epoch,
    }
}

fn write_db(dir: &tempfile::TempDir, header: &Header, seed: u64) -> std::path::PathBuf {
    let path = dir.path().join("t.pirdb");
    db::write(
        &path,
        header,
        |p, page| synthetic::fill_page(seed, p, page),
        |_| {},
    )
    .unwrap();
    path
}

#[test]
fn round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let header = header(512, 37, 9);
    let path = write_db(&dir, &header, 3);
    let db = PirDb::open(&path).unwrap();
    assert_eq!(*db.header(), header);
    assert_eq!(db.header().domain_bits(), 6);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 4096 + 37 * 512);
    let mut expect = vec![0u8; 512];
    synthetic::fill_page(3, 36, &mut expect);
    assert_eq!(db.page(36).unwrap(), &expect[..]);
    assert!(db.page(37).is_none());
}

#[test]
fn synthetic_pages_are_fixed() {
    // Pins the formula: the GPU generator and other tools must produce the same bytes.
    assert_eq!(
        synthetic::word(0, 0, 0),
        synthetic::mix64(
            synthetic::mix64(0x9E37_79B9_7F4A_7C15).wrapping_add(0x9E37_79B9_7F4A_7C15)
        )
    );
    let mut page = vec![0u8; 256];
    synthetic::fill_page(42, 7, &mut page);
    assert_eq!(
        u64::from_le_bytes(page[8..16].try_into().unwrap()),
        synthetic::word(42, 7, 1)
    );
    assert_ne!(synthetic::word(42, 7, 1), synthetic::word(42, 8, 1));
}

#[test]
fn domain_bits() {
    for (pages, n) in [
        (1, 1),
        (2, 1),
        (3, 2),
        (4, 2),
        (5, 3),
        (128, 7),
        (129, 8),
        (1 << 24, 24),
    ] {
        assert_eq!(pirq_shared::dpf::domain_bits(pages), n, "{pages} pages");
    }
}

fn header_error(mutate: impl FnOnce(&mut Vec<u8>)) -> DbError {
    let mut bytes = header(4096, 10, 0).to_bytes();
    mutate(&mut bytes);
    Header::parse(&bytes).unwrap_err()
}

#[test]
fn header_rejections() {
    assert!(matches!(
        header_error(|b| b[0] = b'X'),
        DbError::BadMagic { .. }
    ));
    assert!(matches!(
        header_error(|b| b[8..12].copy_from_slice(&1000u32.to_le_bytes())),
        DbError::PageSize(1000)
    ));
    assert!(matches!(
        header_error(|b| b[8..12].copy_from_slice(&128u32.to_le_bytes())),
        DbError::PageSize(128)
    ));
    assert!(matches!(
        header_error(|b| b[8..12].copy_from_slice(&(1u32 << 17).to_le_bytes())),
        DbError::PageSize(_)
    ));
    assert!(matches!(
        header_error(|b| b[16..24].fill(0)),
        DbError::NumPages(0)
    ));
    assert!(matches!(
        header_error(|b| b[12] = 1),
        DbError::Reserved { offset: 12 }
    ));
    assert!(matches!(
        header_error(|b| b[720] = 1),
        DbError::Reserved { offset: 720 }
    ));
    // Bytes 560..688 are the signing block: not zero means a block, checked as one.
    assert!(matches!(header_error(|b| b[600] = 1), DbError::Signing(_)));
    // Bytes 64..512 are the kv layout block: not zero means a layout, checked as one.
    assert!(matches!(
        header_error(|b| b[100] = 1),
        DbError::Kv(pirq_shared::kv::KvError::BadMagic { .. })
    ));
    assert!(matches!(
        header_error(|b| b.truncate(100)),
        DbError::ShortHeader { len: 100 }
    ));
}

#[test]
fn truncated_and_overlong_files() {
    let dir = tempfile::tempdir().unwrap();
    let header = header(256, 4, 0);
    let path = write_db(&dir, &header, 1);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(HEADER_LEN as u64 + 3 * 256).unwrap();
    assert!(matches!(
        PirDb::open(&path),
        Err(DbError::Length {
            expected: 5120,
            actual: 4864,
            ..
        })
    ));
    f.set_len(HEADER_LEN as u64 + 4 * 256).unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&[0])
        .unwrap();
    assert!(matches!(PirDb::open(&path), Err(DbError::Length { .. })));
    f.set_len(10).unwrap();
    assert!(matches!(
        PirDb::open(&path),
        Err(DbError::ShortHeader { len: 10 })
    ));
    assert!(matches!(
        PirDb::open(dir.path().join("missing")),
        Err(DbError::Io { .. })
    ));
}

fn kv_layout(choices: u8) -> pirq_shared::kv::KvLayout {
    pirq_shared::kv::KvLayout {
        choices,
        kind: pirq_shared::kv::ValueKind::Fixed,
        value_size: 32,
        key_size: 20,
        seed: [4; 32],
        encodings: Default::default(),
    }
}

#[test]
fn kv_layout_travels_in_the_header() {
    let dir = tempfile::tempdir().unwrap();
    let header = header(256, 4, 3);
    let path = dir.path().join("kv.pirdb");
    db::write_kv(&path, &header, Some(&kv_layout(2)), |_, _| {}, |_| {}).unwrap();
    let opened = PirDb::open(&path).unwrap();
    assert_eq!(opened.header(), &header);
    let kv = opened.kv().expect("a kv database");
    assert_eq!(kv.layout, kv_layout(2));
    assert_eq!(kv.slots_per_page(), 5);
    // A plain database has none.
    let plain = write_db(&dir, &header, 1);
    assert!(PirDb::open(&plain).unwrap().kv().is_none());
    // A layout that does not fit the geometry is refused on write and on open.
    let bad = db::write_kv(&path, &header, Some(&kv_layout(5)), |_, _| {}, |_| {});
    assert!(matches!(bad, Err(DbError::Kv(_))));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[72] = 5;
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(PirDb::open(&path), Err(DbError::Kv(_))));
}

#[test]
fn mapped_writer_renames_only_on_commit() {
    let dir = tempfile::tempdir().unwrap();
    let header = header(256, 3, 0);
    let path = dir.path().join("m.pirdb");
    {
        let mut w = db::MappedWriter::create(&path, &header, Some(&kv_layout(3))).unwrap();
        w.pages_mut()[300] = 9;
        // dropped: nothing appears, no temporary file stays
    }
    assert!(!path.exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    let mut w = db::MappedWriter::create(&path, &header, Some(&kv_layout(3))).unwrap();
    w.pages_mut()[300] = 9;
    w.commit().unwrap();
    let opened = PirDb::open(&path).unwrap();
    assert_eq!(opened.page(1).unwrap()[44], 9);
    assert_eq!(opened.kv().unwrap().layout, kv_layout(3));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

/// The digest `db::write` returns and records in header bytes 32..64 is SPEC §2.1's content
/// digest of the pages written (`pirq_shared::digest::Digest::content`, which
/// `shared/tests/digest_vector.rs` holds to the spec's vector), over more than one hashing chunk.
#[test]
fn the_writer_records_the_content_digest_of_its_pages() {
    use pirq_shared::digest::Digest;
    let header = header(256, 5000, 3);
    let fill = |p: u64, page: &mut [u8]| {
        for (i, b) in page.iter_mut().enumerate() {
            *b = (31 * p as usize + i) as u8;
        }
    };
    let mut pages = vec![0u8; (header.num_pages * header.page_size as u64) as usize];
    for (p, page) in pages.chunks_mut(header.page_size as usize).enumerate() {
        fill(p as u64, page);
    }
    let expect = Digest::content(header.page_size, header.num_pages, header.epoch, &pages);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vector.pirdb");
    let written = db::write(&path, &header, fill, |_| {}).unwrap();
    assert_eq!(written, expect);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[32..64], &expect.0, "recorded in header bytes 32..64");
    let db = PirDb::open(&path).unwrap();
    assert_eq!(db.recorded_digest(), Some(expect));
    assert_eq!(db.content_digest(), expect);
}

#[test]
fn a_file_without_a_digest_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    let header = header(256, 2, 0);
    let path = dir.path().join("old.pirdb");
    let mut bytes = header.to_bytes();
    bytes.extend(std::iter::repeat_n(5u8, 512));
    std::fs::write(&path, &bytes).unwrap();
    let db = PirDb::open(&path).unwrap();
    assert_eq!(db.recorded_digest(), None);
    assert_eq!(db.digest(), db.content_digest());
}

#[test]
fn writes_replace_files_atomically_and_refuse_their_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let header = header(256, 4, 0);
    let path = write_db(&dir, &header, 1);
    let served = PirDb::open(&path).unwrap();
    let before = served.page(3).unwrap().to_vec();
    // Rewriting the path leaves an open mapping (a worker serving it) intact.
    write_db(&dir, &header, 2);
    assert_eq!(served.page(3).unwrap(), &before[..]);
    assert_ne!(PirDb::open(&path).unwrap().page(3).unwrap(), &before[..]);
    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("t.pirdb")]);
    // The same file under another name is still an input.
    let link = dir.path().join("link.pirdb");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let other = dir.path().join("other.pirdb");
    assert!(db::ensure_not_an_input(&other, &[&path]).is_ok());
    let err = db::ensure_not_an_input(&link, &[&path]).unwrap_err();
    assert!(matches!(err, DbError::OutputIsInput { .. }), "{err}");
    assert!(err.to_string().contains("same file"), "{err}");
}

/// A shard file's block is read back, and a block that does not describe the file's pages, or
/// is not a shard block at all, is refused.
#[test]
fn shard_blocks() {
    use pirq_db::{write_shard, SHARD_BLOCK};
    use pirq_shared::shard::ShardSpec;
    let dir = tempfile::tempdir().unwrap();
    let header = header(256, 1000, 4);
    let whole = PirDb::open(write_db(&dir, &header, 9)).unwrap();
    let path = dir.path().join("s1.pirdb");
    let origin = write_shard(&path, &whole, ShardSpec::new(1, 3).unwrap(), |_| {}).unwrap();
    assert_eq!((origin.first_page, origin.total_pages), (256, 1000));
    let part = PirDb::open(&path).unwrap();
    assert_eq!(part.shard(), Some(&origin));
    assert_eq!(part.header().epoch, 4);
    assert_eq!(part.page(0).unwrap(), whole.page(256).unwrap());
    // A shard of a shard file is cut from the pages it holds, and only from those.
    assert!(write_shard(
        dir.path().join("x.pirdb"),
        &part,
        ShardSpec::new(0, 3).unwrap(),
        |_| {}
    )
    .is_err());
    let bytes = std::fs::read(&path).unwrap();
    for (what, mutate) in [
        (
            "magic",
            Box::new(|b: &mut Vec<u8>| b[SHARD_BLOCK.start] ^= 1) as Box<dyn Fn(&mut Vec<u8>)>,
        ),
        (
            "index past count",
            Box::new(|b: &mut Vec<u8>| b[SHARD_BLOCK.start + 8] = 7),
        ),
        (
            "wrong first page",
            Box::new(|b: &mut Vec<u8>| b[SHARD_BLOCK.start + 16] = 1),
        ),
    ] {
        let mut bad = bytes.clone();
        mutate(&mut bad);
        let err = Header::parse(&bad[..4096]).unwrap_err();
        assert!(matches!(err, DbError::Shard(_)), "{what}: {err}");
    }
}

/// SPEC §2.3: the imported length is checked against the pages on write and on open, carried
/// into a snapshot and into shard files, and the signing block's bytes stay reserved (zero)
/// until signed pages exist.
#[test]
fn data_len_is_recorded_checked_and_carried() {
    use pirq_db::{Meta, DATA_LEN_AT};
    use pirq_shared::shard::ShardSpec;
    let dir = tempfile::tempdir().unwrap();
    let header = header(256, 1000, 0);
    let path = dir.path().join("imported.pirdb");
    let meta = Meta {
        kv: None,
        data_len: 999 * 256 + 1,
        ..Meta::default()
    };
    db::write_meta(&path, &header, &meta, |_, _| {}, |_| {}).unwrap();
    let opened = PirDb::open(&path).unwrap();
    assert_eq!(opened.data_len(), 999 * 256 + 1);
    assert_eq!(opened.meta(), meta);
    // Lengths that do not end in the last page are refused on write ...
    for bad in [999 * 256, 1000 * 256 + 1] {
        let meta = Meta {
            kv: None,
            data_len: bad,
            ..Meta::default()
        };
        let err =
            db::write_meta(dir.path().join("bad"), &header, &meta, |_, _| {}, |_| {}).unwrap_err();
        assert!(matches!(err, DbError::DataLen { .. }), "{err}");
    }
    // ... and on open.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[DATA_LEN_AT..DATA_LEN_AT + 8].copy_from_slice(&5u64.to_le_bytes());
    let tampered = dir.path().join("tampered.pirdb");
    std::fs::write(&tampered, &bytes).unwrap();
    assert!(matches!(
        PirDb::open(&tampered),
        Err(DbError::DataLen { data_len: 5, .. })
    ));
    // A shard file describes the whole database: its data_len is the whole one's.
    let shard = dir.path().join("s.pirdb");
    db::write_shard(&shard, &opened, ShardSpec::new(0, 2).unwrap(), |_| {}).unwrap();
    assert_eq!(PirDb::open(&shard).unwrap().data_len(), 999 * 256 + 1);
    // Header bytes past data_len, around the signing block, are reserved (the block itself is
    // checked as one: tests/signed_vectors.rs, signing.rs).
    for offset in [552, 559, 720, 4095] {
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[offset] = 1;
        std::fs::write(&tampered, &bytes).unwrap();
        assert!(
            matches!(PirDb::open(&tampered), Err(DbError::Reserved { offset: o }) if o == offset),
            "offset {offset}"
        );
    }
}

/// SPEC §3: epochs above 2^53 - 1 are refused on write and on open.
#[test]
fn epochs_stay_below_two_to_the_fifty_three() {
    let dir = tempfile::tempdir().unwrap();
    let highest = header(256, 4, pirq_shared::update::MAX_EPOCH);
    let path = write_db(&dir, &highest, 1);
    assert_eq!(PirDb::open(&path).unwrap().header().epoch, (1 << 53) - 1);
    let err = db::write(
        dir.path().join("over.pirdb"),
        &header(256, 4, pirq_shared::update::MAX_EPOCH + 1),
        |_, _| {},
        |_| {},
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "epoch 9007199254740992 is above the highest epoch, 2^53-1 = 9007199254740991 (SPEC §3)"
    );
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[24..32].copy_from_slice(&(pirq_shared::update::MAX_EPOCH + 1).to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(PirDb::open(&path), Err(DbError::Epoch(_))));
}

/// On a tmpfs (memory) the writer takes the file's pages by touching them on all cores instead
/// of `posix_fallocate` on one, and refuses a file larger than the file system's free bytes
/// before taking any. /dev/shm is a tmpfs on Linux; the test needs it.
#[test]
fn mapped_writer_on_a_tmpfs_checks_room_and_writes_alike() {
    let shm = std::path::Path::new("/dev/shm");
    assert!(shm.is_dir(), "/dev/shm (a tmpfs) is missing");
    let dir = tempfile::tempdir_in(shm).unwrap();
    let small = header(4096, 300, 0);
    let path = dir.path().join("m.pirdb");
    let mut w = db::MappedWriter::create(&path, &small, Some(&kv_layout(3))).unwrap();
    assert!(w.pages_mut().iter().all(|&b| b == 0));
    w.pages_mut()[4096 * 299 + 7] = 5;
    w.commit().unwrap();
    let opened = PirDb::open(&path).unwrap();
    assert_eq!(opened.page(299).unwrap()[7], 5);
    assert_eq!(opened.recorded_digest(), Some(opened.content_digest()));
    // Far more than any machine's memory: refused, naming the room, and nothing left behind.
    let huge = header(65536, 1 << 26, 0);
    let big = dir.path().join("big.pirdb");
    let err = match db::MappedWriter::create(&big, &huge, None) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a 4 TiB database was taken on a tmpfs"),
    };
    assert!(err.contains("(tmpfs) has"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}
