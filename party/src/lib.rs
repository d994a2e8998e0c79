//! `pirq-party`: what the two servers of a party (`pirq-gateway`, `pirq-worker`) share as
//! processes, written once: the `--redis`/`--prefix` flags, the exit status, logging, the shutdown signal, the retry back-off, and the Prometheus
//! recorder with the catalog's buckets.
//!
//! The protocol they speak through Redis is `pirq-queue`; this crate is only process plumbing.

pub mod backoff;
pub mod metrics;
pub mod redis_args;

pub use backoff::Backoff;
pub use redis_args::RedisArgs;

/// The exit status of a server's `main`: the error, if any, on one line of stderr (the whole
/// chain, `{:#}`) and a failure status; no panic, no backtrace.
pub fn exit_code(result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Logs to stderr, at `RUST_LOG` (default `info`).
pub fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
}

/// Resolves at the first Ctrl-C or SIGTERM (what `docker stop` and systemd send).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
