//! How one worker's tables share its scanner (issue 38): every table has a rotating scan of its
//! own, on a thread of its own, and a table steps its rotation (joins and one segment) only while
//! it holds the scanner, which [`ScanShare::take`] hands out one step at a time.
//!
//! **Policy: equal scanner time for every table with keys in flight** (start-time fair queueing
//! over segment steps). Each table has a virtual clock, the scanner time its steps took; among
//! the tables waiting for the scanner the one with the smallest clock steps next (ties: first
//! come). A table that was idle, or waits for the first time, starts at the clock of the step
//! last handed out, so it banks no credit for its idle time (it cannot then monopolize the
//! scanner), and is not behind either: it steps at the next boundary.
//!
//! A table with keys in flight keeps its place as it gives the scanner back
//! ([`Held::keep_claim`]): it is weighed at the next grant beside the tables already waiting.
//! Without that, a busy table asking again only after the scanner was handed on would always
//! find the quiet one already granted, and the two would alternate step for step whatever
//! their clocks (a lone quiet query measured 9-12 ms under load against 1 ms idle on the CPU
//! that way, `docs/bench/tables.md`). The place is a [`Claim`]: dropped without being taken,
//! when the table's loop ends, blocks for jobs or unwinds, it is withdrawn, so the scanner is
//! never granted to a table that will not come for it. Grants are made only by a thread that
//! waits in [`ScanShare::take`] or [`Claim::take`].
//!
//! A step is not the unit of waiting, though: a busy table's segment grows with its keys in
//! flight (tens of milliseconds on a CPU at load), and a quiet query arriving at its start would
//! wait for all of it. So a step offers the scanner between pieces of its segment
//! ([`Held::pause_point`], called by `Rotation::step_pausing`; the CPU backend scans a segment
//! in pieces of about a quarter of a millisecond): when another table waits with a clock at or
//! below the stepping table's, counting the time held so far, the step is accounted up to there
//! and pauses in its place; it goes on, under the same epoch state, when granted again. The
//! CUDA backend's segment is one piece of device work and does not pause.
//!
//! What it promises: while two tables have keys in flight each gets half the scanner's time,
//! whatever their segment lengths (a busy table of long segments does not starve a quiet table
//! of short ones, nor the reverse). A lone query on a quiet table waits for the piece (CPU) or
//! segment (GPU) that runs when it arrives; its table then starts at that step's clock, so it
//! steps ahead of the busy table for as much scanner time as the busy step had used: a turn no
//! longer than that runs through whole, and the query is answered within one busy piece or
//! segment plus its own idle turn. A longer turn shares the scanner half and half after that,
//! taking at most about twice its idle turn plus one busy piece or segment. A worker with one
//! table never waits here.
//!
//! [`Fairness`] is the policy as a synchronous state machine (unit-tested without threads or
//! clocks); [`ScanShare`] wraps it in a lock and a condition variable for the rotation threads.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The scanner-time accounts of a worker's tables, and who waits for the scanner.
#[derive(Debug, Default)]
pub struct Fairness {
    /// Each table's virtual clock: the scanner time its steps used, raised on arrival.
    clocks: Vec<Duration>,
    /// Each waiting table's arrival number (first come, first served among equal clocks).
    waiting: Vec<Option<u64>>,
    /// The table the scanner is granted to, from its grant to its [`Fairness::done`].
    holder: Option<usize>,
    /// The clock of the step handed out last: where a table coming back from idle starts.
    now: Duration,
    arrivals: u64,
}

impl Fairness {
    /// Accounts for `tables` tables, numbered `0..tables`.
    pub fn new(tables: usize) -> Fairness {
        Fairness {
            clocks: vec![Duration::ZERO; tables],
            waiting: vec![None; tables],
            ..Fairness::default()
        }
    }

