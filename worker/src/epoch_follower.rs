//! Follows the party's updates stream and applies every epoch, in order, to the scanner.
//!
//! Every worker reads the whole stream `{P}:updates` itself (no consumer group: each worker
//! needs every epoch). Entry ids are `<epoch>-0`, so "everything after the epoch I have" is
//! `XREAD ... STREAMS {P}:updates <newest>-0`, and a gap (the stream was trimmed past this
//! worker's database) shows as a first entry whose epoch is not `newest + 1`: the worker then
//! stops with a message to start it from a newer snapshot (`pirq db apply`).
//!
//! After each epoch the worker publishes its window (`{P}:db` epoch fields, raised only) and
//! trims stream entries that every live worker has folded into its base, keeping
//! `--updates-retain` folded epochs for workers that restart from their files.

use std::sync::Arc;
use std::time::Duration;

use pirq_shared::layout::{Layout, UPDATE_FIELD};
use pirq_shared::update::EpochUpdate;
use pirq_shared::wire::EpochRange;
use redis::aio::ConnectionManager;
use redis::streams::{StreamReadOptions, StreamReadReply};
use redis::AsyncCommands;
use tokio::sync::watch;

use pirq_queue::digests::Digests;
use pirq_queue::registration::{self as registry, Registration};
use pirq_scan::{ScanError, Scanner};

/// Entries read per `XREAD`.
const BATCH: usize = 16;

/// Why the worker cannot follow the stream any more.
#[derive(Debug, thiserror::Error)]
pub enum UpdatesError {
    #[error(
        "the updates stream continues at epoch {next}, but this worker is at epoch {newest}: \
         epochs in between were trimmed; start the worker from a newer snapshot \
         (pirq db apply --db FILE --update ... --out SNAPSHOT)"
    )]
    Gap { newest: u64, next: u64 },
    #[error("updates stream entry {id}: {detail}")]
    BadEntry { id: String, detail: String },
    #[error("applying epoch {epoch}: {source}")]
    Apply { epoch: u64, source: ScanError },
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// Follows the stream for one worker.
pub struct Follower {
    pub scanner: Arc<dyn Scanner>,
    /// A connection of its own: `XREAD BLOCK` holds it while waiting.
    pub conn: ConnectionManager,
    pub layout: Layout,
    /// Where the window is announced to the serve loop and the heartbeat.
    pub epochs: watch::Sender<EpochRange>,
    pub block: Duration,
    pub retain: u64,
    /// Extended by every applied epoch (SPEC §2.1), before the scanner answers at it.
    pub digests: Digests,
}

impl Follower {
    /// Applies every epoch already in the stream; returns once it is caught up.
    pub async fn catch_up(&mut self) -> Result<EpochRange, UpdatesError> {
        while self.step(None).await? > 0 {}
        Ok(self.scanner.epoch_window())
    }

    /// Follows the stream until it fails (Redis errors are retried with backoff), publishing
    /// the window through `reg` after every epoch.
    pub async fn run(mut self, mut reg: Registration) -> UpdatesError {
        let mut backoff = pirq_party::Backoff::default();
        loop {
            match self.step(Some(self.block)).await {
                Ok(0) => {}
                Ok(_) => {
                    backoff.reset();
                    reg.window = self.scanner.epoch_window();
                    self.digests.forget_before(reg.window);
                    // A replaced worker is stopped by its heartbeat, which sees the same answer.
                    if let Err(e) =
                        registry::publish_window(&mut self.conn, &self.layout, &reg).await
                    {
                        tracing::warn!(error = %e, "publishing the epoch window failed");
                    }
                    if let Err(e) = self.trim().await {
                        tracing::warn!(error = %e, "trimming the updates stream failed");
                    }
                }
                Err(UpdatesError::Redis(e)) => {
                    tracing::warn!(error = %e, "reading the updates stream failed; retrying");
                    backoff.wait().await;
                }
                Err(fatal) => return fatal,
            }
        }
    }

