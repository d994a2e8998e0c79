//! `pirq-worker`: open the database, pick a backend, register, then serve windows until
//! Ctrl-C or SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use pirq_queue::consumer::Consumer;
use pirq_queue::digests::Digests;
use pirq_queue::registration::{self as registry, Registration};
use pirq_queue::updates::UpdatesReader;
use pirq_shared::db::{synthetic, PirDb};
use pirq_shared::shard::ShardSpec;
use pirq_worker::backend::ScannerOptions;
use pirq_worker::config::Config;
use pirq_worker::epoch_follower::Follower;
use pirq_worker::health::{Health, Stage};
use pirq_worker::schedule;
use pirq_worker::serve::Worker;
use tokio::sync::watch;

/// Errors end the process with one line (`error: <what>: <why>`), never a backtrace: operators
/// read these, and release builds have no symbols to show anyway.
fn main() -> std::process::ExitCode {
    pirq_party::main(run)
}

async fn run() -> anyhow::Result<()> {
    let config = Config::parse();
    let layout = config.partitions.apply(config.redis.layout()?)?;
    let target = config.redis.target()?;
    // Served from the start: /healthz answers while a large database loads; /readyz says why
    // the worker is not serving yet.
    let health = Health::new(&target)?;
    if let Some(addr) = config.metrics_listen {
        pirq_worker::metrics_export::install(addr, config.shard, health.clone())
            .await
            .with_context(|| format!("starting the metrics endpoint on {addr}"))?;
    }

    let shard = config.shard.unwrap_or(ShardSpec::WHOLE);
    let max_batch_keys = config.max_batch_keys as usize;
    let mut options = ScannerOptions {
        threads: config.threads,
        max_batch_keys,
        epoch_window: config.epoch_window as usize,
        gpu: config.gpu,
        workspaces: config.workspaces as usize,
        shard,
    };
    // The database: a file (mapped, and guarded against changes under the mapping), or the
    // seeded generator's pages made on the GPU (`--synthetic`, benches).
    let (scanner, file_epoch, file_digest, kv, signing) = match (&config.synthetic, &config.db) {
        (Some(source), _) => {
            let scanner = pirq_worker::backend::open_synthetic(config.backend, source, options)
                .context("starting the scanner")?;
            let digest = synthetic::digest(source.page_size, source.num_pages, source.seed);
            (scanner, 0, digest, None, None)
        }
        (None, Some(path)) => {
            let db =
                Arc::new(PirDb::open(path).with_context(|| format!("opening {}", path.display()))?);
            // A file changed under the mapping must not kill the worker silently or change its
            // answers behind its digest.
            pirq_worker::guard::exit_on_sigbus(path).context("installing the SIGBUS handler")?;
            pirq_worker::guard::watch_for_changes(path)
                .with_context(|| format!("watching {}", path.display()))?;
            // A shard file serves its own shard when --shard is not given.
            if let (None, Some(origin)) = (config.shard, db.shard()) {
                options.shard = origin.spec;
            }
            // The pages are checked against the header's digest while the scanner loads them
            // (one more reader of the same pages, on other cores), and the worker serves
            // nothing until the check passed.
            let check = pirq_worker::verify::start(db.clone(), config.skip_verify);
            let loading = std::time::Instant::now();
            let epoch = db.header().epoch;
            let kv = db.kv().map(|kv| kv.info());
            let scanner = pirq_worker::backend::open(config.backend, db.clone(), options)
                .context("starting the scanner")?;
            let load = loading.elapsed();
            let content = check.finish(load)?;
            // The digest of the file's contents at its epoch (SPEC §2.1): recorded by the tool
            // that wrote it; a file from before digests has its content digest, just computed
            // (or computed now, under --skip-verify).
            let digest = db.recorded_digest().unwrap_or_else(|| {
                tracing::info!(db = %path.display(), "the file records no digest; using its content digest");
                content.unwrap_or_else(|| db.content_digest())
            });
            let signing = db.signing().map(|block| block.info());
            (scanner, epoch, digest, kv, signing)
        }
        (None, None) => anyhow::bail!("give the database: --db FILE (or --synthetic)"),
    };
    health.set_stage(Stage::Joining);
    let digests = Digests::new(file_epoch, file_digest);
    let pages = scanner.page_range();
    let shard = options.shard;
    let geometry = scanner.geometry();

    let consumer = config.consumer_name();
    let queue = Arc::new(
        Consumer::new(
            &target,
            layout.clone(),
            consumer.clone(),
            config.block(),
            config.result_ttl,
        )?
        .with_policy(config.policy())
        .with_shard(shard),
    );
    // One partition count per party: a worker of another count would leave partitions unread.
    pirq_queue::partitions::agree_when_reachable(
        &queue.connection(),
        &layout,
        Duration::from_secs(5),
    )
    .await?;
    // Sharded pub/sub (Redis 7.0) carries every status event: an older Redis is refused here
    // rather than failing every result write.
    pirq_queue::requirements::check(&queue.connection()).await?;
    // One shard layout per party, checked before this worker joins a consumer group: a worker
    // of another layout would answer pages that overlap the live workers' shards.
    wait_for_layout(&queue, &layout, shard, &consumer)
        .await
        .with_context(|| format!("serving {}", source_name(&config)))?;
    wait_for_redis(&queue).await;
    match queue.probe().await {
        Ok(version) => tracing::info!(
            redis = %version, xackdel = queue.uses_xackdel(),
            claim_idle_ms = ?config.claim_idle_ms, max_deliveries = config.max_deliveries,
            "redis features probed"
        ),
        Err(e) => tracing::warn!(error = %e, "probing redis features failed; using XACK + XDEL"),
    }

    // Apply every epoch already in the updates stream before serving, on a connection of the
    // follower's own (it blocks in XREAD).
    let (epochs_tx, epochs_rx) = watch::channel(scanner.epoch_window());
    let mut reg = Registration {
        worker_id: consumer.clone(),
        backend: scanner.name(),
        num_pages: geometry.num_pages,
        page_size: geometry.page_size as u32,
        domain_bits: geometry.domain_bits,
        window: scanner.epoch_window(),
        max_batch_keys: config.max_batch_keys,
        started_ms: Registration::now_ms(),
        kv,
        signing,
        shard: (!shard.is_whole()).then_some(shard),
        pages: [pages.start, pages.end],
        db_id: String::new(),
        digests: digests.clone(),
    };
    let conn = queue.connection();
    // The updates stream belongs to the registered database: check before applying it.
    registry::check_prefix(
        &conn,
        &layout,
        &reg,
        file_epoch,
        file_digest,
        config.replace_db,
    )
    .await
    .with_context(|| format!("serving {}", source_name(&config)))?;
    let mut follower = Follower {
        scanner: scanner.clone(),
        // Its reads block up to `--block-ms`, like the consumer's.
        updates: UpdatesReader::new(&target, layout.clone(), config.block())
            .context("connecting the updates follower")?,
        layout: layout.clone(),
        epochs: epochs_tx,
        block: config.block(),
        retain: config.updates_retain,
        digests: digests.clone(),
    };
    let window = follower
        .catch_up()
        .await
        .context("catching up with the updates stream")?;

    reg.window = window;
    registry::register(&conn, &layout, &mut reg, config.heartbeat())
        .await
        .with_context(|| format!("serving {}", source_name(&config)))?;
    // Again with this worker's heartbeat written: of two workers of different layouts that
    // started at once, each now sees the other.
    if let Err(e) = registry::check_shard_layout(&conn, &layout, shard, &consumer).await {
        let _ = registry::deregister(&conn, &layout, &consumer).await;
        return Err(e).with_context(|| format!("serving {}", source_name(&config)));
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    health.set_stage(Stage::Serving);
    {
        // Not ready from the moment the worker starts to stop, whatever the cause.
        let (health, mut stop) = (health.clone(), stop_rx.clone());
        tokio::spawn(async move {
            let _ = stop.wait_for(|s| *s).await;
            health.set_stage(Stage::Stopping);
        });
    }
    // Finishes only when another database replaced this one under the prefix (it then sets
    // `stop_tx`).
    let heartbeat = registry::spawn_heartbeat(
        conn.clone(),
        layout.clone(),
        reg.clone(),
        epochs_rx.clone(),
        config.heartbeat(),
        stop_tx.clone(),
    );
    metrics::gauge!(pirq_shared::metrics::WORKER_EPOCH).set(window.newest as f64);
    tracing::info!(
        worker = %consumer, prefix = %layout, backend = scanner.name(), pages = geometry.num_pages,
        page_size = geometry.page_size, file_epoch, oldest = window.oldest,
        newest = window.newest, shard = %shard, first_page = pages.start, end_page = pages.end,
        group = queue.group(), digest = %digests.newest().1, "pirq-worker serving"
    );

    let follower_stop = stop_tx.clone();
    let following = tokio::spawn(async move {
        let error = follower.run(reg).await;
        // A worker that cannot apply the party's epochs must not answer for them.
        tracing::error!(%error, "stopping: cannot follow the updates stream");
        let _ = follower_stop.send(true);
        error
    });
    tokio::spawn(async move {
        pirq_party::shutdown_signal().await;
        tracing::info!("stopping: finishing the keys in flight");
        let _ = stop_tx.send(true);
    });
    let worker = Worker {
        scanner,
        queue: queue.clone(),
        epochs: epochs_rx,
        digests,
        epoch_wait: config.epoch_wait(),
        block: config.block(),
        health,
    };
    schedule::run(worker, stop_rx).await;

    // The heartbeat task ends by itself only when it found this worker replaced.
    heartbeat.abort();
    let replaced = heartbeat.await.is_ok();
    let follow_error = if following.is_finished() {
        following.await.ok()
    } else {
        following.abort();
        None
    };
    if let Err(e) = registry::deregister(&conn, &layout, &consumer).await {
        tracing::warn!(error = %e, "deregistering failed; the heartbeat will expire");
    }
    tracing::info!("pirq-worker stopped");
    match follow_error {
        Some(e) => Err(e).context("following the updates stream"),
        None if replaced => anyhow::bail!(
            "another database replaced this worker's under prefix {layout} (--replace-db)"
        ),
        None => Ok(()),
    }
}

/// Waits until Redis answers the shard layout check ([`registry::check_shard_layout`]),
/// retrying with backoff; a worker of another layout than the live workers' is an error.
async fn wait_for_layout(
    queue: &Consumer,
    layout: &pirq_shared::layout::Layout,
    shard: ShardSpec,
    consumer: &str,
) -> Result<(), registry::RegistryError> {
    let mut backoff = pirq_party::Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let conn = queue.connection();
    loop {
        match registry::check_shard_layout(&conn, layout, shard, consumer).await {
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

/// What the worker serves, for messages: the file, or the synthetic generator's parameters.
fn source_name(config: &Config) -> String {
    match (&config.synthetic, &config.db) {
        (Some(s), _) => format!("synthetic {}:{}:{}", s.num_pages, s.page_size, s.seed),
        (None, Some(path)) => path.display().to_string(),
        (None, None) => String::new(),
    }
}
