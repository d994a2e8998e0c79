//! SIGINT and SIGTERM for the tools that write files.
//!
//! A signal ends a process without running destructors, so the temporary file a tool is
//! filling (a database can be gigabytes) would stay behind. The tools that write files call
//! [`remove_temp_files_on_signal`] first: a thread waits for either signal, removes every
//! registered temporary file ([`pirq_db::tempfiles`]), says what it removed and that the
//! output was not written, and exits with the shell's status for the signal (128 + its number).

use tokio::signal::unix::{signal, SignalKind};

/// Installs the handlers now (so no signal slips between installation and the work) and
/// leaves a thread waiting on them.
pub fn remove_temp_files_on_signal() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let (mut interrupt, mut terminate) = {
        let _entered = runtime.enter();
        (
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
        )
    };
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let (name, status) = runtime.block_on(async {
                tokio::select! {
                    _ = interrupt.recv() => ("SIGINT", 130),
                    _ = terminate.recv() => ("SIGTERM", 143),
                }
            });
            let removed = pirq_db::tempfiles::remove_all();
            let what = if removed.is_empty() {
                "no unfinished file to remove".to_string()
            } else {
                let names: Vec<String> = removed.iter().map(|p| p.display().to_string()).collect();
                format!("removed the unfinished {}", names.join(", "))
            };
            eprintln!("error: interrupted by {name}: {what}; the output was not written");
            std::process::exit(status);
        })?;
    Ok(())
}
