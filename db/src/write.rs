//! Writing `.pirdb` files, always atomically (the path holds the old file or the whole new
//! one): whole files from pages, snapshots with an inherited digest, shard files, and the mapped
//! writer the kv builder fills in place.

use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use memmap2::{MmapMut, MmapOptions};
use pirq_shared::digest::Digest;
use pirq_shared::kv::KvLayout;

use crate::format::{DIGEST_RANGE, HEADER_LEN, PAGES_DIGEST_RANGE, SHARD_BLOCK};
use crate::header::header_bytes;
use crate::{DbError, Header, Meta, PirDb, ShardOrigin};

/// Refuses an `output` that is one of the `inputs` (the same file, by device and inode, so
/// `./x.pirdb` and a hard link or symlink to it count too): a tool must never destroy what it
/// reads. An output that does not exist yet is never an input.
pub fn ensure_not_an_input(output: &Path, inputs: &[&Path]) -> Result<(), DbError> {
    use std::os::unix::fs::MetadataExt;
    let Ok(out) = std::fs::metadata(output) else {
        return Ok(());
    };
    for input in inputs {
        let io = |source| DbError::Io {
            path: input.to_path_buf(),
            error: source,
        };
        let meta = std::fs::metadata(input).map_err(io)?;
        if (meta.dev(), meta.ino()) == (out.dev(), out.ino()) {
            return Err(DbError::OutputIsInput {
                output: output.to_path_buf(),
                input: input.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// Writes a file so that `path` always holds either its old contents or the complete new ones:
/// `write` fills a temporary file in the same directory, which is then flushed to disk and
/// renamed over `path`. A process that has the old file open or mapped (a worker serving it)
/// keeps the old inode and never sees a byte change; a failure leaves `path` untouched and the
/// temporary file removed. Every tool that writes a `.pirdb` goes through this (or through
/// [`MappedWriter`], which does the same for builders that write through a mapping).
pub fn write_atomically<T>(
    path: &Path,
    write: impl FnOnce(&mut File) -> io::Result<T>,
) -> Result<T, DbError> {
    write_atomically_with(path, |file| {
        write(file).map_err(|source| DbError::Io {
            path: path.to_path_buf(),
            error: source,
        })
    })
}

/// [`write_atomically`] for a writer whose errors are not all about `path` (an input it reads
/// can fail too, and says so in its own [`DbError`]).
pub fn write_atomically_with<T>(
    path: &Path,
    write: impl FnOnce(&mut File) -> Result<T, DbError>,
) -> Result<T, DbError> {
    write_atomically_with_as(path, crate::outfile::Contents::Public, write)
}

/// [`write_atomically`] of `contents` (a secret is created 0600), with the output rules of
/// [`crate::outfile`]: a regular file or nothing at `path`, a symlink replaced, a mode kept.
pub fn write_atomically_as<T>(
    path: &Path,
    contents: crate::outfile::Contents,
    write: impl FnOnce(&mut File) -> io::Result<T>,
) -> Result<T, DbError> {
    write_atomically_with_as(path, contents, |file| {
        write(file).map_err(|source| DbError::Io {
            path: path.to_path_buf(),
            error: source,
        })
    })
}

fn write_atomically_with_as<T>(
    path: &Path,
    contents: crate::outfile::Contents,
    write: impl FnOnce(&mut File) -> Result<T, DbError>,
) -> Result<T, DbError> {
    let (staged, value) = crate::outfile::stage_with(path, contents, write)?;
    staged.commit()?;
    Ok(value)
}

/// Writes a database file (atomically, see [`write_atomically`]): the header, then `num_pages`
/// pages produced by `fill(p, page)` in order, and records their content digest (SPEC §2.1),
/// hashed as the pages go out, in the header. Returns the digest. `progress(bytes_written)` is
/// called after each chunk so tools can draw a bar.
pub fn write(
    path: impl AsRef<Path>,
    header: &Header,
    fill: impl Fn(u64, &mut [u8]) + Sync,
    progress: impl FnMut(u64),
) -> Result<Digest, DbError> {
    write_meta(path, header, &Meta::default(), fill, progress)
}

/// [`write()`] with the header's other blocks: the kv layout, the imported length.
pub fn write_meta(
    path: impl AsRef<Path>,
    header: &Header,
    meta: &Meta,
    fill: impl Fn(u64, &mut [u8]) + Sync,
    progress: impl FnMut(u64),
) -> Result<Digest, DbError> {
    write_pages(path.as_ref(), header, meta, None, None, fill, progress)
}

/// [`write()`], with a kv layout block in the header (`None`: a plain page database).
pub fn write_kv(
    path: impl AsRef<Path>,
    header: &Header,
    kv: Option<&KvLayout>,
    fill: impl Fn(u64, &mut [u8]) + Sync,
    progress: impl FnMut(u64),
) -> Result<Digest, DbError> {
    let meta = Meta {
        kv: kv.copied(),
        ..Meta::default()
    };
    write_pages(path.as_ref(), header, &meta, None, None, fill, progress)
}

/// Like [`write_meta`], but records `digest` instead of the content digest: for files whose
/// digest is inherited, such as a snapshot at a later epoch (`pirq db apply` records the
/// chained digest and passes the source's [`Meta`] through) or a part of a database (it names
/// the whole database).
pub fn write_with_digest(
    path: impl AsRef<Path>,
    header: &Header,
    meta: &Meta,
    digest: Digest,
    fill: impl Fn(u64, &mut [u8]) + Sync,
    progress: impl FnMut(u64),
) -> Result<(), DbError> {
    write_pages(
        path.as_ref(),
        header,
        meta,
        None,
        Some(digest),
        fill,
        progress,
    )
    .map(drop)
}

fn write_pages(
    path: &Path,
    header: &Header,
    meta: &Meta,
    shard: Option<&ShardOrigin>,
    recorded: Option<Digest>,
    fill: impl Fn(u64, &mut [u8]) + Sync,
    mut progress: impl FnMut(u64),
) -> Result<Digest, DbError> {
    use rayon::prelude::*;
    let total_pages = shard.map_or(header.num_pages, |s| s.total_pages);
    let mut header_bytes = header_bytes(header, meta, total_pages)?;
    if let Some(origin) = shard {
        header_bytes[SHARD_BLOCK].copy_from_slice(&origin.to_block());
    }
    write_atomically(path, |file| {
        // The content digest of these pages: `pages_digest` always, and the digest unless one
        // is inherited.
        let mut hasher = Digest::content_hasher(header.page_size, header.num_pages, header.epoch);
        let mut out = BufWriter::with_capacity(1 << 20, &mut *file);
        out.write_all(&header_bytes)?;
        let ps = header.page_size as usize;
        let pages_per_chunk = ((16usize << 20) / ps) as u64;
        let mut chunk = vec![0u8; pages_per_chunk as usize * ps];
        let mut first = 0u64;
        while first < header.num_pages {
            let count = pages_per_chunk.min(header.num_pages - first);
            let buf = &mut chunk[..count as usize * ps];
            buf.par_chunks_mut(ps)
                .enumerate()
                .for_each(|(i, page)| fill(first + i as u64, page));
            hasher.update(buf);
            out.write_all(buf)?;
            first += count;
            progress(first * ps as u64);
        }
        out.flush()?;
        drop(out);
        let pages_digest = hasher.finish();
        let digest = recorded.unwrap_or(pages_digest);
        file.seek(SeekFrom::Start(DIGEST_RANGE.start as u64))?;
        file.write_all(&digest.0)?;
        file.seek(SeekFrom::Start(PAGES_DIGEST_RANGE.start as u64))?;
        file.write_all(&pages_digest.0)?;
        Ok(digest)
    })
}

/// Writes shard `spec` of `source` as a file of its own (`pirq db split`): the shard's pages,
/// the source's epoch, the shard block saying where they belong, and the source's digest (a
/// shard file names the whole database it is part of). Written atomically. A kv layout is not
/// carried over (workers serve pages; clients read the layout from the whole database); the
/// imported length is, as it describes the whole database.
pub fn write_shard(
    path: impl AsRef<Path>,
    source: &PirDb,
    spec: pirq_shared::shard::ShardSpec,
    progress: impl FnMut(u64),
) -> Result<ShardOrigin, DbError> {
    let path = path.as_ref();
    ensure_not_an_input(path, &[source.path()])?;
    let total = source.total_pages();
    let range = spec
        .range(total)
        .map_err(|e| DbError::Shard(e.to_string()))?;
    if range.start < source.first_page() || range.end > source.first_page() + source.num_pages() {
        return Err(DbError::Shard(format!(
            "shard {spec} needs pages {range:?}, {} holds {:?}",
            source.path().display(),
            source.first_page()..source.first_page() + source.num_pages()
        )));
    }
    let origin = ShardOrigin {
        spec,
        first_page: range.start,
        total_pages: total,
    };
    let header = Header {
        page_size: source.header().page_size,
        num_pages: range.end - range.start,
        epoch: source.header().epoch,
    };
    let ps = source.page_size();
    let offset = range.start - source.first_page();
    let pages = source.pages();
    let meta = Meta {
        kv: None,
        ..source.meta()
    };
    write_pages(
        path,
        &header,
        &meta,
        Some(&origin),
        Some(source.digest()),
        |p, page| {
            let at = (offset + p) as usize * ps;
            page.copy_from_slice(&pages[at..at + ps]);
        },
        progress,
    )?;
    Ok(origin)
}

/// A database file written in place through a writable mapping, for builders that place data
/// at random positions (the kv builder's cuckoo table is the page file itself). The file is
/// made as `.<name>.tmp-<pid>` beside `path` and renamed over `path` only by
/// [`MappedWriter::commit`]; dropped without a commit (or the tool interrupted, see
/// [`crate::tempfiles`]), the temporary file is removed.
///
/// Its whole length is allocated on disk before it is mapped: a store into a mapped page that
/// the file system has no block for kills the process with SIGBUS, so a full disk must fail
/// here, as an error, instead.
pub struct MappedWriter {
    header: Header,
    map: MmapMut,
    file: File,
    tmp: PathBuf,
    path: PathBuf,
    /// The mode the database gets ([`crate::outfile::mode_for`]).
    mode: u32,
    committed: bool,
    _interrupted: crate::tempfiles::Registration,
}

impl MappedWriter {
    /// Creates the temporary file: the header (with `kv`'s block) and all-zero pages.
    pub fn create(
        path: impl AsRef<Path>,
        header: &Header,
        kv: Option<&KvLayout>,
    ) -> Result<MappedWriter, DbError> {
        let meta = Meta {
            kv: kv.copied(),
            ..Meta::default()
        };
        MappedWriter::create_meta(path, header, &meta)
    }

    /// [`MappedWriter::create`] with all of the header's blocks (a signed kv table's too).
    pub fn create_meta(
        path: impl AsRef<Path>,
        header: &Header,
        meta: &Meta,
    ) -> Result<MappedWriter, DbError> {
        let header_bytes = header_bytes(header, meta, header.num_pages)?;
        let path = path.as_ref().to_path_buf();
        let mode = crate::outfile::mode_for(&path, crate::outfile::Contents::Public).map_err(
            |source| DbError::Io {
                path: path.clone(),
                error: source,
            },
        )?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "db".into());
        let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
        let io = |source| DbError::Io {
            path: tmp.clone(),
            error: source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(io)?;
        let interrupted = crate::tempfiles::register(&tmp);
        // From here on a failure drops `Removal`, which removes the file.
        let removal = Removal(&tmp);
        if let Some(free) = tmpfs_free(&file) {
            // In memory (tmpfs): posix_fallocate zeroes every page on one core (minutes for
            // the tens of gigabytes of `pirq eth gen --tables` at Ethereum's size), so the
            // pages are taken by all cores touching them instead, once the file system was
            // seen to have room for them (a store into a page it has no room for would kill
            // the process with SIGBUS).
            let len = header.file_len();
            if free < len {
                return Err(DbError::Io {
                    path: tmp.clone(),
                    error: io::Error::new(
                        io::ErrorKind::StorageFull,
                        format!(
                            "the new database needs {len} bytes; its file system (tmpfs) has \
                             {free} free"
                        ),
                    ),
                });
            }
            file.set_len(len).map_err(io)?;
            // SAFETY: as below; the file system had room for every page just now.
            let mut map = unsafe { MmapOptions::new().map_mut(&file) }.map_err(io)?;
            touch_pages(&mut map);
            map[..HEADER_LEN].copy_from_slice(&header_bytes);
            std::mem::forget(removal);
            return Ok(MappedWriter {
                header: *header,
                map,
                file,
                tmp,
                path,
                mode,
                committed: false,
                _interrupted: interrupted,
            });
        }
        allocate(&file, header.file_len()).map_err(|source| DbError::Io {
            path: tmp.clone(),
            error: io::Error::new(
                source.kind(),
                format!(
                    "allocating {} bytes for the new database: {source}",
                    header.file_len()
                ),
            ),
        })?;
        // SAFETY: the file was just created by this process under a private name, and every
        // byte of it is allocated on disk (a store into the mapping cannot hit a missing
        // block); nothing else maps or writes it until `commit` renames it. Populated up front:
        // a builder writes nearly every page, and one bulk fault-in is several times cheaper
        // than a page fault per page (measured in docs/bench/kv.md).
        let mut map = unsafe { MmapOptions::new().populate().map_mut(&file) }.map_err(io)?;
        map[..HEADER_LEN].copy_from_slice(&header_bytes);
        std::mem::forget(removal);
        Ok(MappedWriter {
            header: *header,
            map,
            file,
            tmp,
            path,
            mode,
            committed: false,
            _interrupted: interrupted,
        })
    }

    /// All pages back to back, writable.
    pub fn pages_mut(&mut self) -> &mut [u8] {
        &mut self.map[HEADER_LEN..]
    }

    /// Signs every page (on all cores) as changed at `changed_epoch`, writing its tail: the
    /// last step before [`MappedWriter::commit`] of a signed database.
    pub fn sign_pages(&mut self, signer: &pirq_shared::signing::PageSigner, changed_epoch: u64) {
        use rayon::prelude::*;
        let ps = self.header.page_size as usize;
        self.pages_mut()
            .par_chunks_mut(ps)
            .enumerate()
            .for_each(|(p, page)| signer.sign(p as u64, changed_epoch, page));
    }

    /// Records the pages' content digest (SPEC §2.1) in the header, flushes the file to disk,
    /// then renames it over the destination.
    pub fn commit(mut self) -> Result<(), DbError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| DbError::Io {
                path,
                error: source,
            }
        };
        let h = self.header;
        let digest = Digest::content(h.page_size, h.num_pages, h.epoch, &self.map[HEADER_LEN..]);
        self.map[DIGEST_RANGE].copy_from_slice(&digest.0);
        self.map[PAGES_DIGEST_RANGE].copy_from_slice(&digest.0);
        self.map.flush().map_err(io(&self.tmp))?;
        {
            use std::os::unix::fs::PermissionsExt;
            self.file
                .set_permissions(std::fs::Permissions::from_mode(self.mode))
                .map_err(io(&self.tmp))?;
        }
        self.file.sync_all().map_err(io(&self.tmp))?;
        std::fs::rename(&self.tmp, &self.path).map_err(io(&self.path))?;
        crate::outfile::sync_dir(crate::outfile::parent_dir(&self.path));
        self.committed = true;
        Ok(())
    }
}

impl Drop for MappedWriter {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Removes a half-made file when dropped (forgotten once its owner takes over).
struct Removal<'a>(&'a Path);

impl Drop for Removal<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}

/// The free bytes of `file`'s file system when it is a tmpfs (memory), else `None`.
// The casts: `statfs`'s field types differ between C libraries and architectures.
#[allow(clippy::unnecessary_cast)]
fn tmpfs_free(file: &File) -> Option<u64> {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain system call filling a struct this function owns.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) } != 0 {
        return None;
    }
    (fs.f_type as i64 == libc::TMPFS_MAGIC as i64).then(|| fs.f_bavail as u64 * fs.f_bsize as u64)
}

/// Writes one byte of every 4 KiB of `map`, on all cores, so every page is taken now.
fn touch_pages(map: &mut [u8]) {
    use rayon::prelude::*;
    map.par_chunks_mut(1 << 21).for_each(|chunk| {
        for i in (0..chunk.len()).step_by(4096) {
            // SAFETY: `i` is inside `chunk`; volatile so the store of a zero is kept.
            unsafe { std::ptr::write_volatile(chunk.as_mut_ptr().add(i), 0) };
        }
    });
}

/// Gives `file` `len` bytes with every block allocated (`posix_fallocate`, which the C library
/// emulates by writing where the file system cannot allocate). A full disk is `ENOSPC` here.
fn allocate(file: &File, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file too large"))?;
    // SAFETY: a plain system call on a file descriptor this process owns.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) } {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}
