//! `--durability replica`: what a gateway asks Redis so that a query it accepts survives the
//! loss of the Redis primary that took it.
//!
//! Redis replicates asynchronously: a primary answers the submit, then streams the write to its
//! replicas. A primary killed in between loses the job, and the replica promoted in its place
//! never heard of it. `WAIT 1 <timeout>` closes that window: it returns once at least one
//! replica has acknowledged every write *this connection* sent to *this primary* so far
//! (Redis ≥ 3.0, every version and cluster mode alike; `docs/redis.md`). So it must travel on
//! the connection that carried the submit, to the primary that took it: on one Redis the
//! gateway's multiplexed connection; on a cluster the same cluster connection, routed to the
//! primary of the request's partition slot, which is the node connection the submit used.
//!
//! The check is one pipeline on that node ([`Producer::wait_replica`]): `EXISTS` of the query
//! record, then `WAIT 1`. The `EXISTS` guards the one case the `WAIT` cannot see: a failover
//! that completes while the cluster client retries the pipeline, which then runs on the
//! promoted replica over a fresh connection (whose `WAIT` counts no write of ours). There the
//! record's presence is what matters: the job survived the failover, or it did not (→ not
//! confirmed). A replayed submit (a known `Idempotency-Key`) wrote nothing on this connection;
//! its check rewrites the key's record with its own value first (`SET … XX KEEPTTL`), a write
//! that follows the first submit in the primary's replication stream, so that the `WAIT`
//! covers the first submit whichever gateway took it.
//!
//! The start-up probe and its periodic re-check ([`replicas`]) read `INFO replication` from the
//! primary of each partition's slot: a primary without an online replica cannot confirm
//! anything, so a gateway refuses to start on it and answers 503 `not_durable` while it lasts.

use std::time::Duration;

use pirq_shared::layout::Layout;

use crate::producer::Producer;
use crate::{Connection, QueueError, RequestId};

/// What the primary serving one partition says of its replicas (`INFO replication`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionReplicas {
    pub partition: u32,
    /// `role`: `master` on a primary (a gateway pointed at a replica sees `slave`).
    pub role: String,
    /// Replicas whose link is `state=online` (not those still loading their first copy).
    pub online: u32,
}

impl PartitionReplicas {
    /// Whether submits in this partition can be confirmed on a replica.
    pub fn can_confirm(&self) -> bool {
        self.role == "master" && self.online >= 1
    }
}

/// `INFO replication` of the primary serving each partition's slot, in partition order (on one
/// Redis, the same node each time).
pub async fn replicas(
    conn: &Connection,
    layout: &Layout,
) -> Result<Vec<PartitionReplicas>, QueueError> {
    let mut out = Vec::with_capacity(layout.partitions() as usize);
    for partition in 0..layout.partitions() {
        let mut node = conn.conn.primary_of(&layout.partition(partition).jobs());
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut node)
            .await?;
        out.push(parse_info(partition, &info));
    }
    Ok(out)
}

fn parse_info(partition: u32, info: &str) -> PartitionReplicas {
    let mut role = String::new();
    let mut online = 0;
    for line in info.lines().map(str::trim) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if name == "role" {
            role = value.to_string();
        }
        // `slave0:ip=…,port=…,state=online,offset=…,lag=…`
        let replica_line = name
            .strip_prefix("slave")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if replica_line && value.split(',').any(|field| field == "state=online") {
            online += 1;
        }
    }
    PartitionReplicas {
        partition,
        role,
        online,
    }
}

/// How the replica check of one accepted submit came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaAck {
    /// A replica has the job: it survives the loss of the primary.
    Confirmed,
    /// No replica confirmed within the timeout (`replicas`: how many did, 0). The job is
    /// queued and may still be answered.
    Unconfirmed,
    /// The query record is not on the primary now serving its partition: a failover lost it
    /// (or it expired). The job will not be answered.
    Missing,
}

/// The replica check of an accepted submit.
impl Producer {
    /// Waits up to `timeout` for a replica of the primary serving `id`'s partition to confirm
    /// every write this gateway's connection sent it (the submit among them), and checks that
    /// the query record is there ([`ReplicaAck::Missing`] if not). `replayed`: the
    /// `(Idempotency-Key, stored value)` of a replayed submit, whose record is rewritten as it
    /// is first so that the `WAIT` covers the first submit (module docs).
    ///
    /// Not retried here: a fresh connection's `WAIT` counts none of the writes of the old one.
    pub async fn wait_replica(
        &self,
        id: &RequestId,
        replayed: Option<(&str, &str)>,
        timeout: Duration,
    ) -> Result<ReplicaAck, QueueError> {
        let record = self.layout().query(id.as_str());
        let mut pipe = redis::pipe();
        if let Some((key, value)) = replayed {
            pipe.cmd("SET")
                .arg(self.layout().idempotency(key))
                .arg(value)
                .arg("XX")
                .arg("KEEPTTL")
                .ignore();
        }
        pipe.cmd("EXISTS").arg(&record);
        pipe.cmd("WAIT").arg(1).arg(timeout.as_millis() as u64);
        let mut node = self.conn().primary_of(&record);
        // The reply may take the whole WAIT, on top of the round trip.
        let within = self.timeout() + timeout;
        let (exists, replicas): (i64, i64) =
            match tokio::time::timeout(within, crate::one_slot::send(&pipe, &mut node)).await {
                Ok(r) => r?,
                Err(_) => return Err(QueueError::Timeout(within)),
            };
        Ok(match (exists, replicas) {
            (0, _) => ReplicaAck::Missing,
            (_, n) if n >= 1 => ReplicaAck::Confirmed,
            _ => ReplicaAck::Unconfirmed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_replication_counts_online_replicas_only() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
                    slave0:ip=127.0.0.1,port=7001,state=online,offset=42,lag=0\r\n\
                    slave1:ip=127.0.0.1,port=7002,state=wait_bgsave,offset=0,lag=0\r\n\
                    master_failover_state:no-failover\r\nslave_expires_tracked_keys:0\r\n";
        let r = parse_info(3, info);
        assert_eq!(
            r,
            PartitionReplicas {
                partition: 3,
                role: "master".into(),
                online: 1
            }
        );
        assert!(r.can_confirm());
        let none = parse_info(0, "role:master\r\nconnected_slaves:0\r\n");
        assert!(!none.can_confirm());
        let replica = parse_info(0, "role:slave\r\nmaster_host:127.0.0.1\r\n");
        assert!(!replica.can_confirm());
    }
}
