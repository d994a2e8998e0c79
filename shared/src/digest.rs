//! The database digest (SPEC §2.1): one 32-byte BLAKE3 value that names a database's contents at
//! an epoch, so a client can tell that two parties answer from the same pages before it XORs
//! their answers (answers from different contents combine into a wrong page that looks fine).
//!
//! It is a *chain*, not a hash of the current pages, so that nothing ever costs a pass:
//!
//! - a file written from pages (`pirq db gen`, every tool that uses `pirq_db::write`) gets
//!   its [`content`](Digest::content) digest, hashed while the pages are written, and records it
//!   in header bytes 32..64;
//! - epoch `e` has digest [`next`](Digest::next)`(digest of e - 1, update e)`: a worker computes
//!   it from the updates stream alone, without reading a page (and so can a worker that holds
//!   only a range of pages); `pirq db apply` writes the chained digest into the snapshot's
//!   header, so a worker started from that snapshot agrees with one that followed the stream.
//!
//! Two databases with the same pages but different histories therefore have different digests:
//! that errs on the side of refusing, never of combining.

use std::fmt;

use bincode::{Decode, Encode};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::update::EpochUpdate;

/// Domain separation of a file's content digest.
pub const CONTENT_CONTEXT: &[u8] = b"pirq.pirdb.v1.content";
/// Domain separation of one epoch step of the chain.
pub const EPOCH_CONTEXT: &[u8] = b"pirq.pirdb.v1.epoch";

/// Bytes hashed per call in [`Digest::content`]: large enough for BLAKE3's rayon split to pay.
const CONTENT_CHUNK: usize = 64 << 20;

/// A database digest. JSON: 64 lowercase hex digits; bincode: the 32 bytes as they are.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Encode, Decode)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// Starts the content digest of a database of this shape (SPEC §2.1); feed it every page in
    /// order with [`ContentHasher::update`].
    pub fn content_hasher(page_size: u32, num_pages: u64, epoch: u64) -> ContentHasher {
        let mut hasher = blake3::Hasher::new();
        hasher.update(CONTENT_CONTEXT);
        hasher.update(&page_size.to_le_bytes());
        hasher.update(&num_pages.to_le_bytes());
        hasher.update(&epoch.to_le_bytes());
        ContentHasher(hasher)
    }

    /// The content digest of a whole database held in memory (or mapped): shape, then pages.
    pub fn content(page_size: u32, num_pages: u64, epoch: u64, pages: &[u8]) -> Digest {
        let mut h = Digest::content_hasher(page_size, num_pages, epoch);
        for chunk in pages.chunks(CONTENT_CHUNK) {
            h.update(chunk);
        }
        h.finish()
    }

    /// The digest at `update.epoch`, given `self` at `update.epoch - 1` (SPEC §2.1). Pages are
    /// taken in the order the update is applied: ascending index, the last write of an index
    /// winning, so an update written in JSON or bincode, with or without repeats, chains alike.
    pub fn next(&self, update: &EpochUpdate) -> Digest {
        let mut latest = std::collections::BTreeMap::new();
        for w in &update.pages {
            latest.insert(w.index, &w.page);
        }
        let mut hasher = blake3::Hasher::new();
        hasher.update(EPOCH_CONTEXT);
        hasher.update(&self.0);
        hasher.update(&update.epoch.to_le_bytes());
        hasher.update(&(latest.len() as u64).to_le_bytes());
        for (index, page) in latest {
            hasher.update(&index.to_le_bytes());
            hasher.update(page);
        }
        Digest(*hasher.finalize().as_bytes())
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 64 hex digits.
    pub fn from_hex(text: &str) -> Option<Digest> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(text, &mut out).ok()?;
        Some(Digest(out))
    }

    /// The first 12 hex digits: enough to tell digests apart in a message.
    pub fn short(&self) -> String {
        self.to_hex()[..12].to_string()
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.to_hex())
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Digest, D::Error> {
        let text = String::deserialize(d)?;
        Digest::from_hex(&text)
            .ok_or_else(|| serde::de::Error::custom("a digest is 64 hexadecimal digits"))
    }
}

/// A content digest being computed (see [`Digest::content_hasher`]).
pub struct ContentHasher(blake3::Hasher);

impl ContentHasher {
    /// Adds the next pages; with the `parallel` feature (the database crate's), large inputs
    /// are hashed on all cores. The digest is the same either way.
    pub fn update(&mut self, pages: &[u8]) {
        #[cfg(feature = "parallel")]
        if pages.len() >= 1 << 20 {
            self.0.update_rayon(pages);
            return;
        }
        self.0.update(pages);
    }

    pub fn finish(&self) -> Digest {
        Digest(*self.0.finalize().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::update::PageWrite;

    #[test]
    fn content_is_streaming_invariant() {
        let pages: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i * 7) as u8).collect();
        let whole = Digest::content(1024, 3 * 1024, 0, &pages);
        let mut h = Digest::content_hasher(1024, 3 * 1024, 0);
        for chunk in pages.chunks(123_457) {
            h.update(chunk);
        }
        assert_eq!(h.finish(), whole);
        // Shape and epoch are part of it.
        assert_ne!(Digest::content(1024, 3 * 1024, 1, &pages), whole);
        assert_ne!(Digest::content(2048, 3 * 512, 0, &pages), whole);
    }

    #[test]
    fn next_takes_the_last_write_in_index_order() {
        let base = Digest([7; 32]);
        let w = |index, byte| PageWrite {
            index,
            page: vec![byte; 256],
        };
        let a = EpochUpdate {
            epoch: 1,
            pages: vec![w(5, 1), w(2, 9), w(5, 3)],
        };
        let b = EpochUpdate {
            epoch: 1,
            pages: vec![w(2, 9), w(5, 3)],
        };
        assert_eq!(base.next(&a), base.next(&b));
        let c = EpochUpdate {
            epoch: 1,
            pages: vec![w(2, 9), w(5, 1)],
        };
        assert_ne!(base.next(&a), base.next(&c));
        assert_ne!(base.next(&a), Digest([8; 32]).next(&a));
        assert_ne!(
            base.next(&a),
            base.next(&EpochUpdate {
                epoch: 2,
                ..a.clone()
            })
        );
    }

    #[test]
    fn encodings() {
        let d = Digest([0xab; 32]);
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, format!("\"{}\"", "ab".repeat(32)));
        assert_eq!(serde_json::from_str::<Digest>(&json).unwrap(), d);
        assert!(serde_json::from_str::<Digest>("\"abc\"").is_err());
        // bincode: the 32 bytes, no length prefix.
        let bytes = bincode::encode_to_vec(d, bincode::config::standard()).unwrap();
        assert_eq!(bytes, vec![0xab; 32]);
        assert_eq!(Digest::from_hex(&d.to_hex()), Some(d));
    }
}
