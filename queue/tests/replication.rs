//! `--durability replica`'s Redis side (`pirq_queue::replication`) against a real primary and a
//! real replica (`REPLICAOF`): which primaries have a replica online, and the `WAIT` after a
//! submit — confirmed while the replica runs, a record that is not there reported missing, a
//! replayed `Idempotency-Key` confirmed without changing its record, and nothing confirmed once
//! the replica is killed.

use std::time::{Duration, Instant};

use pirq_queue::producer::{Producer, SubmitChecks, Submitted};
use pirq_queue::replication::{replicas, ReplicaAck};
use pirq_queue::{RedisTarget, RequestId};
use pirq_shared::layout::Layout;
use pirq_testkit::jobs::one_key_job;
use pirq_testkit::Redis;

const WAIT: Duration = Duration::from_millis(500);

#[tokio::test]
async fn a_submit_is_confirmed_on_the_replica_and_not_without_one() {
    if pirq_testkit::cluster_mode_from_env() {
        // REPLICAOF is refused in cluster mode; the cluster's replicas are covered by the
        // failover test (tests/tests/e2e/cluster_failover.rs).
        println!("skipped: a cluster-mode Redis refuses REPLICAOF");
        return;
    }
    let primary = Redis::start().await.unwrap();
    let mut replica = Redis::start().await.unwrap();
    let target = RedisTarget::open(&primary.url(), Default::default()).unwrap();
    let layout = Layout::new("party-r").unwrap().with_partitions(2).unwrap();
    let conn = target.connection(Duration::from_secs(5)).unwrap();

    // No replica yet: neither partition's primary can confirm anything.
    let found = replicas(&conn, &layout).await.unwrap();
    assert_eq!(found.len(), 2);
    assert!(found.iter().all(|p| p.role == "master" && p.online == 0));

    let mut rc = replica.manager().await.unwrap();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port)
        .query_async(&mut rc)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !replicas(&conn, &layout)
        .await
        .unwrap()
        .iter()
        .all(|p| p.can_confirm())
    {
        assert!(Instant::now() < deadline, "the replica never came online");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let producer = Producer::new(&target, layout.clone(), Duration::from_secs(2)).unwrap();
    let checks = SubmitChecks {
        pending_ttl: 60,
        record_held: true,
        max_backlog: 0,
        idempotency: None,
    };
    for _ in 0..4 {
        let id = producer.mint_id(None);
        assert_eq!(
            producer.submit(&id, &one_key_job(), &checks).await.unwrap(),
            Submitted::Queued
        );
        assert_eq!(
            producer.wait_replica(&id, None, WAIT).await.unwrap(),
            ReplicaAck::Confirmed
        );
    }
    // The replica has what was confirmed.
    let id = producer.mint_id(None);
    producer.submit(&id, &one_key_job(), &checks).await.unwrap();
    assert_eq!(
        producer.wait_replica(&id, None, WAIT).await.unwrap(),
        ReplicaAck::Confirmed
    );
    let on_replica: bool = redis::cmd("EXISTS")
        .arg(layout.query(id.as_str()))
        .query_async(&mut rc)
        .await
        .unwrap();
    assert!(on_replica, "confirmed, yet not on the replica");

    // A record that is not there is reported, not confirmed.
    let never = RequestId::mint_in(0, 2);
    assert_eq!(
        producer.wait_replica(&never, None, WAIT).await.unwrap(),
        ReplicaAck::Missing
    );

    // A replayed Idempotency-Key: confirmed, its record rewritten as it was (value and TTL).
    let key = "replay-key";
    let with_key = SubmitChecks {
        idempotency: Some((key, "fp", 600)),
        ..checks
    };
    let first = producer.mint_id(Some(key));
    assert_eq!(
        producer
            .submit(&first, &one_key_job(), &with_key)
            .await
            .unwrap(),
        Submitted::Queued
    );
    let again = producer.mint_id(Some(key));
    let Submitted::Known {
        same_request: true,
        id: Some(known),
        net: None,
    } = producer
        .submit(&again, &one_key_job(), &with_key)
        .await
        .unwrap()
    else {
        panic!("the key was not known");
    };
    assert_eq!(known, first);
    let stored = format!("fp {first}");
    assert_eq!(
        producer
            .wait_replica(&known, Some((key, &stored)), WAIT)
            .await
            .unwrap(),
        ReplicaAck::Confirmed
    );
    let mut pc = primary.manager().await.unwrap();
    let (value, ttl): (String, i64) = redis::pipe()
        .get(layout.idempotency(key))
        .ttl(layout.idempotency(key))
        .query_async(&mut pc)
        .await
        .unwrap();
    assert_eq!(value, stored);
    assert!((590..=600).contains(&ttl), "TTL changed: {ttl}");

    // The replica killed: the WAIT times out unconfirmed, and the primary says it has none.
    replica.proc.kill();
    let id = producer.mint_id(None);
    producer.submit(&id, &one_key_job(), &checks).await.unwrap();
    let started = Instant::now();
    assert_eq!(
        producer.wait_replica(&id, None, WAIT).await.unwrap(),
        ReplicaAck::Unconfirmed
    );
    assert!(
        started.elapsed() >= WAIT,
        "WAIT returned before its timeout"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while replicas(&conn, &layout)
        .await
        .unwrap()
        .iter()
        .any(|p| p.can_confirm())
    {
        assert!(
            Instant::now() < deadline,
            "the primary still counts its replica"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