    /// Table `t` asks for the scanner: it waits from now on, its clock raised to the current
    /// one if it was behind (no credit for idle time). Asking again while waiting (or granted)
    /// keeps its place.
    pub fn arrive(&mut self, t: usize) {
        if self.waiting[t].is_some() || self.holder == Some(t) {
            return;
        }
        self.clocks[t] = self.clocks[t].max(self.now);
        self.arrivals += 1;
        self.waiting[t] = Some(self.arrivals);
    }

    /// The table that steps next, if the scanner is free and someone waits: the smallest clock,
    /// then the earliest arrival. It holds the scanner until [`Fairness::done`].
    pub fn grant(&mut self) -> Option<usize> {
        if self.holder.is_some() {
            return None;
        }
        let t = (0..self.clocks.len())
            .filter_map(|t| self.waiting[t].map(|arrival| (self.clocks[t], arrival, t)))
            .min()?
            .2;
        self.waiting[t] = None;
        self.holder = Some(t);
        self.now = self.clocks[t];
        Some(t)
    }

    /// The table the scanner is granted to, if any.
    pub fn holder(&self) -> Option<usize> {
        self.holder
    }

    /// Table `t` gives the scanner back after a step that took `used`; `again`: it still has
    /// keys in flight and waits for its next step at once, so that the next grant weighs it
    /// (a table that asked only after the scanner was handed on would lose every turn to a
    /// table that was already waiting). Such a claim stands until the table steps or
    /// [`Fairness::withdraw`]s it.
    pub fn done(&mut self, t: usize, used: Duration, again: bool) {
        self.clocks[t] += used;
        self.holder = None;
        if again {
            self.arrive(t);
        }
    }

    /// Table `t` no longer waits: it leaves the queue, and a grant it was handed and has not
    /// used goes back (a claim kept by [`Fairness::done`] whose table then stopped, or found
    /// nothing to step, must not hold the scanner for ever).
    pub fn withdraw(&mut self, t: usize) {
        self.waiting[t] = None;
        if self.holder == Some(t) {
            self.holder = None;
        }
    }

    /// Whether table `t`, holding the scanner for `used` so far, would not be granted it again
    /// if it gave it back now and waited: another waiting table has a clock at or below `t`'s
    /// with `used` counted (a tie goes to the table that waited first, the other one).
    pub fn would_yield(&self, t: usize, used: Duration) -> bool {
        let mine = self.clocks[t] + used;
        (0..self.clocks.len())
            .any(|u| u != t && self.waiting[u].is_some() && self.clocks[u] <= mine)
    }

    /// Whether table `t` waits for the scanner.
    pub fn is_waiting(&self, t: usize) -> bool {
        self.waiting[t].is_some()
    }
}

/// The scanner of one worker, shared by its tables' rotation threads under [`Fairness`].
#[derive(Debug)]
pub struct ScanShare {
    state: Mutex<Fairness>,
    turn: Condvar,
}

/// The scanner, held by one table for one step; given back (with the time it was held) when
/// dropped, or by [`Held::keep_claim`] keeping the table's place for its next step.
#[must_use = "the scanner is given back when this is dropped"]
pub struct Held<'a> {
    share: &'a ScanShare,
    table: usize,
    since: Instant,
    /// Whether the table waits for its next step at once ([`Fairness::done`]).
    again: bool,
}

impl<'a> Held<'a> {
    /// Gives the scanner back for a table with keys in flight: it waits for its next step at
    /// once, weighed by the next grant, and takes it with [`Claim::take`]. Dropping the claim
    /// instead withdraws it, so a table whose loop ends or blocks holds nothing.
    pub fn keep_claim(mut self) -> Claim<'a> {
        self.again = true;
        Claim {
            share: self.share,
            table: self.table,
            taken: false,
        }
        // `self` drops here: the step's time is accounted and the table waits again.
    }
}

