//! The header of a `.pirdb` file (SPEC §2): its fields, the blocks beside them (the digests,
//! the imported length, the shard block; the signing and kv blocks are `pirq-shared`'s), and the
//! checks a header must pass before a byte of its pages is read.

use pirq_shared::digest::Digest;
use pirq_shared::kv::{KvLayout, KvParams};
use pirq_shared::update::MAX_EPOCH;

use crate::format::{
    DATA_LEN_AT, DIGEST_RANGE, HEADER_LEN, MAGIC, MAX_PAGES, MAX_PAGE_SIZE, MIN_PAGE_SIZE,
    PAGES_DIGEST_RANGE, SHARD_BLOCK,
};
use crate::DbError;

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

/// The header bytes with `meta`'s blocks, checked against the geometry (`total_pages`: of the
/// whole database, for a shard file).
pub(crate) fn header_bytes(
    header: &Header,
    meta: &Meta,
    total_pages: u64,
) -> Result<Vec<u8>, DbError> {
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
