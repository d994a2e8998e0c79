//! `pirq bench scan` (the CPU scanner), `pirq bench dpf` (full-domain key expansion) and
//! `pirq bench epochs` (the epoch window's merge and fold); `pirq bench load` is `crate::load`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use pirq_db::PirDb;
use pirq_scan::cpu::CpuScanner;
use pirq_shared::dpf::{bitmap_words, eval_full_into, generate, DpfKey};
use rand::RngCore;

use crate::record::{self, Table};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Time CPU scanner passes over a database for several batch sizes Q.
    Scan(ScanArgs),
    /// Time full-domain DPF evaluation of one key.
    Dpf(DpfArgs),
    /// Time the epoch delta merge per window and the compaction (fold of the base) on the CPU.
    Epochs(EpochsArgs),
    /// Drive two running parties with verified private queries (open or closed loop).
    Load(Box<crate::load::LoadArgs>),
}

#[derive(Args)]
pub struct EpochsArgs {
    /// Database to update (in memory only: the file is never written).
    #[arg(long)]
    db: PathBuf,
    /// Changed pages per epoch, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 1000, 10000])]
    changed: Vec<usize>,
    /// Keys per window.
    #[arg(long, default_value_t = 32)]
    q: usize,
    /// Timed passes per row (the median merge time is reported).
    #[arg(long, default_value_t = 5)]
    passes: usize,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Args)]
pub struct ScanArgs {
    /// Database to scan (make one with `pirq db gen`).
    #[arg(long)]
    db: PathBuf,
    /// Batch sizes to time, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4, 8, 16, 32, 64])]
    q: Vec<usize>,
    /// Timed passes per Q (the median is reported), after one warm-up pass.
    #[arg(long, default_value_t = 5)]
    passes: usize,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Args)]
pub struct DpfArgs {
    /// Domain sizes to time, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [20, 24])]
    n: Vec<u8>,
    /// Timed evaluations per n (the median is reported).
    #[arg(long, default_value_t = 20)]
    reps: usize,
    #[command(flatten)]
    run: RunArgs,
}

/// What every CPU bench takes besides its rows: its threads, and where its table goes.
#[derive(Args)]
pub struct RunArgs {
    /// Threads (0 = one per core).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Append the table, with the date, machine, commit and load, to this markdown file (e.g.
    /// docs/bench/cpu.md).
    #[arg(long)]
    record: Option<PathBuf>,
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Scan(args) => scan(args),
        BenchCommand::Dpf(args) => dpf(args),
        BenchCommand::Epochs(args) => epochs(args),
        BenchCommand::Load(args) => crate::load::run(*args),
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

fn random_keys(n: u8, num_pages: u64, q: usize) -> anyhow::Result<Vec<DpfKey>> {
    let mut rng = rand::rng();
    (0..q)
        .map(|_| Ok(generate(n, rng.next_u64() % num_pages, &mut rng)?.0))
        .collect()
}

fn scan(args: ScanArgs) -> anyhow::Result<()> {
    let load = record::load_average();
    let db = Arc::new(PirDb::open(&args.db)?);
    let header = *db.header();
    let scanner = CpuScanner::new(db.clone(), args.run.threads)?;
    let bytes = header.pages_len() as f64;
    let mut table = Table::new(&[
        "Q",
        "expand ms",
        "scan ms",
        "ms/pass",
        "keys/s",
        "GB·keys/s",
    ]);
    for &q in &args.q {
        let keys = random_keys(header.domain_bits(), header.num_pages, q)?;
        std::hint::black_box(scanner.scan(&scanner.expand(&keys))); // warm-up: page cache, pools
        let (mut expand, mut scan, mut total) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.passes.max(1) {
            let t0 = Instant::now();
            let bitmaps = scanner.expand(&keys);
            let t1 = Instant::now();
            std::hint::black_box(scanner.scan(&bitmaps));
            let t2 = Instant::now();
            expand.push(t1 - t0);
            scan.push(t2 - t1);
            total.push(t2 - t0);
        }
        let (e, s, t) = (median(expand), median(scan), median(total));
        let secs = t.as_secs_f64();
        table.row(vec![
            q.to_string(),
            ms(e),
            ms(s),
            ms(t),
            format!("{:.0}", q as f64 / secs),
            format!("{:.1}", bytes * q as f64 / secs / 1e9),
        ]);
        eprintln!("Q={q}: {} ms/pass", ms(t));
    }
    let title = format!(
        "CPU scan: {} pages × {} B ({:.2} GiB), {} thread(s)",
        header.num_pages,
        header.page_size,
        bytes / (1u64 << 30) as f64,
        scanner.threads()
    );
    finish(&title, &table, args.run.record, &load)
}

fn dpf(args: DpfArgs) -> anyhow::Result<()> {
    let load = record::load_average();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.run.threads)
        .build()?;
    let mut table = Table::new(&["n", "PRG blocks", "ms/key", "ns/block"]);
    for &n in &args.n {
        let (key, _) = generate(n, 0, &mut rand::rng())?;
        let mut out = vec![0u64; bitmap_words(n)];
        let times: Vec<Duration> = pool.install(|| {
            eval_full_into(&key, &mut out); // warm-up
            (0..args.reps.max(1))
                .map(|_| {
                    let t = Instant::now();
                    eval_full_into(&key, &mut out);
                    t.elapsed()
                })
                .collect()
        });
        std::hint::black_box(&out);
        let t = median(times);
        let blocks = (1u64 << n.saturating_sub(7)) - 1;
        table.row(vec![
            n.to_string(),
            blocks.to_string(),
            format!("{:.3}", t.as_secs_f64() * 1e3),
            format!("{:.1}", t.as_secs_f64() * 1e9 / blocks.max(1) as f64),
        ]);
    }
    let title = format!(
        "DPF full-domain evaluation, {} thread(s)",
        pool.current_num_threads()
    );
    finish(&title, &table, args.run.record, &load)
}

