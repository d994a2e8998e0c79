//! Connection lanes (`--connection-threads N`): N threads, each a single-threaded runtime that
//! serves its connections from start to end with a Redis connection of its own.
//!
//! Why: in the shared multi-threaded runtime a query crosses threads several times (the
//! connection's task, the partition's submitter, the Redis connection's driver, the pub/sub
//! task each run wherever a thread is free), and every crossing is a wake-up and cold caches.
//! On a 16-core GPU host the gateway spent 189 µs of CPU a party query on its default 16
//! threads against 114 on one (docs/bench/host-path.md). A lane keeps a connection's requests,
//! its submits and their Redis round trips on one thread; only the accept (once a connection:
//! the socket then moves to the lane's own reactor, so its readiness wakes the lane directly)
//! and the completion events' wake-ups cross to it, the wake-ups of one event message in one
//! hand-off ([`crate::events::LaneInbox`]). Lanes scale with the
//! cores like the shared runtime does, by connections: the accept loop hands them out in turn.
//!
//! Shared by all lanes, as before: the caps (connections, waiters), the pub/sub hub, the
//! retention budget, access control, the samplers, the registration cache and the named
//! tables' states (an epoch pushed through one lane must be seen by all at once). Each lane's
//! own: the producer, its Redis connection and submitters ([`AppState::for_lane`]).

use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context;
use axum::Router;
use tokio::runtime::Handle;
use tokio::sync::watch;

use crate::AppState;

/// The lanes' runtimes and the router each serves with its own state.
pub struct Lanes {
    lanes: Vec<(Handle, Router)>,
    next: AtomicUsize,
    /// Set when the lanes are dropped: each lane's thread then ends its runtime.
    exit: watch::Sender<bool>,
}

impl Lanes {
    /// Starts `n` lanes (n ≥ 1), each serving `router(state of its own)`.
    pub fn start(
        n: usize,
        state: &AppState,
        router: impl Fn(AppState) -> Router,
    ) -> anyhow::Result<Lanes> {
        let (exit, _) = watch::channel(false);
        let mut lanes = Vec::with_capacity(n);
        for i in 0..n {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting a connection lane's runtime")?;
            let handle = runtime.handle().clone();
            let mut exit = exit.subscribe();
            let (inbox, deliveries) = crate::events::lane_inbox();
            std::thread::Builder::new()
                .name(format!("pirq-lane-{i}"))
                .spawn(move || {
                    inbox.enter();
                    runtime.block_on(async move {
                        tokio::select! {
                            _ = exit.wait_for(|e| *e) => {}
                            () = deliveries.run() => {}
                        }
                    })
                })
                .context("starting a connection lane's thread")?;
            lanes.push((handle, router(state.for_lane()?)));
        }
        Ok(Lanes {
            lanes,
            next: AtomicUsize::new(0),
            exit,
        })
    }

    /// The lane for the next connection (in turn) and its router.
    pub fn next(&self) -> &(Handle, Router) {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.lanes.len();
        &self.lanes[i]
    }
}

impl Drop for Lanes {
    fn drop(&mut self) {
        let _ = self.exit.send(true);
    }
}
