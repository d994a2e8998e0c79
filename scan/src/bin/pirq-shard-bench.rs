//! `pirq-shard-bench`: one party's database split into page-range shards over several GPUs,
//! each shard's pages generated on its GPU from the seeded synthetic generator (no file: a
//! database larger than the host could hold), checked and timed.
//!
//! - **Check**: `--verify N` random pages are fetched the way a client does: a DPF key pair per
//!   index, every shard answers both keys (its partial), and the XOR of all partials of both
//!   keys must be the generator's page (`pirq_shared::synthetic`), byte for byte.
//! - **Time**: for each batch size Q, passes run on every shard at once (one thread per GPU,
//!   started together); a pass of the party ends when its slowest shard is done. Reported: the
//!   median of that time over `--reps` passes, and keys/s = Q / median.
//!
//! ```text
//! pirq-shard-bench --gib 160 --shards 2 --verify 64 --qs 1,256
//! pirq-shard-bench --gib 64 --shards 1 --qs 1,64,256    # the same database on one GPU
//! ```
//!
//! Shard `i` runs on GPU `i` (`--gpus` to choose). Needs the `cuda` feature; numbers go to
//! docs/bench/shards.md.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use pirq_scan::cuda::{CudaConfig, CudaScanner};
use pirq_scan::Scanner;
use pirq_shared::dpf::{generate, DpfKey};
use pirq_shared::shard::ShardSpec;
use pirq_shared::synthetic;
use rand::Rng;

