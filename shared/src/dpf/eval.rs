//! Evaluation of a DPF key (SPEC §1.4): at one index, or over the whole domain into a bitmap.
//!
//! The bitmap holds index `p` at bit `p % 64` of word `p / 64` (LSB-first u64 words, which is the
//! SPEC's LSB-first byte order read as little-endian words).
//!
//! Full-domain evaluation walks the tree breadth-first, [`LANES`] nodes per PRG call so the
//! ChaCha rounds run as SIMD. To stay in cache it expands the top of the tree down to subtrees of
//! `2^SUBTREE_LEVELS` leaves and then finishes each subtree in a small buffer; big domains spread
//! the subtrees over rayon's threads.

use rayon::prelude::*;

use super::key::{CorrectionWord, DpfKey};
use super::prg::{expand, expand_lanes, Seed, LANES};
use super::tree_depth;

/// Levels expanded inside one cache-resident subtree (2^10 nodes × 16 B = 16 KiB per level).
const SUBTREE_LEVELS: u32 = 10;
/// Subtrees per rayon task: enough work to amortize scheduling.
const SUBTREES_PER_TASK: usize = 4;

/// An index at or past `2^n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("index {index} is outside the key's domain of {n} bits")]
pub struct OutOfDomain {
    pub n: u8,
    pub index: u64,
}

/// Number of u64 words in the full-domain bitmap of a key with `n` domain bits.
pub fn bitmap_words(n: u8) -> usize {
    (1usize << n).div_ceil(64)
}

/// The selection bit of `index` (party's share of "1 at α").
pub fn eval_point(key: &DpfKey, index: u64) -> Result<bool, OutOfDomain> {
    let n = key.domain_bits();
    if index >> n != 0 {
        return Err(OutOfDomain { n, index });
    }
    let m = tree_depth(n);
    let leaf = index >> 7;
    let (mut s, mut t) = (*key.root(), key.party() == 1);
    for (level, cw) in key.correction_words().iter().enumerate() {
        let right = (leaf >> (m - 1 - level as u32)) & 1 == 1;
        let (s_next, t_next) = child(&s, t, cw, right);
        (s, t) = (s_next, t_next);
    }
    let leaf_value = output(&s, t, key.cw_out());
    let bit = (index & 127) as usize;
    Ok((leaf_value[bit / 32] >> (bit % 32)) & 1 == 1)
}

/// The whole domain's bitmap, [`bitmap_words`] words long.
pub fn eval_full(key: &DpfKey) -> Vec<u64> {
    let mut out = vec![0u64; bitmap_words(key.domain_bits())];
    eval_full_into(key, &mut out);
    out
}

/// Writes the whole domain's bitmap into `out`, which must be [`bitmap_words`] long.
/// Bits past `2^n` in the last word (only when n < 6) are zero.
pub fn eval_full_into(key: &DpfKey, out: &mut [u64]) {
    let n = key.domain_bits();
    assert_eq!(out.len(), bitmap_words(n), "bitmap length for n = {n}");
    let m = tree_depth(n);
    let root = (*key.root(), key.party() == 1);
    if m == 0 {
        let leaf = leaf_words(&output(&root.0, root.1, key.cw_out()));
        let valid = 1usize << n;
        out[0] = if valid >= 64 {
            leaf[0]
        } else {
            leaf[0] & ((1u64 << valid) - 1)
        };
        if valid > 64 {
            out[1] = leaf[1];
        }
        return;
    }
    let sub = m.min(SUBTREE_LEVELS);
    let top_levels = m - sub;
    let cws = key.correction_words();
    let top = expand_levels(vec![root], &cws[..top_levels as usize]);
    let words_per_subtree = 2usize << sub;
    let finish = |(node, out): (&(Seed, bool), &mut [u64])| {
        let leaves = expand_levels(vec![*node], &cws[top_levels as usize..]);
        for (leaf, words) in leaves.iter().zip(out.chunks_exact_mut(2)) {
            words.copy_from_slice(&leaf_words(&output(&leaf.0, leaf.1, key.cw_out())));
        }
    };
    if top.len() >= 2 * SUBTREES_PER_TASK {
        top.par_chunks(SUBTREES_PER_TASK)
            .zip(out.par_chunks_mut(words_per_subtree * SUBTREES_PER_TASK))
            .for_each(|(nodes, out)| {
                nodes
                    .iter()
                    .zip(out.chunks_mut(words_per_subtree))
                    .for_each(finish)
            });
    } else {
        top.iter()
            .zip(out.chunks_mut(words_per_subtree))
            .for_each(finish);
    }
}

