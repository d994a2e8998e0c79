//! The CPU backend's rotating scan: answers after exactly one turn, equal to a pass's, exact at
//! pinned epochs while updates fold the base mid-turn, and a shard's turn over its range only.

mod rotation_model;

use std::sync::Arc;

use pirq_scan::cpu::{CpuRotation, CpuScanner};
use pirq_scan::rotation::Rotation;
use pirq_scan::{ScanError, Scanner};
use pirq_shared::dpf::{generate, DpfKey};
use pirq_testkit::TestDb;
use proptest::prelude::*;
use rand::{rngs::StdRng, RngCore, SeedableRng};
use rotation_model::{drive, Model};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// Random joins and updates; every pair of answers combines to the model's page at its
    /// epoch, including pairs whose turn spanned a fold of the base.
    #[test]
    fn answers_stay_exact_while_updates_fold_the_base_mid_turn(
        seed in any::<u64>(),
        num_pages in 1u64..2000,
        segments in 1usize..9,
        window in 2usize..5,
    ) {
        let file = TestDb::create_at(num_pages, 256, 3, seed).unwrap();
        let scanner = Arc::new(
            CpuScanner::new(file.db.clone(), 2).unwrap().with_epoch_window(window),
        );
        let mut rotation = CpuRotation::new(scanner.clone(), segments);
        let mut model = Model::of(&file, 3);
        let mut rng = StdRng::seed_from_u64(seed);
        let seen = drive(&mut rotation, scanner.as_ref(), &mut model, &mut rng, 60, 0.6, 0.3);
        prop_assert!(seen.exact > 0, "{seen:?}");
    }
}

/// The same with enough steps that every case happens: pairs exact across folds and at old
/// epochs, and pairs refused because their epoch left the window mid-turn.
#[test]
fn folds_mid_turn_are_exact_and_epochs_that_leave_the_window_are_refused() {
    let file = TestDb::create_at(1500, 512, 0, 11).unwrap();
    let scanner = Arc::new(
        CpuScanner::new(file.db.clone(), 2)
            .unwrap()
            .with_epoch_window(3),
    );
    let mut rotation = CpuRotation::new(scanner.clone(), 6);
    assert_eq!(rotation.segments(), 6);
    let mut model = Model::of(&file, 0);
    let mut rng = StdRng::seed_from_u64(5);
    let seen = drive(
        &mut rotation,
        scanner.as_ref(),
        &mut model,
        &mut rng,
        400,
        0.7,
        0.25,
    );
    assert!(seen.exact_across_folds >= 10, "{seen:?}");
    assert!(seen.exact_at_old_epochs >= 10, "{seen:?}");
    assert!(seen.refused >= 1, "{seen:?}");
}

/// A rotation's answers are a pass's answers, for one party's keys alone (not only combined).
#[test]
fn a_turn_answers_what_a_pass_answers() {
    let file = TestDb::create(3000, 256, 2).unwrap();
    let scanner = Arc::new(CpuScanner::new(file.db.clone(), 2).unwrap());
    let n = file.db.header().domain_bits();
    let mut rng = StdRng::seed_from_u64(9);
    let keys: Vec<DpfKey> = (0..12)
        .map(|_| generate(n, rng.next_u64() % 3000, &mut rng).unwrap().0)
        .collect();
    let want = scanner.pass(&keys).unwrap();
    let mut rotation = CpuRotation::new(scanner.clone(), 5);
    // Three groups joining at different segments.
    let mut got = Vec::new();
    let mut tickets = Vec::new();
    for (i, chunk) in keys.chunks(4).enumerate() {
        tickets.push(rotation.join(chunk, 0).unwrap());
        for _ in 0..i + 1 {
            got.extend(rotation.step().unwrap().finished);
        }
    }
    while rotation.in_flight() > 0 {
        got.extend(rotation.step().unwrap().finished);
    }
    got.sort_by_key(|f| f.ticket);
    let bytes: Vec<u8> = got
        .into_iter()
        .flat_map(|f| f.answers.unwrap().into_bytes())
        .collect();
    assert_eq!(bytes, want.as_bytes());
}

/// A lone key on a small table joins and goes round without handing work to the scanner's
/// pool (each hand-off is two thread wake-ups, most of a small table's latency:
/// `INLINE_EXPAND_PAGES` in `scan/src/cpu.rs`), and answers what a pass answers; a large join
/// and a large segment still spread over the pool's threads.
#[test]
fn a_lone_key_on_a_small_table_is_answered_without_a_hand_off_to_the_pool() {
    let file = TestDb::create(900, 256, 4).unwrap();
    let scanner = Arc::new(CpuScanner::new(file.db.clone(), 2).unwrap());
    let n = file.db.header().domain_bits();
    let mut rng = StdRng::seed_from_u64(21);
    let key = generate(n, 417, &mut rng).unwrap().0;
    let want = scanner.pass(std::slice::from_ref(&key)).unwrap();
    let mut rotation = CpuRotation::new(scanner.clone(), 3);
    let before = scanner.pool_hand_offs();
    rotation.join(std::slice::from_ref(&key), 0).unwrap();
    let mut got = Vec::new();
    while rotation.in_flight() > 0 {
        got.extend(rotation.step().unwrap().finished);
    }
    assert_eq!(
        scanner.pool_hand_offs(),
        before,
        "no hand-off for a lone small key"
    );
    assert_eq!(got.len(), 1);
    let answer = got.pop().unwrap().answers.unwrap();
    assert_eq!(answer.as_bytes(), want.as_bytes());

    // 80 keys over 900 pages (72,000 pages) expand on the pool, one hand-off, and each of
    // their segments (80 keys × 300 pages × 256 B, 6 MB) is split over the threads.
    let keys: Vec<DpfKey> = (0..80)
        .map(|_| generate(n, rng.next_u64() % 900, &mut rng).unwrap().0)
        .collect();
    let before = scanner.pool_hand_offs();
    rotation.join(&keys, 0).unwrap();
    assert_eq!(
        scanner.pool_hand_offs(),
        before + 1,
        "a large expansion is spread"
    );
    let mut steps = 0;
    while rotation.in_flight() > 0 {
        rotation.step().unwrap();
        steps += 1;
    }
    assert_eq!(
        scanner.pool_hand_offs(),
        before + 1 + steps,
        "large pieces are split"
    );
}

