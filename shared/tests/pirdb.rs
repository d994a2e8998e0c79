//! `.pirdb` header validation, round trip and the synthetic generator.

use std::io::Write;

use pirq_shared::db::{self, synthetic, DbError, Header, PirDb, HEADER_LEN};

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
    let header = Header {
        page_size: 512,
        num_pages: 37,
        epoch: 9,
    };
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
        assert_eq!(db::domain_bits(pages), n, "{pages} pages");
    }
}

fn header_error(mutate: impl FnOnce(&mut Vec<u8>)) -> DbError {
    let mut bytes = Header {
        page_size: 4096,
        num_pages: 10,
        epoch: 0,
    }
    .to_bytes();
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
        header_error(|b| b[600] = 1),
        DbError::Reserved { offset: 600 }
    ));
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
    let header = Header {
        page_size: 256,
        num_pages: 4,
        epoch: 0,
    };
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
        value_size: 32,
        key_size: 20,
        seed: [4; 32],
    }
}

#[test]
fn kv_layout_travels_in_the_header() {
    let dir = tempfile::tempdir().unwrap();
    let header = Header {
        page_size: 256,
        num_pages: 4,
        epoch: 3,
    };
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
    let header = Header {
        page_size: 256,
        num_pages: 3,
        epoch: 0,
    };
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
