//! The gateway's samplers (`pirq_queue::sampler`) against a real `redis-server` (installed by
//! scripts/install-deps.sh).

use std::time::Duration;

use pirq_queue::sampler::{self, QueueSample};
use pirq_queue::{Connection, RedisTarget};
use pirq_shared::layout::{Layout, GROUP};
use pirq_testkit::Redis;
use redis::aio::ConnectionManager;

async fn cmd<T: redis::FromRedisValue>(conn: &mut ConnectionManager, args: &[&str]) -> T {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query_async(conn).await.unwrap()
}

fn connection(redis: &Redis) -> Connection {
    RedisTarget::open(&redis.url(), Default::default())
        .unwrap()
        .connection(Duration::from_secs(5))
        .unwrap()
}

#[tokio::test]
async fn sampler_reads_depth_pending_age_and_live_workers() {
    let redis = Redis::start().await.unwrap();
    let mut conn = redis.manager().await.unwrap();
    let ours = connection(&redis);
    let layout = Layout::new("party-q").unwrap();
    let jobs = layout.jobs();

    // Nothing there yet: no stream, no group, no workers.
    assert_eq!(
        sampler::queue(&ours, &layout).await.unwrap(),
        QueueSample::default()
    );
    assert_eq!(sampler::stream_counts(&ours, &layout).await.unwrap(), None);
    assert!(sampler::used_memory(&ours).await.unwrap() > 0);

    // Three jobs, the first appended a minute ago (explicit id), then a worker group that has
    // read one of them.
    let now_ms = pirq_shared::clock::unix_ms();
    let old_id = format!("{}-0", now_ms - 60_000);
    let _: String = cmd(&mut conn, &["XADD", &jobs, &old_id, "id", "a"]).await;
    let _: String = cmd(&mut conn, &["XADD", &jobs, "*", "id", "b"]).await;
    let _: String = cmd(&mut conn, &["XADD", &jobs, "*", "id", "c"]).await;
    let _: () = cmd(&mut conn, &["XGROUP", "CREATE", &jobs, GROUP, "0"]).await;
    let _: redis::Value = cmd(
        &mut conn,
        &[
            "XREADGROUP",
            "GROUP",
            GROUP,
            "w1",
            "COUNT",
            "1",
            "STREAMS",
            &jobs,
            ">",
        ],
    )
    .await;

    // Two registered workers, one of which has lost its heartbeat.
    let _: () = cmd(&mut conn, &["SADD", &layout.workers(), "w1", "w2"]).await;
    let _: () = cmd(&mut conn, &["SET", &layout.worker("w1"), "{}", "EX", "30"]).await;

    // A shard's group that has read nothing yet (a sharded party has one per shard).
    let _: () = cmd(&mut conn, &["XGROUP", "CREATE", &jobs, "shard-1-of-2", "0"]).await;

    let s = sampler::queue(&ours, &layout).await.unwrap();
    assert_eq!(s.depth, 2, "{s:?}");
    assert_eq!(s.pending, 1, "{s:?}");
    let group = |name: &str| s.groups.iter().find(|g| g.name == name).cloned();
    let (workers, shard) = (group(GROUP).unwrap(), group("shard-1-of-2").unwrap());
    assert_eq!((workers.pending, workers.lag), (1, 2), "{s:?}");
    assert_eq!((shard.pending, shard.lag), (0, 3), "{s:?}");
    assert_eq!(s.live_workers, 1, "{s:?}");
    assert!(
        s.oldest_age >= Duration::from_secs(59) && s.oldest_age < Duration::from_secs(120),
        "{s:?}"
    );

    // The oldest job answered and deleted: the age is now the next job's, seconds at most.
    let _: i64 = cmd(&mut conn, &["XACK", &jobs, GROUP, &old_id]).await;
    let _: i64 = cmd(&mut conn, &["XDEL", &jobs, &old_id]).await;
    let s = sampler::queue(&ours, &layout).await.unwrap();
    assert_eq!((s.depth, s.pending), (2, 0), "{s:?}");
    assert!(s.oldest_age < Duration::from_secs(10), "{s:?}");
    // Length and entries ever added: what the drain rate is measured from.
    assert_eq!(
        sampler::stream_counts(&ours, &layout).await.unwrap(),
        Some((2, 3))
    );
}

#[tokio::test]
async fn persistence_settings_and_features_are_read() {
    let redis = Redis::start_aof().await.unwrap();
    let ours = connection(&redis);
    let (appendonly, _fsync) = sampler::persistence(&ours).await;
    assert_eq!(appendonly.as_deref(), Some("yes"));
    let (version, _waitaof) = sampler::durability_features(&ours).await.unwrap();
    assert!(
        version.chars().next().is_some_and(|c| c.is_ascii_digit()),
        "{version}"
    );
    ours.ping(Duration::from_secs(2)).await.unwrap();
}
