//! A party on a Redis Cluster whose primary fails under load (issue 29): party A's Redis is a
//! cluster of 3 primaries with replicas (party B a single Redis); while queries pour in, the
//! primary serving A's slot is killed with SIGKILL. Its replica is promoted (the cluster's
//! `cluster-node-timeout` is 1 s here), A's gateway and worker find it through the `redis`
//! crate's cluster connection, and every query accepted, before and after, is answered exactly
//! (`answer_A XOR answer_B` against the database). The figures (promotion time, refusals the
//! clients saw and retried, lost queries) are printed.
//!
//! Three runs:
//!
//! - `--durability ack`, one replica per primary: a submit is accepted once the primary has it,
//!   and Redis replicates asynchronously, so a primary killed between its reply and the
//!   replica's copy would lose that query. On one machine the copy follows within a
//!   millisecond; the test counts such losses rather than hiding them (it asserts none, which
//!   this mode does not guarantee).
//! - `--durability replica`, two replicas per primary: a submit is accepted only once a replica
//!   confirmed it (`WAIT 1`), so none can be lost; the promoted primary keeps a replica, so
//!   accepts resume after the failover. The clients' retries (503 `redis_unavailable` while the
//!   slot has no primary, `not_durable` while the new primary has no replica online) are
//!   counted and printed.
//! - `--durability replica` again with A's queue in four partitions spread over the three
//!   primaries: each accept's `WAIT` goes to its own partition's primary, and the partitions
//!   on the primaries that did not fail go on accepting.
//!
//! Beside them, two refusals of a primary left without its replica: the one of the request's
//! slot, and (issue 38) a named table's own, whose keys sit on another primary than `default`'s.
//!
//! Slow (seven or nine redis-servers, a failover, hundreds of queries): runs with
//! `PIRQ_CLUSTER_TESTS=1` only (`scripts/test.sh` says so when it skips it):
//! `PIRQ_CLUSTER_TESTS=1 cargo test --release -p pirq-e2e --test cluster_failover -- --nocapture`.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use pirq_e2e::fault;
use pirq_e2e::requests::one_key;
use pirq_e2e::{cluster_tests_enabled, ClusterShape, Party, PartyOptions, TestDb};
use pirq_shared::dpf::generate;
use pirq_shared::wire::QueryRequest;
use rand::Rng;

