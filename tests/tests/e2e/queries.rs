//! Queries through two real parties: byte-exact pages through JSON and bincode, through polling,
//! long-poll and SSE; result expiry; a query that waits for its worker; mismatched parties.

use std::time::Duration;

use futures::StreamExt;
use pirq_client::{ClientError, Encoding, Options, Wait};
use pirq_e2e::{metrics, Cluster, Party, PartyOptions, TestDb};
use pirq_shared::bits::xor_into;
use pirq_shared::dpf::{generate, DpfKey};
use pirq_shared::wire::{QueryRequest, QueryStatus};
use pirq_testkit::jobs;
use rand::Rng;

const PAGES: u64 = 3000; // not a power of two: the tail of the domain is all-zero pages
const PAGE_SIZE: u32 = 512;

/// A query of one key, at `epoch` (`None`: the newest the parties answer).
fn request(key: &DpfKey, epoch: Option<u64>) -> QueryRequest {
    QueryRequest {
        keys: vec![key.to_bytes()],
        epoch,
    }
}

fn options(encoding: Encoding, wait: Wait) -> Options {
    Options {
        wait,
        encoding,
        timeout: Duration::from_secs(60),
        ..Default::default()
    }
}

#[tokio::test]
async fn random_pages_match_the_database_through_every_encoding_and_wait() {
    pages_match_through_every_encoding_and_wait(PartyOptions::default()).await;
}

/// The same on gateways whose connections are served by connection lanes (a runtime and a
/// Redis connection each, `--connection-threads`) and whose submits wait for a tick: answers,
/// waits and idempotent retries do not depend on which thread serves a connection.
#[tokio::test]
async fn random_pages_match_the_database_on_connection_lanes_with_a_submit_tick() {
    let options = PartyOptions {
        gateway_args: pirq_e2e::strings(&[
            "--runtime-threads",
            "1",
            "--connection-threads",
            "3",
            "--submit-tick-us",
            "2000",
        ]),
        ..Default::default()
    };
    pages_match_through_every_encoding_and_wait(options).await;
}

async fn pages_match_through_every_encoding_and_wait(party: PartyOptions) {
    let mut cluster = Cluster::start(PAGES, PAGE_SIZE, party).await.unwrap();
    let mut rng = rand::rng();
    let waits = [
        Wait::Inline,
        Wait::Events,
        Wait::Poll {
            interval: Duration::from_millis(10),
        },
        Wait::LongPoll,
    ];
    for encoding in [Encoding::Json, Encoding::Bincode] {
        for wait in waits {
            let client = cluster.client(options(encoding, wait));
            for _round in 0..3 {
                let count = rng.random_range(1..=12);
                let indices: Vec<u64> = (0..count).map(|_| rng.random_range(0..PAGES)).collect();
                let fetched = client
                    .fetch(&indices)
                    .await
                    .unwrap_or_else(|e| panic!("{encoding:?} {wait:?}: {e}"));
                assert_eq!(fetched.epoch, 0);
                assert_eq!(fetched.pages.len(), indices.len());
                for (i, page) in indices.iter().zip(&fetched.pages) {
                    assert_eq!(
                        page.as_slice(),
                        cluster.db.page(*i),
                        "page {i} via {encoding:?} {wait:?}"
                    );
                }
            }
        }
    }
    // First and last pages, and more indices than one query carries (split into several).
    let client = cluster.client(Options::default());
    let mut indices: Vec<u64> = vec![0, PAGES - 1];
    indices.extend((0..150).map(|_| rng.random_range(0..PAGES)));
    let fetched = client.fetch(&indices).await.unwrap();
    for (i, page) in indices.iter().zip(&fetched.pages) {
        assert_eq!(
            page.as_slice(),
            cluster.db.page(*i),
            "page {i} in a multi-query fetch"
        );
    }
    // Many clients at once, and party A with two workers sharing its consumer group: jobs share
    // windows and workers, every answer stays its own.
    cluster.a.start_worker().await.unwrap();
    assert_eq!(cluster.a.live_workers().await, Some(2));
    let fetches = (0..12).map(|_| {
        let client = cluster.client(Options::default());
        let indices: Vec<u64> = (0..rng.random_range(1..=5))
            .map(|_| rng.random_range(0..PAGES))
            .collect();
        async move { (client.fetch(&indices).await, indices) }
    });
    for (result, indices) in futures::future::join_all(fetches).await {
        let fetched = result.unwrap();
        for (i, page) in indices.iter().zip(&fetched.pages) {
            assert_eq!(
                page.as_slice(),
                cluster.db.page(*i),
                "page {i} in concurrent fetches"
            );
        }
    }
    // An index outside the database is refused before anything is sent.
    match client.fetch(&[PAGES]).await {
        Err(ClientError::IndexOutOfRange { index, num_pages }) => {
            assert_eq!((index, num_pages), (PAGES, PAGES))
        }
        other => panic!("expected IndexOutOfRange, got {other:?}"),
    }
}

