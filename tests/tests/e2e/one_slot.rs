//! Every script, transaction and pipeline of the queue protocol keeps its keys in one hash slot
//! (issue 29): two parties whose Redis runs in cluster mode owning every slot (so it refuses,
//! like any Redis Cluster node, keys of two slots in one script, `MULTI` or command with
//! `CROSSSLOT`) answer page queries (submit, running, the result block, the fetched-result
//! read), idempotent replays, epoch pushes (append, follow, publish, trim) and sharded queries
//! (shard start, combine), every page checked, with one partition and with four (each under a
//! hash tag of its own, a window's jobs from several of them: each script and `MULTI` block
//! still in one). `PIRQ_REDIS_CLUSTER_MODE=1` runs any other suite the same way.
//!
//! The same tests run against a real Redis Cluster of 3 primaries (`redis+cluster://`, each
//! party its own cluster): the gateway and the workers find the party's slot among the nodes
//! through the `redis` crate's cluster connection (scripts, `MULTI` pipelines, blocking reads,
//! the status events' pub/sub).

use std::time::{Duration, Instant};

use pirq_client::{Options, Party as PartyApi};
use pirq_e2e::{fault, Cluster, ClusterShape, Party, PartyOptions, TestDb};
use pirq_shared::dpf::generate;
use pirq_shared::update::{EpochUpdate, PageWrite};
use pirq_shared::wire::QueryRequest;
use rand::RngCore;

const TOKEN: &str = "test-admin-token";

/// Where a party's keys live.
#[derive(Clone, Copy)]
enum Redis {
    /// One node in cluster mode, owning every slot.
    OneNode,
    /// A real cluster of 3 primaries.
    ThreePrimaries,
}

fn options(redis: Redis, partitions: u32) -> PartyOptions {
    PartyOptions {
        gateway_args: vec!["--admin-token".into(), TOKEN.into()],
        worker_args: vec!["--epoch-window".into(), "2".into()],
        redis_cluster_mode: matches!(redis, Redis::OneNode),
        redis_cluster: match redis {
            Redis::OneNode => None,
            Redis::ThreePrimaries => Some(ClusterShape {
                primaries: 3,
                replicas: 0,
            }),
        },
        partitions: Some(partitions),
        ..PartyOptions::default()
    }
}

/// What a party's Redis must be for the test to mean anything: a node that refuses keys of two
/// slots, or a real cluster whose processes were given its `redis+cluster://` URL.
async fn assert_cluster(party: &Party, redis: Redis) {
    match redis {
        Redis::OneNode => assert_refuses_cross_slot(party).await,
        Redis::ThreePrimaries => {
            assert!(party.redis.url().starts_with("redis+cluster://"));
            assert_eq!(party.redis.node_ports().len(), 3);
            // More than one partition: on every primary, so that a window's result writes go
            // to three nodes.
            if party.layout().partitions() > 1 {
                party.assert_partitions_on_every_primary(3).await;
            }
        }
    }
}

/// Fetches `want` from `concurrent` lookups at once (so that a worker's windows hold jobs of
/// several partitions), checking every page against `page`.
async fn fetch_concurrently(
    client: &pirq_client::Client,
    want: &[u64],
    concurrent: usize,
    page: impl Fn(u64) -> Vec<u8>,
) {
    let fetches = (0..concurrent).map(|_| client.fetch(want));
    for got in futures::future::join_all(fetches).await {
        let got = got.expect("fetch");
        for (i, index) in want.iter().enumerate() {
            assert_eq!(got.pages[i], page(*index), "page {index}");
        }
    }
}

