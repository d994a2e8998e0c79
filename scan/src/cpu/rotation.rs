//! The CPU backend's rotating scan ([`crate::rotation`]): each step XORs one segment of the
//! pages into the persistent accumulators of every key in flight, with the same per-page key
//! masks and thread split as a pass, then merges that segment's epoch diffs.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pirq_shared::bits::xor_into;
use pirq_shared::dpf::DpfKey;
use pirq_shared::metrics::{record_phase, Phase};

use super::{accumulator_stride, fold_accumulators, CpuScanner};
use crate::rotation::{self, Groups, Rotation, Step, Ticket};
use crate::{check_keys, Answers, ScanError, Scanner};

/// Pages per unit of a CPU segment: one word of the key bitmaps.
const SEGMENT_ALIGN: u64 = 64;

/// A [`Rotation`] over a [`CpuScanner`] (made by [`Scanner::rotation`]).
pub struct CpuRotation {
    scanner: Arc<CpuScanner>,
    /// The turn's segments, relative to the scanner's first page.
    segments: Vec<Range<u64>>,
    groups: Groups<Keys>,
    /// Pages of the next piece of a segment ([`Rotation::step_pausing`]), from the last.
    piece_pages: u64,
}

/// Wall time a piece of a segment should take: what a quiet table on the same worker waits at
/// most for a busy one to pause (`worker/src/share.rs`), beside its own turn of about a
/// millisecond; a pause point costs one uncontended lock.
const PIECE: Duration = Duration::from_micros(250);

/// The next piece's pages after one of `pages` took `took`: scaled towards [`PIECE`] (at most
/// doubled at once, so one short piece does not make the next one long), whole bitmap words,
/// at least `min_pages`.
fn next_piece_pages(pages: u64, took: Duration, min_pages: u64) -> u64 {
    let scale = (PIECE.as_secs_f64() / took.as_secs_f64().max(1e-9)).min(2.0);
    (((pages as f64 * scale) as u64) / SEGMENT_ALIGN * SEGMENT_ALIGN).max(min_pages)
}

/// The CPU's part of a group ([`rotation::Group`]).
#[derive(Debug)]
struct Keys {
    /// Each key's selection bits over the scanner's range.
    bitmaps: Vec<Vec<u64>>,
    /// The keys' answers so far, back to back.
    acc: Vec<u8>,
}

impl CpuRotation {
    /// A rotation of `segments` segments (fewer if the range has fewer 64-page units).
    pub fn new(scanner: Arc<CpuScanner>, segments: usize) -> CpuRotation {
        let pages = scanner.range.end - scanner.range.start;
        let segments = rotation::split(pages, segments, SEGMENT_ALIGN);
        CpuRotation {
            groups: Groups::new(segments.len()),
            segments,
            scanner,
            piece_pages: 0,
        }
    }

    /// Segments from a measured one-key pass: about [`rotation::TARGET_SEGMENT`] each, at least
    /// [`rotation::MIN_SEGMENTS`].
    pub fn measured(scanner: Arc<CpuScanner>) -> CpuRotation {
        let turn = one_key_pass(&scanner).unwrap_or(Duration::ZERO);
        let pages = scanner.range.end - scanner.range.start;
        let segments = rotation::segments_for(turn, pages.div_ceil(SEGMENT_ALIGN));
        CpuRotation::new(scanner, segments)
    }

    /// The turn's segments (pages relative to the scanner's range).
    pub fn segment_ranges(&self) -> &[Range<u64>] {
        &self.segments
    }
}

/// Wall time of one pass of one random key (expansion, scan of the pages it selects, merge).
fn one_key_pass(scanner: &CpuScanner) -> Option<Duration> {
    let g = scanner.geometry();
    let alpha = rand::random::<u64>() % g.num_pages.max(1);
    let (key, _) = pirq_shared::dpf::generate(g.domain_bits, alpha, &mut rand::rng()).ok()?;
    let start = Instant::now();
    scanner.pass(&[key]).ok()?;
    Some(start.elapsed())
}

impl Rotation for CpuRotation {
    fn join(&mut self, keys: &[DpfKey], epoch: u64) -> Result<Ticket, ScanError> {
        let room = self.capacity() - self.in_flight();
        check_keys(&self.scanner.geometry, keys, room)?;
        {
            let state = self.scanner.state.read().unwrap_or_else(|e| e.into_inner());
            state.window.resolve(Some(epoch))?;
        }
        let joined = Instant::now();
        let bitmaps = self.scanner.expand(keys);
        record_phase(Phase::Expand, joined.elapsed());
        let acc = vec![0u8; keys.len() * self.scanner.geometry.page_size];
        Ok(self
            .groups
            .join(epoch, keys.len(), Keys { bitmaps, acc }, joined))
    }

