//! Never a silent wrong answer, never a lost database (issue #16), end to end: parties on
//! different contents are refused by their digests, one party reached twice is refused, a
//! second worker on another database cannot take a prefix over (unless told to replace it),
//! readiness needs a live worker and the client fails fast without one, and a served file
//! rewritten by pirq's tools leaves the worker answering while a truncation stops it with a
//! message.

use std::time::{Duration, Instant};

use pirq_client::{Client, ClientError, Encoding, Options};
use pirq_db::{self as db, PirDb};
use pirq_e2e::{Party, PartyOptions, TestDb};
use pirq_shared::digest::Digest;
use pirq_shared::dpf::generate;
use pirq_shared::synthetic;
use pirq_shared::wire::{Info, QueryRequest};

const PAGES: u64 = 300;
const PAGE_SIZE: u32 = 256;

/// `/v1/info`, read as the wire type.
async fn info(party: &Party) -> Info {
    serde_json::from_value(party.info().await).expect("an Info body")
}

/// A client of one party reached twice (allowed explicitly): the XOR still yields the page.
fn self_client(party: &Party) -> Client {
    let options = Options {
        allow_same_party: true,
        timeout: Duration::from_secs(30),
        ..Options::default()
    };
    Client::with_options(&party.url, &party.url, options).unwrap()
}

