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
//! What it promises: while two tables have keys in flight each gets half the scanner's time,
//! whatever their segment lengths (a busy table of long segments does not starve a quiet table
//! of short ones, nor the reverse), so a lone query on a quiet table waits at most for the
//! segment that runs when it arrives and then shares the scanner half and half: its turn
//! takes at most about twice its idle turn plus one of the busy table's segments. A worker
//! with one table never waits here.
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
    /// Whether a table holds the scanner now.
    busy: bool,
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
    /// one if it was behind (no credit for idle time).
    pub fn arrive(&mut self, t: usize) {
        self.clocks[t] = self.clocks[t].max(self.now);
        self.arrivals += 1;
        self.waiting[t] = Some(self.arrivals);
    }

    /// The table that steps next, if the scanner is free and someone waits: the smallest clock,
    /// then the earliest arrival. It holds the scanner until [`Fairness::done`].
    pub fn grant(&mut self) -> Option<usize> {
        if self.busy {
            return None;
        }
        let t = (0..self.clocks.len())
            .filter_map(|t| self.waiting[t].map(|arrival| (self.clocks[t], arrival, t)))
            .min()?
            .2;
        self.waiting[t] = None;
        self.busy = true;
        self.now = self.clocks[t];
        Some(t)
    }

    /// Table `t` gives the scanner back after a step that took `used`.
    pub fn done(&mut self, t: usize, used: Duration) {
        self.clocks[t] += used;
        self.busy = false;
    }

    /// Whether table `t` waits for the scanner.
    pub fn is_waiting(&self, t: usize) -> bool {
        self.waiting[t].is_some()
    }
}

/// The scanner of one worker, shared by its tables' rotation threads under [`Fairness`].
#[derive(Debug)]
pub struct ScanShare {
    state: Mutex<(Fairness, Option<usize>)>,
    turn: Condvar,
}

/// The scanner, held by one table for one step; given back (with the time it was held) when
/// dropped.
pub struct Held<'a> {
    share: &'a ScanShare,
    table: usize,
    since: Instant,
}

impl ScanShare {
    pub fn new(tables: usize) -> ScanShare {
        ScanShare {
            state: Mutex::new((Fairness::new(tables), None)),
            turn: Condvar::new(),
        }
    }

    /// Blocks until table `t` may step (at once for a worker of one table).
    pub fn take(&self, t: usize) -> Held<'_> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.0.arrive(t);
        loop {
            if state.1.is_none() {
                state.1 = state.0.grant();
            }
            if state.1 == Some(t) {
                break;
            }
            state = self.turn.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        Held {
            share: self,
            table: t,
            since: Instant::now(),
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut state = self.share.state.lock().unwrap_or_else(|e| e.into_inner());
        state.0.done(self.table, self.since.elapsed());
        state.1 = state.0.grant();
        drop(state);
        self.share.turn.notify_all();
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
            f.done(t, lengths[t]);
            f.arrive(t);
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
        f.done(0, MS);
        assert_eq!(f.grant(), Some(1));
    }

    #[test]
    fn a_table_back_from_idle_banks_no_credit_and_waits_no_more_than_a_step() {
        let mut f = Fairness::new(2);
        // Table 0 alone for 100 steps of 10 ms: a second of scanner time.
        for _ in 0..100 {
            f.arrive(0);
            assert_eq!(f.grant(), Some(0));
            f.done(0, 10 * MS);
        }
        // Table 1 arrives while table 0 steps: it steps right after that step...
        f.arrive(0);
        assert_eq!(f.grant(), Some(0));
        f.arrive(1);
        f.done(0, 10 * MS);
        f.arrive(0);
        assert_eq!(f.grant(), Some(1));
        // ...and then the two share the scanner by time, table 1 not owed a second of it.
        f.done(1, 10 * MS);
        f.arrive(1);
        let mut order = Vec::new();
        for _ in 0..6 {
            let t = f.grant().unwrap();
            order.push(t);
            f.done(t, 10 * MS);
            f.arrive(t);
        }
        assert_eq!(order, [0, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn threads_take_turns_and_every_table_gets_its_steps() {
        use std::sync::Arc;
        let share = Arc::new(ScanShare::new(3));
        let holders = Arc::new(Mutex::new(0usize));
        let threads: Vec<_> = (0..3)
            .map(|t| {
                let (share, holders) = (share.clone(), holders.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let _held = share.take(t);
                        let mut h = holders.lock().unwrap();
                        *h += 1;
                        assert_eq!(*h, 1, "two tables hold the scanner");
                        *h -= 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no table's thread failed");
        }
    }
}
