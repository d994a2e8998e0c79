//! The updates stream `{P}:updates` as a worker follows it: every worker reads all of it (no
//! consumer group: each needs every epoch), after the newest epoch it has, and trims what every
//! live worker has folded into its base. Entry ids are `<epoch>-0` (`append_epoch.lua`).

use std::time::Duration;

use pirq_shared::layout::{Layout, UPDATE_FIELD};
use redis::streams::{StreamReadOptions, StreamReadReply};
use redis::AsyncCommands;

use crate::registration::Heartbeats;
use crate::{QueueError, RedisTarget};

/// One entry of the updates stream, as read.
#[derive(Debug)]
pub struct UpdateEntry {
    /// The entry id (`<epoch>-0`), for messages.
    pub id: String,
    /// The epoch the id names, `None` when the id is not `<epoch>-0`.
    pub epoch: Option<u64>,
    /// The bincode [`pirq_shared::update::EpochUpdate`], `None` when the entry has no such field.
    pub update: Option<Vec<u8>>,
}

/// A worker's reader of the updates stream, on a connection of its own (`XREAD BLOCK` holds
/// it while waiting).
pub struct UpdatesReader {
    conn: crate::connect::Conn,
    layout: Layout,
}

impl UpdatesReader {
    /// Connects lazily, with the worker's settings for reads that block up to `block`.
    pub fn new(
        target: &RedisTarget,
        layout: Layout,
        block: Duration,
    ) -> Result<UpdatesReader, QueueError> {
        Ok(UpdatesReader {
            conn: target.worker_connection(block)?.conn,
            layout,
        })
    }

    /// Up to `count` entries after epoch `newest`, waiting up to `block` when there are none
    /// (`None`: answer at once).
    pub async fn read_after(
        &mut self,
        newest: u64,
        count: usize,
        block: Option<Duration>,
    ) -> Result<Vec<UpdateEntry>, QueueError> {
        let mut options = StreamReadOptions::default().count(count);
        if let Some(b) = block {
            options = options.block(b.as_millis() as usize);
        }
        let key = self.layout.updates();
        let reply: Option<StreamReadReply> = self
            .conn
            .xread_options(&[&key], &[format!("{newest}-0")], &options)
            .await?;
        Ok(reply
            .into_iter()
            .flat_map(|r| r.keys)
            .flat_map(|k| k.ids)
            .map(|entry| UpdateEntry {
                epoch: entry.id.split('-').next().and_then(|e| e.parse().ok()),
                update: entry.get(UPDATE_FIELD),
                id: entry.id,
            })
            .collect())
    }

    /// Trims the entries every live worker has folded into its base (epochs before the oldest
    /// any live worker answers), keeping `retain` of them for workers that restart from their
    /// files, and the digests of the trimmed epochs with them. Trims nothing while a live
    /// heartbeat is of a format this version cannot read (do not guess).
    pub async fn trim_folded(&mut self, retain: u64) -> Result<(), QueueError> {
        let beats = Heartbeats::read(&mut self.conn, &self.layout).await?;
        if beats.unreadable > 0 || beats.records.is_empty() {
            return Ok(());
        }
        let mut oldest = u64::MAX;
        for record in &beats.records {
            match record.window {
                Some(w) => oldest = oldest.min(w.oldest),
                None => return Ok(()),
            }
        }
        let Some(keep_from) = oldest.checked_sub(retain) else {
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

    /// A connection for the window publishing the follower does after each epoch.
    pub fn connection(&self) -> crate::Connection {
        crate::Connection {
            conn: self.conn.clone(),
        }
    }
}
