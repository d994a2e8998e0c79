//! Epochs end to end: admin pushes, pinned queries, updates arriving while queries run, parties
//! updated at different moments, and a worker that restarts and replays the updates stream.
//! Every fetched page is compared with a model of the database at the epoch the answer reports.
//! Each test runs on one Redis per party, and (`PIRQ_CLUSTER_TESTS=1`) on a Redis Cluster of 3
//! primaries per party with the queue in 4 partitions ([`Backend`]).

use std::time::{Duration, Instant};

use pirq_client::{ClientError, Options, Party as PartyApi};
use pirq_e2e::{Backend, Cluster, Party, PartyOptions, TestDb};
use pirq_shared::update::{EpochUpdate, PageWrite};
use pirq_shared::wire::QueryRequest;
use rand::{Rng, RngCore};

const TOKEN: &str = "test-admin-token";

fn options(backend: Backend, window: u64) -> PartyOptions {
    backend.options(PartyOptions {
        gateway_args: vec!["--admin-token".into(), TOKEN.into()],
        worker_args: vec!["--epoch-window".into(), window.to_string()],
        ..PartyOptions::default()
    })
}

/// Two parties on `backend` (checked), each worker keeping `window` epochs.
async fn start(backend: Backend, pages: u64, page_size: u32, window: u64) -> Cluster {
    let cluster = Cluster::start(pages, page_size, options(backend, window))
        .await
        .unwrap();
    backend.check(&cluster.a).await;
    backend.check(&cluster.b).await;
    cluster
}

/// The database's contents at every epoch, starting from the file's.
struct Model {
    epochs: Vec<Vec<Vec<u8>>>,
}

impl Model {
    fn new(db: &TestDb) -> Model {
        let pages = (0..db.db.num_pages())
            .map(|p| db.page(p).to_vec())
            .collect();
        Model {
            epochs: vec![pages],
        }
    }

    /// A random next update (repeated indices included) and its effect on the model.
    fn next_update(&mut self, changes: usize) -> EpochUpdate {
        let mut rng = rand::rng();
        let current = self.epochs.last().unwrap().clone();
        let (num_pages, page_size) = (current.len() as u64, current[0].len());
        let mut next = current;
        let pages: Vec<PageWrite> = (0..changes)
            .map(|i| {
                let mut page = vec![0u8; page_size];
                rng.fill_bytes(&mut page);
                // Page 0 changes in every epoch that changes anything.
                let index = if i == 0 {
                    0
                } else {
                    rng.random_range(0..num_pages)
                };
                next[index as usize] = page.clone();
                PageWrite { index, page }
            })
            .collect();
        self.epochs.push(next);
        EpochUpdate {
            epoch: self.epochs.len() as u64 - 1,
            pages,
        }
    }

    fn page(&self, epoch: u64, index: u64) -> &[u8] {
        &self.epochs[epoch as usize][index as usize]
    }
}

fn api(party: &Party) -> PartyApi {
    PartyApi::new(reqwest::Client::new(), &party.url)
}

async fn info_epochs(party: &Party) -> (u64, u64) {
    let info = api(party).info().await.expect("info");
    (info.epoch.oldest, info.epoch.newest)
}

