//! `pirq-db`: the `.pirdb` page database file (SPEC §2): header, reader (mmap), writers (atomic,
//! whole files, shard files, a mapped writer for in-place builds), imported bytes.
//!
//! Its own crate so that what only a file needs (memory mappings, a thread pool for hashing,
//! temporary files) stays out of `pirq-shared`, the spec crate every process and the client
//! library link. The header's blocks that the spec defines (the signing block, the kv layout
//! block) and the epoch and domain rules are `pirq-shared`'s; this crate reads and writes them
//! in a file.
//!
//! - [`outfile`]: every tool's output file: written whole or not at all, with the mode its
//!   contents call for.
//! - [`tempfiles`]: temporary files a tool removes when it is interrupted.
//! - [`import`]: a user's own bytes as a page database.

pub mod import;
pub mod outfile;
pub mod tempfiles;

use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut, MmapOptions};

use pirq_shared::digest::Digest;
use pirq_shared::kv::{KvLayout, KvParams};
use pirq_shared::update::MAX_EPOCH;

/// First 8 bytes of every `.pirdb` file.
pub const MAGIC: [u8; 8] = *b"PIRQDB\0\x01";
/// Bytes before page 0.
pub const HEADER_LEN: usize = 4096;
/// Where the database digest (SPEC §2.1) sits in the header: bytes 32..64.
pub const DIGEST_RANGE: std::ops::Range<usize> = 32..64;
pub const MIN_PAGE_SIZE: u32 = 256;
pub const MAX_PAGE_SIZE: u32 = 65536;
/// Page size the tools take when none is given (`pirq db gen`, `pirq kv build`, the scan
/// benches): 4 KiB, the operating system's page and the size most figures in `docs/bench/` are
/// measured at (64 GiB = 2^24 pages).
pub const DEFAULT_PAGE_SIZE: u32 = 4096;
/// Keys have at most 40 domain bits, so a database holds at most 2^40 pages.
pub const MAX_PAGES: u64 = 1 << 40;
/// Where header bytes 544..552 record the byte length of imported data (SPEC §2.3).
pub const DATA_LEN_AT: usize = 544;
/// Where the header records the content digest of the file's own pages (SPEC §2.1
/// `pages_digest`): bytes 688..720.
pub const PAGES_DIGEST_RANGE: std::ops::Range<usize> = 688..720;

/// Refuses an epoch above [`MAX_EPOCH`].
pub fn check_epoch(epoch: u64) -> Result<(), DbError> {
    if epoch > MAX_EPOCH {
        return Err(DbError::Epoch(epoch));
    }
    Ok(())
}

/// What a header says about a database beside its geometry and digest: the parts a derived file
/// (a snapshot, a shard file) carries over from the file it was made from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// The kv layout block (`docs/spec/kv.md` §2), for a kv database.
    pub kv: Option<KvLayout>,
    /// Bytes of imported data, for a file written by `pirq db import` (SPEC §2.3); 0 otherwise.
    pub data_len: u64,
    /// The signing block (SPEC §2.4) of a database whose pages carry publisher signatures.
    pub signing: Option<pirq_shared::signing::SigningBlock>,
}

/// The header fields of a `.pirdb` file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Header {
    pub page_size: u32,
    pub num_pages: u64,
    pub epoch: u64,
}

