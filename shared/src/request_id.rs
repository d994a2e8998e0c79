//! The request id: 128 random bits, written as 32 lowercase hex digits.
//!
//! A gateway mints one per accepted query ([`RequestId::mint`]); it names the query record
//! `{P}:q:<id>`, rides in the job stream entry's `id` field, in every status event, and is what
//! the client polls. Anything that is not exactly 32 lowercase hex digits is not an id
//! ([`RequestId::parse`]): a path segment or stream field that fails the check is never used to
//! build a Redis key.

use std::fmt;
use std::str::FromStr;

/// A validated request id (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId([u8; 32]);

/// Not a request id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a request id: use 32 lowercase hex digits")]
pub struct NotARequestId;

impl RequestId {
    /// A new id from 128 bits of the thread-local CSPRNG: unguessable, so knowing one query's id
    /// tells nothing about another's.
    pub fn mint() -> RequestId {
        RequestId::from_bits(rand::random::<u128>())
    }

    /// A new id of 128 random bits that lives in `partition` of a party of `partitions`
    /// (`pirq_shared::layout::Layout::partition_of_id`: the id's value modulo the count): drawn
    /// again until it does, about `partitions` draws. Every id of the partition is equally
    /// likely; what an id reveals beyond the partition it names is nothing.
    pub fn mint_in(partition: u32, partitions: u32) -> RequestId {
        let partitions = u128::from(partitions.max(1));
        let partition = u128::from(partition) % partitions;
        loop {
            let bits = rand::random::<u128>();
            if bits % partitions == partition {
                return RequestId::from_bits(bits);
            }
        }
    }

    fn from_bits(bits: u128) -> RequestId {
        // The digits of `{bits:032x}`, without the formatting machinery (every submit mints one).
        let mut text = [0u8; 32];
        hex::encode_to_slice(bits.to_be_bytes(), &mut text).expect("32 digits for 16 bytes");
        RequestId(text)
    }

    /// Checks `text` is exactly 32 lowercase hex digits.
    pub fn parse(text: &str) -> Result<RequestId, NotARequestId> {
        RequestId::from_bytes(text.as_bytes())
    }

    /// [`parse`](Self::parse) for raw bytes (a stream field, a pub/sub payload).
    pub fn from_bytes(bytes: &[u8]) -> Result<RequestId, NotARequestId> {
        let ok = bytes.len() == 32 && bytes.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !ok {
            return Err(NotARequestId);
        }
        let mut text = [0u8; 32];
        text.copy_from_slice(bytes);
        Ok(RequestId(text))
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever stored.
        std::str::from_utf8(&self.0).expect("request ids are ASCII")
    }
}

impl FromStr for RequestId {
    type Err = NotARequestId;
    fn from_str(s: &str) -> Result<RequestId, NotARequestId> {
        RequestId::parse(s)
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RequestId({})", self.as_str())
    }
}

impl AsRef<str> for RequestId {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_ids_parse_back_and_differ() {
        let a = RequestId::mint();
        let b = RequestId::mint();
        assert_ne!(a, b);
        assert_eq!(RequestId::parse(a.as_str()), Ok(a));
        assert_eq!(a.to_string().len(), 32);
    }

    #[test]
    fn ids_minted_in_a_partition_live_in_it() {
        let layout = crate::layout::Layout::new("p")
            .unwrap()
            .with_partitions(5)
            .unwrap();
        for p in 0..5 {
            for _ in 0..20 {
                let id = RequestId::mint_in(p, 5);
                assert_eq!(layout.partition_of_id(id.as_str()), p);
            }
        }
        assert_ne!(RequestId::mint_in(1, 5), RequestId::mint_in(1, 5));
    }

    #[test]
    fn only_32_lowercase_hex_digits_are_ids() {
        assert!(RequestId::parse(&"0123456789abcdef".repeat(2)).is_ok());
        for bad in [
            "0123456789ABCDEF0123456789ABCDEF",
            "abc",
            "",
            &"0".repeat(33),
            "0123456789abcdef0123456789abcdeg",
            "{p}:q:0123456789abcdef0123456789",
        ] {
            assert_eq!(RequestId::parse(bad), Err(NotARequestId), "{bad:?}");
        }
    }

    #[test]
    fn small_values_keep_their_leading_zeros() {
        assert_eq!(
            RequestId::from_bits(1).as_str(),
            format!("{}1", "0".repeat(31))
        );
    }
}
