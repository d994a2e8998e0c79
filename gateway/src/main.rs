//! `pirq-gateway`: parse flags, build the state, serve until Ctrl-C or SIGTERM.

use anyhow::Context;
use clap::Parser;

use pirq_gateway::config::Durability;
use pirq_gateway::durability::Durable;
use pirq_gateway::{router, AppState, Config};
use tokio::sync::watch;

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
    if config.durability == Durability::Fsync {
        let client = config.redis.client()?;
        match Durable::probe(&client, pirq_gateway::durability::STARTUP_PROBE_WITHIN).await {
            Ok(d) => state = state.with_durability(d),
            Err(why) => {
                tracing::error!("{why}");
                anyhow::bail!("{why}");
            }
        }
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let state = state.with_shutdown(stop_rx.clone());
    pirq_gateway::queue_metrics::spawn(
        config.redis.client()?,
        config.redis.layout()?,
        config.redis_timeout(),
    );
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let limits = pirq_gateway::server::ServerLimits::of(&config);
    tracing::info!(
        addr = %listener.local_addr()?,
        prefix = %config.redis.prefix,
        redis = %config.redis.redis_url_redacted(),
        max_connections = limits.max_connections,
        max_waiters = state.waiters.max(),
        "pirq-gateway listening"
    );
    let grace = config.shutdown_grace();
    let server = pirq_gateway::server::serve(listener, router(state), limits, async move {
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