/// A shard's turn covers its range only: its answers are the shard's partial answers.
#[test]
fn a_shards_turn_is_its_range() {
    let file = TestDb::create(2000, 256, 4).unwrap();
    let range = 512..1280;
    let shard = Arc::new(CpuScanner::with_range(file.db.clone(), 1, range.clone()).unwrap());
    let n = file.db.header().domain_bits();
    let mut rng = StdRng::seed_from_u64(3);
    let keys: Vec<DpfKey> = (0..6)
        .map(|_| generate(n, rng.next_u64() % 2000, &mut rng).unwrap().0)
        .collect();
    let mut rotation = CpuRotation::new(shard.clone(), 4);
    assert!(rotation
        .segment_ranges()
        .iter()
        .all(|s| s.end <= range.end - range.start));
    rotation.join(&keys, 0).unwrap();
    let mut finished = Vec::new();
    while rotation.in_flight() > 0 {
        finished.extend(rotation.step().unwrap().finished);
    }
    assert_eq!(finished.len(), 1);
    let got = finished.pop().unwrap().answers.unwrap();
    assert_eq!(got, shard.pass(&keys).unwrap());
}

/// Joins that cannot be answered are refused whole, before anything is scanned.
#[test]
fn bad_joins_are_refused() {
    let file = TestDb::create(300, 256, 1).unwrap();
    let scanner = Arc::new(
        CpuScanner::new(file.db.clone(), 1)
            .unwrap()
            .with_max_batch_keys(4),
    );
    let mut rotation = scanner.clone().rotation().unwrap();
    assert!(rotation.segments() >= 4);
    let n = file.db.header().domain_bits();
    let key = |n| generate(n, 1, &mut rand::rng()).unwrap().0;
    assert!(matches!(
        rotation.join(&[key(n + 1)], 0),
        Err(ScanError::DomainBits { .. })
    ));
    assert!(matches!(
        rotation.join(&[key(n)], 1),
        Err(ScanError::Epoch(_))
    ));
    rotation.join(&[key(n), key(n), key(n)], 0).unwrap();
    assert!(!rotation.fits(2));
    assert!(matches!(
        rotation.join(&[key(n), key(n)], 0),
        Err(ScanError::BatchTooLarge { .. })
    ));
    assert_eq!(rotation.in_flight(), 3);
    assert_eq!(rotation.clear().len(), 1);
    assert_eq!(rotation.in_flight(), 0);
}

/// A segment scanned in pieces with a pause point between two (where a worker of several tables
/// lets another table step) answers what a pass answers, while another rotation steps in the
/// pauses: one thread (pieces of a bitmap word up) and two (pieces of a task each up).
#[test]
fn a_segment_paused_between_pieces_answers_what_a_pass_answers() {
    for threads in [1, 2] {
        let busy_file = TestDb::create(5000, 256, 6).unwrap();
        let quiet_file = TestDb::create(200, 512, 7).unwrap();
        let busy = Arc::new(CpuScanner::new(busy_file.db.clone(), threads).unwrap());
        let quiet = Arc::new(CpuScanner::new(quiet_file.db.clone(), 1).unwrap());
        let mut rng = StdRng::seed_from_u64(threads as u64);
        let keys = |file: &TestDb, count: usize, rng: &mut StdRng| -> Vec<DpfKey> {
            let (n, pages) = (file.db.header().domain_bits(), file.db.num_pages());
            (0..count)
                .map(|_| generate(n, rng.next_u64() % pages, rng).unwrap().0)
                .collect()
        };
        let (busy_keys, quiet_keys) = (
            keys(&busy_file, 9, &mut rng),
            keys(&quiet_file, 3, &mut rng),
        );
        // One segment: the whole database in one step, in pieces.
        let mut busy_rotation = CpuRotation::new(busy.clone(), 1);
        let mut quiet_rotation = CpuRotation::new(quiet.clone(), 1);
        busy_rotation.join(&busy_keys, 0).unwrap();
        quiet_rotation.join(&quiet_keys, 0).unwrap();
        let (mut pauses, mut quiet_done) = (0, Vec::new());
        let step = busy_rotation
            .step_pausing(&mut || {
                pauses += 1;
                if quiet_rotation.in_flight() > 0 {
                    quiet_done.extend(quiet_rotation.step().unwrap().finished);
                }
            })
            .unwrap();
        assert!(
            pauses >= 1,
            "{threads} thread(s): the segment was one piece"
        );
        assert_eq!(step.finished.len(), 1);
        let got = step.finished.into_iter().next().unwrap().answers.unwrap();
        assert_eq!(got, busy.pass(&busy_keys).unwrap(), "{threads} thread(s)");
        assert_eq!(
            quiet_done.len(),
            1,
            "the quiet rotation stepped in the pauses"
        );
        let got = quiet_done.pop().unwrap().answers.unwrap();
        assert_eq!(got, quiet.pass(&quiet_keys).unwrap());
    }
}
