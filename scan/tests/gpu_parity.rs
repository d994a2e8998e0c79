//! GPU parity tests: the CUDA backend against its CPU twins, on a real GPU.
//!
//! They need a GPU, so they run only with `PIRQ_GPU_TESTS=1` (scripts/gpu-test.sh sets it);
//! elsewhere (CI) each test returns at once and passes as skipped, saying so on stderr.
//! Build with `cargo test --features cuda -p pirq-worker --test gpu_parity`.
#![cfg(feature = "cuda")]

use pirq_scan::cpu::CpuScanner;
use pirq_scan::cuda::{CudaConfig, CudaError, CudaScanner, ScanPlan};
use pirq_scan::Scanner;
use pirq_shared::dpf::{eval_full, generate, DpfKey};
use pirq_shared::update::{EpochUpdate, PageWrite};
use pirq_testkit::{gpu_tests_enabled, TestDb};
use rand::{Rng, RngCore};

/// A temporary database of `num_pages` synthetic pages at epoch 1, under `seed` or a random one.
fn temp_db(page_size: u32, num_pages: u64, synthetic_seed: Option<u64>) -> TestDb {
    let seed = synthetic_seed.unwrap_or_else(|| rand::rng().next_u64());
    TestDb::create_at(num_pages, page_size, 1, seed).unwrap()
}

/// `q` keys of either party for random indices of a domain of `n` bits, with their indices.
fn random_keys(n: u8, q: usize) -> (Vec<DpfKey>, Vec<u64>) {
    let mut rng = rand::rng();
    (0..q)
        .map(|_| {
            let alpha = rng.random_range(0..1u64 << n);
            let (k0, k1) = generate(n, alpha, &mut rng).unwrap();
            (if rng.random_bool(0.5) { k0 } else { k1 }, alpha)
        })
        .unzip()
}

fn config(max_batch_keys: usize) -> CudaConfig {
    CudaConfig {
        max_batch_keys,
        ..CudaConfig::default()
    }
}

#[test]
fn expansion_matches_eval_full() {
    if !gpu_tests_enabled("expansion_matches_eval_full") {
        return;
    }
    // Domains from one leaf (n <= 7) through one and two node launches (n >= 25: 11+ top
    // levels); page counts not powers of two. n = 25 is a 4 GiB database of 256-byte pages.
    for n in [1u8, 3, 7, 8, 9, 12, 15, 17, 18, 21, 25] {
        let num_pages = if n == 1 { 2 } else { (1u64 << (n - 1)) + 3 };
        // Up to 64 keys the expansion writes layout B; above (on Hopper) "B for wgmma".
        let gpu = CudaScanner::synthetic(256, num_pages, 7, config(80)).unwrap();
        let batches: &[usize] = if n >= 25 {
            &[3]
        } else if n <= 12 {
            &[1, 5, 16, 17, 40, 80]
        } else {
            &[1, 5, 16, 17, 40]
        };
        for &q in batches {
            let (keys, _) = random_keys(n, q);
            let bitmaps = gpu.expand_bitmaps(&keys).unwrap();
            for (k, (key, got)) in keys.iter().zip(&bitmaps).enumerate() {
                let want = eval_full(key);
                // The GPU expands only the leaf nodes above the pages it holds (a shard's share
                // of the domain; unsharded, the whole database): bits of indices past
                // `num_pages` select all-zero pages (SPEC §2) and are never written.
                let valid = num_pages;
                let words = valid.div_ceil(64) as usize;
                for (w, (g, e)) in got.iter().zip(&want).take(words).enumerate() {
                    let bits = (valid - 64 * w as u64).min(64);
                    let mask = if bits == 64 {
                        u64::MAX
                    } else {
                        (1u64 << bits) - 1
                    };
                    assert_eq!(g & mask, e & mask, "n={n} q={q} key {k} word {w}");
                }
            }
        }
    }
}