/// Why a database file or header was rejected.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: io::Error },
    #[error("file is {len} bytes, shorter than the {HEADER_LEN}-byte header")]
    ShortHeader { len: u64 },
    #[error("bad magic {found:02x?}: not a .pirdb v1 file")]
    BadMagic { found: [u8; 8] },
    #[error("page size {0} is not a power of two in 256..=65536")]
    PageSize(u32),
    #[error("num_pages {0} outside 1..=2^40")]
    NumPages(u64),
    #[error("epoch {0} is above the highest epoch, 2^53-1 = {MAX_EPOCH} (SPEC §3)")]
    Epoch(u64),
    #[error(
        "data_len {data_len} does not fit {num_pages} pages of {usable} usable bytes \
         (it must be 0, or more than (pages - 1) x usable and at most pages x usable)"
    )]
    DataLen {
        data_len: u64,
        num_pages: u64,
        usable: u32,
    },
    #[error("reserved header bytes at offset {offset} are not zero")]
    Reserved { offset: usize },
    /// The key-value layout block (header bytes 64..512, `docs/spec/kv.md`) is malformed.
    #[error("{0}")]
    Kv(#[from] pirq_shared::kv::KvError),
    #[error(
        "refusing to write {}: it is the input {} (same file); write to another path",
        output.display(), input.display()
    )]
    OutputIsInput { output: PathBuf, input: PathBuf },
    /// The signing block (header bytes 560..688) is malformed, or a page's signature is bad.
    #[error(transparent)]
    Signing(#[from] pirq_shared::signing::SignError),
    /// A file's pages do not hash to the digest its header records.
    #[error(
        "{}: the pages hash to {found}, the header's {field} is {expected}: {hint}",
        path.display()
    )]
    Damaged {
        path: PathBuf,
        field: &'static str,
        expected: Digest,
        found: Digest,
        hint: &'static str,
    },
    /// An input a tool reads cannot be used (empty, too large, changed while read).
    #[error("{0}")]
    Input(String),
    /// The shard block (header bytes 512..544, written by `pirq db split`) is malformed.
    #[error("shard block: {0}")]
    Shard(String),
    #[error("file is {actual} bytes, header says {expected} ({num_pages} pages of {page_size})")]
    Length {
        expected: u64,
        actual: u64,
        num_pages: u64,
        page_size: u32,
    },
}

impl Header {
    /// Checks the fields against SPEC §2.
    pub fn validate(&self) -> Result<(), DbError> {
        let ps = self.page_size;
        if !ps.is_power_of_two() || !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&ps) {
            return Err(DbError::PageSize(ps));
        }
        if !(1..=MAX_PAGES).contains(&self.num_pages) {
            return Err(DbError::NumPages(self.num_pages));
        }
        check_epoch(self.epoch)
    }

    /// Parses and validates the first [`HEADER_LEN`] bytes of a file.
    pub fn parse(bytes: &[u8]) -> Result<Header, DbError> {
        if bytes.len() < HEADER_LEN {
            return Err(DbError::ShortHeader {
                len: bytes.len() as u64,
            });
        }
        let found: [u8; 8] = bytes[..8].try_into().unwrap();
        if found != MAGIC {
            return Err(DbError::BadMagic { found });
        }
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
        let header = Header {
            page_size: u32_at(8),
            num_pages: u64_at(16),
            epoch: u64_at(24),
        };
        header.validate()?;
        if u32_at(12) != 0 {
            return Err(DbError::Reserved { offset: 12 });
        }
        // Bytes 32..64 hold the digest (any value); bytes 64..512 are the kv layout block: zero,
        // or a layout that fits these pages; 512..544 the shard block; 544..552 data_len;
        // 560..688 the signing block (SPEC §2.4).
        let kv = pirq_shared::kv::BLOCK;
        let signing = pirq_shared::signing::BLOCK;
        for reserved in [
            DIGEST_RANGE.end..kv.start,
            kv.end..SHARD_BLOCK.start,
            SHARD_BLOCK.end..DATA_LEN_AT,
            DATA_LEN_AT + 8..signing.start,
            signing.end..PAGES_DIGEST_RANGE.start,
            PAGES_DIGEST_RANGE.end..HEADER_LEN,
        ] {
            if let Some(i) = bytes[reserved.clone()].iter().position(|b| *b != 0) {
                return Err(DbError::Reserved {
                    offset: reserved.start + i,
                });
            }
        }
        header.signing(bytes)?;
        header.kv_params(bytes)?;
        let shard = ShardOrigin::from_header(bytes, &header)?;
        let total_pages = shard.map_or(header.num_pages, |s| s.total_pages);
        check_data_len(Header::data_len(bytes), total_pages, header.usable(bytes))?;
        Ok(header)
    }

    /// Bytes of a page that hold data (SPEC §2.5): the page size less the signature tail of a
    /// signed database. A malformed signing block counts as none (parsing refuses it).
    pub fn usable(&self, bytes: &[u8]) -> u32 {
        match self.signing(bytes) {
            Ok(Some(block)) => self.page_size - block.tail_len(),
            _ => self.page_size,
        }
    }

    /// The signing block in header `bytes` (560..688, SPEC §2.4); `None` for unsigned pages.
    pub fn signing(
        &self,
        bytes: &[u8],
    ) -> Result<Option<pirq_shared::signing::SigningBlock>, pirq_shared::signing::SignError> {
        pirq_shared::signing::SigningBlock::from_header(bytes, self.page_size)
    }

    /// The `data_len` field (SPEC §2.3) of header `bytes`: 0 unless the file was imported.
    pub fn data_len(bytes: &[u8]) -> u64 {
        u64::from_le_bytes(
            bytes[DATA_LEN_AT..DATA_LEN_AT + 8]
                .try_into()
                .expect("8 bytes"),
        )
    }

    /// The kv layout in header `bytes` (64..512) checked against this geometry (slots in the
    /// usable bytes); `None` for a plain page database.
    pub fn kv_params(&self, bytes: &[u8]) -> Result<Option<KvParams>, DbError> {
        let tail = self.page_size - self.usable(bytes);
        match KvLayout::from_header(bytes)? {
            None => Ok(None),
            Some(layout) => Ok(Some(KvParams::with_tail(
                layout,
                self.page_size,
                tail,
                self.num_pages,
            )?)),
        }
    }

    /// The digest recorded in header bytes 32..64; `None` when they are zero (a file written
    /// before digests existed).
    pub fn parse_digest(bytes: &[u8]) -> Option<Digest> {
        let raw: [u8; 32] = bytes.get(DIGEST_RANGE)?.try_into().ok()?;
        (raw != [0; 32]).then_some(Digest(raw))
    }

    /// The `pages_digest` recorded in header bytes 688..720 (SPEC §2.1); `None` when they are
    /// zero (a file written before the field).
    pub fn parse_pages_digest(bytes: &[u8]) -> Option<Digest> {
        let raw: [u8; 32] = bytes.get(PAGES_DIGEST_RANGE)?.try_into().ok()?;
        (raw != [0; 32]).then_some(Digest(raw))
    }

    /// The 4096 header bytes (digest bytes zero).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![0u8; HEADER_LEN];
        out[..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&self.page_size.to_le_bytes());
        out[16..24].copy_from_slice(&self.num_pages.to_le_bytes());
        out[24..32].copy_from_slice(&self.epoch.to_le_bytes());
        out
    }

    /// Domain bits `n = max(1, ceil(log2(num_pages)))`: keys for this database must have it.
    pub fn domain_bits(&self) -> u8 {
        pirq_shared::dpf::domain_bits(self.num_pages)
    }

    /// Bytes of all pages.
    pub fn pages_len(&self) -> u64 {
        self.num_pages * self.page_size as u64
    }

    /// Bytes of the whole file.
    pub fn file_len(&self) -> u64 {
        HEADER_LEN as u64 + self.pages_len()
    }
}

