//! Redis commands per answered party query, counted on every path a query takes (issue 35).
//!
//! One party of real processes (redis-server, gateway, CPU workers over a tiny database) is given
//! both halves of every lookup (the client's same-party override, as the benches do: each lookup
//! is two party queries there). For each path the party's Redis counts its commands
//! (`CONFIG RESETSTAT`, then `INFO commandstats` summed over its primaries: script internals
//! included, [`pirq_e2e::commandstats`]) over [`LOAD_CLIENTS`] closed-loop clients and over a
//! lone client sending one lookup after another; every answer is checked against the database.
//! The commands per answered party query must stay within [`pirq_e2e::command_budget`]; a path
//! above it fails with its commands, name by name, per query, so the failure says what grew.
//!
//! Paths: `Prefer: wait` (the clients' default), polling (`GET /v1/queries/{id}?wait=30`, the
//! long poll the clients fall back to: one read a query whatever the latency, where a short poll
//! every few ms reads as often as the machine is slow, and a count of it could not hold a
//! budget on a loaded machine), Server-Sent Events (`GET …/events`), kv lookups (one query of `d`
//! keys a lookup), a party in 2 shards, a party queue in 4 partitions, and a Redis Cluster of 3
//! primaries with 4 partitions (`PIRQ_CLUSTER_TESTS=1` only).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pirq_client::{Client, Options, Wait};
use pirq_e2e::cli::pirq_ok;
use pirq_e2e::command_budget::budget;
use pirq_e2e::commandstats::{self, Calls};
use pirq_e2e::{cluster_tests_enabled, Backend, Party, PartyOptions, TestDb};

/// Concurrent clients of a run under load.
const LOAD_CLIENTS: usize = 16;
/// Lookups each of them sends (2 party queries each): 512 party queries a run.
const LOAD_LOOKUPS_EACH: usize = 16;
/// Lookups of a lone sequential run: 64 party queries.
const LONE_LOOKUPS: usize = 32;
/// Lookups before the counting starts (the client's first reads of `/v1/info`, the gateway's
/// caches filled, the worker's first pass).
const WARMUP_LOOKUPS: usize = 4;
/// What the counting waits after the last answer: the worker's acknowledgement and clean-up of
/// the last jobs come after the answer the gateway waited for.
const SETTLE: Duration = Duration::from_millis(300);

/// Two whole 256-page blocks: the least a party in 2 shards takes.
const PAGES: u64 = 512;
const PAGE_SIZE: u32 = 256;

/// kv records: (key, value).
type Records = Vec<(Vec<u8>, Vec<u8>)>;

/// What a lookup is.
#[derive(Clone)]
enum Lookup {
    /// One random page of this database, compared with it.
    Page(Arc<TestDb>),
    /// One kv key of these records (key, value), its value compared.
    Kv(Arc<Records>),
}

impl Lookup {
    /// One lookup, checked.
    async fn run(&self, client: &Client) {
        match self {
            Lookup::Page(db) => {
                let index = rand::random::<u64>() % PAGES;
                let pages = client.fetch(&[index]).await.expect("a page lookup");
                assert_eq!(pages.pages[0], db.page(index), "page {index}");
            }
            Lookup::Kv(records) => {
                let (key, value) = &records[rand::random::<u64>() as usize % records.len()];
                let found = client.get(key).await.expect("a kv lookup");
                assert_eq!(found.as_ref(), Some(value), "the value of a present key");
            }
        }
    }
}

/// One counted run: the path, its clients, the party queries answered and the commands.
struct Counted {
    path: &'static str,
    clients: usize,
    party_queries: u64,
    calls: Calls,
    secs: f64,
}

impl Counted {
    fn per_query(&self) -> f64 {
        self.calls.total() as f64 / self.party_queries as f64
    }

    /// `path, N clients: X commands a party query (…); hset 2.70, evalsha 1.40, …`
    fn line(&self) -> String {
        let mut by_name: Vec<(&String, &u64)> = self.calls.0.iter().collect();
        by_name.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let names: Vec<String> = by_name
            .iter()
            .map(|(name, n)| format!("{name} {:.2}", **n as f64 / self.party_queries as f64))
            .collect();
        format!(
            "{}, {} client{}: {:.2} commands a party query ({} calls over {} party queries in \
             {:.2} s; budget {:.2}): {}",
            self.path,
            self.clients,
            if self.clients == 1 { "" } else { "s" },
            self.per_query(),
            self.calls.total(),
            self.party_queries,
            self.secs,
            budget(self.path, self.clients),
            names.join(", ")
        )
    }
}

/// Counts the party's Redis commands over `clients` closed-loop clients sending `lookups_each`
/// lookups each (one client: a lone sequential run), after a warm-up.
async fn count(
    party: &Party,
    path: &'static str,
    wait: Wait,
    lookup: &Lookup,
    clients: usize,
    lookups_each: usize,
) -> Counted {
    let options = Options {
        wait,
        allow_same_party: true,
        timeout: Duration::from_secs(60),
        ..Options::default()
    };
    let client = Client::with_options(&party.url, &party.url, options).expect("a client");
    for _ in 0..WARMUP_LOOKUPS {
        lookup.run(&client).await;
    }
    tokio::time::sleep(SETTLE).await;
    let mut primaries = commandstats::primaries(party).await.expect("the primaries");
    commandstats::reset(&mut primaries)
        .await
        .expect("CONFIG RESETSTAT");
    let start = Instant::now();
    let runs = (0..clients).map(|_| {
        let client = client.clone();
        let lookup = lookup.clone();
        tokio::spawn(async move {
            for _ in 0..lookups_each {
                lookup.run(&client).await;
            }
        })
    });
    for run in futures::future::join_all(runs).await {
        run.expect("a client task");
    }
    let secs = start.elapsed().as_secs_f64();
    tokio::time::sleep(SETTLE).await;
    let calls = commandstats::read(&mut primaries)
        .await
        .expect("INFO commandstats");
    Counted {
        path,
        clients,
        // Both halves of every lookup went to this party.
        party_queries: 2 * (clients * lookups_each) as u64,
        calls,
        secs,
    }
}

