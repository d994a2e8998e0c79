//! The gateway's life as one library call, [`serve`]: start-up step by step (one function each,
//! in the order they run), the listeners, and the drain on the way out. `main` only parses the
//! flags and hands in the shutdown signal; a test may start a gateway in process and stop it
//! through its own `shutdown` future.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::Durability;
use crate::durability::Durable;
use crate::lanes::Lanes;
use crate::reload::Reloadable;
use crate::server::{Served, ServerLimits};
use crate::tls::Tls;
use crate::{router_for, AppState, Config, Routes};

/// Checks the party, binds the listeners, serves until `shutdown` completes, then drains open
/// requests for up to `--shutdown-grace-ms`. The error is what `main` prints on its one line.
pub async fn serve(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let metrics = crate::metrics::install().context("installing the metrics recorder")?;
    let state = AppState::new(config.clone(), Some(metrics)).context("configuration")?;
    let state = check_durability(&config, state).await?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let state = state.with_shutdown(stop_rx.clone());
    crate::queue_metrics::spawn(
        &config.redis.target()?,
        config.layout()?,
        config.redis_timeout(),
    );
    check_redis(&config).await?;
    let tls = config.tls()?;
    reload_on_sighup(&state, tls.clone())?;
    let limits = ServerLimits::of(&config);
    let public = bind_public(&config, &state, limits, tls.is_some()).await?;
    let admin = bind_admin(&config, &tls).await?;
    let public_routes = if admin.is_some() {
        Routes::Public
    } else {
        Routes::All
    };
    let public_app = match config.threads().lanes {
        0 => Served::Here(router_for(state.clone(), public_routes)),
        n => Served::Lanes(Arc::new(Lanes::start(n, &state, |lane| {
            router_for(lane, public_routes)
        })?)),
    };
    let public = crate::server::serve(public, public_app, limits, tls, stopped(stop_rx.clone()));
    let admin_stop = stopped(stop_rx.clone());
    let admin = async move {
        if let Some((listener, tls)) = admin {
            let app = router_for(state, Routes::Admin);
            crate::server::serve(listener, Served::Here(app), limits, tls, admin_stop).await;
        }
    };
    stop_on(shutdown, stop_tx);
    drain(
        async move { tokio::join!(public, admin) },
        stop_rx,
        config.shutdown_grace(),
    )
    .await;
    tracing::info!("pirq-gateway stopped");
    Ok(())
}

/// `--durability`: the Redis promise asked for (`fsync`, `replica`) probed before serving, so a
/// Redis that cannot keep it refuses the start (logged, and the error) instead of every write.
async fn check_durability(config: &Config, state: AppState) -> anyhow::Result<AppState> {
    let within = crate::durability::STARTUP_PROBE_WITHIN;
    let durable = match config.durability {
        Durability::Ack => return Ok(state),
        Durability::Fsync => Durable::probe(&config.redis.target()?, within).await,
        Durability::Replica if config.replica_timeout_ms >= config.redis_timeout_ms => {
            Err(format!(
                "--replica-timeout-ms {} must be below --redis-timeout-ms {}: the redis timeout \
                 bounds the whole WAIT",
                config.replica_timeout_ms, config.redis_timeout_ms
            ))
        }
        Durability::Replica => {
            Durable::probe_replica(&config.redis.target()?, &config.layout()?, within).await
        }
    };
    match durable {
        Ok(d) => Ok(state.with_durability(d)),
        Err(why) => {
            tracing::error!("{why}");
            anyhow::bail!("{why}");
        }
    }
}

