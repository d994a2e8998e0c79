//! `--durability replica` on one Redis with a replica (`REPLICAOF`): the gateway refuses to start
//! without a replica online, accepts and answers every query exactly with one, and answers 503
//! `not_durable` (the 5 s re-check) once the replica is gone. The failover itself, with a
//! replica promoted under load, is `cluster_failover.rs` (a Redis Cluster promotes by itself;
//! one Redis's replica is promoted by an operator or Sentinel, which pirq does not drive).

use std::time::{Duration, Instant};

use pirq_e2e::requests::one_key;
use pirq_e2e::{fault, Cluster, PartyOptions, Redis};
use pirq_shared::dpf::generate;
use rand::Rng;

#[tokio::test]
async fn gateway_refuses_replica_durability_without_a_replica() {
    let redis = Redis::start().await.unwrap();
    let text = pirq_e2e::gateway_refusal(&[
        "--redis",
        &redis.url(),
        "--prefix",
        "replica-check",
        "--durability",
        "replica",
    ]);
    assert!(
        text.contains("--durability replica") && text.contains("no replica online"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replica_durability_accepts_with_a_replica_and_refuses_once_it_is_gone() {
    if pirq_testkit::cluster_mode_from_env() {
        println!("skipped: a cluster-mode Redis refuses REPLICAOF (cluster_failover.rs covers it)");
        return;
    }
    const PAGES: u64 = 1 << 10;
    const JOBS: usize = 60;
    let mut cluster = Cluster::start(PAGES, 256, PartyOptions::default())
        .await
        .unwrap();
    let mut replica = Redis::start().await.unwrap();
    let mut rc = replica.manager().await.unwrap();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(cluster.a.redis.port)
        .query_async(&mut rc)
        .await
        .unwrap();
    // The gateway refuses to start until the replica is online: retry its start meanwhile.
    let deadline = Instant::now() + Duration::from_secs(30);
    let durable = ["--durability".to_string(), "replica".to_string()];
    while let Err(e) = cluster.a.restart_gateway(&durable).await {
        assert!(Instant::now() < deadline, "gateway never started: {e}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let http = reqwest::Client::new();
    let (ua, ub) = (cluster.a.url.clone(), cluster.b.url.clone());
    let mut rng = rand::rng();
    let mut refusals = 0;
    let mut jobs = Vec::new();
    for _ in 0..JOBS {
        let index = rng.random_range(0..PAGES);
        let (k0, k1) = generate(10, index, &mut rng).unwrap();
        let within = Duration::from_secs(30);
        let (ia, ra) =
            fault::submit_until_accepted(&http, &ua, &one_key(k0.to_bytes()), within).await;
        let (ib, rb) =
            fault::submit_until_accepted(&http, &ub, &one_key(k1.to_bytes()), within).await;
        refusals += ra + rb;
        jobs.push((index, ia, ib));
    }
    let mut wrong = 0;
    for (index, ia, ib) in &jobs {
        let within = Duration::from_secs(60);
        let ra = fault::wait_final(&http, &ua, ia, within).await.unwrap();
        let rb = fault::wait_final(&http, &ub, ib, within).await.unwrap();
        let (pa, pb) = (fault::pages(&ra), fault::pages(&rb));
        let page: Vec<u8> = pa[0].iter().zip(&pb[0]).map(|(x, y)| x ^ y).collect();
        if ra["status"] != "done" || page.as_slice() != cluster.db.page(*index) {
            wrong += 1;
        }
    }
    assert_eq!(wrong, 0, "accepted queries answered wrongly or not at all");
    // The replica confirmed each: it holds every accepted query's record.
    for (_, ia, _) in &jobs {
        let on_replica: bool = redis::cmd("EXISTS")
            .arg(cluster.a.layout().query(ia))
            .query_async(&mut rc)
            .await
            .unwrap();
        assert!(on_replica, "query {ia} accepted, yet not on the replica");
    }

    // The replica gone: within the 5 s re-check (or the WAIT's own timeout), 503 not_durable.
    replica.proc.kill();
    let deadline = Instant::now() + Duration::from_secs(20);
    let (k0, _) = generate(10, 1, &mut rng).unwrap();
    let body = loop {
        match fault::post(&http, &ua, &one_key(k0.to_bytes()), None).await {
            Ok((503, body, _)) if body["error"]["code"] == "not_durable" => break body,
            Ok((202, _, _)) => {}
            other => panic!("unexpected answer: {other:?}"),
        }
        assert!(
            Instant::now() < deadline,
            "never not_durable without the replica"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("--durability replica"), "{message}");
    println!(
        "one Redis + a replica, --durability replica: {JOBS} queries accepted (refusals retried \
         = {refusals}), every answer exact and every record on the replica; replica killed → \
         503 not_durable: {message}"
    );
}