#[test]
fn answers_match_cpu_scanner() {
    if !gpu_tests_enabled("answers_match_cpu_scanner") {
        return;
    }
    let max_q = 300;
    for (page_size, num_pages) in [
        (256u32, 70_001u64),
        (1024, 5_000),
        (4096, 3_001),
        (16384, 777),
        (65536, 301),
    ] {
        let file = temp_db(page_size, num_pages, None);
        let cpu = CpuScanner::new(file.db.clone(), 0)
            .unwrap()
            .with_max_batch_keys(max_q);
        let gpu = CudaScanner::from_pirdb(&file.db, config(max_q), |_, _| {}).unwrap();
        let n = cpu.geometry().domain_bits;
        assert_eq!(gpu.geometry(), cpu.geometry());
        for q in [
            1usize, 2, 7, 16, 17, 33, 64, 65, 100, 128, 129, 200, 256, 300,
        ] {
            let (keys, _) = random_keys(n, q);
            let want = cpu.pass(&keys).unwrap();
            let got = gpu.pass(&keys).unwrap();
            assert!(
                got == want,
                "page_size {page_size} pages {num_pages} Q={q}: CUDA answers differ"
            );
        }
        // The CUDA-core reference kernel and every tensor-core variant give the same answers
        // (the wgmma ones on Hopper, where they are built; split-K tasks of odd lengths too).
        let (keys, _) = random_keys(n, 37);
        let want = cpu.pass(&keys).unwrap();
        let wgmma: &[&str] = if gpu.has_wgmma() {
            &["wg128s8/2048", "wg192s8/3", "wg256s12/77"]
        } else {
            eprintln!("no wgmma kernels on this GPU: their plans are not compared");
            &[]
        };
        for plan in [
            "xor/64",
            "m2n2s8w1/4/1024",
            "m2n4s6w1/8/256",
            "m4n4s4w1/8/77",
            "m2n8s4w1/4/1024",
            "m2n8s4w2/8/256",
            "m2n8s6w2/4/100",
            "m1n16s4w2/8/512",
        ]
        .iter()
        .chain(wgmma)
        {
            let plan = ScanPlan::parse(plan).unwrap();
            let (got, _) = gpu.pass_with_plan(&keys, plan).unwrap();
            assert!(
                got == want,
                "page_size {page_size} plan {plan}: answers differ"
            );
        }
    }
}

#[test]
fn key_pairs_reconstruct_pages() {
    if !gpu_tests_enabled("key_pairs_reconstruct_pages") {
        return;
    }
    let file = temp_db(4096, 10_000, None);
    let gpu = CudaScanner::from_pirdb(&file.db, config(64), |_, _| {}).unwrap();
    let n = gpu.geometry().domain_bits;
    assert!(
        gpu.pass(&[]).unwrap().is_empty(),
        "an empty batch has no answers"
    );
    let mut rng = rand::rng();
    let alphas: Vec<u64> = (0..64).map(|_| rng.random_range(0..10_000 + 500)).collect();
    let pairs: Vec<_> = alphas
        .iter()
        .map(|&a| generate(n, a, &mut rng).unwrap())
        .collect();
    let a = gpu
        .pass(&pairs.iter().map(|p| p.0.clone()).collect::<Vec<_>>())
        .unwrap();
    let b = gpu
        .pass(&pairs.iter().map(|p| p.1.clone()).collect::<Vec<_>>())
        .unwrap();
    for (i, &alpha) in alphas.iter().enumerate() {
        let page: Vec<u8> = a
            .answer(i)
            .iter()
            .zip(b.answer(i))
            .map(|(x, y)| x ^ y)
            .collect();
        match file.db.page(alpha) {
            Some(want) => assert_eq!(page, want, "page {alpha}"),
            None => assert!(
                page.iter().all(|&x| x == 0),
                "page {alpha} past the end must read as zero"
            ),
        }
    }
}

#[test]
fn synthetic_on_device_matches_synthetic_file() {
    if !gpu_tests_enabled("synthetic_on_device_matches_synthetic_file") {
        return;
    }
    for (page_size, num_pages) in [(256u32, 1_000u64), (4096, 2_600), (65536, 100)] {
        let seed = 0x5eed_0000 + num_pages;
        let file = temp_db(page_size, num_pages, Some(seed));
        let cpu = CpuScanner::new(file.db.clone(), 0).unwrap();
        let gpu = CudaScanner::synthetic(page_size as usize, num_pages, seed, config(64)).unwrap();
        let (keys, _) = random_keys(cpu.geometry().domain_bits, 50);
        assert!(
            gpu.pass(&keys).unwrap() == cpu.pass(&keys).unwrap(),
            "synthetic pages {page_size}"
        );
    }
}

