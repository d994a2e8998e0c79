//! SIGHUP: re-read the files an operator rotates without a restart (the TLS certificate, the
//! query tokens). Each is re-read on its own; one that fails keeps what it had and says why, and
//! the others still reload. Nothing is dropped: open connections and requests carry on.

/// One thing SIGHUP re-reads: its name for the log, and how.
pub struct Reloadable {
    pub what: &'static str,
    pub reload: Box<dyn Fn() -> anyhow::Result<()> + Send + Sync>,
}

/// Re-reads every `reloadable` on each SIGHUP, for as long as the process runs. With nothing to
/// reload SIGHUP is still caught (its default action would end the process) and logged.
pub fn spawn_on_sighup(reloadables: Vec<Reloadable>) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup())?;
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                reload_all(&reloadables);
            }
        });
    }
    #[cfg(not(unix))]
    let _ = reloadables;
    Ok(())
}

/// One round of reloads, as on a SIGHUP.
pub fn reload_all(reloadables: &[Reloadable]) {
    if reloadables.is_empty() {
        tracing::info!("SIGHUP: nothing to reload (no --tls-cert, no --query-tokens)");
    }
    for r in reloadables {
        match (r.reload)() {
            Ok(()) => tracing::info!("SIGHUP: reloaded {}", r.what),
            // An operator's mistake (a half-written file, a key that does not match): the old
            // one stays in use, so this is a warning, not an outage.
            Err(e) => tracing::warn!("SIGHUP: kept the {} in use: {e:#}", r.what),
        }
    }
}
