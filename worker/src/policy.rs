//! When a window closes and whether it may scan beside another: chosen from what a pass costs.
//!
//! A pass reads the whole database once, so below some batch size Q* (the *knee*) its time is
//! the memory floor whatever the number of keys; above it, time grows with the keys. Two
//! consequences drive the windows:
//!
//! - **Below the knee, one pass at a time.** Two windows scanning at once each read the whole
//!   database, so each pass takes about twice as long and answers no more keys than one pass of
//!   both windows' keys would have. So a window below the knee never starts while another scan
//!   runs: it keeps taking jobs until the running scan ends, and then every job waiting joins it.
//!   (Measured on an H100 at 64 GiB with two windows at once: 1,914 keys/s with 128 keys in flight
//!   against ~4,200 possible in one pass.)
//! - **At or above the knee a window may start beside a running scan**: its keys cost tensor
//!   time, not another read of the database, so the overlap hides the pass's upload, expansion
//!   and download without wasting a pass. Likewise below the knee when the part of a pass that is
//!   not the scan is large enough that overlapping it pays (small databases).
//!
//! A window below the knee waits a little for more jobs (half the floor, counted from
//! when the scanner became free or from its first job, whichever is later): keys that arrive
//! within that time would otherwise wait a whole pass, and the answers of the pass that just
//! ended bring their clients' next jobs a few milliseconds later. (Counted from the first job
//! only, 64 closed-loop clients at 64 GiB split into two groups that took turns, 65 keys a pass.)
//! The wait ends early once the window holds the jobs that waited through the last scan plus as
//! many keys as that scan answered (a closed loop's clients are then all back), and is extended
//! to a whole one-key pass while the jobs coming in are that burst of clients coming back
//! ([`Close::gather_max`]). At idle this
//! adds at most half a pass to the latency (measured at 64 GiB with 64 closed-loop clients: a
//! quarter of the floor still let stragglers miss their pass, 116 of 128 keys a pass).
//!
//! The cost comes from [`pirq_scan::Scanner::measure_pass_cost`] at start-up (the CUDA
//! backend times a one-key pass and a full one); a backend that does not measure keeps the
//! fixed behaviour of the flags: up to `slots` windows at once, each closing when full or when
//! its first job has waited `--max-wait-ms`.

use std::time::{Duration, Instant};

use pirq_scan::PassCost;

/// A pass whose non-scan part (upload, expansion, download, copy-out, launch gaps) is at least
/// this share of the whole pays for overlapping with another pass even below the knee.
const OVERLAP_PAYS_SHARE: f64 = 0.2;

/// A window below the knee waits at most a one-key pass divided by this for more jobs...
const GATHER_DIVISOR: u32 = 2;

/// ...and up to a whole one-key pass while the jobs coming in are the burst of the last pass's
/// clients (see [`Close::gather_max`]).
const BURST_GATHER_DIVISOR: u32 = 1;

/// How windows are formed; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowPolicy {
    /// Most keys in one window.
    pub max_keys: usize,
    /// Most windows scanning at once (the CUDA workspaces; 1 on the CPU backend).
    pub slots: usize,
    /// A window with at least this many keys closes at once and may scan beside another.
    pub knee: usize,
    /// How long a window below the knee waits for more jobs after its first one arrived.
    pub gather: Duration,
    /// How long it may wait while the jobs coming in are the last pass's clients coming back.
    pub gather_max: Duration,
    /// Whether a window below the knee may start while another scan runs.
    pub overlap_below_knee: bool,
    /// Derived from a measured pass cost (else the flags' fixed behaviour: the gather time
    /// counts from a window's first job only).
    pub measured: bool,
}

/// How the next window is to be closed, given the scans running now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Close {
    /// Stop waiting for more jobs once the window holds this many keys (buffered jobs are
    /// always taken, up to the window's maximum).
    pub enough: usize,
    /// Longest the window waits for more jobs, counted from its first job's arrival or, when
    /// `gather_from` is set, from the later of that and `gather_from`...
    pub gather: Duration,
    /// ...or this long, when by then the keys that came back since the last scan ended are a
    /// burst: at least half of `expect_back` and at least twice the keys that arrived during
    /// the scan. A closed loop's clients then are coming back, and the few not back yet would
    /// otherwise wait a whole pass and fall out of step with the rest (measured at 64 GiB with
    /// 64 closed-loop clients: 3,599 keys/s with a whole pass against 3,398 with half, p99 41
    /// against 47–51 ms). Queries that arrive on their own come at an even rate, so they never
    /// look like a burst and wait only `gather`.
    pub gather_max: Duration,
    /// ...the moment the scanner last became free (the end of the last scan);
    pub gather_from: Option<Instant>,
    /// and, when set, not before the running scans have ended (unless `enough` is reached;
    /// the gather time then counts from their end).
    pub until_idle: bool,
    /// Keys the last pass answered (0: no expectation). Their clients' next jobs are expected
    /// back: once the window holds the keys that waited through the scan plus this many, it
    /// closes without waiting out the gather time.
    pub expect_back: usize,
}

impl WindowPolicy {
    /// The flags' fixed behaviour: up to `slots` windows at once, each closing when full or
    /// after `max_wait`.
    pub fn fixed(max_keys: usize, slots: usize, max_wait: Duration) -> WindowPolicy {
        WindowPolicy {
            max_keys: max_keys.max(1),
            slots: slots.max(1),
            knee: max_keys.max(1),
            gather: max_wait,
            gather_max: max_wait,
            overlap_below_knee: true,
            measured: false,
        }
    }

