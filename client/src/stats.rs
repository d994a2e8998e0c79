//! What a client counts about its exchanges, for callers that report on them (`pirq bench
//! load` shows refusals and retries beside its latencies).

use std::sync::atomic::{AtomicU64, Ordering};

/// The live counters, shared by a [`crate::Client`]'s two parties.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    info_requests: AtomicU64,
    refused_429: AtomicU64,
    refused_503: AtomicU64,
    retries: AtomicU64,
}

impl Counters {
    pub(crate) fn info(&self) {
        self.info_requests.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn refused(&self, status: u16) {
        match status {
            429 => &self.refused_429,
            _ => &self.refused_503,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            info_requests: self.info_requests.load(Ordering::Relaxed),
            refused_429: self.refused_429.load(Ordering::Relaxed),
            refused_503: self.refused_503.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
        }
    }
}

/// Counts since the client was built ([`crate::Client::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// `GET /v1/info` requests sent (both parties): about one per party while the parties'
    /// epoch and digest stay the same.
    pub info_requests: u64,
    /// Submits refused with 429 (a party's backlog or storage full, a rate limit).
    pub refused_429: u64,
    /// Submits refused with 503 (a party's caps, or its Redis unavailable).
    pub refused_503: u64,
    /// Requests sent again after a refusal, a failed connection or a broken stream.
    pub retries: u64,
}
