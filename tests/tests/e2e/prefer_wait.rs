//! `Prefer: wait` on `POST /v1/queries`: the gateway holds the answer until the query is
//! final, so a query takes one round trip; a preference it cannot honour in time (or cannot
//! read) leaves the usual 202.

use std::time::{Duration, Instant};

use pirq_e2e::{Cluster, PartyOptions};
use pirq_shared::bits::xor_into;
use pirq_shared::dpf::generate;
use pirq_shared::wire::{QueryRequest, QueryResult, QueryStatus, BINCODE};

const PAGES: u64 = 3000;
const PAGE_SIZE: u32 = 512;
/// ceil(log2(3000)).
const DOMAIN_BITS: u8 = 12;

/// POSTs `key` with an optional `Prefer` header; the status, the `Preference-Applied` header
/// and the decoded body (bincode when `bincode`, else JSON).
async fn post(
    http: &reqwest::Client,
    url: &str,
    key: Vec<u8>,
    prefer: Option<&str>,
    bincode: bool,
) -> (u16, Option<String>, QueryResult) {
    let request = QueryRequest {
        keys: vec![key],
        epoch: None,
    };
    let (media, body) = if bincode {
        (BINCODE, request.to_bincode())
    } else {
        ("application/json", request.to_json())
    };
    let mut req = http
        .post(format!("{url}/v1/queries"))
        .header("content-type", media)
        .header("accept", media)
        .body(body);
    if let Some(p) = prefer {
        req = req.header("prefer", p);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let applied = resp
        .headers()
        .get("preference-applied")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = resp.bytes().await.unwrap();
    let result = if bincode {
        QueryResult::from_bincode(&bytes).unwrap()
    } else {
        QueryResult::from_json(&bytes).unwrap_or_else(|e| panic!("{e}: {bytes:?}"))
    };
    (status, applied, result)
}

#[tokio::test]
async fn a_submit_that_prefers_to_wait_gets_its_answer_in_one_round_trip() {
    let cluster = Cluster::start(PAGES, PAGE_SIZE, PartyOptions::default())
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let mut rng = rand::rng();
    for (index, bincode) in [(0u64, false), (1234, true), (PAGES - 1, false)] {
        let (k0, k1) = generate(DOMAIN_BITS, index, &mut rng).unwrap();
        let (sa, applied_a, a) = post(
            &http,
            &cluster.a.url,
            k0.to_bytes(),
            Some("wait=10"),
            bincode,
        )
        .await;
        // Other preferences beside it, as RFC 7240 allows.
        let (sb, applied_b, b) = post(
            &http,
            &cluster.b.url,
            k1.to_bytes(),
            Some("respond-async, wait=10"),
            bincode,
        )
        .await;
        assert_eq!((sa, sb), (200, 200), "page {index}: answered at once");
        assert_eq!(applied_a.as_deref(), Some("wait"));
        assert_eq!(applied_b.as_deref(), Some("wait"));
        assert_eq!((a.status, b.status), (QueryStatus::Done, QueryStatus::Done));
        assert!(a.digest.is_some() && a.digest == b.digest);
        let mut page = a.pages[0].clone();
        xor_into(&mut page, &b.pages[0]);
        assert_eq!(page.as_slice(), cluster.db.page(index), "page {index}");
    }
    // Without the preference, or with one that cannot be read, the submit answers 202 at once.
    for prefer in [
        None,
        Some("wait=soon"),
        Some("wait=0"),
        Some("return=minimal"),
    ] {
        let (k0, _) = generate(DOMAIN_BITS, 7, &mut rng).unwrap();
        let (status, applied, result) =
            post(&http, &cluster.a.url, k0.to_bytes(), prefer, false).await;
        assert_eq!(status, 202, "Prefer {prefer:?}");
        assert_eq!(applied, None);
        assert_eq!(result.status, QueryStatus::Queued);
    }
}

#[tokio::test]
async fn a_wait_that_runs_out_answers_202_and_the_query_is_still_answered() {
    let mut cluster = Cluster::start(PAGES, PAGE_SIZE, PartyOptions::default())
        .await
        .unwrap();
    cluster.a.stop_workers();
    let http = reqwest::Client::new();
    let (k0, k1) = generate(DOMAIN_BITS, 99, &mut rand::rng()).unwrap();
    let started = Instant::now();
    let (status, applied, pending) =
        post(&http, &cluster.a.url, k0.to_bytes(), Some("wait=1"), false).await;
    let held = started.elapsed();
    assert_eq!(status, 202);
    assert_eq!(applied, None);
    assert_eq!(pending.status, QueryStatus::Queued);
    assert!(
        held >= Duration::from_millis(900),
        "the gateway held the answer only {held:?} of the 1 s asked"
    );
    // The job is queued: a worker that comes later answers it.
    let page = polled_page_once_a_worker_runs(&mut cluster, &pending.id, k1.to_bytes()).await;
    assert_eq!(page.as_slice(), cluster.db.page(99));
}

/// Starts a worker at party A (whose workers were stopped), polls A for `id` until it is final,
/// and gives the page it makes with B's answer to `key_b` (asked with `Prefer: wait`).
async fn polled_page_once_a_worker_runs(
    cluster: &mut Cluster,
    id: &str,
    key_b: Vec<u8>,
) -> Vec<u8> {
    let http = reqwest::Client::new();
    cluster.a.start_worker().await.unwrap();
    let a = pirq_e2e::fault::wait_final(&http, &cluster.a.url, id, Duration::from_secs(30))
        .await
        .expect("the poll finds the answer once a worker runs");
    let (_, _, b) = post(&http, &cluster.b.url, key_b, Some("wait=10"), false).await;
    let mut page = pirq_e2e::fault::pages(&a).remove(0);
    xor_into(&mut page, &b.pages[0]);
    page
}

/// Two parties whose gateways run with `args`.
async fn cluster_with_gateway_args(args: &[&str]) -> Cluster {
    let options = PartyOptions {
        gateway_args: args.iter().map(|a| a.to_string()).collect(),
        ..PartyOptions::default()
    };
    Cluster::start(PAGES, PAGE_SIZE, options).await.unwrap()
}

/// The seconds `party`'s Redis still keeps the record of query `id`.
async fn ttl(party: &pirq_e2e::Party, id: &str) -> i64 {
    let mut conn = party.redis().await.unwrap();
    redis::cmd("TTL")
        .arg(party.layout().query(id))
        .query_async(&mut conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_answer_held_for_the_client_is_kept_only_the_fetched_ttl_a_pending_one_its_full_ttl() {
    let mut cluster = cluster_with_gateway_args(&["--fetched-result-ttl", "7"]).await;
    let http = reqwest::Client::new();
    let mut rng = rand::rng();
    // Party A's half of a fetch of page `index`.
    let url = cluster.a.url.clone();
    let mut post_a = |index, prefer, bincode| {
        let (k0, _) = generate(DOMAIN_BITS, index, &mut rng).unwrap();
        post(&http, &url, k0.to_bytes(), Some(prefer), bincode)
    };
    for bincode in [false, true] {
        let (status, _, done) = post_a(42, "wait=10", bincode).await;
        assert_eq!((status, done.status), (200, QueryStatus::Done));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = ttl(&cluster.a, &done.id).await;
            if (0..=7).contains(&left) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "an answered result still has TTL {left}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // A wait that runs out before the answer leaves the queued record's lifetime alone.
    cluster.a.stop_workers();
    let (status, _, pending) = post_a(43, "wait=0.5", false).await;
    assert_eq!((status, pending.status), (202, QueryStatus::Queued));
    let left = ttl(&cluster.a, &pending.id).await;
    assert!(left > 7, "a pending record was shortened to {left} s");
}

/// A held query's Idempotency-Key record is shortened by its worker with the answer (issue 35:
/// in the worker's pipeline instead of the gateway's round trip after the hand-over): its TTL
/// falls from `--idempotency-ttl` to at most the fetched-result TTL, and a retry with the same
/// key is still answered with the same id and answer meanwhile. The answer's net is kept in
/// that record, not in a record of the query's own (one key and one command a query less):
/// the retry is answered from it.
#[tokio::test]
async fn a_held_querys_idempotency_record_is_shortened_with_its_answer() {
    let cluster = cluster_with_gateway_args(&["--fetched-result-ttl", "7"]).await;
    let http = reqwest::Client::new();
    let (k0, _) = generate(DOMAIN_BITS, 42, &mut rand::rng()).unwrap();
    let body = QueryRequest {
        keys: vec![k0.to_bytes()],
        epoch: None,
    }
    .to_json();
    let key = format!("{:032x}", rand::random::<u128>());
    let send = || {
        http.post(format!("{}/v1/queries", cluster.a.url))
            .header("content-type", "application/json")
            .header("prefer", "wait=10")
            .header("idempotency-key", &key)
            .body(body.clone())
            .send()
    };
    let first = send().await.unwrap();
    assert_eq!(first.status().as_u16(), 200);
    let first: QueryResult = serde_json::from_slice(&first.bytes().await.unwrap()).unwrap();
    assert_eq!(first.status, QueryStatus::Done);
    let mut conn = cluster.a.redis().await.unwrap();
    let left: i64 = redis::cmd("TTL")
        .arg(cluster.a.layout().idempotency(&key))
        .query_async(&mut conn)
        .await
        .unwrap();
    let own: i64 = redis::cmd("EXISTS")
        .arg(cluster.a.layout().query(&first.id))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(own, 0, "the held query's net has a record of its own");
    let claim: Vec<u8> = redis::cmd("GET")
        .arg(cluster.a.layout().idempotency(&key))
        .query_async(&mut conn)
        .await
        .unwrap();
    let head = claim.split(|&b| b == b'\n').next().unwrap();
    assert!(
        head.ends_with(first.id.as_bytes()) && claim.len() > head.len() + PAGE_SIZE as usize,
        "the idempotency record holds no net: {head:?}, {} bytes",
        claim.len()
    );
    assert!(
        (0..=7).contains(&left),
        "the answered query's idempotency record has TTL {left} s (--idempotency-ttl is 600)"
    );
    let again = send().await.unwrap();
    assert_eq!(again.status().as_u16(), 200);
    let again: QueryResult = serde_json::from_slice(&again.bytes().await.unwrap()).unwrap();
    assert_eq!(
        again.id, first.id,
        "a retry within the TTL is the same query"
    );
    assert_eq!(again.status, QueryStatus::Done);
    assert_eq!(again.pages, first.pages, "a retry gets the same answer");
}

/// A held request whose gateway lets go of it early (here it shuts down; in the soak, a Redis
/// error) is answered 202 and recorded `queued`, but its worker, which cannot know, still keeps
/// the answer's net in the Idempotency-Key record: a poll must find the answer there, not
/// `queued` for good (the soak lost a query so before reads followed the mark).
#[tokio::test]
async fn a_held_query_let_go_early_is_answered_to_a_poll_from_its_keys_record() {
    let mut cluster = Cluster::start(PAGES, PAGE_SIZE, PartyOptions::default())
        .await
        .unwrap();
    cluster.a.stop_workers();
    let http = reqwest::Client::new();
    let index = 2024;
    let (k0, k1) = generate(DOMAIN_BITS, index, &mut rand::rng()).unwrap();
    let held = {
        let request = http
            .post(format!("{}/v1/queries", cluster.a.url))
            .header("content-type", "application/json")
            .header("prefer", "wait=25")
            .header(
                "idempotency-key",
                format!("{:032x}", rand::random::<u128>()),
            )
            .body(
                QueryRequest {
                    keys: vec![k0.to_bytes()],
                    epoch: None,
                }
                .to_json(),
            );
        tokio::spawn(async move {
            let resp = request.send().await.unwrap();
            let status = resp.status().as_u16();
            (
                status,
                QueryResult::from_json(&resp.bytes().await.unwrap()).unwrap(),
            )
        })
    };
    // The gateway holds it once its job is on the stream (no worker runs to take it), then is
    // stopped: it answers what it knows.
    let mut conn = cluster.a.redis().await.unwrap();
    let queued_by = Instant::now() + Duration::from_secs(20);
    loop {
        let jobs: u64 = redis::cmd("XLEN")
            .arg(cluster.a.layout().jobs())
            .query_async(&mut conn)
            .await
            .unwrap();
        if jobs >= 1 {
            break;
        }
        assert!(
            Instant::now() < queued_by,
            "the held request's job never queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster
        .a
        .restart_gateway_in_place(Duration::from_millis(100))
        .await
        .unwrap();
    let (status, pending) = held.await.unwrap();
    assert_eq!(
        status, 202,
        "a gateway shutting down answers a held request 202"
    );
    assert_eq!(pending.status, QueryStatus::Queued);
    // A worker now answers it well before the 25 s the request would have waited; the answer
    // is in the key's record.
    let page = polled_page_once_a_worker_runs(&mut cluster, &pending.id, k1.to_bytes()).await;
    assert_eq!(page.as_slice(), cluster.db.page(index));
}

#[tokio::test]
async fn a_gateway_on_one_runtime_thread_answers_many_clients_at_once() {
    let cluster = cluster_with_gateway_args(&["--runtime-threads", "1"]).await;
    let http = reqwest::Client::new();
    let mut rng = rand::rng();
    let fetches = (0..32u64).map(|i| {
        let index = (i * 97) % PAGES;
        let (k0, k1) = generate(DOMAIN_BITS, index, &mut rng).unwrap();
        let (http, cluster) = (&http, &cluster);
        async move {
            let ((sa, _, a), (sb, _, b)) = tokio::join!(
                post(http, &cluster.a.url, k0.to_bytes(), Some("wait=10"), true),
                post(http, &cluster.b.url, k1.to_bytes(), Some("wait=10"), true),
            );
            assert_eq!((sa, sb), (200, 200), "page {index}");
            let mut page = a.pages[0].clone();
            xor_into(&mut page, &b.pages[0]);
            assert_eq!(page.as_slice(), cluster.db.page(index), "page {index}");
        }
    });
    futures::future::join_all(fetches).await;
}