impl Held<'_> {
    /// A pause point inside a step ([`pirq_scan::rotation::Rotation::step_pausing`]): when
    /// another table would step before this one ([`Fairness::would_yield`]), the time held so
    /// far is accounted, the table waits in its place, and this returns once it holds the
    /// scanner again; otherwise at once, for the price of one lock.
    pub fn pause_point(&mut self) {
        let mut state = self.share.lock();
        let used = self.since.elapsed();
        if !state.would_yield(self.table, used) {
            return;
        }
        state.done(self.table, used, true);
        drop(state);
        self.share.turn.notify_all();
        self.share.block_until_granted(self.table);
        self.since = Instant::now();
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut state = self.share.lock();
        state.done(self.table, self.since.elapsed(), self.again);
        drop(state);
        self.share.turn.notify_all();
    }
}

/// A table's place among those waiting for the scanner, kept from its last step
/// ([`Held::keep_claim`]); withdrawn if dropped without [`Claim::take`].
#[must_use = "a claim is withdrawn when dropped"]
pub struct Claim<'a> {
    share: &'a ScanShare,
    table: usize,
    taken: bool,
}

impl<'a> Claim<'a> {
    /// Blocks until the table may step, in the place the claim kept.
    pub fn take(mut self) -> Held<'a> {
        self.taken = true;
        self.share.wait_turn(self.table)
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        let mut state = self.share.lock();
        state.withdraw(self.table);
        drop(state);
        self.share.turn.notify_all();
    }
}

impl ScanShare {
    pub fn new(tables: usize) -> ScanShare {
        ScanShare {
            state: Mutex::new(Fairness::new(tables)),
            turn: Condvar::new(),
        }
    }

    /// Whether several tables share the scanner (a worker of one table steps its segments
    /// whole, with no pause points).
    pub fn is_shared(&self) -> bool {
        self.lock().clocks.len() > 1
    }

