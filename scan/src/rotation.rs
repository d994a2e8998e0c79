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
//! length (or, on the GPU, an update waits for the device work of the steps in flight), scans segment `s` of base `b_s`, and XORs into each key's accumulator
//! `Σ_{p ∈ s} bit(p) · (page_p(e) ⊕ page_p(b_s))` — the diffs of `e` against that same base,
//! restricted to the segment. Each segment then contributes exactly `Σ_{p ∈ s} bit(p) ·
//! page_p(e)`, whichever base it was read with, and the segments of a turn partition the range,
//! so the sum over the turn is the answer at `e`. An update takes the write lock between steps,
//! never inside one (the CUDA backend, which queues a step ahead and holds the lock only while
//! launching it, has the update wait for the device work in flight once it holds the lock). A key whose epoch leaves the window mid-turn (the base folded past it:
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
    /// with it) and returns the groups whose turn is complete: those of this step, or, for a
    /// backend that queues its steps ahead ([`steps_ahead`](Self::steps_ahead)), those of the
    /// step that many calls before. On an error every group in flight is dropped (the caller
    /// fails or retries them all).
    fn step(&mut self) -> Result<Step, ScanError>;

    /// Steps a call launches ahead of the one whose groups it returns: 0 for a backend whose
    /// step is done when the call returns, 1 for the CUDA backend, whose next step is already
    /// queued on the device while the host hands the last one's answers over. A group's
    /// answers then come back that many calls after its last segment, and
    /// [`in_flight`](Self::in_flight) counts it until they have.
    fn steps_ahead(&self) -> usize {
        0
    }

    /// When the next [`step`](Self::step) is best called, for a backend that queues steps
    /// ahead: late enough that the joins made until then still enter the next step, early
    /// enough that it is queued before the step in flight ends. `None`: at once.
    fn launch_at(&self) -> Option<std::time::Instant> {
        None
    }

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

/// The groups in flight and where the turn is: the bookkeeping both backends share (tickets,
/// segments left, the segment the next step scans, and the times behind [`Finished::waited`],
/// [`Finished::turn`] and [`Step::turn_keys`]). `G` is a backend's own part of a group (the CPU's
/// bitmaps and answers, the CUDA backend's key columns).
#[derive(Debug)]
pub struct Groups<G> {
    list: Vec<Group<G>>,
    segments: usize,
    cursor: usize,
    clock: Clock,
}

/// Keys joined together (one [`Rotation::join`]).
#[derive(Debug)]
pub struct Group<G> {
    pub ticket: Ticket,
    pub epoch: u64,
    pub keys: usize,
    /// Segments still to scan; 0 = done.
    left: usize,
    times: GroupTimes,
    /// The backend's own part.
    pub own: G,
}

impl<G> Group<G> {
    /// Whether the step about to run is this group's last.
    pub fn in_last_segment(&self) -> bool {
        self.left == 1
    }

    /// The group leaves at `now`, with its answers or why it has none.
    pub fn finish(&self, answers: Result<Answers, ScanError>, now: Instant) -> Finished {
        let (waited, turn) = Clock::finish(&self.times, now);
        Finished {
            ticket: self.ticket,
            answers,
            waited,
            turn,
        }
    }
}

impl<G> std::ops::Index<usize> for Groups<G> {
    type Output = Group<G>;
    fn index(&self, i: usize) -> &Group<G> {
        &self.list[i]
    }
}

impl<G> Groups<G> {
    /// No group in flight, a turn of `segments` segments.
    pub fn new(segments: usize) -> Groups<G> {
        Groups {
            list: Vec::new(),
            segments: segments.max(1),
            cursor: 0,
            clock: Clock::default(),
        }
    }

    /// The segment the next step scans.
    pub fn segment(&self) -> usize {
        self.cursor
    }

