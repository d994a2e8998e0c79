//! The kv layout block (KV §2) and the geometry it gives a database ([`KvParams`]).
//!
//! The block lives in `.pirdb` header bytes 64..512 so that the layout travels with the pages:
//! a worker reads it with the header and registers it, and `/v1/info` hands it to clients. An
//! all-zero block means a plain page database.
//!
//! Three kinds of table share the block (KV §2): fixed-size values (layout version 1, as first
//! specified), sets (no values) and variable-size values (a length in every slot); the last two
//! are layout version 2, so a client that knows only version 1 refuses them by version.

use std::borrow::Cow;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::encoding::{Encoding, Encodings};
use super::hash::{self, Candidates, Tag, TAG_LEN};
use super::page;
use super::KvError;

/// Header bytes of the layout block.
pub const BLOCK: Range<usize> = 64..512;
/// First 8 bytes of a layout block, version 1 (fixed-size values only).
pub const MAGIC: [u8; 8] = *b"PIRQKV\0\x01";
/// First 8 bytes of a layout block, version 2 (any [`ValueKind`]).
pub const MAGIC_V2: [u8; 8] = *b"PIRQKV\0\x02";
/// Longest key, in bytes (a table with `key_size = 0` takes any length in `1..=MAX_KEY_LEN`).
pub const MAX_KEY_LEN: u32 = 1024;

/// Bytes of the length field before a variable-size value (KV §4): a u16, since a value is
/// shorter than a page (at most 65536 bytes).
pub const LEN_FIELD: usize = 2;

// Field offsets inside the header (KV §2).
const CHOICES: usize = 72;
const VALUE_KIND: usize = 73;
const KEY_ENCODING: usize = 74;
const VALUE_ENCODING: usize = 75;
const VALUE_SIZE: usize = 76;
const KEY_SIZE: usize = 80;
const SEED: Range<usize> = 88..120;

/// What a table stores beside each key (KV §2 `value_kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueKind {
    /// Every value has `value_size` bytes.
    Fixed,
    /// No values: a membership table (`value_size` 0).
    Set,
    /// Values of 0..=`value_size` bytes, each slot holding its value's length.
    Variable,
}

impl ValueKind {
    /// The block's byte.
    pub fn code(self) -> u8 {
        match self {
            ValueKind::Fixed => 0,
            ValueKind::Set => 1,
            ValueKind::Variable => 2,
        }
    }

    fn from_code(code: u8) -> Option<ValueKind> {
        match code {
            0 => Some(ValueKind::Fixed),
            1 => Some(ValueKind::Set),
            2 => Some(ValueKind::Variable),
            _ => None,
        }
    }

    /// The name `/v1/info` uses (KV §5).
    pub fn name(self) -> &'static str {
        match self {
            ValueKind::Fixed => "fixed",
            ValueKind::Set => "set",
            ValueKind::Variable => "variable",
        }
    }

    fn from_name(name: &str) -> Option<ValueKind> {
        [ValueKind::Fixed, ValueKind::Set, ValueKind::Variable]
            .into_iter()
            .find(|k| k.name() == name)
    }

    /// The layout version a builder writes for this kind: 1 for fixed values (readable by every
    /// client), 2 for the kinds version 1 did not have.
    pub fn version(self) -> u8 {
        match self {
            ValueKind::Fixed => 1,
            ValueKind::Set | ValueKind::Variable => 2,
        }
    }
}

/// The fields of a layout block: everything a client needs besides the page geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayout {
    /// `d`: candidate pages per key, 2..=4.
    pub choices: u8,
    /// Fixed values, a set, or variable-size values.
    pub kind: ValueKind,
    /// Fixed: bytes of every value. Set: 0. Variable: the largest value's bytes.
    pub value_size: u32,
    /// Bytes of every key, or 0 when keys may have any length in `1..=MAX_KEY_LEN`.
    pub key_size: u32,
    /// Keys the hashes (KV §3); public, chosen by the builder.
    pub seed: [u8; 32],
    /// How the records' keys and values were written (KV §2 bytes 74 and 75), so readers take
    /// a key and print a value the same way; not recorded in tables built before them.
    pub encodings: Encodings,
}