    /// Blocks until table `t` may step (at once for a worker of one table).
    pub fn take(&self, t: usize) -> Held<'_> {
        self.lock().arrive(t);
        self.wait_turn(t)
    }

    /// Blocks until table `t`, waiting, is granted the scanner, and hands it over.
    fn wait_turn(&self, t: usize) -> Held<'_> {
        self.block_until_granted(t);
        Held {
            share: self,
            table: t,
            since: Instant::now(),
            again: false,
        }
    }

    /// Blocks until table `t`, waiting, is granted the scanner. The grant is made here, by a
    /// waiting thread, and never on behalf of a table that is not waiting.
    fn block_until_granted(&self, t: usize) {
        let mut state = self.lock();
        while state.holder() != Some(t) {
            if state.holder().is_none() && state.grant().is_some() {
                // Someone else's turn may have come: wake them.
                self.turn.notify_all();
                continue;
            }
            state = self.turn.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Fairness> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Runs `steps` grants with both tables always waiting again; table `t`'s steps take
    /// `lengths[t]`. Returns which table stepped, in order.
    fn saturated(lengths: [Duration; 2], steps: usize) -> Vec<usize> {
        let mut f = Fairness::new(2);
        f.arrive(0);
        f.arrive(1);
        let mut order = Vec::new();
        for _ in 0..steps {
            let t = f.grant().expect("someone waits");
            order.push(t);
            f.done(t, lengths[t], true);
        }
        order
    }

    #[test]
    fn equal_segments_alternate() {
        assert_eq!(saturated([MS, MS], 6), [0, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn short_segments_step_more_often_for_the_same_time() {
        // Table 1's segments are 4x table 0's: table 0 steps four times per step of table 1.
        let order = saturated([MS, 4 * MS], 50);
        let ones = order.iter().filter(|&&t| t == 1).count();
        let zeros = order.len() - ones;
        assert_eq!(zeros, 4 * ones, "{order:?}");
    }

    #[test]
    fn the_scanner_is_held_by_one_table_at_a_time() {
        let mut f = Fairness::new(2);
        f.arrive(0);
        f.arrive(1);
        assert_eq!(f.grant(), Some(0));
        assert_eq!(f.grant(), None, "table 0 holds it");
        assert!(f.is_waiting(1));
        f.done(0, MS, false);
        assert_eq!(f.grant(), Some(1));
    }

    #[test]
    fn a_table_back_from_idle_banks_no_credit_and_waits_no_more_than_a_step() {
        let mut f = Fairness::new(2);
        // Table 0 alone for 100 steps of 10 ms: a second of scanner time.
        for _ in 0..100 {
            f.arrive(0);
            assert_eq!(f.grant(), Some(0));
            f.done(0, 10 * MS, false);
        }
        // Table 1 arrives while table 0 steps: it steps right after that step...
        f.arrive(0);
        assert_eq!(f.grant(), Some(0));
        f.arrive(1);
        f.done(0, 10 * MS, true);
        assert_eq!(f.grant(), Some(1));
        // ...and then the two share the scanner by time, table 1 not owed a second of it.
        f.done(1, 10 * MS, true);
        let mut order = Vec::new();
        for _ in 0..6 {
            let t = f.grant().unwrap();
            order.push(t);
            f.done(t, 10 * MS, true);
        }
        assert_eq!(order, [0, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn a_quiet_table_s_short_turn_runs_through_between_two_steps_of_a_busy_table() {
        // Table 0 is busy with 10 ms steps; table 1 gets a query whose turn is 4 steps of 1 ms.
        let mut f = Fairness::new(2);
        f.arrive(0);
        assert_eq!(f.grant(), Some(0));
        f.arrive(1); // the query arrives during table 0's step
        f.done(0, 10 * MS, true);
        let mut order = Vec::new();
        for step in 0..4 {
            let t = f.grant().unwrap();
            order.push(t);
            let (used, again) = if t == 1 {
                (MS, step < 3)
            } else {
                (10 * MS, true)
            };
            f.done(t, used, again);
        }
        // Its whole turn, back to back: it waited for one of table 0's steps, no more.
        assert_eq!(order, [1, 1, 1, 1]);
        assert_eq!(f.grant(), Some(0));
    }

    #[test]
    fn a_withdrawn_claim_gives_back_a_grant_it_did_not_use() {
        let mut f = Fairness::new(2);
        f.arrive(1);
        assert_eq!(f.grant(), Some(1));
        f.arrive(0);
        f.done(1, 10 * MS, true);
        assert_eq!(f.grant(), Some(0));
        // Table 0 keeps its place with the smaller clock: the next grant is its own...
        f.done(0, MS, true);
        assert_eq!(f.grant(), Some(0));
        // ...but its loop ends before it steps: the grant goes back and table 1 steps.
        f.withdraw(0);
        assert!(!f.is_waiting(0));
        assert_eq!(f.grant(), Some(1));
        f.done(1, MS, false);
        assert_eq!(f.grant(), None, "nobody waits");
    }

    #[test]
    fn a_claim_kept_and_taken_again_keeps_the_table_s_place() {
        let mut f = Fairness::new(2);
        f.arrive(0);
        assert_eq!(f.grant(), Some(0));
        f.done(0, MS, true);
        // Asking again while waiting (or granted) changes nothing.
        f.arrive(0);
        assert_eq!(f.grant(), Some(0));
        f.arrive(0);
        assert!(!f.is_waiting(0), "a granted table does not wait again");
        assert_eq!(f.holder(), Some(0));
    }

    /// Runs `f` on a thread and fails (rather than hang the suite) if it does not end within a
    /// minute: what these tests look for is a deadlock, not a time.
    fn ends<F: FnOnce() + Send + 'static>(what: &str, f: F) {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            f();
            let _ = tx.send(());
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(()) => thread.join().expect("the thread did not panic"),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                panic!("{what}: {:?}", thread.join().err())
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("{what}: deadlocked"),
        }
    }

    #[test]
    fn threads_take_turns_and_every_table_gets_its_steps() {
        // Each table keeps its place between steps and its last claim is dropped unused, as a
        // rotation thread's is when its loop ends: the others go on to their last step.
        ends("three tables keeping claims", || {
            use std::sync::Arc;
            let share = Arc::new(ScanShare::new(3));
            let holders = Arc::new(Mutex::new(0usize));
            let steps = Arc::new(Mutex::new([0usize; 3]));
            let threads: Vec<_> = (0..3)
                .map(|t| {
                    let (share, holders, steps) = (share.clone(), holders.clone(), steps.clone());
                    std::thread::spawn(move || {
                        let mut claim: Option<Claim> = None;
                        for _ in 0..200 + 50 * t {
                            let held = match claim.take() {
                                Some(c) => c.take(),
                                None => share.take(t),
                            };
                            let mut h = holders.lock().unwrap();
                            *h += 1;
                            assert_eq!(*h, 1, "two tables hold the scanner");
                            *h -= 1;
                            drop(h);
                            steps.lock().unwrap()[t] += 1;
                            claim = Some(held.keep_claim());
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().expect("no table's thread failed");
            }
            assert_eq!(*steps.lock().unwrap(), [200, 250, 300]);
        });
    }

    #[test]
    fn a_table_that_blocks_for_jobs_does_not_keep_the_scanner_from_another() {
        ends("a claim dropped while another table waits", || {
            use std::sync::Arc;
            let share = Arc::new(ScanShare::new(2));
            // Table 0 steps and keeps its place; table 1 then waits on a thread of its own.
            let claim = share.take(0).keep_claim();
            let other = {
                let share = share.clone();
                std::thread::spawn(move || drop(share.take(1)))
            };
            // Table 0 has nothing more to step: it drops its claim (as the rotation loop does
            // before blocking for jobs), and table 1 gets the scanner.
            drop(claim);
            other.join().expect("table 1 stepped");
            // Both gone: a table asking now steps at once.
            drop(share.take(0));
        });
    }

    #[test]
    fn a_step_yields_at_a_pause_point_only_to_a_table_that_would_step_first() {
        let mut f = Fairness::new(2);
        f.arrive(0);
        assert_eq!(f.grant(), Some(0));
        assert!(!f.would_yield(0, 5 * MS), "nobody waits");
        // Table 1 arrives during table 0's step, at the clock that step started from.
        f.arrive(1);
        assert!(f.would_yield(0, MS));
        // Table 1 far ahead (it has had its share): table 0 goes on.
        let mut f = Fairness::new(2);
        f.arrive(1);
        assert_eq!(f.grant(), Some(1));
        f.arrive(0);
        f.done(1, 20 * MS, true);
        assert_eq!(f.grant(), Some(0));
        assert!(!f.would_yield(0, 5 * MS));
        assert!(
            f.would_yield(0, 20 * MS),
            "a tie goes to the table that waited"
        );
    }

    #[test]
    fn a_quiet_table_steps_at_a_busy_table_s_pause_point() {
        ends("a pause point with another table waiting", || {
            use std::sync::atomic::{AtomicBool, Ordering};
            use std::sync::Arc;
            let share = Arc::new(ScanShare::new(2));
            let quiet_stepped = Arc::new(AtomicBool::new(false));
            let mut busy = share.take(0);
            let quiet = {
                let (share, stepped) = (share.clone(), quiet_stepped.clone());
                std::thread::spawn(move || {
                    let held = share.take(1);
                    stepped.store(true, Ordering::SeqCst);
                    drop(held);
                })
            };
            // Table 0's step reaches pause points until the quiet table has stepped in one (it
            // cannot step while table 0 holds the scanner outside them).
            while !quiet_stepped.load(Ordering::SeqCst) {
                busy.pause_point();
            }
            quiet.join().expect("the quiet table stepped");
            // Table 0 holds the scanner again: its pause point is free now nobody waits.
            assert_eq!(share.lock().holder(), Some(0));
            busy.pause_point();
            drop(busy);
        });
    }
}
