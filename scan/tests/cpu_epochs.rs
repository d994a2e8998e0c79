//! Epochs on the CPU scanner against a ground-truth model: the full contents at every epoch.

use pirq_scan::cpu::CpuScanner;
use pirq_scan::epoch_window::{EpochError, PageWrite};
use pirq_scan::{ScanError, Scanner};
use pirq_shared::bits::xor_into;
use pirq_shared::dpf::{generate, DpfKey};
use pirq_shared::update::{EpochUpdate, UpdateError};
use pirq_shared::wire::EpochRange;
use pirq_testkit::TestDb;
use proptest::prelude::*;
use rand::{rngs::StdRng, Rng, RngCore, SeedableRng};

struct Fixture {
    file: TestDb,
    /// model[e - first_epoch] = every page's contents at epoch e.
    model: Vec<Vec<Vec<u8>>>,
    first_epoch: u64,
}

fn fixture(num_pages: u64, page_size: u32, epoch: u64, seed: u64) -> Fixture {
    let file = TestDb::create_at(num_pages, page_size, epoch, seed).unwrap();
    let pages = (0..num_pages).map(|p| file.page(p).to_vec()).collect();
    Fixture {
        file,
        model: vec![pages],
        first_epoch: epoch,
    }
}

/// A random update: `changes` page writes, repeats allowed (the last write wins).
fn random_update(
    rng: &mut StdRng,
    num_pages: u64,
    page_size: usize,
    changes: usize,
) -> Vec<PageWrite> {
    (0..changes)
        .map(|_| {
            let mut page = vec![0u8; page_size];
            rng.fill_bytes(&mut page);
            PageWrite {
                index: rng.random_range(0..num_pages),
                page,
            }
        })
        .collect()
}

impl Fixture {
    fn push(&mut self, scanner: &CpuScanner, epoch: u64, writes: &[PageWrite]) {
        scanner
            .apply_epoch(&EpochUpdate {
                epoch,
                pages: writes.to_vec(),
            })
            .unwrap();
        let mut next = self.model.last().unwrap().clone();
        for w in writes {
            next[w.index as usize] = w.page.clone();
        }
        self.model.push(next);
    }

    fn page_at(&self, epoch: u64, p: u64) -> &[u8] {
        &self.model[(epoch - self.first_epoch) as usize][p as usize]
    }
}

/// Queries pinned to every epoch of the window, both parties, against the model.
fn check_window(f: &Fixture, scanner: &CpuScanner, rng: &mut StdRng) {
    let EpochRange { oldest, newest } = scanner.epoch_window();
    let n = f.file.db.header().domain_bits();
    let num_pages = f.file.db.num_pages();
    let mut keys = (Vec::<DpfKey>::new(), Vec::<DpfKey>::new());
    let mut wanted = Vec::new();
    for epoch in oldest..=newest {
        for _ in 0..3 {
            let alpha = rng.next_u64() % num_pages;
            let (a, b) = generate(n, alpha, rng).unwrap();
            keys.0.push(a);
            keys.1.push(b);
            wanted.push((epoch, alpha));
        }
    }
    let epochs: Vec<u64> = wanted.iter().map(|w| w.0).collect();
    let ans_a = scanner.pass_at(&keys.0, &epochs).unwrap();
    let ans_b = scanner.pass_at(&keys.1, &epochs).unwrap();
    for (i, &(epoch, alpha)) in wanted.iter().enumerate() {
        let mut page = ans_a.answer(i).to_vec();
        xor_into(&mut page, ans_b.answer(i));
        assert_eq!(
            &page[..],
            f.page_at(epoch, alpha),
            "epoch {epoch} page {alpha}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn every_epoch_in_the_window_is_exact(
        seed in any::<u64>(),
        window in 1usize..6,
        epochs in 1usize..12,
        num_pages in 1u64..700,
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut f = fixture(num_pages, 256, 5, seed);
        let scanner = CpuScanner::new(f.file.db.clone(), 2).unwrap().with_epoch_window(window);
        check_window(&f, &scanner, &mut rng);
        for e in 6..6 + epochs as u64 {
            // Zero-change epochs, a few changes, and one page written over and over.
            let changes = [0, 1, 4, 20][rng.random_range(0..4)];
            let mut writes = random_update(&mut rng, num_pages, 256, changes);
            if rng.random_bool(0.5) {
                writes.extend(random_update(&mut StdRng::seed_from_u64(0), 1, 256, 1));
                writes.last_mut().unwrap().page[0] = e as u8;
            }
            f.push(&scanner, e, &writes);
            let EpochRange { oldest, newest } = scanner.epoch_window();
            prop_assert_eq!(newest, e);
            prop_assert_eq!(oldest, (e + 1).saturating_sub(window as u64).max(5));
            check_window(&f, &scanner, &mut rng);
        }
    }
}

#[test]
fn out_of_window_and_bad_updates_are_refused() {
    let f = fixture(100, 256, 0, 1);
    let scanner = CpuScanner::new(f.file.db.clone(), 1)
        .unwrap()
        .with_epoch_window(2);
    let (k, _) = generate(7, 1, &mut rand::rng()).unwrap();
    let err = scanner.pass_at(std::slice::from_ref(&k), &[1]).unwrap_err();
    assert!(matches!(
        err,
        ScanError::Epoch(EpochError::OutsideWindow {
            epoch: 1,
            oldest: 0,
            newest: 0
        })
    ));
    let page = vec![1u8; 256];
    let write = |epoch, index, page: &Vec<u8>| EpochUpdate {
        epoch,
        pages: vec![PageWrite {
            index,
            page: page.clone(),
        }],
    };
    assert!(matches!(
        scanner.apply_epoch(&write(2, 0, &page)),
        Err(ScanError::Epoch(EpochError::NotNext { got: 2, newest: 0 }))
    ));
    assert!(matches!(
        scanner.apply_epoch(&write(1, 100, &page)),
        Err(ScanError::Epoch(EpochError::Pages(
            UpdateError::PageIndex { .. }
        )))
    ));
    assert!(matches!(
        scanner.apply_epoch(&write(1, 0, &vec![0u8; 255])),
        Err(ScanError::Epoch(EpochError::Pages(
            UpdateError::PageSize { .. }
        )))
    ));
    // Nothing of a refused update was applied.
    assert_eq!(
        scanner.epoch_window(),
        EpochRange {
            oldest: 0,
            newest: 0
        }
    );
    scanner.apply_epoch(&write(1, 3, &page)).unwrap();
    scanner.apply_epoch(&write(2, 4, &page)).unwrap();
    assert_eq!(
        scanner.epoch_window(),
        EpochRange {
            oldest: 1,
            newest: 2
        }
    );
    assert!(scanner.pass_at(&[k], &[0]).is_err());
}
