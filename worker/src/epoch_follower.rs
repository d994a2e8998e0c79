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

use pirq_queue::updates::UpdatesReader;
use pirq_queue::QueueError;
use pirq_shared::layout::{Layout, UPDATE_FIELD};
use pirq_shared::update::EpochUpdate;
use pirq_shared::wire::EpochRange;
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
    Redis(#[from] QueueError),
}

/// Follows the stream for one worker.
pub struct Follower {
    pub scanner: Arc<dyn Scanner>,
    /// A connection of its own: `XREAD BLOCK` holds it while waiting.
    pub updates: UpdatesReader,
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
                        registry::Registry::new(self.updates.connection(), self.layout.clone())
                            .publish_window(&reg)
                            .await
                    {
                        tracing::warn!(error = %e, "publishing the epoch window failed");
                    }
                    if let Err(e) = self.updates.trim_folded(self.retain).await {
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
        let entries = self.updates.read_after(newest, BATCH, block).await?;
        let mut applied = 0;
        for entry in entries {
            let bad = |detail: String| UpdatesError::BadEntry {
                id: entry.id.clone(),
                detail,
            };
            let epoch: u64 = entry
                .epoch
                .ok_or_else(|| bad("id is not <epoch>-0".into()))?;
            let expected = self.scanner.epoch_window().newest + 1;
            if epoch != expected {
                return Err(UpdatesError::Gap {
                    newest: expected - 1,
                    next: epoch,
                });
            }
            let bytes: Vec<u8> = entry
                .update
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
            set_epoch_gauge(&self.layout, window);
            tracing::info!(epoch, pages, oldest = window.oldest, "applied epoch");
            applied += 1;
        }
        Ok(applied)
    }
}

/// [`pirq_shared::metrics::WORKER_EPOCH`] of `layout`'s table: the newest epoch it serves.
pub fn set_epoch_gauge(layout: &Layout, window: EpochRange) {
    let table = layout.table_name().to_string();
    metrics::gauge!(pirq_shared::metrics::WORKER_EPOCH, pirq_shared::metrics::TABLE => table)
        .set(window.newest as f64);
}
