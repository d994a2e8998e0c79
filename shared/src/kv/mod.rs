//! Key-value lookups over the page database (`docs/spec/kv.md`, "KV"): records placed in pages
//! by cuckoo hashing, so that a client fetches a key's `d` candidate pages privately and finds
//! its value in one of them.
//!
//! - [`layout`]: the layout block in `.pirdb` header bytes 64..512 (KV §2) and the geometry it
//!   implies for a database ([`KvParams`]).
//! - [`hash`]: a key's tag and a tag's candidate pages (KV §3), SHA-256 so that a browser can
//!   compute them with WebCrypto alone.
//! - [`page`]: slots inside one page (KV §4): find a tag, add, remove.
//! - [`table`]: cuckoo placement over a whole writable table of pages (build and update).
//!
//! The page file itself is the cuckoo table: a slot stores its record's tag, and candidates are
//! derived from the tag, so moving a record during eviction needs nothing but the page it is in.

pub mod hash;
pub mod layout;
pub mod page;
pub mod table;

pub use hash::{Candidates, Tag, TAG_LEN};
pub use layout::{KvInfo, KvLayout, KvParams, BLOCK, MAGIC as KV_MAGIC};
pub use table::{PlaceError, Table};

/// Why a layout, a key or a value was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    #[error("kv layout: bad magic {found:02x?} (expected \"PIRQKV\\0\\x01\")")]
    BadMagic { found: [u8; 8] },
    #[error("kv layout: choices {0} outside 2..=4")]
    Choices(u8),
    #[error("kv layout: value size {value_size} leaves no room for a {slot}-byte slot in a {page_size}-byte page", slot = value_size + TAG_LEN as u32)]
    ValueSize { value_size: u32, page_size: u32 },
    #[error("kv layout: key size {0} above {max}", max = layout::MAX_KEY_LEN)]
    KeySize(u32),
    #[error("kv layout: {num_pages} pages are fewer than the {choices} choices")]
    TooFewPages { num_pages: u64, choices: u8 },
    #[error("kv layout: reserved byte at header offset {offset} is not zero")]
    Reserved { offset: usize },
    #[error("key is {got} bytes, this table's keys are {expected}")]
    KeyLength { got: usize, expected: usize },
    #[error("key is {0} bytes: keys are 1..={max} bytes", max = layout::MAX_KEY_LEN)]
    KeyBounds(usize),
    #[error("value is {got} bytes, this table's values are {expected}")]
    ValueLength { got: usize, expected: usize },
}
