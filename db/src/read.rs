//! Reading a `.pirdb` file: a read-only mapping whose header was checked, its digests, and
//! private copy-on-write mappings for tools that change pages in memory.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut, MmapOptions};
use pirq_shared::digest::Digest;
use pirq_shared::kv::KvParams;

use crate::format::HEADER_LEN;
use crate::{DbError, Header, Meta, ShardOrigin};

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

    /// Hashes the header's shape and every page (SPEC §2.1): what [`crate::write()`] records. A file made
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
