//! The worker's life as one library call, [`run`]: start-up step by step (one function each, in
//! the order they run), the serve loop, and the way out. `main` only parses the flags and hands
//! in the shutdown signal; a test may start a worker in process and stop it through its own
//! `shutdown` future.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use pirq_db::PirDb;
use pirq_queue::consumer::Consumer;
use pirq_queue::digests::Digests;
use pirq_queue::registration::{self as registry, Registration};
use pirq_queue::updates::UpdatesReader;
use pirq_queue::RedisTarget;
use pirq_scan::Scanner;
use pirq_shared::digest::Digest;
use pirq_shared::layout::Layout;
use pirq_shared::shard::ShardSpec;
use pirq_shared::synthetic;
use pirq_shared::wire::EpochRange;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::backend::ScannerOptions;
use crate::config::{Config, TableSource};
use crate::epoch_follower::{Follower, UpdatesError};
use crate::health::{Health, Stage};
use crate::schedule;
use crate::serve::Worker;
use crate::share::ScanShare;

/// Opens every table's database, joins the party with each, serves them until `shutdown`
/// completes (or a table is replaced, or cannot follow its updates stream), then leaves. The
/// error is what `main` prints on its one line.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let party = config.partitions.apply(config.redis.layout()?)?;
    let target = config.redis.target()?;
    let sources = config.table_sources().map_err(anyhow::Error::msg)?;
    let health = serve_health(&config, &target).await?;
    let backend = pick_backend(&config, &sources)?;
    let mut opened = Vec::new();
    for (name, source) in &sources {
        let layout = party.table(name)?;
        let source = open_source(&config, backend, source)
            .with_context(|| format!("table {name}: {}", source_name(source)))?;
        opened.push((layout, source));
    }
    health.set_stage(Stage::Joining);
    let consumer = config.consumer_name();
    let mut tables = Vec::new();
    for ((layout, source), (name, from)) in opened.into_iter().zip(&sources) {
        let table = join_table(&config, &target, layout, source, &consumer)
            .await
            .with_context(|| match name.as_str() {
                pirq_shared::layout::DEFAULT_TABLE => format!("serving {}", source_name(from)),
                _ => format!("serving table {name} ({})", source_name(from)),
            })?;
        tables.push(table);
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    health.set_stage(Stage::Serving);
    mark_stopping(&health, stop_rx.clone());
    let share = Arc::new(ScanShare::new(tables.len()));
    let mut serving = tokio::task::JoinSet::new();
    for (index, table) in tables.into_iter().enumerate() {
        let context = Served {
            config: config.clone(),
            health: health.clone(),
            share: share.clone(),
            index,
            consumer: consumer.clone(),
        };
        serving.spawn(serve_table(
            context,
            table,
            stop_tx.clone(),
            stop_rx.clone(),
        ));
    }
    stop_on(shutdown, stop_tx);
    let mut result = Ok(());
    while let Some(done) = serving.join_next().await {
        let outcome = done
            .context("a table's serve loop panicked")
            .and_then(|r| r);
        if result.is_ok() {
            result = outcome;
        }
    }
    tracing::info!("pirq-worker stopped");
    result
}

/// A table joined to the party, ready to serve: its keys, its database, its queue, its
/// registration and its updates follower (caught up).
struct Joined {
    layout: Layout,
    source: Source,
    queue: Arc<Consumer>,
    digests: Digests,
    reg: Registration,
    follower: Follower,
    epochs: watch::Receiver<EpochRange>,
    window: EpochRange,
}

/// What every table's serve loop shares.
struct Served {
    config: Config,
    health: Arc<Health>,
    share: Arc<ScanShare>,
    index: usize,
    consumer: String,
}