impl KvLayout {
    /// The 448 bytes of header offsets 64..512.
    pub fn to_block(&self) -> [u8; 448] {
        let mut header = [0u8; 512];
        header[64..72].copy_from_slice(match self.kind.version() {
            1 => &MAGIC,
            _ => &MAGIC_V2,
        });
        header[CHOICES] = self.choices;
        header[VALUE_KIND] = self.kind.code();
        header[KEY_ENCODING] = self.encodings.key.map_or(0, Encoding::code);
        header[VALUE_ENCODING] = self.encodings.value.map_or(0, Encoding::code);
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
        let version = match found {
            MAGIC => 1,
            MAGIC_V2 => 2,
            _ => return Err(KvError::BadMagic { found }),
        };
        let u32_at = |o: usize| u32::from_le_bytes(header[o..o + 4].try_into().expect("4 bytes"));
        for reserved in [84..88, SEED.end..BLOCK.end] {
            if let Some(i) = header[reserved.clone()].iter().position(|b| *b != 0) {
                return Err(KvError::Reserved {
                    offset: reserved.start + i,
                });
            }
        }
        // Version 1 had no kinds: its byte 73 was reserved (zero, i.e. fixed values).
        let kind = match (version, ValueKind::from_code(header[VALUE_KIND])) {
            (1, Some(ValueKind::Fixed)) => ValueKind::Fixed,
            (1, _) => return Err(KvError::Reserved { offset: VALUE_KIND }),
            (_, Some(kind)) if kind.version() == version => kind,
            _ => return Err(KvError::ValueKind(header[VALUE_KIND])),
        };
        let encoding_at = |offset: usize| {
            Encoding::from_code(header[offset]).map_err(|code| KvError::Encoding { offset, code })
        };
        let encodings = Encodings {
            key: encoding_at(KEY_ENCODING)?,
            value: encoding_at(VALUE_ENCODING)?,
        };
        if encodings.key.is_some_and(|e| !e.for_keys()) {
            return Err(KvError::Encoding {
                offset: KEY_ENCODING,
                code: header[KEY_ENCODING],
            });
        }
        let layout = KvLayout {
            choices: header[CHOICES],
            kind,
            value_size: u32_at(VALUE_SIZE),
            key_size: u32_at(KEY_SIZE),
            seed: header[SEED].try_into().expect("32 bytes"),
            encodings,
        };
        Ok(Some(layout))
    }

    /// Bytes of a slot (KV §2): the tag, then per kind the value, nothing, or a length and
    /// room for the largest value.
    pub fn slot_size(&self) -> usize {
        TAG_LEN
            + match self.kind {
                ValueKind::Fixed => self.value_size as usize,
                ValueKind::Set => 0,
                ValueKind::Variable => LEN_FIELD + self.value_size as usize,
            }
    }
}

/// A layout on a database of `num_pages` pages of `page_size` bytes, of which the first
/// `usable` carry slots (SPEC §2.5: the rest is a signed page's signature tail): the hashes and
/// the slot geometry, checked once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvParams {
    pub layout: KvLayout,
    pub page_size: u32,
    /// Bytes at the start of a page that hold slots: `page_size` less the signature tail.
    pub usable: u32,
    pub num_pages: u64,
}

impl KvParams {
    /// Checks the layout against the page geometry of an unsigned database (KV §2).
    pub fn new(layout: KvLayout, page_size: u32, num_pages: u64) -> Result<KvParams, KvError> {
        Self::with_tail(layout, page_size, 0, num_pages)
    }

