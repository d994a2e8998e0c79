//! Where a tool may write its output (`--out` of every `pirq` command), and how.
//!
//! An output path holds a regular file or nothing: a FIFO, a device node, a socket or a
//! directory there is refused (run as root, `--out /dev/null` would otherwise turn the device
//! into a regular file). The file is written beside the path and renamed over it
//! ([`crate::write_atomically`]), so a symlink already at the path is replaced, never
//! followed to overwrite its target. An existing file keeps its mode; a new one is created
//! 0644, or 0600 for secret material ([`Contents::Secret`]: DPF keys, publisher secrets,
//! pages a client retrieved privately).

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

/// What a file holds, which decides the mode of a new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contents {
    /// Readable by other users (0644): a database workers of another user serve, an update,
    /// a public key.
    Public,
    /// The owner's only (0600): nobody else on the machine may read it.
    Secret,
}

impl Contents {
    fn new_mode(self) -> u32 {
        match self {
            Contents::Public => 0o644,
            Contents::Secret => 0o600,
        }
    }
}

/// Checks that `path` is nothing or a regular file (a symlink counts as nothing: it is
/// replaced), and returns the mode the written file gets: the existing file's (for a secret,
/// without any group or other bits), else `contents`' mode for a new file.
pub fn mode_for(path: &Path, contents: Contents) -> io::Result<u32> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(contents.new_mode()),
        Err(e) => return Err(e),
    };
    let kind = meta.file_type();
    let what = if kind.is_symlink() {
        return Ok(contents.new_mode());
    } else if kind.is_file() {
        let mode = meta.permissions().mode() & 0o7777;
        return Ok(match contents {
            Contents::Public => mode,
            Contents::Secret => mode & 0o7700,
        });
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device node"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{what} is there: an output goes to a regular file or a new path, refusing to replace it"),
    ))
}

/// Writes `bytes` to `path` as [`mode_for`] says: into a temporary file beside it, renamed over
/// it once complete.
pub fn write(path: &Path, contents: Contents, bytes: &[u8]) -> Result<(), crate::DbError> {
    stage(path, contents, bytes)?.commit()
}

/// A file written in full beside its path, not yet in place: [`Staged::commit`] renames it
/// over the path; dropped uncommitted, it is removed. A command that writes two files (an
/// update and its manifest) stages the first, writes the second, then commits: a failure of
/// the second leaves nothing of the first.
pub struct Staged {
    tmp: tempfile::NamedTempFile,
    path: std::path::PathBuf,
    _interrupted: crate::tempfiles::Registration,
}

/// Stages `bytes` for `path` under [`mode_for`]'s rules (checked now, before anything else).
pub fn stage(path: &Path, contents: Contents, bytes: &[u8]) -> Result<Staged, crate::DbError> {
    let (staged, ()) = stage_with(path, contents, |file| {
        io::Write::write_all(file, bytes).map_err(|error| crate::DbError::Io {
            path: path.to_path_buf(),
            error,
        })
    })?;
    Ok(staged)
}

/// Stages what `write` writes for `path` under [`mode_for`]'s rules (checked before any byte
/// is written: a FIFO or device at the path is refused, not replaced): a temporary file beside
/// the path, given the mode `contents` calls for and synced. Its value comes back with it.
pub fn stage_with<T>(
    path: &Path,
    contents: Contents,
    write: impl FnOnce(&mut File) -> Result<T, crate::DbError>,
) -> Result<(Staged, T), crate::DbError> {
    let io = |error| crate::DbError::Io {
        path: path.to_path_buf(),
        error,
    };
    let mode = mode_for(path, contents).map_err(io)?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(parent_dir(path))
        .map_err(io)?;
    // Removed by `tmp`'s drop on failure, and by the tool's signal handler if it is killed.
    let interrupted = crate::tempfiles::register(tmp.path());
    let value = write(tmp.as_file_mut())?;
    // A temporary file is created 0600: a database, read by workers of other users, becomes
    // 0644, a secret stays 0600, a file replaced keeps its mode.
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    let staged = Staged {
        tmp,
        path: path.to_path_buf(),
        _interrupted: interrupted,
    };
    Ok((staged, value))
}

impl Staged {
    /// Renames the staged file over its path, and syncs the folder so the rename lasts.
    pub fn commit(self) -> Result<(), crate::DbError> {
        let path = self.path;
        self.tmp.persist(&path).map_err(|e| crate::DbError::Io {
            path: path.clone(),
            error: e.error,
        })?;
        sync_dir(parent_dir(&path));
        Ok(())
    }
}

/// The folder a file at `path` is in (`.` for a bare name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Syncs a folder, so that a file renamed into it stays there after a crash (best effort: a
/// folder that cannot be opened is left as it is).
pub(crate) fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_staged_file_is_in_place_only_once_committed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("update.bin");
        drop(stage(&path, Contents::Public, b"x").unwrap());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "nothing left"
        );
        stage(&path, Contents::Public, b"y")
            .unwrap()
            .commit()
            .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"y");
    }

    #[test]
    fn only_regular_files_or_nothing_are_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let socket = dir.path().join("socket");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        for (path, says) in [
            (fifo.as_path(), "a FIFO"),
            (Path::new("/dev/null"), "a device node"),
            (socket.as_path(), "a socket"),
            (dir.path(), "a directory"),
        ] {
            let e = write(path, Contents::Public, b"x").unwrap_err().to_string();
            assert!(
                e.contains(says) && e.contains("refusing"),
                "{}: {e}",
                path.display()
            );
        }
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        assert!(std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device());
    }

    #[test]
    fn a_symlink_is_replaced_not_followed_and_modes_are_kept_or_private() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"precious").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write(&link, Contents::Secret, b"key").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        assert!(!std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&link).unwrap(), b"key");
        assert_eq!(mode(&link), 0o600);

        let kept = dir.path().join("kept");
        std::fs::write(&kept, b"old").unwrap();
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o600)).unwrap();
        write(&kept, Contents::Public, b"new").unwrap();
        assert_eq!(mode(&kept), 0o600, "an existing file's mode is kept");
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o640)).unwrap();
        write(&kept, Contents::Secret, b"new").unwrap();
        assert_eq!(
            mode(&kept),
            0o600,
            "a secret never stays readable by others"
        );

        let fresh = dir.path().join("fresh");
        write(&fresh, Contents::Public, b"x").unwrap();
        assert_eq!(mode(&fresh), 0o644);
    }
}
