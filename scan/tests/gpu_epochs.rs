//! GPU epoch tests: the CUDA scanner's epoch window against a ground-truth model (every page's
//! contents at every epoch), and against the CPU scanner, across folds of the base.
//!
//! They need a GPU, so they run only with `PIRQ_GPU_TESTS=1` (scripts/gpu-test.sh sets it);
//! elsewhere each test returns at once and passes as skipped, saying so on stderr.
//! Build with `cargo test --features cuda -p pirq-worker --test gpu_epochs`.
#![cfg(feature = "cuda")]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use pirq_scan::cpu::CpuScanner;
use pirq_scan::cuda::{CudaConfig, CudaScanner};
use pirq_scan::epoch_window::EpochError;
use pirq_scan::{ScanError, Scanner};
use pirq_shared::bits::{bit, xor_into};
use pirq_shared::dpf::{eval_full, generate, DpfKey};
use pirq_shared::update::{EpochUpdate, PageWrite};
use pirq_shared::wire::EpochRange;
use pirq_testkit::{gpu_tests_enabled, TestDb};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

type Pages = Arc<Vec<Vec<u8>>>;

/// Ground truth: every page at every epoch still in the window.
struct Model {
    num_pages: u64,
    epochs: BTreeMap<u64, Pages>,
}

impl Model {
    fn synthetic(seed: u64, page_size: usize, num_pages: u64, epoch: u64) -> Model {
        let pages = (0..num_pages)
            .map(|p| {
                let mut page = vec![0u8; page_size];
                pirq_shared::synthetic::fill_page(seed, p, &mut page);
                page
            })
            .collect();
        Model {
            num_pages,
            epochs: BTreeMap::from([(epoch, Arc::new(pages))]),
        }
    }

    fn newest(&self) -> u64 {
        *self.epochs.keys().next_back().unwrap()
    }

    /// Applies `writes` as the next epoch (the last write of a page wins); keeps `window` epochs.
    fn push(&mut self, writes: &[PageWrite], window: usize) -> u64 {
        let e = self.newest() + 1;
        let mut pages = (*self.epochs[&(e - 1)]).clone();
        for w in writes {
            pages[w.index as usize].clone_from(&w.page);
        }
        self.epochs.insert(e, Arc::new(pages));
        while self.epochs.len() > window {
            self.epochs.pop_first();
        }
        e
    }

    fn range(&self) -> EpochRange {
        EpochRange {
            oldest: *self.epochs.keys().next().unwrap(),
            newest: self.newest(),
        }
    }
}

/// The answer to a key at an epoch: the XOR of the selected pages (SPEC §3).
fn answer(pages: &[Vec<u8>], bitmap: &[u64], num_pages: u64) -> Vec<u8> {
    let mut acc = vec![0u8; pages[0].len()];
    for (p, page) in pages.iter().enumerate().take(num_pages as usize) {
        if bit(bitmap, p) {
            xor_into(&mut acc, page);
        }
    }
    acc
}

/// A random update: empty (about 1 in 6), else random pages, a hot page written in most epochs
/// (sometimes twice in one update), sometimes a whole 256-page block and the last page.
fn random_update(rng: &mut StdRng, num_pages: u64, page_size: usize) -> Vec<PageWrite> {
    let mut indices = Vec::new();
    if rng.random_range(0..6) != 0 {
        indices.extend((0..rng.random_range(1..40)).map(|_| rng.random_range(0..num_pages)));
        indices.push(5 % num_pages);
        if rng.random_bool(0.4) {
            indices.push(5 % num_pages);
        }
        if rng.random_bool(0.2) {
            indices.extend((256..512).filter(|&p| p < num_pages));
        }
        if rng.random_bool(0.3) {
            indices.push(num_pages - 1);
        }
    }
    indices
        .into_iter()
        .map(|index| {
            let mut page = vec![0u8; page_size];
            rng.fill_bytes(&mut page);
            PageWrite { index, page }
        })
        .collect()
}

/// `pairs` key pairs (both parties) for indices that are mostly recently changed pages, each
/// pair pinned to one epoch, epochs going round the whole window.
fn pinned_pairs(
    rng: &mut StdRng,
    n: u8,
    num_pages: u64,
    pairs: usize,
    hot: &[u64],
    range: EpochRange,
) -> (Vec<DpfKey>, Vec<u64>, Vec<u64>) {
    let span = range.newest - range.oldest + 1;
    let (mut keys, mut epochs, mut alphas) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..pairs {
        let alpha = match hot.is_empty() || rng.random_bool(0.3) {
            true => rng.random_range(0..num_pages),
            false => hot[rng.random_range(0..hot.len())],
        };
        let (k0, k1) = generate(n, alpha, rng).unwrap();
        let e = range.oldest + i as u64 % span;
        keys.extend([k0, k1]);
        epochs.extend([e, e]);
        alphas.push(alpha);
    }
    (keys, epochs, alphas)
}

