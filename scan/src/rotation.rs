//! The rotating scan: the database read in segments, keys joining at segment boundaries.
//!
//! A [`Scanner::pass_at`](crate::Scanner::pass_at) answers a batch in one read of the database,
//! so a key that arrives while a pass runs waits for that pass to end and then for a whole pass
//! of its own. A [`Rotation`] instead reads the database (a shard's page range, for a shard) in
//! `S` segments, round and round. Each [`step`](Rotation::step) scans the next segment for every
//! key in flight:
//!
//! - a key **joins** at the next segment boundary: [`join`](Rotation::join) expands it then (its
//!   selection bits over the whole range are ready before its first segment);
//! - its **accumulator persists** across segments;
//! - it **leaves** after exactly one turn, `S` segments later, every page XORed in once, whatever
//!   segment it started in.
//!
//! So the scanner never waits for a batch to form, and answers leave one segment's worth at a
//! time instead of all together.
//!
//! ## Epochs stay exact
//!
//! A key pinned to epoch `e` must get `Σ_p bit(p) · page_p(e)`. The scanners hold one base copy
//! at the window's oldest epoch `b` and the diffs `page_p(e) ⊕ page_p(b)` of later epochs
//! ([`crate::epoch_window`]); an update may fold the base forward (change it in place) between
//! two segments, so the segments of one key's turn may be scanned against different bases.
//! Therefore the epoch merge is done **per segment, at the moment the segment is scanned, with
//! the window of that moment**: a step holds the scanner's epoch state (read lock) for its whole
//! length, scans segment `s` of base `b_s`, and XORs into each key's accumulator
//! `Σ_{p ∈ s} bit(p) · (page_p(e) ⊕ page_p(b_s))` — the diffs of `e` against that same base,
//! restricted to the segment. Each segment then contributes exactly `Σ_{p ∈ s} bit(p) ·
//! page_p(e)`, whichever base it was read with, and the segments of a turn partition the range,
//! so the sum over the turn is the answer at `e`. An update takes the write lock between steps,
//! never inside one. A key whose epoch leaves the window mid-turn (the base folded past it:
//! `--epoch-window` updates within one turn) can no longer be answered exactly and finishes with
//! [`EpochError::OutsideWindow`](crate::epoch_window::EpochError).

use std::ops::Range;
use std::time::{Duration, Instant};

use pirq_shared::dpf::DpfKey;

use crate::{Answers, ScanError};

/// A group of keys joined together (one job's keys, at one epoch): they share a turn and leave
/// together, their answers back to back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub u64);

/// A group whose turn ended.
#[derive(Debug)]
pub struct Finished {
    pub ticket: Ticket,
    /// The group's answers in the order its keys joined, or why it could not be answered
    /// (its epoch left the window mid-turn).
    pub answers: Result<Answers, ScanError>,
    /// From [`Rotation::join`] to the start of the group's first segment.
    pub waited: Duration,
    /// From the start of its first segment to the end of its last: one turn.
    pub turn: Duration,
}

/// What one [`Rotation::step`] did.
#[derive(Debug, Default)]
pub struct Step {
    /// Groups whose turn ended with this segment.
    pub finished: Vec<Finished>,
    /// Keys scanned in this segment.
    pub keys: usize,
    /// Set when this segment closed a turn (the last segment of the range): the keys in flight
    /// during that turn (every key that was scanned in one of its segments).
    pub turn_keys: Option<usize>,
}

/// A rotating scan over one scanner (see the module documentation). Owned by one thread: the
/// worker's scheduling loop joins keys and steps it.
pub trait Rotation: Send {
    /// Adds `keys`, all answered at `epoch`, to the next segment. Fails (joining nothing) when a
    /// key does not fit the domain, the epoch is outside the window, or the keys do not fit
    /// beside those in flight ([`capacity`](Self::capacity)).
    fn join(&mut self, keys: &[DpfKey], epoch: u64) -> Result<Ticket, ScanError>;

    /// Scans the next segment for every key in flight (those joined since the last step start
    /// with it) and returns the groups whose turn it completes. On an error every group in
    /// flight is dropped (the caller fails or retries them all).
    fn step(&mut self) -> Result<Step, ScanError>;

    /// [`step`](Self::step), calling `pause_point` between pieces of the segment: a worker of
    /// several tables offers its scanner to another table there (`worker/src/share.rs`), so a
    /// quiet table waits for a piece of a busy table's segment, not for the whole of it (a
    /// segment grows with the keys in flight). `pause_point` may block; the step goes on where it
    /// was, under the same epoch state, so its answers are the same. A backend whose segment is
    /// one piece of device work never calls it.
    fn step_pausing(&mut self, pause_point: &mut dyn FnMut()) -> Result<Step, ScanError> {
        let _ = pause_point;
        self.step()
    }

    /// Keys joined and not yet finished.
    fn in_flight(&self) -> usize;

    /// Most keys in flight at once.
    fn capacity(&self) -> usize;

