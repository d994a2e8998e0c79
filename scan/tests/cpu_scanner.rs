//! The CPU scanner against a naive per-page reference, on random databases.

use std::sync::Arc;

use pirq_db::{self as db, PirDb};
use pirq_scan::cpu::CpuScanner;
use pirq_scan::{ScanError, Scanner};
use pirq_shared::bits::{bit, xor_into};
use pirq_shared::dpf::{eval_full, generate, DpfKey};
use pirq_testkit::TestDb;
use proptest::prelude::*;
use rand::{rngs::StdRng, RngCore, SeedableRng};

/// The answer computed the slow, obvious way: every page, one key at a time.
fn reference_answer(db: &PirDb, key: &DpfKey) -> Vec<u8> {
    let bits = eval_full(key);
    let mut acc = vec![0u8; db.page_size()];
    for p in 0..db.num_pages() {
        if bit(&bits, p as usize) {
            xor_into(&mut acc, db.page(p).unwrap());
        }
    }
    acc
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn answers_match_reference(
        num_pages in 1u64..3000,
        page_size_log in 8u32..12,
        q in 1usize..80,
        threads in 1usize..4,
        seed in any::<u64>(),
    ) {
        let file = TestDb::create(num_pages, 1 << page_size_log, seed).unwrap();
        let db = file.db.clone();
        let n = db.header().domain_bits();
        let mut rng = StdRng::seed_from_u64(seed);
        let pairs: Vec<_> = (0..q)
            .map(|_| {
                let alpha = rng.next_u64() % num_pages;
                (alpha, generate(n, alpha, &mut rng).unwrap())
            })
            .collect();
        let scanner = CpuScanner::new(db.clone(), threads).unwrap();
        let keys_a: Vec<DpfKey> = pairs.iter().map(|(_, (a, _))| a.clone()).collect();
        let keys_b: Vec<DpfKey> = pairs.iter().map(|(_, (_, b))| b.clone()).collect();
        let answers_a = scanner.pass(&keys_a).unwrap();
        let answers_b = scanner.pass(&keys_b).unwrap();
        prop_assert_eq!(answers_a.len(), q);
        for (i, (alpha, _)) in pairs.iter().enumerate() {
            prop_assert_eq!(answers_a.answer(i), &reference_answer(&db, &keys_a[i])[..]);
            let mut page = answers_a.answer(i).to_vec();
            xor_into(&mut page, answers_b.answer(i));
            prop_assert_eq!(&page[..], db.page(*alpha).unwrap());
        }
    }
}

#[test]
fn rejects_keys_of_another_domain() {
    let file = TestDb::create(100, 256, 1).unwrap();
    let db = file.db.clone();
    let scanner = CpuScanner::new(db, 1).unwrap();
    let (k, _) = generate(9, 3, &mut rand::rng()).unwrap();
    let err = scanner.pass(&[k]).unwrap_err();
    assert!(
        matches!(
            err,
            ScanError::DomainBits {
                index: 0,
                got: 9,
                want: 7
            }
        ),
        "{err:?}"
    );
}