    /// A group of `keys` keys at `epoch`, joined at `joined`: its ticket.
    pub fn join(&mut self, epoch: u64, keys: usize, own: G, joined: Instant) -> Ticket {
        let ticket = self.clock.ticket();
        self.list.push(Group {
            ticket,
            epoch,
            keys,
            left: self.segments,
            times: GroupTimes {
                joined,
                first_segment: None,
            },
            own,
        });
        ticket
    }

    /// A step begins: at the first segment of a turn, the keys of groups already started count
    /// for it.
    pub fn begin_turn(&mut self) {
        if self.cursor == 0 {
            let started = self
                .list
                .iter()
                .filter(|g| g.times.first_segment.is_some())
                .map(|g| g.keys)
                .sum();
            self.clock.turn_begins(started);
        }
    }

    /// The step scans from `now`, under the epoch state `resolve` reads: a group whose epoch it
    /// refuses leaves (returned, with the error, for the backend to release and finish); the
    /// others are scanned, a group scanned for the first time starting its turn.
    pub fn start_step(
        &mut self,
        now: Instant,
        mut resolve: impl FnMut(u64) -> Result<(), ScanError>,
    ) -> Vec<(Group<G>, ScanError)> {
        let mut left_window = Vec::new();
        let mut i = 0;
        while i < self.list.len() {
            if let Err(e) = resolve(self.list[i].epoch) {
                left_window.push((self.list.swap_remove(i), e));
                continue;
            }
            let g = &mut self.list[i];
            self.clock.start(&mut g.times, now, g.keys);
            i += 1;
        }
        left_window
    }