    /// [`KvParams::new`] for pages whose last `tail_len` bytes are a signature tail (SPEC
    /// §2.4): slots fill the first `page_size - tail_len` bytes.
    pub fn with_tail(
        layout: KvLayout,
        page_size: u32,
        tail_len: u32,
        num_pages: u64,
    ) -> Result<KvParams, KvError> {
        if !(2..=4).contains(&layout.choices) {
            return Err(KvError::Choices(layout.choices));
        }
        let usable = page_size.saturating_sub(tail_len);
        let value_ok = match layout.kind {
            ValueKind::Set => layout.value_size == 0,
            ValueKind::Fixed | ValueKind::Variable => layout.value_size >= 1,
        };
        if !value_ok || layout.slot_size() as u64 > usable as u64 {
            return Err(KvError::ValueSize {
                kind: layout.kind,
                value_size: layout.value_size,
                slot_size: layout.slot_size() as u64,
                usable,
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
            usable,
            num_pages,
        })
    }

    pub fn kind(&self) -> ValueKind {
        self.layout.kind
    }

    pub fn choices(&self) -> usize {
        self.layout.choices as usize
    }

    /// Fixed: bytes of every value; set: 0; variable: the largest value.
    pub fn value_size(&self) -> usize {
        self.layout.value_size as usize
    }

    /// Tag then what the kind stores (KV §2).
    pub fn slot_size(&self) -> usize {
        self.layout.slot_size()
    }

    /// `floor(usable / slot_size)`; the rest of a page's usable bytes stays zero.
    pub fn slots_per_page(&self) -> usize {
        self.usable as usize / self.slot_size()
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

    /// Checks a value's length against the layout: exactly `value_size` bytes (fixed), none
    /// (set), at most `value_size` (variable).
    pub fn check_value(&self, value: &[u8]) -> Result<(), KvError> {
        let size = self.value_size();
        let ok = match self.kind() {
            ValueKind::Fixed => value.len() == size,
            ValueKind::Set => value.is_empty(),
            ValueKind::Variable => value.len() <= size,
        };
        if !ok {
            return Err(KvError::ValueLength {
                kind: self.kind(),
                got: value.len(),
                expected: size,
            });
        }
        Ok(())
    }

    /// The bytes after the tag in a slot holding `value` (checked with [`check_value`]
    /// first): the value itself (fixed), nothing (set), or its u16 LE length and the value
    /// padded with zeros to `value_size` (variable).
    ///
    /// [`check_value`]: KvParams::check_value
    pub fn slot_payload<'v>(&self, value: &'v [u8]) -> Cow<'v, [u8]> {
        debug_assert!(self.check_value(value).is_ok());
        match self.kind() {
            ValueKind::Fixed => Cow::Borrowed(value),
            ValueKind::Set => Cow::Borrowed(&[]),
            ValueKind::Variable => {
                let mut payload = vec![0u8; LEN_FIELD + self.value_size()];
                payload[..LEN_FIELD].copy_from_slice(&(value.len() as u16).to_le_bytes());
                payload[LEN_FIELD..LEN_FIELD + value.len()].copy_from_slice(value);
                Cow::Owned(payload)
            }
        }
    }

