//! Caps sized to the host: how many connections and waiters a gateway holds, and what it says
//! when a cap refuses someone.
//!
//! Fixed defaults (1,024 connections, 512 waiters) throttled legitimate load: 2,048 closed-loop
//! clients of two real parties got 13 s tails from them alone. So by default the caps follow
//! what the host can carry:
//!
//! - **Connections**: the soft open-files limit is raised to the hard one at start (the usual
//!   1,024 soft limit is a default for interactive shells, not a budget), and the cap is what
//!   that leaves after [`SPARE_DESCRIPTORS`] for Redis connections, the listeners and files.
//!   An explicit `--max-connections` is kept when the limit allows it, lowered (with one
//!   warning) when it does not: a cap above the limit would turn into failed accepts.
//! - **Waiters** (long-polls, event streams and `Prefer: wait` posts): [`WAITER_BYTES`] of the
//!   memory this process may use each, and never fewer than [`MIN_WAITERS`]: a waiter is a
//!   connection and a small task, so memory, not a round number, is what bounds them.
//!
//! A refusal by a cap is a 503 with `Retry-After` (the clients retry with back-off), counted in
//! `pirq_gateway_refusals_total{cap}`, and logged once a minute with the count since the last
//! line, never once a request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Descriptors kept for Redis connections, the listeners and files beyond the client cap.
pub const SPARE_DESCRIPTORS: u64 = 256;
/// The fewest waiters a gateway takes whatever the host (the acceptance: 2,048 waiting
/// clients never refused on defaults, with room to spare).
pub const MIN_WAITERS: u32 = 8_192;
/// Memory budgeted per waiter when sizing `--max-waiters` from the host: its connection's
/// buffers (64 KiB read buffer at most, see [`crate::server::READ_BUFFER_BYTES`]), its task,
/// and a share of an answer in flight.
pub const WAITER_BYTES: u64 = 256 << 10;
/// The share of the process's memory the waiters may take together.
const WAITER_MEMORY_SHARE: u64 = 4;
/// How often a cap's refusals are logged at most.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// The open-files limit after [`raise_descriptor_limit`]: `(soft, hard)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Descriptors {
    pub soft: u64,
    pub hard: u64,
}

/// Raises the soft open-files limit to the hard limit (as far as the kernel allows) and returns
/// the limits now in force; `None` when they cannot be read.
// `rlim_t` is `u64` on Linux but not everywhere.
#[allow(clippy::unnecessary_cast)]
pub fn raise_descriptor_limit() -> Option<Descriptors> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    Some(Descriptors {
        soft: lim.rlim_cur as u64,
        hard: lim.rlim_max as u64,
    })
}

/// The connection cap: `explicit` (`--max-connections`) when the descriptors allow it, else what
/// they allow. `RLIM_INFINITY` counts as "no limit" and leaves the cap at `u32::MAX`.
pub fn connections(explicit: Option<u32>, descriptors: Option<Descriptors>) -> u32 {
    let fits = match descriptors {
        Some(d) => d
            .soft
            .saturating_sub(SPARE_DESCRIPTORS)
            .clamp(1, u32::MAX as u64) as u32,
        None => explicit.unwrap_or(1024),
    };
    match explicit {
        Some(max) if max > fits => {
            tracing::warn!(
                max_connections = max,
                descriptors = descriptors.map(|d| d.soft),
                "the open-files limit (ulimit -n, hard) is too low for --max-connections; capping at {fits}"
            );
            fits
        }
        Some(max) => max,
        None => fits,
    }
}

/// The waiter cap: `explicit` (`--max-waiters`), else [`WAITER_BYTES`] each of a quarter of
/// `memory` bytes, never below [`MIN_WAITERS`].
pub fn waiters(explicit: Option<u32>, memory: Option<u64>) -> u32 {
    if let Some(max) = explicit {
        return max;
    }
    let by_memory = memory.unwrap_or(0) / WAITER_MEMORY_SHARE / WAITER_BYTES;
    by_memory.clamp(MIN_WAITERS as u64, u32::MAX as u64) as u32
}

/// The memory this process may use: the cgroup's limit where one is set (containers), else the
/// machine's memory.
pub fn memory_bytes() -> Option<u64> {
    let machine = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| meminfo_total(&s));
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    match (machine, cgroup) {
        (Some(m), Some(c)) => Some(m.min(c)),
        (m, c) => m.or(c),
    }
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn meminfo_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Which cap refused a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cap {
    /// `--max-connections`: every connection busy.
    Connections,
    /// `--max-waiters`: every waiter slot taken.
    Waiters,
}

