//! A window's end: every outcome written (an answer's record, a shard's partial, a failure, a
//! dead letter), announced, and its entry acknowledged and deleted or handed back, one pipeline
//! per partition in blocks of [`FINISH_BLOCK`].

use std::time::Duration;

use pirq_shared::layout::PartitionKeys;
use pirq_shared::wire::{ErrorBody, Reply};

use super::{Consumer, Outcome};
use crate::record::{self, DoneFields, Frames, IdempotencyNet, Written};
use crate::{one_slot, scripts, QueueError, RequestId};

/// Outcomes per block when a window's outcomes are written ([`Consumer::finish`]): small enough
/// that the first answers are announced while Redis still reads the rest, large enough that a
/// block's one `SPUBLISH`, `XACK` and `XDEL` stay a small share of its commands (16 answers of
/// 4 KiB are 64 KiB, a few reads of Redis' 16 KiB input buffer).
pub const FINISH_BLOCK: usize = 16;

/// How long the final record of a query whose client a gateway holds (`Prefer: wait`) is kept
/// when it is written well before the gateway's deadline: the answer reaches that gateway in
/// the completion event, and the record is only a net for an event the gateway missed (its
/// subscription reconnecting), which its waiters read again within [`HELD_KEEP`] (they re-read
/// every 2 s and at once after a reconnect). Kept for `--result-ttl` like any other result it
/// would count against Redis' memory for minutes, for nobody.
pub const HELD_KEEP: Duration = Duration::from_secs(5);

/// A job finished less than this before its gateway's deadline is kept for `--result-ttl`: the
/// gateway may have given up waiting (its clock and the worker's differ by a little; it answers
/// 202 at the deadline), and its client then polls for the record.
pub const HELD_SLACK: Duration = Duration::from_secs(2);

/// [`Consumer`]'s keep time for a final record written at `now_ms` whose full time is
/// `full_ms` (`--result-ttl`): a held request's record, written well before its gateway's
/// deadline, is kept what the gateway asked within [`HELD_KEEP`] (at least 1 ms); any other
/// record the full time.
fn held_keep_ms(reply: &Reply, now_ms: u64, full_ms: u64) -> u64 {
    if !held_brief(reply, now_ms) {
        return full_ms;
    }
    let bound = HELD_KEEP.as_millis() as u64;
    reply
        .held_keep_ms
        .unwrap_or(bound)
        .clamp(1, bound)
        .min(full_ms)
}

/// Whether a job with `reply` finished at `now_ms` is a held request's answered well before
/// its gateway's deadline ([`HELD_SLACK`]): its gateway will hand the answer over from the
/// event, and its record is only a net, kept briefly.
fn held_brief(reply: &Reply, now_ms: u64) -> bool {
    matches!(reply.held_until_ms, Some(until) if now_ms + (HELD_SLACK.as_millis() as u64) < until)
}

/// Where a held query's net goes when its gateway asked for it in the Idempotency-Key record
/// ([`Reply::idempotency_fingerprint`]) and it is answered well before the deadline: `(the
/// key, the fingerprint)`. The stream is not trusted: a fingerprint that is not 32 hex digits
/// (what the gateway writes) is not used, and the query gets its own record.
fn idempotency_net(reply: &Reply, now_ms: u64) -> Option<(&str, &str)> {
    let key = reply.idempotency_key.as_deref()?;
    let fp = reply.idempotency_fingerprint.as_deref()?;
    let hex = fp.len() == 32 && fp.bytes().all(|b| b.is_ascii_hexdigit());
    (hex && held_brief(reply, now_ms)).then_some((key, fp))
}

/// The Idempotency-Key of a held request (`Reply::held_keep_ms` set: its gateway holds the
/// request and hands the answer over from the event), whose record an unsharded worker shortens
/// with the answer's ([`Reply::held_keep_ms`] documents the promise to the gateway).
fn held_idempotency(reply: &Reply) -> Option<&str> {
    reply.held_keep_ms?;
    reply.idempotency_key.as_deref()
}

