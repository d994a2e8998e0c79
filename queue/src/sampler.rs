//! What a gateway reads about its party's Redis besides the records: the job stream's state
//! for the `pirq_queue_*` gauges ([`queue`]), the stream's counters and Redis's memory for
//! admission ([`stream_counts`], [`used_memory`]), and the persistence settings for
//! `--durability fsync` ([`persistence`]). Each is a few cheap commands, sent every second or
//! two whatever the traffic.

use std::time::Duration;

use pirq_shared::layout::{Layout, GROUP};
use redis::streams::{StreamPendingReply, StreamRangeReply};
use redis::Value;

use crate::{Connection, QueueError};

/// One reading of a party's queue.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueSample {
    /// Entries not yet delivered to any worker.
    pub depth: u64,
    /// Entries delivered and not yet acknowledged.
    pub pending: u64,
    /// Age of the oldest entry, by the Redis server's clock (0 when the stream is empty).
    pub oldest_age: Duration,
    /// Registered workers whose heartbeat key exists.
    pub live_workers: u64,
    /// Every consumer group on the stream (one per shard for a sharded party): its name,
    /// entries delivered and not acknowledged, and entries not yet delivered to it (its lag).
    pub groups: Vec<GroupSample>,
}

/// One consumer group of the job stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupSample {
    pub name: String,
    pub pending: u64,
    pub lag: u64,
}

/// The party's named tables (`{P}:tables`, issue 38), sorted: beside the table `default`, the
/// tables whose queues a gateway samples.
pub async fn table_names(conn: &Connection, layout: &Layout) -> Result<Vec<String>, QueueError> {
    let mut names: Vec<String> = redis::cmd("SMEMBERS")
        .arg(layout.tables())
        .query_async(&mut conn.conn.clone())
        .await?;
    names.sort();
    Ok(names)
}

/// Reads the queue once, every partition: depths, pending counts and groups add up, the oldest
/// age is the oldest of any partition. Missing keys (no job yet, no consumer group yet) read as
/// zero.
pub async fn queue(conn: &Connection, layout: &Layout) -> Result<QueueSample, QueueError> {
    // One reading per partition (each on one hash slot: on a cluster, that slot's node), all at
    // once.
    let readings = layout
        .all_partitions()
        .map(|(p, keys)| async move { partition(conn, layout, &keys.jobs(), p == 0).await });
    let mut total = QueueSample::default();
    for sample in futures::future::try_join_all(readings).await? {
        total.depth += sample.depth;
        total.pending += sample.pending;
        total.oldest_age = total.oldest_age.max(sample.oldest_age);
        total.live_workers = total.live_workers.max(sample.live_workers);
        for group in sample.groups {
            match total.groups.iter_mut().find(|g| g.name == group.name) {
                Some(sum) => {
                    sum.pending += group.pending;
                    sum.lag += group.lag;
                }
                None => total.groups.push(group),
            }
        }
    }
    Ok(total)
}

/// One partition's stream (`jobs`), and with `with_workers` (partition 0, whose hash tag is
/// the party's) the party's live workers.
async fn partition(
    conn: &Connection,
    layout: &Layout,
    jobs: &str,
    with_workers: bool,
) -> Result<QueueSample, QueueError> {
    let conn = &mut conn.conn.clone();
    let mut pipe = redis::pipe();
    pipe.cmd("XLEN")
        .arg(jobs)
        .cmd("XRANGE")
        .arg(jobs)
        .arg("-")
        .arg("+")
        .arg("COUNT")
        .arg(1)
        .cmd("TIME");
    if with_workers {
        pipe.cmd("SMEMBERS").arg(layout.workers());
    }
    let (len, oldest, time, workers): (u64, StreamRangeReply, (u64, u64), Vec<String>) =
        if with_workers {
            crate::one_slot::send(&pipe, conn).await?
        } else {
            let (len, oldest, time) = crate::one_slot::send(&pipe, conn).await?;
            (len, oldest, time, Vec::new())
        };
    // XPENDING fails with NOGROUP until the first worker has created the group.
    let pending = match redis::cmd("XPENDING")
        .arg(jobs)
        .arg(GROUP)
        .query_async::<StreamPendingReply>(conn)
        .await
    {
        Ok(reply) => reply.count() as u64,
        Err(e) if e.code() == Some("NOGROUP") => 0,
        Err(e) => return Err(e.into()),
    };
    let live_workers = if workers.is_empty() || !with_workers {
        0
    } else {
        let mut pipe = redis::pipe();
        for id in &workers {
            pipe.exists(layout.worker(id));
        }
        let alive: Vec<bool> = crate::one_slot::send(&pipe, conn).await?;
        alive.into_iter().filter(|a| *a).count() as u64
    };
    let now_ms = time.0 * 1000 + time.1 / 1000;
    let oldest_age = oldest
        .ids
        .first()
        .and_then(|e| entry_ms(&e.id))
        .map(|ms| Duration::from_millis(now_ms.saturating_sub(ms)))
        .unwrap_or_default();
    let groups = match redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(jobs)
        .query_async::<redis::Value>(conn)
        .await
    {
        Ok(reply) => parse_groups(reply),
        // No stream yet.
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) => {
            Vec::new()
        }
        Err(e) => return Err(e.into()),
    };
    Ok(QueueSample {
        depth: len.saturating_sub(pending),
        pending,
        oldest_age,
        live_workers,
        groups,
    })
}

