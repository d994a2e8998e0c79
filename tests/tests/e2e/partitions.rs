//! A party's queue in partitions (issue 29, item 2; `docs/redis.md`, "Partitions"): gateways
//! spread requests over the partitions, a worker consumes every partition fairly (a backlog in one
//! does not starve the others), and a gateway or worker started with another partition count
//! than the party's (recorded in Redis) refuses to start. The rest of the protocol at four
//! partitions is exercised by the suites' four-partition variants (`one_slot`: pages, replays,
//! epochs and shards, in a Redis that refuses keys of two slots; `kv`; `faults`: kill -9
//! reclaim) and by any suite under `PIRQ_PARTITIONS=4`.

use std::time::{Duration, Instant};

use futures::StreamExt;
use pirq_e2e::{Party, PartyOptions, TestDb};
use pirq_queue::connect::TlsFiles;
use pirq_queue::record::{self, Notice};
use pirq_queue::{events, RedisTarget};
use pirq_shared::dpf::generate;
use pirq_shared::layout::Layout;
use pirq_shared::wire::Job;
use pirq_testkit::jobs;

const PAGES: u64 = 256;
const PARTITIONS: u32 = 4;

fn options() -> PartyOptions {
    PartyOptions {
        partitions: Some(PARTITIONS),
        ..PartyOptions::default()
    }
}

/// A random request id (32 hex digits) that lives in `partition`.
fn id_in(layout: &Layout, partition: u32) -> String {
    loop {
        let id = format!("{:032x}", rand::random::<u128>());
        if layout.partition_of_id(&id) == partition {
            return id;
        }
    }
}

/// A one-key job for page `index`, as a gateway would queue it.
fn job(index: u64) -> Vec<u8> {
    let bits = pirq_shared::dpf::domain_bits(PAGES);
    let (k0, _) = generate(bits, index, &mut rand::rng()).unwrap();
    Job {
        keys: vec![k0.to_bytes()],
        epoch: None,
        accepted_ms: 0,
        reply: Default::default(),
    }
    .to_bincode()
}

/// How many of `ids` have a `done` record.
async fn done(
    conn: &mut redis::aio::MultiplexedConnection,
    layout: &Layout,
    ids: &[String],
) -> usize {
    let mut pipe = redis::pipe();
    for id in ids {
        pipe.cmd("GETRANGE").arg(layout.query(id)).arg(0).arg(4);
    }
    let heads: Vec<String> = pipe.query_async(conn).await.unwrap();
    heads.iter().filter(|s| s.as_str() == "done ").count()
}