/// Children of one node after correction, `right` picking the side.
fn child(s: &Seed, t: bool, cw: &CorrectionWord, right: bool) -> (Seed, bool) {
    let c = expand(s);
    let (mut seed, mut bit, t_cw) = if right {
        (c.right, c.t_right, cw.t_right)
    } else {
        (c.left, c.t_left, cw.t_left)
    };
    if t {
        seed = std::array::from_fn(|i| seed[i] ^ cw.seed[i]);
        bit ^= t_cw;
    }
    (seed, bit)
}

fn output(s: &Seed, t: bool, cw_out: &Seed) -> Seed {
    if t {
        std::array::from_fn(|i| s[i] ^ cw_out[i])
    } else {
        *s
    }
}

fn leaf_words(v: &Seed) -> [u64; 2] {
    [
        v[0] as u64 | (v[1] as u64) << 32,
        v[2] as u64 | (v[3] as u64) << 32,
    ]
}

/// Expands `nodes` through one level per correction word, breadth-first; returns the last level.
fn expand_levels(mut nodes: Vec<(Seed, bool)>, cws: &[CorrectionWord]) -> Vec<(Seed, bool)> {
    let mut next = Vec::new();
    for cw in cws {
        next.clear();
        next.resize(nodes.len() * 2, ([0u32; 4], false));
        expand_level(&nodes, cw, &mut next);
        std::mem::swap(&mut nodes, &mut next);
    }
    nodes
}

fn expand_level(parents: &[(Seed, bool)], cw: &CorrectionWord, children: &mut [(Seed, bool)]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { expand_level_avx2(parents, cw, children) };
        return;
    }
    expand_level_portable(parents, cw, children);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn expand_level_avx2(
    parents: &[(Seed, bool)],
    cw: &CorrectionWord,
    children: &mut [(Seed, bool)],
) {
    expand_level_portable(parents, cw, children)
}

/// One level for all `parents`, [`LANES`] at a time; `children[2j], children[2j+1]` are the
/// corrected left and right children of `parents[j]`.
#[inline(always)]
fn expand_level_portable(
    parents: &[(Seed, bool)],
    cw: &CorrectionWord,
    children: &mut [(Seed, bool)],
) {
    for (group, out) in parents.chunks(LANES).zip(children.chunks_mut(2 * LANES)) {
        let mut soa = [[0u32; LANES]; 4];
        let mut mask = [0u32; LANES];
        for (l, (seed, t)) in group.iter().enumerate() {
            for j in 0..4 {
                soa[j][l] = seed[j];
            }
            mask[l] = if *t { u32::MAX } else { 0 };
        }
        let w = expand_lanes(&soa);
        for (l, pair) in out.chunks_exact_mut(2).enumerate() {
            let m = mask[l];
            let t = m & 1 == 1;
            pair[0] = (
                std::array::from_fn(|j| w[j][l] ^ (cw.seed[j] & m)),
                (w[8][l] & 1 == 1) ^ (t & cw.t_left),
            );
            pair[1] = (
                std::array::from_fn(|j| w[4 + j][l] ^ (cw.seed[j] & m)),
                (w[9][l] & 1 == 1) ^ (t & cw.t_right),
            );
        }
    }
}