/// Per row: a scanner with a window of two epochs (base + one), so the newest epoch differs from
/// the base in exactly `changed` pages (fewer if random indices repeat); the merge is timed inside
/// real passes at that epoch, and the next update forces a fold of the base.
fn epochs(args: EpochsArgs) -> anyhow::Result<()> {
    use pirq_scan::Scanner;
    use pirq_shared::update::{EpochUpdate, PageWrite};
    let load = record::load_average();
    let db = Arc::new(PirDb::open(&args.db)?);
    let header = *db.header();
    let mut rng = rand::rng();
    let mut update = |k: usize| -> Vec<PageWrite> {
        (0..k)
            .map(|_| {
                let mut page = vec![0u8; header.page_size as usize];
                rng.fill_bytes(&mut page);
                PageWrite {
                    index: rng.next_u64() % header.num_pages,
                    page,
                }
            })
            .collect()
    };
    let mut table = Table::new(&[
        "changed pages",
        "Q",
        "merge ms/window",
        "scan ms/window",
        "apply ms",
        "apply + fold ms",
    ]);
    for &k in &args.changed {
        let scanner = CpuScanner::new(db.clone(), args.run.threads)?.with_epoch_window(2);
        let base = header.epoch;
        // The pages are made before the clock starts: only the scanner's work is timed.
        let timed_apply = |epoch: u64, pages: Vec<PageWrite>| -> anyhow::Result<Duration> {
            let t = Instant::now();
            scanner.apply_epoch(&EpochUpdate { epoch, pages })?;
            Ok(t.elapsed())
        };
        let apply = timed_apply(base + 1, update(k))?;
        let keys = random_keys(header.domain_bits(), header.num_pages, args.q)?;
        let epochs = vec![base + 1; keys.len()];
        scanner.pass_at_timed(&keys, &epochs)?; // warm-up
        let (mut merge, mut scan) = (Vec::new(), Vec::new());
        for _ in 0..args.passes.max(1) {
            let (_, times) = scanner.pass_at_timed(&keys, &epochs)?;
            merge.push(times.merge);
            scan.push(times.scan);
        }
        let apply_fold = timed_apply(base + 2, update(k))?;
        table.row(vec![
            k.to_string(),
            args.q.to_string(),
            format!("{:.3}", median(merge).as_secs_f64() * 1e3),
            ms(median(scan)),
            format!("{:.3}", apply.as_secs_f64() * 1e3),
            format!("{:.3}", apply_fold.as_secs_f64() * 1e3),
        ]);
    }
    let title = format!(
        "CPU epoch merge and compaction: {} pages × {} B, Q = {}, {} thread(s)",
        header.num_pages, header.page_size, args.q, args.run.threads
    );
    finish(&title, &table, args.run.record, &load)
}

fn finish(
    title: &str,
    table: &Table,
    record_to: Option<PathBuf>,
    load: &str,
) -> anyhow::Result<()> {
    let md = table.to_markdown();
    crate::outln!("{title}\n\n{md}");
    if let Some(file) = record_to {
        record::append(&file, title, &md, load)?;
    }
    Ok(())
}
