//! The wall clock as pirq's records carry it: Unix time, read in one place.
//!
//! A job's `accepted_ms`, a held request's deadline, a worker's heartbeat and `started_ms` are
//! Unix milliseconds written by one host and read by another, so every process reads the clock
//! the same way (a clock before 1970 reads as 0 rather than failing). Durations measured within
//! one process use `Instant`, not this.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Time since the Unix epoch now (zero before 1970).
fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Milliseconds since the Unix epoch now.
pub fn unix_ms() -> u64 {
    since_epoch().as_millis() as u64
}

/// Seconds since the Unix epoch now, with the clock's precision (a heartbeat's gauge).
pub fn unix_seconds() -> f64 {
    since_epoch().as_secs_f64()
}

/// How long ago the Unix time `ms` (another host's stamp) was by this host's clock; zero when
/// the clocks disagree the other way.
pub fn since_unix_ms(ms: u64) -> Duration {
    since_epoch().saturating_sub(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_agree_with_each_other() {
        let ms = unix_ms();
        // 2020-01-01 and 2200-01-01: a reading, not 0 or garbage.
        assert!((1_577_836_800_000..7_258_118_400_000).contains(&ms), "{ms}");
        let seconds = unix_seconds();
        assert!(seconds * 1000.0 >= ms as f64, "{seconds} against {ms}");
        let ago = since_unix_ms(ms - 10_000);
        assert!(
            ago >= Duration::from_secs(10) && ago < Duration::from_secs(60),
            "{ago:?}"
        );
        assert_eq!(since_unix_ms(ms + 60_000), Duration::ZERO);
    }
}
