//! Many tables, one party (issue 38): one worker process serves several named tables of
//! different page sizes, each under keys of its own (`docs/redis.md`, "Tables"), and shares its
//! scanner between them (`worker/src/share.rs`).

use std::time::{Duration, Instant};

use pirq_e2e::{strings, Party, PartyOptions, TestDb};
use pirq_queue::{QueryRecord, RequestId};
use pirq_shared::dpf::generate;
use pirq_shared::layout::Layout;
use pirq_shared::wire::Job;
use pirq_testkit::jobs;

/// The default table and two named ones, of three page sizes and page counts.
struct Tables {
    default: TestDb,
    small: TestDb,
    wide: TestDb,
}

impl Tables {
    fn create() -> Tables {
        Tables {
            default: TestDb::create(256, 256, rand::random()).unwrap(),
            small: TestDb::create(40, 512, rand::random()).unwrap(),
            wide: TestDb::create(300, 4096, rand::random()).unwrap(),
        }
    }

    /// `--table` flags for the two named tables (the default one is the party's `--db`).
    fn worker_args(&self) -> Vec<String> {
        let table = |name: &str, db: &TestDb| format!("{name}={}", db.path.display());
        strings(&[
            "--table",
            &table("small", &self.small),
            "--table",
            &table("wide", &self.wide),
        ])
    }

    fn each(&self) -> [(&'static str, &TestDb); 3] {
        [
            ("default", &self.default),
            ("small", &self.small),
            ("wide", &self.wide),
        ]
    }
}

/// Queues both keys of a key pair for page `index` of a `pages`-page table straight into the
/// table's job stream (one party answers both shares here: their XOR is the page), and waits for
/// both answers.
async fn fetch_through_queue(
    conn: &mut redis::aio::MultiplexedConnection,
    layout: &Layout,
    pages: u64,
    index: u64,
) -> Vec<u8> {
    let bits = pirq_shared::dpf::domain_bits(pages);
    let (k0, k1) = generate(bits, index, &mut rand::rng()).unwrap();
    let mut ids = Vec::new();
    for key in [k0, k1] {
        let id = RequestId::mint();
        let job = Job {
            keys: vec![key.to_bytes()],
            epoch: None,
            accepted_ms: 0,
            reply: Default::default(),
        };
        jobs::enqueue(conn, layout, id.as_ref(), &job.to_bincode())
            .await
            .unwrap();
        ids.push(id);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut answers = Vec::new();
    for id in ids {
        loop {
            let bytes: Vec<u8> = redis::cmd("GET")
                .arg(layout.query(id.as_ref()))
                .query_async(conn)
                .await
                .unwrap();
            let record = QueryRecord::decode(&id, &bytes).unwrap();
            if record.result.status.is_final() {
                assert!(record.result.error.is_none(), "{:?}", record.result.error);
                answers.push(record.result.pages[0].clone());
                break;
            }
            assert!(Instant::now() < deadline, "{layout}: no answer for {id}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    answers[0]
        .iter()
        .zip(&answers[1])
        .map(|(a, b)| a ^ b)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_worker_serves_three_tables_each_under_its_own_keys() {
    let tables = Tables::create();
    let options = PartyOptions {
        worker_args: tables.worker_args(),
        ..PartyOptions::default()
    };
    let party = Party::start(&tables.default.path, "tables-a", options)
        .await
        .unwrap();
    let mut conn = party.redis().await.unwrap();
    let layout = party.layout();
    // The party lists its named tables; each registered its own database under its own keys.
    let mut listed: Vec<String> = redis::cmd("SMEMBERS")
        .arg(layout.tables())
        .query_async(&mut conn)
        .await
        .unwrap();
    listed.sort();
    assert_eq!(listed, ["small", "wide"]);
    for (name, db) in tables.each() {
        let table = layout.table(name).unwrap();
        let page_size: u32 = redis::cmd("HGET")
            .arg(table.db())
            .arg("page_size")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(page_size as usize, db.db.page_size(), "{name}");
        let pages = db.db.num_pages();
        for index in [0, pages / 2, pages - 1] {
            let page = fetch_through_queue(&mut conn, &table, pages, index).await;
            assert_eq!(page, db.page(index), "{name} page {index}");
        }
    }
}
