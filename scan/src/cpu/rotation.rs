//! The CPU backend's rotating scan ([`crate::rotation`]): each step XORs one segment of the
//! pages into the persistent accumulators of every key in flight, with the same per-page key
//! masks and thread split as a pass, then merges that segment's epoch diffs.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pirq_shared::bits::xor_into;
use pirq_shared::dpf::DpfKey;
use pirq_shared::metrics::{record_phase, Phase};

use super::{accumulator_stride, CpuScanner};
use crate::rotation::{self, Clock, Finished, GroupTimes, Rotation, Step, Ticket};
use crate::{check_keys, Answers, ScanError, Scanner};

/// Pages per unit of a CPU segment: one word of the key bitmaps.
const SEGMENT_ALIGN: u64 = 64;

/// A [`Rotation`] over a [`CpuScanner`] (made by [`Scanner::rotation`]).
pub struct CpuRotation {
    scanner: Arc<CpuScanner>,
    /// The turn's segments, relative to the scanner's first page.
    segments: Vec<Range<u64>>,
    /// The segment the next step scans.
    cursor: usize,
    groups: Vec<Group>,
    clock: Clock,
}

/// Keys joined together.
struct Group {
    ticket: Ticket,
    epoch: u64,
    /// Each key's selection bits over the scanner's range.
    bitmaps: Vec<Vec<u64>>,
    /// The keys' answers so far, back to back.
    acc: Vec<u8>,
    /// Segments still to scan; 0 = done.
    left: usize,
    times: GroupTimes,
}

impl CpuRotation {
    /// A rotation of `segments` segments (fewer if the range has fewer 64-page units).
    pub fn new(scanner: Arc<CpuScanner>, segments: usize) -> CpuRotation {
        let pages = scanner.range.end - scanner.range.start;
        CpuRotation {
            segments: rotation::split(pages, segments, SEGMENT_ALIGN),
            scanner,
            cursor: 0,
            groups: Vec::new(),
            clock: Clock::default(),
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
        let ticket = self.clock.ticket();
        self.groups.push(Group {
            ticket,
            epoch,
            bitmaps,
            acc: vec![0u8; keys.len() * self.scanner.geometry.page_size],
            left: self.segments.len(),
            times: GroupTimes {
                joined,
                first_segment: None,
            },
        });
        Ok(ticket)
    }

    fn step(&mut self) -> Result<Step, ScanError> {
        let now = Instant::now();
        let ps = self.scanner.geometry.page_size;
        let segment = self.segments[self.cursor].clone();
        if self.cursor == 0 {
            let started: usize = self
                .groups
                .iter()
                .filter(|g| g.times.first_segment.is_some())
                .map(|g| g.bitmaps.len())
                .sum();
            self.clock.turn_begins(started);
        }
        let mut step = Step::default();
        // The base and the window stay as they are for the whole step (an update waits), so
        // the segment's merge uses the very base its scan read.
        let state = self.scanner.state.read().unwrap_or_else(|e| e.into_inner());
        let mut i = 0;
        while i < self.groups.len() {
            if let Err(e) = state.window.resolve(Some(self.groups[i].epoch)) {
                let g = self.groups.swap_remove(i);
                step.finished.push(finish(g, Err(e.into()), now));
                continue;
            }
            let g = &mut self.groups[i];
            self.clock.start(&mut g.times, now, g.bitmaps.len());
            i += 1;
        }
        let bits: Vec<&[u64]> = self
            .groups
            .iter()
            .flat_map(|g| g.bitmaps.iter().map(Vec::as_slice))
            .collect();
        step.keys = bits.len();
        let scan_started = Instant::now();
        let acc = self
            .scanner
            .scan_segment(state.pages.as_slice(), &bits, segment.clone());
        let merge_started = Instant::now();
        record_phase(Phase::Scan, merge_started - scan_started);
        let mut sums = acc.chunks_exact(accumulator_stride(ps));
        let mut merged = Ok(());
        for g in &mut self.groups {
            for (q, answer) in g.acc.chunks_exact_mut(ps).enumerate() {
                let sum = sums.next().expect("one accumulator per key");
                xor_into(answer, &sum[..ps]);
                // Cannot fail: every group's epoch was resolved under this same lock above.
                merged = merged.and_then(|()| {
                    state
                        .window
                        .merge_pages(&g.bitmaps[q], g.epoch, segment.clone(), answer)
                });
            }
            g.left -= 1;
        }
        drop(state);
        record_phase(Phase::Merge, merge_started.elapsed());
        if let Err(e) = merged {
            self.groups.clear();
            return Err(e.into());
        }
        let end = Instant::now();
        let (done, going): (Vec<Group>, Vec<Group>) =
            self.groups.drain(..).partition(|g| g.left == 0);
        self.groups = going;
        step.finished.extend(done.into_iter().map(|mut g| {
            let answers = Answers::new(ps, std::mem::take(&mut g.acc));
            finish(g, Ok(answers), end)
        }));
        self.cursor = (self.cursor + 1) % self.segments.len();
        if self.cursor == 0 {
            step.turn_keys = Some(self.clock.turn_ends());
        }
        Ok(step)
    }

    fn in_flight(&self) -> usize {
        self.groups.iter().map(|g| g.bitmaps.len()).sum()
    }

    fn capacity(&self) -> usize {
        self.scanner.max_batch_keys
    }

    fn segments(&self) -> usize {
        self.segments.len()
    }

    fn clear(&mut self) -> Vec<Ticket> {
        self.groups.drain(..).map(|g| g.ticket).collect()
    }
}

fn finish(g: Group, answers: Result<Answers, ScanError>, now: Instant) -> Finished {
    let (waited, turn) = Clock::finish(&g.times, now);
    Finished {
        ticket: g.ticket,
        answers,
        waited,
        turn,
    }
}
