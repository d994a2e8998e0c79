//! Many tables, one party (issue 38): one worker process serves several named tables of
//! different page sizes, each under keys of its own (`docs/redis.md`, "Tables"), and shares its
//! scanner between them (`worker/src/share.rs`).

use std::time::{Duration, Instant};

use pirq_e2e::cli::pirq_ok;
use pirq_e2e::{free_port, metrics, strings, Party, PartyOptions, TestDb};
use pirq_queue::{QueryRecord, RequestId};
use pirq_shared::dpf::generate;
use pirq_shared::layout::Layout;
use pirq_shared::metrics as m;
use pirq_shared::update::{EpochUpdate, PageWrite};
use pirq_shared::wire::{Job, QueryResult};
use pirq_testkit::jobs;

use crate::openapi::{send, Api, Reply};

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

/// Also the worker's own metrics per table: each table's jobs, keys, turns and epoch in series
/// labelled with its name, counted apart (the tables get different numbers of lookups).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_worker_serves_three_tables_each_under_its_own_keys() {
    let tables = Tables::create();
    let metrics_port = free_port();
    let mut worker_args = tables.worker_args();
    worker_args.extend(strings(&[
        "--metrics-listen",
        &format!("127.0.0.1:{metrics_port}"),
    ]));
    let options = PartyOptions {
        worker_args,
        ..PartyOptions::default()
    };
    let party = Party::start(&tables.default.path, "tables-a", options)
        .await
        .unwrap();
    let mut conn = party.redis().await.unwrap();
    let layout = party.layout();
    // The party lists its named tables; each registered its own database under its own keys.
    // The party is ready once the default table is; the named ones register beside it, each
    // from its own start-up, so they are waited for (within a bound).
    let deadline = Instant::now() + Duration::from_secs(60);
    let listed = loop {
        let mut listed: Vec<String> = redis::cmd("SMEMBERS")
            .arg(layout.tables())
            .query_async(&mut conn)
            .await
            .unwrap();
        listed.sort();
        if listed == ["small", "wide"] || Instant::now() >= deadline {
            break listed;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(listed, ["small", "wide"]);
    let mut lookups = Vec::new();
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
        // 3, 4 and 5 lookups: each table's counts below are its own.
        let indices: Vec<u64> = match name {
            "default" => vec![0, pages / 2, pages - 1],
            "small" => vec![0, 1, pages / 2, pages - 1],
            _ => vec![0, 1, 2, pages / 2, pages - 1],
        };
        for &index in &indices {
            let page = fetch_through_queue(&mut conn, &table, pages, index).await;
            assert_eq!(page, db.page(index), "{name} page {index}");
        }
        lookups.push((name, indices.len() as f64));
    }

    // Two jobs of one key a lookup (one a share), counted under the table's name. A counter is
    // counted once the result is written, so the last ones are waited for (within a bound).
    let base = format!("http://127.0.0.1:{metrics_port}");
    let series = |name: &str, table: &str| format!("{name}{{table=\"{table}\"}}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = metrics::scrape(&party.http, &base).await;
        let counted = lookups.iter().all(|(table, n)| {
            metrics::value(&text, &series(m::WORKER_JOBS_COMPLETED, table)) == Some(2.0 * n)
        });
        if counted || Instant::now() >= deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for (table, n) in &lookups {
        for (metric, want) in [
            (m::WORKER_JOBS_COMPLETED, 2.0 * n),
            (m::WORKER_KEYS_ANSWERED, 2.0 * n),
            (m::WORKER_JOBS_FAILED, 0.0),
            (m::WORKER_JOBS_DEAD_LETTERED, 0.0),
            (m::WORKER_EPOCH, 0.0),
        ] {
            let got = metrics::value(&text, &series(metric, table));
            assert_eq!(got, Some(want), "{metric} of {table}:\n{text}");
        }
        for histogram in [m::WORKER_JOB_LATENCY, m::WORKER_QUEUE_WAIT] {
            let count = format!("{histogram}_count");
            let got = metrics::value(&text, &series(&count, table));
            assert_eq!(got, Some(2.0 * n), "{count} of {table}");
        }
        let turns = metrics::value(
            &text,
            &series(&format!("{}_count", m::WORKER_TURN_DURATION), table),
        );
        assert!(
            turns.is_some_and(|t| t >= 1.0),
            "no turn of {table}: {turns:?}"
        );
    }
    // Summed over its labels, a counter is the worker's total: what a scraper of the
    // unlabelled line read before tables.
    let total: f64 = lookups.iter().map(|(_, n)| 2.0 * n).sum();
    assert_eq!(metrics::sum(&text, m::WORKER_KEYS_ANSWERED), Some(total));
    // The scanner's own series are the worker's, not a table's.
    let phases = format!("{}_count{{phase=\"scan\"}}", m::WORKER_PHASE_DURATION);
    assert!(metrics::value(&text, &phases).is_some(), "no {phases}");
}

const ADMIN_TOKEN: &str = "tables-admin-token";

/// Two parties whose workers serve the three tables, gateways with an admin token.
async fn two_parties(tables: &Tables, prefix: &str) -> (Party, Party) {
    let options = PartyOptions {
        worker_args: tables.worker_args(),
        gateway_args: strings(&["--admin-token", ADMIN_TOKEN]),
        ..PartyOptions::default()
    };
    let a = Party::start(
        &tables.default.path,
        &format!("{prefix}-a"),
        options.clone(),
    )
    .await
    .unwrap();
    let b = Party::start(&tables.default.path, &format!("{prefix}-b"), options)
        .await
        .unwrap();
    // A party is ready once its default table is; the named ones register beside it, and a
    // gateway answers `unknown_table` until it has learnt them (a suite run failed so).
    for party in [&a, &b] {
        party
            .wait_tables_served(&["default", "small", "wide"])
            .await;
    }
    (a, b)
}

/// The path of `route` (`/queries`, `/info`, …) of table `name`: the routes without a table
/// name for `None`.
fn route(party: &Party, table: Option<&str>, route: &str) -> String {
    match table {
        Some(name) => format!("{}/v1/tables/{name}{route}", party.url),
        None => format!("{}/v1{route}", party.url),
    }
}

/// `POST …/queries` of one key with `Prefer: wait=10`: the final answer's one page, checked
/// against the document.
async fn ask(api: &Api, party: &Party, table: Option<&str>, key: Vec<u8>) -> (u64, Vec<u8>) {
    let body = pirq_e2e::requests::one_key(key).to_json();
    let r = send(
        party
            .http
            .post(route(party, table, "/queries"))
            .header("content-type", "application/json")
            .header("prefer", "wait=10")
            .body(body),
    )
    .await;
    let template = match table {
        Some(_) => "/v1/tables/{name}/queries",
        None => "/v1/queries",
    };
    if table.is_some() {
        api.check("post", template, &r);
    }
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let result = QueryResult::from_json(&r.body).unwrap();
    assert!(result.error.is_none(), "{:?}", result.error);
    (result.epoch.unwrap(), result.pages[0].clone())
}

/// Page `index` of a `pages`-page table through both parties, with the epoch both answered.
async fn lookup(
    api: &Api,
    (a, b): (&Party, &Party),
    table: Option<&str>,
    pages: u64,
    index: u64,
) -> (u64, Vec<u8>) {
    let (k0, k1) = generate(
        pirq_shared::dpf::domain_bits(pages),
        index,
        &mut rand::rng(),
    )
    .unwrap();
    let (ea, pa) = ask(api, a, table, k0.to_bytes()).await;
    let (eb, pb) = ask(api, b, table, k1.to_bytes()).await;
    assert_eq!(ea, eb, "the parties answered different epochs");
    (ea, pa.iter().zip(&pb).map(|(x, y)| x ^ y).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn both_parties_serve_every_table_on_its_routes_and_one_table_s_epoch_moves_alone() {
    let tables = Tables::create();
    let (a, b) = two_parties(&tables, "tables-http").await;
    let api = Api::load();

    // The party lists its tables, default first.
    let r = send(a.http.get(format!("{}/v1/tables", a.url))).await;
    api.check("get", "/v1/tables", &r);
    let listed = r.json()["tables"].as_array().unwrap().clone();
    let names: Vec<&str> = listed.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["default", "small", "wide"]);
    for ((name, db), t) in tables.each().into_iter().zip(&listed) {
        assert_eq!(t["page_size"], db.db.page_size(), "{name}");
        assert_eq!(t["num_pages"], db.db.num_pages(), "{name}");
        assert_eq!(t["kind"], "pages");
        assert_eq!(t["workers"], 1);
        assert!(t["digest"].is_string(), "{t}");
    }

    // Every table answers exactly through both parties; `default` on both of its routes.
    for (name, db) in tables.each() {
        let pages = db.db.num_pages();
        for index in [0, pages / 2, pages - 1] {
            let (_, page) = lookup(&api, (&a, &b), Some(name), pages, index).await;
            assert_eq!(page, db.page(index), "{name} page {index}");
        }
        let r = send(a.http.get(route(&a, Some(name), "/info"))).await;
        api.check("get", "/v1/tables/{name}/info", &r);
        assert_eq!(r.json()["page_size"], db.db.page_size());
    }
    let (_, page) = lookup(&api, (&a, &b), None, 256, 7).await;
    assert_eq!(page, tables.default.page(7));
    // Party b was sent those lookups' queries and nothing else yet: its accepted-query counters
    // per table (`default` on both of its routes).
    let text = metrics::scrape(&b.http, &b.url).await;
    for (table, n) in [("default", 4.0), ("small", 3.0), ("wide", 3.0)] {
        let series = format!("{}{{table=\"{table}\"}}", m::GATEWAY_QUERIES_ACCEPTED);
        assert_eq!(metrics::value(&text, &series), Some(n), "{series}:\n{text}");
    }
    // One party, whichever table: the same party id.
    let party_of = |r: Reply| r.json()["party"].as_str().unwrap().to_string();
    let plain = party_of(send(a.http.get(format!("{}/v1/info", a.url))).await);
    let small = party_of(send(a.http.get(route(&a, Some("small"), "/info"))).await);
    assert_eq!(plain, small);

    // A polled query of a table: 202 with the table's Location, then its result there, and its
    // event stream.
    let (k0, _) = generate(pirq_shared::dpf::domain_bits(40), 3, &mut rand::rng()).unwrap();
    let r = send(
        a.http
            .post(route(&a, Some("small"), "/queries"))
            .header("content-type", "application/json")
            .body(pirq_e2e::requests::one_key(k0.to_bytes()).to_json()),
    )
    .await;
    api.check("post", "/v1/tables/{name}/queries", &r);
    assert_eq!(r.status, 202);
    let location = r.headers["location"].to_str().unwrap().to_string();
    let id = r.json()["id"].as_str().unwrap().to_string();
    assert_eq!(location, format!("/v1/tables/small/queries/{id}"));
    let r = send(a.http.get(format!("{}{location}?wait=10", a.url))).await;
    api.check("get", "/v1/tables/{name}/queries/{id}", &r);
    assert_eq!((r.status, r.json()["status"].as_str()), (200, Some("done")));
    let r = send(a.http.get(format!("{}{location}/events", a.url))).await;
    api.check("get", "/v1/tables/{name}/queries/{id}/events", &r);
    assert_eq!(r.status, 200);
    // The query is the table's: the default table does not know it.
    let r = send(a.http.get(format!("{}/v1/queries/{id}", a.url))).await;
    assert_eq!((r.status, r.code().as_str()), (404, "not_found"));

    // A table the party does not serve.
    for (method, template, url) in [
        (
            "get",
            "/v1/tables/{name}/info",
            route(&a, Some("nope"), "/info"),
        ),
        (
            "get",
            "/v1/tables/{name}/manifests",
            route(&a, Some("nope"), "/manifests"),
        ),
        (
            "get",
            "/v1/tables/{name}/queries/{id}",
            route(&a, Some("nope"), &format!("/queries/{id}")),
        ),
    ] {
        let r = send(a.http.get(&url)).await;
        api.check(method, template, &r);
        assert_eq!(
            (r.status, r.code().as_str()),
            (404, "unknown_table"),
            "{url}"
        );
    }
    let r = send(
        a.http
            .post(route(&a, Some("no.such"), "/queries"))
            .header("content-type", "application/json")
            .body(pirq_e2e::requests::one_key(k0.to_bytes()).to_json()),
    )
    .await;
    api.check("post", "/v1/tables/{name}/queries", &r);
    assert_eq!((r.status, r.code().as_str()), (404, "unknown_table"));

    // The next epoch of one table, pushed to both parties: that table answers it, the others
    // stay where they were.
    let new_page: Vec<u8> = (0..512).map(|i| (i * 7 + 1) as u8).collect();
    let update = EpochUpdate {
        epoch: 1,
        pages: vec![PageWrite {
            index: 5,
            page: new_page.clone(),
        }],
    };
    for party in [&a, &b] {
        let r = send(
            party
                .http
                .post(format!("{}/v1/admin/tables/small/epochs", party.url))
                .bearer_auth(ADMIN_TOKEN)
                .header("content-type", "application/json")
                .body(update.to_json()),
        )
        .await;
        api.check("post", "/v1/admin/tables/{name}/epochs", &r);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let r = send(
            party
                .http
                .post(format!("{}/v1/admin/tables/nope/epochs", party.url))
                .bearer_auth(ADMIN_TOKEN)
                .header("content-type", "application/json")
                .body(update.to_json()),
        )
        .await;
        api.check("post", "/v1/admin/tables/{name}/epochs", &r);
        assert_eq!((r.status, r.code().as_str()), (404, "unknown_table"));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (epoch, page) = lookup(&api, (&a, &b), Some("small"), 40, 5).await;
        if epoch == 1 {
            assert_eq!(page, new_page);
            break;
        }
        assert_eq!(page, tables.small.page(5), "epoch {epoch}");
        assert!(Instant::now() < deadline, "epoch 1 never answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = send(a.http.get(format!("{}/v1/tables", a.url))).await;
    let newest: Vec<u64> = r.json()["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["epoch"]["newest"].as_u64().unwrap())
        .collect();
    assert_eq!(newest, [0, 1, 0], "default, small, wide");
    let (epoch, page) = lookup(&api, (&a, &b), Some("wide"), 300, 5).await;
    assert_eq!((epoch, page.as_slice()), (0, tables.wide.page(5)));

    // The Rust client and the `pirq` tool name the table; the digest and epoch checks are the
    // table's (small is at epoch 1, the others at 0).
    let client = table_client(&a, &b, "small");
    let got = client.fetch(&[5, 6]).await.unwrap();
    assert_eq!(got.epoch, 1);
    assert_eq!(got.pages, [new_page.clone(), tables.small.page(6).to_vec()]);
    let got = table_client(&a, &b, "wide").fetch(&[299]).await.unwrap();
    assert_eq!(
        (got.epoch, got.pages[0].as_slice()),
        (0, tables.wide.page(299))
    );
    let ran = pirq_ok(&[
        "query",
        "--party-a",
        &a.url,
        "--party-b",
        &b.url,
        "--table",
        "wide",
        "--index",
        "12",
        "--out",
        "-",
    ]);
    assert_eq!(ran.stdout, tables.wide.page(12));
    let refused = pirq_e2e::cli::pirq(&[
        "query",
        "--party-a",
        &a.url,
        "--party-b",
        &b.url,
        "--table",
        "nope",
        "--index",
        "0",
        "--out",
        "-",
    ]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("no table"), "{said}");
}

/// A client of the two parties' table `name`.
fn table_client(a: &Party, b: &Party, name: &str) -> pirq_client::Client {
    pirq_client::Client::builder()
        .party_a(&a.url)
        .party_b(&b.url)
        .table(name)
        .build()
        .unwrap()
}

/// Issue 38's fairness, counted and verified (never timed): while clients keep the wide table
/// busy, lone lookups on the small table are answered, exactly, with the load still running.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quiet_table_is_answered_while_another_is_under_load() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let tables = Tables::create();
    let (a, b) = two_parties(&tables, "tables-fair").await;
    let busy = Arc::new(table_client(&a, &b, "wide"));
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let wide = Arc::new(tables.wide.db.clone());
    let mut load = tokio::task::JoinSet::new();
    for client_no in 0..6u64 {
        let (busy, stop, answered, wide) =
            (busy.clone(), stop.clone(), answered.clone(), wide.clone());
        load.spawn(async move {
            let mut index = client_no;
            while !stop.load(Ordering::Relaxed) {
                let indices: Vec<u64> = (0..4).map(|k| (index + k * 71) % 300).collect();
                let got = busy.fetch(&indices).await.unwrap();
                for (i, page) in indices.iter().zip(&got.pages) {
                    assert_eq!(page.as_slice(), wide.page(*i).unwrap(), "wide page {i}");
                }
                answered.fetch_add(1, Ordering::Relaxed);
                index += 13;
            }
        });
    }
    // The load is running before the lone lookups start...
    while answered.load(Ordering::Relaxed) < 6 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let quiet = table_client(&a, &b, "small");
    for index in [1, 17, 39] {
        let before = answered.load(Ordering::Relaxed);
        let got = quiet.fetch(&[index]).await.unwrap();
        assert_eq!(got.pages[0], tables.small.page(index), "small page {index}");
        // ...and the busy table kept being answered meanwhile (neither table stopped the other).
        let deadline = Instant::now() + Duration::from_secs(30);
        while answered.load(Ordering::Relaxed) <= before {
            assert!(
                Instant::now() < deadline,
                "the busy table stopped being answered"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    stop.store(true, Ordering::Relaxed);
    while let Some(done) = load.join_next().await {
        done.expect("every load lookup answered exactly");
    }
}

/// A key-value table beside the page table `default`, from the same worker: `GET /v1/tables`
/// says which is which, and `pirq get`, `pirq bench load` and the Rust client look keys up in it
/// by its name.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_value_table_beside_a_page_table() {
    let pages = TestDb::create(128, 256, rand::random()).unwrap();
    let records = pages.dir().join("users.jsonl");
    let lines: String = (1..=300)
        .map(|i| format!("{{\"key\":\"user-{i:05}\",\"value\":\"profile of user {i}\"}}\n"))
        .collect();
    std::fs::write(&records, lines).unwrap();
    let users = pages.dir().join("users.pirdb");
    let (records_arg, users_arg) = (records.display().to_string(), users.display().to_string());
    pirq_ok(&[
        "kv",
        "build",
        "--records",
        &records_arg,
        "--max-value-size",
        "64",
        "--seed",
        "3",
        "--out",
        &users_arg,
    ]);
    let options = PartyOptions {
        worker_args: strings(&["--table", &format!("users={users_arg}")]),
        ..PartyOptions::default()
    };
    let a = Party::start(&pages.path, "tables-kv-a", options.clone())
        .await
        .unwrap();
    let b = Party::start(&pages.path, "tables-kv-b", options)
        .await
        .unwrap();

    let r = send(a.http.get(format!("{}/v1/tables", a.url))).await;
    Api::load().check("get", "/v1/tables", &r);
    let kinds: Vec<(String, String)> = r.json()["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().into(),
                t["kind"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("default".into(), "pages".into()),
            ("users".into(), "kv".into())
        ]
    );

    let got = pirq_ok(&[
        "get",
        "--party-a",
        &a.url,
        "--party-b",
        &b.url,
        "--table",
        "users",
        "--key",
        "user-00042",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&got.stdout).trim(),
        "profile of user 42"
    );
    let client = table_client(&a, &b, "users");
    let value = client.get(b"user-00007").await.unwrap();
    assert_eq!(value.as_deref(), Some(&b"profile of user 7"[..]));
    assert_eq!(client.get(b"nobody").await.unwrap(), None);
    // The page table is still the routes without a name.
    let got = pirq_client::Client::new(&a.url, &b.url)
        .unwrap()
        .fetch(&[5])
        .await
        .unwrap();
    assert_eq!(got.pages[0], pages.page(5));
    let report = pages.dir().join("load.json").display().to_string();
    pirq_ok(&[
        "bench",
        "load",
        "--party-a",
        &a.url,
        "--party-b",
        &b.url,
        "--table",
        "users",
        "--kv-records",
        &records_arg,
        "--concurrency",
        "2",
        "--duration",
        "1",
        "--warmup",
        "0",
        "--quiet",
        "--json",
        &report,
    ]);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(report["ok"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["errors"], serde_json::json!({}), "{report}");
}

/// What still looked at the table `default` alone (issue 38): `/readyz` is about every table the
/// party serves (a party of named tables only is ready; a table whose workers are gone makes it
/// not ready, naming the table), the queue gauges have a series per table, and a named table
/// serves its own manifest file (`--table-manifests`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readiness_queue_gauges_and_manifests_are_per_table() {
    let tables = Tables::create();
    let manifests = tables.small.dir().join("small-manifests.json");
    std::fs::write(&manifests, b"[]").unwrap();
    let options = PartyOptions {
        no_worker: true,
        gateway_args: strings(&[
            "--table-manifests",
            &format!("small={}", manifests.display()),
        ]),
        ..PartyOptions::default()
    };
    let mut party = Party::start(&tables.default.path, "tables-ready", options)
        .await
        .unwrap();
    let (status, body) = party.readyz().await;
    assert_eq!(status, 503, "no table served yet: {body}");
    assert_eq!(body["error"]["code"], "no_database", "{body}");

    // A worker of the named table `small` alone: no table `default` at all, and ready.
    party
        .start_table_worker(&[("small", &tables.small.path)])
        .await
        .unwrap();
    let (status, body) = ready_within(&party, Duration::from_secs(30)).await;
    assert_eq!(status, 200, "a party of one named table is ready: {body}");

    // The table default joins (a second worker, `--table default=FILE` being `--db FILE`);
    // then the named table's worker dies: the party is not ready, and says which table.
    party
        .start_table_worker(&[("default", &tables.default.path)])
        .await
        .unwrap();
    assert_eq!(ready_within(&party, Duration::from_secs(30)).await.0, 200);

    // Each table's queue gauges, the table as a label.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = pirq_e2e::metrics::scrape(&party.http, &party.url).await;
        let live = |table: &str| {
            pirq_e2e::metrics::value(
                &text,
                &format!("pirq_queue_live_workers{{table=\"{table}\"}}"),
            )
        };
        if live("default") == Some(1.0) && live("small") == Some(1.0) {
            assert_eq!(
                pirq_e2e::metrics::value(&text, "pirq_queue_depth_jobs{table=\"small\"}"),
                Some(0.0),
                "no depth gauge of the table small:\n{text}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no live-worker gauge of 1 for both tables:\n{}",
            text.lines()
                .filter(|l| l.starts_with("pirq_queue"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The named table's manifests are its own file; the table default has none here.
    let get = |path: &str| party.http.get(format!("{}{path}", party.url)).send();
    let r = get("/v1/tables/small/manifests").await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"[]");
    let r = get("/v1/manifests").await.unwrap();
    assert_eq!(r.status(), 404);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "no_manifests", "{body}");

    party.workers[0].kill();
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let (status, body) = party.readyz().await;
        if status == 503 {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "still ready with the table small's worker gone"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(body["error"]["code"], "no_workers", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("table small: "), "{message}");
}

/// `GET /readyz` until it is 200 or `within` has passed: the last status and body.
async fn ready_within(party: &Party, within: Duration) -> (u16, serde_json::Value) {
    let deadline = Instant::now() + within;
    loop {
        let (status, body) = party.readyz().await;
        if status == 200 || Instant::now() > deadline {
            return (status, body);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
