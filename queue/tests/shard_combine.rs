//! The Redis side of a sharded party against a real `redis-server`, through the worker's own
//! queue code: the start script pins epoch and shard count, partials XOR in once per shard (a
//! replica's second answer changes nothing), the last one completes the query with the XOR of
//! all of them and deletes the stream entry, and a query failed by one shard is never
//! completed by the others.

use std::time::Duration;

use pirq_queue::consumer::{Consumer, EntryId, Outcome, ShardStart};
use pirq_queue::{QueryRecord, RequestId};
use pirq_shared::error::ErrorCode;
use pirq_shared::layout::Layout;
use pirq_shared::shard::ShardSpec;
use pirq_shared::wire::{ErrorBody, Job, QueryStatus};
use pirq_testkit::{jobs, Redis};
use redis::aio::ConnectionManager;

const PS: usize = 256;

async fn shard_queue(redis: &Redis, layout: &Layout, index: u32, consumer: &str) -> Consumer {
    let q = Consumer::new(
        &pirq_queue::RedisTarget::open(&redis.url(), Default::default()).unwrap(),
        layout.clone(),
        consumer.into(),
        Duration::from_millis(100),
        600,
    )
    .unwrap()
    .with_shard(ShardSpec::new(index, 3).unwrap());
    q.ensure_group().await.unwrap();
    q
}

/// What the gateway's submit leaves behind: a queued record and a stream entry.
async fn submit(conn: &mut ConnectionManager, layout: &Layout, id: &str) {
    let job = Job {
        keys: vec![vec![0u8; 40]],
        epoch: None,
        accepted_ms: 1,
        reply: Default::default(),
    };
    jobs::enqueue(conn, layout, id, &job.to_bincode())
        .await
        .unwrap();
}

/// Reads the next entry through `q`'s group and returns its entry id.
async fn read_one(q: &Consumer) -> EntryId {
    let d = q.read(0, 1, Duration::from_millis(500)).await.unwrap();
    assert_eq!(d.len(), 1, "one job delivered to group {}", q.group());
    d[0].entry_id.clone()
}

/// The test's fixed ids as request ids.
fn rid(id: &str) -> RequestId {
    RequestId::parse(id).expect("a request id")
}

fn done(entry_id: &EntryId, id: &str, epoch: u64, byte: u8) -> Outcome {
    Outcome::Done {
        entry_id: entry_id.clone(),
        request_id: rid(id),
        epoch,
        page_size: PS,
        pages: vec![byte; PS].into(),
        scan: Duration::from_micros(10 + byte as u64),
        worker: Duration::from_micros(20),
        accepted_ms: 1,
        digest: Some(digest(1)),
        reply: Default::default(),
    }
}

fn digest(n: u8) -> pirq_shared::digest::Digest {
    pirq_shared::digest::Digest([n; 32])
}

/// A field of the query's combine state `{P}:sh:<id>` ('' when absent).
async fn text(conn: &mut ConnectionManager, layout: &Layout, id: &str, f: &str) -> String {
    let keys = layout.partition(layout.partition_of_id(id));
    let v: Option<String> = redis::cmd("HGET")
        .arg(keys.shard_state(id))
        .arg(f)
        .query_async(conn)
        .await
        .unwrap();
    v.unwrap_or_default()
}

/// The query's record as a gateway reads it.
async fn record(conn: &mut ConnectionManager, layout: &Layout, id: &str) -> Option<QueryRecord> {
    let bytes: Option<Vec<u8>> = redis::cmd("GET")
        .arg(layout.query(id))
        .query_async(conn)
        .await
        .unwrap();
    bytes.map(|b| QueryRecord::decode(&rid(id), &b).unwrap())
}

async fn status(conn: &mut ConnectionManager, layout: &Layout, id: &str) -> QueryStatus {
    record(conn, layout, id).await.unwrap().result.status
}

/// The answer pages of a done query, joined.
async fn pages(conn: &mut ConnectionManager, layout: &Layout, id: &str) -> Option<Vec<u8>> {
    let r = record(conn, layout, id).await?;
    (r.result.status == QueryStatus::Done).then(|| r.result.pages.concat())
}