/// One party's answer to a key, with the digest it is stamped with.
async fn stamped_answer(party: &Party, index: u64) -> Option<Digest> {
    let client = Client::new(&party.url, &party.url).unwrap();
    let (k0, _) = generate(
        pirq_shared::dpf::domain_bits(PAGES),
        index,
        &mut rand::rng(),
    )
    .unwrap();
    let request = QueryRequest {
        keys: vec![k0.to_bytes()],
        epoch: None,
    };
    let result = client
        .parties()
        .0
        .query(
            &request,
            Encoding::Bincode,
            pirq_client::Wait::LongPoll,
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    result.digest
}

#[tokio::test]
async fn different_contents_and_the_same_party_twice_are_refused() {
    let db7 = TestDb::create(PAGES, PAGE_SIZE, 7).unwrap();
    let db8 = TestDb::create(PAGES, PAGE_SIZE, 8).unwrap();
    let (a, b) = tokio::try_join!(
        Party::start(&db7.path, "guard-a", PartyOptions::default()),
        Party::start(&db8.path, "guard-b", PartyOptions::default()),
    )
    .unwrap();
    let (d7, d8) = (db7.db.digest(), db8.db.digest());
    assert_ne!(d7, d8);

    // Each party advertises its database's digest and its own identity, and stamps answers.
    let (ia, ib) = (info(&a).await, info(&b).await);
    assert_eq!((ia.digest, ib.digest), (Some(d7), Some(d8)));
    let (pa, pb) = (ia.party.unwrap(), ib.party.unwrap());
    assert_eq!(pa.len(), 32);
    assert_ne!(pa, pb);
    assert_eq!(
        info(&a).await.party,
        Some(pa.clone()),
        "the identity is stable"
    );
    assert_eq!(stamped_answer(&a, 5).await, Some(d7));
    assert_eq!(stamped_answer(&b, 5).await, Some(d8));

    // Same shape, different contents: refused, never a page.
    let client = Client::new(&a.url, &b.url).unwrap();
    match client.fetch(&[3, 250]).await {
        Err(ClientError::Mismatch(why)) => {
            assert!(
                why.contains(&d7.to_hex()) && why.contains(&d8.to_hex()),
                "{why}"
            )
        }
        other => panic!("expected a digest mismatch, got {other:?}"),
    }

    // One party as both: refused, with the way out for benchmarks only.
    let twice = Client::new(&a.url, &format!("{}/", a.url)).unwrap();
    match twice.fetch(&[3]).await {
        Err(e @ ClientError::SameParty { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains(&pa) && text.contains("--allow-same-party"),
                "{text}"
            );
        }
        other => panic!("expected same-party refusal, got {other:?}"),
    }
    let pages = self_client(&a).fetch(&[3]).await.unwrap();
    assert_eq!(pages.pages[0], db7.page(3));
}

#[tokio::test]
async fn a_worker_on_another_database_is_refused_unless_it_replaces_it() {
    let db7 = TestDb::create(PAGES, PAGE_SIZE, 7).unwrap();
    let db8 = TestDb::create(PAGES, PAGE_SIZE, 8).unwrap();
    let mut party = Party::start(&db7.path, "takeover", PartyOptions::default())
        .await
        .unwrap();
    assert_eq!(party.readyz().await.0, 200);

    let err = party
        .start_worker_on(&db8.path, &[])
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("another database is registered under prefix takeover"),
        "{err}"
    );
    assert!(err.contains(&db7.db.digest().to_hex()[..16]), "{err}");
    assert!(err.contains("--replace-db"), "{err}");
    assert!(
        party.workers[0].is_running(),
        "the serving worker is untouched"
    );
    assert_eq!(info(&party).await.digest, Some(db7.db.digest()));
    assert_eq!(
        self_client(&party).fetch(&[9]).await.unwrap().pages[0],
        db7.page(9)
    );

    // Told to replace it: the new database is the party's, the old worker stops and says why.
    party
        .start_worker_on(&db8.path, &["--replace-db"])
        .await
        .unwrap();
    let status = party.workers[0].wait_exit(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| !s.success()),
        "old worker: {status:?}\n{}",
        party.workers[0].log_text()
    );
    let log = party.workers[0].log_text();
    assert!(log.contains("registered a different database"), "{log}");
    assert_eq!(info(&party).await.digest, Some(db8.db.digest()));
    assert_eq!(
        self_client(&party).fetch(&[9]).await.unwrap().pages[0],
        db8.page(9)
    );

    // No live worker: not ready, and the client fails at once instead of waiting it out.
    party.stop_workers();
    let (status, body) = party.readyz().await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("no_workers"))
    );
    let start = Instant::now();
    match self_client(&party).fetch(&[9]).await {
        Err(e @ ClientError::NoWorkers { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("party A") && text.contains("has no live workers"),
                "{text}"
            );
        }
        other => panic!("expected no-workers, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_rewritten_file_keeps_the_worker_a_truncated_one_stops_it() {
    let db7 = TestDb::create(PAGES, PAGE_SIZE, 7).unwrap();
    // Another name for the inode the worker maps, to reach it after the path is replaced.
    let served = db7.path.with_extension("served");
    std::fs::hard_link(&db7.path, &served).unwrap();
    let mut party = Party::start(&db7.path, "guarded", PartyOptions::default())
        .await
        .unwrap();

    // What `pirq db gen --out FILE` does over a served file: a new file renamed into place.
    let header = *db7.db.header();
    db::write(
        &db7.path,
        &header,
        |p, page| synthetic::fill_page(9, p, page),
        |_| {},
    )
    .unwrap();
    assert_ne!(
        PirDb::open(&db7.path).unwrap().page(4).unwrap(),
        db7.page(4)
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        party.workers[0].is_running(),
        "{}",
        party.workers[0].log_text()
    );
    let pages = self_client(&party).fetch(&[4, 299]).await.unwrap();
    assert_eq!(
        pages.pages,
        vec![db7.page(4).to_vec(), db7.page(299).to_vec()]
    );

    // Truncating the served inode itself stops the worker with one clear line.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&served)
        .unwrap()
        .set_len(4096)
        .unwrap();
    let status = party.workers[0].wait_exit(Duration::from_secs(10));
    assert_eq!(status.and_then(|s| s.code()), Some(3), "{status:?}");
    let log = party.workers[0].log_text();
    assert!(
        log.contains(&format!(
            "the database file {} was truncated or rewritten under the worker; exiting",
            db7.path.display()
        )),
        "{log}"
    );
}

/// The chain (SPEC §2.1) as a party computes it from its updates stream and as `pirq db apply`
/// records it in a snapshot agree: a worker started from the snapshot joins the party (it is
/// not refused as another database) and answers the same pages under the same digest.
#[tokio::test]
async fn a_snapshot_and_the_updates_stream_agree_on_the_digest() {
    use pirq_shared::update::{EpochUpdate, PageWrite};
    const TOKEN: &str = "guards-token";
    let base = TestDb::create(PAGES, PAGE_SIZE, 7).unwrap();
    let options = PartyOptions {
        gateway_args: vec!["--admin-token".into(), TOKEN.into()],
        ..PartyOptions::default()
    };
    let mut party = Party::start(&base.path, "chain", options).await.unwrap();
    let api = pirq_client::Party::new(reqwest::Client::new(), &party.url);
    let updates: Vec<EpochUpdate> = (1..=2u64)
        .map(|epoch| EpochUpdate {
            epoch,
            // Page 10 twice in epoch 1: the last write wins, in the pages and in the digest.
            pages: vec![
                PageWrite {
                    index: 10,
                    page: vec![1; PAGE_SIZE as usize],
                },
                PageWrite {
                    index: 10 * epoch,
                    page: vec![epoch as u8 + 40; PAGE_SIZE as usize],
                },
            ],
        })
        .collect();
    for u in &updates {
        assert_eq!(api.push_epoch(TOKEN, u).await.unwrap(), u.epoch);
    }
    let expected = updates.iter().fold(base.db.digest(), |d, u| d.next(u));
    let deadline = Instant::now() + Duration::from_secs(10);
    while info(&party).await.digest != Some(expected) {
        assert!(Instant::now() < deadline, "{:?}", info(&party).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // What `pirq db apply --db base --update u1 --update u2 --out snapshot` writes.
    let snapshot = base.path.with_file_name("snapshot.pirdb");
    let header = pirq_db::Header {
        epoch: 2,
        ..*base.db.header()
    };
    let page = |p: u64| -> Vec<u8> {
        match p {
            10 => vec![41; PAGE_SIZE as usize],
            20 => vec![42; PAGE_SIZE as usize],
            _ => base.page(p).to_vec(),
        }
    };
    db::write_with_digest(
        &snapshot,
        &header,
        &db::Meta::default(),
        expected,
        |p, out| out.copy_from_slice(&page(p)),
        |_| {},
    )
    .unwrap();
    party.start_worker_on(&snapshot, &[]).await.unwrap();
    party.workers[0].terminate(Duration::from_secs(10));
    let fetched = self_client(&party).fetch(&[10, 20, 30]).await.unwrap();
    assert_eq!(fetched.epoch, 2);
    assert_eq!(fetched.pages, vec![page(10), page(20), page(30)]);
}

/// Issue 26: a worker checks the pages it loads against the file's header and refuses a damaged
/// file (its log says which file and why; the party never becomes ready), unless the operator
/// says the file was checked offline (`--skip-verify`, which the log then says). An intact file
/// is served, and its load and check times are logged.
#[tokio::test]
async fn a_damaged_file_is_refused_at_load_unless_the_check_is_skipped() {
    let intact = TestDb::create(PAGES, PAGE_SIZE, 7).unwrap();
    let damaged = intact.dir().join("damaged.pirdb");
    let mut bytes = std::fs::read(&intact.path).unwrap();
    bytes[db::HEADER_LEN + 123 * PAGE_SIZE as usize + 5] ^= 0x10;
    std::fs::write(&damaged, &bytes).unwrap();

    let options = PartyOptions {
        no_worker: true,
        ..PartyOptions::default()
    };
    let mut party = Party::start(&damaged, "damaged", options).await.unwrap();
    let err = party.start_worker().await.unwrap_err().to_string();
    assert!(err.contains("refusing to serve"), "{err}");
    assert!(err.contains("damaged.pirdb"), "{err}");
    assert!(err.contains("the file is damaged"), "{err}");
    assert_eq!(party.readyz().await.0, 503);

    party.start_worker_with(&["--skip-verify"]).await.unwrap();
    let log = plain(&party.workers.last().unwrap().log_text());
    assert!(
        log.contains("--skip-verify: serving the file without checking its pages"),
        "{log}"
    );
    assert!(log.contains("verified=false"), "{log}");
    party.stop_workers();

    party.start_worker_on(&intact.path, &[]).await.unwrap();
    let log = plain(&party.workers.last().unwrap().log_text());
    assert!(log.contains("database loaded"), "{log}");
    assert!(
        log.contains("verified=true") && log.contains("verify_ms="),
        "{log}"
    );
    assert_eq!(
        self_client(&party).fetch(&[123]).await.unwrap().pages[0],
        intact.page(123)
    );
}

/// A log without its terminal colour codes (`ESC [ ... m`), so `key=value` reads as written.
fn plain(log: &str) -> String {
    let mut out = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}
