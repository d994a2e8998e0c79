//! A window's start: its queries announced `running` for the clients that follow their events
//! (nothing is written), and on a sharded party the shard count fixed and the epoch every shard
//! answers at pinned (`queue/lua/shard_start.lua`).

use pirq_shared::wire::QueryStatus;

use super::Consumer;
use crate::record::{Frames, Written};
use crate::{scripts, QueueError, RequestId};

/// What [`Consumer::start_shard_window`] found for one job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardStart {
    /// Answer at this epoch (every shard answers the job at the same one).
    At(u64),
    /// Nothing to answer: the query is final already.
    Settled,
    /// The query holds partials of another shard count (the party was re-split meanwhile).
    OtherShardCount,
}

/// Seconds a sharded query's combine state lives at most (as long as a `queued` record does by
/// default, `--pending-ttl`): every shard's partial must be in by then.
const SHARD_STATE_TTL: u64 = 3600;

impl Consumer {
    /// Announces that the queries of a window are `running` (for clients that follow a query's
    /// events; nothing is written): one `SPUBLISH` of frames per partition the queries live in,
    /// all sent at once.
    pub async fn mark_running(&self, request_ids: &[RequestId]) -> Result<(), QueueError> {
        let sends = self
            .by_partition(request_ids, |id| id)
            .into_iter()
            .map(|(partition, ids)| {
                let mut frames = Frames::default();
                for id in ids {
                    frames.push(*id, Written::progress(QueryStatus::Running));
                }
                let mut cmd = redis::cmd("SPUBLISH");
                cmd.arg(self.keys(partition).events()).arg(&frames);
                let mut conn = self.writer.clone();
                async move { cmd.query_async::<()>(&mut conn).await }
            });
        futures::future::try_join_all(sends).await?;
        Ok(())
    }

    /// `items` grouped by the partition of their request id, partitions in ascending order,
    /// each group in the order given (with each item's index in `items`).
    fn by_partition<'a, T>(
        &self,
        items: &'a [T],
        id: impl Fn(&'a T) -> &'a RequestId,
    ) -> Vec<(u32, Vec<&'a RequestId>)> {
        self.indexed_by_partition(items, id)
            .into_iter()
            .map(|(p, group)| (p, group.into_iter().map(|(_, id)| id).collect()))
            .collect()
    }

    fn indexed_by_partition<'a, T>(
        &self,
        items: &'a [T],
        id: impl Fn(&'a T) -> &'a RequestId,
    ) -> Vec<(u32, Vec<(usize, &'a RequestId)>)> {
        let mut groups: std::collections::BTreeMap<u32, Vec<(usize, &RequestId)>> =
            Default::default();
        for (i, item) in items.iter().enumerate() {
            let request = id(item);
            let partition = self.layout.partition_of_id(request.as_str());
            groups.entry(partition).or_default().push((i, request));
        }
        groups.into_iter().collect()
    }

    /// Sharded parties: announces a window's queries running (the first shard to start each,
    /// for clients that follow events), fixes their shard count and pins the epoch every shard
    /// answers them at (`queue/lua/shard_start.lua`). `jobs`: (request id, the epoch this worker
    /// would answer at, whether the query's client follows its events).
    pub async fn start_shard_window(
        &self,
        jobs: &[(RequestId, u64, bool)],
    ) -> Result<Vec<ShardStart>, QueueError> {
        let mut starts = vec![ShardStart::Settled; jobs.len()];
        // One script run per partition (a script touches one slot), all sent at once.
        let groups = self.indexed_by_partition(jobs, |(id, _, _)| id);
        let runs = groups.iter().map(|(partition, group)| {
            let keys = self.keys(*partition);
            let mut inv = scripts::SHARD_START.script().prepare_invoke();
            for (_, id) in group {
                inv.key(keys.query(id.as_str()));
                inv.key(keys.shard_state(id.as_str()));
            }
            inv.arg(keys.events())
                .arg(self.shard.count)
                .arg(SHARD_STATE_TTL.max(self.result_ttl));
            for (i, id) in group {
                let (_, epoch, follows) = jobs[*i];
                inv.arg(id.as_str())
                    .arg(epoch)
                    .arg(if follows { "1" } else { "0" });
            }
            let mut conn = self.writer.clone();
            async move { inv.invoke_async::<Vec<i64>>(&mut conn).await }
        });
        let replies = futures::future::try_join_all(runs).await?;
        for ((_, group), replies) in groups.iter().zip(replies) {
            for ((i, _), reply) in group.iter().zip(replies) {
                starts[*i] = match reply {
                    e if e >= 0 => ShardStart::At(e as u64),
                    -3 => ShardStart::OtherShardCount,
                    _ => ShardStart::Settled,
                };
            }
        }
        Ok(starts)
    }
}