/// Checks `data_len` against the database it describes (SPEC §2.3): 0, or a length whose last
/// byte falls in the last of `total_pages` pages of `usable` bytes.
pub fn check_data_len(data_len: u64, total_pages: u64, usable: u32) -> Result<(), DbError> {
    // In u128: a shard block's total_pages is checked only against the file's own range, so
    // it may be far above 2^40 in a malformed header.
    let (len, pages, u) = (data_len as u128, total_pages as u128, usable as u128);
    if data_len == 0 || (pages.saturating_sub(1) * u < len && len <= pages * u) {
        return Ok(());
    }
    Err(DbError::DataLen {
        data_len,
        num_pages: total_pages,
        usable,
    })
}

/// A `.pirdb` file mapped read-only. Page bytes are read straight from the page cache.
pub struct PirDb {
    header: Header,
    digest: Option<Digest>,
    pages_digest: Option<Digest>,
    kv: Option<KvParams>,
    data_len: u64,
    signing: Option<pirq_shared::signing::SigningBlock>,
    shard: Option<ShardOrigin>,
    map: Mmap,
    path: PathBuf,
}

impl PirDb {
    /// Opens, maps and validates a database file (header and exact length).
    pub fn open(path: impl AsRef<Path>) -> Result<PirDb, DbError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| DbError::Io {
            path: path.clone(),
            error: source,
        };
        let file = File::open(&path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < HEADER_LEN as u64 {
            return Err(DbError::ShortHeader { len });
        }
        // SAFETY: the file is opened read-only; pirq's tools never write a database in place
        // (they rename a new file over it, see `write_atomically`), and a worker exits with a
        // message when something else modifies or truncates the file it maps (worker::guard).
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let header = Header::parse(&map[..HEADER_LEN])?;
        let kv = header.kv_params(&map[..HEADER_LEN])?;
        let digest = Header::parse_digest(&map[..HEADER_LEN]);
        let pages_digest = Header::parse_pages_digest(&map[..HEADER_LEN]);
        let shard = ShardOrigin::from_header(&map[..HEADER_LEN], &header)?;
        let data_len = Header::data_len(&map[..HEADER_LEN]);
        let signing = header.signing(&map[..HEADER_LEN])?;
        if len != header.file_len() {
            return Err(DbError::Length {
                expected: header.file_len(),
                actual: len,
                num_pages: header.num_pages,
                page_size: header.page_size,
            });
        }
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Sequential);
        Ok(PirDb {
            header,
            digest,
            pages_digest,
            kv,
            data_len,
            signing,
            shard,
            map,
            path,
        })
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The digest the header records (SPEC §2.1); `None` for a file written before digests.
    pub fn recorded_digest(&self) -> Option<Digest> {
        self.digest
    }

