//! `pirq-gpu-bench`: times the CUDA scanner on synthetic databases generated on the GPU.
//!
//! For each database size it prints the read-all floor (one read of the transposed database by
//! the `read_all` kernel, timed in the same run) and, for each batch size Q, the median wall time
//! of a pass, keys/s and the phase breakdown (h2d, expand, scan, d2h) from CUDA events; then the
//! pool: a continuous stream of windows fed by 1, 2 or 4 threads through 1, 2 or 4 workspaces;
//! then the rotating scan (the worker's): for each number of keys kept in flight
//! (`--rotate-qs`) and segments a turn (`--rotate-segments`), one-key groups joined whenever one
//! leaves, over `--rotate-turns` turns: the segments, ms a segment, ms a turn and keys/s.
//!
//! ```text
//! pirq-gpu-bench --sizes-gib 8,64 --qs 1,2,4,8,16,32,64,128,192,256,384,512
//! pirq-gpu-bench --epochs --sizes-gib 8 --changed 1,1000,10000 --epoch-windows 2,16
//! ```
//!
//! `--epochs` times the epoch window instead (docs/bench/gpu-epochs.md): the merge of the
//! window's page changes into a pass's answers, and the compaction when the base moves forward.
//! Needs the `cuda` feature and a GPU; numbers go to docs/bench/gpu-scan.md.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use pirq_scan::cuda::{CudaConfig, CudaRotation, CudaScanner, PassTimings, ScanPlan};
use pirq_scan::rotation::Rotation;
use pirq_scan::Scanner;
use pirq_shared::dpf::{generate, DpfKey};
use pirq_shared::metrics::Phase;

/// The phases the pass table breaks a pass into (merge is zero without epochs: `--epochs`
/// times it).
const PHASES_SHOWN: [Phase; 4] = [Phase::H2d, Phase::Expand, Phase::Scan, Phase::D2h];

#[derive(Parser, Debug)]
#[command(about = "Benchmark the CUDA scanner on synthetic databases generated on the GPU")]
struct Args {
    /// Database sizes in GiB (pages of --page-size bytes).
    #[arg(long, value_delimiter = ',', default_value = "8,64")]
    sizes_gib: Vec<u64>,
    /// Page size in bytes.
    #[arg(long, default_value_t = pirq_db::DEFAULT_PAGE_SIZE as usize)]
    page_size: usize,
    /// Batch sizes Q to time.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,4,8,16,32,64,128,192,256,384,512"
    )]
    qs: Vec<usize>,
    /// Timed passes per Q (after one warm-up pass); the median is reported.
    #[arg(long, default_value_t = 7)]
    reps: usize,
    /// Extra plans to time at every Q besides the default choice (e.g. `xor/512,m2n8s4w1/4/1024`).
    #[arg(long, value_delimiter = ',')]
    plans: Vec<String>,
    /// Batch sizes for the pool test (each with 1, 2 and 4 workspaces).
    #[arg(long, value_delimiter = ',', default_value = "64,256")]
    pool_qs: Vec<usize>,
    /// Windows per pool measurement.
    #[arg(long, default_value_t = 48)]
    pool_windows: usize,
    /// Time the epoch window (merge and compaction) instead of plain passes.
    #[arg(long)]
    epochs: bool,
    /// Keys kept in flight in the rotating scan (at most the largest of --qs and --pool-qs).
    #[arg(long, value_delimiter = ',', default_value = "1,64,256")]
    rotate_qs: Vec<usize>,
    /// Turns timed per row of the rotating scan (after one turn of warm-up).
    #[arg(long, default_value_t = 20)]
    rotate_turns: usize,
    /// Segments a turn in the rotating scan, one row each (0: from the measured read, as the
    /// worker picks them).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    rotate_segments: Vec<usize>,
    /// `--epochs`: pages changed by each epoch.
    #[arg(long, value_delimiter = ',', default_value = "1,1000,10000")]
    changed: Vec<usize>,
    /// `--epochs`: window sizes (epochs answered exactly, the base included).
    #[arg(long, value_delimiter = ',', default_value = "2,16")]
    epoch_windows: Vec<usize>,
    /// `--epochs`: keys per pass (default: a full window of the worker's default size).
    #[arg(long, default_value_t = pirq_scan::DEFAULT_MAX_BATCH_KEYS)]
    epoch_q: usize,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.epochs {
        return epochs(&args);
    }
    let max_q = args
        .qs
        .iter()
        .chain(&args.pool_qs)
        .copied()
        .max()
        .unwrap_or(1);
    let extra: Vec<ScanPlan> = args
        .plans
        .iter()
        .map(|p| ScanPlan::parse(p).with_context(|| format!("bad plan {p}")))
        .collect::<Result<_>>()?;
    for &gib in &args.sizes_gib {
        let scanner = Arc::new(synthetic_scanner(&args, gib, max_q)?);
        let floor = read_all_floor(&scanner, args.reps, max_q)?;
        let keys = make_keys(scanner_domain(&scanner), max_q);
        pass_table(&args, &scanner, &keys, &extra, floor)?;
        pool_table(&args, &scanner, &keys)?;
        rotation_table(&args, &scanner, &keys, max_q)?;
    }
    Ok(())
}