/// The backend every table loads on: `--backend`, unless several tables do not fit on the GPU
/// together ([`crate::backend::for_tables`]).
fn pick_backend(
    config: &Config,
    sources: &[(String, TableSource)],
) -> anyhow::Result<crate::config::Backend> {
    let options = scanner_options(config);
    let mut shapes = Vec::new();
    for (name, source) in sources {
        let (page_size, total_pages, shard) = match source {
            TableSource::Synthetic(s) => (s.page_size as usize, s.num_pages, options.shard),
            TableSource::File(path) => {
                let db = PirDb::open(path)
                    .with_context(|| format!("table {name}: opening {}", path.display()))?;
                let shard = match (config.shard, db.shard()) {
                    (None, Some(origin)) => origin.spec,
                    _ => options.shard,
                };
                (db.page_size(), db.total_pages(), shard)
            }
        };
        let range = shard
            .range(total_pages)
            .map_err(|e| anyhow::anyhow!("table {name}: --shard {shard}: {e}"))?;
        shapes.push(crate::backend::TableShape {
            name: name.clone(),
            page_size,
            total_pages,
            range,
        });
    }
    crate::backend::for_tables(config.backend, &shapes, &options)
}

/// Joins the party with one table: its queue and consumer group, its checks against what is
/// registered under its keys, its updates applied, its registration written.
async fn join_table(
    config: &Config,
    target: &RedisTarget,
    layout: Layout,
    source: Source,
    consumer: &str,
) -> anyhow::Result<Joined> {
    let digests = Digests::new(source.file_epoch, source.file_digest);
    let queue = connect_queue(config, target, &layout, source.shard, consumer)?;
    check_party(config, &queue, &layout, source.shard, consumer).await?;
    let (epochs_tx, epochs) = watch::channel(source.scanner.epoch_window());
    let mut reg = registration(config, &source, consumer, &digests);
    // The updates stream belongs to the registered database: check before applying it.
    queue
        .registry()
        .check_prefix(
            &reg,
            source.file_epoch,
            source.file_digest,
            config.replace_db,
        )
        .await?;
    let mut follower = follower(config, target, &layout, &source, epochs_tx, &digests)?;
    let window = follower
        .catch_up()
        .await
        .context("catching up with the updates stream")?;
    reg.window = window;
    join(config, &queue, &mut reg, source.shard).await?;
    Ok(Joined {
        layout,
        source,
        queue,
        digests,
        reg,
        follower,
        epochs,
        window,
    })
}

/// Serves one table until `stop`: its heartbeat, its updates follower and its scheduling loop,
/// which steps the table's rotation while it holds the worker's scanner ([`crate::share`]).
/// A table replaced under its keys, or unable to follow its updates, stops the whole worker.
async fn serve_table(
    served: Served,
    table: Joined,
    stop_tx: watch::Sender<bool>,
    stop_rx: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let Joined {
        layout,
        source,
        queue,
        digests,
        reg,
        follower,
        epochs,
        window,
    } = table;
    // Finishes only when another database replaced this one under the table's keys (it then
    // sets `stop_tx`).
    let heartbeat = queue.registry().spawn_heartbeat(
        reg.clone(),
        epochs.clone(),
        served.config.heartbeat(),
        stop_tx.clone(),
    );
    announce(&source, &queue, &layout, &served.consumer, window, &digests);
    let following = spawn_follower(follower, reg, stop_tx);
    let worker = Worker {
        scanner: source.scanner,
        queue: queue.clone(),
        epochs,
        digests,
        epoch_wait: served.config.epoch_wait(),
        block: served.config.block(),
        health: served.health,
        share: served.share,
        table_index: served.index,
    };
    schedule::run(worker, stop_rx).await;
    leave(heartbeat, following, &queue, &layout, &served.consumer).await
}

/// `/healthz` and `/readyz` (with `/metrics`), served from the start: `/healthz` answers while
/// a large database loads, and `/readyz` says why the worker is not serving yet.
async fn serve_health(config: &Config, target: &RedisTarget) -> anyhow::Result<Arc<Health>> {
    let health = Health::new(target)?;
    if let Some(addr) = config.metrics_listen {
        crate::metrics_export::install(addr, config.shard, health.clone())
            .await
            .with_context(|| format!("starting the metrics endpoint on {addr}"))?;
    }
    Ok(health)
}