#[tokio::test]
async fn result_is_404_after_its_ttl() {
    let db = TestDb::create(500, 256, 3).unwrap();
    let opts = PartyOptions {
        worker_args: vec!["--result-ttl".into(), "1".into()],
        ..Default::default()
    };
    let party = Party::start(&db.path, "ttl", opts).await.unwrap();
    let client = pirq_client::Client::new(&party.url, &party.url).unwrap();
    let p = client.parties().0;
    let (k0, _) = generate(9, 42, &mut rand::rng()).unwrap();
    let req = request(&k0, None);
    let submitted = p.submit(&req, Encoding::Json).await.unwrap();
    let done = p
        .wait(
            &submitted.id,
            Encoding::Json,
            Wait::LongPoll,
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(done.status, QueryStatus::Done);
    tokio::time::sleep(Duration::from_millis(2200)).await;
    match p.status(&submitted.id, Encoding::Json, None).await {
        Err(ClientError::Api {
            status: 404, error, ..
        }) => assert_eq!(error.code, "not_found"),
        other => panic!("expected 404 after the TTL, got {other:?}"),
    }
}

#[tokio::test]
async fn query_submitted_before_any_worker_is_answered_once_one_starts() {
    let mut cluster = Cluster::start(PAGES, PAGE_SIZE, PartyOptions::default())
        .await
        .unwrap();
    // The workers registered the database, then go away: gateways still accept queries for it.
    cluster.a.stop_workers();
    cluster.b.stop_workers();
    assert_eq!(cluster.a.live_workers().await, Some(0));

    let index = 1234;
    let (k0, k1) = generate(12, index, &mut rand::rng()).unwrap();
    let client = cluster.client(Options::default());
    let (pa, pb) = client.parties();
    let sa = pa
        .submit(&request(&k0, Some(0)), Encoding::Json)
        .await
        .unwrap();
    let sb = pb
        .submit(&request(&k1, Some(0)), Encoding::Bincode)
        .await
        .unwrap();

    // An SSE stream opened now reports "queued" first.
    let events = reqwest::get(format!("{}/v1/queries/{}/events", cluster.a.url, sa.id))
        .await
        .unwrap();
    assert_eq!(events.headers()["content-type"], "text/event-stream");
    let mut body = events.bytes_stream();
    let first = String::from_utf8(body.next().await.unwrap().unwrap().to_vec()).unwrap();
    assert!(first.starts_with("event: status\ndata: "), "{first:?}");
    assert!(first.contains(r#""status":"queued""#), "{first:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        pa.status(&sa.id, Encoding::Json, None)
            .await
            .unwrap()
            .status,
        QueryStatus::Queued
    );

    cluster.a.start_worker().await.unwrap();
    cluster.b.start_worker().await.unwrap();
    let (ra, rb) = tokio::join!(
        pa.wait(
            &sa.id,
            Encoding::Json,
            Wait::Events,
            Duration::from_secs(30)
        ),
        pb.wait(
            &sb.id,
            Encoding::Bincode,
            Wait::LongPoll,
            Duration::from_secs(30)
        ),
    );
    let mut page = ra.unwrap().pages.remove(0);
    xor_into(&mut page, &rb.unwrap().pages[0]);
    assert_eq!(page.as_slice(), cluster.db.page(index));

    // The SSE stream opened before the worker started ends with the result.
    let mut rest = Vec::new();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), body.next())
        .await
        .unwrap()
    {
        rest.extend_from_slice(&chunk.unwrap());
    }
    let rest = String::from_utf8(rest).unwrap();
    assert!(rest.contains("event: result\ndata: "), "{rest}");
    assert!(rest.contains(r#""status":"done""#), "{rest}");
}

#[tokio::test]
async fn parties_with_different_databases_are_refused() {
    let db_a = TestDb::create(1000, 256, 1).unwrap();
    let db_b = TestDb::create(1000, 512, 1).unwrap();
    let (a, b) = tokio::try_join!(
        Party::start(&db_a.path, "mismatch-a", PartyOptions::default()),
        Party::start(&db_b.path, "mismatch-b", PartyOptions::default()),
    )
    .unwrap();
    let client = pirq_client::Client::new(&a.url, &b.url).unwrap();
    match client.fetch(&[1]).await {
        Err(ClientError::Mismatch(why)) => assert!(why.contains("page_size"), "{why}"),
        other => panic!("expected a mismatch, got {other:?}"),
    }
}

#[tokio::test]
async fn job_that_slipped_past_the_gateway_fails_alone() {
    let db = TestDb::create(1000, 256, 5).unwrap();
    let party = Party::start(&db.path, "poison", PartyOptions::default())
        .await
        .unwrap();
    let layout = pirq_shared::layout::Layout::new("poison").unwrap();
    let mut conn = party.redis.client().await.unwrap();
    // A job with a key for another domain, written straight into the stream.
    let bad_id = "b".repeat(32);
    let (wrong, _) = generate(12, 1, &mut rand::rng()).unwrap();
    let job = pirq_shared::wire::Job {
        keys: vec![wrong.to_bytes()],
        epoch: None,
        accepted_ms: 0,
        reply: Default::default(),
    };
    jobs::enqueue(&mut conn, &layout, &bad_id, &job.to_bincode())
        .await
        .unwrap();
    // And an entry that is not a job at all.
    jobs::enqueue_junk(&mut conn, &layout, "1").await.unwrap();

    let client = pirq_client::Client::new(&party.url, &party.url).unwrap();
    let p = client.parties().0;
    let bad_id = pirq_client::RequestId::parse(&bad_id).unwrap();
    let failed = p.status(&bad_id, Encoding::Json, Some(10)).await.unwrap();
    assert_eq!(failed.status, QueryStatus::Failed);
    let error = failed.error.unwrap();
    assert_eq!(
        (error.code.as_str(), error.key_index),
        ("key_domain_mismatch", Some(0))
    );

    // A healthy job beside them is answered; the stream is left empty.
    let (k0, _) = generate(10, 7, &mut rand::rng()).unwrap();
    let req = request(&k0, None);
    let ok = p
        .query(&req, Encoding::Json, Wait::Events, Duration::from_secs(10))
        .await;
    assert_eq!(ok.unwrap().status, QueryStatus::Done);
    let len: u64 = redis::cmd("XLEN")
        .arg(layout.jobs())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 0, "acked entries are deleted");
}

#[tokio::test]
async fn info_health_ready_and_metrics() {
    let db = TestDb::create(1000, 256, 2).unwrap();
    let party = Party::start(&db.path, "info", PartyOptions::default())
        .await
        .unwrap();
    let info = party.info().await;
    assert_eq!(info["num_pages"], 1000);
    assert_eq!(info["page_size"], 256);
    assert_eq!(info["domain_bits"], 10);
    assert_eq!(info["epoch"], serde_json::json!({"oldest": 0, "newest": 0}));
    assert_eq!(info["max_keys_per_query"], 64);
    assert_eq!(info["workers"], 1);
    for path in ["/healthz", "/readyz"] {
        let resp = reqwest::get(format!("{}{path}", party.url)).await.unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{path}");
    }
    let client = pirq_client::Client::new(&party.url, &party.url).unwrap();
    let (k0, _) = generate(10, 7, &mut rand::rng()).unwrap();
    let req = request(&k0, None);
    client
        .parties()
        .0
        .query(&req, Encoding::Json, Wait::Events, Duration::from_secs(10))
        .await
        .unwrap();
    let page = metrics::scrape(&party.http, &party.url).await;
    for name in [
        "pirq_gateway_http_requests_total",
        "pirq_gateway_queries_accepted_total",
        "pirq_gateway_keys_accepted_total",
    ] {
        assert!(page.contains(name), "{name} missing from /metrics");
    }
    assert!(
        page.contains(r#"route="/v1/queries/{id}/events""#),
        "routes are labelled by template"
    );
}

#[tokio::test]
async fn worker_killed_mid_window_resumes_its_jobs_when_restarted() {
    // Big enough pages that the worker is still busy when it is killed.
    let mut cluster = Cluster::start(4096, 4096, PartyOptions::default())
        .await
        .unwrap();
    let client = cluster.client(Options::default());
    let (pa, pb) = client.parties();
    let mut rng = rand::rng();
    let mut queries = Vec::new();
    for _ in 0..40 {
        let index = rng.random_range(0..4096);
        let (k0, k1) = generate(12, index, &mut rand::rng()).unwrap();
        let a = pa
            .submit(&request(&k0, None), Encoding::Bincode)
            .await
            .unwrap();
        let b = pb
            .submit(&request(&k1, None), Encoding::Bincode)
            .await
            .unwrap();
        queries.push((index, a.id, b.id));
    }
    // Party A's worker dies with jobs read but not answered; it comes back under the same name.
    cluster.a.kill_workers();
    cluster.a.start_worker().await.unwrap();
    for (index, a, b) in queries {
        let (ra, rb) = tokio::join!(
            pa.wait(
                &a,
                Encoding::Bincode,
                Wait::LongPoll,
                Duration::from_secs(60)
            ),
            pb.wait(&b, Encoding::Json, Wait::Events, Duration::from_secs(60)),
        );
        let mut page = ra.unwrap().pages.remove(0);
        xor_into(&mut page, &rb.unwrap().pages[0]);
        assert_eq!(page.as_slice(), cluster.db.page(index), "page {index}");
    }
}

#[tokio::test]
async fn waiters_are_woken_by_the_event_not_by_the_recheck_timer() {
    // The gateway re-reads a pending query every 2 s even without a notification; a waiter whose
    // wake-up was lost would take that long. Every wait here must end well before it.
    let db = TestDb::create(1000, 256, 11).unwrap();
    let party = Party::start(&db.path, "wakeups", PartyOptions::default())
        .await
        .unwrap();
    let client = pirq_client::Client::new(&party.url, &party.url).unwrap();
    let p = client.parties().0;
    for round in 0..3 {
        let waits = (0..24).map(|i| async move {
            let (k0, _) = generate(10, i, &mut rand::rng()).unwrap();
            let req = request(&k0, None);
            let how = if i % 2 == 0 {
                Wait::Events
            } else {
                Wait::LongPoll
            };
            let submitted = p.submit(&req, Encoding::Json).await.unwrap();
            let start = std::time::Instant::now();
            let r = p
                .wait(&submitted.id, Encoding::Json, how, Duration::from_secs(10))
                .await;
            (r.unwrap().status, start.elapsed(), how)
        });
        for (status, elapsed, how) in futures::future::join_all(waits).await {
            assert_eq!(status, QueryStatus::Done);
            assert!(
                elapsed < Duration::from_millis(1500),
                "round {round}: {how:?} took {elapsed:?}"
            );
        }
    }
}
