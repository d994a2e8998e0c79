//! The shards of a sharded party, as its workers' heartbeats describe them.
//!
//! A sharded party (`{P}:db` field `shards` = S > 1) answers a query only once every shard has
//! XORed in its partial, so it can serve only while every shard has a live worker at the newest
//! epoch: `/readyz` says so, and `/v1/info` lists each shard with its pages and workers. Queries
//! are accepted meanwhile and wait in the stream for the missing shard.

use pirq_shared::shard::ShardSpec;
use pirq_shared::wire::{EpochRange, ShardInfo, ShardWorker};

use pirq_queue::{RegisteredDb, WorkerRecord};

/// Every shard of the party with its live workers; empty for an unsharded party. `records`
/// are the live workers' heartbeat records.
pub fn view(db: &RegisteredDb, records: &[WorkerRecord]) -> Vec<ShardInfo> {
    if db.shards <= 1 {
        return Vec::new();
    }
    let ranges = ShardSpec::all_ranges(db.shards, db.num_pages).unwrap_or_default();
    (0..db.shards)
        .map(|index| {
            let workers: Vec<ShardWorker> = records
                .iter()
                .filter_map(|r| {
                    let spec: ShardSpec = r.shard?;
                    let epoch: EpochRange = r.window?;
                    (spec
                        == ShardSpec {
                            index,
                            count: db.shards,
                        })
                    .then(|| ShardWorker {
                        id: r.worker_id.clone(),
                        epoch,
                    })
                })
                .collect();
            let ready = workers.iter().any(|w| w.epoch.newest >= db.epoch);
            let pages = ranges
                .get(index as usize)
                .map_or([0, 0], |r| [r.start, r.end]);
            ShardInfo {
                index,
                count: db.shards,
                pages,
                workers,
                ready,
            }
        })
        .collect()
}

/// Why the party cannot answer with its live workers, when they serve more than one shard
/// layout (shard counts; unsharded is one): their shards overlap, and a query started by one
/// layout's workers could never be completed by the other's. Workers refuse to register into
/// such a mix; this covers two started at the same moment, and workers of older versions.
pub fn layout_conflict(records: &[WorkerRecord]) -> Option<String> {
    let mut counts: Vec<(u32, Vec<String>)> = Vec::new();
    for record in records {
        let (id, spec) = (&record.worker_id, record.shard());
        match counts.iter_mut().find(|(c, _)| *c == spec.count) {
            Some((_, ids)) => ids.push(format!("{id} ({spec})")),
            None => counts.push((spec.count, vec![format!("{id} ({spec})")])),
        }
    }
    if counts.len() < 2 {
        return None;
    }
    counts.sort_by_key(|(c, _)| *c);
    let layouts: Vec<String> = counts
        .iter()
        .map(|(c, ids)| {
            let name = if *c == 1 {
                "unsharded".to_string()
            } else {
                format!("{c} shards")
            };
            format!("{name}: {}", ids.join(", "))
        })
        .collect();
    Some(format!(
        "the live workers serve {} shard layouts at once ({}); the party answers only with one \
         complete layout: stop the workers of all but one",
        counts.len(),
        layouts.join("; ")
    ))
}

/// Why the party is not ready, `None` when every shard is.
pub fn not_ready(db: &RegisteredDb, shards: &[ShardInfo]) -> Option<String> {
    let missing: Vec<String> = shards
        .iter()
        .filter(|s| !s.ready)
        .map(|s| format!("{}/{}", s.index, s.count))
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "shard{} {} ha{} no live worker at epoch {}; queries wait until {} up",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", "),
            if missing.len() == 1 { "s" } else { "ve" },
            db.epoch,
            if missing.len() == 1 {
                "it is"
            } else {
                "they are"
            },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn db(epoch: u64) -> RegisteredDb {
        RegisteredDb {
            num_pages: 1000,
            page_size: 256,
            domain_bits: 10,
            epoch,
            min_epoch: 0,
            shards: 3,
        }
    }

    fn worker(id: &str, index: u32, newest: u64) -> WorkerRecord {
        serde_json::from_value(json!({
            "worker_id": id, "shard": {"index": index, "count": 3},
            "window": {"oldest": 0, "newest": newest},
        }))
        .unwrap()
    }

    #[test]
    fn every_shard_needs_a_live_worker_at_the_newest_epoch() {
        let records = vec![worker("a", 0, 2), worker("b", 1, 1), worker("c", 1, 2)];
        let shards = view(&db(2), &records);
        assert_eq!(shards.len(), 3);
        assert_eq!(shards[2].pages, [512, 1000]);
        assert_eq!(shards[1].workers.len(), 2);
        assert!(shards[0].ready && shards[1].ready && !shards[2].ready);
        let why = not_ready(&db(2), &shards).unwrap();
        assert!(
            why.starts_with("shard 2/3 has no live worker at epoch 2"),
            "{why}"
        );
        // A worker behind the newest epoch does not make its shard ready.
        let behind = view(
            &db(3),
            &[worker("a", 0, 3), worker("b", 1, 2), worker("d", 2, 3)],
        );
        assert_eq!(
            not_ready(&db(3), &behind).unwrap(),
            "shard 1/3 has no live worker at epoch 3; queries wait until it is up"
        );
        let all = view(
            &db(2),
            &[worker("a", 0, 2), worker("b", 1, 2), worker("d", 2, 5)],
        );
        assert_eq!(not_ready(&db(2), &all), None);
    }

    #[test]
    fn two_layouts_at_once_are_named() {
        let whole: WorkerRecord = serde_json::from_value(json!({"worker_id": "w"})).unwrap();
        assert_eq!(
            layout_conflict(&[worker("a", 0, 2), worker("b", 1, 2)]),
            None
        );
        assert_eq!(layout_conflict(std::slice::from_ref(&whole)), None);
        let mixed = vec![worker("a", 0, 2), whole, worker("b", 1, 2)];
        let why = layout_conflict(&mixed).unwrap();
        assert_eq!(
            why,
            "the live workers serve 2 shard layouts at once (unsharded: w (0/1); 3 shards: \
             a (0/3), b (1/3)); the party answers only with one complete layout: stop the \
             workers of all but one"
        );
    }

    #[test]
    fn unsharded_parties_list_no_shards() {
        let unsharded = RegisteredDb { shards: 1, ..db(0) };
        assert!(view(&unsharded, &[worker("a", 0, 0)]).is_empty());
    }
}