/// Checks every answer byte for byte against the model, and every pair's XOR against the page.
fn check(
    model: &Model,
    keys: &[DpfKey],
    epochs: &[u64],
    alphas: &[u64],
    got: &pirq_scan::Answers,
    what: &str,
) {
    assert_eq!(got.len(), keys.len());
    for (q, (key, e)) in keys.iter().zip(epochs).enumerate() {
        let pages = &model.epochs[e];
        let want = answer(pages, &eval_full(key), model.num_pages);
        assert!(
            got.answer(q) == want.as_slice(),
            "{what}: key {q} at epoch {e} differs from the model"
        );
    }
    for (i, &alpha) in alphas.iter().enumerate() {
        let mut page = got.answer(2 * i).to_vec();
        xor_into(&mut page, got.answer(2 * i + 1));
        let e = epochs[2 * i];
        assert!(
            page == model.epochs[&e][alpha as usize],
            "{what}: pair {i} at epoch {e} does not reconstruct its page"
        );
    }
}

#[test]
fn epochs_match_model() {
    if !gpu_tests_enabled("epochs_match_model") {
        return;
    }
    // (page size, pages, window, key pairs a pass, updates): one-epoch window (every update
    // folds at once), small and default windows, several blocks, batches across scan plans.
    let cases = [
        (256usize, 1_500u64, 4usize, 20usize, 14usize),
        (4096, 700, 1, 9, 5),
        (1024, 2_000, 16, 32, 24),
        (256, 5_000, 3, 65, 9),
        (65536, 300, 2, 4, 5),
    ];
    for (ci, &(ps, num_pages, window, pairs, updates)) in cases.iter().enumerate() {
        let seed = 0xE90C + ci as u64;
        let mut rng = StdRng::seed_from_u64(seed);
        let config = CudaConfig {
            max_batch_keys: 2 * pairs,
            epoch_window: window,
            ..CudaConfig::default()
        };
        let gpu = CudaScanner::synthetic(ps, num_pages, seed, config).unwrap();
        let n = gpu.geometry().domain_bits;
        let mut model = Model::synthetic(seed, ps, num_pages, 0);
        assert_eq!(gpu.epoch_window(), model.range());
        let mut hot: Vec<u64> = Vec::new();
        for step in 0..updates {
            let writes = random_update(&mut rng, num_pages, ps);
            hot.extend(writes.iter().map(|w| w.index));
            let e = model.push(&writes, window);
            gpu.apply_epoch(&EpochUpdate {
                epoch: e,
                pages: writes,
            })
            .unwrap();
            let range = model.range();
            assert_eq!(gpu.epoch_window(), range, "case {ci} step {step}");
            let (keys, epochs, alphas) = pinned_pairs(&mut rng, n, num_pages, pairs, &hot, range);
            let got = gpu.pass_at(&keys, &epochs).unwrap();
            check(
                &model,
                &keys,
                &epochs,
                &alphas,
                &got,
                &format!("case {ci} step {step}"),
            );
            // Every key at the base, and every key at the newest epoch.
            for e in [range.oldest, range.newest] {
                let all = vec![e; keys.len()];
                let got = gpu.pass_at(&keys, &all).unwrap();
                check(
                    &model,
                    &keys,
                    &all,
                    &alphas,
                    &got,
                    &format!("case {ci} step {step} all at {e}"),
                );
            }
        }
        // Outside the window either side is refused, and a gap in the updates too.
        let range = model.range();
        let (keys, _, _) = pinned_pairs(&mut rng, n, num_pages, 1, &[], range);
        for e in [range.newest + 1]
            .into_iter()
            .chain(range.oldest.checked_sub(1))
        {
            assert!(matches!(
                gpu.pass_at(&keys, &[e, e]),
                Err(ScanError::Epoch(EpochError::OutsideWindow { .. }))
            ));
        }
        let gap = EpochUpdate {
            epoch: range.newest + 2,
            pages: Vec::new(),
        };
        assert!(gpu.apply_epoch(&gap).is_err());
        assert_eq!(gpu.epoch_window(), range);
    }
}