/// The party's Redis, checked before serving: one partition count per party (`--partitions`,
/// recorded in Redis: a gateway of another count would queue requests where no worker reads
/// and look for records where none are), and a Redis with sharded pub/sub (7.0: every status
/// event; `pirq_queue::requirements`). With Redis up the checks are made before serving, and a
/// failed one refuses the start; a Redis not reachable yet is checked in the background once it
/// is, and a failed check then stops the gateway (exit status 1) with the same message.
async fn check_redis(config: &Config) -> anyhow::Result<()> {
    use pirq_queue::partitions::{agree, agree_when_reachable, Disagreement};
    let layout = config.layout()?;
    let conn = config.redis.target()?.connection(config.redis_timeout())?;
    match agree(&conn, &layout, config.redis_timeout()).await {
        Ok(()) => Ok(pirq_queue::requirements::check(&conn).await?),
        Err(Disagreement::Queue(e)) if e.is_transient() => {
            tokio::spawn(async move {
                let checked = async {
                    agree_when_reachable(&conn, &layout, Duration::from_secs(5)).await?;
                    pirq_queue::requirements::check(&conn).await?;
                    anyhow::Ok(())
                };
                if let Err(e) = checked.await {
                    tracing::error!("{e}");
                    std::process::exit(1);
                }
            });
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// What SIGHUP re-reads: the TLS certificate and the query tokens (`--query-tokens`), so both
/// rotate without a restart.
fn reload_on_sighup(state: &AppState, tls: Option<Tls>) -> anyhow::Result<()> {
    let mut reloadables = Vec::new();
    if let Some(tls) = tls {
        reloadables.push(Reloadable {
            what: "TLS certificate",
            reload: Box::new(move || tls.reload()),
        });
    }
    if let Some(tokens) = state.access.tokens() {
        tracing::info!(
            tokens = tokens.len(),
            "query tokens loaded (--query-tokens)"
        );
        reloadables.push(Reloadable {
            what: "query tokens",
            reload: Box::new(move || tokens.reload()),
        });
    }
    crate::reload::spawn_on_sighup(reloadables).context("catching SIGHUP")
}

/// The public listener, bound (a taken port fails the start) and announced with the line
/// operators and tests wait for, `pirq-gateway listening`.
async fn bind_public(
    config: &Config,
    state: &AppState,
    limits: ServerLimits,
    tls: bool,
) -> anyhow::Result<TcpListener> {
    let listen = config.listen;
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let scheme = if tls { "https" } else { "http" };
    tracing::info!(
        addr = %listener.local_addr()?,
        %scheme,
        prefix = %config.redis.prefix,
        redis = %config.redis.redis_url_redacted(),
        max_connections = limits.max_connections,
        max_waiters = state.waiters.max(),
        connection_lanes = config.threads().lanes,
        "pirq-gateway listening"
    );
    Ok(listener)
}

/// The admin listener (`--admin-listen`), when asked for: bound before serving, so a taken port
/// fails the start; with TLS only under `--admin-tls`.
async fn bind_admin(
    config: &Config,
    tls: &Option<Tls>,
) -> anyhow::Result<Option<(TcpListener, Option<Tls>)>> {
    let Some(addr) = config.admin_listen else {
        // A notice, not a fault: fine on loopback or behind a proxy that hides them.
        tracing::info!("admin routes (/v1/admin/epochs) and /metrics are on the public listener; --admin-listen moves them to a private address");
        return Ok(None);
    };
    let admin = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the admin address {addr}"))?;
    let admin_tls = if config.admin_tls { tls.clone() } else { None };
    let scheme = if admin_tls.is_some() { "https" } else { "http" };
    tracing::info!(addr = %admin.local_addr()?, %scheme, "admin routes and /metrics listening");
    Ok(Some((admin, admin_tls)))
}

/// Completes once the stop is set: the listeners' shutdown futures.
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Sets the stop when the caller's `shutdown` completes (Ctrl-C or SIGTERM in `main`): waiters
/// answer now and SSE streams end; new connections are refused.
fn stop_on(shutdown: impl Future<Output = ()> + Send + 'static, stop: watch::Sender<bool>) {
    tokio::spawn(async move {
        shutdown.await;
        tracing::info!("stopping: draining open requests");
        let _ = stop.send(true);
    });
}

/// Runs the listeners until they end, or until `grace` after the stop was set: requests still
/// open then are closed (a warning says so), so a stuck client cannot hold the process.
async fn drain(server: impl Future, stop: watch::Receiver<bool>, grace: Duration) {
    let deadline = async move {
        stopped(stop).await;
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        _ = server => {}
        _ = deadline => tracing::warn!(?grace, "open requests still running after the grace time; closing them"),
    }
}
