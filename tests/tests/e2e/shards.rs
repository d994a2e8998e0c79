//! Sharded parties end to end: every party's pages split into S = 3 uneven shards (1000 pages =
//! 256 + 256 + 488), each shard served by its own CPU worker processes (two replicas for shard
//! 1), partial answers XORed together inside Redis. Every fetched page is compared with the
//! database (or a model of it at the answer's epoch). Each test runs on one Redis per party, and
//! (`PIRQ_CLUSTER_TESTS=1`) on a Redis Cluster of 3 primaries per party with the queue in 4
//! partitions ([`Backend`]).

use std::time::{Duration, Instant};

use pirq_client::{Options, Party as PartyApi};
use pirq_e2e::{fault, Backend, Party, PartyOptions, TestDb};
use pirq_shared::update::{EpochUpdate, PageWrite};
use rand::{Rng, RngCore};

const SHARDS: u32 = 3;
const NUM_PAGES: u64 = 1000;
const PAGE_SIZE: u32 = 256;
const TOKEN: &str = "test-admin-token";

/// A party on `backend` (checked) whose shard `i` has `replicas[i]` workers.
async fn sharded_party(
    backend: Backend,
    db: &TestDb,
    prefix: &str,
    replicas: &[usize],
    worker_args: &[&str],
) -> Party {
    let options = backend.options(PartyOptions {
        gateway_args: vec!["--admin-token".into(), TOKEN.into()],
        worker_args: worker_args.iter().map(|s| s.to_string()).collect(),
        no_worker: true,
        ..PartyOptions::default()
    });
    let mut party = Party::start(&db.path, prefix, options).await.unwrap();
    backend.check(&party).await;
    for (index, &count) in replicas.iter().enumerate() {
        for _ in 0..count {
            start_shard(&mut party, index as u32).await;
        }
    }
    party
}

async fn start_shard(party: &mut Party, index: u32) {
    party
        .start_worker_with(&["--shard", &format!("{index}/{SHARDS}")])
        .await
        .unwrap();
}

fn client(a: &Party, b: &Party) -> pirq_client::Client {
    let options = Options {
        timeout: Duration::from_secs(60),
        ..Options::default()
    };
    pirq_client::Client::with_options(&a.url, &b.url, options).unwrap()
}

/// Random indices plus the edges of every shard.
fn indices(count: usize) -> Vec<u64> {
    let mut rng = rand::rng();
    [0, 255, 256, 511, 512, 999]
        .into_iter()
        .chain((0..count).map(|_| rng.random_range(0..NUM_PAGES)))
        .collect()
}

/// The keys matching `pattern(keys of partition p)` in every partition of `party`.
async fn keys_of_every_partition(
    party: &Party,
    pattern: impl Fn(&pirq_shared::layout::PartitionKeys) -> String,
) -> Vec<String> {
    let mut conn = party.redis_keys().await.unwrap();
    let mut found = Vec::new();
    for (_, keys) in party.layout().all_partitions() {
        let some: Vec<String> = redis::cmd("KEYS")
            .arg(pattern(&keys))
            .query_async(&mut conn)
            .await
            .unwrap();
        found.extend(some);
    }
    found
}

