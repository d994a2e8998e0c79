//! `Producer::with_submit_tick` against a real Redis: submits that arrive within the tick of
//! their partition's previous batch go together, as one batch, and each still gets its own
//! verdict; without a tick each goes as soon as the one before is answered. Counted, not timed:
//! the batches (`INFO commandstats`' `xlen` calls: a batch with a backlog bound reads the
//! stream's length once).

use std::time::Duration;

use pirq_queue::producer::{Producer, SubmitChecks, Submitted};
use pirq_queue::RedisTarget;
use pirq_shared::layout::Layout;
use pirq_testkit::jobs::one_key_job;
use pirq_testkit::Redis;

const CHECKS: SubmitChecks<'static> = SubmitChecks {
    pending_ttl: 60,
    record_held: false,
    // A bound none of these submits reaches: each batch reads the backlog once.
    max_backlog: 1_000_000,
    idempotency: None,
};

/// The submit batches so far on `redis` (their `XLEN`s).
async fn batches(redis: &Redis) -> u64 {
    let mut conn = redis.manager().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_xlen:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// One submit, awaited, then `n` more sent `apart` apart without waiting for each other;
/// returns the batches the `n` took.
async fn runs_for_spaced_submits(tick: Duration, n: usize, apart: Duration) -> u64 {
    let redis = Redis::start().await.unwrap();
    let target = RedisTarget::open(&redis.url(), Default::default()).unwrap();
    let layout = Layout::new("tick").unwrap();
    let producer = Producer::new(&target, layout, Duration::from_secs(5))
        .unwrap()
        .with_submit_tick(tick);
    let first = producer.mint_id(None);
    assert_eq!(
        producer
            .submit(&first, &one_key_job(), &CHECKS)
            .await
            .unwrap(),
        Submitted::Queued
    );
    let before = batches(&redis).await;
    let mut submits = Vec::new();
    for _ in 0..n {
        let producer = producer.clone();
        submits.push(tokio::spawn(async move {
            let id = producer.mint_id(None);
            producer.submit(&id, &one_key_job(), &CHECKS).await
        }));
        tokio::time::sleep(apart).await;
    }
    for submit in submits {
        assert_eq!(submit.await.unwrap().unwrap(), Submitted::Queued);
    }
    let sent = batches(&redis).await - before;
    let mut conn = redis.manager().await.unwrap();
    let queued: u64 = redis::cmd("XLEN")
        .arg(Layout::new("tick").unwrap().partition(0).jobs())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(queued, n as u64 + 1, "every submit queued once");
    sent
}

#[tokio::test]
async fn submits_within_the_tick_go_as_one_batch() {
    if pirq_testkit::cluster_mode_from_env() {
        println!("skipped: counted on a lone Redis");
        return;
    }
    let apart = Duration::from_millis(50);
    // Five submits over ~250 ms, all within a 2 s tick of the first batch: one batch.
    assert_eq!(
        runs_for_spaced_submits(Duration::from_secs(2), 5, apart).await,
        1
    );
    // Without a tick a batch leaves as soon as the one before is answered: the five, 50 ms
    // apart, go in several (all five in one only if a round trip took 200 ms).
    assert!(runs_for_spaced_submits(Duration::ZERO, 5, apart).await > 1);
}
