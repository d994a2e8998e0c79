//! Delivery: a partition's new entries (`XREADGROUP … >`) and the entries this consumer already
//! held (a worker restarted under the same name), each parsed once into a [`Delivery`] whose
//! request id belongs to the entry's partition or is dropped.

use std::time::{Duration, Instant};

use pirq_shared::layout::job_field;
use pirq_shared::metrics as m;
use pirq_shared::wire::{Job, WireError};
use redis::Value;

use super::{Consumer, Delivery, EntryId};
use crate::reply::{self, Fields};
use crate::{one_slot, QueueError, RequestId};

impl Consumer {
    /// Reads up to `count` new entries of `partition`, blocking up to `block` when there are
    /// none (on that partition's reader connection).
    pub async fn read(
        &self,
        partition: u32,
        count: usize,
        block: Duration,
    ) -> Result<Vec<Delivery>, QueueError> {
        self.xreadgroup(partition, count, Some(block), ">").await
    }

    /// Reads up to `count` entries already delivered to this consumer and not acknowledged,
    /// with ids after `after` (start with `"0"`). A worker restarted under the same consumer
    /// name picks up what it held when it stopped. Entries deleted meanwhile come back without
    /// fields and are acknowledged as discards.
    pub async fn read_own_pending(
        &self,
        partition: u32,
        count: usize,
        after: &str,
    ) -> Result<Vec<Delivery>, QueueError> {
        self.xreadgroup(partition, count, None, after).await
    }

    async fn xreadgroup(
        &self,
        partition: u32,
        count: usize,
        block: Option<Duration>,
        id: &str,
    ) -> Result<Vec<Delivery>, QueueError> {
        let mut conn = self.readers[partition as usize].clone();
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(&self.group)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(count.max(1));
        if let Some(block) = block {
            cmd.arg("BLOCK").arg(block.as_millis() as u64);
        }
        cmd.arg("STREAMS").arg(self.keys(partition).jobs()).arg(id);
        let reply: redis::RedisResult<Value> = cmd.query_async(&mut conn).await;
        let reply = match reply {
            // The stream or group vanished (Redis restarted without persistence): make it again.
            Err(e) if e.code() == Some("NOGROUP") => {
                tracing::warn!(partition, "job stream or group missing; creating it");
                self.ensure_group_in(partition).await?;
                return Ok(Vec::new());
            }
            other => other?,
        };
        let received = Instant::now();
        let mut deliveries: Vec<Delivery> = reply::read_reply(reply)
            .into_iter()
            .map(|(entry_id, fields)| self.delivery(partition, entry_id, fields, received))
            .collect();
        self.drop_gone(partition, &mut deliveries).await?;
        self.hold(&deliveries);
        // New entries are on their first delivery; entries read again are counted by Redis.
        if id != ">" {
            self.fill_delivery_counts(partition, &mut deliveries)
                .await?;
        }
        for job in deliveries.iter().filter_map(|d| d.job.as_ref().ok()) {
            metrics::histogram!(m::WORKER_QUEUE_WAIT, m::TABLE => self.layout().table_name().to_string())
                .record(m::seconds_since_unix_ms(job.accepted_ms));
        }
        Ok(deliveries)
    }

    /// Acknowledges entries that were deleted while pending (they come back without fields):
    /// nothing is left to answer.
    pub(super) async fn drop_gone(
        &self,
        partition: u32,
        deliveries: &mut Vec<Delivery>,
    ) -> Result<(), QueueError> {
        let gone: Vec<String> = deliveries
            .iter()
            .filter(|d| d.gone)
            .map(|d| d.entry_id.id.clone())
            .collect();
        if gone.is_empty() {
            return Ok(());
        }
        deliveries.retain(|d| !d.gone);
        let mut conn = self.writer.clone();
        redis::cmd("XACK")
            .arg(self.keys(partition).jobs())
            .arg(&self.group)
            .arg(&gone)
            .query_async::<()>(&mut conn)
            .await?;
        Ok(())
    }

    /// Sets each delivery's count from the group's pending list (`XPENDING` per entry, one
    /// round trip).
    pub(super) async fn fill_delivery_counts(
        &self,
        partition: u32,
        deliveries: &mut [Delivery],
    ) -> Result<(), QueueError> {
        if deliveries.is_empty() {
            return Ok(());
        }
        let jobs = self.keys(partition).jobs();
        let mut pipe = redis::pipe();
        for d in deliveries.iter() {
            pipe.cmd("XPENDING")
                .arg(&jobs)
                .arg(&self.group)
                .arg(&d.entry_id.id)
                .arg(&d.entry_id.id)
                .arg(1);
        }
        let mut conn = self.writer.clone();
        let replies: Vec<Value> = one_slot::send(&pipe, &mut conn).await?;
        for (d, reply) in deliveries.iter_mut().zip(replies) {
            if let Some((_, count, _)) = reply::pending(reply).into_iter().next() {
                d.deliveries = count.max(1);
            }
        }
        Ok(())
    }

    /// A delivery from an entry of `partition`'s stream as read. The request id is parsed here,
    /// once: an entry whose `id` field is not a [`RequestId`] of this partition (a gateway mints
    /// every id in the partition it queues the job in) is answered to nobody.
    pub(super) fn delivery(
        &self,
        partition: u32,
        entry_id: String,
        fields: Fields,
        received: Instant,
    ) -> Delivery {
        let mut delivery = delivery(entry_id, fields, received);
        delivery.entry_id.partition = partition;
        if let Some(id) = &delivery.request_id {
            if self.layout.partition_of_id(id.as_str()) != partition {
                delivery.request_id = None;
            }
        }
        delivery
    }
}

/// A delivery from a stream entry as read (partition 0; [`Consumer::delivery`] sets it).
fn delivery(entry_id: String, fields: Fields, received: Instant) -> Delivery {
    let gone = fields.is_empty();
    let request_id =
        reply::field(&fields, job_field::ID).and_then(|v| RequestId::from_bytes(v).ok());
    let job = match reply::field(&fields, job_field::JOB) {
        Some(bytes) => Job::from_bincode(bytes),
        None => Err(WireError {
            code: pirq_shared::error::ErrorCode::InvalidJob,
            message: "stream entry has no job field".into(),
            key_index: None,
        }),
    };
    Delivery {
        entry_id: EntryId {
            partition: 0,
            id: entry_id,
        },
        request_id,
        job,
        received,
        deliveries: 1,
        gone,
    }
}
