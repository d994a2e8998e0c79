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

//! - [`PirDb`] reads a file (`read`), [`Header`] is its first 4096 bytes (`header`), the
//!   writers (`write`) put whole files in place; [`DbError`] says why one was refused.

mod error;
mod format;
mod header;
pub mod import;
pub mod outfile;
mod read;
pub mod tempfiles;
mod write;

pub use error::DbError;
pub use format::{
    DATA_LEN_AT, DEFAULT_PAGE_SIZE, DIGEST_RANGE, HEADER_LEN, MAGIC, MAX_PAGES, MAX_PAGE_SIZE,
    MIN_PAGE_SIZE, PAGES_DIGEST_RANGE, SHARD_BLOCK,
};
pub use header::{check_data_len, check_epoch, Header, Meta, ShardOrigin};
pub use read::{PirDb, PrivatePages};
pub use write::{
    ensure_not_an_input, write, write_atomically, write_atomically_as, write_atomically_with,
    write_kv, write_meta, write_shard, write_with_digest, MappedWriter,
};
