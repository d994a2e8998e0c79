//! The kv layout block (KV §2) and the geometry it gives a database ([`KvParams`]).
//!
//! The block lives in `.pirdb` header bytes 64..512 so that the layout travels with the pages:
//! a worker reads it with the header and registers it, and `/v1/info` hands it to clients. An
//! all-zero block means a plain page database.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::hash::{self, Candidates, Tag, TAG_LEN};
use super::page;
use super::KvError;

/// Header bytes of the layout block.
pub const BLOCK: Range<usize> = 64..512;
/// First 8 bytes of a layout block, version 1.
pub const MAGIC: [u8; 8] = *b"PIRQKV\0\x01";
/// Longest key, in bytes (a table with `key_size = 0` takes any length in `1..=MAX_KEY_LEN`).
pub const MAX_KEY_LEN: u32 = 1024;

// Field offsets inside the header (KV §2).
const CHOICES: usize = 72;
const VALUE_SIZE: usize = 76;
const KEY_SIZE: usize = 80;
const SEED: Range<usize> = 88..120;

/// The fields of a layout block: everything a client needs besides the page geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayout {
    /// `d`: candidate pages per key, 2..=4.
    pub choices: u8,
    /// Bytes of every value.
    pub value_size: u32,
    /// Bytes of every key, or 0 when keys may have any length in `1..=MAX_KEY_LEN`.
    pub key_size: u32,
    /// Keys the hashes (KV §3); public, chosen by the builder.
    pub seed: [u8; 32],
}

impl KvLayout {
    /// The 448 bytes of header offsets 64..512.
    pub fn to_block(&self) -> [u8; 448] {
        let mut header = [0u8; 512];
        header[64..72].copy_from_slice(&MAGIC);
        header[CHOICES] = self.choices;
        header[VALUE_SIZE..VALUE_SIZE + 4].copy_from_slice(&self.value_size.to_le_bytes());
        header[KEY_SIZE..KEY_SIZE + 4].copy_from_slice(&self.key_size.to_le_bytes());
        header[SEED].copy_from_slice(&self.seed);
        header[BLOCK].try_into().expect("448 bytes")
    }

    /// Parses the block from a header (at least 512 bytes): `None` when the block is all zero
    /// (a plain page database). Geometry checks are [`KvParams::new`]'s.
    pub fn from_header(header: &[u8]) -> Result<Option<KvLayout>, KvError> {
        let block = &header[BLOCK];
        if block.iter().all(|b| *b == 0) {
            return Ok(None);
        }
        let found: [u8; 8] = header[64..72].try_into().expect("8 bytes");
        if found != MAGIC {
            return Err(KvError::BadMagic { found });
        }
        let u32_at = |o: usize| u32::from_le_bytes(header[o..o + 4].try_into().expect("4 bytes"));
        for reserved in [73..76, 84..88, SEED.end..BLOCK.end] {
            if let Some(i) = header[reserved.clone()].iter().position(|b| *b != 0) {
                return Err(KvError::Reserved {
                    offset: reserved.start + i,
                });
            }
        }
        let layout = KvLayout {
            choices: header[CHOICES],
            value_size: u32_at(VALUE_SIZE),
            key_size: u32_at(KEY_SIZE),
            seed: header[SEED].try_into().expect("32 bytes"),
        };
        Ok(Some(layout))
    }
}

/// A layout on a database of `num_pages` pages of `page_size` bytes: the hashes and the slot
/// geometry, checked once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvParams {
    pub layout: KvLayout,
    pub page_size: u32,
    pub num_pages: u64,
}

impl KvParams {
    /// Checks the layout against the page geometry (KV §2).
    pub fn new(layout: KvLayout, page_size: u32, num_pages: u64) -> Result<KvParams, KvError> {
        if !(2..=4).contains(&layout.choices) {
            return Err(KvError::Choices(layout.choices));
        }
        if layout.value_size == 0 || layout.value_size as u64 + TAG_LEN as u64 > page_size as u64 {
            return Err(KvError::ValueSize {
                value_size: layout.value_size,
                page_size,
            });
        }
        if layout.key_size > MAX_KEY_LEN {
            return Err(KvError::KeySize(layout.key_size));
        }
        if num_pages < layout.choices as u64 {
            return Err(KvError::TooFewPages {
                num_pages,
                choices: layout.choices,
            });
        }
        Ok(KvParams {
            layout,
            page_size,
            num_pages,
        })
    }