impl Cap {
    pub fn label(self) -> &'static str {
        match self {
            Cap::Connections => "connections",
            Cap::Waiters => "waiters",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Cap::Connections => "--max-connections",
            Cap::Waiters => "--max-waiters",
        }
    }

    fn log(self) -> &'static RefusalLog {
        static CONNECTIONS: RefusalLog = RefusalLog::new();
        static WAITERS: RefusalLog = RefusalLog::new();
        match self {
            Cap::Connections => &CONNECTIONS,
            Cap::Waiters => &WAITERS,
        }
    }
}

/// Every cap's refusal counter at zero, so that a party that never refused shows it (and
/// rates over it are defined). Call once, after the recorder is installed.
pub fn register_refusals() {
    for cap in [Cap::Connections, Cap::Waiters] {
        metrics::counter!(pirq_shared::metrics::GATEWAY_REFUSALS, "cap" => cap.label()).absolute(0);
    }
}

/// A cap refused a client: counted, and logged at most once a minute.
pub fn refused(cap: Cap) {
    metrics::counter!(pirq_shared::metrics::GATEWAY_REFUSALS, "cap" => cap.label()).increment(1);
    if let Some(count) = cap.log().note(Instant::now()) {
        tracing::warn!(
            cap = cap.label(),
            refused = count,
            "{count} requests refused by {} since the last such line (at most a minute ago; 503 \
             with Retry-After, or 202 at once for a Prefer: wait post); raise the cap or add \
             gateways",
            cap.flag()
        );
    }
}

/// Refusals counted between two log lines.
struct RefusalLog {
    since_line: AtomicU64,
    last_line: Mutex<Option<Instant>>,
}

impl RefusalLog {
    const fn new() -> RefusalLog {
        RefusalLog {
            since_line: AtomicU64::new(0),
            last_line: Mutex::new(None),
        }
    }

    /// Counts one refusal at `now`; `Some(count since the last line)` when a line is due.
    fn note(&self, now: Instant) -> Option<u64> {
        self.since_line.fetch_add(1, Ordering::Relaxed);
        let mut last = self.last_line.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|t| now.duration_since(t) < LOG_EVERY) {
            return None;
        }
        *last = Some(now);
        Some(self.since_line.swap(0, Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_cap_follows_the_descriptors_unless_given() {
        let d = Some(Descriptors {
            soft: 65_536,
            hard: 65_536,
        });
        assert_eq!(connections(None, d), 65_536 - SPARE_DESCRIPTORS as u32);
        assert_eq!(connections(Some(2_000), d), 2_000);
        let low = Some(Descriptors {
            soft: 1_024,
            hard: 1_024,
        });
        assert_eq!(
            connections(Some(4_096), low),
            1_024 - SPARE_DESCRIPTORS as u32
        );
        assert_eq!(connections(None, None), 1024);
        let unlimited = Some(Descriptors {
            soft: u64::MAX,
            hard: u64::MAX,
        });
        assert_eq!(connections(None, unlimited), u32::MAX);
    }

    #[test]
    fn waiters_follow_memory_and_never_drop_below_the_floor() {
        assert_eq!(waiters(Some(100), Some(1 << 40)), 100);
        assert_eq!(waiters(None, None), MIN_WAITERS);
        assert_eq!(waiters(None, Some(1 << 30)), MIN_WAITERS);
        // 128 GiB: a quarter of it in 256 KiB waiters.
        assert_eq!(waiters(None, Some(128 << 30)), 131_072);
    }

    #[test]
    fn meminfo_total_is_read_in_bytes() {
        let s = "MemTotal:       24000000 kB\nMemFree:        1 kB\n";
        assert_eq!(meminfo_total(s), Some(24_000_000 * 1024));
        assert_eq!(meminfo_total("nothing"), None);
    }

    #[test]
    fn refusals_are_logged_once_a_minute_with_their_count() {
        let log = RefusalLog::new();
        let t0 = Instant::now();
        assert_eq!(log.note(t0), Some(1));
        assert_eq!(log.note(t0 + Duration::from_secs(1)), None);
        assert_eq!(log.note(t0 + Duration::from_secs(30)), None);
        assert_eq!(log.note(t0 + Duration::from_secs(61)), Some(3));
        assert_eq!(log.note(t0 + Duration::from_secs(62)), None);
    }
}
