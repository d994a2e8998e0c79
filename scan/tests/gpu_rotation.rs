//! GPU rotating-scan tests: the CUDA rotation against the model of every page at every epoch
//! (joins at random segments, updates folding the base mid-turn), against the CPU rotation
//! key by key, a shard's turn over its range, and answers lent in pinned blocks held while
//! later steps run.
//!
//! They need a GPU, so they run only with `PIRQ_GPU_TESTS=1` (scripts/gpu-test.sh sets it);
//! elsewhere each test returns at once and passes as skipped, saying so on stderr.
#![cfg(feature = "cuda")]

mod rotation_model;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use pirq_scan::cpu::{CpuRotation, CpuScanner};
use pirq_scan::cuda::{CudaConfig, CudaRotation, CudaScanner, ScanPlan};
use pirq_scan::rotation::{Finished, Rotation, Ticket};
use pirq_scan::{Answers, Scanner};
use pirq_shared::dpf::{generate, DpfKey};
use pirq_testkit::{gpu_tests_enabled, TestDb};
use rand::{rngs::StdRng, Rng, RngCore, SeedableRng};
use rotation_model::{drive, Model};

fn gpu(file: &TestDb, window: usize, max_keys: usize) -> Arc<CudaScanner> {
    gpu_with_plan(file, window, max_keys, None)
}

fn gpu_with_plan(
    file: &TestDb,
    window: usize,
    max_keys: usize,
    plan: Option<ScanPlan>,
) -> Arc<CudaScanner> {
    let config = CudaConfig {
        epoch_window: window,
        max_batch_keys: max_keys,
        plan,
        ..CudaConfig::default()
    };
    Arc::new(CudaScanner::from_pirdb(&file.db, config, |_, _| {}).unwrap())
}

/// The plans whose selection layouts a rotation on this GPU can scan with: the one it picks
/// for few keys (`None`), and on Hopper `wgmma` fixed, the layout of many keys in flight.
fn layouts(file: &TestDb) -> Vec<Option<ScanPlan>> {
    let mut plans = vec![None];
    if gpu(file, 1, 16).has_wgmma() {
        plans.push(Some(ScanPlan::wgmma_for(64)));
    }
    plans
}

/// Random joins and updates on the GPU; each party's answer equals `pirq_shared`'s reference at
/// its epoch, across folds of the base mid-turn; epochs that leave the window are refused.
#[test]
fn gpu_rotation_is_exact_while_updates_fold_the_base_mid_turn() {
    if !gpu_tests_enabled("gpu_rotation_is_exact_while_updates_fold_the_base_mid_turn") {
        return;
    }
    for (pages, page_size, segments, seed) in [(4096u64, 512u32, 6usize, 1u64), (3000, 256, 4, 2)] {
        let file = TestDb::create_at(pages, page_size, 0, seed).unwrap();
        for plan in layouts(&file) {
            let scanner = gpu_with_plan(&file, 3, 64, plan);
            let mut rotation = CudaRotation::new(scanner.clone(), segments);
            assert_eq!(rotation.segments(), segments);
            let mut model = Model::of(&file, 0);
            let mut rng = StdRng::seed_from_u64(seed);
            let seen = drive(
                &mut rotation,
                scanner.as_ref(),
                &mut model,
                &mut rng,
                300,
                0.7,
                0.25,
            );
            eprintln!(
                "{pages} pages of {page_size} B, {segments} segments, plan {plan:?}: {seen:?}"
            );
            assert!(seen.exact_across_folds >= 5, "{seen:?}");
            assert!(seen.exact_at_old_epochs >= 5, "{seen:?}");
        }
    }
}