#[test]
fn concurrent_passes_share_the_pool() {
    if !gpu_tests_enabled("concurrent_passes_share_the_pool") {
        return;
    }
    let file = temp_db(1024, 20_000, None);
    let cpu = CpuScanner::new(file.db.clone(), 0).unwrap();
    let gpu = CudaScanner::from_pirdb(
        &file.db,
        CudaConfig {
            workspaces: 3,
            ..config(128)
        },
        |_, _| {},
    )
    .unwrap();
    let n = gpu.geometry().domain_bits;
    let batches: Vec<Vec<DpfKey>> = (0..12).map(|i| random_keys(n, 1 + i * 10).0).collect();
    let want: Vec<_> = batches.iter().map(|k| cpu.pass(k).unwrap()).collect();
    std::thread::scope(|s| {
        for t in 0..6 {
            let (gpu, batches, want) = (&gpu, &batches, &want);
            s.spawn(move || {
                for i in (t..batches.len()).step_by(6).chain(t..batches.len()) {
                    assert!(
                        gpu.pass(&batches[i]).unwrap() == want[i],
                        "batch {i} on thread {t}"
                    );
                }
            });
        }
    });
}

#[test]
fn too_large_a_database_says_how_much_memory() {
    if !gpu_tests_enabled("too_large_a_database_says_how_much_memory") {
        return;
    }
    // 2^30 pages of 4 KiB = 4 TiB: no GPU has that.
    match CudaScanner::synthetic(4096, 1 << 30, 1, config(16)) {
        Err(e @ CudaError::OutOfMemory { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("need") && msg.contains("free"), "{msg}");
        }
        Err(e) => panic!("expected OutOfMemory, got {e}"),
        Ok(_) => panic!("a 4 TiB database cannot fit"),
    }
}

#[test]
fn epochs_match_cpu_scanner() {
    if !gpu_tests_enabled("epochs_match_cpu_scanner") {
        return;
    }
    // A window of 4 epochs and 7 updates: the base moves forward 3 times on both sides.
    let file = temp_db(1024, 3_001, None);
    let cpu = CpuScanner::new(file.db.clone(), 0)
        .unwrap()
        .with_epoch_window(4);
    let config = CudaConfig {
        epoch_window: 4,
        ..config(64)
    };
    let gpu = CudaScanner::from_pirdb(&file.db, config, |_, _| {}).unwrap();
    let n = gpu.geometry().domain_bits;
    let mut rng = rand::rng();
    for step in 0..7u64 {
        let epoch = cpu.epoch_window().newest + 1;
        // Pages of one block, pages rewritten again, the last page, and random ones.
        let mut indices: Vec<u64> = (0..rng.random_range(1..40))
            .map(|_| rng.random_range(0..3_001))
            .collect();
        indices.extend([step * 3, step * 3 + 1, 3_000, 7]);
        let pages = indices
            .iter()
            .map(|&index| {
                let mut page = vec![0u8; 1024];
                rng.fill_bytes(&mut page);
                PageWrite { index, page }
            })
            .collect();
        let update = EpochUpdate { epoch, pages };
        cpu.apply_epoch(&update).unwrap();
        gpu.apply_epoch(&update).unwrap();
        let window = cpu.epoch_window();
        assert_eq!(gpu.epoch_window(), window, "after epoch {epoch}");
        let (keys, _) = random_keys(n, 37);
        let epochs: Vec<u64> = (0..keys.len())
            .map(|_| rng.random_range(window.oldest..=window.newest))
            .collect();
        let want = cpu.pass_at(&keys, &epochs).unwrap();
        let got = gpu.pass_at(&keys, &epochs).unwrap();
        assert!(got == want, "epoch {epoch}: answers differ");
    }
    // Outside the window is refused, as on the CPU.
    let (keys, _) = random_keys(n, 1);
    assert!(gpu.pass_at(&keys, &[0]).is_err());
}