/// One table's database, opened and checked, with what its registration says of it.
struct Source {
    scanner: Arc<dyn Scanner>,
    /// The file's epoch (0 for synthetic pages) and the digest of its contents at that epoch.
    file_epoch: u64,
    file_digest: Digest,
    kv: Option<pirq_shared::kv::KvInfo>,
    signing: Option<pirq_shared::signing::SigningInfo>,
    /// The shard served: `--shard`, else a shard file's own, else the whole database.
    shard: ShardSpec,
}

/// The scanners' settings, from the flags (every table's the same).
fn scanner_options(config: &Config) -> ScannerOptions {
    ScannerOptions {
        threads: config.threads,
        max_batch_keys: config.max_batch_keys as usize,
        epoch_window: config.epoch_window as usize,
        gpu: config.gpu,
        workspaces: config.workspaces as usize,
        shard: config.shard.unwrap_or(ShardSpec::WHOLE),
    }
}

/// One table's database: a file (mapped, and guarded against changes under the mapping), or
/// the seeded generator's pages made on the GPU (`--synthetic`, benches).
fn open_source(
    config: &Config,
    backend: crate::config::Backend,
    source: &TableSource,
) -> anyhow::Result<Source> {
    let options = scanner_options(config);
    match source {
        TableSource::Synthetic(source) => {
            let scanner = crate::backend::open_synthetic(backend, source, options)
                .context("starting the scanner")?;
            let digest = synthetic::digest(source.page_size, source.num_pages, source.seed);
            Ok(Source {
                scanner,
                file_epoch: 0,
                file_digest: digest,
                kv: None,
                signing: None,
                shard: options.shard,
            })
        }
        TableSource::File(path) => open_file(config, backend, path, options),
    }
}

/// A `.pirdb` file, mapped: guarded first (a file changed under the mapping must not kill the
/// worker silently or change its answers behind its digest), then loaded by the scanner while
/// its pages are checked against the header's digest, so nothing is served before the check
/// passed.
fn open_file(
    config: &Config,
    backend: crate::config::Backend,
    path: &std::path::Path,
    mut options: ScannerOptions,
) -> anyhow::Result<Source> {
    let db = Arc::new(PirDb::open(path).with_context(|| format!("opening {}", path.display()))?);
    crate::guard::exit_on_sigbus(path).context("installing the SIGBUS handler")?;
    crate::guard::watch_for_changes(path)
        .with_context(|| format!("watching {}", path.display()))?;
    // A shard file serves its own shard when --shard is not given.
    if let (None, Some(origin)) = (config.shard, db.shard()) {
        options.shard = origin.spec;
    }
    // The check is one more reader of the same pages, on other cores.
    let check = crate::verify::start(db.clone(), config.skip_verify);
    let loading = std::time::Instant::now();
    let scanner =
        crate::backend::open(backend, db.clone(), options).context("starting the scanner")?;
    let content = check.finish(loading.elapsed())?;
    // The digest of the file's contents at its epoch (SPEC §2.1): recorded by the tool that
    // wrote it; a file from before digests has its content digest, just computed (or computed
    // now, under --skip-verify).
    let digest = db.recorded_digest().unwrap_or_else(|| {
        tracing::info!(db = %path.display(), "the file records no digest; using its content digest");
        content.unwrap_or_else(|| db.content_digest())
    });
    Ok(Source {
        scanner,
        file_epoch: db.header().epoch,
        file_digest: digest,
        kv: db.kv().map(|kv| kv.info()),
        signing: db.signing().map(|block| block.info()),
        shard: options.shard,
    })
}

/// The consumer of the party's job streams, under this worker's name, reading this shard's jobs.
fn connect_queue(
    config: &Config,
    target: &RedisTarget,
    layout: &Layout,
    shard: ShardSpec,
    consumer: &str,
) -> anyhow::Result<Arc<Consumer>> {
    let queue = Consumer::new(
        target,
        layout.clone(),
        consumer.to_string(),
        config.block(),
        config.result_ttl,
    )?
    .with_policy(config.policy())
    .with_shard(shard);
    Ok(Arc::new(queue))
}