    /// Whether `keys` more keys fit beside those in flight now (a backend that packs keys in
    /// groups, as the CUDA one in 16-key column groups, may refuse before `capacity`).
    fn fits(&self, keys: usize) -> bool {
        self.in_flight() + keys <= self.capacity()
    }

    /// Segments a turn has.
    fn segments(&self) -> usize;

    /// Drops every group in flight (after a failed step or at shutdown): their tickets.
    fn clear(&mut self) -> Vec<Ticket>;
}

/// Wall time a segment should take: short enough that a key waits little for the next
/// boundary (half a segment on average), long enough that a segment's fixed costs (launches,
/// the key masks, the merge's table walk) stay small beside its scan. Measured on an H100 at
/// 64 GiB (`pirq-gpu-bench --rotate-segments`, docs/bench/gpu-scan.md): 14 segments of 1.75 ms
/// cost 1-2 % of keys/s against 7 of 3.4 ms, and halve the wait for a boundary; at load a
/// segment grows with the keys in flight (4.6 ms with 512), so its wait grows too.
pub const TARGET_SEGMENT: Duration = Duration::from_micros(1500);

/// Fewest segments a turn has: with fewer, a key joining just after a boundary waits most of a
/// turn's quarter; and the CPU backend shows the same behaviour as the GPU's.
pub const MIN_SEGMENTS: usize = 4;

/// Segments for a turn that takes `turn` (a one-key pass, measured): about [`TARGET_SEGMENT`]
/// each, at least [`MIN_SEGMENTS`], at most `units` (the range's aligned units).
pub fn segments_for(turn: Duration, units: u64) -> usize {
    let by_time = (turn.as_secs_f64() / TARGET_SEGMENT.as_secs_f64()).round() as usize;
    by_time.max(MIN_SEGMENTS).min(units.max(1) as usize)
}

/// Splits `0..pages` into `segments` ranges of whole `align`-page units (the last may be
/// shorter), as even as the units allow. Fewer ranges come back when there are fewer units.
pub fn split(pages: u64, segments: usize, align: u64) -> Vec<Range<u64>> {
    let units = pages.div_ceil(align).max(1);
    let segments = (segments.max(1) as u64).min(units);
    (0..segments)
        .map(|i| {
            let start = (units * i / segments * align).min(pages);
            let end = (units * (i + 1) / segments * align).min(pages);
            start..end
        })
        .collect()
}

/// Bookkeeping both backends share: tickets, and the times behind [`Finished::waited`],
/// [`Finished::turn`] and [`Step::turn_keys`].
#[derive(Debug, Default)]
pub struct Clock {
    next_ticket: u64,
    keys_this_turn: usize,
}

/// A group's times: joined, and (once scanned) the start of its first segment.
#[derive(Clone, Copy, Debug)]
pub struct GroupTimes {
    pub joined: Instant,
    pub first_segment: Option<Instant>,
}

impl Clock {
    pub fn ticket(&mut self) -> Ticket {
        self.next_ticket += 1;
        Ticket(self.next_ticket)
    }

    /// A step starts at `now`: a group scanned for the first time starts its turn.
    pub fn start(&mut self, times: &mut GroupTimes, now: Instant, keys: usize) {
        if times.first_segment.is_none() {
            times.first_segment = Some(now);
            self.keys_this_turn += keys;
        }
    }

    /// The keys of groups already in flight when a turn begins count for that turn too.
    pub fn turn_begins(&mut self, in_flight: usize) {
        self.keys_this_turn = in_flight;
    }

    /// The turn ended: the keys it scanned.
    pub fn turn_ends(&mut self) -> usize {
        std::mem::take(&mut self.keys_this_turn)
    }

    /// (waited, turn) of a group that finishes now.
    pub fn finish(times: &GroupTimes, now: Instant) -> (Duration, Duration) {
        let first = times.first_segment.unwrap_or(now);
        (first - times.joined, now - first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_the_range_once_in_aligned_pieces() {
        for pages in [1u64, 63, 64, 65, 1000, 4096, 100_000] {
            for segments in [1usize, 3, 4, 7, 64] {
                for align in [64u64, 256] {
                    let parts = split(pages, segments, align);
                    assert!(!parts.is_empty() && parts.len() <= segments);
                    assert_eq!(parts[0].start, 0);
                    assert_eq!(parts.last().unwrap().end, pages);
                    for w in parts.windows(2) {
                        assert_eq!(w[0].end, w[1].start);
                    }
                    for p in &parts {
                        assert!(p.start < p.end, "{pages} {segments} {align}: {parts:?}");
                        assert_eq!(p.start % align, 0);
                    }
                }
            }
        }
    }

    #[test]
    fn segments_follow_the_turn_time() {
        assert_eq!(segments_for(Duration::from_millis(1), 1000), MIN_SEGMENTS);
        assert_eq!(segments_for(Duration::from_millis(24), 1000), 16);
        assert_eq!(segments_for(Duration::from_secs(1), 10), 10);
    }
}