/// A scanner over `gib` GiB of synthetic pages generated on the GPU, with room for windows of
/// `max_q` keys in four workspaces; prints what it set up.
fn synthetic_scanner(args: &Args, gib: u64, max_q: usize) -> Result<CudaScanner> {
    let num_pages = (gib << 30) / args.page_size as u64;
    let started = Instant::now();
    let config = CudaConfig {
        workspaces: 4,
        max_batch_keys: max_q,
        ..CudaConfig::default()
    };
    let scanner = CudaScanner::synthetic(args.page_size, num_pages, 0x5eed, config)?;
    println!(
        "\n## {gib} GiB: {num_pages} pages of {} B on {} (set up in {:.1} s, VRAM used {:.1} GiB)\n",
        args.page_size,
        scanner.device_name(),
        started.elapsed().as_secs_f64(),
        scanner.vram_used()? as f64 / (1u64 << 30) as f64
    );
    Ok(scanner)
}

/// The read-all floor (median of `reps` reads after one warm-up), in ms; prints it and where
/// passes stop being memory-bound (a one-key and a full pass of up to `max_q` keys).
fn read_all_floor(scanner: &CudaScanner, reps: usize, max_q: usize) -> Result<f64> {
    let floor = median(
        (0..reps + 1)
            .map(|_| scanner.time_read_all().map(|ms| ms as f64))
            .collect::<Result<Vec<_>, _>>()?[1..]
            .to_vec(),
    );
    println!(
        "read-all floor: {floor:.2} ms ({:.0} GB/s)\n",
        scanner.db_bytes() as f64 / floor / 1e6
    );
    if let Some(cost) = scanner.measure_pass_cost() {
        println!(
            "pass cost: one-key pass {:.2} ms, {}-key pass {:.2} ms (scan {:.2}): knee {} keys\n",
            cost.one_key.as_secs_f64() * 1e3,
            cost.full_keys,
            cost.full.as_secs_f64() * 1e3,
            cost.full_scan.as_secs_f64() * 1e3,
            cost.knee(max_q),
        );
    }
    Ok(floor)
}

/// One row per Q and plan (the default one and `extra`): ms a pass, keys/s, the phases, and
/// the scan against the read-all floor.
fn pass_table(
    args: &Args,
    scanner: &CudaScanner,
    keys: &[DpfKey],
    extra: &[ScanPlan],
    floor: f64,
) -> Result<()> {
    let phase_heads: String = PHASES_SHOWN.iter().map(|p| format!(" {p} ms |")).collect();
    println!("| Q | plan | ms/pass | keys/s |{phase_heads} scan / floor |");
    println!(
        "|---:|---|---:|---:|{}---:|",
        "---:|".repeat(PHASES_SHOWN.len())
    );
    for &q in &args.qs {
        let default = scanner.plan_for(q);
        let mut plans = vec![default];
        plans.extend(extra.iter().copied().filter(|p| *p != default));
        for plan in plans {
            let Some(t) = time_passes(scanner, &keys[..q], plan, args.reps)? else {
                continue;
            };
            // The scan, at tens of ms, to two decimals; the short phases to three.
            let phase_cells: String = PHASES_SHOWN
                .iter()
                .map(|&p| {
                    let digits = if p == Phase::Scan { 2 } else { 3 };
                    format!(" {:.*} |", digits, ms(t.phase(p)))
                })
                .collect();
            println!(
                "| {q} | {plan} | {:.2} | {:.0} |{phase_cells} {:.2} |",
                ms(t.wall),
                q as f64 / t.wall.as_secs_f64(),
                ms(t.scan) / floor
            );
        }
    }
    Ok(())
}

