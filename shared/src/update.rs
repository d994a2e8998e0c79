//! Epoch updates (SPEC §3): the set of whole-page replacements that turns epoch `e - 1` into `e`.
//!
//! One type, three encodings:
//! - JSON for people and the admin HTTP API: `{"epoch": 7, "pages": [{"index": 3, "page": "<base64>"}]}`;
//! - bincode 2 (standard configuration) for the binary twin of the admin API, for update files,
//!   and for the one Redis stream entry that carries a whole epoch (so an epoch is applied
//!   entirely or not at all);
//! - [`EpochUpdate::parse_file`] accepts either, telling them apart by the first byte.

use base64::Engine as _;
use bincode::{Decode, Encode};
use serde::{Deserialize, Serialize};

/// The highest epoch (SPEC §3): 2^53 - 1, so that every client reads epochs from JSON exactly
/// (a JavaScript number is a double). Every tool, the gateway and the workers refuse more.
pub const MAX_EPOCH: u64 = (1 << 53) - 1;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// One page replacement.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct PageWrite {
    pub index: u64,
    pub page: Vec<u8>,
}

/// All page replacements of one epoch.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct EpochUpdate {
    pub epoch: u64,
    pub pages: Vec<PageWrite>,
}

/// Why an update was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    #[error("malformed update: {0}")]
    Malformed(String),
    #[error("epoch {0} is above the highest epoch, 2^53-1 = {max} (SPEC §3)", max = MAX_EPOCH)]
    Epoch(u64),
    #[error("page {position} has index {index}, the database has {num_pages} pages")]
    PageIndex {
        position: usize,
        index: u64,
        num_pages: u64,
    },
    #[error("page {position} (index {index}) is {got} bytes, pages are {page_size}")]
    PageSize {
        position: usize,
        index: u64,
        got: usize,
        page_size: usize,
    },
}

/// The one check of an update's pages against a database's geometry: every index inside it,
/// every page whole. The gateway runs it before an update is appended, and every scanner's epoch
/// window before one is applied.
pub fn validate_writes(
    writes: &[PageWrite],
    num_pages: u64,
    page_size: usize,
) -> Result<(), UpdateError> {
    for (position, w) in writes.iter().enumerate() {
        if w.index >= num_pages {
            return Err(UpdateError::PageIndex {
                position,
                index: w.index,
                num_pages,
            });
        }
        if w.page.len() != page_size {
            return Err(UpdateError::PageSize {
                position,
                index: w.index,
                got: w.page.len(),
                page_size,
            });
        }
    }
    Ok(())
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonUpdate {
    epoch: u64,
    pages: Vec<JsonPage>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonPage {
    index: u64,
    page: String,
}

/// bincode decoding refuses values larger than this (a whole epoch of 4 KiB pages: 262k pages).
const DECODE_LIMIT: usize = 1 << 30;

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<DECODE_LIMIT>()
}

impl EpochUpdate {
    /// Checks indices and page sizes against a database's geometry.
    pub fn validate(&self, num_pages: u64, page_size: usize) -> Result<(), UpdateError> {
        validate_writes(&self.pages, num_pages, page_size)
    }

    pub fn to_bincode(&self) -> Vec<u8> {
        bincode::encode_to_vec(self, bincode_config()).expect("encoding into a Vec cannot fail")
    }

    pub fn from_bincode(bytes: &[u8]) -> Result<EpochUpdate, UpdateError> {
        let (value, used) = bincode::decode_from_slice(bytes, bincode_config())
            .map_err(|e| UpdateError::Malformed(e.to_string()))?;
        if used != bytes.len() {
            let extra = bytes.len() - used;
            return Err(UpdateError::Malformed(format!("{extra} trailing bytes")));
        }
        in_range(value)
    }

    pub fn to_json(&self) -> Vec<u8> {
        let json = JsonUpdate {
            epoch: self.epoch,
            pages: self
                .pages
                .iter()
                .map(|w| JsonPage {
                    index: w.index,
                    page: B64.encode(&w.page),
                })
                .collect(),
        };
        serde_json::to_vec(&json).expect("serializing plain data cannot fail")
    }

    pub fn from_json(bytes: &[u8]) -> Result<EpochUpdate, UpdateError> {
        let json: JsonUpdate =
            serde_json::from_slice(bytes).map_err(|e| UpdateError::Malformed(e.to_string()))?;
        let pages = json
            .pages
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let page = B64
                    .decode(&p.page)
                    .map_err(|e| UpdateError::Malformed(format!("page {i}: {e}")))?;
                Ok(PageWrite {
                    index: p.index,
                    page,
                })
            })
            .collect::<Result<_, UpdateError>>()?;
        in_range(EpochUpdate {
            epoch: json.epoch,
            pages,
        })
    }

    /// Parses an update file: JSON if it starts with `{` (after white space), else bincode.
    pub fn parse_file(bytes: &[u8]) -> Result<EpochUpdate, UpdateError> {
        match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => EpochUpdate::from_json(bytes),
            _ => EpochUpdate::from_bincode(bytes),
        }
    }
}