#[tokio::test]
async fn partials_combine_once_per_shard_and_complete_on_the_last() {
    let redis = Redis::start().await.unwrap();
    let mut conn = redis.manager().await.unwrap();
    let layout = Layout::new("party-s").unwrap();
    let s0 = shard_queue(&redis, &layout, 0, "a0").await;
    let s1 = shard_queue(&redis, &layout, 1, "a1").await;
    let s1_replica = shard_queue(&redis, &layout, 1, "b1").await;
    let s2 = shard_queue(&redis, &layout, 2, "a2").await;
    let id = "0123456789abcdef0123456789abcdef";
    submit(&mut conn, &layout, id).await;
    let (e0, e1, e2) = (
        read_one(&s0).await,
        read_one(&s1).await,
        read_one(&s2).await,
    );
    // Within shard 1 the job went to one consumer only.
    assert!(s1_replica
        .read(0, 1, Duration::from_millis(100))
        .await
        .unwrap()
        .is_empty());

    // The first shard to start pins the epoch; later shards answer at it.
    let job = |epoch| vec![(rid(id), epoch, true)];
    assert_eq!(
        s2.start_shard_window(&job(5)).await.unwrap(),
        vec![ShardStart::At(5)]
    );
    assert_eq!(
        s0.start_shard_window(&job(6)).await.unwrap(),
        vec![ShardStart::At(5)]
    );
    // Running is announced, not stored: the record stays `queued` until it is final.
    assert_eq!(status(&mut conn, &layout, id).await, QueryStatus::Queued);
    assert_eq!(text(&mut conn, &layout, id, "shards").await, "3");

    s0.finish(&[done(&e0, id, 5, 0x01)]).await.unwrap();
    s1.finish(&[done(&e1, id, 5, 0x02)]).await.unwrap();
    // Shard 1 again, as a replica that claimed the job after a reclaim: nothing changes.
    s1_replica.finish(&[done(&e1, id, 5, 0x02)]).await.unwrap();
    assert_eq!(text(&mut conn, &layout, id, "parts").await, "2");
    assert_eq!(status(&mut conn, &layout, id).await, QueryStatus::Queued);
    let sum: Vec<u8> = redis::cmd("GET")
        .arg(layout.partial_sum(id))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(sum, vec![0x03; PS], "shard 1 XORed in once");
    let len: u64 = redis::cmd("XLEN")
        .arg(layout.jobs())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 1, "the entry stays until every shard is in");

    s2.finish(&[done(&e2, id, 5, 0x04)]).await.unwrap();
    let done_record = record(&mut conn, &layout, id).await.unwrap();
    assert_eq!(done_record.result.status, QueryStatus::Done);
    assert_eq!(done_record.result.epoch, Some(5));
    assert_eq!(done_record.result.pages, vec![vec![0x07; PS]]);
    assert_eq!(done_record.scan_us, Some(14), "the slowest shard's");
    assert_eq!(done_record.result.digest, Some(digest(1)));
    assert_eq!(
        text(&mut conn, &layout, id, "parts").await,
        "",
        "the state is dropped"
    );
    let len: u64 = redis::cmd("XLEN")
        .arg(layout.jobs())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 0, "the entry is deleted once the query is complete");
    let exists: bool = redis::cmd("EXISTS")
        .arg(layout.partial_sum(id))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!exists, "the running sum is dropped");
    // Every shard's group acknowledged it.
    for q in [&s0, &s1, &s2] {
        let pending: redis::Value = redis::cmd("XPENDING")
            .arg(layout.jobs())
            .arg(q.group())
            .query_async(&mut conn)
            .await
            .unwrap();
        let redis::Value::Array(summary) = pending else {
            panic!("{pending:?}")
        };
        assert_eq!(summary[0], redis::Value::Int(0), "group {}", q.group());
    }
    // A late duplicate after completion leaves the answer alone.
    s1_replica.finish(&[done(&e1, id, 5, 0x55)]).await.unwrap();
    assert_eq!(pages(&mut conn, &layout, id).await.unwrap(), vec![0x07; PS]);
}

