//! `pirq-gateway`: parse flags, build the state, serve until Ctrl-C or SIGTERM.

use std::time::Duration;

use anyhow::Context;
use clap::Parser;

use pirq_gateway::config::Durability;
use pirq_gateway::durability::Durable;
use pirq_gateway::{router_for, AppState, Config, Routes};
use tokio::sync::watch;

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

/// Errors end the process with one line (`error: <what>: <why>`), never a backtrace: operators
/// read these, and release builds have no symbols to show anyway.
fn main() -> std::process::ExitCode {
    let config = Config::parse();
    pirq_party::main_on_threads(config.runtime_threads, || run(config))
}

async fn run(config: Config) -> anyhow::Result<()> {
    let metrics = pirq_gateway::metrics::install().context("installing the metrics recorder")?;
    let listen = config.listen;
    let mut state = AppState::new(config.clone(), Some(metrics)).context("configuration")?;
    let within = pirq_gateway::durability::STARTUP_PROBE_WITHIN;
    let durable = match config.durability {
        Durability::Ack => None,
        Durability::Fsync => Some(Durable::probe(&config.redis.target()?, within).await),
        Durability::Replica if config.replica_timeout_ms >= config.redis_timeout_ms => {
            Some(Err(format!(
                "--replica-timeout-ms {} must be below --redis-timeout-ms {}: the redis timeout \
                 bounds the whole WAIT",
                config.replica_timeout_ms, config.redis_timeout_ms
            )))
        }
        Durability::Replica => {
            Some(Durable::probe_replica(&config.redis.target()?, &config.layout()?, within).await)
        }
    };
    match durable {
        None => {}
        Some(Ok(d)) => state = state.with_durability(d),
        Some(Err(why)) => {
            tracing::error!("{why}");
            anyhow::bail!("{why}");
        }
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let state = state.with_shutdown(stop_rx.clone());
    pirq_gateway::queue_metrics::spawn(
        &config.redis.target()?,
        config.layout()?,
        config.redis_timeout(),
    );
    check_redis(&config).await?;
    let tls = config.tls()?;
    let mut reloadables = Vec::new();
    if let Some(tls) = tls.clone() {
        reloadables.push(pirq_gateway::reload::Reloadable {
            what: "TLS certificate",
            reload: Box::new(move || tls.reload()),
        });
    }
    if let Some(tokens) = state.access.tokens() {
        tracing::info!(
            tokens = tokens.len(),
            "query tokens loaded (--query-tokens)"
        );
        reloadables.push(pirq_gateway::reload::Reloadable {
            what: "query tokens",
            reload: Box::new(move || tokens.reload()),
        });
    }
    pirq_gateway::reload::spawn_on_sighup(reloadables).context("catching SIGHUP")?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let limits = pirq_gateway::server::ServerLimits::of(&config);
    tracing::info!(
        addr = %listener.local_addr()?,
        %scheme,
        prefix = %config.redis.prefix,
        redis = %config.redis.redis_url_redacted(),
        max_connections = limits.max_connections,
        max_waiters = state.waiters.max(),
        "pirq-gateway listening"
    );
    // The admin listener, when asked for: bound before serving, so a taken port fails the start.
    let admin = match config.admin_listen {
        Some(addr) => {
            let admin = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the admin address {addr}"))?;
            let admin_tls = if config.admin_tls { tls.clone() } else { None };
            let scheme = if admin_tls.is_some() { "https" } else { "http" };
            tracing::info!(addr = %admin.local_addr()?, %scheme, "admin routes and /metrics listening");
            Some((admin, admin_tls))
        }
        None => {
            // A notice, not a fault: fine on loopback or behind a proxy that hides them.
            tracing::info!("admin routes (/v1/admin/epochs) and /metrics are on the public listener; --admin-listen moves them to a private address");
            None
        }
    };
    let grace = config.shutdown_grace();
    let public_routes = if admin.is_some() {
        Routes::Public
    } else {
        Routes::All
    };
    let stopped = |mut stop: watch::Receiver<bool>| async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let public = pirq_gateway::server::serve(
        listener,
        router_for(state.clone(), public_routes),
        limits,
        tls,
        stopped(stop_rx.clone()),
    );
    let admin_stop = stopped(stop_rx.clone());
    let admin = async move {
        if let Some((listener, tls)) = admin {
            let app = router_for(state, Routes::Admin);
            pirq_gateway::server::serve(listener, app, limits, tls, admin_stop).await;
        }
    };
    let server = async move { tokio::join!(public, admin) };
    tokio::spawn(async move {
        pirq_party::shutdown_signal().await;
        // Waiters answer now and SSE streams end; new connections are refused.
        tracing::info!("stopping: draining open requests");
        let _ = stop_tx.send(true);
    });
    let mut stopping = stop_rx;
    let deadline = async move {
        let _ = stopping.wait_for(|s| *s).await;
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        _ = server => {}
        _ = deadline => tracing::warn!(?grace, "open requests still running after the grace time; closing them"),
    }
    tracing::info!("pirq-gateway stopped");
    Ok(())
}
