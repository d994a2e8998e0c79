//! The CPU scanner: expand every key, then one pass over the pages for the whole batch.
//!
//! Threads split the page range; each keeps one accumulator per key (Q × page_size bytes, small
//! enough to stay in L2 for the batch sizes the worker uses) and XORs every page into the
//! accumulators of the keys that select it. Pages that no key selects are skipped without being
//! read. At the end the threads' partial accumulators are XOR-merged.
//!
//! Which keys select a page comes from a per-64-page transpose of the key bitmaps: one u64 mask
//! of keys per page (per group of 64 keys), so the inner loop is "for each set bit, XOR the page
//! into that key's accumulator", which the compiler turns into 32-byte AVX2 loads and stores.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use pirq_db::{PirDb, PrivatePages};
use pirq_shared::dpf::{eval_range_into, range_words, DpfKey};
use pirq_shared::metrics::{record_phase, Phase};
use rayon::prelude::*;

mod rotation;

pub use self::rotation::CpuRotation;
use crate::epoch_window::DeltaWindow;
use crate::{
    check_keys, Answers, Geometry, ScanError, Scanner, DEFAULT_EPOCH_WINDOW, DEFAULT_MAX_BATCH_KEYS,
};
use pirq_shared::update::EpochUpdate;
use pirq_shared::wire::EpochRange;

/// Pages are split into ranges of at least this many pages per thread task: a multiple of 64 so
/// ranges start on bitmap words.
const MIN_PAGES_PER_TASK: u64 = 64 * 16;

/// Most pages (keys × the scanner's range) an expansion may cover to run on the calling thread
/// instead of the pool's: handing work to a pool thread and back is two thread wake-ups (tens
/// of µs on an idle host, a scheduler slice on a busy one: 0.45 ms a lone key on the 2-core VM,
/// docs/bench/host-path.md), while 2^16 pages are 512 ChaCha8 blocks, a few µs of work, and
/// below the size at which `eval_range_into` spreads one key over rayon's threads (so nothing
/// runs on the global pool instead of this scanner's). A lone query on a small table, or a
/// shard's small range, thus joins the rotation without a hand-off.
const INLINE_EXPAND_PAGES: u64 = 1 << 16;

/// Most bytes (keys × pages × page size) a piece of a rotation's segment may cover to be
/// scanned on the calling thread, for the same reason: a key selects about half the pages, so
/// 1 MiB is ~0.5 MiB of XOR, some 30 µs on one core, about what a hand-off to the pool and back
/// costs on an idle host (a lone key's 64-page segment of 4 KiB pages is a quarter of it).
const INLINE_SCAN_BYTES: u64 = 1 << 20;

/// Scans a memory-mapped `.pirdb` on the CPU with its own rayon thread pool.
///
/// The pages live in a private copy-on-write mapping of the file, so epoch updates are folded
/// into them in memory (only changed pages cost RAM). Passes share a read lock; an update takes
/// the write lock for the moment it needs to fold pages, so every pass sees one consistent base.
pub struct CpuScanner {
    geometry: Geometry,
    /// The pages this scanner serves (all of them, or one shard's); page `range.start` is page 0
    /// of `State::pages` and of the epoch window.
    range: std::ops::Range<u64>,
    pool: rayon::ThreadPool,
    /// Pieces of work handed to `pool` so far ([`CpuScanner::pool_hand_offs`]).
    hand_offs: AtomicU64,
    max_batch_keys: usize,
    state: RwLock<State>,
}

/// Time spent in each phase of one CPU pass.
#[derive(Clone, Copy, Debug, Default)]
pub struct PhaseTimes {
    pub expand: std::time::Duration,
    pub scan: std::time::Duration,
    pub merge: std::time::Duration,
}

/// Base pages and the epoch window over them; always changed together.
struct State {
    pages: PrivatePages,
    window: DeltaWindow,
}

impl CpuScanner {
    /// A scanner over `db` using `threads` threads (0 = one per core).
    pub fn new(db: Arc<PirDb>, threads: usize) -> Result<CpuScanner, ScanError> {
        let all = 0..db.num_pages();
        CpuScanner::with_range(db, threads, all)
    }

