//! Fault injection against real processes (issue 7): a worker killed with SIGKILL in the middle
//! of a window under load, `redis-server` killed and restarted (AOF, `appendfsync always`) under
//! load with `--durability fsync`, and poison jobs written straight into the stream. Each test
//! counts what was accepted and what was answered, and asserts lost = 0.
//!
//! Run: `cargo test -p pirq-e2e --test faults -- --nocapture` (the figures are printed).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use pirq_e2e::fault::{self, pending, stream_len};
use pirq_e2e::requests::one_key;
use pirq_e2e::{cluster_tests_enabled, strings, Cluster, ClusterShape, PartyOptions};
use pirq_shared::dpf::generate;
use pirq_shared::layout::GROUP;
use pirq_shared::wire::Job;
use pirq_testkit::jobs;
use rand::Rng;

/// Submits one single-key query per index to both parties: `(index, id at A, id at B)`.
async fn submit_pairs(
    cluster: &Cluster,
    indices: &[u64],
    domain_bits: u8,
) -> Vec<(u64, String, String)> {
    let (a, b) = (cluster.a.url.clone(), cluster.b.url.clone());
    submit_pairs_to(a, b, indices.to_vec(), domain_bits).await
}

/// [`submit_pairs`] to two party URLs, owning its inputs so that it can run as a task beside a
/// test that watches (and kills) the workers meanwhile.
async fn submit_pairs_to(
    a: String,
    b: String,
    indices: Vec<u64>,
    domain_bits: u8,
) -> Vec<(u64, String, String)> {
    let http = reqwest::Client::new();
    futures::stream::iter(indices)
        .map(|index| {
            let (http, a, b) = (http.clone(), a.clone(), b.clone());
            async move {
                let (k0, k1) = generate(domain_bits, index, &mut rand::rng()).unwrap();
                let within = Duration::from_secs(60);
                let (ia, _) =
                    fault::submit_until_accepted(&http, &a, &one_key(k0.to_bytes()), within).await;
                let (ib, _) =
                    fault::submit_until_accepted(&http, &b, &one_key(k1.to_bytes()), within).await;
                (index, ia, ib)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await
}

/// Waits for every pair and checks `answer_A XOR answer_B` against the database; returns how
/// many are not answered correctly (lost or wrong).
async fn lost_pairs(cluster: &Cluster, jobs: &[(u64, String, String)], within: Duration) -> usize {
    let http = reqwest::Client::new();
    let (a, b) = (cluster.a.url.clone(), cluster.b.url.clone());
    let bad = futures::stream::iter(jobs.iter().cloned())
        .map(|(index, ia, ib)| {
            let (http, a, b) = (http.clone(), a.clone(), b.clone());
            async move {
                let (ra, rb) = tokio::join!(
                    fault::wait_final(&http, &a, &ia, within),
                    fault::wait_final(&http, &b, &ib, within)
                );
                match (ra, rb) {
                    (Some(ra), Some(rb)) if ra["status"] == "done" && rb["status"] == "done" => {
                        let (pa, pb) = (fault::pages(&ra), fault::pages(&rb));
                        let page: Vec<u8> = pa[0].iter().zip(&pb[0]).map(|(x, y)| x ^ y).collect();
                        Some((index, page))
                    }
                    (ra, rb) => {
                        eprintln!("pair for page {index} not answered: A {ra:?} B {rb:?}");
                        None
                    }
                }
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    bad.into_iter()
        .filter(|r| match r {
            Some((index, page)) => page.as_slice() != cluster.db.page(*index),
            None => true,
        })
        .count()
}

#[tokio::test]
async fn worker_killed_mid_window_under_load_loses_nothing() {
    worker_killed_mid_window(None, None).await;
}

/// The same with the party's queue in four partitions: the survivor reclaims in each.
#[tokio::test]
async fn worker_killed_mid_window_loses_nothing_in_four_partitions() {
    worker_killed_mid_window(Some(4), None).await;
}

/// The same on a Redis Cluster of 3 primaries with the queue in four partitions, on all three
/// primaries (`PIRQ_CLUSTER_TESTS=1`): the survivor reclaims in each partition, through the
/// cluster connection, from each partition's node.
#[tokio::test]
async fn worker_killed_mid_window_on_a_redis_cluster_loses_nothing() {
    if !cluster_tests_enabled("worker_killed_mid_window_on_a_redis_cluster_loses_nothing") {
        return;
    }
    let shape = ClusterShape {
        primaries: 3,
        replicas: 0,
    };
    worker_killed_mid_window(Some(4), Some(shape)).await;
}

async fn worker_killed_mid_window(partitions: Option<u32>, redis_cluster: Option<ClusterShape>) {
    // 4 MiB, at most 4 keys in flight in a worker's rotating scan: under load the killed worker
    // holds keys mid-turn and the jobs read ahead waiting for room.
    const PAGES: u64 = 1 << 13;
    const JOBS: usize = 300;
    let opts = PartyOptions {
        worker_args: strings(&["--max-batch-keys", "4", "--claim-idle-ms", "1000"]),
        partitions,
        redis_cluster,
        ..Default::default()
    };
    let mut cluster = Cluster::start(PAGES, 512, opts).await.unwrap();
    if let (Some(shape), Some(2..)) = (redis_cluster, partitions) {
        cluster
            .a
            .assert_partitions_on_every_primary(shape.primaries)
            .await;
    }
    cluster.a.start_worker().await.unwrap(); // w1, the survivor
    let layout = cluster.a.layout();
    let mut conn = cluster.a.redis_keys().await.unwrap();

    let mut rng = rand::rng();
    let indices: Vec<u64> = (0..JOBS).map(|_| rng.random_range(0..PAGES)).collect();
    let start = Instant::now();
    // Submit beside the watch below: the workers drain a finished submission faster than the
    // test could catch w0 holding jobs.
    let submitting = tokio::spawn(submit_pairs_to(
        cluster.a.url.clone(),
        cluster.b.url.clone(),
        indices,
        13,
    ));

    // Kill w0 once the backlog is being worked on and w0 holds jobs (a window in flight plus
    // its read-ahead). Looked at while w0 is paused, so that the kill leaves exactly what was
    // seen, however fast w0 answers.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (held, left_at_kill) = loop {
        cluster.a.workers[0].pause();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let held = pending(&mut conn, &layout, Some("w0")).await;
        let left = stream_len(&mut conn, &layout).await as usize;
        if held >= 2 && left < JOBS * 9 / 10 {
            break (held, left);
        }
        cluster.a.workers[0].resume();
        assert!(
            Instant::now() < deadline,
            "w0 never held jobs (left {left})"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    cluster.a.workers[0].kill();
    let jobs = submitting.await.expect("the submitting task panicked");
    assert_eq!(jobs.len(), JOBS);

    let lost = lost_pairs(&cluster, &jobs, Duration::from_secs(90)).await;
    let took = start.elapsed();
    println!(
        "kill -9 mid-window: jobs accepted = {JOBS} per party, held by the killed worker = {held}, \
         left in the stream at the kill = {left_at_kill}, lost = {lost}, all answered in {took:.1?}"
    );
    assert_eq!(lost, 0, "jobs lost or answered wrongly");
    // The killed worker's unacknowledged entries (answered or not before the kill) are the
    // survivor's to claim once they are idle past --claim-idle-ms: wait for that, bounded.
    let reclaim_deadline = Instant::now() + Duration::from_secs(30);
    while pending(&mut conn, &layout, None).await > 0 && Instant::now() < reclaim_deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let survivor_log = cluster.a.workers[1].log_text();
    assert!(
        survivor_log.contains("claimed jobs idle past the claim-idle time"),
        "the survivor never reclaimed:\n{survivor_log}"
    );
    // Hygiene: everything acknowledged and deleted.
    assert_eq!(stream_len(&mut conn, &layout).await, 0);
    assert_eq!(pending(&mut conn, &layout, None).await, 0);
}

#[tokio::test]
async fn redis_restart_under_load_with_fsync_durability_loses_no_accepted_job() {
    const PAGES: u64 = 4096;
    const JOBS: usize = 300;
    let opts = PartyOptions {
        redis_aof: true,
        gateway_args: strings(&["--durability", "fsync"]),
        worker_args: strings(&["--max-batch-keys", "8", "--claim-idle-ms", "1000"]),
        ..Default::default()
    };
    let mut cluster = Cluster::start(PAGES, 512, opts).await.unwrap();
    // Redis 7.0 (Debian): fsync through `appendfsync always`; Redis ≥ 7.2: through WAITAOF.
    let log = cluster.a.gateway.log_text();
    assert!(
        log.contains("appendfsync always") || log.contains("through WAITAOF"),
        "{log}"
    );

    let http = reqwest::Client::new();
    let accepted = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let (a, b) = (cluster.a.url.clone(), cluster.b.url.clone());
    let load = {
        let (accepted, refused) = (accepted.clone(), refused.clone());
        let indices: Vec<u64> = {
            let mut rng = rand::rng();
            (0..JOBS).map(|_| rng.random_range(0..PAGES)).collect()
        };
        tokio::spawn(async move {
            futures::stream::iter(indices)
                .map(|index| {
                    let (http, a, b) = (http.clone(), a.clone(), b.clone());
                    let (accepted, refused) = (accepted.clone(), refused.clone());
                    async move {
                        let (k0, k1) = generate(12, index, &mut rand::rng()).unwrap();
                        let within = Duration::from_secs(60);
                        let (ia, r) = fault::submit_until_accepted(
                            &http,
                            &a,
                            &one_key(k0.to_bytes()),
                            within,
                        )
                        .await;
                        accepted.fetch_add(1, Ordering::Relaxed);
                        refused.fetch_add(r as usize, Ordering::Relaxed);
                        let (ib, _) = fault::submit_until_accepted(
                            &http,
                            &b,
                            &one_key(k1.to_bytes()),
                            within,
                        )
                        .await;
                        // Pace the load so that the restart falls in the middle of it.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        (index, ia, ib)
                    }
                })
                .buffer_unordered(8)
                .collect::<Vec<_>>()
                .await
        })
    };
    while accepted.load(Ordering::Relaxed) < JOBS / 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let at_kill = accepted.load(Ordering::Relaxed);
    let t = Instant::now();
    // SIGKILL, down for a while, then started again on the same AOF.
    cluster.a.redis.proc.kill();
    // While it is down the gateway answers 503 with Retry-After.
    let probe = one_key(generate(12, 1, &mut rand::rng()).unwrap().0.to_bytes());
    let (status, body, retry) = fault::post(&reqwest::Client::new(), &cluster.a.url, &probe, None)
        .await
        .unwrap();
    assert_eq!((status, retry), (503, Some(1)), "{body}");
    assert_eq!(body["error"]["code"], "redis_unavailable");
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.a.redis.restart().await.unwrap();
    let down = t.elapsed();
    let jobs = load.await.unwrap();
    let lost = lost_pairs(&cluster, &jobs, Duration::from_secs(90)).await;
    println!(
        "redis kill -9 + restart (AOF, appendfsync always, --durability fsync): jobs accepted = {} \
         per party ({at_kill} before the kill), submits refused while down = {}, redis down for \
         {down:.1?}, lost = {lost}",
        jobs.len(),
        refused.load(Ordering::Relaxed)
    );
    assert_eq!(jobs.len(), JOBS);
    assert_eq!(lost, 0, "accepted jobs lost after the redis restart");
}

#[tokio::test]
async fn gateway_refuses_fsync_durability_without_an_fsyncing_redis() {
    let redis = pirq_e2e::Redis::start().await.unwrap(); // appendonly no
    let text = pirq_e2e::gateway_refusal(&[
        "--redis",
        &redis.url(),
        "--prefix",
        "fsync-check",
        "--durability",
        "fsync",
    ]);
    // Redis 7.0 has no WAITAOF and needs appendfsync always; Redis ≥ 7.2 needs appendonly.
    assert!(
        (text.contains("appendfsync always") && text.contains("appendonly=no"))
            || text.contains("has WAITAOF but appendonly is off"),
        "{text}"
    );
}

#[tokio::test]
async fn poison_jobs_go_to_the_dead_letter_stream_and_healthy_ones_are_answered() {
    const PAGES: u64 = 4096;
    let opts = PartyOptions {
        worker_args: strings(&["--max-deliveries", "3", "--claim-idle-ms", "500"]),
        ..Default::default()
    };
    let cluster = Cluster::start(PAGES, 512, opts).await.unwrap();
    let layout = cluster.a.layout();
    let mut conn = cluster.a.redis().await.unwrap();
    let mut rng = rand::rng();

    // Healthy traffic before, beside and after the poison.
    let first: Vec<u64> = (0..20).map(|_| rng.random_range(0..PAGES)).collect();
    let mut healthy = submit_pairs(&cluster, &first, 12).await;

    // Jobs a gateway would have accepted, corrupted on their way through the stream.
    let valid_key = || generate(12, 7, &mut rand::rng()).unwrap().0.to_bytes();
    let job = |keys: Vec<Vec<u8>>| {
        Job {
            keys,
            epoch: None,
            accepted_ms: 0,
            reply: Default::default(),
        }
        .to_bincode()
    };
    let mut truncated = valid_key();
    truncated.pop();
    let mut bad_version = valid_key();
    bad_version[0] = 9;
    let mut garbage = job(vec![valid_key()]);
    garbage.truncate(garbage.len() / 2);
    let poison: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated key", job(vec![truncated]), "key_length"),
        ("key version byte", job(vec![bad_version]), "key_version"),
        ("job bytes cut in half", garbage, "invalid_job"),
    ];
    let mut poison_ids = Vec::new();
    for (what, bytes, code) in &poison {
        let id = format!("{:032x}", rand::random::<u128>());
        jobs::enqueue(&mut conn, &layout, &id, bytes).await.unwrap();
        poison_ids.push((*what, id, *code, 3u64));
    }
    // An entry that is no job at all (no request id): dead-lettered at once, nobody waits.
    jobs::enqueue_junk(&mut conn, &layout, "x").await.unwrap();
    // A valid job that (as far as the group knows) workers died on three times already: a
    // consumer that never comes back took it, and its delivery count says 3.
    let crash_id = format!("{:032x}", rand::random::<u128>());
    let _: () = redis::cmd("SET")
        .arg(layout.query(&crash_id))
        .arg(jobs::QUEUED_RECORD)
        .query_async(&mut conn)
        .await
        .unwrap();
    // One script, so no worker reads it first: the ghost consumer reads whatever is new (this
    // entry and maybe healthy ones), hands the healthy ones straight back, and keeps this one
    // with a delivery count of 3.
    const GHOST: &str = r#"
local mine = redis.call('XADD', KEYS[1], '*', 'id', ARGV[1], 'job', ARGV[2])
local read = redis.call('XREADGROUP', 'GROUP', ARGV[3], 'ghost', 'COUNT', 100000, 'STREAMS', KEYS[1], '>')
for _, e in ipairs(read[1][2]) do
  local n = 0
  if e[1] == mine then n = 3 end
  redis.call('XCLAIM', KEYS[1], ARGV[3], 'ghost', 0, e[1], 'IDLE', 3600000, 'RETRYCOUNT', n, 'JUSTID')
end
return mine
"#;
    let _: String = redis::cmd("EVAL")
        .arg(GHOST)
        .arg(1)
        .arg(layout.jobs())
        .arg(&crash_id)
        .arg(job(vec![valid_key()]))
        .arg(GROUP)
        .query_async(&mut conn)
        .await
        .unwrap();
    poison_ids.push(("delivered 3 times before", crash_id, "delivery_limit", 4));

    let after: Vec<u64> = (0..20).map(|_| rng.random_range(0..PAGES)).collect();
    healthy.extend(submit_pairs(&cluster, &after, 12).await);

    let http = reqwest::Client::new();
    for (what, id, code, deliveries) in &poison_ids {
        let r = fault::wait_final(&http, &cluster.a.url, id, Duration::from_secs(30))
            .await
            .unwrap_or_else(|| panic!("poison {what} never final"));
        assert_eq!(r["status"], "failed", "{what}: {r}");
        assert_eq!(r["error"]["code"], *code, "{what}: {r}");
        let message = r["error"]["message"].as_str().unwrap_or("");
        if *code != "delivery_limit" {
            assert!(
                message.starts_with(&format!("gave up after {deliveries} deliveries")),
                "{what}: {message}"
            );
        }
    }
    let lost = lost_pairs(&cluster, &healthy, Duration::from_secs(60)).await;

    // The dead-letter stream: one entry per poison job, with the reason and delivery count.
    let dead: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(layout.dead_letters())
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    let field = |e: &redis::streams::StreamId, name: &str| -> String {
        e.get::<String>(name).unwrap_or_default()
    };
    for (what, id, code, deliveries) in &poison_ids {
        let e = dead
            .ids
            .iter()
            .find(|e| field(e, "id") == *id)
            .unwrap_or_else(|| panic!("{what} not in the dead-letter stream"));
        assert_eq!(field(e, "code"), *code, "{what}");
        assert_eq!(field(e, "deliveries"), deliveries.to_string(), "{what}");
    }
    assert!(dead
        .ids
        .iter()
        .any(|e| field(e, "junk") == "x" && field(e, "code") == "invalid_job"));
    assert_eq!(dead.ids.len(), poison_ids.len() + 1);
    let running = cluster.a.workers.len();
    println!(
        "poison: {} poison entries injected (3 corrupted jobs, 1 crash-looping job, 1 entry \
         without id), dead-lettered = {}, healthy jobs = {} per party, healthy lost = {lost}",
        poison_ids.len() + 1,
        dead.ids.len(),
        healthy.len()
    );
    assert_eq!(lost, 0, "healthy jobs beside the poison were affected");
    assert_eq!(running, 1);
    let mut cluster = cluster;
    assert!(
        cluster.a.workers[0].is_running(),
        "poison crashed the worker"
    );
    assert_eq!(stream_len(&mut conn, &layout).await, 0);
    assert_eq!(pending(&mut conn, &layout, None).await, 0);
}

#[tokio::test]
async fn dead_letter_stream_is_capped() {
    const CAP: u64 = 50;
    const JUNK: usize = 600;
    let db = pirq_e2e::TestDb::create(1000, 256, 11).unwrap();
    let opts = PartyOptions {
        worker_args: strings(&["--dead-letter-max", &CAP.to_string()]),
        ..Default::default()
    };
    let party = pirq_e2e::Party::start(&db.path, "deadcap", opts)
        .await
        .unwrap();
    let layout = party.layout();
    let mut conn = party.redis().await.unwrap();
    // Entries that are no job at all: each is dead-lettered at its first delivery.
    let mut pipe = redis::pipe();
    for i in 0..JUNK {
        pipe.cmd("XADD")
            .arg(layout.jobs())
            .arg("*")
            .arg("junk")
            .arg(i)
            .ignore();
    }
    let _: () = pipe.query_async(&mut conn).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while stream_len(&mut conn, &layout).await > 0 {
        assert!(Instant::now() < deadline, "junk not drained");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let dead: u64 = redis::cmd("XLEN")
        .arg(layout.dead_letters())
        .query_async(&mut conn)
        .await
        .unwrap();
    println!("dead-letter cap {CAP}: {JUNK} junk entries dead-lettered, {{P}}:dead holds {dead}");
    // `MAXLEN ~` trims whole stream nodes (100 entries each by default).
    assert!((CAP..=CAP + 100).contains(&dead), "{dead}");
    assert_eq!(pending(&mut conn, &layout, None).await, 0);
}