/// The pool: a continuous stream of windows fed through 1, 2 and 4 workspaces, per Q.
fn pool_table(args: &Args, scanner: &CudaScanner, keys: &[DpfKey]) -> Result<()> {
    println!(
        "\npool: a continuous stream of {} windows, one feeder thread per workspace\n",
        args.pool_windows
    );
    println!("| Q | workspaces | windows/s | keys/s | mean ms/window |");
    println!("|---:|---:|---:|---:|---:|");
    for &q in &args.pool_qs {
        for slots in [1usize, 2, 4] {
            let (rate, latency) = stream_windows(scanner, &keys[..q], slots, args.pool_windows)?;
            println!(
                "| {q} | {slots} | {rate:.1} | {:.0} | {:.1} |",
                rate * q as f64,
                latency
            );
        }
    }
    Ok(())
}

/// The rotating scan (the worker's): one-key groups kept in flight, per number in flight and
/// segments a turn.
fn rotation_table(
    args: &Args,
    scanner: &Arc<CudaScanner>,
    keys: &[DpfKey],
    max_q: usize,
) -> Result<()> {
    println!("\nrotating scan: one-key groups kept in flight\n");
    println!("| keys in flight | segments | layout | ms/segment | ms/turn | keys/s |");
    println!("|---:|---:|---|---:|---:|---:|");
    let rows = args
        .rotate_qs
        .iter()
        .filter(|&&q| q <= max_q)
        .flat_map(|&q| args.rotate_segments.iter().map(move |&s| (q, s)));
    for (q, segments) in rows {
        let mut rotation = match segments {
            0 => CudaRotation::measured(scanner.clone())?,
            n => CudaRotation::new(scanner.clone(), n),
        };
        let (segments, turns) = (rotation.segments(), args.rotate_turns.max(1));
        let mut next = 0;
        let (mut answered, mut turn_sum, mut finished) = (0usize, Duration::ZERO, 0usize);
        let mut started = Instant::now();
        for step in 0..(turns + 1) * segments {
            while rotation.in_flight() < q && rotation.fits(1) {
                rotation.join(&keys[next % keys.len()..][..1], 0)?;
                next += 1;
            }
            if step == segments {
                started = Instant::now(); // one turn of warm-up
                (answered, turn_sum, finished) = (0, Duration::ZERO, 0);
            }
            for f in rotation.step()?.finished {
                answered += f.answers?.len();
                turn_sum += f.turn;
                finished += 1;
            }
        }
        let wall = started.elapsed();
        println!(
            "| {q} | {segments} | {:?} | {:.2} | {:.2} | {:.0} |",
            rotation.sel_layout(),
            ms(wall) / (turns * segments) as f64,
            ms(turn_sum) / finished.max(1) as f64,
            answered as f64 / wall.as_secs_f64()
        );
    }
    Ok(())
}