    /// The value a slot's bytes after the tag hold (the inverse of [`slot_payload`]); a
    /// variable-size slot whose length exceeds `value_size` is malformed.
    ///
    /// [`slot_payload`]: KvParams::slot_payload
    pub fn payload_value<'p>(&self, payload: &'p [u8]) -> Result<&'p [u8], KvError> {
        match self.kind() {
            ValueKind::Fixed | ValueKind::Set => Ok(payload),
            ValueKind::Variable => {
                let len = u16::from_le_bytes([payload[0], payload[1]]) as usize;
                if len > self.value_size() {
                    return Err(KvError::SlotLength {
                        len,
                        max: self.value_size(),
                    });
                }
                Ok(&payload[LEN_FIELD..LEN_FIELD + len])
            }
        }
    }

    /// The part of a page that holds slots (its first `usable` bytes).
    pub fn slot_area<'p>(&self, page: &'p [u8]) -> &'p [u8] {
        &page[..self.slots_per_page() * self.slot_size()]
    }

    /// The key's tag (KV §3.1).
    pub fn tag(&self, key: &[u8]) -> Tag {
        hash::tag(&self.layout.seed, key)
    }

    /// The tag's `d` distinct candidate pages, in order (KV §3.2).
    pub fn candidates(&self, tag: &Tag) -> Candidates {
        hash::candidates(&self.layout.seed, tag, self.layout.choices, self.num_pages)
    }

    /// Looks `tag` up in one fetched page (KV §4): `Ok(Some(value))` when the page holds it
    /// (for a set, the empty value: present), `Ok(None)` when it does not, an error when the
    /// matching slot is malformed (a variable-size length above `value_size`).
    pub fn find<'p>(&self, page: &'p [u8], tag: &Tag) -> Result<Option<&'p [u8]>, KvError> {
        let area = self.slot_area(page);
        match page::find(area, self.slot_size(), tag) {
            None => Ok(None),
            Some(slot) => self
                .payload_value(page::value(area, self.slot_size(), slot))
                .map(Some),
        }
    }

    /// What `/v1/info` advertises (KV §5).
    pub fn info(&self) -> KvInfo {
        let version = self.kind().version();
        KvInfo {
            version,
            value_kind: (version >= 2).then(|| self.kind().name().to_string()),
            choices: self.layout.choices,
            tag_size: TAG_LEN as u32,
            value_size: self.layout.value_size,
            key_size: self.layout.key_size,
            slot_size: self.slot_size() as u32,
            slots_per_page: self.slots_per_page() as u32,
            seed: hex::encode(self.layout.seed),
            key_encoding: self.layout.encodings.key.map(|e| e.name().to_string()),
            value_encoding: self.layout.encodings.value.map(|e| e.name().to_string()),
        }
    }

    /// What the table records about its keys and values (not recorded: read as hex).
    pub fn encodings(&self) -> Encodings {
        self.layout.encodings
    }
}

/// The `"kv"` object of `/v1/info` (KV §5): the layout block's fields plus the derived slot
/// geometry, so a client can check its own arithmetic. Also what workers register in Redis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvInfo {
    /// Layout version (the last byte of the block's magic): 1 (fixed values) or 2.
    pub version: u8,
    /// Version 2: `"fixed"`, `"set"` or `"variable"`; absent in version 1 (fixed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_kind: Option<String>,
    pub choices: u8,
    pub tag_size: u32,
    /// Fixed: bytes of every value; set: 0; variable: the largest value.
    pub value_size: u32,
    /// 0 = keys of any length in `1..=1024`.
    pub key_size: u32,
    pub slot_size: u32,
    pub slots_per_page: u32,
    /// The 32-byte hash seed, lowercase hex.
    pub seed: String,
    /// How the table's keys are written (`"utf8"`, `"hex"`, `"base64"`); absent when the table
    /// does not record it (read as hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_encoding: Option<String>,
    /// How the table's values are written (also `"json"`); absent when not recorded (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_encoding: Option<String>,
}

impl KvInfo {
    /// The layout this info describes, checked against the geometry of an unsigned database
    /// (and its own derived fields).
    pub fn params(&self, page_size: u32, num_pages: u64) -> Result<KvParams, String> {
        self.params_with_tail(page_size, 0, num_pages)
    }