/// The groups of an `XINFO GROUPS` reply (RESP2 flat arrays or RESP3 maps). `lag` is nil
/// when Redis cannot tell (entries deleted inside the group's range): read as 0 then.
fn parse_groups(reply: redis::Value) -> Vec<GroupSample> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let number = |v: &Value| match v {
        Value::Int(n) => (*n).max(0) as u64,
        other => text(other).and_then(|t| t.parse().ok()).unwrap_or(0),
    };
    let Value::Array(groups) = reply else {
        return Vec::new();
    };
    groups
        .into_iter()
        .filter_map(|g| {
            let pairs: Vec<(Value, Value)> = match g {
                Value::Map(pairs) => pairs,
                Value::Array(flat) => {
                    let mut it = flat.into_iter();
                    std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
                }
                _ => return None,
            };
            let field = |name: &str| pairs.iter().find(|(k, _)| text(k).as_deref() == Some(name));
            Some(GroupSample {
                name: text(&field("name")?.1)?,
                pending: field("pending").map_or(0, |(_, v)| number(v)),
                lag: field("lag").map_or(0, |(_, v)| number(v)),
            })
        })
        .collect()
}

/// Milliseconds part of a stream entry id (`<ms>-<seq>`): when Redis appended it.
fn entry_ms(id: &str) -> Option<u64> {
    id.split_once('-')?.0.parse().ok()
}

/// Redis's `used_memory` (`INFO memory`), bytes.
pub async fn used_memory(conn: &Connection) -> Result<u64, QueueError> {
    let mut conn = conn.conn.node();
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0))
}

/// `(length, entries-added)` of the party's job streams, every partition's summed, `None` if one
/// does not exist yet or the server does not report `entries-added` (Redis < 7.0).
pub async fn stream_counts(
    conn: &Connection,
    layout: &Layout,
) -> Result<Option<(u64, u64)>, QueueError> {
    let mut total = (0, 0);
    for (_, keys) in layout.all_partitions() {
        match partition_counts(conn, &keys.jobs()).await? {
            Some((len, added)) => total = (total.0 + len, total.1 + added),
            None => return Ok(None),
        }
    }
    Ok(Some(total))
}

async fn partition_counts(conn: &Connection, jobs: &str) -> Result<Option<(u64, u64)>, QueueError> {
    let mut conn = conn.conn.clone();
    let reply: redis::RedisResult<Value> = redis::cmd("XINFO")
        .arg("STREAM")
        .arg(jobs)
        .query_async(&mut conn)
        .await;
    let reply = match reply {
        Ok(v) => v,
        Err(e) if e.code().is_some() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let pairs: Vec<(Value, Value)> = match reply {
        Value::Map(p) => p,
        Value::Array(items) => {
            let mut it = items.into_iter();
            let mut out = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                out.push((k, v));
            }
            out
        }
        _ => return Ok(None),
    };
    let get = |name: &str| {
        pairs.iter().find_map(|(k, v)| match (k, v) {
            (Value::BulkString(k), Value::Int(n)) if k.as_slice() == name.as_bytes() => {
                Some(*n as u64)
            }
            (Value::SimpleString(k), Value::Int(n)) if k == name => Some(*n as u64),
            _ => None,
        })
    };
    Ok(get("length").zip(get("entries-added")))
}

/// `appendonly` and `appendfsync` from `CONFIG GET` (`None` where refused or unreachable).
pub async fn persistence(conn: &Connection) -> (Option<String>, Option<String>) {
    let a = config_get(conn, "appendonly").await;
    let f = config_get(conn, "appendfsync").await;
    (a, f)
}

async fn config_get(conn: &Connection, name: &str) -> Option<String> {
    let mut conn = conn.conn.node();
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query_async(&mut conn)
        .await
        .ok()?;
    v.get(1).map(|s| s.to_ascii_lowercase())
}

/// `(redis_version, WAITAOF known)`: what `--durability fsync` can rely on.
pub async fn durability_features(conn: &Connection) -> Result<(String, bool), QueueError> {
    let mut conn = conn.conn.node();
    let version = crate::probe::server_version(&mut conn).await?;
    let known = crate::probe::command_exists(&mut conn, "WAITAOF").await?;
    Ok((version, known))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_ids_carry_their_append_time() {
        assert_eq!(entry_ms("1700000000123-0"), Some(1_700_000_000_123));
        assert_eq!(entry_ms("5-17"), Some(5));
        assert_eq!(entry_ms("garbage"), None);
        assert_eq!(entry_ms("x-1"), None);
    }
}