/// Waits until the party's workers have applied `epoch` (its `/v1/info` oldest/newest moved).
async fn wait_applied(party: &Party, epoch: u64, oldest: u64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while info_epochs(party).await != (oldest, epoch) {
        assert!(
            Instant::now() < deadline,
            "epoch {epoch} not applied: {:?}",
            info_epochs(party).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn check_fetch(cluster: &Cluster, model: &Model, count: usize) -> u64 {
    let mut rng = rand::rng();
    let n = cluster.db.db.num_pages();
    let indices: Vec<u64> = std::iter::once(0)
        .chain((1..count).map(|_| rng.random_range(0..n)))
        .collect();
    let fetched = cluster
        .client(Options::default())
        .fetch(&indices)
        .await
        .expect("fetch");
    for (i, index) in indices.iter().enumerate() {
        assert_eq!(
            fetched.pages[i],
            model.page(fetched.epoch, *index),
            "page {index} at epoch {}",
            fetched.epoch
        );
    }
    fetched.epoch
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admin_route_authorizes_validates_and_orders() {
    admin_route(Backend::OneRedis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admin_route_authorizes_validates_and_orders_on_a_redis_cluster() {
    if Backend::Cluster.runs("admin_route_authorizes_validates_and_orders_on_a_redis_cluster") {
        admin_route(Backend::Cluster).await;
    }
}

async fn admin_route(backend: Backend) {
    let cluster = start(backend, 300, 256, 4).await;
    let mut model = Model::new(&cluster.db);
    let http = reqwest::Client::new();
    let url = format!("{}/v1/admin/epochs", cluster.a.url);
    let update = model.next_update(3);
    let post = |body: Vec<u8>, token: Option<&str>, ct: &str| {
        let mut req = http
            .post(&url)
            .header("content-type", ct.to_string())
            .body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    let code = |resp: reqwest::Response| async move {
        let status = resp.status().as_u16();
        let body: serde_json::Value = resp.json().await.unwrap();
        (
            status,
            body["error"]["code"].as_str().unwrap_or("").to_string(),
        )
    };
    let json = "application/json";
    assert_eq!(
        code(post(update.to_json(), None, json).await.unwrap()).await,
        (401, "unauthorized".into())
    );
    assert_eq!(
        code(post(update.to_json(), Some("wrong"), json).await.unwrap()).await,
        (401, "unauthorized".into())
    );
    assert_eq!(
        code(post(b"{".to_vec(), Some(TOKEN), json).await.unwrap()).await,
        (400, "invalid_update".into())
    );
    let mut outside = update.clone();
    outside.pages[1].index = 300;
    assert_eq!(
        code(post(outside.to_json(), Some(TOKEN), json).await.unwrap()).await,
        (400, "invalid_update".into())
    );
    let mut short = update.clone();
    short.pages[2].page.pop();
    assert_eq!(
        code(
            post(short.to_bincode(), Some(TOKEN), "application/x-bincode")
                .await
                .unwrap()
        )
        .await,
        (400, "invalid_update".into())
    );
    let mut skip = update.clone();
    skip.epoch = 2;
    assert_eq!(
        code(post(skip.to_json(), Some(TOKEN), json).await.unwrap()).await,
        (409, "epoch_not_next".into())
    );
    // Epochs stay at or below 2^53 - 1 (SPEC §3): past it, an update is refused as it is read.
    let mut beyond = update.clone();
    beyond.epoch = pirq_shared::update::MAX_EPOCH + 1;
    let resp = post(beyond.to_bincode(), Some(TOKEN), "application/x-bincode")
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_update");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("above the highest epoch, 2^53-1"),
        "{message}"
    );
    // Nothing refused was applied; the right one is, once.
    assert_eq!(info_epochs(&cluster.a).await, (0, 0));
    let resp = post(update.to_json(), Some(TOKEN), json).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        code(post(update.to_json(), Some(TOKEN), json).await.unwrap()).await,
        (409, "epoch_not_next".into())
    );
    wait_applied(&cluster.a, 1, 0).await;

    // A pinned epoch outside the window is 410 with the window in the error.
    let key = pirq_shared::dpf::generate(cluster.db.db.header().domain_bits(), 1, &mut rand::rng())
        .unwrap()
        .0;
    let body = QueryRequest {
        keys: vec![key.to_bytes()],
        epoch: Some(7),
    }
    .to_json();
    let resp = http
        .post(format!("{}/v1/queries", cluster.a.url))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 410);
    let err: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(err["error"]["code"], "epoch_unavailable");
    assert_eq!(
        err["error"]["window"],
        serde_json::json!({"oldest": 0, "newest": 1})
    );

    // A gateway without a token has the admin route off.
    let off = Party::start(
        &cluster.db.path,
        "no-admin",
        backend.options(PartyOptions::default()),
    )
    .await
    .unwrap();
    let err = api(&off).push_epoch(TOKEN, &update).await.unwrap_err();
    assert!(matches!(err, ClientError::Api { status: 403, .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn updates_stream_in_while_queries_run() {
    updates_stream_in(Backend::OneRedis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn updates_stream_in_while_queries_run_on_a_redis_cluster() {
    if Backend::Cluster.runs("updates_stream_in_while_queries_run_on_a_redis_cluster") {
        updates_stream_in(Backend::Cluster).await;
    }
}

async fn updates_stream_in(backend: Backend) {
    let window = 3;
    let cluster = start(backend, 500, 512, window).await;
    let mut model = Model::new(&cluster.db);
    let updates: Vec<EpochUpdate> = (0..8)
        .map(|e| model.next_update([0, 1, 5, 40][e % 4]))
        .collect();
    let pusher = {
        let (a, b) = (api(&cluster.a), api(&cluster.b));
        tokio::spawn(async move {
            for u in updates {
                a.push_epoch(TOKEN, &u).await.expect("push a");
                b.push_epoch(TOKEN, &u).await.expect("push b");
                tokio::time::sleep(Duration::from_millis(60)).await;
            }
        })
    };
    let mut seen = std::collections::BTreeSet::new();
    while !pusher.is_finished() {
        seen.insert(check_fetch(&cluster, &model, 4).await);
    }
    pusher.await.unwrap();
    wait_applied(&cluster.a, 8, 8 + 1 - window).await;
    wait_applied(&cluster.b, 8, 8 + 1 - window).await;
    seen.insert(check_fetch(&cluster, &model, 6).await);
    assert!(seen.contains(&8), "the newest epoch was fetched: {seen:?}");
    assert!(
        seen.len() >= 2,
        "answers came from several epochs: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parties_updated_at_different_moments() {
    updated_at_different_moments(Backend::OneRedis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parties_updated_at_different_moments_on_a_redis_cluster() {
    if Backend::Cluster.runs("parties_updated_at_different_moments_on_a_redis_cluster") {
        updated_at_different_moments(Backend::Cluster).await;
    }
}

async fn updated_at_different_moments(backend: Backend) {
    let cluster = start(backend, 200, 256, 4).await;
    let mut model = Model::new(&cluster.db);
    let (a, b) = (api(&cluster.a), api(&cluster.b));
    let u1 = model.next_update(10);
    let u2 = model.next_update(10);
    a.push_epoch(TOKEN, &u1).await.unwrap();
    wait_applied(&cluster.a, 1, 0).await;
    // A is ahead: the client pins the newest epoch both have, 0.
    assert_eq!(check_fetch(&cluster, &model, 5).await, 0);
    a.push_epoch(TOKEN, &u2).await.unwrap();
    b.push_epoch(TOKEN, &u1).await.unwrap();
    wait_applied(&cluster.a, 2, 0).await;
    wait_applied(&cluster.b, 1, 0).await;
    assert_eq!(check_fetch(&cluster, &model, 5).await, 1);
    b.push_epoch(TOKEN, &u2).await.unwrap();
    wait_applied(&cluster.b, 2, 0).await;
    assert_eq!(check_fetch(&cluster, &model, 5).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restarted_worker_replays_the_updates_stream() {
    restarted_worker_replays(Backend::OneRedis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restarted_worker_replays_the_updates_stream_on_a_redis_cluster() {
    if Backend::Cluster.runs("restarted_worker_replays_the_updates_stream_on_a_redis_cluster") {
        restarted_worker_replays(Backend::Cluster).await;
    }
}

async fn restarted_worker_replays(backend: Backend) {
    let mut cluster = start(backend, 300, 256, 2).await;
    let mut model = Model::new(&cluster.db);
    for _ in 0..4 {
        let u = model.next_update(7);
        api(&cluster.a).push_epoch(TOKEN, &u).await.unwrap();
        api(&cluster.b).push_epoch(TOKEN, &u).await.unwrap();
    }
    wait_applied(&cluster.a, 4, 3).await;
    cluster.a.stop_workers();
    cluster.a.start_worker().await.unwrap();
    wait_applied(&cluster.a, 4, 3).await;
    assert_eq!(check_fetch(&cluster, &model, 6).await, 4);
}

/// Connection lanes (`--connection-threads`) share the gateway's registration cache: once an
/// epoch is pushed through one lane, a query pinned to it is accepted on every lane at once (a
/// cache per lane held the old registration up to a second and refused it: the soak with lanes
/// on counted 219 refusals). Each request goes on a connection of its own, so the lanes take
/// them in turn, and every lane has read the registration before the push.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_epoch_pushed_through_one_connection_lane_is_accepted_on_every_lane_at_once() {
    const LANES: usize = 3;
    let mut party_options = options(Backend::OneRedis, 3);
    party_options.gateway_args.extend(pirq_e2e::strings(&[
        "--connection-threads",
        "3",
        "--runtime-threads",
        "1",
    ]));
    let cluster = Cluster::start(500, 512, party_options).await.unwrap();
    let mut model = Model::new(&cluster.db);
    let submit_pinned = |epoch: u64, page: u64| {
        let url = cluster.a.url.clone();
        async move {
            let mut request = pirq_e2e::requests::for_page(9, page);
            request.epoch = Some(epoch);
            // A client of its own: a new connection, so the next lane.
            let http = reqwest::Client::new();
            pirq_e2e::fault::post(&http, &url, &request, None)
                .await
                .unwrap()
        }
    };
    for page in 0..2 * LANES as u64 {
        let (status, body, _) = submit_pinned(0, page).await;
        assert!(status == 200 || status == 202, "epoch 0: {status} {body}");
    }
    api(&cluster.a)
        .push_epoch(TOKEN, &model.next_update(1))
        .await
        .unwrap();
    for page in 0..2 * LANES as u64 {
        let (status, body, _) = submit_pinned(1, page).await;
        assert!(
            status == 200 || status == 202,
            "epoch 1 right after its push, request {page}: {status} {body}"
        );
    }
}