impl Consumer {
    /// How long the final record of a job with `reply` is kept, in milliseconds: briefly when
    /// its gateway holds the client's request and will hand the answer over from the event
    /// (what the gateway asked, [`Reply::held_keep_ms`], within [`HELD_KEEP`]), else
    /// `--result-ttl`.
    fn keep_ms(&self, reply: &Reply) -> u64 {
        held_keep_ms(reply, record::unix_ms(), self.result_ttl * 1000)
    }

    /// Writes every outcome of a window, announces it, then acknowledges and deletes the
    /// entries (and hands back the ones to retry). A shard of a sharded party writes its
    /// answers as partials through the combine script, which acknowledges them itself and
    /// deletes the entry once the last shard's partial completed the query
    /// (`queue/lua/shard_combine.lua`).
    ///
    /// One pipeline (one round trip) per partition the outcomes belong to, all sent at once:
    /// each partition's keys and status channel sit in one hash slot, so on a Redis Cluster each
    /// pipeline goes to the node serving it ([`Consumer::finish_pipelines`]). Each pipeline is
    /// cut into blocks of [`FINISH_BLOCK`] outcomes: a block is each answer's `SET`, then one
    /// `SPUBLISH` carrying the block's records, then one `XACK` and one `XDEL` of its entries;
    /// Redis announces a block's results as soon as it has run it. No `MULTI`: Redis runs a
    /// connection's commands in order, so an entry is never acknowledged before its result is
    /// written; a worker that dies half-way leaves results written and entries unacknowledged,
    /// which are delivered again and written again with the same bytes.
    pub async fn finish(&self, outcomes: &[Outcome]) -> Result<(), QueueError> {
        if outcomes.is_empty() {
            return Ok(());
        }
        let sends = self.finish_pipelines(outcomes).into_iter().map(|pipe| {
            let mut conn = self.writer.clone();
            async move { one_slot::send::<()>(&pipe, &mut conn).await }
        });
        futures::future::try_join_all(sends).await?;
        self.forget(outcomes.iter().map(Outcome::entry_id));
        Ok(())
    }

    /// The pipelines of [`Consumer::finish`]: one per partition among `outcomes` (ascending),
    /// each of blocks of at most [`FINISH_BLOCK`] outcomes, in the order given.
    fn finish_pipelines(&self, outcomes: &[Outcome]) -> Vec<redis::Pipeline> {
        let mut ordered: Vec<&Outcome> = outcomes.iter().collect();
        ordered.sort_by_key(|o| o.entry_id().partition);
        ordered
            .chunk_by(|a, b| a.entry_id().partition == b.entry_id().partition)
            .map(|partition| {
                let mut pipe = redis::pipe();
                for block in partition.chunks(FINISH_BLOCK) {
                    self.finish_block(&mut pipe, block);
                }
                pipe
            })
            .collect()
    }

