//! A party's Redis must have sharded pub/sub (`SPUBLISH`/`SSUBSCRIBE`, Redis 7.0): every status
//! event goes that way (`docs/redis.md`). A gateway or worker started on a Redis without it
//! refuses to start with a line that says so, instead of serving and never hearing an answer.
//! The Redis here is today's `redis-server` with `SPUBLISH` renamed away (`--rename-command
//! SPUBLISH ""`), which answers `COMMAND INFO SPUBLISH` as a Redis 6 does.

use std::process::Command;
use std::time::{Duration, Instant};

use pirq_e2e::{free_port, run_until_exit, Proc, TestDb};

/// A `redis-server` on a free port with `SPUBLISH` removed, ready for commands.
async fn redis_without_spublish(dir: &std::path::Path) -> (Proc, String) {
    let port = free_port();
    let mut cmd = Command::new(pirq_testkit::redis_server());
    cmd.args([
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
    ])
    .args(["--appendonly", "no", "--rename-command", "SPUBLISH", ""])
    .arg("--dir")
    .arg(dir);
    let proc = Proc::spawn("redis-server", cmd, dir.join("redis.log")).unwrap();
    let url = format!("redis://127.0.0.1:{port}");
    let client = redis::Client::open(url.as_str()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut c) = client.get_multiplexed_async_connection().await {
            if redis::cmd("PING")
                .query_async::<String>(&mut c)
                .await
                .is_ok()
            {
                break;
            }
        }
        assert!(Instant::now() < deadline, "redis-server did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (proc, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_and_worker_refuse_a_redis_without_sharded_pubsub() {
    let dir = tempfile::tempdir().unwrap();
    let (_redis, url) = redis_without_spublish(dir.path()).await;
    let db = TestDb::create(256, 256, rand::random()).unwrap();
    let db_path = db.path.display().to_string();
    let listen = format!("127.0.0.1:{}", free_port());
    let strings = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let refused = [
        (
            "pirq-gateway",
            strings(&["--redis", &url, "--prefix", "old", "--listen", &listen]),
        ),
        (
            "pirq-worker",
            strings(&[
                "--redis",
                &url,
                "--prefix",
                "old",
                "--backend",
                "cpu",
                "--db",
                &db_path,
            ]),
        ),
    ];
    for (binary, args) in refused {
        let (status, output) = tokio::task::spawn_blocking(move || run_until_exit(binary, &args))
            .await
            .unwrap();
        assert_eq!(status, Some(1), "{binary} did not refuse:\n{output}");
        assert!(
            output.contains("has no SPUBLISH") && output.contains("Redis 7.0 or newer"),
            "{binary}:\n{output}"
        );
    }
}
