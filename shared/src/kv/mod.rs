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

pub mod encoding;
pub mod hash;
pub mod layout;
pub mod page;
pub mod table;

pub use encoding::{Encoding, Encodings};
pub use hash::{Candidates, Tag, TAG_LEN};
pub use layout::{KvInfo, KvLayout, KvParams, ValueKind, BLOCK, MAGIC as KV_MAGIC};
pub use table::{PlaceError, Table};

/// Why a layout, a key or a value was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    #[error("kv layout: bad magic {found:02x?} (expected \"PIRQKV\\0\\x01\")")]
    BadMagic { found: [u8; 8] },
    #[error("kv layout: choices {0} outside 2..=4")]
    Choices(u8),
    #[error("kv layout: value kind byte {0} (version 1: 0, fixed; version 2: 1 set, 2 variable)")]
    ValueKind(u8),
    #[error(
        "kv layout: {} value size {value_size} {}",
        kind.name(),
        value_size_problem(*kind, *value_size, *slot_size, *usable)
    )]
    ValueSize {
        kind: ValueKind,
        value_size: u32,
        slot_size: u64,
        usable: u32,
    },
    #[error("kv layout: key size {0} above {max}", max = layout::MAX_KEY_LEN)]
    KeySize(u32),
    #[error("kv layout: {num_pages} pages are fewer than the {choices} choices")]
    TooFewPages { num_pages: u64, choices: u8 },
    #[error(
        "kv layout: byte {code} at header offset {offset} is no {} encoding this reader knows",
        if *offset == 74 { "key" } else { "value" }
    )]
    Encoding { offset: usize, code: u8 },
    #[error("kv layout: reserved byte at header offset {offset} is not zero")]
    Reserved { offset: usize },
    #[error("key is {got} bytes, this table's keys are {expected}")]
    KeyLength { got: usize, expected: usize },
    #[error("key is {0} bytes: keys are 1..={max} bytes", max = layout::MAX_KEY_LEN)]
    KeyBounds(usize),
    #[error("{}", value_length_problem(*kind, *got, *expected))]
    ValueLength {
        kind: ValueKind,
        got: usize,
        expected: usize,
    },
    /// A fetched page's slot claims a value longer than the table's largest: the page is not
    /// what the builder wrote.
    #[error("malformed slot: value length {len} above the table's largest value, {max} bytes")]
    SlotLength { len: usize, max: usize },
}

fn value_size_problem(kind: ValueKind, value_size: u32, slot_size: u64, usable: u32) -> String {
    match kind {
        ValueKind::Set if value_size != 0 => "(a set has no values: 0)".into(),
        ValueKind::Fixed | ValueKind::Variable if value_size == 0 => {
            "(a table of values needs >= 1; a set is --value-size 0)".into()
        }
        _ => format!("leaves no room for a {slot_size}-byte slot in {usable} usable page bytes"),
    }
}

fn value_length_problem(kind: ValueKind, got: usize, expected: usize) -> String {
    match kind {
        ValueKind::Fixed => format!("value is {got} bytes, this table's values are {expected}"),
        ValueKind::Set => format!("value is {got} bytes: this table is a set (keys only)"),
        ValueKind::Variable => {
            format!("value is {got} bytes, this table's values are at most {expected}")
        }
    }
}