    /// The commands of one block of [`Consumer::finish`].
    fn finish_block(&self, pipe: &mut redis::Pipeline, outcomes: &[&Outcome]) {
        let Some(first) = outcomes.first() else {
            return;
        };
        let keys = self.keys(first.entry_id().partition);
        let events = keys.events();
        let mut frames = Frames::default();
        let mut acked: Vec<&str> = Vec::new();
        for outcome in outcomes.iter().copied() {
            match outcome {
                Outcome::Done {
                    entry_id,
                    request_id,
                    epoch,
                    page_size,
                    pages,
                    scan,
                    worker,
                    digest,
                    reply,
                    ..
                } => {
                    let done = DoneFields {
                        epoch: *epoch,
                        page_size: *page_size,
                        pages,
                        scan: *scan,
                        worker: *worker,
                        digest: *digest,
                    };
                    if self.shard.is_whole() {
                        let record = self.done_cmds(pipe, keys, request_id, &done, reply);
                        frames.push(*request_id, record);
                        acked.push(&entry_id.id);
                    } else {
                        self.partial_cmds(pipe, keys, &entry_id.id, request_id, &done, reply);
                    }
                }
                Outcome::Failed {
                    entry_id,
                    request_id,
                    error,
                    worker,
                    reply,
                } => {
                    self.fail_cmds(pipe, keys, request_id, error, *worker, reply);
                    acked.push(&entry_id.id);
                }
                Outcome::Discard { entry_id } | Outcome::Settled { entry_id } => {
                    acked.push(&entry_id.id)
                }
                Outcome::Retry {
                    entry_id,
                    deliveries,
                } => self.release_cmd(pipe, entry_id, *deliveries),
                Outcome::DeadLetter {
                    entry_id,
                    request_id,
                    error,
                    deliveries,
                    reply,
                } => {
                    scripts::DEAD_LETTER
                        .eval(pipe, 2)
                        .arg(keys.jobs())
                        .arg(keys.dead_letters())
                        .arg(&entry_id.id)
                        .arg(self.policy.dead_letter_max)
                        .arg(&error.code)
                        .arg(&error.message)
                        .arg(*deliveries)
                        .arg(&self.consumer)
                        .ignore();
                    if let Some(request_id) = request_id {
                        self.fail_cmds(pipe, keys, request_id, error, Duration::ZERO, reply);
                    }
                    acked.push(&entry_id.id);
                }
            }
        }
        if !frames.is_empty() {
            pipe.cmd("SPUBLISH").arg(&events).arg(&frames).ignore();
        }
        if !acked.is_empty() {
            if self.uses_xackdel() && self.shard.is_whole() {
                pipe.cmd("XACKDEL")
                    .arg(keys.jobs())
                    .arg(&self.group)
                    .arg("IDS")
                    .arg(acked.len())
                    .arg(&acked)
                    .ignore();
            } else {
                pipe.cmd("XACK")
                    .arg(keys.jobs())
                    .arg(&self.group)
                    .arg(&acked)
                    .ignore();
                pipe.cmd("XDEL").arg(keys.jobs()).arg(&acked).ignore();
            }
        }
    }

    /// An answer's record, `SET` with its keep time (and a held query's Idempotency-Key record
    /// shortened to the same); returns the record for the block's event.
    fn done_cmds(
        &self,
        pipe: &mut redis::Pipeline,
        keys: &PartitionKeys,
        request_id: &RequestId,
        done: &DoneFields,
        reply: &Reply,
    ) -> Written {
        let record = Written::done(done, reply.idempotency_key.as_deref());
        let now = record::unix_ms();
        let keep = held_keep_ms(reply, now, self.result_ttl * 1000);
        if let Some((key, fingerprint)) = idempotency_net(reply, now) {
            // The net in the key's record, which the gateway's submit claimed with
            // `"<fingerprint> <id>"` and which this write shortens to the net's keep time: one
            // key and one command instead of the query's record and a `PEXPIRE … LT` of the
            // key's. The gateway asked only where the key's record outlasts the wait, so it is
            // still this query's.
            let net = IdempotencyNet {
                fingerprint,
                id: request_id,
                record: &record,
            };
            pipe.cmd("SET")
                .arg(keys.idempotency(key))
                .arg(net)
                .arg("PX")
                .arg(keep)
                .ignore();
            return record;
        }
        pipe.cmd("SET")
            .arg(keys.query(request_id.as_str()))
            .arg(&record)
            .arg("PX")
            .arg(keep)
            .ignore();
        if let Some(key) = held_idempotency(reply) {
            // A held query's Idempotency-Key record is kept as briefly as its record, here in
            // the block's pipeline, instead of by the gateway after the hand-over (a round trip
            // and a task a query).
            pipe.cmd("PEXPIRE")
                .arg(keys.idempotency(key))
                .arg(keep)
                .arg("LT")
                .ignore();
        }
        record
    }