/// The same keys joining at the same steps give the same answers, key by key, on the GPU and
/// the CPU, with many keys in flight (column groups reused as groups leave).
#[test]
fn gpu_rotation_matches_the_cpu_rotation() {
    if !gpu_tests_enabled("gpu_rotation_matches_the_cpu_rotation") {
        return;
    }
    let file = TestDb::create(20_000, 1024, 7).unwrap();
    let gpu_scanner = gpu(&file, 4, 256);
    let cpu_scanner = Arc::new(CpuScanner::new(file.db.clone(), 2).unwrap());
    let mut on_gpu = CudaRotation::new(gpu_scanner.clone(), 7);
    let mut on_cpu = CpuRotation::new(cpu_scanner.clone(), 7);
    let n = file.db.header().domain_bits();
    let mut rng = StdRng::seed_from_u64(3);
    let (mut got_gpu, mut got_cpu): (Vec<Finished>, Vec<Finished>) = (Vec::new(), Vec::new());
    let mut joined = 0;
    // Keys in flight grow past the `mma.sync` limit and drain again: on Hopper the rotation
    // switches to `wgmma` and back mid-turn, its keys expanded again each time.
    let mut layouts = HashSet::new();
    for step in 0..60 {
        for _ in 0..rng.random_range(0..4) {
            let k = rng.random_range(1..40);
            if step >= 45 || !on_gpu.fits(k) {
                continue;
            }
            let keys: Vec<DpfKey> = (0..k)
                .map(|_| generate(n, rng.next_u64() % 20_000, &mut rng).unwrap().0)
                .collect();
            assert_eq!(
                on_gpu.join(&keys, 0).unwrap(),
                on_cpu.join(&keys, 0).unwrap()
            );
            joined += 1;
        }
        got_gpu.extend(on_gpu.step().unwrap().finished);
        got_cpu.extend(on_cpu.step().unwrap().finished);
        layouts.insert(format!("{:?}", on_gpu.sel_layout()));
    }
    if gpu_scanner.has_wgmma() {
        assert_eq!(layouts.len(), 2, "both layouts scanned: {layouts:?}");
    }
    assert_eq!(on_gpu.in_flight(), 0);
    assert_eq!(got_gpu.len(), joined);
    for (g, c) in got_gpu.into_iter().zip(got_cpu) {
        assert_eq!(g.ticket, c.ticket);
        assert_eq!(
            g.answers.unwrap(),
            c.answers.unwrap(),
            "group {:?}",
            g.ticket
        );
    }
    // The workspace goes back to the pool with the rotation: passes run again.
    drop(on_gpu);
    let key = generate(n, 5, &mut rng).unwrap().0;
    assert_eq!(
        gpu_scanner.pass(std::slice::from_ref(&key)).unwrap(),
        cpu_scanner.pass(&[key]).unwrap()
    );
}

/// A shard's turn covers its range: its answers are the shard's partial answers.
#[test]
fn gpu_shard_rotation_is_its_range() {
    if !gpu_tests_enabled("gpu_shard_rotation_is_its_range") {
        return;
    }
    let file = TestDb::create(6000, 512, 9).unwrap();
    let range = pirq_shared::shard::ShardSpec::all_ranges(2, 6000).unwrap()[1].clone();
    let config = CudaConfig {
        max_batch_keys: 64,
        ..CudaConfig::default()
    };
    let shard = Arc::new(
        CudaScanner::from_pirdb_range(&file.db, range.clone(), config, |_, _| {}).unwrap(),
    );
    let cpu = Arc::new(CpuScanner::with_range(file.db.clone(), 1, range).unwrap());
    let n = file.db.header().domain_bits();
    let mut rng = StdRng::seed_from_u64(4);
    let keys: Vec<DpfKey> = (0..20)
        .map(|_| generate(n, rng.next_u64() % 6000, &mut rng).unwrap().0)
        .collect();
    let mut rotation = CudaRotation::new(shard.clone(), 4);
    rotation.step().unwrap();
    rotation.join(&keys, 0).unwrap();
    let mut finished = Vec::new();
    while rotation.in_flight() > 0 {
        finished.extend(rotation.step().unwrap().finished);
    }
    assert_eq!(
        finished.pop().unwrap().answers.unwrap(),
        cpu.pass(&keys).unwrap()
    );
}

