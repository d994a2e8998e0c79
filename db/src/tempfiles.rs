//! Temporary files that must not outlive an interrupted tool.
//!
//! Every tool writes its output into a temporary file beside the target and renames it into
//! place at the end ([`crate::write_atomically`], [`crate::MappedWriter`]). A failure
//! drops the temporary file, but SIGINT or SIGTERM ends the process without running any
//! destructor: a killed `pirq db gen` would leave gigabytes behind. So each temporary file is
//! registered here while it exists, and the tool's signal handler ([`remove_all`], called by
//! the command-line tool when SIGINT or SIGTERM arrives) removes whatever is registered before
//! the process exits.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A set of temporary files; the process has one ([`register`], [`remove_all`]).
pub struct Registry(Mutex<Vec<PathBuf>>);

static PROCESS: Registry = Registry::new();

impl Registry {
    pub const fn new() -> Registry {
        Registry(Mutex::new(Vec::new()))
    }

    fn live(&self) -> std::sync::MutexGuard<'_, Vec<PathBuf>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `path` until the returned [`Registration`] is dropped.
    pub fn register(&'static self, path: &Path) -> Registration {
        self.live().push(path.to_path_buf());
        Registration {
            registry: self,
            path: path.to_path_buf(),
        }
    }

    /// Removes every registered file and returns the paths it removed.
    pub fn remove_all(&self) -> Vec<PathBuf> {
        let mut removed = Vec::new();
        for path in self.live().drain(..) {
            if std::fs::remove_file(&path).is_ok() {
                removed.push(path);
            }
        }
        removed
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

/// A registered temporary file: unregistered (not removed) when dropped. Whoever owns the file
/// removes it on failure or renames it on success; this only covers the signal.
#[derive(Debug)]
pub struct Registration {
    registry: &'static Registry,
    path: PathBuf,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.live().iter()).finish()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut live = self.registry.live();
        if let Some(i) = live.iter().position(|p| *p == self.path) {
            live.swap_remove(i);
        }
    }
}

/// Registers `path` as a temporary file of this process, to remove if it is interrupted.
pub fn register(path: &Path) -> Registration {
    PROCESS.register(path)
}

/// Removes every temporary file of this process (for a signal handler that then exits) and
/// returns the paths it removed.
pub fn remove_all() -> Vec<PathBuf> {
    PROCESS.remove_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_files_are_removed_until_unregistered() {
        let dir = tempfile::tempdir().unwrap();
        let kept = dir.path().join("kept");
        let gone = dir.path().join("gone");
        std::fs::write(&kept, b"x").unwrap();
        std::fs::write(&gone, b"x").unwrap();
        // A registry of its own: other tests write temporary files through the process's.
        let registry: &'static Registry = Box::leak(Box::new(Registry::new()));
        drop(registry.register(&kept));
        let _live = registry.register(&gone);
        let removed = registry.remove_all();
        assert!(removed.contains(&gone));
        assert!(!gone.exists());
        assert!(kept.exists(), "an unregistered file was removed");
    }
}