    /// [`KvInfo::params`] for pages with a `tail_len`-byte signature tail (SPEC §2.4).
    pub fn params_with_tail(
        &self,
        page_size: u32,
        tail_len: u32,
        num_pages: u64,
    ) -> Result<KvParams, String> {
        let kind = match (self.version, self.value_kind.as_deref()) {
            (1, None) => ValueKind::Fixed,
            (2, Some(name)) => ValueKind::from_name(name)
                .filter(|k| k.version() == 2)
                .ok_or_else(|| {
                    format!("kv value kind {name:?} (version 2 has \"set\" and \"variable\")")
                })?,
            (1 | 2, _) => {
                return Err(format!(
                    "kv layout version {} with value kind {:?}: version 1 has none, version 2 \
                     needs one",
                    self.version, self.value_kind
                ))
            }
            (v, _) => return Err(format!("kv layout version {v} (this client knows 1 and 2)")),
        };
        let seed: [u8; 32] = hex::decode(&self.seed)
            .ok()
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| "kv seed is not 32 bytes of hex".to_string())?;
        let encoding = |what: &str, name: &Option<String>, keys: bool| match name {
            None => Ok(None),
            Some(n) => Encoding::from_name(n)
                .filter(|e| e.name() == n && (!keys || e.for_keys()))
                .map(Some)
                .ok_or_else(|| {
                    format!(
                        "kv {what} encoding {n:?} (this client knows utf8, hex, base64{})",
                        if keys { "" } else { ", json" }
                    )
                }),
        };
        let encodings = Encodings {
            key: encoding("key", &self.key_encoding, true)?,
            value: encoding("value", &self.value_encoding, false)?,
        };
        let params = KvParams::with_tail(
            KvLayout {
                choices: self.choices,
                kind,
                value_size: self.value_size,
                key_size: self.key_size,
                seed,
                encodings,
            },
            page_size,
            tail_len,
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
            kind: ValueKind::Fixed,
            value_size: 32,
            key_size: 20,
            seed: std::array::from_fn(|i| i as u8 + 1),
            encodings: Encodings::default(),
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
    fn encodings_are_recorded_in_bytes_74_and_75() {
        let recorded = KvLayout {
            encodings: Encodings::recorded(Encoding::Utf8, Encoding::Json),
            ..layout()
        };
        let h = header_with(&recorded.to_block());
        assert_eq!((h[74], h[75]), (1, 4));
        assert_eq!(KvLayout::from_header(&h), Ok(Some(recorded)));
        let info = KvParams::new(recorded, 4096, 100).unwrap().info();
        assert_eq!(info.key_encoding.as_deref(), Some("utf8"));
        assert_eq!(info.value_encoding.as_deref(), Some("json"));
        // Old tables record nothing: no fields in /v1/info, hex when read.
        let old = KvParams::new(layout(), 4096, 100).unwrap();
        let json = serde_json::to_value(old.info()).unwrap();
        assert!(json.get("key_encoding").is_none());
        assert_eq!(old.encodings().key_or_hex(), Encoding::Hex);
        // Unknown codes, and JSON keys, are refused by name.
        for (offset, code) in [(74, 4), (74, 9), (75, 5)] {
            let mut h = header_with(&layout().to_block());
            h[offset] = code;
            assert_eq!(
                KvLayout::from_header(&h),
                Err(KvError::Encoding { offset, code })
            );
        }
        let mut wrong = info.clone();
        wrong.key_encoding = Some("json".into());
        assert!(wrong
            .params(4096, 100)
            .unwrap_err()
            .contains("key encoding"));
        let mut wrong = info;
        wrong.value_encoding = Some("text".into());
        assert!(wrong.params(4096, 100).is_err(), "only canonical names");
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
        let zero_error = with(&|l| l.value_size = 0).unwrap_err().to_string();
        assert!(
            zero_error.contains("a set is --value-size 0"),
            "{zero_error}"
        );
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
        let set = KvParams::new(set_layout(), 4096, 100).unwrap();
        assert!(set.check_value(&[]).is_ok());
        assert_eq!(
            set.check_value(&[1]).unwrap_err().to_string(),
            "value is 1 bytes: this table is a set (keys only)"
        );
        let var = KvParams::new(var_layout(), 4096, 100).unwrap();
        assert!(var.check_value(&[]).is_ok());
        assert!(var.check_value(&[7; 100]).is_ok());
        assert_eq!(
            var.check_value(&[7; 101]).unwrap_err().to_string(),
            "value is 101 bytes, this table's values are at most 100"
        );
    }

    fn set_layout() -> KvLayout {
        KvLayout {
            kind: ValueKind::Set,
            value_size: 0,
            ..layout()
        }
    }

    fn var_layout() -> KvLayout {
        KvLayout {
            kind: ValueKind::Variable,
            value_size: 100,
            ..layout()
        }
    }

    #[test]
    fn version_two_blocks_round_trip() {
        for (l, kind_byte, slot) in [(set_layout(), 1, 16), (var_layout(), 2, 118)] {
            let h = header_with(&l.to_block());
            assert_eq!(&h[64..72], b"PIRQKV\0\x02");
            assert_eq!(h[73], kind_byte);
            assert_eq!(KvLayout::from_header(&h), Ok(Some(l)));
            assert_eq!(l.slot_size(), slot);
        }
        // Version 1 knows no kinds; version 2 knows three.
        let mut h = header_with(&set_layout().to_block());
        h[71] = 1;
        assert_eq!(
            KvLayout::from_header(&h),
            Err(KvError::Reserved { offset: 73 })
        );
        for kind in [0, 3] {
            let mut h = header_with(&set_layout().to_block());
            h[73] = kind;
            assert_eq!(KvLayout::from_header(&h), Err(KvError::ValueKind(kind)));
        }
        let mut h = header_with(&set_layout().to_block());
        h[71] = 3;
        assert!(matches!(
            KvLayout::from_header(&h),
            Err(KvError::BadMagic { .. })
        ));
    }

    #[test]
    fn kinds_check_their_value_size() {
        let set = |value_size| {
            KvParams::new(
                KvLayout {
                    value_size,
                    ..set_layout()
                },
                4096,
                100,
            )
        };
        assert!(set(0).is_ok());
        assert!(set(1)
            .unwrap_err()
            .to_string()
            .contains("a set has no values"));
        let var = |value_size| {
            KvParams::new(
                KvLayout {
                    value_size,
                    ..var_layout()
                },
                4096,
                100,
            )
        };
        assert!(var(0).is_err());
        assert_eq!(var(4096 - 18).unwrap().slots_per_page(), 1);
        assert!(var(4096 - 17).is_err());
        // A signature tail takes its bytes from the slots.
        let tailed = KvParams::with_tail(var_layout(), 4096, 72, 100).unwrap();
        assert_eq!(tailed.usable, 4024);
        assert_eq!(tailed.slots_per_page(), 4024 / 118);
        assert!(KvParams::with_tail(
            KvLayout {
                value_size: 4096 - 18,
                ..var_layout()
            },
            4096,
            72,
            100
        )
        .is_err());
    }

    #[test]
    fn version_two_info_names_its_kind() {
        let var = KvParams::new(var_layout(), 4096, 100).unwrap();
        let info = var.info();
        assert_eq!(info.version, 2);
        assert_eq!(info.value_kind.as_deref(), Some("variable"));
        assert_eq!(info.params(4096, 100), Ok(var));
        let json = serde_json::to_value(&info).unwrap();
        assert_eq!(json["value_kind"], "variable");
        // Version 1 info has no value_kind field at all (older clients deny unknown fields).
        let fixed = KvParams::new(layout(), 4096, 100).unwrap().info();
        assert!(serde_json::to_value(&fixed)
            .unwrap()
            .get("value_kind")
            .is_none());
        let mut wrong = info.clone();
        wrong.value_kind = Some("list".into());
        assert!(wrong.params(4096, 100).unwrap_err().contains("\"list\""));
        let mut wrong = info.clone();
        wrong.value_kind = Some("fixed".into());
        assert!(wrong.params(4096, 100).is_err());
        let mut wrong = info.clone();
        wrong.value_kind = None;
        assert!(wrong.params(4096, 100).is_err());
        let mut wrong = info;
        wrong.version = 3;
        assert!(wrong.params(4096, 100).unwrap_err().contains("version 3"));
        // A tail changes the derived slot count: the info of a signed table is checked with it.
        let tailed = KvParams::with_tail(layout(), 4096, 72, 100).unwrap();
        assert_eq!(tailed.slots_per_page(), 83);
        assert!(tailed.info().params(4096, 100).is_err());
        assert_eq!(tailed.info().params_with_tail(4096, 72, 100), Ok(tailed));
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