/// The party's Redis, checked before this worker joins it: one partition count per party (a
/// worker of another count would leave partitions unread), a Redis with sharded pub/sub (7.0:
/// every status event; an older one is refused here rather than failing every result write),
/// one shard layout per party (a worker of another layout would answer pages that overlap the
/// live workers' shards), and the consumer group in place. Redis not up yet is waited for.
async fn check_party(
    config: &Config,
    queue: &Consumer,
    layout: &Layout,
    shard: ShardSpec,
    consumer: &str,
) -> anyhow::Result<()> {
    pirq_queue::partitions::agree_when_reachable(
        &queue.connection(),
        layout,
        Duration::from_secs(5),
    )
    .await?;
    pirq_queue::requirements::check(&queue.connection()).await?;
    wait_for_layout(queue, shard, consumer).await?;
    wait_for_redis(queue).await;
    match queue.probe().await {
        Ok(version) => tracing::info!(
            redis = %version, xackdel = queue.uses_xackdel(),
            claim_idle_ms = ?config.claim_idle_ms, max_deliveries = config.max_deliveries,
            "redis features probed"
        ),
        Err(e) => tracing::warn!(error = %e, "probing redis features failed; using XACK + XDEL"),
    }
    Ok(())
}

/// What this worker registers: its database, its shard and page range, its epoch window (set
/// again once the follower caught up), for the gateway's checks and the other workers'.
fn registration(
    config: &Config,
    source: &Source,
    consumer: &str,
    digests: &Digests,
) -> Registration {
    let geometry = source.scanner.geometry();
    let pages = source.scanner.page_range();
    Registration {
        worker_id: consumer.to_string(),
        backend: source.scanner.name(),
        num_pages: geometry.num_pages,
        page_size: geometry.page_size as u32,
        domain_bits: geometry.domain_bits,
        window: source.scanner.epoch_window(),
        max_batch_keys: config.max_batch_keys,
        started_ms: pirq_shared::clock::unix_ms(),
        kv: source.kv.clone(),
        signing: source.signing.clone(),
        shard: (!source.shard.is_whole()).then_some(source.shard),
        pages: [pages.start, pages.end],
        db_id: String::new(),
        digests: digests.clone(),
    }
}

/// The updates follower: applies every epoch already in the updates stream before serving, then
/// follows it, on a connection of its own (it blocks in `XREAD` up to `--block-ms`, like the
/// consumer's reads).
fn follower(
    config: &Config,
    target: &RedisTarget,
    layout: &Layout,
    source: &Source,
    epochs: watch::Sender<EpochRange>,
    digests: &Digests,
) -> anyhow::Result<Follower> {
    Ok(Follower {
        scanner: source.scanner.clone(),
        updates: UpdatesReader::new(target, layout.clone(), config.block())
            .context("connecting the updates follower")?,
        layout: layout.clone(),
        epochs,
        block: config.block(),
        retain: config.updates_retain,
        digests: digests.clone(),
    })
}

/// Registers the worker, then checks the shard layout again with its heartbeat written: of two
/// workers of different layouts that started at once, each now sees the other (and the later
/// one leaves).
async fn join(
    config: &Config,
    queue: &Consumer,
    reg: &mut Registration,
    shard: ShardSpec,
) -> anyhow::Result<()> {
    let registry = queue.registry();
    registry.register(reg, config.heartbeat()).await?;
    let consumer = &reg.worker_id;
    if let Err(e) = registry.check_shard_layout(shard, consumer).await {
        let _ = registry.deregister(consumer).await;
        return Err(e.into());
    }
    Ok(())
}

/// Not ready (`/readyz`) from the moment the worker starts to stop, whatever the cause.
fn mark_stopping(health: &Arc<Health>, mut stop: watch::Receiver<bool>) {
    let health = health.clone();
    tokio::spawn(async move {
        let _ = stop.wait_for(|s| *s).await;
        health.set_stage(Stage::Stopping);
    });
}

