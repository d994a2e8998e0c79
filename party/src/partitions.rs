//! `--partitions` (env `PIRQ_PARTITIONS`), the partition count of a party's queue, declared once
//! for the gateway and the worker: every process of a party must use the same, which each checks
//! at start against the count recorded in Redis (`pirq_queue::partitions`).

use clap::Args;
use pirq_shared::layout::{Layout, PartitionsError, DEFAULT_PARTITIONS};

/// `#[command(flatten)]` it into a server's config.
#[derive(Args, Debug, Clone)]
pub struct PartitionArgs {
    /// Partitions of the party's queue (1..=256): each has its own job stream and records under
    /// a hash tag of its own (`{PREFIX:p}`), so that a Redis Cluster spreads them over its
    /// primaries. Gateways spread queries over them, every worker reads all of them. Every
    /// gateway and worker of a party uses the same count (recorded in Redis; a process started
    /// with another refuses to start); changing it: docs/redis.md.
    #[arg(long = "partitions", env = "PIRQ_PARTITIONS", default_value_t = DEFAULT_PARTITIONS)]
    pub partitions: u32,
}

impl PartitionArgs {
    /// `layout` split into the partitions asked for.
    pub fn apply(&self, layout: Layout) -> Result<Layout, PartitionsError> {
        layout.with_partitions(self.partitions)
    }
}