    /// The policy for a scanner whose measured pass cost is `cost`; `max_wait` (the flag, when
    /// given) replaces the derived gather time.
    pub fn from_cost(
        cost: &PassCost,
        max_keys: usize,
        slots: usize,
        max_wait: Option<Duration>,
    ) -> WindowPolicy {
        let max_keys = max_keys.max(1);
        let knee = cost.knee(max_keys);
        let (gather, gather_max) = match max_wait {
            Some(wait) => (wait, wait),
            None if knee > 1 => (
                cost.one_key / GATHER_DIVISOR,
                cost.one_key / BURST_GATHER_DIVISOR,
            ),
            None => (Duration::ZERO, Duration::ZERO),
        };
        WindowPolicy {
            max_keys,
            slots: slots.max(1),
            knee,
            gather,
            gather_max,
            overlap_below_knee: cost.non_scan_share() >= OVERLAP_PAYS_SHARE,
            measured: true,
        }
    }

    /// How to close the next window while `running` scans are in flight; the last scan ended
    /// at `last_end`. The gather time counts from when the scanner is free: jobs that waited
    /// through a scan must not close the window before the jobs that scan answered are back
    /// (clients in a closed loop would otherwise split into groups that alternate passes); once
    /// they are back the window need not wait longer.
    /// `last_keys` is what the last pass answered.
    pub fn close(&self, running: usize, last_end: Instant, last_keys: usize) -> Close {
        Close {
            enough: self.knee.min(self.max_keys),
            gather: self.gather,
            gather_max: self.gather_max,
            gather_from: self.measured.then_some(last_end),
            until_idle: running > 0 && !self.overlap_below_knee,
            expect_back: if self.measured { last_keys } else { 0 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: f64) -> Duration {
        Duration::from_secs_f64(x / 1e3)
    }

    /// The H100 at 64 GiB with the wgmma kernel (docs/bench/gpu-scan.md): 1 key 22.9 ms,
    /// 256 keys 32 ms, scan ~97 % of a pass.
    fn big() -> PassCost {
        PassCost {
            one_key: ms(22.9),
            full: ms(32.0),
            full_keys: 256,
            full_scan: ms(31.0),
        }
    }

    #[test]
    fn memory_bound_windows_never_scan_beside_another() {
        let end = Instant::now();
        let p = WindowPolicy::from_cost(&big(), 256, 2, None);
        // 22.9 / (32 / 256) = 183.2 -> 184 keys.
        assert_eq!(p.knee, 184);
        assert!(!p.overlap_below_knee);
        assert_eq!(p.gather, ms(22.9) / 2);
        // Scanner idle: the window starts when it has the knee or its gather time is over.
        // The gather time counts from the end of the last scan.
        assert_eq!(
            p.close(0, end, 100),
            Close {
                enough: 184,
                gather: ms(22.9) / 2,
                gather_max: ms(22.9),
                gather_from: Some(end),
                until_idle: false,
                expect_back: 100
            }
        );
        // A scan running: a window below the knee waits for it to end.
        assert!(p.close(1, end, 0).until_idle);
        assert_eq!(p.close(1, end, 0).enough, 184);
    }

    #[test]
    fn a_full_pass_hardly_slower_than_one_key_means_every_batch_is_memory_bound() {
        let cost = PassCost {
            one_key: ms(22.9),
            full: ms(25.0),
            full_keys: 128,
            full_scan: ms(24.5),
        };
        let p = WindowPolicy::from_cost(&cost, 128, 2, None);
        assert_eq!(p.knee, 128);
        assert!(p.close(1, Instant::now(), 0).until_idle);
    }

    #[test]
    fn small_databases_overlap_where_the_non_scan_part_is_large() {
        // A tiny database: launches and copies are most of a pass.
        let cost = PassCost {
            one_key: ms(0.20),
            full: ms(0.60),
            full_keys: 256,
            full_scan: ms(0.25),
        };
        let p = WindowPolicy::from_cost(&cost, 256, 2, None);
        assert!(p.overlap_below_knee);
        assert!(!p.close(1, Instant::now(), 0).until_idle);
        // 8 GiB on the H100 (wgmma, pirq-gpu-bench 2026-11-23): 12 % of a pass elsewhere.
        let cost = PassCost {
            one_key: ms(3.46),
            full: ms(7.64),
            full_keys: 512,
            full_scan: ms(6.73),
        };
        let p = WindowPolicy::from_cost(&cost, 512, 2, None);
        assert!(!p.overlap_below_knee);
        assert_eq!(p.knee, 232);
    }

    #[test]
    fn flags_override_and_fixed_keeps_the_old_behaviour() {
        let p = WindowPolicy::from_cost(&big(), 256, 2, Some(ms(2.0)));
        assert_eq!(p.gather, ms(2.0));
        assert_eq!(p.gather_max, ms(2.0), "a given wait is never extended");
        let f = WindowPolicy::fixed(256, 2, Duration::ZERO);
        assert_eq!(
            f.close(1, Instant::now(), 64),
            Close {
                enough: 256,
                gather: Duration::ZERO,
                gather_max: Duration::ZERO,
                gather_from: None,
                until_idle: false,
                expect_back: 0
            }
        );
    }

    #[test]
    fn the_knee_never_leaves_the_batch_range() {
        let fast = PassCost {
            one_key: ms(1.0),
            full: ms(400.0),
            full_keys: 256,
            full_scan: ms(399.0),
        };
        assert_eq!(fast.knee(256), 1);
        let odd = PassCost {
            one_key: ms(0.0),
            full: ms(1.0),
            full_keys: 1,
            full_scan: ms(1.0),
        };
        assert_eq!(odd.knee(64), 64);
        let p = WindowPolicy::from_cost(&fast, 256, 2, None);
        assert_eq!(
            p.gather,
            Duration::ZERO,
            "no memory-bound range: no waiting"
        );
    }
}
