//! `--partitions` (env `PIRQ_PARTITIONS`), the partition count of a party's queue, declared once
//! for the gateway and the worker: every process of a party must use the same, which each checks
//! at start against the count recorded in Redis (`pirq_queue::partitions`).

use clap::Args;
use pirq_queue::RedisTarget;
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

/// Refuses more than one partition on a Redis Cluster, for now. Each partition's keys sit in a
/// hash slot of their own, and some of the gateway's and the worker's pipelines still span
/// partitions (the result writes of a round, hand-backs, the queue sampler) or carry the
/// party-wide status channel beside a partition's keys; the cluster client refuses a pipeline
/// whose commands route to different slots, so such a worker could never write an answer
/// (found running `--partitions 12` on a 3-primary cluster, 2026-11-26; docs/redis.md).
/// One partition on a cluster, and any count on one Redis, work.
pub fn check_cluster(target: &RedisTarget, layout: &Layout) -> anyhow::Result<()> {
    if target.is_cluster() && layout.partitions() > 1 {
        anyhow::bail!(
            "--partitions {} on a Redis Cluster is not supported yet (pipelines that span \
             partitions cross hash slots); use --partitions 1 on a cluster, or one Redis \
             (docs/redis.md)",
            layout.partitions()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_cluster;
    use pirq_queue::connect::TlsFiles;
    use pirq_queue::RedisTarget;
    use pirq_shared::layout::Layout;

    #[test]
    fn more_than_one_partition_is_refused_on_a_cluster_only() {
        let cluster = RedisTarget::open(
            "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
            TlsFiles::default(),
        )
        .unwrap();
        let single = RedisTarget::open("redis://127.0.0.1:6379", TlsFiles::default()).unwrap();
        let one = Layout::new("p").unwrap();
        let four = one.clone().with_partitions(4).unwrap();
        check_cluster(&cluster, &one).unwrap();
        check_cluster(&single, &four).unwrap();
        let e = check_cluster(&cluster, &four).unwrap_err().to_string();
        assert!(e.contains("--partitions 4 on a Redis Cluster"), "{e}");
    }
}
