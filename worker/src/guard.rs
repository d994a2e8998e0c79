//! Guards of the served `.pirdb` file: a worker that loses its database says so and exits.
//!
//! The worker maps its file. pirq's own tools never write a served file in place: they write a
//! temporary file and rename it over the path ([`pirq_db::write_atomically`]), so the
//! worker keeps the old inode and goes on answering from it, consistent with the digest it
//! advertises. Something else (`cp`, `truncate`, an editor) can still rewrite the inode under
//! the mapping: a truncated file makes the next read of a page past the new end raise SIGBUS,
//! which kills a process silently, and a rewritten one would change the answers behind the
//! digest. So:
//!
//! - [`watch_for_changes`] watches the inode with inotify and exits with one clear line as soon
//!   as it is written or truncated (before any pass reads a changed page, in practice);
//! - [`exit_on_sigbus`] turns a fault that wins that race into the same line and a non-zero
//!   exit instead of a silent death.
//!
//! Both are hand-written over `libc` (a few calls each): the signal crates refuse to hook SIGBUS
//! (signal-hook forbids it) or are much larger than the two system calls needed here.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

/// Exit status of a worker whose database file changed under it.
pub const EXIT_DB_CHANGED: i32 = 3;

/// The line written by the SIGBUS handler, formatted before the handler is installed (a signal
/// handler may not allocate).
static SIGBUS_LINE: OnceLock<Vec<u8>> = OnceLock::new();

fn line(path: &Path) -> String {
    format!(
        "the database file {} was truncated or rewritten under the worker; exiting (pirq's tools \
         replace a served file by renaming a new one over it; restart the worker to serve the \
         new contents)",
        path.display()
    )
}

extern "C" fn on_sigbus(_: libc::c_int) {
    if let Some(line) = SIGBUS_LINE.get() {
        // SAFETY: write(2) and _exit(2) are async-signal-safe; the buffer is never freed.
        unsafe {
            libc::write(2, line.as_ptr().cast(), line.len());
        }
    }
    // SAFETY: as above.
    unsafe { libc::_exit(EXIT_DB_CHANGED) }
}

/// Installs a SIGBUS handler that writes one line naming `path` to stderr and exits with
/// [`EXIT_DB_CHANGED`].
pub fn exit_on_sigbus(path: &Path) -> std::io::Result<()> {
    let _ = SIGBUS_LINE.set(format!("ERROR pirq_worker: {}\n", line(path)).into_bytes());
    // SAFETY: a zeroed sigaction is valid (empty mask, no flags); the handler only calls
    // async-signal-safe functions.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Watches the file's inode (not its name: a rename over the path is fine) from a thread of its
/// own; on a write, a truncation or any content change, logs one line and exits with
/// [`EXIT_DB_CHANGED`].
pub fn watch_for_changes(path: &Path) -> std::io::Result<()> {
    let c_path = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: plain system calls; the descriptor is owned by the thread below.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mask = libc::IN_MODIFY | libc::IN_CLOSE_WRITE;
    // SAFETY: `c_path` is a valid C string for the duration of the call.
    if unsafe { libc::inotify_add_watch(fd, c_path.as_ptr(), mask) } < 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    let message = line(path);
    std::thread::Builder::new()
        .name("db-watch".into())
        .spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                // SAFETY: reading into a buffer of the given length.
                let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0
                    && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
                {
                    continue;
                }
                if n <= 0 {
                    return; // the watch is gone; the SIGBUS handler still guards
                }
                // Any event on the watched inode is a change to the served contents.
                tracing::error!("{message}");
                std::process::exit(EXIT_DB_CHANGED);
            }
        })?;
    Ok(())
}