    /// The recorded digest, or for an older file without one its content digest (one pass over
    /// the file, on all cores).
    pub fn digest(&self) -> Digest {
        self.digest.unwrap_or_else(|| self.content_digest())
    }

    /// Hashes the header's shape and every page (SPEC §2.1): what [`write()`] records. A file made
    /// by `pirq db apply` records a chained digest instead, which this does not reproduce.
    pub fn content_digest(&self) -> Digest {
        let h = &self.header;
        Digest::content(h.page_size, h.num_pages, h.epoch, self.pages())
    }

    /// The `pages_digest` the header records (SPEC §2.1); `None` for a file written before it.
    pub fn recorded_pages_digest(&self) -> Option<Digest> {
        self.pages_digest
    }

    /// Checks every page against the header (SPEC §2.1, one pass on all cores): against
    /// `pages_digest`, or for a file written before that field against its digest, which must
    /// then be a content digest. Returns the content digest of the pages. A file that records no
    /// digest at all has nothing to check against and passes.
    pub fn verify_pages(&self) -> Result<Digest, DbError> {
        let found = self.content_digest();
        let (expected, field) = match (self.pages_digest, self.digest) {
            (Some(d), _) => (d, "pages_digest"),
            (None, Some(d)) => (d, "digest"),
            (None, None) => return Ok(found),
        };
        if found == expected {
            return Ok(found);
        }
        let hint = match (self.pages_digest, self.shard) {
            (Some(_), _) => "the file is damaged (its pages changed after it was written)",
            (None, Some(_)) => {
                "it is a shard file written before pages_digest existed, whose digest names the \
                 whole database: write it again with pirq db split"
            }
            (None, None) => {
                "the file is damaged, or it is a snapshot written before pages_digest existed \
                 (pirq db apply records a chained digest): write it again with pirq db apply"
            }
        };
        Err(DbError::Damaged {
            path: self.path.clone(),
            field,
            expected,
            found,
            hint,
        })
    }

    /// The key-value layout, if this is a kv database (`docs/spec/kv.md`).
    pub fn kv(&self) -> Option<&KvParams> {
        self.kv.as_ref()
    }

    /// Bytes of imported data (`pirq db import`, SPEC §2.3); 0 for a file not imported.
    pub fn data_len(&self) -> u64 {
        self.data_len
    }

    /// What a file derived from this one carries over (a snapshot: all of it; a shard file:
    /// all but the kv layout).
    pub fn meta(&self) -> Meta {
        Meta {
            kv: self.kv.map(|k| k.layout),
            data_len: self.data_len,
            signing: self.signing,
        }
    }

    /// The signing block, for a database whose pages carry publisher signatures (SPEC §2.4).
    pub fn signing(&self) -> Option<&pirq_shared::signing::SigningBlock> {
        self.signing.as_ref()
    }

    /// Bytes of a page that hold data (SPEC §2.5): the page size less the signature tail.
    pub fn usable(&self) -> usize {
        self.page_size() - self.signing.map_or(0, |b| b.tail_len() as usize)
    }

