//! Page-range shards: a party's pages split into `S` contiguous ranges, one per shard.
//!
//! Shard `I` of `S` serves pages `[lo, hi)`; its workers load only those pages, evaluate only that
//! part of every key's domain ([`crate::dpf::eval_range_into`]) and answer a *partial*: the XOR of
//! the selected pages of its range. The `S` partials XOR into the answer (in Redis, see
//! `docs/redis.md`). Boundaries are multiples of [`SHARD_ALIGN_PAGES`]: the CUDA scanner stores
//! pages bit-transposed in blocks of 256 pages, and the CPU scanner splits work on 64-page bitmap
//! words, so a shard never starts inside either. Ranges are as even as whole blocks allow (they
//! differ by at most one block, the last shard also takes the partial last block), and a count
//! that does not divide the blocks gives uneven shards, never an error.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

/// Shard boundaries are multiples of this many pages (one CUDA block of the transposed layout).
pub const SHARD_ALIGN_PAGES: u64 = 256;

/// Most shards a party may have.
pub const MAX_SHARDS: u32 = 1024;

/// Shard `index` of `count` (`--shard I/S`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ShardSpec {
    pub index: u32,
    pub count: u32,
}

/// Why a shard spec was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    #[error("shard {0:?} is not I/S (for example 0/3)")]
    Syntax(String),
    #[error("shard index {index} is not below the shard count {count}")]
    Index { index: u32, count: u32 },
    #[error("shard count {0} outside 1..={MAX_SHARDS}")]
    Count(u32),
    #[error(
        "{count} shards of a {num_pages}-page database would leave shards empty: shards are \
         whole {SHARD_ALIGN_PAGES}-page blocks and it has {blocks}"
    )]
    TooMany {
        count: u32,
        num_pages: u64,
        blocks: u64,
    },
}

impl ShardSpec {
    /// The whole database as one shard.
    pub const WHOLE: ShardSpec = ShardSpec { index: 0, count: 1 };

    pub fn new(index: u32, count: u32) -> Result<ShardSpec, ShardError> {
        if !(1..=MAX_SHARDS).contains(&count) {
            return Err(ShardError::Count(count));
        }
        if index >= count {
            return Err(ShardError::Index { index, count });
        }
        Ok(ShardSpec { index, count })
    }

    /// Whether this is the only shard (the unsharded case).
    pub fn is_whole(&self) -> bool {
        self.count == 1
    }

    /// The pages `[lo, hi)` this shard serves in a database of `num_pages` pages.
    pub fn range(&self, num_pages: u64) -> Result<Range<u64>, ShardError> {
        let blocks = num_pages.div_ceil(SHARD_ALIGN_PAGES);
        if (self.count as u64) > blocks {
            return Err(ShardError::TooMany {
                count: self.count,
                num_pages,
                blocks,
            });
        }
        let edge = |i: u64| {
            let block = (i as u128 * blocks as u128 / self.count as u128) as u64;
            (block * SHARD_ALIGN_PAGES).min(num_pages)
        };
        Ok(edge(self.index as u64)..edge(self.index as u64 + 1))
    }

    /// Every shard's range, in order (they tile `0..num_pages`).
    pub fn all_ranges(count: u32, num_pages: u64) -> Result<Vec<Range<u64>>, ShardError> {
        if !(1..=MAX_SHARDS).contains(&count) {
            return Err(ShardError::Count(count));
        }
        (0..count)
            .map(|i| ShardSpec::new(i, count)?.range(num_pages))
            .collect()
    }
}

impl fmt::Display for ShardSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for ShardSpec {
    type Err = ShardError;

    fn from_str(s: &str) -> Result<ShardSpec, ShardError> {
        let syntax = || ShardError::Syntax(s.to_string());
        let (i, n) = s.split_once('/').ok_or_else(syntax)?;
        let index = i.trim().parse().map_err(|_| syntax())?;
        let count = n.trim().parse().map_err(|_| syntax())?;
        ShardSpec::new(index, count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display() {
        let s: ShardSpec = "2/3".parse().unwrap();
        assert_eq!(s, ShardSpec { index: 2, count: 3 });
        assert_eq!(s.to_string(), "2/3");
        for bad in ["", "3", "a/b", "3/3", "0/0", "1/-2", "0/5000"] {
            assert!(bad.parse::<ShardSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn ranges_tile_the_database_on_block_edges() {
        for num_pages in [256, 1000, 4096, 5000, 65_536, 1_000_003] {
            for count in 1..=7u32 {
                let Ok(ranges) = ShardSpec::all_ranges(count, num_pages) else {
                    assert!(count as u64 > num_pages.div_ceil(256));
                    continue;
                };
                let mut next = 0;
                for r in &ranges {
                    assert_eq!(r.start, next);
                    assert!(r.start < r.end, "{num_pages} / {count}: empty {r:?}");
                    assert_eq!(r.start % SHARD_ALIGN_PAGES, 0);
                    next = r.end;
                }
                assert_eq!(next, num_pages);
                let sizes: Vec<u64> = ranges.iter().map(|r| r.end - r.start).collect();
                let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(max - min <= 2 * SHARD_ALIGN_PAGES, "{sizes:?}");
            }
        }
    }

    #[test]
    fn uneven_split() {
        // 1000 pages = 4 blocks (the last partial): 1, 1 and 2 blocks.
        let r = ShardSpec::all_ranges(3, 1000).unwrap();
        assert_eq!(r, vec![0..256, 256..512, 512..1000]);
        assert!(matches!(
            ShardSpec::new(0, 5).unwrap().range(1000),
            Err(ShardError::TooMany { blocks: 4, .. })
        ));
    }
}
