//! A key's tag and a tag's candidate pages (KV §3).
//!
//! SHA-256 throughout, domain-separated and keyed by the layout's public seed: a browser client
//! computes both with WebCrypto and no library. Candidates depend on the tag only (not the key),
//! so a builder can move a stored record to another of its candidates knowing just the slot.

use sha2::{Digest, Sha256};

/// Bytes of a tag: 128 bits, so distinct keys of a table never share one in practice (the
/// chance for 2^32 keys is about 2^-65) and an absent key matches a stored tag with
/// probability about `d · slots_per_page / 2^128`.
pub const TAG_LEN: usize = 16;

/// A key's tag. Never all zero: an all-zero tag marks an empty slot.
pub type Tag = [u8; TAG_LEN];

/// Domain of the tag hash.
pub const TAG_DOMAIN: &[u8] = b"pirq-kv-tag";
/// Domain of the candidate hash.
pub const BUCKET_DOMAIN: &[u8] = b"pirq-kv-bucket";

/// `SHA-256("pirq-kv-tag" || seed || key)[0..16]`; an all-zero result becomes `00…01`.
pub fn tag(seed: &[u8; 32], key: &[u8]) -> Tag {
    let digest = Sha256::new()
        .chain_update(TAG_DOMAIN)
        .chain_update(seed)
        .chain_update(key)
        .finalize();
    let mut tag: Tag = digest[..TAG_LEN].try_into().expect("16 bytes");
    if tag == [0; TAG_LEN] {
        tag[TAG_LEN - 1] = 1;
    }
    tag
}

/// The candidate pages of one tag, in order (2 to 4 of them, distinct).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidates {
    pages: [u64; 4],
    len: u8,
}

impl Candidates {
    pub fn as_slice(&self) -> &[u64] {
        &self.pages[..self.len as usize]
    }
}

impl std::ops::Deref for Candidates {
    type Target = [u64];
    fn deref(&self) -> &[u64] {
        self.as_slice()
    }
}

/// The first `choices` distinct values of the stream `u64le(D_c[8j..8j+8]) mod num_pages`,
/// `j = 0..4` for each `D_c = SHA-256("pirq-kv-bucket" || seed || tag || u32le(c))`,
/// `c = 0, 1, …`. Needs `num_pages >= choices` (the layout guarantees it); then the loop
/// ends with probability 1, after one digest nearly always.
pub fn candidates(seed: &[u8; 32], tag: &Tag, choices: u8, num_pages: u64) -> Candidates {
    assert!((2..=4).contains(&choices) && num_pages >= choices as u64);
    let mut out = Candidates {
        pages: [0; 4],
        len: 0,
    };
    let prefix = Sha256::new()
        .chain_update(BUCKET_DOMAIN)
        .chain_update(seed)
        .chain_update(tag);
    for counter in 0u32.. {
        let digest = prefix
            .clone()
            .chain_update(counter.to_le_bytes())
            .finalize();
        for word in digest.chunks_exact(8) {
            let page = u64::from_le_bytes(word.try_into().expect("8 bytes")) % num_pages;
            if !out.as_slice().contains(&page) {
                out.pages[out.len as usize] = page;
                out.len += 1;
                if out.len == choices {
                    return out;
                }
            }
        }
    }
    unreachable!("a u32 counter of digests without {choices} distinct pages out of {num_pages}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_is_the_spec_formula() {
        let seed = [7u8; 32];
        let mut input = b"pirq-kv-tag".to_vec();
        input.extend_from_slice(&seed);
        input.extend_from_slice(b"abc");
        let want = Sha256::digest(&input);
        assert_eq!(tag(&seed, b"abc")[..], want[..16]);
        assert_ne!(tag(&seed, b"abc"), tag(&[8u8; 32], b"abc"));
    }

    #[test]
    fn candidates_are_distinct_and_in_range() {
        let seed = [1u8; 32];
        for num_pages in [2u64, 3, 4, 5, 17, 1 << 24, (1 << 40) - 1] {
            for choices in 2..=4u8 {
                if num_pages < choices as u64 {
                    continue;
                }
                for k in 0..200u32 {
                    let t = tag(&seed, &k.to_le_bytes());
                    let c = candidates(&seed, &t, choices, num_pages);
                    assert_eq!(c.len(), choices as usize);
                    assert!(c.iter().all(|p| *p < num_pages));
                    for i in 0..c.len() {
                        assert!(!c[i + 1..].contains(&c[i]), "{c:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn candidates_follow_the_digest_words() {
        let seed = [3u8; 32];
        let t = tag(&seed, b"key");
        let mut input = b"pirq-kv-bucket".to_vec();
        input.extend_from_slice(&seed);
        input.extend_from_slice(&t);
        input.extend_from_slice(&0u32.to_le_bytes());
        let d = Sha256::digest(&input);
        let n = 1_000_003u64;
        let words: Vec<u64> = d
            .chunks(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap()) % n)
            .collect();
        // With a million pages the first words are distinct (checked here, not assumed).
        assert!(words[0] != words[1] && words[2] != words[0] && words[2] != words[1]);
        assert_eq!(candidates(&seed, &t, 3, n).as_slice(), &words[..3]);
    }
}
