//! The status events on sharded pub/sub against a real `redis-server`, through the worker's and
//! the gateway's own queue code: with four partitions, the gateway's subscription
//! ([`pirq_queue::events::subscribe`], `SSUBSCRIBE` to every partition's channel) hears the
//! `running` frames the worker announces and the `done` frames (answers included) announced in
//! the result pipeline, for a request of every partition; and it is
//! the sharded channel it hears: a classic `PUBLISH` on the same name reaches nobody. On one
//! Redis, and (`PIRQ_CLUSTER_TESTS=1`) on a real 3-primary Redis Cluster, where the partitions'
//! channels sit on different primaries.

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;
use pirq_queue::consumer::{Consumer, Outcome};
use pirq_queue::record::{self, Notice};
use pirq_queue::{RedisTarget, RequestId};
use pirq_shared::layout::Layout;
use pirq_shared::wire::{Job, QueryStatus};
use pirq_testkit::{jobs, ClusterShape, Redis};

const PARTITIONS: u32 = 4;
const PS: usize = 64;

#[tokio::test]
async fn every_partition_announces_on_its_sharded_channel() {
    let redis = Redis::start().await.unwrap();
    let mut conn = redis.manager().await.unwrap();
    announces_on_every_partition(&redis, &mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_partition_announces_on_a_three_primary_cluster() {
    if std::env::var("PIRQ_CLUSTER_TESTS").ok().as_deref() != Some("1") {
        eprintln!("skipping: set PIRQ_CLUSTER_TESTS=1 to run it on a Redis Cluster");
        return;
    }
    let redis = Redis::start_cluster(ClusterShape {
        primaries: 3,
        replicas: 0,
    })
    .await
    .unwrap();
    let mut conn = redis.cluster_client().await.unwrap();
    let layout = layout();
    let mut primaries = HashSet::new();
    for (_, keys) in layout.all_partitions() {
        primaries.insert(redis.primary_for(&keys.events()).await.unwrap());
    }
    assert_eq!(primaries.len(), 3, "the channels sit on every primary");
    announces_on_every_partition(&redis, &mut conn).await;
}

fn layout() -> Layout {
    Layout::new("pirq")
        .unwrap()
        .with_partitions(PARTITIONS)
        .unwrap()
}

async fn announces_on_every_partition(redis: &Redis, conn: &mut impl redis::aio::ConnectionLike) {
    let layout = layout();
    let target = RedisTarget::open(&redis.url(), Default::default()).unwrap();
    let events = pirq_queue::events::subscribe(&target, &layout)
        .await
        .unwrap();
    let mut events = std::pin::pin!(events);

    // A classic PUBLISH on a partition's channel name is another channel: nobody hears it.
    let stray = RequestId::mint_in(1, PARTITIONS);
    let heard: i64 = redis::cmd("PUBLISH")
        .arg(layout.partition(1).events())
        .arg(format!("{stray} 7\nrunning"))
        .query_async(conn)
        .await
        .unwrap();
    assert_eq!(heard, 0, "no classic subscriber");

    let q = Consumer::new(
        &target,
        layout.clone(),
        "events-test".into(),
        Duration::from_millis(100),
        600,
    )
    .unwrap();
    q.ensure_group().await.unwrap();
    let job = Job {
        keys: vec![vec![0u8; 40]],
        epoch: None,
        accepted_ms: 1,
        reply: Default::default(),
    };
    let ids: Vec<RequestId> = (0..PARTITIONS)
        .map(|p| RequestId::mint_in(p, PARTITIONS))
        .collect();
    for id in &ids {
        jobs::enqueue(conn, &layout, id.as_str(), &job.to_bincode())
            .await
            .unwrap();
    }
    q.mark_running(&ids).await.unwrap();
    let mut outcomes = Vec::new();
    for p in 0..PARTITIONS {
        let delivered = q.read(p, 1, Duration::from_millis(500)).await.unwrap();
        assert_eq!(delivered.len(), 1, "partition {p}'s job");
        outcomes.push(Outcome::Done {
            entry_id: delivered[0].entry_id.clone(),
            request_id: delivered[0].request_id.unwrap(),
            epoch: 0,
            page_size: PS,
            pages: vec![7u8; PS].into(),
            scan: Duration::from_micros(10),
            worker: Duration::from_micros(20),
            accepted_ms: 1,
            digest: None,
            reply: Default::default(),
        });
    }
    q.finish(&outcomes).await.unwrap();

    let mut want: HashSet<(RequestId, QueryStatus)> = ids
        .iter()
        .flat_map(|id| [(*id, QueryStatus::Running), (*id, QueryStatus::Done)])
        .collect();
    while !want.is_empty() {
        let payload = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .unwrap_or_else(|_| panic!("events still missing: {want:?}"))
            .expect("the subscription stays up");
        for (id, frame) in record::frames(&payload) {
            assert_ne!(id, stray, "the classic PUBLISH was heard");
            let status = match Notice::decode(&id, frame).expect("a record") {
                Notice::Progress(status) => status,
                Notice::Final(record) => {
                    assert_eq!(
                        record.result.pages,
                        vec![vec![7u8; PS]],
                        "the answer rides along"
                    );
                    record.result.status
                }
                Notice::Read => panic!("a record of one small page rides in its event"),
            };
            assert!(
                want.remove(&(id, status)),
                "unexpected or repeated event {id} {status:?}"
            );
        }
    }
}
