//! `Producer::submit` against a real Redis: what the two pipelines of a batch promise without a
//! script (docs/redis.md, "Submits go in batches"). A known Idempotency-Key queues nothing and
//! is answered even when the backlog is full; past the backlog bound nothing is queued and the
//! key claimed for it is released, so its retry is a new request; a polled query's `queued`
//! record follows its job and never replaces a final record; a batch of concurrent submits
//! queues each once.

use std::time::Duration;

use pirq_queue::producer::{Producer, SubmitChecks, Submitted};
use pirq_queue::{RedisTarget, RequestId};
use pirq_shared::layout::Layout;
use pirq_shared::wire::Job;
use pirq_testkit::jobs::one_key_job;
use pirq_testkit::Redis;
use redis::aio::ConnectionManager;

const FP: &str = "0123456789abcdef0123456789abcdef";

fn checks(max_backlog: u64, key: Option<&str>) -> SubmitChecks<'_> {
    SubmitChecks {
        pending_ttl: 60,
        record_held: false,
        max_backlog,
        idempotency: key.map(|k| (k, FP, 600)),
    }
}

/// A job whose gateway holds the request (no `queued` record).
fn held_job() -> Job {
    let mut job = one_key_job();
    job.reply.held_until_ms = Some(u64::MAX);
    job
}

async fn xlen(conn: &mut ConnectionManager, layout: &Layout) -> u64 {
    redis::cmd("XLEN")
        .arg(layout.jobs())
        .query_async(conn)
        .await
        .unwrap()
}

async fn get(conn: &mut ConnectionManager, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query_async(conn).await.unwrap()
}

async fn start() -> (Redis, Producer, Layout, ConnectionManager) {
    let redis = Redis::start().await.unwrap();
    let target = RedisTarget::open(&redis.url(), Default::default()).unwrap();
    let layout = Layout::new("submit").unwrap();
    let producer = Producer::new(&target, layout.clone(), Duration::from_secs(5)).unwrap();
    let conn = redis.manager().await.unwrap();
    (redis, producer, layout, conn)
}

#[tokio::test]
async fn a_known_key_queues_nothing_and_is_answered_even_when_the_backlog_is_full() {
    let (_redis, producer, layout, mut conn) = start().await;
    let first = producer.mint_id(Some("k1"));
    let queued = producer
        .submit(&first, &held_job(), &checks(2, Some("k1")))
        .await
        .unwrap();
    assert_eq!(queued, Submitted::Queued);
    assert_eq!(
        get(&mut conn, &layout.idempotency("k1")).await.as_deref(),
        Some(format!("{FP} {first}").as_str()),
        "the key is claimed for the first request"
    );
    // A replay, through another id: the first request's id, nothing queued.
    let again = producer.mint_id(Some("k1"));
    let replay = producer
        .submit(&again, &held_job(), &checks(2, Some("k1")))
        .await
        .unwrap();
    assert_eq!(
        replay,
        Submitted::Known {
            same_request: true,
            id: Some(first),
            net: None
        }
    );
    assert_eq!(xlen(&mut conn, &layout).await, 1);
    // Fill the backlog (bound 2), then replay: still the first request's id.
    let other = producer.mint_id(None);
    assert_eq!(
        producer
            .submit(&other, &held_job(), &checks(2, None))
            .await
            .unwrap(),
        Submitted::Queued
    );
    let replay = producer
        .submit(&again, &held_job(), &checks(2, Some("k1")))
        .await
        .unwrap();
    assert!(
        matches!(replay, Submitted::Known { id: Some(id), .. } if id == first),
        "{replay:?}"
    );
    assert_eq!(xlen(&mut conn, &layout).await, 2);
}

