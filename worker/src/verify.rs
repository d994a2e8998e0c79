//! The pages a worker serves are the pages its file's header names: before it serves anything,
//! the worker hashes every page of the file and compares the result with the digest the header
//! records (SPEC §2.1 `pages_digest`), and refuses a file that does not match. A damaged file
//! (a flipped bit on disk, a truncated copy patched up, a file edited in place) would otherwise
//! be served under its old digest, and clients would combine its wrong pages without a word.
//!
//! The check runs on a thread of its own while the scanner loads the pages, so start-up waits
//! for the slower of the two, not for both: both read the same pages, and whichever is first
//! brings them into the page cache for the other. The load and check times are logged
//! (`database loaded`) so an operator can see what the check costs; `--skip-verify` turns it
//! off for a file checked offline with `pirq db verify`, and says so in the log.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use pirq_db::{DbError, PirDb};
use pirq_shared::digest::Digest;

/// A check under way (or skipped).
pub struct Check {
    db: Arc<PirDb>,
    running: Option<JoinHandle<(Result<Digest, DbError>, Duration)>>,
}

/// Starts checking `db`'s pages on a thread of its own, unless `skip`.
pub fn start(db: Arc<PirDb>, skip: bool) -> Check {
    if skip {
        tracing::info!(
            db = %db.path().display(),
            "--skip-verify: serving the file without checking its pages against its digest"
        );
        return Check { db, running: None };
    }
    let file = db.clone();
    let running = std::thread::Builder::new()
        .name("verify".into())
        .spawn(move || {
            let started = Instant::now();
            let result = file.verify_pages();
            (result, started.elapsed())
        })
        .ok();
    Check { db, running }
}

impl Check {
    /// Waits for the check (the scanner took `load` to load the pages) and logs both times.
    /// Returns the pages' content digest when they were checked; an error when they do not
    /// match the header.
    pub fn finish(self, load: Duration) -> anyhow::Result<Option<Digest>> {
        let bytes = self.db.header().pages_len();
        let path = self.db.path().display().to_string();
        let ms = |d: Duration| (d.as_secs_f64() * 1e3).round() as u64;
        let Some(running) = self.running else {
            tracing::info!(db = %path, bytes, load_ms = ms(load), verified = false, "database loaded");
            return Ok(None);
        };
        let waiting = Instant::now();
        let (result, took) = running
            .join()
            .map_err(|_| anyhow::anyhow!("the thread checking {path} panicked"))?;
        let waited = waiting.elapsed();
        let digest = result.with_context(|| {
            format!("refusing to serve {path}: its pages do not match its header")
        })?;
        tracing::info!(
            db = %path, bytes, load_ms = ms(load), verify_ms = ms(took), waited_ms = ms(waited),
            verify_gib_per_s = bytes as f64 / (1u64 << 30) as f64 / took.as_secs_f64().max(1e-9),
            verified = true, "database loaded"
        );
        Ok(Some(digest))
    }
}
