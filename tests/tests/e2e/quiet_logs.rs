//! No WARN or ERROR lines in normal operation: a party left idle (the updates follower blocks in
//! `XREAD` the whole time), then under load with an epoch pushed, then idle again, must leave
//! its gateway and worker logs free of them. Also measures how late an epoch pushed after an
//! idle spell is applied (printed for docs/reliability.md, not asserted).

use std::time::{Duration, Instant};

use pirq_client::Party as Api;
use pirq_e2e::fault::{post, wait_final};
use pirq_e2e::{Party, PartyOptions, TestDb};
use pirq_shared::dpf::generate;
use pirq_shared::update::{EpochUpdate, PageWrite};
use pirq_shared::wire::QueryRequest;

const TOKEN: &str = "quiet-token";

fn query(keys: usize) -> QueryRequest {
    let mut rng = rand::rng();
    QueryRequest {
        keys: (0..keys)
            .map(|i| generate(10, i as u64, &mut rng).unwrap().0.to_bytes())
            .collect(),
        epoch: None,
    }
}

/// Log lines at WARN or ERROR (the level is written upper-case, possibly in colour).
fn loud_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains(" WARN ") || l.contains("WARN\u{1b}") || l.contains("ERROR"))
        .collect()
}

/// The newest epoch the worker has applied, from its heartbeat record.
async fn worker_epoch(party: &Party) -> Option<u64> {
    let mut conn = party.redis().await.ok()?;
    let layout = party.layout();
    let ids: Vec<String> = redis::cmd("SMEMBERS")
        .arg(layout.workers())
        .query_async(&mut conn)
        .await
        .ok()?;
    let record: Option<String> = redis::cmd("GET")
        .arg(layout.worker(ids.first()?))
        .query_async(&mut conn)
        .await
        .ok()?;
    let value: serde_json::Value = serde_json::from_str(&record?).ok()?;
    value["window"]["newest"].as_u64()
}

#[tokio::test]
async fn a_party_logs_no_warnings_idle_or_under_load() {
    let db = TestDb::create(1024, 256, 21).unwrap();
    let party = Party::start(
        &db.path,
        "quiet",
        PartyOptions {
            gateway_args: vec!["--admin-token".into(), TOKEN.into()],
            ..PartyOptions::default()
        },
    )
    .await
    .unwrap();
    // Idle: the follower's XREAD BLOCK runs out and is sent again several times.
    tokio::time::sleep(Duration::from_secs(4)).await;

    // An epoch pushed after the idle spell: how long until the worker has applied it.
    let api = Api::new(reqwest::Client::new(), &party.url);
    let update = EpochUpdate {
        epoch: 1,
        pages: vec![PageWrite {
            index: 3,
            page: vec![7u8; 256],
        }],
    };
    let pushed = Instant::now();
    api.push_epoch(TOKEN, &update).await.unwrap();
    let deadline = pushed + Duration::from_secs(20);
    while worker_epoch(&party).await != Some(1) {
        assert!(Instant::now() < deadline, "epoch 1 not applied within 20 s");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    println!(
        "epoch pushed after 4 s idle applied after {:.1?}",
        pushed.elapsed()
    );

    // Load: 16 clients, 20 queries each, waited for by long-poll.
    let mut clients = Vec::new();
    for c in 0..16 {
        let url = party.url.clone();
        clients.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            for _ in 0..20 {
                let (status, body, _) = post(&http, &url, &query(1 + c % 8), None).await.unwrap();
                assert_eq!(status, 202, "{body}");
                let id = body["id"].as_str().unwrap().to_string();
                let result = wait_final(&http, &url, &id, Duration::from_secs(60)).await;
                assert_eq!(result.unwrap()["status"], "done");
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    // Idle again.
    tokio::time::sleep(Duration::from_secs(3)).await;

    for proc in std::iter::once(&party.gateway).chain(&party.workers) {
        let log = proc.log_text();
        let loud = loud_lines(&log);
        assert!(
            loud.is_empty(),
            "{} logged {} WARN/ERROR lines in normal operation:\n{}",
            proc.name,
            loud.len(),
            loud.join("\n")
        );
        // Written to a file, not a terminal: no colour escape codes (pirq_party::init_tracing).
        assert!(
            !log.contains('\u{1b}'),
            "{} wrote ANSI escape codes into its log file",
            proc.name
        );
    }
}