#[derive(Parser, Debug)]
#[command(about = "Check and time a sharded party over several GPUs (synthetic pages)")]
struct Args {
    /// Database size in GiB (pages of --page-size bytes).
    #[arg(long)]
    gib: u64,
    /// Page size in bytes.
    #[arg(long, default_value_t = pirq_db::DEFAULT_PAGE_SIZE as usize)]
    page_size: usize,
    /// Shards, one per GPU (shard i on GPU i, unless --gpus says otherwise).
    #[arg(long, default_value_t = 2)]
    shards: u32,
    /// The GPU of each shard, e.g. `0,0` for two shards on one GPU (default: shard i on GPU i).
    #[arg(long, value_delimiter = ',')]
    gpus: Vec<usize>,
    /// Synthetic generator seed.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Random pages to fetch and compare with the generator.
    #[arg(long, default_value_t = 32)]
    verify: usize,
    /// Batch sizes Q to time.
    #[arg(long, value_delimiter = ',', default_value = "1,64,256")]
    qs: Vec<usize>,
    /// Timed passes per Q (after one warm-up); the median is reported.
    #[arg(long, default_value_t = 9)]
    reps: usize,
    /// Largest batch (sizes the workspaces).
    #[arg(long, default_value_t = pirq_scan::DEFAULT_MAX_BATCH_KEYS)]
    max_batch_keys: usize,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let num_pages = (args.gib << 30) / args.page_size as u64;
    let ranges = ShardSpec::all_ranges(args.shards, num_pages).context("shards")?;
    println!(
        "database: {} GiB = {num_pages} pages of {} B, seed {:#x}; {} shard(s): {ranges:?}",
        args.gib, args.page_size, args.seed, args.shards
    );
    let started = Instant::now();
    let scanners: Vec<CudaScanner> = std::thread::scope(|s| {
        let handles: Vec<_> = ranges
            .iter()
            .enumerate()
            .map(|(i, range)| {
                let args = &args;
                let gpu = args.gpus.get(i).copied().unwrap_or(i);
                s.spawn(move || {
                    let config = CudaConfig {
                        device: gpu,
                        workspaces: 1,
                        max_batch_keys: args.max_batch_keys,
                        ..CudaConfig::default()
                    };
                    CudaScanner::synthetic_range(
                        args.page_size,
                        num_pages,
                        range.clone(),
                        args.seed,
                        config,
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("loader thread"))
            .collect::<Result<_, _>>()
    })?;
    for (i, sc) in scanners.iter().enumerate() {
        println!(
            "shard {i}/{}: GPU {} {}: pages {:?}, {:.2} GiB on the device, {:.2} GiB used",
            args.shards,
            args.gpus.get(i).copied().unwrap_or(i),
            sc.device_name(),
            sc.page_range(),
            sc.db_bytes() as f64 / (1u64 << 30) as f64,
            sc.vram_used()? as f64 / (1u64 << 30) as f64
        );
    }
    println!("generated in {:.1} s", started.elapsed().as_secs_f64());

    verify(&args, num_pages, &scanners)?;
    for &q in &args.qs {
        time(&args, num_pages, &scanners, q)?;
    }
    Ok(())
}

/// Every shard's answers to `keys`, XORed: the party's answer.
fn party_answer(scanners: &[CudaScanner], keys: &[DpfKey]) -> Result<Vec<u8>> {
    let mut acc: Option<Vec<u8>> = None;
    for sc in scanners {
        let part = sc.pass(keys)?.into_bytes();
        match acc.as_mut() {
            None => acc = Some(part),
            Some(a) => pirq_shared::bits::xor_into(a, &part),
        }
    }
    Ok(acc.unwrap_or_default())
}

fn verify(args: &Args, num_pages: u64, scanners: &[CudaScanner]) -> Result<()> {
    let n = pirq_shared::dpf::domain_bits(num_pages);
    let mut rng = rand::rng();
    // The first and last page of every shard, then random ones.
    let mut indices: Vec<u64> = scanners
        .iter()
        .flat_map(|s| [s.page_range().start, s.page_range().end - 1])
        .collect();
    indices.extend((0..args.verify).map(|_| rng.random_range(0..num_pages)));
    let ps = args.page_size;
    let mut bad = 0;
    for chunk in indices.chunks(args.max_batch_keys) {
        let pairs: Vec<(DpfKey, DpfKey)> = chunk
            .iter()
            .map(|&i| generate(n, i, &mut rng).expect("index in domain"))
            .collect();
        let k0: Vec<DpfKey> = pairs.iter().map(|p| p.0.clone()).collect();
        let k1: Vec<DpfKey> = pairs.iter().map(|p| p.1.clone()).collect();
        let mut got = party_answer(scanners, &k0)?;
        pirq_shared::bits::xor_into(&mut got, &party_answer(scanners, &k1)?);
        let mut want = vec![0u8; ps];
        for (j, &index) in chunk.iter().enumerate() {
            synthetic::fill_page(args.seed, index, &mut want);
            if got[j * ps..(j + 1) * ps] != want[..] {
                bad += 1;
                println!("MISMATCH at page {index}");
            }
        }
    }
    println!(
        "verify: {} pages (the edges of every shard and {} random), {} exact, {bad} wrong",
        indices.len(),
        args.verify,
        indices.len() - bad
    );
    if bad > 0 {
        bail!("{bad} pages wrong");
    }
    Ok(())
}

fn time(args: &Args, num_pages: u64, scanners: &[CudaScanner], q: usize) -> Result<()> {
    let n = pirq_shared::dpf::domain_bits(num_pages);
    let mut rng = rand::rng();
    let keys: Vec<DpfKey> = (0..q)
        .map(|_| {
            generate(n, rng.random_range(0..num_pages), &mut rng)
                .unwrap()
                .0
        })
        .collect();
    let reps = args.reps + 1;
    let start = Barrier::new(scanners.len() + 1);
    let end = Barrier::new(scanners.len() + 1);
    let mut walls: Vec<Duration> = std::thread::scope(|s| -> Result<Vec<Duration>> {
        let handles: Vec<_> = scanners
            .iter()
            .map(|sc| {
                let (keys, start, end) = (&keys, &start, &end);
                s.spawn(move || -> Result<()> {
                    // Every rep meets both barriers, failed or not, so no thread waits forever.
                    let mut failed = None;
                    for _ in 0..reps {
                        start.wait();
                        if let Err(e) = sc.pass(keys) {
                            failed = Some(e);
                        }
                        end.wait();
                    }
                    failed.map_or(Ok(()), |e| Err(e.into()))
                })
            })
            .collect();
        let mut walls = Vec::with_capacity(reps);
        for _ in 0..reps {
            start.wait();
            let t = Instant::now();
            end.wait();
            walls.push(t.elapsed());
        }
        for h in handles {
            h.join().expect("pass thread")?;
        }
        Ok(walls)
    })?;
    walls.remove(0); // warm-up
    walls.sort();
    let median = walls[walls.len() / 2];
    println!(
        "Q={q:4}: pass (slowest shard) median {:8.2} ms, min {:8.2} ms, max {:8.2} ms; {:9.0} keys/s",
        median.as_secs_f64() * 1e3,
        walls[0].as_secs_f64() * 1e3,
        walls[walls.len() - 1].as_secs_f64() * 1e3,
        q as f64 / median.as_secs_f64()
    );
    Ok(())
}
