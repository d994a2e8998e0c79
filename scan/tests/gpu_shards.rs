//! Shards on the GPU: the XOR of every shard's partial answers equals the CPU scanner's answer
//! over the whole database, for shards loaded from a file and shards generated on the device,
//! at the base and at epochs whose writes fall in every shard.
//!
//! Needs a GPU: runs only with `PIRQ_GPU_TESTS=1`, else every test passes as skipped (stderr
//! says so). Build with `cargo test --features cuda -p pirq-scan --test gpu_shards`.
#![cfg(feature = "cuda")]

use pirq_scan::cpu::CpuScanner;
use pirq_scan::cuda::{CudaConfig, CudaScanner};
use pirq_scan::Scanner;
use pirq_shared::bits::xor_into;
use pirq_shared::dpf::{generate, DpfKey};
use pirq_shared::shard::ShardSpec;
use pirq_shared::update::{EpochUpdate, PageWrite};
use pirq_testkit::{gpu_tests_enabled, TestDb};
use rand::{Rng, RngCore};

fn config() -> CudaConfig {
    CudaConfig {
        max_batch_keys: 64,
        epoch_window: 4,
        ..CudaConfig::default()
    }
}

fn keys(n: u8, num_pages: u64, q: usize) -> Vec<DpfKey> {
    let mut rng = rand::rng();
    (0..q)
        .map(|_| {
            generate(n, rng.random_range(0..num_pages), &mut rng)
                .unwrap()
                .0
        })
        .collect()
}

/// Compares the XOR of the shards' answers with the whole CPU answer, then applies two epochs
/// writing the first and last page of every shard and compares at every epoch.
fn check(cpu: &CpuScanner, shards: &[CudaScanner], ps: usize) {
    let g = cpu.geometry();
    for s in shards {
        assert_eq!(
            s.geometry(),
            g,
            "shards report the whole database's geometry"
        );
    }
    let keys = keys(g.domain_bits, g.num_pages, 40);
    let compare = |epochs: &[u64]| {
        let want = cpu.pass_at(&keys, epochs).unwrap();
        let mut got = vec![0u8; want.as_bytes().len()];
        for s in shards {
            xor_into(&mut got, s.pass_at(&keys, epochs).unwrap().as_bytes());
        }
        assert!(
            got == want.as_bytes(),
            "partials do not XOR to the answer at {epochs:?}"
        );
    };
    compare(&vec![0; keys.len()]);
    let mut rng = rand::rng();
    for epoch in 1..=2u64 {
        let pages: Vec<PageWrite> = shards
            .iter()
            .flat_map(|s| [s.page_range().start, s.page_range().end - 1])
            .map(|index| {
                let mut page = vec![0u8; ps];
                rng.fill_bytes(&mut page);
                PageWrite { index, page }
            })
            .collect();
        let update = EpochUpdate { epoch, pages };
        cpu.apply_epoch(&update).unwrap();
        for s in shards {
            s.apply_epoch(&update).unwrap();
        }
        let epochs: Vec<u64> = (0..keys.len() as u64).map(|i| i % (epoch + 1)).collect();
        compare(&epochs);
    }
}

#[test]
fn file_shards_xor_to_the_whole_answer() {
    if !gpu_tests_enabled("file_shards_xor_to_the_whole_answer") {
        return;
    }
    // 1000 pages: one leaf node covers the domain; 50_000 pages: shards start inside nodes.
    for (num_pages, count) in [(1000u64, 3u32), (50_000, 3), (50_000, 5)] {
        let file = TestDb::create(num_pages, 512, num_pages).unwrap();
        let cpu = CpuScanner::new(file.db.clone(), 0)
            .unwrap()
            .with_epoch_window(4);
        let shards: Vec<CudaScanner> = ShardSpec::all_ranges(count, num_pages)
            .unwrap()
            .into_iter()
            .map(|r| CudaScanner::from_pirdb_range(&file.db, r, config(), |_, _| {}).unwrap())
            .collect();
        check(&cpu, &shards, 512);
    }
}

#[test]
fn generated_shards_match_the_generator_file() {
    if !gpu_tests_enabled("generated_shards_match_the_generator_file") {
        return;
    }
    let (num_pages, seed) = (70_001u64, 77);
    let file = TestDb::create(num_pages, 1024, seed).unwrap();
    let cpu = CpuScanner::new(file.db.clone(), 0)
        .unwrap()
        .with_epoch_window(4);
    let shards: Vec<CudaScanner> = ShardSpec::all_ranges(3, num_pages)
        .unwrap()
        .into_iter()
        .map(|r| CudaScanner::synthetic_range(1024, num_pages, r, seed, config()).unwrap())
        .collect();
    check(&cpu, &shards, 1024);
}