    fn step(&mut self) -> Result<Step, ScanError> {
        self.scan_step(None)
    }

    fn step_pausing(&mut self, pause_point: &mut dyn FnMut()) -> Result<Step, ScanError> {
        self.scan_step(Some(pause_point))
    }

    fn in_flight(&self) -> usize {
        self.groups.keys()
    }

    fn capacity(&self) -> usize {
        self.scanner.max_batch_keys
    }

    fn segments(&self) -> usize {
        self.segments.len()
    }

    fn clear(&mut self) -> Vec<Ticket> {
        self.groups.clear()
    }
}

impl CpuRotation {
    /// One step: the next segment for every key in flight, in one piece, or with a pause point
    /// in pieces of about [`PIECE`].
    fn scan_step(&mut self, mut pause_point: Option<&mut dyn FnMut()>) -> Result<Step, ScanError> {
        let now = Instant::now();
        let ps = self.scanner.geometry.page_size;
        let segment = self.segments[self.groups.segment()].clone();
        self.groups.begin_turn();
        let mut step = Step::default();
        // The base and the window stay as they are for the whole step (an update waits), so
        // the segment's merge uses the very base its scan read.
        let state = self.scanner.state.read().unwrap_or_else(|e| e.into_inner());
        let left_window = self.groups.start_step(now, |epoch| {
            state
                .window
                .resolve(Some(epoch))
                .map(drop)
                .map_err(Into::into)
        });
        step.finished
            .extend(left_window.into_iter().map(|(g, e)| g.finish(Err(e), now)));
        let bits: Vec<&[u64]> = self
            .groups
            .iter()
            .flat_map(|g| g.own.bitmaps.iter().map(Vec::as_slice))
            .collect();
        step.keys = bits.len();
        // The segment in pieces of about PIECE each (sized from the last piece's time), with a
        // pause point between two: the sums are the same as of one scan.
        let mut accs = self.scanner.piece_accumulators(bits.len());
        let (min_pages, mut scanned) = (self.scanner.min_piece_pages(), Duration::ZERO);
        let mut piece_pages = match pause_point {
            Some(_) => self.piece_pages.max(min_pages),
            None => segment.end - segment.start,
        };
        let mut at = segment.start;
        while at < segment.end {
            let end = (at + piece_pages).min(segment.end);
            let started = Instant::now();
            self.scanner
                .scan_piece_into(state.pages.as_slice(), &bits, at..end, &mut accs);
            let took = started.elapsed();
            scanned += took;
            // Only a whole piece says how long one takes (the segment's last may be short).
            let whole = end - at == piece_pages;
            at = end;
            if let Some(pause_point) = pause_point.as_mut() {
                if whole {
                    piece_pages = next_piece_pages(piece_pages, took, min_pages);
                }
                self.piece_pages = piece_pages;
                if at < segment.end {
                    pause_point();
                }
            }
        }
        let merge_started = Instant::now();
        let acc = fold_accumulators(accs);
        record_phase(Phase::Scan, scanned + merge_started.elapsed());
        let merge_started = Instant::now();
        let mut sums = acc.chunks_exact(accumulator_stride(ps));
        let mut merged = Ok(());
        for g in self.groups.iter_mut() {
            let epoch = g.epoch;
            let Keys { bitmaps, acc } = &mut g.own;
            for (q, answer) in acc.chunks_exact_mut(ps).enumerate() {
                let sum = sums.next().expect("one accumulator per key");
                xor_into(answer, &sum[..ps]);
                // Cannot fail: every group's epoch was resolved under this same lock above.
                merged = merged.and_then(|()| {
                    state
                        .window
                        .merge_pages(&bitmaps[q], epoch, segment.clone(), answer)
                });
            }
        }
        drop(state);
        record_phase(Phase::Merge, merge_started.elapsed());
        if let Err(e) = merged {
            self.groups.clear();
            return Err(e.into());
        }
        let end = Instant::now();
        let (done, turn_keys) = self.groups.end_step();
        step.finished.extend(done.into_iter().map(|mut g| {
            let answers = Answers::new(ps, std::mem::take(&mut g.own.acc));
            g.finish(Ok(answers), end)
        }));
        step.turn_keys = turn_keys;
        Ok(step)
    }
}