#[tokio::test]
async fn a_shard_that_gives_up_fails_the_query_for_every_shard() {
    let redis = Redis::start().await.unwrap();
    let mut conn = redis.manager().await.unwrap();
    let layout = Layout::new("party-f").unwrap();
    let s0 = shard_queue(&redis, &layout, 0, "a0").await;
    let s1 = shard_queue(&redis, &layout, 1, "a1").await;
    let s2 = shard_queue(&redis, &layout, 2, "a2").await;
    let id = "fedcba9876543210fedcba9876543210";
    submit(&mut conn, &layout, id).await;
    let (e0, e1, e2) = (
        read_one(&s0).await,
        read_one(&s1).await,
        read_one(&s2).await,
    );
    let job = vec![(rid(id), 0, true)];
    s0.start_shard_window(&job).await.unwrap();
    s0.finish(&[done(&e0, id, 0, 0x01)]).await.unwrap();
    // Shard 1 keeps failing the job: on its last delivery it dead-letters it.
    s1.finish(&[Outcome::DeadLetter {
        entry_id: e1.clone(),
        request_id: Some(rid(id)),
        error: ErrorBody::new(ErrorCode::ScanFailed, "gave up after 3 deliveries: boom"),
        deliveries: 3,
        reply: Default::default(),
    }])
    .await
    .unwrap();
    let failed = record(&mut conn, &layout, id).await.unwrap();
    assert_eq!(failed.result.status, QueryStatus::Failed);
    assert!(failed.result.error.unwrap().message.contains("boom"));
    let len: u64 = redis::cmd("XLEN")
        .arg(layout.jobs())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 0, "deleted for every shard");
    // Shard 2 meets a final query: nothing to answer, and a partial it already had is dropped.
    assert_eq!(
        s2.start_shard_window(&job).await.unwrap(),
        vec![ShardStart::Settled]
    );
    s2.finish(&[done(&e2, id, 0, 0x04)]).await.unwrap();
    assert_eq!(status(&mut conn, &layout, id).await, QueryStatus::Failed);
    assert_eq!(pages(&mut conn, &layout, id).await, None);
}

#[tokio::test]
async fn a_query_half_answered_by_another_shard_count_is_not_mixed() {
    let redis = Redis::start().await.unwrap();
    let mut conn = redis.manager().await.unwrap();
    let layout = Layout::new("party-r").unwrap();
    let s0 = shard_queue(&redis, &layout, 0, "a0").await;
    let (old, fresh) = (
        "00000000000000000000000000000001",
        "00000000000000000000000000000002",
    );
    submit(&mut conn, &layout, old).await;
    submit(&mut conn, &layout, fresh).await;
    // `old` was started and half answered by a 2-shard layout; `fresh` was only queued.
    let _: () = redis::cmd("HSET")
        .arg(layout.partition(0).shard_state(old))
        .arg("shards")
        .arg(2)
        .arg("parts")
        .arg(1)
        .arg("epoch")
        .arg(0)
        .query_async(&mut conn)
        .await
        .unwrap();
    let jobs = vec![(rid(old), 0, true), (rid(fresh), 0, true)];
    assert_eq!(
        s0.start_shard_window(&jobs).await.unwrap(),
        vec![ShardStart::OtherShardCount, ShardStart::At(0)]
    );
    assert_eq!(text(&mut conn, &layout, fresh, "shards").await, "3");
}

#[tokio::test]
async fn shards_answering_from_different_databases_fail_the_query() {
    let redis = Redis::start().await.unwrap();
    let mut conn = redis.manager().await.unwrap();
    let layout = Layout::new("party-d").unwrap();
    let s0 = shard_queue(&redis, &layout, 0, "a0").await;
    let s1 = shard_queue(&redis, &layout, 1, "a1").await;
    let id = "0000000000000000000000000000000d";
    submit(&mut conn, &layout, id).await;
    let (e0, e1) = (read_one(&s0).await, read_one(&s1).await);
    s0.start_shard_window(&[(rid(id), 0, true)]).await.unwrap();
    s0.finish(&[done(&e0, id, 0, 0x01)]).await.unwrap();
    let mut other = done(&e1, id, 0, 0x02);
    if let Outcome::Done { digest: d, .. } = &mut other {
        *d = Some(digest(2));
    }
    s1.finish(&[other]).await.unwrap();
    let failed = record(&mut conn, &layout, id).await.unwrap();
    assert_eq!(failed.result.status, QueryStatus::Failed);
    assert!(failed
        .result
        .error
        .unwrap()
        .message
        .contains("different digests"));
}