    /// Checks every page's signature (on all cores) against the file's signing block, whose
    /// publisher must be `publisher`, and that no page claims a change after the file's epoch.
    /// Returns how many pages were checked.
    pub fn verify_signatures(
        &self,
        publisher: &pirq_shared::signing::PublisherKey,
    ) -> Result<u64, DbError> {
        use pirq_shared::signing::SignError;
        use rayon::prelude::*;
        let Some(block) = self.signing else {
            return Err(SignError::Block(format!(
                "{} is not signed (its header has no signing block)",
                self.path.display()
            ))
            .into());
        };
        if block.publisher != *publisher {
            return Err(SignError::Key(format!(
                "{} is signed by publisher key {}, not {publisher}",
                self.path.display(),
                block.publisher
            ))
            .into());
        }
        let first = self.first_page();
        let epoch = self.header.epoch;
        self.pages()
            .par_chunks(self.page_size())
            .enumerate()
            .try_for_each(|(p, page)| {
                let index = first + p as u64;
                let changed = block.verify_page(index, page)?;
                if changed > epoch {
                    return Err(SignError::FromTheFuture {
                        index,
                        changed,
                        epoch,
                    });
                }
                Ok(())
            })?;
        Ok(self.num_pages())
    }

    /// Which part of a database this file holds, for a shard file (`pirq db split`).
    pub fn shard(&self) -> Option<&ShardOrigin> {
        self.shard.as_ref()
    }

    /// The database page that is page 0 of this file (0 unless it is a shard file).
    pub fn first_page(&self) -> u64 {
        self.shard.map_or(0, |s| s.first_page)
    }

    /// Pages of the whole database this file belongs to (its own count unless a shard file).
    pub fn total_pages(&self) -> u64 {
        self.shard.map_or(self.header.num_pages, |s| s.total_pages)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn page_size(&self) -> usize {
        self.header.page_size as usize
    }

    pub fn num_pages(&self) -> u64 {
        self.header.num_pages
    }

    /// All pages back to back, page `p` at `p * page_size`.
    pub fn pages(&self) -> &[u8] {
        &self.map[HEADER_LEN..]
    }

    /// Page `p`; pages at or past `num_pages` do not exist (they read as zero in answers).
    pub fn page(&self, p: u64) -> Option<&[u8]> {
        (p < self.header.num_pages).then(|| {
            let ps = self.page_size();
            &self.pages()[p as usize * ps..(p as usize + 1) * ps]
        })
    }
}

impl PirDb {
    /// A private copy-on-write mapping of the pages: a scanner folds epoch updates into it in
    /// memory while the file stays untouched. Only pages that are written cost memory.
    pub fn private_pages(&self) -> Result<PrivatePages, DbError> {
        self.private_range(0..self.header.num_pages)
    }

    /// [`private_pages`](Self::private_pages) of pages `range` only (a shard's): page
    /// `range.start` is page 0 of the mapping, and nothing outside the range is mapped or read.
    /// `range.start` must be a multiple of 256 (shard boundaries are), so the mapping starts on
    /// an OS page.
    pub fn private_range(&self, range: std::ops::Range<u64>) -> Result<PrivatePages, DbError> {
        let io = |source| DbError::Io {
            path: self.path.clone(),
            error: source,
        };
        let ps = self.header.page_size as u64;
        assert!(
            range.start <= range.end && range.end <= self.header.num_pages,
            "page range {range:?} outside the database"
        );
        let file = File::open(&self.path).map_err(io)?;
        let len = (range.end - range.start) * ps;
        // SAFETY: as in `open`: the file is not modified while pirq serves it; writes go to
        // private pages of this process only.
        let map = unsafe {
            MmapOptions::new()
                .offset(HEADER_LEN as u64 + range.start * ps)
                .len(len as usize)
                .map_copy(&file)
        }
        .map_err(io)?;
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Sequential);
        if map.len() as u64 != len {
            return Err(DbError::Length {
                expected: self.header.file_len(),
                actual: HEADER_LEN as u64 + map.len() as u64,
                num_pages: self.header.num_pages,
                page_size: self.header.page_size,
            });
        }
        Ok(PrivatePages {
            map,
            page_size: self.page_size(),
        })
    }
}

