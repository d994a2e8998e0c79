//! Idempotency, backpressure and graceful shutdown, end to end against real processes
//! (issue 7).

use std::time::{Duration, Instant};

use futures::StreamExt;

use pirq_e2e::fault::{self, post, stream_len};
use pirq_e2e::requests::for_page;
use pirq_e2e::{metrics, strings, Party, PartyOptions, TestDb};
use pirq_shared::dpf::generate;
use pirq_shared::wire::QueryRequest;

/// An unlabelled series of the gateway at `url`; NaN (equal to nothing) where it has none.
async fn metric(url: &str, name: &str) -> f64 {
    let text = metrics::scrape(&reqwest::Client::new(), url).await;
    metrics::value(&text, name).unwrap_or(f64::NAN)
}

#[tokio::test]
async fn idempotency_key_replays_the_first_request_and_refuses_another_body() {
    let db = TestDb::create(1000, 256, 5).unwrap();
    let mut party = Party::start(&db.path, "idem", PartyOptions::default())
        .await
        .unwrap();
    party.stop_workers(); // queries stay pending until a worker starts
    let http = reqwest::Client::new();
    let url = party.url.clone();
    let req = for_page(10, 3);
    let key = "\"9f1c2c0e-6a57-4c0e-9a43-3b0d1f1c2e6a\"";

    let (s1, b1, _) = post(&http, &url, &req, Some(key)).await.unwrap();
    assert_eq!(s1, 202, "{b1}");
    let id = b1["id"].as_str().unwrap().to_string();
    // Same key, same request: the same id, nothing new queued.
    let (s2, b2, _) = post(&http, &url, &req, Some(key)).await.unwrap();
    assert_eq!((s2, b2["id"].as_str()), (202, Some(id.as_str())), "{b2}");
    // The same request in bincode is the same request.
    let resp = http
        .post(format!("{url}/v1/queries"))
        .header("content-type", "application/x-bincode")
        .header("idempotency-key", key)
        .body(req.to_bincode())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    assert_eq!(
        resp.headers()["location"],
        format!("/v1/queries/{id}").as_str()
    );
    // Same key, another request: 422.
    let (s3, b3, _) = post(&http, &url, &for_page(10, 4), Some(key))
        .await
        .unwrap();
    assert_eq!(s3, 422, "{b3}");
    assert_eq!(b3["error"]["code"], "idempotency_key_reused");
    // Malformed keys: 400.
    for bad in ["", "\"unterminated", "has space"] {
        let (s, b, _) = post(&http, &url, &req, Some(bad)).await.unwrap();
        assert_eq!(
            (s, b["error"]["code"].as_str()),
            (400, Some("invalid_idempotency_key")),
            "{bad:?}"
        );
    }
    let mut conn = party.redis().await.unwrap();
    assert_eq!(
        stream_len(&mut conn, &party.layout()).await,
        1,
        "one job queued"
    );

    // Once answered, a replay gets the stored result (200).
    party.start_worker().await.unwrap();
    let done = fault::wait_final(&http, &url, &id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done["status"], "done");
    let (s4, b4, _) = post(&http, &url, &req, Some(key)).await.unwrap();
    assert_eq!(s4, 200, "{b4}");
    assert_eq!(b4["id"], id.as_str());
    assert_eq!(b4["pages"], done["pages"]);
    // Without the key, the same body is a new query.
    let (s5, b5, _) = post(&http, &url, &req, None).await.unwrap();
    assert_eq!(s5, 202);
    assert_ne!(b5["id"], id.as_str());
    assert_eq!(
        metric(&url, "pirq_gateway_idempotent_replays_total").await,
        3.0
    );
    assert_eq!(
        metric(
            &url,
            "pirq_gateway_queries_accepted_total{table=\"default\"}"
        )
        .await,
        2.0
    );
}