/// Nothing of a finished query stays behind: stream entries are deleted once every shard acked,
/// and the running sums once the last partial is in.
async fn assert_nothing_left(party: &Party) {
    let mut conn = party.redis_keys().await.unwrap();
    let layout = party.layout();
    assert_eq!(fault::stream_len(&mut conn, &layout).await, 0, "jobs left");
    let sums = keys_of_every_partition(party, |keys| keys.partial_sum("*")).await;
    assert!(sums.is_empty(), "running sums left: {sums:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uneven_shards_with_a_replica_answer_exact_pages() {
    uneven_shards(Backend::OneRedis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uneven_shards_with_a_replica_answer_exact_pages_on_a_redis_cluster() {
    if Backend::Cluster.runs("uneven_shards_with_a_replica_answer_exact_pages_on_a_redis_cluster") {
        uneven_shards(Backend::Cluster).await;
    }
}

async fn uneven_shards(backend: Backend) {
    let db = TestDb::create(NUM_PAGES, PAGE_SIZE, rand::random()).unwrap();
    let (a, b) = tokio::join!(
        sharded_party(backend, &db, "party-a", &[1, 2, 1], &[]),
        sharded_party(backend, &db, "party-b", &[1, 1, 1], &[]),
    );
    for party in [&a, &b] {
        assert_eq!(party.readyz().await.0, 200);
    }
    let info = a.info().await;
    let shards = info["shards"].as_array().expect("shards listed");
    let pages: Vec<(u64, u64)> = shards
        .iter()
        .map(|s| {
            (
                s["pages"][0].as_u64().unwrap(),
                s["pages"][1].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(pages, vec![(0, 256), (256, 512), (512, 1000)]);
    let workers: Vec<usize> = shards
        .iter()
        .map(|s| s["workers"].as_array().unwrap().len())
        .collect();
    assert_eq!(workers, vec![1, 2, 1]);
    assert_eq!(info["workers"], 4);

    let c = client(&a, &b);
    for _ in 0..3 {
        let want = indices(24);
        let got = c.fetch(&want).await.expect("fetch");
        for (i, index) in want.iter().enumerate() {
            assert_eq!(got.pages[i], db.page(*index), "page {index}");
        }
    }
    assert_nothing_left(&a).await;
    assert_nothing_left(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_shard_makes_the_party_unready_and_queries_wait() {
    missing_shard(Backend::OneRedis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_shard_makes_the_party_unready_and_queries_wait_on_a_redis_cluster() {
    if Backend::Cluster
        .runs("a_missing_shard_makes_the_party_unready_and_queries_wait_on_a_redis_cluster")
    {
        missing_shard(Backend::Cluster).await;
    }
}

async fn missing_shard(backend: Backend) {
    let db = TestDb::create(NUM_PAGES, PAGE_SIZE, rand::random()).unwrap();
    let (mut a, b) = tokio::join!(
        sharded_party(backend, &db, "party-a", &[1, 0, 1], &[]),
        sharded_party(backend, &db, "party-b", &[1, 1, 1], &[]),
    );
    let (status, body) = a.readyz().await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "shard_unavailable");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("shard 1/3"),
        "{body}"
    );
    assert_eq!(b.readyz().await.0, 200);

    let want = indices(10);
    let c = client(&a, &b);
    let fetch = tokio::spawn({
        let want = want.clone();
        async move { c.fetch(&want).await }
    });
    // Shards 0 and 2 answer; the query must wait for shard 1, never complete without it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !fetch.is_finished(),
        "a query completed with a shard missing"
    );
    let mut conn = a.redis_keys().await.unwrap();
    // The query's combine state: started, two partials in (its client waits on the POST, so
    // there is no record until the answer).
    let states = keys_of_every_partition(&a, |keys| keys.shard_state("*")).await;
    assert_eq!(states.len(), 1);
    let (started, parts): (String, u32) = redis::cmd("HMGET")
        .arg(&states[0])
        .arg("started")
        .arg("parts")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((started.as_str(), parts), ("1", 2));
    let records = keys_of_every_partition(&a, |keys| keys.query("*")).await;
    assert!(
        records.is_empty(),
        "a held query has no record yet: {records:?}"
    );

    start_shard(&mut a, 1).await;
    let got = tokio::time::timeout(Duration::from_secs(30), fetch)
        .await
        .expect("answered once shard 1 is up")
        .unwrap()
        .expect("fetch");
    for (i, index) in want.iter().enumerate() {
        assert_eq!(got.pages[i], db.page(*index), "page {index}");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.readyz().await.0 != 200 {
        assert!(Instant::now() < deadline, "not ready with every shard up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_nothing_left(&a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_a_shard_worker_under_load_loses_no_query() {
    killed_shard_worker(Backend::OneRedis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_a_shard_worker_under_load_loses_no_query_on_a_redis_cluster() {
    if Backend::Cluster.runs("killing_a_shard_worker_under_load_loses_no_query_on_a_redis_cluster")
    {
        killed_shard_worker(Backend::Cluster).await;
    }
}

async fn killed_shard_worker(backend: Backend) {
    let db = TestDb::create(NUM_PAGES, PAGE_SIZE, rand::random()).unwrap();
    // Short claim-idle time: the surviving replica takes the dead one's jobs quickly.
    let args = ["--claim-idle-ms", "400", "--max-batch-keys", "8"];
    let (mut a, b) = tokio::join!(
        sharded_party(backend, &db, "party-a", &[1, 2, 1], &args),
        sharded_party(backend, &db, "party-b", &[1, 1, 1], &args),
    );
    let c = std::sync::Arc::new(client(&a, &b));
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let c = c.clone();
        let want = indices(2);
        tasks.push(tokio::spawn(async move {
            let got = c.fetch(&want).await;
            (want, got)
        }));
    }
    // Shard 1's first replica (worker index 1, consumer w1) dies holding jobs, without a chance
    // to clean up: wait until it holds some, so the fault is really injected mid-load. Looked at
    // while w1 is paused, so that the kill leaves what was seen, however fast w1 answers.
    let mut conn = a.redis_keys().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        a.workers[1].pause();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let mut held = 0;
        for (_, keys) in a.layout().all_partitions() {
            let pending: Vec<redis::Value> = redis::cmd("XPENDING")
                .arg(keys.jobs())
                .arg("shard-1-of-3")
                .arg("-")
                .arg("+")
                .arg(100)
                .arg("w1")
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            held += pending.len();
        }
        if held > 0 {
            break;
        }
        a.workers[1].resume();
        assert!(
            Instant::now() < deadline,
            "w1 never held a job: no fault injected"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    a.workers[1].kill();
    let mut answered = 0;
    for task in tasks {
        let (want, got) = task.await.unwrap();
        let got = got.expect("every query answered");
        for (i, index) in want.iter().enumerate() {
            assert_eq!(got.pages[i], db.page(*index), "page {index}");
        }
        answered += 1;
    }
    assert_eq!(answered, 40);
    assert_nothing_left(&a).await;
    assert_nothing_left(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn epochs_change_pages_in_every_shard() {
    epochs_in_every_shard(Backend::OneRedis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn epochs_change_pages_in_every_shard_on_a_redis_cluster() {
    if Backend::Cluster.runs("epochs_change_pages_in_every_shard_on_a_redis_cluster") {
        epochs_in_every_shard(Backend::Cluster).await;
    }
}

async fn epochs_in_every_shard(backend: Backend) {
    let db = TestDb::create(NUM_PAGES, PAGE_SIZE, rand::random()).unwrap();
    let (a, b) = tokio::join!(
        sharded_party(backend, &db, "party-a", &[1, 2, 1], &[]),
        sharded_party(backend, &db, "party-b", &[1, 1, 1], &[]),
    );
    let mut model: Vec<Vec<u8>> = (0..NUM_PAGES).map(|p| db.page(p).to_vec()).collect();
    let mut rng = rand::rng();
    for epoch in 1..=3u64 {
        // The first and last page of every shard, and a few random ones.
        let mut targets = vec![0, 255, 256, 511, 512, 999];
        targets.extend((0..4).map(|_| rng.random_range(0..NUM_PAGES)));
        let pages: Vec<PageWrite> = targets
            .iter()
            .map(|&index| {
                let mut page = vec![0u8; PAGE_SIZE as usize];
                rng.fill_bytes(&mut page);
                model[index as usize] = page.clone();
                PageWrite { index, page }
            })
            .collect();
        let update = EpochUpdate { epoch, pages };
        for party in [&a, &b] {
            let api = PartyApi::new(reqwest::Client::new(), &party.url);
            assert_eq!(api.push_epoch(TOKEN, &update).await.unwrap(), epoch);
        }
        let want: Vec<u64> = targets.into_iter().chain(indices(6)).collect();
        let got = client(&a, &b).fetch(&want).await.expect("fetch");
        assert_eq!(got.epoch, epoch);
        for (i, index) in want.iter().enumerate() {
            assert_eq!(
                got.pages[i], model[*index as usize],
                "page {index} at epoch {epoch}"
            );
        }
    }
    assert_nothing_left(&a).await;
}

/// Issue 26: one party serves one shard layout. A worker of another layout (another shard
/// count, or unsharded beside shards) is refused before it joins any consumer group, with a
/// message that names the live layout; the party keeps answering and nothing is dead-lettered.
/// A mix of layouts that got live anyway (two workers started at the same moment) makes the
/// party unready, and `/readyz` says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_of_another_shard_layout_is_refused() {
    another_layout_refused(Backend::OneRedis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_of_another_shard_layout_is_refused_on_a_redis_cluster() {
    if Backend::Cluster.runs("a_worker_of_another_shard_layout_is_refused_on_a_redis_cluster") {
        another_layout_refused(Backend::Cluster).await;
    }
}

async fn another_layout_refused(backend: Backend) {
    let db = TestDb::create(NUM_PAGES, PAGE_SIZE, rand::random()).unwrap();
    let mut a = sharded_party(backend, &db, "layout", &[1, 1, 1], &[]).await;
    for extra in [&["--shard", "0/2"][..], &[][..]] {
        let err = a.start_worker_with(extra).await.unwrap_err().to_string();
        assert!(
            err.contains("does not fit the party's live workers, which serve it in 3 shards"),
            "{err}"
        );
        assert!(err.contains("Start this worker with --shard I/3"), "{err}");
    }
    let mut conn = a.redis_keys().await.unwrap();
    let layout = a.layout();
    let groups: Vec<redis::Value> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(layout.jobs())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(groups.len(), 3, "a refused worker created a consumer group");
    assert_eq!(a.readyz().await.0, 200);
    // One party reached twice (allowed for this check): the XOR still yields the pages.
    let options = Options {
        allow_same_party: true,
        timeout: Duration::from_secs(60),
        ..Options::default()
    };
    let same = pirq_client::Client::with_options(&a.url, &a.url, options).unwrap();
    let want = indices(5);
    let got = same.fetch(&want).await.unwrap();
    for (i, index) in want.iter().enumerate() {
        assert_eq!(got.pages[i], db.page(*index), "page {index}");
    }
    for (_, keys) in layout.all_partitions() {
        let dead: u64 = redis::cmd("XLEN")
            .arg(keys.dead_letters())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(dead, 0);
    }

    // A live worker of two shards among the three-shard workers (as if it had started at the
    // same moment as one of them): not ready, and the reason names both layouts.
    let record = serde_json::json!({
        "worker_id": "other", "shard": {"index": 0, "count": 2},
        "window": {"oldest": 0, "newest": 0},
    });
    let _: () = redis::pipe()
        .cmd("SET")
        .arg(layout.worker("other"))
        .arg(record.to_string())
        .arg("PX")
        .arg(60_000)
        .ignore()
        .cmd("SADD")
        .arg(layout.workers())
        .arg("other")
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    let (status, body) = a.readyz().await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("shard_unavailable"))
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("serve 2 shard layouts at once"),
        "{message}"
    );
    assert!(message.contains("2 shards: other (0/2)"), "{message}");
    let _: () = redis::cmd("DEL")
        .arg(layout.worker("other"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(a.readyz().await.0, 200);
}
