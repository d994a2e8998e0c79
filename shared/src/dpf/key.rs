//! DPF v1 key bytes (SPEC §1.3): the struct, its strict parser and its serializer.

use super::prg::{seed_from_bytes, seed_to_bytes, Seed};
use super::tree_depth;

/// Largest domain a key may have (SPEC §1.2).
pub const MAX_DOMAIN_BITS: u8 = 40;
/// Only key version the parser accepts.
pub const VERSION: u8 = 1;
const HEADER_LEN: usize = 3 + 16;
const CW_LEN: usize = 17;

/// One level's correction: a seed correction word and the two control-bit corrections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CorrectionWord {
    pub seed: Seed,
    pub t_left: bool,
    pub t_right: bool,
}

/// A parsed DPF v1 key of one party. Construct with [`DpfKey::parse`] or [`super::generate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DpfKey {
    party: u8,
    n: u8,
    root: Seed,
    correction: Vec<CorrectionWord>,
    cw_out: Seed,
}

/// Why key bytes were rejected. [`KeyError::code`] gives the stable code used in HTTP errors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("key is {len} bytes, shorter than the 3-byte header")]
    TooShort { len: usize },
    #[error("key version is {0}, only version 1 is supported")]
    Version(u8),
    #[error("key party is {0}, must be 0 or 1")]
    Party(u8),
    #[error("key domain is {0} bits, must be 1..=40")]
    DomainBits(u8),
    #[error("key is {actual} bytes, a key with n = {n} must be exactly {expected}")]
    Length {
        n: u8,
        expected: usize,
        actual: usize,
    },
    #[error("control byte of level {level} is {value:#04x}, only bits 0 and 1 may be set")]
    ControlByte { level: usize, value: u8 },
}

impl KeyError {
    /// Stable machine-readable code, part of the HTTP API.
    pub fn code(&self) -> &'static str {
        match self {
            KeyError::TooShort { .. } => "key_too_short",
            KeyError::Version(_) => "key_version",
            KeyError::Party(_) => "key_party",
            KeyError::DomainBits(_) => "key_domain_bits",
            KeyError::Length { .. } => "key_length",
            KeyError::ControlByte { .. } => "key_control_byte",
        }
    }
}

/// Byte length of a key with domain `n` (SPEC §1.3): `35 + 17 m`.
pub fn key_len(n: u8) -> usize {
    HEADER_LEN + CW_LEN * tree_depth(n) as usize + 16
}

impl DpfKey {
    pub(crate) fn from_parts(
        party: u8,
        n: u8,
        root: Seed,
        correction: Vec<CorrectionWord>,
        cw_out: Seed,
    ) -> Self {
        debug_assert!(party <= 1 && (1..=MAX_DOMAIN_BITS).contains(&n));
        debug_assert_eq!(correction.len(), tree_depth(n) as usize);
        DpfKey {
            party,
            n,
            root,
            correction,
            cw_out,
        }
    }

    /// Parses key bytes, rejecting anything SPEC §1.3 does not allow.
    pub fn parse(bytes: &[u8]) -> Result<DpfKey, KeyError> {
        let [version, party, n, ..] = *bytes else {
            return Err(KeyError::TooShort { len: bytes.len() });
        };
        if version != VERSION {
            return Err(KeyError::Version(version));
        }
        if party > 1 {
            return Err(KeyError::Party(party));
        }
        if !(1..=MAX_DOMAIN_BITS).contains(&n) {
            return Err(KeyError::DomainBits(n));
        }
        let expected = key_len(n);
        if bytes.len() != expected {
            return Err(KeyError::Length {
                n,
                expected,
                actual: bytes.len(),
            });
        }
        let seed_at = |off: usize| seed_from_bytes(bytes[off..off + 16].try_into().unwrap());
        let m = tree_depth(n) as usize;
        let mut correction = Vec::with_capacity(m);
        for level in 0..m {
            let off = HEADER_LEN + CW_LEN * level;
            let t = bytes[off + 16];
            if t & !0b11 != 0 {
                return Err(KeyError::ControlByte { level, value: t });
            }
            correction.push(CorrectionWord {
                seed: seed_at(off),
                t_left: t & 1 == 1,
                t_right: t & 2 == 2,
            });
        }
        Ok(DpfKey {
            party,
            n,
            root: seed_at(3),
            correction,
            cw_out: seed_at(expected - 16),
        })
    }

    /// The key's bytes; `parse(to_bytes(k)) == k`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(key_len(self.n));
        out.extend_from_slice(&[VERSION, self.party, self.n]);
        out.extend_from_slice(&seed_to_bytes(&self.root));
        for cw in &self.correction {
            out.extend_from_slice(&seed_to_bytes(&cw.seed));
            out.push(cw.t_left as u8 | (cw.t_right as u8) << 1);
        }
        out.extend_from_slice(&seed_to_bytes(&self.cw_out));
        out
    }

    /// 0 for party A, 1 for party B; also the root control bit.
    pub fn party(&self) -> u8 {
        self.party
    }

    /// Domain bits: the key selects among `2^n` indices.
    pub fn domain_bits(&self) -> u8 {
        self.n
    }

    pub fn root(&self) -> &Seed {
        &self.root
    }

    /// One correction word per tree level, top first.
    pub fn correction_words(&self) -> &[CorrectionWord] {
        &self.correction
    }

    /// The output correction word, XORed into leaves whose control bit is 1.
    pub fn cw_out(&self) -> &Seed {
        &self.cw_out
    }
}