#[test]
fn rejects_oversized_batches() {
    let file = TestDb::create(100, 256, 1).unwrap();
    let db = file.db.clone();
    let scanner = CpuScanner::new(db, 1).unwrap().with_max_batch_keys(2);
    let keys: Vec<_> = (0..3)
        .map(|i| generate(7, i, &mut rand::rng()).unwrap().0)
        .collect();
    assert!(matches!(
        scanner.pass(&keys),
        Err(ScanError::BatchTooLarge { got: 3, max: 2 })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Shards: every shard scans only its range, and the XOR of the S partial answers is the
    /// whole database's answer, at the base and at epochs whose writes fall in every shard.
    #[test]
    fn shard_partials_xor_to_the_whole_answer(
        num_pages in 257u64..3000,
        count in 2u32..5,
        q in 1usize..20,
        seed in any::<u64>(),
    ) {
        use pirq_shared::shard::ShardSpec;
        use pirq_shared::update::{EpochUpdate, PageWrite};
        let file = TestDb::create(num_pages, 256, seed).unwrap();
        let db = file.db.clone();
        let Ok(ranges) = ShardSpec::all_ranges(count, num_pages) else {
            return Ok(()); // more shards than 256-page blocks
        };
        let whole = CpuScanner::new(db.clone(), 1).unwrap();
        let shards: Vec<CpuScanner> = ranges
            .iter()
            .map(|r| CpuScanner::with_range(db.clone(), 1, r.clone()).unwrap())
            .collect();
        let n = db.header().domain_bits();
        let mut rng = StdRng::seed_from_u64(seed);
        let keys: Vec<DpfKey> = (0..q)
            .map(|_| generate(n, rng.next_u64() % num_pages, &mut rng).unwrap().0)
            .collect();
        // Epoch 1 writes one page in every shard (its first and last), epoch 2 one more.
        let mut writes: Vec<PageWrite> = ranges
            .iter()
            .flat_map(|r| [r.start, r.end - 1])
            .map(|index| PageWrite { index, page: vec![index as u8 ^ 0x5a; 256] })
            .collect();
        let e1 = EpochUpdate { epoch: 1, pages: writes.clone() };
        writes.truncate(1);
        writes[0].page = vec![7; 256];
        let e2 = EpochUpdate { epoch: 2, pages: writes };
        for update in [None, Some(&e1), Some(&e2)] {
            if let Some(u) = update {
                whole.apply_epoch(u).unwrap();
                for s in &shards {
                    s.apply_epoch(u).unwrap();
                }
            }
            for epoch in 0..=update.map_or(0, |u| u.epoch) {
                let epochs = vec![epoch; keys.len()];
                let want = whole.pass_at(&keys, &epochs).unwrap();
                let mut got = vec![0u8; want.as_bytes().len()];
                for s in &shards {
                    xor_into(&mut got, s.pass_at(&keys, &epochs).unwrap().as_bytes());
                }
                prop_assert_eq!(&got[..], want.as_bytes(), "epoch {}", epoch);
            }
        }
        // A write outside the database is refused by every shard, not only by its owner.
        let bad = EpochUpdate { epoch: 3, pages: vec![PageWrite { index: num_pages, page: vec![0; 256] }] };
        for s in &shards {
            prop_assert!(s.apply_epoch(&bad).is_err());
        }
    }
}

/// Scanners over shard files (`pirq db split`) answer like scanners over the whole file's
/// ranges; a shard file refuses a range it does not hold.
#[test]
fn shard_files_serve_their_range() {
    use pirq_shared::shard::ShardSpec;
    let file = TestDb::create(1000, 256, 5).unwrap();
    let db = file.db.clone();
    let n = db.header().domain_bits();
    let mut rng = StdRng::seed_from_u64(5);
    let keys: Vec<DpfKey> = (0..30)
        .map(|_| generate(n, rng.next_u64() % 1000, &mut rng).unwrap().0)
        .collect();
    let want = CpuScanner::new(db.clone(), 1).unwrap().pass(&keys).unwrap();
    let mut got = vec![0u8; want.as_bytes().len()];
    for (i, range) in ShardSpec::all_ranges(3, 1000)
        .unwrap()
        .into_iter()
        .enumerate()
    {
        let spec = ShardSpec::new(i as u32, 3).unwrap();
        let path = file.dir().join(format!("s{i}.pirdb"));
        db::write_shard(&path, &db, spec, |_| {}).unwrap();
        let file = Arc::new(PirDb::open(&path).unwrap());
        let scanner = CpuScanner::with_range(file.clone(), 1, range).unwrap();
        assert_eq!(scanner.geometry().num_pages, 1000);
        xor_into(&mut got, scanner.pass(&keys).unwrap().as_bytes());
        assert!(CpuScanner::with_range(file, 1, 0..1000).is_err());
    }
    assert_eq!(got, want.as_bytes());
}
