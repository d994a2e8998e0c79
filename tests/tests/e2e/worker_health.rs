//! The worker's `/healthz` and `/readyz` (on `--metrics-listen`) against a real `redis-server`
//! that is killed, frozen and started again: readiness follows Redis within seconds both ways,
//! liveness never does (an orchestrator must not restart workers through a Redis outage), and
//! the worker serves verified answers again afterwards. Other paths are 404.

use std::time::{Duration, Instant};

use pirq_client::{Client, Options};
use pirq_e2e::{free_port, Party, PartyOptions, Proc, TestDb};

const PAGES: u64 = 512;
const PAGE_SIZE: u32 = 256;

/// Status and JSON body of a GET (`None` when nothing answered).
async fn get(url: &str) -> Option<(u16, serde_json::Value)> {
    let resp = reqwest::Client::new()
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    let status = resp.status().as_u16();
    Some((status, resp.json().await.unwrap_or_default()))
}

/// Polls `url` until its status is `want`; returns how long that took, or panics with the
/// last answer after `within`.
async fn wait_status(url: &str, want: u16, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let answer = get(url).await;
        if answer.as_ref().is_some_and(|(s, _)| *s == want) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "{url}: no {want} within {within:?}; last answer {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn fetch_verified(client: &Client, db: &TestDb, indices: &[u64]) {
    let fetched = client.fetch(indices).await.expect("fetch");
    for (i, page) in indices.iter().zip(&fetched.pages) {
        assert_eq!(page.as_slice(), db.page(*i), "page {i}");
    }
}

#[tokio::test]
async fn readiness_follows_redis_and_liveness_does_not() {
    let db = TestDb::create(PAGES, PAGE_SIZE, rand::random()).unwrap();
    let ports = [free_port(), free_port()];
    let options = |port: u16, aof: bool| PartyOptions {
        worker_args: vec!["--metrics-listen".into(), format!("127.0.0.1:{port}")],
        redis_aof: aof,
        ..PartyOptions::default()
    };
    let (mut a, b) = tokio::try_join!(
        Party::start(&db.path, "party-a", options(ports[0], true)),
        Party::start(&db.path, "party-b", options(ports[1], false)),
    )
    .unwrap();
    let base = format!("http://127.0.0.1:{}", ports[0]);
    let (healthz, readyz) = (format!("{base}/healthz"), format!("{base}/readyz"));
    let client = Client::with_options(
        &a.url,
        &b.url,
        Options {
            timeout: Duration::from_secs(60),
            ..Default::default()
        },
    )
    .unwrap();

    // Registered: ready, and serving.
    wait_status(&readyz, 200, Duration::from_secs(10)).await;
    assert_eq!(get(&readyz).await.unwrap().1["status"], "ready");
    fetch_verified(&client, &db, &[0, 7, PAGES - 1]).await;

    // Only the three paths exist; only GET.
    assert_eq!(get(&format!("{base}/")).await.unwrap().0, 404);
    assert_eq!(get(&format!("{base}/v1/info")).await.unwrap().0, 404);
    let metrics = reqwest::get(format!("{base}/metrics")).await.unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(metrics
        .text()
        .await
        .unwrap()
        .contains("pirq_worker_jobs_completed_total"));
    let post = reqwest::Client::new().post(&readyz).send().await.unwrap();
    assert_eq!(post.status(), 405);

    // Redis killed: not ready within seconds; alive all along.
    a.redis.proc.kill();
    let took = wait_status(&readyz, 503, Duration::from_secs(5)).await;
    let (_, body) = get(&readyz).await.unwrap();
    assert_eq!(body["status"], "not_ready", "{body}");
    assert!(
        body["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{body}"
    );
    println!("redis killed: /readyz 503 after {took:?} ({body})");
    for _ in 0..10 {
        assert_eq!(
            get(&healthz).await.unwrap().0,
            200,
            "liveness tied to Redis"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(a.workers[0].is_running(), "the worker exited without Redis");

    // Back (the same AOF): ready again by itself, and answering.
    a.redis.restart().await.unwrap();
    let took = wait_status(&readyz, 200, Duration::from_secs(15)).await;
    println!("redis back: /readyz 200 after {took:?}");
    fetch_verified(&client, &db, &[1, 100, 200]).await;

    // Frozen (SIGSTOP: the socket stays open and nothing answers): the PING times out.
    a.redis.proc.pause();
    let took = wait_status(&readyz, 503, Duration::from_secs(5)).await;
    let (_, body) = get(&readyz).await.unwrap();
    println!("redis frozen: /readyz 503 after {took:?} ({body})");
    assert_eq!(get(&healthz).await.unwrap().0, 200);
    a.redis.proc.resume();
    wait_status(&readyz, 200, Duration::from_secs(15)).await;
    fetch_verified(&client, &db, &[3, 300]).await;
}

#[tokio::test]
async fn a_worker_without_redis_is_alive_and_says_why_it_is_not_ready() {
    let db = TestDb::create(PAGES, PAGE_SIZE, rand::random()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // Nothing listens on this Redis port.
    let mut cmd = std::process::Command::new(pirq_e2e::bin_dir().join("pirq-worker"));
    cmd.args(["--redis", &format!("redis://127.0.0.1:{}", free_port())])
        .args(["--prefix", "no-redis", "--backend", "cpu", "--db"])
        .arg(&db.path)
        .args(["--metrics-listen", &format!("127.0.0.1:{port}")])
        .env("PIRQ_THREADS", "1")
        .env("RUST_LOG", "info");
    let mut worker = Proc::spawn("pirq-worker", cmd, dir.path().join("worker.log")).unwrap();
    let base = format!("http://127.0.0.1:{port}");
    wait_status(&format!("{base}/healthz"), 200, Duration::from_secs(10)).await;
    for _ in 0..5 {
        let (status, body) = get(&format!("{base}/readyz")).await.unwrap();
        assert_eq!(status, 503, "{body}");
        assert!(
            body["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("joining") || r.starts_with("loading")),
            "{body}"
        );
        assert_eq!(get(&format!("{base}/healthz")).await.unwrap().0, 200);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(worker.is_running(), "{}", worker.log_text());
    worker.terminate(Duration::from_secs(10));
}
