//! DPF v1: a distributed point function with early termination (SPEC §1).
//!
//! A client calls [`gen::generate`] to split the point function "1 at α" into two
//! [`DpfKey`]s; each party expands its key with [`eval::eval_full`] into one selection bit per
//! index. The two bitmaps differ exactly at α, and either key alone looks random.

pub mod eval;
pub mod gen;
pub mod key;
pub mod prg;

pub use eval::{
    bitmap_words, eval_full, eval_full_into, eval_point, eval_range, eval_range_into, range_words,
    OutOfDomain, RangeError,
};
pub use gen::generate;
pub use key::{CorrectionWord, DpfKey, KeyError, MAX_DOMAIN_BITS};
pub use prg::Seed;

/// Leaves carry 128 selection bits each: the tree has `n - 7` levels.
pub const LEAF_BITS_LOG2: u32 = 7;

/// Domain bits of the keys for a database of `num_pages` pages (SPEC §2): the fewest that
/// index every page, at least 1.
pub fn domain_bits(num_pages: u64) -> u8 {
    (u64::BITS - num_pages.saturating_sub(1).leading_zeros()).max(1) as u8
}

/// Depth `m` of the GGM tree for a domain of `n` bits (SPEC §1.2).
pub fn tree_depth(n: u8) -> u32 {
    (n as u32).saturating_sub(LEAF_BITS_LOG2)
}