#[tokio::test]
async fn full_backlog_answers_429_with_retry_after_and_recovers() {
    const MAX: u64 = 20;
    let db = TestDb::create(1000, 256, 6).unwrap();
    let opts = PartyOptions {
        gateway_args: strings(&["--max-backlog", &MAX.to_string()]),
        ..Default::default()
    };
    let mut party = Party::start(&db.path, "backlog", opts).await.unwrap();
    party.stop_workers(); // nothing drains
    let http = reqwest::Client::new();
    let url = party.url.clone();
    let mut ids = Vec::new();
    let first = for_page(10, 0);
    for i in 0..MAX {
        let req = if i == 0 {
            first.clone()
        } else {
            for_page(10, i)
        };
        let (s, b, _) = post(&http, &url, &req, Some(&format!("k{i}")))
            .await
            .unwrap();
        assert_eq!(s, 202, "{b}");
        ids.push(b["id"].as_str().unwrap().to_string());
    }
    let (s, b, retry) = post(&http, &url, &for_page(10, 99), None).await.unwrap();
    assert_eq!(s, 429, "{b}");
    assert_eq!(b["error"]["code"], "backlog_full");
    // Nothing drains: the longest Retry-After.
    assert_eq!(
        retry,
        Some(pirq_gateway::backpressure::MAX_RETRY_AFTER),
        "{b}"
    );
    // A replay is no new work: answered even while full.
    let (s, b, _) = post(&http, &url, &first, Some("k0")).await.unwrap();
    assert_eq!((s, b["id"].as_str()), (202, Some(ids[0].as_str())), "{b}");

    // Workers drain it; new queries are accepted again. (First let the drain sampler, once a
    // second, see the full stream, so that it measures the drain.)
    tokio::time::sleep(Duration::from_millis(1200)).await;
    party.start_worker().await.unwrap();
    for id in &ids {
        let r = fault::wait_final(&http, &url, id, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(r["status"], "done");
    }
    let (s, b, _) = post(&http, &url, &for_page(10, 100), None).await.unwrap();
    assert_eq!(s, 202, "{b}");

    // Full again right after that drain: Retry-After now follows the measured drain rate
    // (sampled once a second, so give the sampler a reading after the drain).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    party.stop_workers();
    let mut n = 0;
    let (retry, message) = loop {
        let (s, b, retry) = post(&http, &url, &for_page(10, 200 + n), None)
            .await
            .unwrap();
        n += 1;
        if s == 429 {
            break (
                retry.unwrap(),
                b["error"]["message"].as_str().unwrap().to_string(),
            );
        }
        assert_eq!(s, 202, "{b}");
        assert!(n <= MAX + 1, "never full again");
    };
    let rate: f64 = message
        .split("draining ")
        .nth(1)
        .and_then(|v| v.split(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    println!("429 after a drain: Retry-After {retry} s ({message})");
    assert!(rate > 0.0, "{message}\n{}", party.gateway.log_text());
    assert!(
        retry < pirq_gateway::backpressure::MAX_RETRY_AFTER,
        "{message}"
    );
    assert!(metric(&url, "pirq_gateway_queries_throttled_total").await >= 2.0);
}

#[tokio::test]
async fn sigterm_worker_finishes_its_window_and_hands_back_what_it_held() {
    // What w0 holds at the signal is fixed by the shape of its rotating scan, not by how fast
    // it scans (a CPU turn of a debug build or a CUDA turn of a millisecond both pass):
    // - at most KEYS keys in flight (`--max-batch-keys`): a job of BIG keys joins in BIG / KEYS
    //   parts, one turn each, and the jobs after it wait, read but not joined (not started);
    // - at the signal the big job, joined in part, must be joined whole, finished and answered;
    //   the HELD jobs behind it must be handed back. Were it done before the signal on some fast
    //   machine, the test still holds (it says so in its output).
    // A claim-idle time far beyond the test: only the hand-back can explain a fast pickup.
    const KEYS: u64 = 8;
    const BIG: u64 = 512 * KEYS;
    const HELD: u64 = 3; // jobs in a window that is not full
    const BACKLOG: u64 = 4 * KEYS + HELD;
    let db = TestDb::create(1 << 13, 512, 7).unwrap();
    let opts = PartyOptions {
        gateway_args: strings(&["--max-keys-per-query", &BIG.to_string()]),
        worker_args: strings(&[
            "--max-batch-keys",
            &KEYS.to_string(),
            "--claim-idle-ms",
            "120000",
        ]),
        ..Default::default()
    };
    let mut party = Party::start(&db.path, "drain", opts).await.unwrap();
    // Queue a backlog while no worker runs (the registration stays), so that w0 meets it.
    party.stop_workers();
    let layout = party.layout();
    let mut conn = party.redis().await.unwrap();
    let http = reqwest::Client::new();
    let url = party.url.clone();
    let within = Duration::from_secs(10);
    let mut ids = Vec::new();
    for i in 0..BACKLOG {
        let (id, _) = fault::submit_until_accepted(&http, &url, &for_page(13, i), within).await;
        ids.push(id);
    }
    // w0 again (the consumer name is by position), with its metrics page to watch.
    let w0_metrics = format!("127.0.0.1:{}", pirq_e2e::free_port());
    party
        .start_worker_with(&["--metrics-listen", &w0_metrics])
        .await
        .unwrap();

    // The backlog is answered.
    let deadline = Instant::now() + Duration::from_secs(60);
    while held_and_left(&mut conn, &layout, "w0").await != (0, 0) {
        assert!(Instant::now() < deadline, "w0 never answered the backlog");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The big job fills the rotation for BIG / KEYS turns; HELD one-key jobs after it wait.
    let big = QueryRequest {
        keys: (0..BIG)
            .map(|i| generate(13, i, &mut rand::rng()).unwrap().0.to_bytes())
            .collect(),
        epoch: None,
    };
    let (big_id, _) = fault::submit_until_accepted(&http, &url, &big, within).await;
    for i in 0..HELD {
        let (id, _) = fault::submit_until_accepted(&http, &url, &for_page(13, i), within).await;
        ids.push(id);
    }
    // Signal once all are delivered to w0 and the big job has joined the rotation: the first
    // of its BIG / KEYS parts has finished a turn (w0's segment-wait histogram counts one
    // observation per finished part, BACKLOG for the backlog's one-key jobs). HELD + 1 jobs are
    // left while it scans, HELD once it is answered. (Its `running` event is no signal: it is
    // published once, as it joins, and a stream opened after that never sees it.)
    let worker_metrics = format!("http://{w0_metrics}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let held = loop {
        let (held, left) = held_and_left(&mut conn, &layout, "w0").await;
        if held == left && (held == HELD || held == HELD + 1) {
            let text = metrics::scrape(&http, &worker_metrics).await;
            // Summed over its `table` label (one line: w0 serves `default` alone).
            let parts_done =
                metrics::sum(&text, "pirq_worker_segment_wait_seconds_count").unwrap_or(0.0);
            if parts_done > BACKLOG as f64 {
                break held;
            }
        }
        assert!(Instant::now() < deadline, "w0 never took the last jobs");
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    party.workers[0].signal_term();
    let status = party.workers[0]
        .wait_exit(Duration::from_secs(20))
        .expect("worker did not exit after SIGTERM");
    assert!(status.success(), "{status:?}");
    let log = party.workers[0].log_text();
    let handed_back = log
        .lines()
        .find(|l| l.contains("handed back the jobs held but not started"))
        .unwrap_or_else(|| panic!("no hand-back logged:\n{log}"))
        .to_string();
    let handed_back = strip_ansi(&handed_back);
    let n: u64 = handed_back
        .split("jobs=")
        .nth(1)
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // Exactly the jobs not started were handed back, and they are all that is left: the big
    // job, scanning at the signal or done before it, was answered by w0.
    assert_eq!(n, HELD, "{handed_back}");
    assert_eq!(stream_len(&mut conn, &layout).await, HELD);
    let big_done = fault::wait_final(&http, &url, &big_id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(big_done["status"], "done");
    assert_eq!(fault::pages(&big_done).len() as u64, BIG);
    assert_eq!(party.live_workers().await, Some(0), "deregistered");

    let t = Instant::now();
    party.start_worker().await.unwrap(); // w1: new name, same long claim-idle time
    for id in &ids {
        let r = fault::wait_final(&http, &url, id, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(r["status"], "done", "{id}");
    }
    let took = t.elapsed();
    let big_at_signal = if held > HELD {
        "still scanning"
    } else {
        "answered already"
    };
    println!(
        "SIGTERM worker: held {held} at the signal (the {BIG}-key job {big_at_signal}), handed \
         back {n} not started, all answered by the next worker in {took:.1?} (claim-idle 120 s)"
    );
    assert!(
        took < Duration::from_secs(30),
        "jobs waited for the claim-idle time"
    );
    assert_eq!(stream_len(&mut conn, &layout).await, 0);
}

/// Jobs delivered to `consumer` and not acknowledged, and entries in the job stream (waiting
/// or unacknowledged), read together in one `MULTI`.
async fn held_and_left(
    conn: &mut redis::aio::MultiplexedConnection,
    layout: &pirq_shared::layout::Layout,
    consumer: &str,
) -> (u64, u64) {
    let (held, left): (Vec<redis::Value>, u64) = redis::pipe()
        .atomic()
        .cmd("XPENDING")
        .arg(layout.jobs())
        .arg(pirq_shared::layout::GROUP)
        .arg("-")
        .arg("+")
        .arg(100_000)
        .arg(consumer)
        .cmd("XLEN")
        .arg(layout.jobs())
        .query_async(conn)
        .await
        .unwrap();
    (held.len() as u64, left)
}

#[tokio::test]
async fn sigterm_gateway_drains_long_polls_and_event_streams() {
    let db = TestDb::create(1000, 256, 8).unwrap();
    let mut party = Party::start(&db.path, "gwdrain", PartyOptions::default())
        .await
        .unwrap();
    party.stop_workers();
    let http = reqwest::Client::new();
    let url = party.url.clone();
    let (id, _) =
        fault::submit_until_accepted(&http, &url, &for_page(10, 1), Duration::from_secs(10)).await;

    let long_poll = {
        let (http, url, id) = (http.clone(), url.clone(), id.clone());
        tokio::spawn(async move {
            let t = Instant::now();
            let r = http
                .get(format!("{url}/v1/queries/{id}?wait=30"))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap(), t.elapsed())
        })
    };
    let sse = {
        let (http, url, id) = (http.clone(), url.clone(), id.clone());
        tokio::spawn(async move {
            let t = Instant::now();
            let r = http
                .get(format!("{url}/v1/queries/{id}/events"))
                .send()
                .await
                .unwrap();
            let text = r.text().await.unwrap(); // to the end of the stream
            (text, t.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    party.gateway.signal_term();
    let status = party
        .gateway
        .wait_exit(Duration::from_secs(8))
        .expect("gateway did not exit");
    let exit_took = t.elapsed();
    assert!(status.success(), "{status:?}");
    let (code, body, waited) = long_poll.await.unwrap();
    assert_eq!(code, 202, "{body}");
    assert!(body.contains("\"queued\""), "{body}");
    let (events, _) = sse.await.unwrap();
    assert!(events.contains("event: status"), "{events}");
    println!(
        "SIGTERM gateway: exited in {exit_took:.2?}; the 30 s long-poll answered 202 after \
         {waited:.2?}, the SSE stream ended"
    );
    assert!(waited < Duration::from_secs(5));
    assert!(exit_took < Duration::from_secs(5));
}

/// A log line without its terminal colour codes.
fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[tokio::test]
async fn soak_keeps_redis_memory_flat() {
    // Results, pending records and idempotency keys expire; stream entries are deleted at
    // acknowledgement: after each round, Redis is back to the same size.
    const ROUNDS: usize = 6;
    const JOBS: u64 = 150;
    let db = TestDb::create(1000, 256, 10).unwrap();
    let opts = PartyOptions {
        gateway_args: strings(&["--idempotency-ttl", "1"]),
        worker_args: strings(&["--result-ttl", "2"]),
        ..Default::default()
    };
    let party = Party::start(&db.path, "soak", opts).await.unwrap();
    let layout = party.layout();
    let mut conn = party.redis().await.unwrap();
    let http = reqwest::Client::new();
    let url = party.url.clone();
    let mut rows = Vec::new();
    for round in 0..ROUNDS {
        let mut ids = Vec::new();
        for i in 0..JOBS {
            let key = format!("soak-{round}-{i}");
            let (s, b, _) = post(&http, &url, &for_page(10, i), Some(&key))
                .await
                .unwrap();
            assert_eq!(s, 202, "{b}");
            ids.push(b["id"].as_str().unwrap().to_string());
        }
        // All waits at once, so each sees its result within the short result TTL.
        let results: Vec<Option<serde_json::Value>> = futures::stream::iter(ids)
            .map(|id| {
                let (http, url) = (http.clone(), url.clone());
                async move { fault::wait_final(&http, &url, &id, Duration::from_secs(30)).await }
            })
            .buffer_unordered(JOBS as usize)
            .collect()
            .await;
        for r in results {
            assert_eq!(r.unwrap()["status"], "done");
        }
        // Wait for the TTLs (2 s) and Redis's active expiry.
        let deadline = Instant::now() + Duration::from_secs(10);
        let keys = loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let keys: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
            // {P}:jobs, {P}:db, {P}:digests, {P}:party, {P}:partitions, {P}:workers,
            // {P}:worker:w0 (+ {P}:updates where epochs run): none grows with the queries.
            if keys <= 8 || Instant::now() > deadline {
                break keys;
            }
        };
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut conn)
            .await
            .unwrap();
        let used: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap();
        let len = stream_len(&mut conn, &layout).await;
        rows.push((round, keys, len, used));
    }
    for (round, keys, len, used) in &rows {
        println!("soak round {round}: {JOBS} jobs; after expiry: keys = {keys}, stream length = {len}, used_memory = {used} B");
    }
    for (round, keys, len, _) in &rows {
        assert!(*keys <= 8, "round {round}: {keys} keys left");
        assert_eq!(*len, 0, "round {round}");
    }
    let (first, last) = (rows[1].3, rows[ROUNDS - 1].3);
    assert!(
        last < first + 256 * 1024,
        "redis memory grew from {first} B to {last} B"
    );
}

/// The gateway as a library: `pirq_gateway::serve` started in this process (as `main` starts it,
/// with flags parsed by the same `Config`) answers `/healthz`, and returns `Ok` once the shutdown
/// future its caller handed in completes, its port then closed.
#[tokio::test]
async fn gateway_started_in_process_stops_through_its_shutdown_handle() {
    use clap::Parser;
    let redis = pirq_e2e::Redis::start().await.unwrap();
    let port = pirq_e2e::free_port();
    let config = pirq_gateway::Config::parse_from([
        "pirq-gateway",
        "--redis",
        &redis.url(),
        "--prefix",
        "in-process",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ]);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let gateway = tokio::spawn(pirq_gateway::serve(config, async {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/healthz");
    let mut status = None;
    for _ in 0..200 {
        if let Ok(response) = http.get(&url).send().await {
            status = Some(response.status().as_u16());
            break;
        }
        assert!(!gateway.is_finished(), "serve returned before its shutdown");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, Some(200), "the in-process gateway answers /healthz");
    assert!(
        !gateway.is_finished(),
        "serve runs until its shutdown completes"
    );

    stop.send(()).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(60), gateway)
        .await
        .expect("serve returns once its shutdown completed")
        .unwrap();
    result.unwrap();
    assert!(
        http.get(&url).send().await.is_err(),
        "the port is closed once serve returned"
    );
}