    pub fn choices(&self) -> usize {
        self.layout.choices as usize
    }

    pub fn value_size(&self) -> usize {
        self.layout.value_size as usize
    }

    /// Tag then value.
    pub fn slot_size(&self) -> usize {
        TAG_LEN + self.value_size()
    }

    /// `floor(page_size / slot_size)`; the rest of a page stays zero.
    pub fn slots_per_page(&self) -> usize {
        self.page_size as usize / self.slot_size()
    }

    /// Records the table holds when every slot is full.
    pub fn capacity(&self) -> u64 {
        self.num_pages * self.slots_per_page() as u64
    }

    /// Checks a key's length against the layout.
    pub fn check_key(&self, key: &[u8]) -> Result<(), KvError> {
        let expected = self.layout.key_size as usize;
        if expected != 0 && key.len() != expected {
            return Err(KvError::KeyLength {
                got: key.len(),
                expected,
            });
        }
        if key.is_empty() || key.len() > MAX_KEY_LEN as usize {
            return Err(KvError::KeyBounds(key.len()));
        }
        Ok(())
    }

    /// Checks a value's length against the layout.
    pub fn check_value(&self, value: &[u8]) -> Result<(), KvError> {
        if value.len() != self.value_size() {
            return Err(KvError::ValueLength {
                got: value.len(),
                expected: self.value_size(),
            });
        }
        Ok(())
    }

    /// The key's tag (KV §3.1).
    pub fn tag(&self, key: &[u8]) -> Tag {
        hash::tag(&self.layout.seed, key)
    }

    /// The tag's `d` distinct candidate pages, in order (KV §3.2).
    pub fn candidates(&self, tag: &Tag) -> Candidates {
        hash::candidates(&self.layout.seed, tag, self.layout.choices, self.num_pages)
    }

    /// The value stored under `tag` in `page`, if any (KV §4).
    pub fn find<'p>(&self, page: &'p [u8], tag: &Tag) -> Option<&'p [u8]> {
        page::find(page, self.slot_size(), tag)
            .map(|slot| page::value(page, self.slot_size(), slot))
    }

    /// What `/v1/info` advertises (KV §5).
    pub fn info(&self) -> KvInfo {
        KvInfo {
            version: 1,
            choices: self.layout.choices,
            tag_size: TAG_LEN as u32,
            value_size: self.layout.value_size,
            key_size: self.layout.key_size,
            slot_size: self.slot_size() as u32,
            slots_per_page: self.slots_per_page() as u32,
            seed: hex::encode(self.layout.seed),
        }
    }
}

/// The `"kv"` object of `/v1/info` (KV §5): the layout block's fields plus the derived slot
/// geometry, so a client can check its own arithmetic. Also what workers register in Redis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvInfo {
    /// Layout version (the last byte of the block's magic): 1.
    pub version: u8,
    pub choices: u8,
    pub tag_size: u32,
    pub value_size: u32,
    /// 0 = keys of any length in `1..=1024`.
    pub key_size: u32,
    pub slot_size: u32,
    pub slots_per_page: u32,
    /// The 32-byte hash seed, lowercase hex.
    pub seed: String,
}