/// Answers lent in pinned blocks stay exact while the worker holds them: groups leave across
/// many steps, some answers are dropped at once (their blocks go back and are lent again),
/// others held for several later steps or to the end (their blocks must not be lent again
/// meanwhile), and for a stretch every answer is held so the pool runs dry and the rotation
/// falls back to copying. Groups larger than a block are copied too. Every answer is checked
/// byte for byte against the CPU, when it finishes and again when it is dropped.
#[test]
fn gpu_rotation_lent_answers_stay_exact_while_held() {
    if !gpu_tests_enabled("gpu_rotation_lent_answers_stay_exact_while_held") {
        return;
    }
    let file = TestDb::create(8000, 1024, 11).unwrap();
    // 64 keys in flight: 16 blocks of 8 pages (PoolShape::for_keys).
    let gpu_scanner = gpu(&file, 2, 64);
    let cpu_scanner = CpuScanner::new(file.db.clone(), 2).unwrap();
    let mut rotation = CudaRotation::new(gpu_scanner.clone(), 5);
    let blocks = rotation.answer_blocks().blocks;
    assert_eq!(blocks, 16);
    let n = file.db.header().domain_bits();
    let mut rng = StdRng::seed_from_u64(12);
    let mut want: HashMap<Ticket, Answers> = HashMap::new();
    // Answers held: until which step (`usize::MAX`: to the end).
    let mut held: Vec<(usize, Ticket, Answers)> = Vec::new();
    let (mut finished, mut ran_dry, mut to_the_end) = (0, false, 0);
    let steps = 120;
    let mut step = 0;
    while step < steps || rotation.in_flight() > 0 {
        for _ in 0..rng.random_range(0..4) {
            // Mostly 1 to 3 keys, now and then more than a block's 8 pages.
            let k = if rng.random_bool(0.1) {
                rng.random_range(9..16)
            } else {
                rng.random_range(1..4)
            };
            if step >= steps || !rotation.fits(k) {
                continue;
            }
            let keys: Vec<DpfKey> = (0..k)
                .map(|_| generate(n, rng.next_u64() % 8000, &mut rng).unwrap().0)
                .collect();
            let ticket = rotation.join(&keys, 0).unwrap();
            want.insert(ticket, cpu_scanner.pass(&keys).unwrap());
        }
        for f in rotation.step().unwrap().finished {
            let answers = f.answers.unwrap();
            assert_eq!(
                answers, want[&f.ticket],
                "group {:?} as it finished",
                f.ticket
            );
            finished += 1;
            // Steps 30 to 70 hold everything for 40 steps: the pool runs dry. A few answers
            // are held to the end (their blocks never come back); the rest for a while.
            let until = if (30..70).contains(&step) {
                step + 40
            } else if to_the_end < 4 && rng.random_bool(0.1) {
                to_the_end += 1;
                usize::MAX
            } else {
                match rng.random_range(0..3) {
                    0 => step,
                    1 => step + rng.random_range(1..8),
                    _ => step + rng.random_range(8..30),
                }
            };
            held.push((until, f.ticket, answers));
        }
        ran_dry |= rotation.answer_blocks().free == 0;
        held.retain(|(until, ticket, answers)| {
            let keep = *until > step;
            if !keep {
                assert_eq!(answers, &want[ticket], "group {ticket:?} when dropped");
            }
            keep
        });
        step += 1;
    }
    for (_, ticket, answers) in &held {
        assert_eq!(answers, &want[ticket], "group {ticket:?} held to the end");
    }
    let stats = rotation.answer_blocks();
    eprintln!(
        "{finished} groups, {} held to the end: {stats:?}",
        held.len()
    );
    assert_eq!(finished, want.len());
    assert!(
        stats.leases > 2 * blocks as u64,
        "blocks lent again: {stats:?}"
    );
    assert!(
        ran_dry,
        "the pool ran dry while answers were held: {stats:?}"
    );
    assert!(stats.lent_bytes > 0 && stats.copied_bytes > 0, "{stats:?}");
    drop(held);
    assert_eq!(
        rotation.answer_blocks().free,
        blocks,
        "every block back once its answers dropped"
    );
}