    /// A shard's partial answer: the combine script XORs it in and acknowledges the entry.
    /// Every shard stamps the digest of the database it answered from (the whole database's);
    /// the script fails the query if two shards differ.
    fn partial_cmds(
        &self,
        pipe: &mut redis::Pipeline,
        keys: &PartitionKeys,
        entry_id: &str,
        request_id: &RequestId,
        done: &DoneFields,
        reply: &Reply,
    ) {
        scripts::SHARD_COMBINE
            .eval(pipe, 5)
            .arg(keys.query(request_id.as_str()))
            .arg(keys.partial_sum(request_id.as_str()))
            .arg(keys.partial_in(request_id.as_str(), self.shard.index))
            .arg(keys.jobs())
            .arg(keys.shard_state(request_id.as_str()))
            .arg(self.shard.index)
            .arg(self.shard.count)
            .arg(done.pages)
            .arg(done.epoch)
            .arg(done.page_size)
            .arg(done.scan.as_micros() as u64)
            .arg(done.worker.as_micros() as u64)
            .arg(self.keep_ms(reply))
            .arg(entry_id)
            .arg(&self.group)
            .arg(keys.events())
            .arg(request_id.as_str())
            .arg(done.digest.map(|d| d.to_hex()).unwrap_or_default())
            .arg(reply.idempotency_key.as_deref().unwrap_or("-"))
            .ignore();
    }

    /// A failure: written and announced by `fail.lua` unless the query is done already.
    fn fail_cmds(
        &self,
        pipe: &mut redis::Pipeline,
        keys: &PartitionKeys,
        request_id: &RequestId,
        error: &ErrorBody,
        worker: Duration,
        reply: &Reply,
    ) {
        scripts::FAIL
            .eval(pipe, 1)
            .arg(keys.query(request_id.as_str()))
            .arg(record::failed(
                error,
                worker,
                reply.idempotency_key.as_deref(),
            ))
            .arg(self.keep_ms(reply))
            .arg(keys.events())
            .arg(request_id.as_str())
            .ignore();
    }
}

#[cfg(test)]
mod held_keep_tests {
    use super::*;

    fn held(until: u64, keep: Option<u64>) -> Reply {
        Reply {
            held_until_ms: Some(until),
            held_keep_ms: keep,
            idempotency_key: None,
            idempotency_fingerprint: None,
        }
    }

    #[test]
    fn a_held_record_is_kept_what_its_gateway_asked_within_the_bound() {
        let full = 60_000;
        let bound = HELD_KEEP.as_millis() as u64;
        let now = 1_000_000;
        let early = now + 30_000;
        // The gateway's read-result retention, when shorter than the bound.
        assert_eq!(held_keep_ms(&held(early, Some(700)), now, full), 700);
        // Never longer than the bound, never zero (a PX of 0 is an error).
        assert_eq!(held_keep_ms(&held(early, Some(60_000)), now, full), bound);
        assert_eq!(held_keep_ms(&held(early, Some(0)), now, full), 1);
        // Without a wish: the bound.
        assert_eq!(held_keep_ms(&held(early, None), now, full), bound);
        // Finished close to the deadline: the gateway may answer 202, the client polls.
        assert_eq!(held_keep_ms(&held(now + 1_000, Some(700)), now, full), full);
        // Not held: the full time.
        assert_eq!(held_keep_ms(&Reply::default(), now, full), full);
    }

    #[test]
    fn a_held_querys_net_goes_to_its_idempotency_record_only_when_asked_and_early() {
        let now = 1_000_000;
        let fp = "00112233445566778899aabbccddeeff";
        let asked = |until: u64, fp: &str| Reply {
            held_until_ms: Some(until),
            held_keep_ms: Some(700),
            idempotency_key: Some("k".into()),
            idempotency_fingerprint: Some(fp.into()),
        };
        assert_eq!(
            idempotency_net(&asked(now + 30_000, fp), now),
            Some(("k", fp))
        );
        // Close to the deadline: the gateway may answer 202 and the client poll the record.
        assert_eq!(idempotency_net(&asked(now + 1_000, fp), now), None);
        // Not a fingerprint the gateway writes (the stream is not trusted).
        assert_eq!(idempotency_net(&asked(now + 30_000, "x\ny"), now), None);
        // Not asked, or no key.
        let mut plain = asked(now + 30_000, fp);
        plain.idempotency_fingerprint = None;
        assert_eq!(idempotency_net(&plain, now), None);
        plain = asked(now + 30_000, fp);
        plain.idempotency_key = None;
        assert_eq!(idempotency_net(&plain, now), None);
    }
}