/// The start-up's last line, `pirq-worker serving`, with what operators check first (and the
/// table's epoch gauge, and its counters registered at zero).
fn announce(
    source: &Source,
    queue: &Consumer,
    layout: &Layout,
    consumer: &str,
    window: EpochRange,
    digests: &Digests,
) {
    let geometry = source.scanner.geometry();
    let pages = source.scanner.page_range();
    crate::epoch_follower::set_epoch_gauge(layout, window);
    pirq_shared::metrics::zero_table_counters(
        pirq_shared::metrics::Emitter::Worker,
        layout.table_name(),
    );
    tracing::info!(
        worker = %consumer, prefix = %layout.prefix(), table = layout.table_name(),
        backend = source.scanner.name(),
        pages = geometry.num_pages, page_size = geometry.page_size,
        file_epoch = source.file_epoch, oldest = window.oldest, newest = window.newest,
        shard = %source.shard, first_page = pages.start, end_page = pages.end,
        group = queue.group(), digest = %digests.newest().1, "pirq-worker serving"
    );
}

/// Follows the updates stream while the worker serves; a worker that cannot apply the party's
/// epochs must not answer for them, so its failure stops the worker.
fn spawn_follower(
    follower: Follower,
    reg: Registration,
    stop: watch::Sender<bool>,
) -> JoinHandle<UpdatesError> {
    tokio::spawn(async move {
        let error = follower.run(reg).await;
        tracing::error!(%error, "stopping: cannot follow the updates stream");
        let _ = stop.send(true);
        error
    })
}

/// Stops the serve loop when the caller's `shutdown` completes (Ctrl-C or SIGTERM in `main`);
/// the loop then finishes the keys in flight.
fn stop_on(shutdown: impl Future<Output = ()> + Send + 'static, stop: watch::Sender<bool>) {
    tokio::spawn(async move {
        shutdown.await;
        tracing::info!("stopping: finishing the keys in flight");
        let _ = stop.send(true);
    });
}

/// The way out once the serve loop ended: the heartbeat and follower stopped, the registration
/// removed (else it expires with the heartbeat), and why the worker stopped as the result: the
/// follower's error, a replacing database, or none.
async fn leave(
    heartbeat: JoinHandle<()>,
    following: JoinHandle<UpdatesError>,
    queue: &Consumer,
    layout: &Layout,
    consumer: &str,
) -> anyhow::Result<()> {
    // The heartbeat task ends by itself only when it found this worker replaced.
    heartbeat.abort();
    let replaced = heartbeat.await.is_ok();
    let follow_error = if following.is_finished() {
        following.await.ok()
    } else {
        following.abort();
        None
    };
    if let Err(e) = queue.registry().deregister(consumer).await {
        tracing::warn!(error = %e, "deregistering failed; the heartbeat will expire");
    }
    match follow_error {
        Some(e) => Err(e).context("following the updates stream"),
        None if replaced => anyhow::bail!(
            "another database replaced this worker's under prefix {layout} (--replace-db)"
        ),
        None => Ok(()),
    }
}

/// Waits until Redis answers the shard layout check ([`registry::Registry::check_shard_layout`]),
/// retrying with backoff; a worker of another layout than the live workers' is an error.
async fn wait_for_layout(
    queue: &Consumer,
    shard: ShardSpec,
    consumer: &str,
) -> Result<(), registry::RegistryError> {
    let mut backoff = pirq_party::Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let registry = queue.registry();
    loop {
        match registry.check_shard_layout(shard, consumer).await {
            Err(registry::RegistryError::Redis(e)) => {
                tracing::warn!(error = %e, "redis not ready; retrying");
                backoff.wait().await;
            }
            other => return other,
        }
    }
}

/// Waits until Redis answers and the consumer group exists, retrying with backoff.
async fn wait_for_redis(queue: &Consumer) {
    let mut backoff = pirq_party::Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    loop {
        match queue.ensure_group().await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, "redis not ready; retrying");
                backoff.wait().await;
            }
        }
    }
}

/// What a table is served from, for messages: the file, or the synthetic generator's
/// parameters.
fn source_name(source: &TableSource) -> String {
    match source {
        TableSource::Synthetic(s) => {
            format!("synthetic {}:{}:{}", s.num_pages, s.page_size, s.seed)
        }
        TableSource::File(path) => path.display().to_string(),
    }
}