/// The request ids the party's workers announce `done`, in the order announced: the gateway's
/// own subscription to every partition's status channel (`pirq_queue::events`).
async fn announcements(
    party: &Party,
    layout: &Layout,
) -> impl futures::Stream<Item = String> + Unpin {
    let target = RedisTarget::open(&party.redis.url(), TlsFiles::default()).unwrap();
    events::subscribe(&target, layout)
        .await
        .unwrap()
        .flat_map(|payload| {
            let done: Vec<String> = record::frames(&payload)
                .filter(|(id, frame)| matches!(Notice::decode(id, frame), Some(Notice::Final(_))))
                .map(|(id, _)| id.to_string())
                .collect();
            futures::stream::iter(done)
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backlog_in_one_partition_does_not_starve_the_others() {
    let db = TestDb::create(PAGES, 256, rand::random()).unwrap();
    let mut party = Party::start(&db.path, "fair", options()).await.unwrap();
    party.stop_workers();
    let layout = party.layout();
    let mut conn = party.redis().await.unwrap();
    // 200 jobs in partition 0 first, then 20 in each of the others: a worker that read its
    // partitions one after the other would answer all of partition 0's first.
    const BUSY: usize = 200;
    const QUIET: usize = 20;
    let mut busy = Vec::new();
    for i in 0..BUSY {
        let id = id_in(&layout, 0);
        jobs::enqueue(&mut conn, &layout, &id, &job(i as u64 % PAGES))
            .await
            .unwrap();
        busy.push(id);
    }
    let mut quiet = Vec::new();
    for partition in 1..PARTITIONS {
        for i in 0..QUIET {
            let id = id_in(&layout, partition);
            jobs::enqueue(&mut conn, &layout, &id, &job(i as u64))
                .await
                .unwrap();
            quiet.push(id);
        }
    }
    // The order of answers, as the worker announces them (each `{P:p}:done` channel, sharded
    // pub/sub, on one connection: Redis delivers one node's pushes in publish order). Read by
    // order, not by polling the records: a CUDA worker answers all 260 jobs within a few tens
    // of milliseconds, faster than a poll of 260 records can tell them apart (measured on an
    // H100, twice).
    let mut announced = announcements(&party, &layout).await;
    // Four keys in flight: the worker's channel holds four jobs, one a partition.
    party
        .start_worker_with(&["--max-batch-keys", "4"])
        .await
        .unwrap();
    let mut quiet_left: std::collections::HashSet<&String> = quiet.iter().collect();
    let mut busy_done_when_quiet_done = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !quiet_left.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        let id = tokio::time::timeout(left, announced.next())
            .await
            .expect("the quiet partitions were not answered")
            .expect("the subscription ended");
        if !quiet_left.remove(&id) && busy.contains(&id) {
            busy_done_when_quiet_done += 1;
        }
    }
    println!(
        "fairness: {} jobs of partitions 1..{PARTITIONS} answered while {busy_done_when_quiet_done} of \
         partition 0's {BUSY} were",
        quiet.len()
    );
    // Taken in turn, the quiet partitions' 60 jobs are answered alongside about 20 of the busy
    // one's; taken one partition after the other, all 200 of it would come first.
    assert!(
        busy_done_when_quiet_done <= BUSY / 2,
        "partition 0 answered {busy_done_when_quiet_done} of {BUSY} before the other partitions' \
         {} were",
        quiet.len()
    );
    // And the busy partition is answered too.
    let deadline = Instant::now() + Duration::from_secs(120);
    while done(&mut conn, &layout, &busy).await < BUSY {
        assert!(Instant::now() < deadline, "partition 0 was not answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gateways_spread_queries_over_every_partition() {
    let db = TestDb::create(PAGES, 256, rand::random()).unwrap();
    let party = Party::start(&db.path, "spread", options()).await.unwrap();
    let layout = party.layout();
    let http = reqwest::Client::new();
    let bits = pirq_shared::dpf::domain_bits(PAGES);
    let mut ids = Vec::new();
    for i in 0..(4 * PARTITIONS as u64) {
        let (k0, _) = generate(bits, i, &mut rand::rng()).unwrap();
        let request = pirq_shared::wire::QueryRequest {
            keys: vec![k0.to_bytes()],
            epoch: None,
        };
        let (status, body, _) = pirq_e2e::fault::post(&http, &party.url, &request, None)
            .await
            .unwrap();
        assert_eq!(status, 202, "{body}");
        ids.push(body["id"].as_str().unwrap().to_string());
    }
    // Round robin: each partition gets a quarter.
    let mut per_partition = vec![0; PARTITIONS as usize];
    for id in &ids {
        per_partition[layout.partition_of_id(id) as usize] += 1;
    }
    assert_eq!(
        per_partition,
        vec![4; PARTITIONS as usize],
        "{per_partition:?}"
    );
    for id in &ids {
        let done = pirq_e2e::fault::wait_final(&http, &party.url, id, Duration::from_secs(30))
            .await
            .expect("answered");
        assert_eq!(done["status"], "done", "{done}");
    }
    // A retry with the same Idempotency-Key names the first query, whatever the partition.
    let (k0, _) = generate(bits, 3, &mut rand::rng()).unwrap();
    let request = pirq_shared::wire::QueryRequest {
        keys: vec![k0.to_bytes()],
        epoch: None,
    };
    for key in ["retry-a", "retry-b", "retry-c", "retry-d"] {
        let mut named = Vec::new();
        for _ in 0..2 {
            let (status, body, _) = pirq_e2e::fault::post(&http, &party.url, &request, Some(key))
                .await
                .unwrap();
            assert!(status == 200 || status == 202, "{status} {body}");
            named.push(body["id"].as_str().unwrap().to_string());
        }
        assert_eq!(
            named[0], named[1],
            "the replay of {key} names the first query"
        );
        assert_eq!(
            layout.partition_of_id(&named[0]),
            layout.partition_of_idempotency_key(key)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_partition_count_is_refused_at_start() {
    let db = TestDb::create(PAGES, 256, rand::random()).unwrap();
    let party = Party::start(&db.path, "count", options()).await.unwrap();
    let redis = party.redis.url();
    let db_path = db.path.display().to_string();
    let port = pirq_e2e::free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let strings = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let refused = [
        (
            "pirq-worker",
            strings(&[
                "--redis",
                &redis,
                "--prefix",
                "count",
                "--backend",
                "cpu",
                "--db",
                &db_path,
                "--partitions",
                "2",
            ]),
        ),
        (
            "pirq-gateway",
            strings(&[
                "--redis",
                &redis,
                "--prefix",
                "count",
                "--listen",
                &listen,
                "--partitions",
                "2",
            ]),
        ),
    ];
    for (binary, args) in refused {
        let (status, output) =
            tokio::task::spawn_blocking(move || pirq_e2e::run_until_exit(binary, &args))
                .await
                .unwrap();
        assert_eq!(status, Some(1), "{binary} did not refuse:\n{output}");
        assert!(
            output.contains("records 4 partition(s)")
                && output.contains("--partitions 2")
                && output.contains("docs/redis.md"),
            "{binary}:\n{output}"
        );
    }
    // The party's own processes serve on.
    assert_eq!(party.live_workers().await, Some(1));
}
