//! Where each part of a `.pirdb` file sits, and the limits of its fields (SPEC §2): the
//! numbers the header, the reader, the writers and the error messages share.

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
/// Where a shard file records the part of a database it holds: header bytes 512..544
/// (`docs/spec/v1.md` §2.2). Zero in every other file.
pub const SHARD_BLOCK: std::ops::Range<usize> = 512..544;