    /// A scanner over pages `range` of `db` only (a shard, see `pirq_shared::shard`): only those
    /// pages are mapped, keys are evaluated over that part of their domain, and answers are the
    /// XOR of the selected pages of the range (a partial answer).
    pub fn with_range(
        db: Arc<PirDb>,
        threads: usize,
        range: std::ops::Range<u64>,
    ) -> Result<CpuScanner, ScanError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("pirq-scan-{i}"))
            .build()
            .map_err(|e| ScanError::Device(format!("cannot start scan threads: {e}")))?;
        let h = *db.header();
        let file_pages = db.first_page()..db.first_page() + h.num_pages;
        if range.start < file_pages.start || range.end > file_pages.end {
            return Err(ScanError::Device(format!(
                "{} holds database pages {file_pages:?}, not {range:?}",
                db.path().display()
            )));
        }
        let geometry = Geometry {
            num_pages: db.total_pages(),
            page_size: h.page_size as usize,
            domain_bits: pirq_shared::dpf::domain_bits(db.total_pages()),
        };
        let window = DeltaWindow::new(
            geometry.page_size,
            range.end - range.start,
            h.epoch,
            DEFAULT_EPOCH_WINDOW,
        );
        let pages = db
            .private_range(range.start - file_pages.start..range.end - file_pages.start)
            .map_err(|e| ScanError::Device(e.to_string()))?;
        Ok(CpuScanner {
            geometry,
            range,
            pool,
            hand_offs: AtomicU64::new(0),
            max_batch_keys: DEFAULT_MAX_BATCH_KEYS,
            state: RwLock::new(State { pages, window }),
        })
    }

    /// Changes how many epochs are answered exactly (the base included). Call before updates.
    pub fn with_epoch_window(self, capacity: usize) -> CpuScanner {
        {
            let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
            let oldest = state.window.oldest();
            let (ps, n) = (self.geometry.page_size, self.range.end - self.range.start);
            state.window = DeltaWindow::new(ps, n, oldest, capacity);
        }
        self
    }

    /// [`Scanner::pass_at`] with the time of each phase (for metrics and benches).
    pub fn pass_at_timed(
        &self,
        keys: &[DpfKey],
        epochs: &[u64],
    ) -> Result<(Answers, PhaseTimes), ScanError> {
        check_keys(&self.geometry, keys, self.max_batch_keys)?;
        assert_eq!(keys.len(), epochs.len(), "one epoch per key");
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        for &e in epochs {
            state.window.resolve(Some(e))?;
        }
        let t0 = Instant::now();
        let bitmaps = self.expand(keys);
        let t1 = Instant::now();
        let mut bytes = self
            .scan_pages(state.pages.as_slice(), &bitmaps)
            .into_bytes();
        let t2 = Instant::now();
        state.window.merge(&bitmaps, epochs, &mut bytes)?;
        let times = PhaseTimes {
            expand: t1 - t0,
            scan: t2 - t1,
            merge: t2.elapsed(),
        };
        Ok((Answers::new(self.geometry.page_size, bytes), times))
    }

    /// Changes the largest batch one pass accepts.
    pub fn with_max_batch_keys(mut self, max: usize) -> CpuScanner {
        self.max_batch_keys = max.max(1);
        self
    }

    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Expands every key's bitmap over the pages this scanner serves (in parallel over keys):
    /// bit `j` is page `range.start + j`. Only that part of the domain is evaluated.
    pub fn expand(&self, keys: &[DpfKey]) -> Vec<Vec<u64>> {
        let range = self.range.clone();
        let one = |key: &DpfKey| {
            let mut bits = vec![0u64; range_words(&range)];
            eval_range_into(key, range.clone(), &mut bits)
                .expect("checked keys cover the database, shards start on leaves");
            bits
        };
        let pages = keys.len() as u64 * (range.end - range.start);
        if pages <= INLINE_EXPAND_PAGES {
            return keys.iter().map(one).collect();
        }
        self.install(|| keys.par_iter().map(one).collect())
    }

    /// Runs `work` on the pool, counted ([`CpuScanner::pool_hand_offs`]).
    fn install<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        self.hand_offs.fetch_add(1, Ordering::Relaxed);
        self.pool.install(work)
    }

    /// How many times work was handed to the scanner's thread pool so far: each hand-off wakes
    /// a pool thread and then the caller again, which is most of a small table's join and step
    /// (what [`INLINE_EXPAND_PAGES`] and [`INLINE_SCAN_BYTES`] avoid).
    pub fn pool_hand_offs(&self) -> u64 {
        self.hand_offs.load(Ordering::Relaxed)
    }

    /// The scan of the base pages alone, given expanded bitmaps (for benches that time phases).
    pub fn scan(&self, bitmaps: &[Vec<u64>]) -> Answers {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        self.scan_pages(state.pages.as_slice(), bitmaps)
    }

    fn scan_pages(&self, pages: &[u8], bitmaps: &[Vec<u64>]) -> Answers {
        let ps = self.geometry.page_size;
        let bits: Vec<&[u64]> = bitmaps.iter().map(Vec::as_slice).collect();
        let acc = self.scan_segment(pages, &bits, 0..self.range.end - self.range.start);
        let bytes = acc
            .chunks_exact(accumulator_stride(ps))
            .flat_map(|a| &a[..ps])
            .copied()
            .collect();
        Answers::new(ps, bytes)
    }

    /// Accumulators for a segment scanned in pieces ([`CpuScanner::scan_piece_into`]): one set
    /// per thread of the pool, each laid out as [`CpuScanner::scan_segment`] returns its sums,
    /// kept across the pieces and folded once at the end ([`fold_accumulators`]), so that a
    /// piece costs no more than its pages (no sums XORed together per piece).
    fn piece_accumulators(&self, keys: usize) -> Vec<Vec<u8>> {
        let len = keys * accumulator_stride(self.geometry.page_size);
        (0..self.threads()).map(|_| vec![0u8; len]).collect()
    }

    /// XORs pages `piece` (relative to the range) into `accs` (one set per thread), the piece
    /// split across the pool's threads in whole bitmap words.
    fn scan_piece_into(
        &self,
        pages: &[u8],
        bitmaps: &[&[u64]],
        piece: Range<u64>,
        accs: &mut [Vec<u8>],
    ) {
        let ps = self.geometry.page_size;
        // One thread, or a piece too small to split (a lone key's segment of a small table):
        // on the calling thread, into the first thread's sums (they are folded at the end).
        let bytes = bitmaps.len() as u64 * (piece.end - piece.start) * ps as u64;
        if accs.len() == 1 || bytes <= INLINE_SCAN_BYTES {
            scan_range(pages, ps, bitmaps, piece.start, piece.end, &mut accs[0]);
            return;
        }
        let per_task = (piece.end - piece.start)
            .div_ceil(accs.len() as u64)
            .next_multiple_of(64);
        self.install(|| {
            accs.par_iter_mut().enumerate().for_each(|(i, acc)| {
                let start = (piece.start + i as u64 * per_task).min(piece.end);
                let end = (start + per_task).min(piece.end);
                if start < end {
                    scan_range(pages, ps, bitmaps, start, end, acc);
                }
            })
        });
    }

    /// Fewest pages in a piece of a rotation's segment: a bitmap word for each thread.
    fn min_piece_pages(&self) -> u64 {
        64 * self.threads() as u64
    }

    /// XORs pages `segment` (relative to the range) into one accumulator per key, the pages
    /// split across the pool's threads: key `q`'s sum at `q * accumulator_stride(page_size)`.
    fn scan_segment(&self, pages: &[u8], bitmaps: &[&[u64]], segment: Range<u64>) -> Vec<u8> {
        let ps = self.geometry.page_size;
        let q = bitmaps.len();
        let threads = self.threads() as u64;
        let per_task = (segment.end - segment.start)
            .div_ceil(threads)
            .next_multiple_of(64)
            .max(MIN_PAGES_PER_TASK);
        let ranges: Vec<(u64, u64)> = (segment.start..segment.end)
            .step_by(per_task as usize)
            .map(|start| (start, (start + per_task).min(segment.end)))
            .collect();
        let stride = accumulator_stride(ps);
        self.install(|| {
            ranges
                .par_iter()
                .map(|&(start, end)| {
                    let mut acc = vec![0u8; q * stride];
                    scan_range(pages, ps, bitmaps, start, end, &mut acc);
                    acc
                })
                .reduce_with(|mut a, b| {
                    xor(&mut a, &b);
                    a
                })
                .unwrap_or_else(|| vec![0u8; q * stride])
        })
    }
}