/// Pages of a database in a private, writable, copy-on-write mapping (see
/// [`PirDb::private_pages`]).
pub struct PrivatePages {
    map: MmapMut,
    page_size: usize,
}

impl PrivatePages {
    /// All pages back to back.
    pub fn as_slice(&self) -> &[u8] {
        &self.map
    }

    pub fn page(&self, p: u64) -> &[u8] {
        &self.map[p as usize * self.page_size..(p as usize + 1) * self.page_size]
    }

    pub fn page_mut(&mut self, p: u64) -> &mut [u8] {
        &mut self.map[p as usize * self.page_size..(p as usize + 1) * self.page_size]
    }

    /// All pages back to back, writable (private to this process).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.map
    }
}

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

/// The header bytes with `meta`'s blocks, checked against the geometry (`total_pages`: of the
/// whole database, for a shard file).
fn header_bytes(header: &Header, meta: &Meta, total_pages: u64) -> Result<Vec<u8>, DbError> {
    header.validate()?;
    let mut bytes = header.to_bytes();
    if let Some(block) = &meta.signing {
        bytes[pirq_shared::signing::BLOCK].copy_from_slice(&block.to_block());
        header.signing(&bytes)?;
    }
    if let Some(layout) = &meta.kv {
        bytes[pirq_shared::kv::BLOCK].copy_from_slice(&layout.to_block());
        header.kv_params(&bytes)?;
    }
    check_data_len(meta.data_len, total_pages, header.usable(&bytes))?;
    bytes[DATA_LEN_AT..DATA_LEN_AT + 8].copy_from_slice(&meta.data_len.to_le_bytes());
    Ok(bytes)
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

/// Where a shard file records the part of a database it holds: header bytes 512..544
/// (`docs/spec/v1.md` §2.2). Zero in every other file.
pub const SHARD_BLOCK: std::ops::Range<usize> = 512..544;
const SHARD_MAGIC: [u8; 8] = *b"PIRQSHRD";

/// The part of a database a shard file holds: its pages are database pages
/// `first_page .. first_page + num_pages` of a `total_pages`-page database, shard `spec`'s range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardOrigin {
    pub spec: pirq_shared::shard::ShardSpec,
    pub first_page: u64,
    pub total_pages: u64,
}

impl ShardOrigin {
    /// The 32 bytes of the block: magic, index (u32 LE), count (u32 LE), first page (u64 LE),
    /// total pages (u64 LE).
    pub fn to_block(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        out[..8].copy_from_slice(&SHARD_MAGIC);
        out[8..12].copy_from_slice(&self.spec.index.to_le_bytes());
        out[12..16].copy_from_slice(&self.spec.count.to_le_bytes());
        out[16..24].copy_from_slice(&self.first_page.to_le_bytes());
        out[24..32].copy_from_slice(&self.total_pages.to_le_bytes());
        out
    }

    /// The block of header `bytes`, checked against the header: `None` when it is all zero.
    pub fn from_header(bytes: &[u8], header: &Header) -> Result<Option<ShardOrigin>, DbError> {
        let block = &bytes[SHARD_BLOCK];
        if block.iter().all(|b| *b == 0) {
            return Ok(None);
        }
        let bad = |m: String| Err(DbError::Shard(m));
        if block[..8] != SHARD_MAGIC {
            return bad("unknown magic (not written by pirq db split)".into());
        }
        let u32_at = |o: usize| u32::from_le_bytes(block[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(block[o..o + 8].try_into().unwrap());
        let spec = match pirq_shared::shard::ShardSpec::new(u32_at(8), u32_at(12)) {
            Ok(s) => s,
            Err(e) => return bad(e.to_string()),
        };
        let origin = ShardOrigin {
            spec,
            first_page: u64_at(16),
            total_pages: u64_at(24),
        };
        // The pages the file holds, unless the block's first page puts their end past u64.
        let held =
            (origin.first_page.checked_add(header.num_pages)).map(|end| origin.first_page..end);
        match spec.range(origin.total_pages) {
            Ok(r) if Some(&r) == held.as_ref() => Ok(Some(origin)),
            Ok(r) => bad(format!(
                "shard {spec} of {} pages is pages {r:?}, the file holds {} pages from {}",
                origin.total_pages, header.num_pages, origin.first_page
            )),
            Err(e) => bad(e.to_string()),
        }
    }
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