#[cfg(test)]
mod one_slot_tests {
    use super::*;
    use crate::connect::TlsFiles;
    use crate::consumer::EntryId;
    use crate::one_slot;
    use crate::record::Pages;
    use crate::RedisTarget;
    use pirq_shared::error::ErrorCode;
    use pirq_shared::layout::Layout;
    use pirq_shared::shard::ShardSpec;

    /// A window's outcomes from every partition: Done, Failed, DeadLetter, Retry and Settled.
    fn window(partitions: u32) -> Vec<Outcome> {
        let mut outcomes = Vec::new();
        for p in 0..partitions {
            for n in 0..(FINISH_BLOCK as u32 + 3) {
                let entry_id = EntryId {
                    partition: p,
                    id: format!("{n}-0"),
                };
                let request_id = RequestId::mint_in(p, partitions);
                let error = ErrorBody::new(ErrorCode::InvalidJob, "bad job");
                outcomes.push(match n % 5 {
                    0 | 1 => Outcome::Done {
                        entry_id,
                        request_id,
                        epoch: 3,
                        page_size: 4,
                        pages: Pages::new(vec![bytes::Bytes::from_static(b"abcd")]),
                        scan: Duration::from_millis(1),
                        worker: Duration::from_millis(2),
                        accepted_ms: 0,
                        digest: None,
                        reply: Reply::default(),
                    },
                    2 => Outcome::Failed {
                        entry_id,
                        request_id,
                        error,
                        worker: Duration::ZERO,
                        reply: Reply {
                            held_until_ms: Some(u64::MAX),
                            held_keep_ms: None,
                            idempotency_key: Some("k".into()),
                            idempotency_fingerprint: None,
                        },
                    },
                    3 => Outcome::DeadLetter {
                        entry_id,
                        request_id: Some(request_id),
                        error,
                        deliveries: 3,
                        reply: Reply::default(),
                    },
                    _ => Outcome::Retry {
                        entry_id,
                        deliveries: 1,
                    },
                });
            }
        }
        outcomes
    }

    /// The result writes of a window holding jobs of every partition: one pipeline per
    /// partition, each in that partition's slot (its records, stream, dead letters and status
    /// channel), for an unsharded worker and a shard's; with one partition, one pipeline.
    #[tokio::test]
    async fn a_windows_result_writes_keep_to_one_slot_per_pipeline() {
        let target = RedisTarget::open("redis://127.0.0.1:1", TlsFiles::default()).unwrap();
        for partitions in [1, 4] {
            let layout = Layout::new("pirq")
                .unwrap()
                .with_partitions(partitions)
                .unwrap();
            for shard in [ShardSpec::WHOLE, ShardSpec { index: 1, count: 2 }] {
                let consumer =
                    Consumer::new(&target, layout.clone(), "w".into(), Duration::ZERO, 60)
                        .unwrap()
                        .with_shard(shard);
                let pipes = consumer.finish_pipelines(&window(partitions));
                assert_eq!(pipes.len(), partitions as usize);
                for (p, pipe) in pipes.iter().enumerate() {
                    let slot = one_slot::check(pipe).unwrap();
                    let tag = layout.partition(p as u32).jobs();
                    assert_eq!(slot, Some(redis::cluster_routing::Slot::for_key(tag)));
                }
                // The blocks of every partition in one pipeline (as before partitions could
                // sit on several nodes) is what a cluster refuses.
                if partitions > 1 {
                    let outcomes = window(partitions);
                    let ordered: Vec<&Outcome> = outcomes.iter().collect();
                    let mut all = redis::pipe();
                    for partition in
                        ordered.chunk_by(|a, b| a.entry_id().partition == b.entry_id().partition)
                    {
                        consumer.finish_block(&mut all, partition);
                    }
                    assert!(one_slot::check(&all).is_err());
                }
            }
        }
    }
}