/// Counts `path` under load and alone, prints both, and returns the lines over budget.
async fn load_and_lone(
    party: &Party,
    path: &'static str,
    wait: Wait,
    lookup: &Lookup,
) -> Vec<String> {
    let mut over = Vec::new();
    for (clients, each) in [(LOAD_CLIENTS, LOAD_LOOKUPS_EACH), (1, LONE_LOOKUPS)] {
        let counted = count(party, path, wait, lookup, clients, each).await;
        let line = counted.line();
        eprintln!("host path: {line}");
        if counted.per_query() > budget(path, clients) {
            over.push(line);
        }
    }
    over
}

fn assert_within_budget(over: Vec<String>) {
    assert!(
        over.is_empty(),
        "Redis commands a party query above the budget (tests/src/command_budget.rs):\n{}",
        over.join("\n")
    );
}

fn page_db() -> Arc<TestDb> {
    Arc::new(TestDb::create(PAGES, PAGE_SIZE, rand::random()).expect("a database"))
}

/// `options` on one Redis, one partition, whatever `PIRQ_PARTITIONS` says: the paths' figures
/// are of one partition unless the path says otherwise.
fn one_partition(options: PartyOptions) -> PartyOptions {
    PartyOptions {
        partitions: Some(options.partitions.unwrap_or(1)),
        ..options
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_a_query_on_the_wait_poll_and_event_paths_stay_within_budget() {
    let db = page_db();
    let party = Party::start(&db.path, "count-a", one_partition(PartyOptions::default()))
        .await
        .expect("a party");
    let lookup = Lookup::Page(db.clone());
    let mut over = Vec::new();
    over.extend(load_and_lone(&party, "wait", Wait::Inline, &lookup).await);
    over.extend(load_and_lone(&party, "poll", Wait::LongPoll, &lookup).await);
    over.extend(load_and_lone(&party, "events", Wait::Events, &lookup).await);
    assert_within_budget(over);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_a_kv_lookup_stay_within_budget() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (db_path, records) = kv_database(dir.path());
    let party = Party::start(&db_path, "count-kv", one_partition(PartyOptions::default()))
        .await
        .expect("a party");
    let over = load_and_lone(&party, "kv", Wait::Inline, &Lookup::Kv(Arc::new(records))).await;
    assert_within_budget(over);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_a_query_of_a_party_in_two_shards_stay_within_budget() {
    let db = page_db();
    let options = one_partition(PartyOptions {
        no_worker: true,
        ..PartyOptions::default()
    });
    let mut party = Party::start(&db.path, "count-shards", options)
        .await
        .expect("a party");
    for shard in ["0/2", "1/2"] {
        party
            .start_worker_with(&["--shard", shard])
            .await
            .expect("a shard's worker");
    }
    let lookup = Lookup::Page(db.clone());
    let over = load_and_lone(&party, "2 shards", Wait::Inline, &lookup).await;
    assert_within_budget(over);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_a_query_of_a_queue_in_four_partitions_stay_within_budget() {
    let db = page_db();
    let options = PartyOptions {
        partitions: Some(4),
        ..PartyOptions::default()
    };
    let party = Party::start(&db.path, "count-parts", options)
        .await
        .expect("a party");
    let lookup = Lookup::Page(db.clone());
    let over = load_and_lone(&party, "4 partitions", Wait::Inline, &lookup).await;
    assert_within_budget(over);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_a_query_on_a_redis_cluster_stay_within_budget() {
    if !cluster_tests_enabled("commands_a_query_on_a_redis_cluster_stay_within_budget") {
        return;
    }
    let db = page_db();
    let options = Backend::Cluster.options(PartyOptions::default());
    // A prefix whose 4 partitions sit on all 3 primaries ([`Backend::PARTITIONS`]; checked).
    let party = Party::start(&db.path, "party-a", options)
        .await
        .expect("a party");
    Backend::Cluster.check(&party).await;
    let lookup = Lookup::Page(db.clone());
    let over = load_and_lone(&party, "cluster", Wait::Inline, &lookup).await;
    assert_within_budget(over);
}

/// A kv database of 200 records (20-byte keys, 32-byte values, 512-byte pages) built by the
/// `pirq` tool, and its records.
fn kv_database(dir: &Path) -> (std::path::PathBuf, Records) {
    let records = dir.join("records.jsonl");
    let db = dir.join("kv.pirdb");
    let (records_s, db_s) = (records.to_str().unwrap(), db.to_str().unwrap());
    pirq_ok(&[
        "kv",
        "gen",
        "--records",
        "200",
        "--key-size",
        "20",
        "--value-size",
        "32",
        "--seed",
        "5",
        "--out",
        records_s,
    ]);
    pirq_ok(&[
        "kv",
        "build",
        "--records",
        records_s,
        // `kv gen` writes hex keys and values.
        "--key-encoding",
        "hex",
        "--value-encoding",
        "hex",
        "--key-size",
        "20",
        "--value-size",
        "32",
        "--page-size",
        "512",
        "--load",
        "0.9",
        "--seed",
        "7",
        "--out",
        db_s,
    ]);
    let parsed = std::fs::read_to_string(&records)
        .expect("the records")
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            let hex_of = |f: &str| hex::decode(v[f].as_str().expect("hex")).expect("hex");
            (hex_of("key"), hex_of("value"))
        })
        .collect();
    (db, parsed)
}