#[test]
fn epochs_match_cpu_scanner_on_a_pirdb() {
    if !gpu_tests_enabled("epochs_match_cpu_scanner_on_a_pirdb") {
        return;
    }
    let (ps, num_pages, window, seed) = (2048usize, 3_001u64, 5usize, 0x5eedu64);
    let file = TestDb::create_at(num_pages, ps as u32, 41, seed).unwrap();
    let cpu = CpuScanner::new(file.db.clone(), 0)
        .unwrap()
        .with_epoch_window(window);
    let config = CudaConfig {
        max_batch_keys: 64,
        epoch_window: window,
        ..CudaConfig::default()
    };
    let gpu = CudaScanner::from_pirdb(&file.db, config, |_, _| {}).unwrap();
    let mut model = Model::synthetic(seed, ps, num_pages, 41);
    let n = gpu.geometry().domain_bits;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut hot = Vec::new();
    for step in 0..12 {
        let writes = random_update(&mut rng, num_pages, ps);
        hot.extend(writes.iter().map(|w| w.index));
        let e = model.push(&writes, window);
        let update = EpochUpdate {
            epoch: e,
            pages: writes,
        };
        cpu.apply_epoch(&update).unwrap();
        gpu.apply_epoch(&update).unwrap();
        assert_eq!(gpu.epoch_window(), cpu.epoch_window());
        assert_eq!(gpu.epoch_window(), model.range());
        let (keys, epochs, alphas) = pinned_pairs(&mut rng, n, num_pages, 32, &hot, model.range());
        let want = cpu.pass_at(&keys, &epochs).unwrap();
        let got = gpu.pass_at(&keys, &epochs).unwrap();
        assert!(got == want, "step {step}: CUDA and CPU answers differ");
        check(
            &model,
            &keys,
            &epochs,
            &alphas,
            &got,
            &format!("step {step}"),
        );
    }
}

#[test]
fn updates_while_passes_run() {
    if !gpu_tests_enabled("updates_while_passes_run") {
        return;
    }
    // Passes from two threads while a third applies 30 updates (each folding once the window
    // is full): every answer must match the epoch it was pinned to.
    let (ps, num_pages, window, seed) = (512usize, 4_000u64, 4usize, 0xC0FFEEu64);
    let config = CudaConfig {
        max_batch_keys: 32,
        epoch_window: window,
        ..CudaConfig::default()
    };
    let gpu = CudaScanner::synthetic(ps, num_pages, seed, config).unwrap();
    let n = gpu.geometry().domain_bits;
    let model = Mutex::new(Model::synthetic(seed, ps, num_pages, 0));
    // Snapshots stay published for every epoch ever made, so a reader can check any of them.
    let published: Mutex<BTreeMap<u64, Pages>> = Mutex::new(model.lock().unwrap().epochs.clone());
    let done = std::sync::atomic::AtomicBool::new(false);
    let checked = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (gpu, published, done, checked) = (&gpu, &published, &done, &checked);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed + 1 + t);
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let range = gpu.epoch_window();
                    let (keys, epochs, alphas) =
                        pinned_pairs(&mut rng, n, num_pages, 16, &[5, 6, 7], range);
                    let got = match gpu.pass_at(&keys, &epochs) {
                        Ok(a) => a,
                        // The window moved on between reading it and the pass: fine.
                        Err(ScanError::Epoch(EpochError::OutsideWindow { .. })) => continue,
                        Err(e) => panic!("pass failed: {e}"),
                    };
                    let view = Model {
                        num_pages,
                        epochs: published.lock().unwrap().clone(),
                    };
                    check(&view, &keys, &epochs, &alphas, &got, "concurrent");
                    checked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
        let mut rng = StdRng::seed_from_u64(seed);
        for _ in 0..30 {
            let mut writes = random_update(&mut rng, num_pages, ps);
            writes.extend([5u64, 6, 7].map(|index| {
                let mut page = vec![0u8; ps];
                rng.fill_bytes(&mut page);
                PageWrite { index, page }
            }));
            let e = {
                let mut m = model.lock().unwrap();
                let e = m.push(&writes, usize::MAX);
                published.lock().unwrap().insert(e, m.epochs[&e].clone());
                e
            };
            gpu.apply_epoch(&EpochUpdate {
                epoch: e,
                pages: writes,
            })
            .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let checked = checked.into_inner();
    eprintln!("updates_while_passes_run: {checked} passes checked");
    assert!(checked >= 10, "only {checked} passes were checked");
}