#[tokio::test]
async fn past_the_backlog_bound_nothing_is_queued_and_the_claim_is_released() {
    let (_redis, producer, layout, mut conn) = start().await;
    // Three concurrent submits against a bound of 2: they go in one batch or several, and
    // either way exactly two are queued and one is refused.
    let mut submits = Vec::new();
    for key in ["a", "b", "c"] {
        let producer = producer.clone();
        submits.push(tokio::spawn(async move {
            let id = producer.mint_id(Some(key));
            let got = producer
                .submit(&id, &held_job(), &checks(2, Some(key)))
                .await
                .unwrap();
            (key, got)
        }));
    }
    let mut refused = Vec::new();
    for submit in submits {
        match submit.await.unwrap() {
            (_, Submitted::Queued) => {}
            (key, Submitted::Full { backlog }) => {
                assert_eq!(backlog, 2);
                refused.push(key);
            }
            (key, other) => panic!("{key}: {other:?}"),
        }
    }
    assert_eq!(refused.len(), 1, "one of three refused at a bound of 2");
    assert_eq!(xlen(&mut conn, &layout).await, 2);
    // The refused request's key is free again: its retry is queued as a new request once there
    // is room (here: the bound lifted).
    let key = refused[0];
    assert_eq!(get(&mut conn, &layout.idempotency(key)).await, None);
    let retry = producer.mint_id(Some(key));
    assert_eq!(
        producer
            .submit(&retry, &held_job(), &checks(0, Some(key)))
            .await
            .unwrap(),
        Submitted::Queued
    );
    assert_eq!(xlen(&mut conn, &layout).await, 3);
}

#[tokio::test]
async fn a_polled_querys_record_follows_its_job_and_never_hides_a_final_one() {
    let (_redis, producer, layout, mut conn) = start().await;
    let polled = producer.mint_id(None);
    assert_eq!(
        producer
            .submit(&polled, &one_key_job(), &checks(0, None))
            .await
            .unwrap(),
        Submitted::Queued
    );
    assert_eq!(
        get(&mut conn, &layout.query(polled.as_str()))
            .await
            .as_deref(),
        Some("queued 1 1 -")
    );
    assert_eq!(xlen(&mut conn, &layout).await, 1);
    // A held one writes no record.
    let held = producer.mint_id(None);
    producer
        .submit(&held, &held_job(), &checks(0, None))
        .await
        .unwrap();
    assert_eq!(get(&mut conn, &layout.query(held.as_str())).await, None);
    // A final record already there (a worker faster than the record, or a replay queued
    // again under its id) is left as it is.
    let answered = RequestId::parse(&format!("{:032x}", 42u128)).unwrap();
    let done = "done 1 4096 1 1 - -\n";
    let _: () = redis::cmd("SET")
        .arg(layout.query(answered.as_str()))
        .arg(done)
        .query_async(&mut conn)
        .await
        .unwrap();
    producer
        .submit(&answered, &one_key_job(), &checks(0, None))
        .await
        .unwrap();
    assert_eq!(
        get(&mut conn, &layout.query(answered.as_str()))
            .await
            .as_deref(),
        Some(done)
    );
}

#[tokio::test]
async fn concurrent_submits_each_queue_once_with_their_own_verdict() {
    let (_redis, producer, layout, mut conn) = start().await;
    let mut submits = Vec::new();
    for i in 0..64 {
        let producer = producer.clone();
        submits.push(tokio::spawn(async move {
            // Every fourth one replays the key of the one before it.
            let key = format!("key-{}", i - i % 2 * (i % 4 == 3) as usize);
            let id = producer.mint_id(Some(&key));
            let got = producer
                .submit(&id, &held_job(), &checks(10_000, Some(&key)))
                .await
                .unwrap();
            (id, got)
        }));
    }
    let mut queued = 0;
    for submit in submits {
        let (id, got) = submit.await.unwrap();
        match got {
            Submitted::Queued => queued += 1,
            Submitted::Known {
                id: Some(first), ..
            } => assert_ne!(first, id),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(queued, 48, "64 submits, 16 of them replays");
    assert_eq!(xlen(&mut conn, &layout).await, 48);
}