impl Scanner for CpuScanner {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn max_batch_keys(&self) -> usize {
        self.max_batch_keys
    }

    fn page_range(&self) -> std::ops::Range<u64> {
        self.range.clone()
    }

    fn epoch_window(&self) -> EpochRange {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        EpochRange {
            oldest: state.window.oldest(),
            newest: state.window.newest(),
        }
    }

    fn apply_epoch(&self, update: &EpochUpdate) -> Result<(), ScanError> {
        let writes = super::own_writes(&self.geometry, &self.range, update)?;
        let mut guard = self.state.write().unwrap_or_else(|e| e.into_inner());
        let State { pages, window } = &mut *guard;
        let folded = window.push(update.epoch, &writes, |p| pages.page(p).to_vec())?;
        for (p, diff) in folded {
            pirq_shared::bits::xor_into(pages.page_mut(p), &diff);
        }
        Ok(())
    }

    fn rotation(self: Arc<Self>) -> Result<Box<dyn crate::rotation::Rotation>, ScanError> {
        Ok(Box::new(CpuRotation::measured(self)))
    }

    fn pass_at(&self, keys: &[DpfKey], epochs: &[u64]) -> Result<Answers, ScanError> {
        let (answers, times) = self.pass_at_timed(keys, epochs)?;
        record_phase(Phase::Expand, times.expand);
        record_phase(Phase::Scan, times.scan);
        record_phase(Phase::Merge, times.merge);
        Ok(answers)
    }
}