    /// The step's segment is scanned: every group is a segment further, the next step scans the
    /// next segment. The groups whose turn ended (in their order), and the keys of the turn when
    /// this segment closed one.
    pub fn end_step(&mut self) -> (Vec<Group<G>>, Option<usize>) {
        for g in &mut self.list {
            g.left -= 1;
        }
        let (done, going): (Vec<Group<G>>, Vec<Group<G>>) =
            self.list.drain(..).partition(|g| g.left == 0);
        self.list = going;
        self.cursor = (self.cursor + 1) % self.segments;
        let turn_keys = (self.cursor == 0).then(|| self.clock.turn_ends());
        (done, turn_keys)
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Group<G>> {
        self.list.iter()
    }

    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, Group<G>> {
        self.list.iter_mut()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Keys in flight.
    pub fn keys(&self) -> usize {
        self.list.iter().map(|g| g.keys).sum()
    }

    /// Drops every group (a failed step, a shutdown): their tickets.
    pub fn clear(&mut self) -> Vec<Ticket> {
        self.list.drain(..).map(|g| g.ticket).collect()
    }
}

/// Tickets and the turn's key count.
#[derive(Debug, Default)]
struct Clock {
    next_ticket: u64,
    keys_this_turn: usize,
}

/// A group's times: joined, and (once scanned) the start of its first segment.
#[derive(Clone, Copy, Debug)]
struct GroupTimes {
    joined: Instant,
    first_segment: Option<Instant>,
}

impl Clock {
    fn ticket(&mut self) -> Ticket {
        self.next_ticket += 1;
        Ticket(self.next_ticket)
    }

    /// A step starts at `now`: a group scanned for the first time starts its turn.
    fn start(&mut self, times: &mut GroupTimes, now: Instant, keys: usize) {
        if times.first_segment.is_none() {
            times.first_segment = Some(now);
            self.keys_this_turn += keys;
        }
    }

    /// The keys of groups already in flight when a turn begins count for that turn too.
    fn turn_begins(&mut self, in_flight: usize) {
        self.keys_this_turn = in_flight;
    }

    /// The turn ended: the keys it scanned.
    fn turn_ends(&mut self) -> usize {
        std::mem::take(&mut self.keys_this_turn)
    }

    /// (waited, turn) of a group that finishes now.
    fn finish(times: &GroupTimes, now: Instant) -> (Duration, Duration) {
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

    /// Steps `groups` once with every epoch in the window: the tickets that finished, and the
    /// turn's keys when the step closed a turn.
    fn step(groups: &mut Groups<()>) -> (Vec<Ticket>, Option<usize>) {
        groups.begin_turn();
        let left = groups.start_step(Instant::now(), |_| Ok(()));
        assert!(left.is_empty());
        let (done, turn_keys) = groups.end_step();
        (done.iter().map(|g| g.ticket).collect(), turn_keys)
    }

    #[test]
    fn a_group_leaves_after_one_turn_whatever_segment_it_joins_at() {
        let mut groups = Groups::new(4);
        for wait in 0..4 {
            for _ in 0..wait {
                step(&mut groups);
            }
            let ticket = groups.join(0, 1, (), Instant::now());
            for _ in 0..3 {
                assert!(step(&mut groups).0.is_empty());
            }
            assert!(groups[0].in_last_segment());
            assert_eq!(step(&mut groups).0, vec![ticket]);
            assert!(groups.is_empty());
        }
    }

    #[test]
    fn tickets_are_distinct_and_groups_keep_their_order() {
        let mut groups = Groups::new(2);
        let a = groups.join(0, 2, (), Instant::now());
        let b = groups.join(0, 3, (), Instant::now());
        assert_ne!(a, b);
        assert_eq!(groups.keys(), 5);
        step(&mut groups);
        assert_eq!(step(&mut groups).0, vec![a, b]);
        assert_eq!(groups.keys(), 0);
    }

    #[test]
    fn a_turn_counts_every_key_scanned_in_it() {
        let mut groups = Groups::new(2);
        groups.join(0, 3, (), Instant::now());
        assert_eq!(step(&mut groups).1, None);
        // Joins in the turn's second segment: scanned in this turn too.
        groups.join(0, 2, (), Instant::now());
        assert_eq!(step(&mut groups).1, Some(5));
        // The group of 2 is still in flight when the next turn begins: it counts there too.
        assert_eq!(step(&mut groups), (vec![Ticket(2)], None));
        assert_eq!(step(&mut groups), (vec![], Some(2)));
    }

    #[test]
    fn a_group_whose_epoch_left_the_window_leaves_at_the_next_step() {
        let mut groups = Groups::new(3);
        let kept = groups.join(1, 1, (), Instant::now());
        let gone = groups.join(2, 1, (), Instant::now());
        groups.begin_turn();
        let left = groups.start_step(Instant::now(), |epoch| {
            if epoch == 2 {
                Err(ScanError::Device("outside the window".into()))
            } else {
                Ok(())
            }
        });
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].0.ticket, gone);
        let finished = left[0]
            .0
            .finish(Err(ScanError::Unsupported("x")), Instant::now());
        assert_eq!(finished.ticket, gone);
        assert!(finished.answers.is_err());
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].ticket, kept);
    }

    #[test]
    fn a_finished_group_waited_from_its_join_to_its_first_segment() {
        let mut groups = Groups::new(1);
        let joined = Instant::now();
        groups.join(0, 1, (), joined);
        let first = joined + Duration::from_millis(5);
        groups.begin_turn();
        assert!(groups.start_step(first, |_| Ok(())).is_empty());
        let (done, _) = groups.end_step();
        let end = first + Duration::from_millis(7);
        let f = done[0].finish(Err(ScanError::Unsupported("x")), end);
        assert_eq!(f.waited, Duration::from_millis(5));
        assert_eq!(f.turn, Duration::from_millis(7));
    }

    #[test]
    fn clear_drops_every_group_and_names_it() {
        let mut groups = Groups::new(3);
        let a = groups.join(0, 1, (), Instant::now());
        let b = groups.join(0, 4, (), Instant::now());
        step(&mut groups);
        assert_eq!(groups.clear(), vec![a, b]);
        assert!(groups.is_empty());
        assert_eq!(groups.keys(), 0);
    }
}
