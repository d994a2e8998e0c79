//! Why a database file or header was refused, one error type for the crate (`pirq` prints it,
//! the worker refuses to start with it).

use std::io;
use std::path::PathBuf;

use pirq_shared::digest::Digest;
use pirq_shared::update::MAX_EPOCH;

use crate::format::HEADER_LEN;

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
