//! Every pipeline this crate sends keeps to one hash slot ([`send`]), as a Redis Cluster needs.
//!
//! The `redis` crate's cluster connection sends a pipeline to one node, chosen by the first
//! command that names a key, and refuses one whose commands route to different slots
//! ("crossed slots"); a `MULTI` block or a script whose keys sit in two slots is refused by the
//! node itself (`CROSSSLOT`). One Redis takes both without a word, so a pipeline that spans the
//! partitions of a party would pass every test on one Redis and write nothing on a cluster.
//! [`send`] checks each pipeline before it goes out, on one Redis as on a cluster, and refuses
//! one that spans slots with `CROSSSLOT` (a bug of this crate: `internal` to a client), so the
//! partitioned suites on one Redis fail the way a cluster would.
//!
//! The slot of a command is found as the cluster client finds it: its first key (a script's
//! first key after the key count), every key for the multi-key commands, and an `SPUBLISH`'s
//! channel, which the client routes like a key. Commands that name no key (`MULTI`, `EXEC`,
//! `TIME`, …) go with the rest.

use redis::cluster_routing::Slot;
use redis::{Arg, Cmd, FromRedisValue, Pipeline};

use crate::connect::Conn;
use crate::QueueError;

/// Commands that name no key: they go wherever the pipeline goes.
const KEYLESS: &[&str] = &[
    "MULTI", "EXEC", "DISCARD", "TIME", "PING", "INFO", "WAIT", "WAITAOF", "ECHO",
];

/// Commands whose every argument is a key.
const ALL_KEYS: &[&str] = &["DEL", "EXISTS", "UNLINK", "TOUCH", "MGET", "WATCH"];

/// Runs `pipe` on `conn` once [`check`] found every command in one slot.
pub(crate) async fn send<T: FromRedisValue>(
    pipe: &Pipeline,
    conn: &mut Conn,
) -> Result<T, QueueError> {
    check(pipe)?;
    Ok(pipe.query_async(conn).await?)
}

/// The keys a command routes by (see the module's text).
fn routing_keys(cmd: &Cmd) -> Vec<&[u8]> {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .filter_map(|a| match a {
            Arg::Simple(bytes) => Some(bytes),
            _ => None,
        })
        .collect();
    let Some(name) = args
        .first()
        .map(|n| String::from_utf8_lossy(n).to_ascii_uppercase())
    else {
        return Vec::new();
    };
    match name.as_str() {
        n if KEYLESS.contains(&n) => Vec::new(),
        n if ALL_KEYS.contains(&n) => args[1..].to_vec(),
        "EVAL" | "EVALSHA" | "EVAL_RO" | "EVALSHA_RO" | "FCALL" | "FCALL_RO" => {
            let count = args
                .get(2)
                .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
                .unwrap_or(0);
            args.iter().skip(3).take(count).copied().collect()
        }
        "XGROUP" | "XINFO" | "OBJECT" | "MEMORY" => args.get(2).copied().into_iter().collect(),
        _ => args.get(1).copied().into_iter().collect(),
    }
}

/// The one slot every command of `pipe` routes to (`None`: no command names a key), or
/// `CROSSSLOT` naming the first two keys of different slots.
pub(crate) fn check(pipe: &Pipeline) -> Result<Option<Slot>, QueueError> {
    let mut first: Option<(Slot, &[u8])> = None;
    for cmd in pipe.cmd_iter() {
        for key in routing_keys(cmd) {
            let slot = Slot::for_key(key);
            match first {
                None => first = Some((slot, key)),
                Some((s, _)) if s == slot => {}
                Some((_, other)) => {
                    let detail = format!(
                        "pipeline spans hash slots: {} and {}",
                        String::from_utf8_lossy(other),
                        String::from_utf8_lossy(key)
                    );
                    return Err(redis::RedisError::from((
                        redis::ErrorKind::Server(redis::ServerErrorKind::CrossSlot),
                        "CROSSSLOT",
                        detail,
                    ))
                    .into());
                }
            }
        }
    }
    Ok(first.map(|(slot, _)| slot))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pirq_shared::layout::Layout;

    #[test]
    fn a_pipeline_across_two_slots_is_refused_and_keyless_commands_go_along() {
        let mut one = redis::pipe();
        one.cmd("MULTI")
            .cmd("HSET")
            .arg("{a}:q:1")
            .arg("f")
            .arg("v")
            .cmd("SPUBLISH")
            .arg("{a}:done")
            .arg("1 done")
            .cmd("EVAL")
            .arg("return 1")
            .arg(2)
            .arg("{a}:x")
            .arg("{a}:y")
            .arg("{b}:not-a-key")
            .cmd("EXEC")
            .cmd("TIME");
        assert_eq!(check(&one).unwrap(), Some(Slot::for_key("a")));
        let mut publish = redis::pipe();
        publish
            .cmd("HSET")
            .arg("{a:1}:q:1")
            .arg("f")
            .arg("v")
            .cmd("SPUBLISH")
            .arg("{a}:done")
            .arg("1 done");
        let e = check(&publish).unwrap_err();
        assert_eq!(e.redis_code(), Some("CROSSSLOT"), "{e}");
        assert!(!e.is_transient());
        let mut script = redis::pipe();
        script
            .cmd("EVAL")
            .arg("return 1")
            .arg(2)
            .arg("{a}:x")
            .arg("{b}:y");
        assert!(check(&script).is_err());
        let mut del = redis::pipe();
        del.cmd("DEL").arg("{a}:x").arg("{b}:y");
        assert!(check(&del).is_err());
        assert_eq!(check(&redis::pipe()).unwrap(), None);
    }

    /// Every key and channel a partition's scripts, `MULTI` blocks and pipelines name sits in
    /// the partition's slot; the party's own keys in partition 0's; and the partitions of a
    /// party spread over slots.
    #[test]
    fn every_key_of_a_partition_sits_in_its_slot() {
        let id = "0123456789abcdef0123456789abcdef";
        for count in [1, 4, 16] {
            let layout = Layout::new("pirq").unwrap().with_partitions(count).unwrap();
            let mut slots = std::collections::HashSet::new();
            for (p, keys) in layout.all_partitions() {
                let slot = Slot::for_key(keys.jobs());
                slots.insert(slot);
                for key in [
                    keys.query(id),
                    keys.dead_letters(),
                    keys.idempotency("some key"),
                    keys.partial_sum(id),
                    keys.partial_in(id, 3),
                    keys.events(),
                ] {
                    assert_eq!(Slot::for_key(&key), slot, "{key} of partition {p}");
                }
                if p == 0 {
                    for key in [
                        layout.db(),
                        layout.digests(),
                        layout.party(),
                        layout.workers(),
                        layout.worker("w1"),
                        layout.updates(),
                        layout.fetched_bytes(),
                        layout.partition_count(),
                    ] {
                        assert_eq!(Slot::for_key(&key), slot, "{key}");
                    }
                }
            }
            assert_eq!(
                slots.len(),
                count as usize,
                "{count} partitions, distinct slots"
            );
        }
    }
}