/// Per window size W, one scanner; per row (k changed pages an epoch) W - 1 updates of k random
/// pages fill the window, passes of `epoch_q` keys pinned to the newest epoch time the merge of
/// all (W - 1) k steps (CUDA events), and one more update of k pages folds an epoch of k pages
/// into the base (compaction).
fn epochs(args: &Args) -> Result<()> {
    use pirq_shared::update::{EpochUpdate, PageWrite};
    use rand::{Rng, RngCore};
    let gib = args.sizes_gib.first().copied().unwrap_or(8);
    let ps = args.page_size;
    let num_pages = (gib << 30) / ps as u64;
    let q = args.epoch_q;
    let mut rng = rand::rng();
    let mut update = |epoch: u64, k: usize| EpochUpdate {
        epoch,
        pages: (0..k)
            .map(|_| {
                let mut page = vec![0u8; ps];
                rng.fill_bytes(&mut page);
                PageWrite {
                    index: rng.random_range(0..num_pages),
                    page,
                }
            })
            .collect(),
    };
    println!("\n## epochs: {gib} GiB, {num_pages} pages of {ps} B, Q = {q}\n");
    println!(
        "| window | changed pages / epoch | merged entries | merge ms/pass | scan ms/pass | pass wall ms | update prepare ms | folded pages | compaction ms | queries blocked ms |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &w in &args.epoch_windows {
        let config = CudaConfig {
            workspaces: 1,
            max_batch_keys: q,
            epoch_window: w,
            ..CudaConfig::default()
        };
        let started = Instant::now();
        let scanner = CudaScanner::synthetic(ps, num_pages, 0x5eed, config)?;
        eprintln!(
            "window {w}: set up in {:.1} s on {}",
            started.elapsed().as_secs_f64(),
            scanner.device_name()
        );
        let keys = make_keys(scanner_domain(&scanner), q);
        for &k in &args.changed {
            for _ in 1..w {
                let next = scanner.window_range().newest + 1;
                scanner.apply_update(&update(next, k))?;
            }
            let newest = scanner.window_range().newest;
            let epochs = vec![newest; q];
            scanner.pass_at_timed(&keys, &epochs)?; // warm-up
            let runs: Vec<PassTimings> = (0..args.reps.max(1))
                .map(|_| scanner.pass_at_timed(&keys, &epochs).map(|r| r.1))
                .collect::<Result<_, _>>()?;
            let pick =
                |f: fn(&PassTimings) -> Duration| median(runs.iter().map(|t| ms(f(t))).collect());
            let fold = scanner.apply_update(&update(newest + 1, k))?;
            let entries = (w - 1) * k;
            println!(
                "| {w} | {k} | {entries} | {:.3} | {:.2} | {:.2} | {:.1} | {} | {:.3} | {:.3} |",
                pick(|t| t.merge),
                pick(|t| t.scan),
                pick(|t| t.wall),
                ms(fold.prepare),
                fold.folded_pages,
                ms(fold.compaction),
                ms(fold.blocked)
            );
        }
    }
    Ok(())
}

fn scanner_domain(scanner: &CudaScanner) -> u8 {
    use pirq_scan::Scanner;
    scanner.geometry().domain_bits
}

/// `count` keys for distinct-ish random indices (key generation is client work: not timed).
fn make_keys(n: u8, count: usize) -> Vec<DpfKey> {
    let mut rng = rand::rng();
    (0..count)
        .map(|i| {
            generate(n, (i as u64 * 0x9E37_79B9) % (1 << n), &mut rng)
                .expect("valid index")
                .0
        })
        .collect()
}

/// Median timings over `reps` passes after one warm-up; `None` when the plan cannot run `q` keys.
fn time_passes(
    scanner: &CudaScanner,
    keys: &[DpfKey],
    plan: ScanPlan,
    reps: usize,
) -> Result<Option<PassTimings>> {
    if scanner.pass_with_plan(keys, plan).is_err() {
        return Ok(None);
    }
    let runs: Vec<PassTimings> = (0..reps)
        .map(|_| scanner.pass_with_plan(keys, plan).map(|r| r.1))
        .collect::<Result<_, _>>()?;
    let pick = |f: &dyn Fn(&PassTimings) -> Duration| {
        Duration::from_secs_f64(median(runs.iter().map(|t| f(t).as_secs_f64()).collect()))
    };
    let mut timings = PassTimings {
        keys: keys.len(),
        wall: pick(&|t| t.wall),
        ..PassTimings::default()
    };
    for phase in Phase::ALL {
        *timings.phase_mut(phase) = pick(&|t| t.phase(phase));
    }
    Ok(Some(timings))
}

/// `threads` feeders each run passes back to back until `windows` have been answered; returns
/// windows/s and the mean wall time of a window.
fn stream_windows(
    scanner: &CudaScanner,
    keys: &[DpfKey],
    threads: usize,
    windows: usize,
) -> Result<(f64, f64)> {
    scanner.pass_with_plan(keys, scanner.plan_for(keys.len()))?;
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let latencies: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.min(scanner.workspaces()))
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    while next.fetch_add(1, Ordering::Relaxed) < windows {
                        let t = Instant::now();
                        scanner
                            .pass_with_plan(keys, scanner.plan_for(keys.len()))
                            .expect("pass");
                        mine.push(t.elapsed().as_secs_f64() * 1e3);
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("feeder thread"))
            .collect()
    });
    let rate = windows as f64 / started.elapsed().as_secs_f64();
    Ok((
        rate,
        latencies.iter().sum::<f64>() / latencies.len().max(1) as f64,
    ))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