/// An update whose epoch no database can reach (SPEC §3) is refused as it is parsed, whatever
/// reads it: the gateway, a worker, `pirq db apply`.
fn in_range(update: EpochUpdate) -> Result<EpochUpdate, UpdateError> {
    if update.epoch > MAX_EPOCH {
        return Err(UpdateError::Epoch(update.epoch));
    }
    Ok(update)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_past_the_highest_are_refused() {
        let highest = EpochUpdate {
            epoch: MAX_EPOCH,
            pages: vec![],
        };
        assert_eq!(
            EpochUpdate::from_json(&highest.to_json()),
            Ok(highest.clone())
        );
        let over = EpochUpdate {
            epoch: MAX_EPOCH + 1,
            ..highest
        };
        for parsed in [
            EpochUpdate::from_json(&over.to_json()),
            EpochUpdate::from_bincode(&over.to_bincode()),
        ] {
            assert_eq!(parsed, Err(UpdateError::Epoch(MAX_EPOCH + 1)));
        }
    }

    fn update() -> EpochUpdate {
        EpochUpdate {
            epoch: 9,
            pages: vec![
                PageWrite {
                    index: 3,
                    page: vec![7; 256],
                },
                PageWrite {
                    index: 0,
                    page: (0..=255).collect(),
                },
            ],
        }
    }

    #[test]
    fn encodings_round_trip() {
        let u = update();
        assert_eq!(EpochUpdate::from_json(&u.to_json()).unwrap(), u);
        assert_eq!(EpochUpdate::from_bincode(&u.to_bincode()).unwrap(), u);
        assert_eq!(EpochUpdate::parse_file(&u.to_json()).unwrap(), u);
        assert_eq!(EpochUpdate::parse_file(&u.to_bincode()).unwrap(), u);
    }

    #[test]
    fn validation() {
        let u = update();
        assert!(u.validate(4, 256).is_ok());
        assert!(matches!(
            u.validate(3, 256),
            Err(UpdateError::PageIndex { position: 0, .. })
        ));
        assert!(matches!(
            u.validate(4, 512),
            Err(UpdateError::PageSize { got: 256, .. })
        ));
    }

    #[test]
    fn malformed_inputs() {
        for bad in [
            &b"{"[..],
            b"{\"epoch\":1}",
            b"{\"epoch\":1,\"pages\":[{\"index\":0,\"page\":\"!\"}]}",
            b"\x01",
            b"",
        ] {
            assert!(
                matches!(EpochUpdate::parse_file(bad), Err(UpdateError::Malformed(_))),
                "{bad:?}"
            );
        }
        let mut trailing = update().to_bincode();
        trailing.push(0);
        assert!(EpochUpdate::from_bincode(&trailing).is_err());
    }
}