/// The party's Redis is a cluster node, and one that refuses keys of two slots: without that,
/// this suite could not fail.
async fn assert_refuses_cross_slot(party: &Party) {
    let mut conn = party.redis().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(info.contains("cluster_enabled:1"), "{info}");
    let refused = redis::cmd("EVAL")
        .arg("return 1")
        .arg(2)
        .arg("{a}:x")
        .arg("{b}:y")
        .query_async::<i64>(&mut conn)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("CROSSSLOT"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pages_replays_and_epochs_stay_in_one_slot() {
    pages_replays_and_epochs(Redis::OneNode, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_partitions_stay_in_one_slot_each() {
    pages_replays_and_epochs(Redis::OneNode, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pages_replays_and_epochs_on_a_three_primary_cluster() {
    pages_replays_and_epochs(Redis::ThreePrimaries, 1).await;
}

/// Four partitions on a real 3-primary cluster (`PIRQ_CLUSTER_TESTS=1`): each party's
/// partitions sit on all three primaries, and a worker's window of jobs from several of them is
/// written in one pipeline per partition, each to its own node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_partitions_on_a_three_primary_cluster() {
    if !pirq_e2e::cluster_tests_enabled("four_partitions_on_a_three_primary_cluster") {
        return;
    }
    pages_replays_and_epochs(Redis::ThreePrimaries, 4).await;
}

async fn pages_replays_and_epochs(redis: Redis, partitions: u32) {
    let cluster = Cluster::start(300, 256, options(redis, partitions))
        .await
        .unwrap();
    assert_cluster(&cluster.a, redis).await;
    assert_cluster(&cluster.b, redis).await;
    let client = cluster.client(Options::default());
    let want: Vec<u64> = vec![0, 7, 150, 299];
    fetch_concurrently(&client, &want, 8, |i| cluster.db.page(i).to_vec()).await;

    // An idempotent submit and its replay (the idempotency record beside the job).
    let http = reqwest::Client::new();
    let bits = cluster.a.info().await["domain_bits"].as_u64().unwrap() as u8;
    let key = generate(bits, 5, &mut rand::rng()).unwrap().0.to_bytes();
    let request = QueryRequest {
        keys: vec![key],
        epoch: None,
    };
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (status, body, _) = fault::post(&http, &cluster.a.url, &request, Some("one-slot"))
            .await
            .unwrap();
        assert!(status == 200 || status == 202, "{status} {body}");
        ids.push(body["id"].as_str().unwrap().to_string());
    }
    assert_eq!(ids[0], ids[1], "the replay names the first query");
    let done = fault::wait_final(&http, &cluster.a.url, &ids[0], Duration::from_secs(20))
        .await
        .expect("the query is answered");
    assert_eq!(done["status"], "done", "{done}");

    // Three epochs, past the window of 2: append, follow, publish, fold and trim.
    let mut page = vec![0u8; 256];
    for epoch in 1..=3u64 {
        rand::rng().fill_bytes(&mut page);
        let update = EpochUpdate {
            epoch,
            pages: vec![PageWrite {
                index: 7,
                page: page.clone(),
            }],
        };
        for party in [&cluster.a, &cluster.b] {
            let api = PartyApi::new(reqwest::Client::new(), &party.url);
            assert_eq!(api.push_epoch(TOKEN, &update).await.unwrap(), epoch);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got = client.fetch(&[7]).await.expect("fetch");
            if got.epoch == epoch {
                assert_eq!(got.pages[0], page, "page 7 at epoch {epoch}");
                break;
            }
            assert!(Instant::now() < deadline, "epoch {epoch} not served");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sharded_queries_stay_in_one_slot() {
    sharded_queries(Redis::OneNode, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sharded_queries_on_a_three_primary_cluster() {
    sharded_queries(Redis::ThreePrimaries, 1).await;
}

/// Sharded queries with four partitions on a real 3-primary cluster (`PIRQ_CLUSTER_TESTS=1`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sharded_queries_in_four_partitions_on_a_three_primary_cluster() {
    if !pirq_e2e::cluster_tests_enabled(
        "sharded_queries_in_four_partitions_on_a_three_primary_cluster",
    ) {
        return;
    }
    sharded_queries(Redis::ThreePrimaries, 4).await;
}

async fn sharded_queries(redis: Redis, partitions: u32) {
    let db = TestDb::create(600, 256, rand::random()).unwrap();
    let mut parties = Vec::new();
    for prefix in ["party-a", "party-b"] {
        let options = PartyOptions {
            no_worker: true,
            ..options(redis, partitions)
        };
        let mut party = Party::start(&db.path, prefix, options).await.unwrap();
        for index in 0..2 {
            party
                .start_worker_with(&["--shard", &format!("{index}/2")])
                .await
                .unwrap();
        }
        parties.push(party);
    }
    for party in &parties {
        assert_cluster(party, redis).await;
    }
    let options = Options {
        timeout: Duration::from_secs(60),
        ..Options::default()
    };
    let client =
        pirq_client::Client::with_options(&parties[0].url, &parties[1].url, options).unwrap();
    let want: Vec<u64> = vec![0, 299, 300, 599];
    fetch_concurrently(&client, &want, 8, |i| db.page(i).to_vec()).await;
}
