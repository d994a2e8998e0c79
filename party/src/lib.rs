//! `pirq-party`: what the two servers of a party (`pirq-gateway`, `pirq-worker`) share as
//! processes, written once: `main` (logging, runtime, exit status), the `--redis`/`--prefix`
//! flags and the Redis client and key layout they name, the shutdown signal, the retry back-off,
//! and the Prometheus recorder with the catalog's buckets.
//!
//! The protocol they speak through Redis is `pirq-queue`; this crate is only process plumbing.

pub mod backoff;
pub mod metrics;
pub mod partitions;
pub mod redis_args;

pub use backoff::Backoff;
pub use partitions::PartitionArgs;
pub use redis_args::RedisArgs;

/// A server's whole `main`: logging set up, then `run` on a multi-threaded Tokio runtime (what
/// `#[tokio::main]` builds), and its result as the exit status ([`exit_code`]).
pub fn main<F>(run: impl FnOnce() -> F) -> std::process::ExitCode
where
    F: std::future::Future<Output = anyhow::Result<()>>,
{
    main_on_threads(0, run)
}

/// [`main`] with `threads` runtime threads (0: one per core the process may run on).
pub fn main_on_threads<F>(threads: usize, run: impl FnOnce() -> F) -> std::process::ExitCode
where
    F: std::future::Future<Output = anyhow::Result<()>>,
{
    init_tracing();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if threads > 0 {
        runtime.worker_threads(threads);
    }
    match runtime.build() {
        Ok(runtime) => exit_code(runtime.block_on(run())),
        Err(e) => exit_code(Err(
            anyhow::Error::new(e).context("starting the async runtime")
        )),
    }
}

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

/// Logs to standard output (tracing-subscriber's default writer), at `RUST_LOG` (default
/// `info`); colours only when it is a terminal, so
/// redirected logs (files, journald, `docker logs`) carry no ANSI escape codes.
pub fn init_tracing() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    tracing_subscriber::fmt()
        .with_ansi(std::io::stdout().is_terminal())
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
