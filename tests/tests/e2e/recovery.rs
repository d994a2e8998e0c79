//! Recovery from a bad day: a client waiting through a gateway restart, a job pinned to an
//! epoch not applied yet that must not hold up its window, and `--durability fsync` right after
//! a Redis restart.

use std::time::{Duration, Instant};

use pirq_client::{Encoding, Party as Api, Wait};
use pirq_e2e::fault::{post, wait_final};
use pirq_e2e::requests::for_page;
use pirq_e2e::{Party, PartyOptions, TestDb};
use pirq_shared::wire::Job;
use pirq_testkit::jobs;

const PAGES: u64 = 1024;

#[tokio::test]
async fn a_client_waits_out_a_gateway_restart_in_every_wait_mode() {
    let db = TestDb::create(PAGES, 256, 31).unwrap();
    let mut party = Party::start(
        &db.path,
        "restart",
        PartyOptions {
            no_worker: true,
            ..PartyOptions::default()
        },
    )
    .await
    .unwrap();
    for wait in [
        Wait::Events,
        Wait::Poll {
            interval: Duration::from_millis(100),
        },
        Wait::LongPoll,
    ] {
        let api = Api::new(reqwest::Client::new(), &party.url);
        // No worker: the query stays queued while the gateway goes away and comes back.
        let waiting = tokio::spawn(async move {
            api.query(
                &for_page(10, 5),
                Encoding::Json,
                wait,
                Duration::from_secs(60),
            )
            .await
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        party
            .restart_gateway_in_place(Duration::from_millis(1500))
            .await
            .unwrap();
        party.start_worker().await.unwrap();
        let result = tokio::time::timeout(Duration::from_secs(60), waiting)
            .await
            .expect("the client gave no answer")
            .unwrap()
            .unwrap_or_else(|e| panic!("{wait:?}: the client gave up: {e}"));
        assert!(result.status.is_final(), "{wait:?}");
        assert_eq!(result.pages.len(), 1, "{wait:?}");
        party.stop_workers();
    }
}

#[tokio::test]
async fn a_job_pinned_ahead_does_not_hold_up_its_window() {
    let db = TestDb::create(PAGES, 256, 32).unwrap();
    let mut party = Party::start(
        &db.path,
        "pinned",
        PartyOptions {
            no_worker: true,
            worker_args: vec!["--epoch-wait-ms".into(), "4000".into()],
            ..PartyOptions::default()
        },
    )
    .await
    .unwrap();
    // One job pinned to epoch 1 (the gateway accepts it once epoch 1 is registered; this
    // worker has not applied it), queued with ten unpinned ones before the worker starts, so
    // they share its first window.
    let layout = party.layout();
    let mut conn = party.redis().await.unwrap();
    let mut ids = Vec::new();
    for i in 0..11u64 {
        let id = format!("{:032x}", rand::random::<u128>());
        let job = Job {
            keys: for_page(10, i).keys,
            epoch: (i == 0).then_some(1),
            accepted_ms: 0,
            reply: Default::default(),
        };
        jobs::enqueue(&mut conn, &layout, &id, &job.to_bincode())
            .await
            .unwrap();
        ids.push(id);
    }
    party.start_worker().await.unwrap();
    let http = reqwest::Client::new();
    let started = Instant::now();
    for id in &ids[1..] {
        let r = wait_final(&http, &party.url, id, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(r["status"], "done", "{r}");
    }
    let unpinned = started.elapsed();
    // The pinned job is still waiting for its epoch when all the others are answered.
    let pinned: serde_json::Value = http
        .get(format!("{}/v1/queries/{}", party.url, ids[0]))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        pinned["status"] == "queued" || pinned["status"] == "running",
        "the pinned job settled before the unpinned ones were answered: {pinned}"
    );
    let settled = wait_final(&http, &party.url, &ids[0], Duration::from_secs(30))
        .await
        .unwrap();
    println!(
        "10 unpinned jobs answered in {unpinned:.2?} while one pinned ahead waited its 4 s \
         (then {})",
        settled["status"]
    );
}

#[tokio::test]
async fn fsync_durability_accepts_again_right_after_a_redis_restart() {
    let db = TestDb::create(PAGES, 256, 33).unwrap();
    let mut party = Party::start(
        &db.path,
        "fsyncre",
        PartyOptions {
            redis_aof: true,
            gateway_args: vec!["--durability".into(), "fsync".into()],
            ..PartyOptions::default()
        },
    )
    .await
    .unwrap();
    let http = reqwest::Client::new();
    assert_eq!(
        post(&http, &party.url, &for_page(10, 1), None)
            .await
            .unwrap()
            .0,
        202
    );
    party
        .redis
        .restart_after(Duration::from_millis(300))
        .await
        .unwrap();
    // Past the 5 s recheck period: every answer is 202, or 503 redis_unavailable while the
    // gateway reconnects, never not_durable (the configuration never changed).
    let until = Instant::now() + Duration::from_secs(7);
    let (mut accepted, mut not_durable) = (0, 0);
    while Instant::now() < until {
        match post(&http, &party.url, &for_page(10, 2), None).await {
            Ok((202, _, _)) => accepted += 1,
            Ok((503, body, _)) if body["error"]["code"] == "not_durable" => not_durable += 1,
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("after a Redis restart: {accepted} accepted, {not_durable} not_durable in 7 s");
    assert!(accepted > 0);
    assert_eq!(not_durable, 0, "503 not_durable while Redis was fine");
}