impl KvInfo {
    /// The layout this info describes, checked against the database geometry (and its own
    /// derived fields).
    pub fn params(&self, page_size: u32, num_pages: u64) -> Result<KvParams, String> {
        if self.version != 1 {
            return Err(format!(
                "kv layout version {} (this client knows 1)",
                self.version
            ));
        }
        let seed: [u8; 32] = hex::decode(&self.seed)
            .ok()
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| "kv seed is not 32 bytes of hex".to_string())?;
        let params = KvParams::new(
            KvLayout {
                choices: self.choices,
                value_size: self.value_size,
                key_size: self.key_size,
                seed,
            },
            page_size,
            num_pages,
        )
        .map_err(|e| e.to_string())?;
        if params.info() != *self {
            return Err(format!(
                "kv info is inconsistent: derived {:?}, advertised {:?}",
                params.info(),
                self
            ));
        }
        Ok(params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> KvLayout {
        KvLayout {
            choices: 3,
            value_size: 32,
            key_size: 20,
            seed: std::array::from_fn(|i| i as u8 + 1),
        }
    }

    fn header_with(block: &[u8; 448]) -> Vec<u8> {
        let mut h = vec![0u8; 4096];
        h[BLOCK].copy_from_slice(block);
        h
    }

    #[test]
    fn block_round_trips() {
        let h = header_with(&layout().to_block());
        assert_eq!(&h[64..72], b"PIRQKV\0\x01");
        assert_eq!(h[72], 3);
        assert_eq!(&h[76..80], &32u32.to_le_bytes());
        assert_eq!(&h[80..84], &20u32.to_le_bytes());
        assert_eq!(h[88], 1);
        assert_eq!(KvLayout::from_header(&h), Ok(Some(layout())));
    }

    #[test]
    fn zero_block_is_a_page_database() {
        assert_eq!(KvLayout::from_header(&[0u8; 4096]), Ok(None));
    }

    #[test]
    fn bad_blocks_are_named() {
        let mut h = header_with(&layout().to_block());
        h[64] = b'X';
        assert!(matches!(
            KvLayout::from_header(&h),
            Err(KvError::BadMagic { .. })
        ));
        for offset in [73, 85, 120, 511] {
            let mut h = header_with(&layout().to_block());
            h[offset] = 1;
            assert_eq!(KvLayout::from_header(&h), Err(KvError::Reserved { offset }));
        }
    }

    #[test]
    fn geometry_is_checked() {
        let ok = KvParams::new(layout(), 4096, 100).unwrap();
        assert_eq!(ok.slot_size(), 48);
        assert_eq!(ok.slots_per_page(), 85);
        assert_eq!(ok.capacity(), 8500);
        let with = |f: &dyn Fn(&mut KvLayout)| {
            let mut l = layout();
            f(&mut l);
            KvParams::new(l, 4096, 100)
        };
        assert_eq!(with(&|l| l.choices = 1), Err(KvError::Choices(1)));
        assert_eq!(with(&|l| l.choices = 5), Err(KvError::Choices(5)));
        assert!(matches!(
            with(&|l| l.value_size = 0),
            Err(KvError::ValueSize { .. })
        ));
        assert!(matches!(
            with(&|l| l.value_size = 4081),
            Err(KvError::ValueSize { .. })
        ));
        assert!(with(&|l| l.value_size = 4080).is_ok());
        assert_eq!(with(&|l| l.key_size = 1025), Err(KvError::KeySize(1025)));
        assert_eq!(
            KvParams::new(layout(), 4096, 2),
            Err(KvError::TooFewPages {
                num_pages: 2,
                choices: 3
            })
        );
    }

    #[test]
    fn keys_and_values_are_checked() {
        let p = KvParams::new(layout(), 4096, 100).unwrap();
        assert!(p.check_key(&[1; 20]).is_ok());
        assert_eq!(
            p.check_key(&[1; 19]),
            Err(KvError::KeyLength {
                got: 19,
                expected: 20
            })
        );
        let any = KvParams::new(
            KvLayout {
                key_size: 0,
                ..layout()
            },
            4096,
            100,
        )
        .unwrap();
        assert!(any.check_key(&[1; 7]).is_ok());
        assert_eq!(any.check_key(&[]), Err(KvError::KeyBounds(0)));
        assert_eq!(any.check_key(&[0; 1025]), Err(KvError::KeyBounds(1025)));
        assert!(p.check_value(&[0; 32]).is_ok());
        assert!(p.check_value(&[0; 31]).is_err());
    }

    #[test]
    fn info_round_trips_and_is_checked() {
        let p = KvParams::new(layout(), 4096, 100).unwrap();
        let info = p.info();
        assert_eq!(info.params(4096, 100), Ok(p));
        let json = serde_json::to_string(&info).unwrap();
        let back: KvInfo = serde_json::from_str(&json).unwrap();
        assert_eq!(back, info);
        let mut wrong = info.clone();
        wrong.slots_per_page = 84;
        assert!(wrong.params(4096, 100).is_err());
        let mut wrong = info;
        wrong.seed.pop();
        assert!(wrong.params(4096, 100).is_err());
    }
}