/// Distance between two keys' accumulators: a page plus one cache line. With exactly a page
/// (a power of two) between them, the accumulators of a batch would all map to the same cache
/// sets and evict each other (measured: Q = 32 dipped below Q = 16 and Q = 48).
fn accumulator_stride(ps: usize) -> usize {
    ps + 64
}

/// XORs pages `start..end` into `acc` (key `q`'s accumulator at `q * accumulator_stride(ps)`).
fn scan_range(pages: &[u8], ps: usize, bitmaps: &[&[u64]], start: u64, end: u64, acc: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { scan_range_avx2(pages, ps, bitmaps, start, end, acc) };
        return;
    }
    scan_range_portable(pages, ps, bitmaps, start, end, acc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn scan_range_avx2(
    pages: &[u8],
    ps: usize,
    bitmaps: &[&[u64]],
    start: u64,
    end: u64,
    acc: &mut [u8],
) {
    scan_range_portable(pages, ps, bitmaps, start, end, acc)
}

#[inline(always)]
fn scan_range_portable(
    pages: &[u8],
    ps: usize,
    bitmaps: &[&[u64]],
    start: u64,
    end: u64,
    acc: &mut [u8],
) {
    let groups = bitmaps.len().div_ceil(64);
    let stride = accumulator_stride(ps);
    // masks[g * 64 + i]: which keys of group g select page word*64 + i.
    let mut masks = vec![0u64; groups * 64];
    for word in (start / 64) as usize..(end as usize).div_ceil(64) {
        masks.fill(0);
        for (q, bits) in bitmaps.iter().enumerate() {
            let mut w = bits[word];
            let (g, key_bit) = (q / 64, 1u64 << (q % 64));
            while w != 0 {
                masks[g * 64 + w.trailing_zeros() as usize] |= key_bit;
                w &= w - 1;
            }
        }
        let first = (word as u64 * 64).max(start);
        let last = (word as u64 * 64 + 64).min(end);
        for p in first..last {
            let i = (p % 64) as usize;
            let page = &pages[p as usize * ps..(p as usize + 1) * ps];
            for g in 0..groups {
                let mut m = masks[g * 64 + i];
                while m != 0 {
                    let q = g * 64 + m.trailing_zeros() as usize;
                    let at = q * stride;
                    xor(&mut acc[at..at + ps], page);
                    m &= m - 1;
                }
            }
        }
    }
}

#[inline(always)]
/// The sums of a segment scanned in pieces: every thread's accumulators XORed into the first.
fn fold_accumulators(mut accs: Vec<Vec<u8>>) -> Vec<u8> {
    let mut sums = accs.swap_remove(0);
    for acc in &accs {
        xor(&mut sums, acc);
    }
    sums
}

fn xor(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= *s;
    }
}