/// A party on a Redis Cluster of 3 primaries with a replica each, its gateway started with
/// `--durability replica`.
fn replica_durable_cluster() -> PartyOptions {
    PartyOptions {
        redis_cluster: Some(ClusterShape {
            primaries: 3,
            replicas: 1,
        }),
        gateway_args: vec!["--durability".into(), "replica".into()],
        ..PartyOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_killed_under_load_fails_over_and_loses_nothing() {
    if !cluster_tests_enabled("a_primary_killed_under_load_fails_over_and_loses_nothing") {
        return;
    }
    fail_over_under_load("ack", 1, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_replica_durability_a_failover_loses_no_accepted_query() {
    if !cluster_tests_enabled("with_replica_durability_a_failover_loses_no_accepted_query") {
        return;
    }
    fail_over_under_load("replica", 2, None).await;
}

/// The same with party A's queue in four partitions, which sit on all three primaries: each
/// accept's `EXISTS` and `WAIT` go to the primary of the request's own partition, so while one
/// primary fails over, the partitions on the others go on accepting, and no accepted query of
/// any partition is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_replica_durability_and_four_partitions_a_failover_loses_no_accepted_query() {
    if !cluster_tests_enabled(
        "with_replica_durability_and_four_partitions_a_failover_loses_no_accepted_query",
    ) {
        return;
    }
    fail_over_under_load("replica", 2, Some(4)).await;
}

/// The `WAIT` and the replica check go to the primary of the request's slot: with that
/// primary's only replica killed, every submit is refused 503 `not_durable` at once (the
/// `WAIT` finds no replica there, though the other primaries have theirs), and within the 5 s
/// re-check the refusal says that the primary has no replica online.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_replica_durability_a_primary_without_its_replica_refuses() {
    if !cluster_tests_enabled("with_replica_durability_a_primary_without_its_replica_refuses") {
        return;
    }
    let db = TestDb::create(1 << 10, 256, rand::random()).unwrap();
    let mut a = Party::start(&db.path, "party-a", replica_durable_cluster())
        .await
        .unwrap();
    let primary = a.redis.primary_for(&a.layout().db()).await.unwrap();
    let http = reqwest::Client::new();
    let (k0, _) = generate(10, 7, &mut rand::rng()).unwrap();
    let query = one_key(k0.to_bytes());
    let (_, refused) =
        fault::submit_until_accepted(&http, &a.url, &query, Duration::from_secs(30)).await;
    assert_eq!(refused, 0, "refused with every replica online");

    kill_replica_of(&mut a, primary).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let started = Instant::now();
    let messages = refused_until_rechecked(Duration::from_secs(15), "default", || async {
        let (status, body, _) = fault::post(&http, &a.url, &query, None).await.unwrap();
        (status, body)
    })
    .await;
    println!(
        "a primary without its replica, --durability replica: {} submits refused 503 \
         not_durable, the re-check's after {:.1?}; first: {}",
        messages.len(),
        started.elapsed(),
        messages[0]
    );
}

/// Issue 38: a named table's keys have hash tags of their own (`{P:t:NAME}`), here on another
/// primary than the table `default`'s. With that primary's only replica killed, the table's
/// submits are refused 503 `not_durable` by the table's own re-check ("has no replica online":
/// a check of `default`'s primaries alone would let them through to a `WAIT` that times out)
/// while `default`'s are accepted; and a gateway started then refuses to start, naming the
/// table.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_replica_durability_each_table_is_checked_on_its_own_primaries() {
    if !cluster_tests_enabled("with_replica_durability_each_table_is_checked_on_its_own_primaries")
    {
        return;
    }
    let db = TestDb::create(1 << 10, 256, rand::random()).unwrap();
    let table_db = TestDb::create(64, 256, rand::random()).unwrap();
    let mut a = Party::start(&db.path, "party-a", replica_durable_cluster())
        .await
        .unwrap();
    let layout = a.layout();
    let home = a.redis.primary_for(&layout.db()).await.unwrap();
    // The first table name whose queue sits on another primary than `default`'s.
    let mut other = None;
    for i in 0..64 {
        let name = format!("t{i}");
        let jobs = layout.table(&name).unwrap().partition(0).jobs();
        let primary = a.redis.primary_for(&jobs).await.unwrap();
        if primary != home {
            other = Some((name, primary));
            break;
        }
    }
    let (name, primary) = other.expect("a table name on another primary of three");
    a.start_table_worker(&[(&name, &table_db.path)])
        .await
        .unwrap();

    let http = reqwest::Client::new();
    let table_url = format!("{}/v1/tables/{name}/queries", a.url);
    let (k, _) = generate(6, 5, &mut rand::rng()).unwrap();
    let table_query = one_key(k.to_bytes());
    let submit_table = || async {
        let resp = http
            .post(&table_url)
            .header("content-type", "application/json")
            .body(table_query.to_json())
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (
            status,
            resp.json::<serde_json::Value>().await.unwrap_or_default(),
        )
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = submit_table().await;
        if status == 202 {
            break;
        }
        assert_eq!(status, 503, "{body}");
        assert!(
            Instant::now() < deadline,
            "table {name} never accepted: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    kill_replica_of(&mut a, primary).await;

    // Within the 5 s re-check (and a WAIT timeout or two), the table's own check refuses.
    let started = Instant::now();
    let messages = refused_until_rechecked(
        Duration::from_secs(20),
        &format!("table {name}"),
        submit_table,
    )
    .await;
    // `default`'s primary keeps its replica: its submits go on.
    let (k0, _) = generate(10, 7, &mut rand::rng()).unwrap();
    let (_, refused) = fault::submit_until_accepted(
        &http,
        &a.url,
        &one_key(k0.to_bytes()),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(refused, 0, "default refused, its primary has its replica");

    // A gateway starting now checks the tables the party lists too.
    let refusal = a.restart_gateway(&[]).await.unwrap_err().to_string();
    assert!(
        refusal.contains(&format!("partition 0 of table {name}"))
            && refusal.contains("no replica online"),
        "{refusal}"
    );
    println!(
        "table {name} on primary {primary} (default on {home}), its replica killed: {} submits \
         refused, the table's re-check after {:.1?}; a new gateway refused: {}",
        messages.len(),
        started.elapsed(),
        refusal.lines().find(|l| l.contains("table")).unwrap_or("")
    );
}

/// Party A on a 3-primary cluster with `replicas` per primary, `--durability durability` and
/// its queue in `partitions` (one without); kills the primary of A's database record (with
/// partitions, that of some of them) once a third of the queries are accepted, and asserts
/// that every accepted query is answered exactly.
async fn fail_over_under_load(durability: &str, replicas: usize, partitions: Option<u32>) {
    const PAGES: u64 = 1 << 12;
    const JOBS: usize = 400;
    let db = TestDb::create(PAGES, 512, rand::random()).unwrap();
    let on_cluster = PartyOptions {
        redis_cluster: Some(ClusterShape {
            primaries: 3,
            replicas,
        }),
        gateway_args: vec!["--durability".into(), durability.into()],
        partitions,
        ..PartyOptions::default()
    };
    let (mut a, b) = tokio::try_join!(
        Party::start(&db.path, "party-a", on_cluster),
        Party::start(&db.path, "party-b", PartyOptions::default()),
    )
    .unwrap();
    if partitions.is_some() {
        a.assert_partitions_on_every_primary(3).await;
    }
    let slot_key = a.layout().db();
    let primary = a.redis.primary_for(&slot_key).await.unwrap();

    let accepted = Arc::new(AtomicUsize::new(0));
    let refusals = Arc::new(Refusals::default());
    let mut rng = rand::rng();
    let indices: Vec<u64> = (0..JOBS).map(|_| rng.random_range(0..PAGES)).collect();
    let start = Instant::now();
    let submitting = {
        let (ua, ub) = (a.url.clone(), b.url.clone());
        let (accepted, refusals) = (accepted.clone(), refusals.clone());
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            futures::stream::iter(indices)
                .map(|index| {
                    let (http, ua, ub) = (http.clone(), ua.clone(), ub.clone());
                    let (accepted, refusals) = (accepted.clone(), refusals.clone());
                    async move {
                        let (k0, k1) = generate(12, index, &mut rand::rng()).unwrap();
                        let within = Duration::from_secs(60);
                        let ia =
                            submit_counting(&http, &ua, &one_key(k0.to_bytes()), within, &refusals)
                                .await;
                        let (ib, refused_b) = fault::submit_until_accepted(
                            &http,
                            &ub,
                            &one_key(k1.to_bytes()),
                            within,
                        )
                        .await;
                        accepted.fetch_add(1, Ordering::Relaxed);
                        refusals.party_b.fetch_add(refused_b, Ordering::Relaxed);
                        (index, ia, ib)
                    }
                })
                .buffer_unordered(8)
                .collect::<Vec<_>>()
                .await
        })
    };

    // Kill the primary of A's slot once a third of the queries are in.
    let deadline = Instant::now() + Duration::from_secs(60);
    while accepted.load(Ordering::Relaxed) < JOBS / 3 {
        assert!(Instant::now() < deadline, "queries are not being accepted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let accepted_at_kill = accepted.load(Ordering::Relaxed);
    a.redis.kill_node(primary);
    let killed = Instant::now();
    let promoted = loop {
        match a.redis.primary_for(&slot_key).await {
            Ok(port) if port != primary => break port,
            _ => {}
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "no replica was promoted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let promoted_in = killed.elapsed();

    let jobs = submitting.await.expect("the submitting task panicked");
    let accepted_in = start.elapsed();
    let http = reqwest::Client::new();
    let within = Duration::from_secs(90);
    let lost = futures::stream::iter(jobs.iter().cloned())
        .map(|(index, ia, ib)| {
            let (http, ua, ub, db) = (http.clone(), a.url.clone(), b.url.clone(), &db);
            async move {
                let (ra, rb) = tokio::join!(
                    fault::wait_final(&http, &ua, &ia, within),
                    fault::wait_final(&http, &ub, &ib, within)
                );
                match (ra, rb) {
                    (Some(ra), Some(rb)) if ra["status"] == "done" && rb["status"] == "done" => {
                        let (pa, pb) = (fault::pages(&ra), fault::pages(&rb));
                        let page: Vec<u8> = pa[0].iter().zip(&pb[0]).map(|(x, y)| x ^ y).collect();
                        page.as_slice() != db.page(index)
                    }
                    (ra, rb) => {
                        eprintln!("pair for page {index} not answered: A {ra:?} B {rb:?}");
                        true
                    }
                }
            }
        })
        .buffer_unordered(16)
        .filter(|bad| std::future::ready(*bad))
        .count()
        .await;
    println!(
        "redis cluster failover under load, --durability {durability}, {replicas} replica(s) \
         per primary, partitions {partitions:?}: {JOBS} queries per party, {accepted_at_kill} accepted \
         when primary 127.0.0.1:{primary} was killed, replica 127.0.0.1:{promoted} promoted \
         after {promoted_in:.1?}, refusals retried by the clients: {refusals}, all accepted in \
         {accepted_in:.1?}, answered in {:.1?}, lost or wrong = {lost}",
        start.elapsed()
    );
    assert_eq!(lost, 0, "queries lost or answered wrongly");
    let worker_log = a.workers[0].log_text();
    assert!(a.workers[0].is_running(), "the worker died:\n{worker_log}");
}

/// The refusals the clients saw and retried, by kind (party A's by its error code).
#[derive(Default)]
struct Refusals {
    /// 503 `redis_unavailable`: the slot had no reachable primary.
    unavailable: AtomicU32,
    /// 503 `not_durable`: no replica confirmed in time, or the partition's primary had none.
    not_durable: AtomicU32,
    /// 503 `not_durable` saying the job was lost (its primary failed before a replica had it).
    lost: AtomicU32,
    /// Other 503s, or no answer at all.
    other: AtomicU32,
    /// Party B's refusals (one Redis, never failed: expected 0).
    party_b: AtomicU32,
}

impl std::fmt::Display for Refusals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |c: &AtomicU32| c.load(Ordering::Relaxed);
        write!(
            f,
            "A: {} redis_unavailable + {} not_durable (of which {} said lost) + {} other, B: {}",
            n(&self.unavailable),
            n(&self.not_durable) + n(&self.lost),
            n(&self.lost),
            n(&self.other),
            n(&self.party_b)
        )
    }
}

/// Submits until a 202, counting each refusal by kind in `refusals`; the id.
async fn submit_counting(
    http: &reqwest::Client,
    url: &str,
    request: &QueryRequest,
    within: Duration,
    refusals: &Refusals,
) -> String {
    let deadline = Instant::now() + within;
    loop {
        let counter = match fault::post(http, url, request, None).await {
            Ok((202, body, _)) => return body["id"].as_str().expect("id").to_string(),
            Ok((503, body, _)) => match body["error"]["code"].as_str() {
                Some("redis_unavailable") => &refusals.unavailable,
                Some("not_durable")
                    if body["error"]["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("will not be answered")) =>
                {
                    &refusals.lost
                }
                Some("not_durable") => &refusals.not_durable,
                _ => &refusals.other,
            },
            Err(_) => &refusals.other,
            Ok((status, body, _)) => panic!("submit answered {status}: {body}"),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        assert!(Instant::now() < deadline, "no 202 within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Kills the replica of the cluster node at `primary` (found in the node's own `INFO
/// replication`).
async fn kill_replica_of(party: &mut Party, primary: u16) {
    let client = redis::Client::open(format!("redis://127.0.0.1:{primary}")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut conn)
        .await
        .unwrap();
    let replica: u16 = info
        .lines()
        .find(|l| l.starts_with("slave0:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("port=")))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no replica in {info}"));
    party.redis.kill_node(replica);
}

/// Submits through `submit` until a refusal says the re-check found the primary without a
/// replica ("has no replica online"), within `within`; every answer must be 503
/// `not_durable` (`what` names whose submits, for the messages). The refusals' messages.
async fn refused_until_rechecked<F, Fut>(within: Duration, what: &str, mut submit: F) -> Vec<String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (u16, serde_json::Value)>,
{
    let started = Instant::now();
    let mut messages = Vec::new();
    loop {
        let (status, body) = submit().await;
        assert_eq!(status, 503, "{what} accepted without a replica: {body}");
        assert_eq!(body["error"]["code"], "not_durable", "{body}");
        let message = body["error"]["message"].as_str().unwrap().to_string();
        let rechecked = message.contains("has no replica online");
        messages.push(message);
        if rechecked {
            return messages;
        }
        assert!(
            started.elapsed() < within,
            "{what}'s primary was never re-checked: {messages:?}"
        );
    }
}