    /// Reads and applies the entries after the newest epoch; returns how many were applied.
    async fn step(&mut self, block: Option<Duration>) -> Result<usize, UpdatesError> {
        let newest = self.scanner.epoch_window().newest;
        let mut options = StreamReadOptions::default().count(BATCH);
        if let Some(b) = block {
            options = options.block(b.as_millis() as usize);
        }
        let key = self.layout.updates();
        let reply: Option<StreamReadReply> = self
            .conn
            .xread_options(&[&key], &[format!("{newest}-0")], &options)
            .await?;
        let entries = reply
            .into_iter()
            .flat_map(|r| r.keys)
            .flat_map(|k| k.ids)
            .collect::<Vec<_>>();
        let mut applied = 0;
        for entry in entries {
            let bad = |detail: String| UpdatesError::BadEntry {
                id: entry.id.clone(),
                detail,
            };
            let epoch: u64 = entry
                .id
                .split('-')
                .next()
                .and_then(|e| e.parse().ok())
                .ok_or_else(|| bad("id is not <epoch>-0".into()))?;
            let expected = self.scanner.epoch_window().newest + 1;
            if epoch != expected {
                return Err(UpdatesError::Gap {
                    newest: expected - 1,
                    next: epoch,
                });
            }
            let bytes: Vec<u8> = entry
                .get(UPDATE_FIELD)
                .ok_or_else(|| bad(format!("no field {UPDATE_FIELD:?}")))?;
            let update = EpochUpdate::from_bincode(&bytes).map_err(|e| bad(e.to_string()))?;
            if update.epoch != epoch {
                return Err(bad(format!("holds epoch {}", update.epoch)));
            }
            self.digests.push(&update).map_err(bad)?;
            let scanner = self.scanner.clone();
            let pages = update.pages.len();
            tokio::task::spawn_blocking(move || scanner.apply_epoch(&update))
                .await
                .map_err(|e| UpdatesError::Apply {
                    epoch,
                    source: ScanError::Device(format!("apply panicked: {e}")),
                })?
                .map_err(|source| UpdatesError::Apply { epoch, source })?;
            let window = self.scanner.epoch_window();
            self.epochs.send_replace(window);
            metrics::gauge!(pirq_shared::metrics::WORKER_EPOCH).set(window.newest as f64);
            tracing::info!(epoch, pages, oldest = window.oldest, "applied epoch");
            applied += 1;
        }
        Ok(applied)
    }

    /// Trims entries every live worker has folded, keeping `retain` of them.
    async fn trim(&mut self) -> Result<(), UpdatesError> {
        let ids: Vec<String> = self.conn.smembers(self.layout.workers()).await?;
        if ids.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = ids.iter().map(|id| self.layout.worker(id)).collect();
        let records: Vec<Option<String>> = self.conn.mget(&keys).await?;
        let mut oldest = u64::MAX;
        for record in records.into_iter().flatten() {
            let Ok(value) = serde_json::from_str::<serde_json::Value>(&record) else {
                return Ok(()); // someone else's format: do not guess
            };
            match value["window"]["oldest"].as_u64() {
                Some(o) => oldest = oldest.min(o),
                None => return Ok(()),
            }
        }
        let Some(keep_from) = oldest.checked_sub(self.retain) else {
            return Ok(());
        };
        if oldest == u64::MAX || keep_from == 0 {
            return Ok(());
        }
        // Entries with epoch < keep_from go; ids are <epoch>-0.
        let _: i64 = redis::cmd("XTRIM")
            .arg(self.layout.updates())
            .arg("MINID")
            .arg(format!("{keep_from}-0"))
            .query_async(&mut self.conn)
            .await?;
        // The digests of the trimmed epochs go with them.
        let epochs: Vec<String> = self.conn.hkeys(self.layout.digests()).await?;
        let old: Vec<&String> = epochs
            .iter()
            .filter(|e| e.parse::<u64>().is_ok_and(|e| e < keep_from))
            .collect();
        if !old.is_empty() {
            let _: i64 = self.conn.hdel(self.layout.digests(), old).await?;
        }
        Ok(())
    }
}
