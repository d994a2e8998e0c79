//! Evaluation of a DPF key (SPEC §1.4): at one index, or over the whole domain into a bitmap.
//!
//! The bitmap holds index `p` at bit `p % 64` of word `p / 64` (LSB-first u64 words, which is the
//! SPEC's LSB-first byte order read as little-endian words).
//!
//! Full-domain evaluation walks the tree breadth-first, [`LANES`] nodes per PRG call so the
//! ChaCha rounds run as SIMD. To stay in cache it expands the top of the tree down to subtrees of
//! `2^SUBTREE_LEVELS` leaves and then finishes each subtree in a small buffer; big domains spread
//! the subtrees over rayon's threads when the crate's `parallel` feature is on (the scanners and
//! the database crate turn it on; a client, which never evaluates a whole domain, does not, and
//! so links no thread pool). The bits are the same either way.

use super::key::{CorrectionWord, DpfKey};
use super::prg::{expand, expand_lanes, Seed, LANES};
use super::tree_depth;

/// Levels expanded inside one cache-resident subtree (2^10 nodes × 16 B = 16 KiB per level).
const SUBTREE_LEVELS: u32 = 10;
/// Subtrees per rayon task: enough work to amortize scheduling.
#[cfg(feature = "parallel")]
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
    let (top_cws, sub_cws) = key.correction_words().split_at((m - sub) as usize);
    let mut top = Level::root(root);
    top.expand_through(top_cws, &mut Level::default());
    let words_per_subtree = 2usize << sub;
    let finish = |nodes: std::ops::Range<usize>, out: &mut [u64]| {
        let (mut level, mut spare) = (Level::default(), Level::default());
        for (j, out) in nodes.zip(out.chunks_mut(words_per_subtree)) {
            level.reset_to(top.node(j));
            level.expand_through(sub_cws, &mut spare);
            level.write_leaves(key.cw_out(), out);
        }
    };
    let subtrees = top.len;
    #[cfg(feature = "parallel")]
    if subtrees >= 2 * SUBTREES_PER_TASK {
        use rayon::prelude::*;
        out.par_chunks_mut(words_per_subtree * SUBTREES_PER_TASK)
            .enumerate()
            .for_each(|(i, out)| {
                let first = i * SUBTREES_PER_TASK;
                finish(first..(first + SUBTREES_PER_TASK).min(subtrees), out)
            });
        return;
    }
    finish(0..subtrees, out);
}

/// Why a range evaluation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("range {lo}..{hi} does not start on a 128-index leaf or is not inside 0..2^{n}")]
    Bad { lo: u64, hi: u64, n: u8 },
}

/// Number of u64 words of the bitmap of indices `range` (index `range.start + j` at bit `j`).
pub fn range_words(range: &std::ops::Range<u64>) -> usize {
    range.end.saturating_sub(range.start).div_ceil(64) as usize
}

/// The bitmap of indices `range` only: index `range.start + j` at bit `j % 64` of word `j / 64`,
/// [`range_words`] words, bits past `range.end` zero. `range.start` must be a multiple of 128
/// (a leaf boundary; shard boundaries are).
///
/// Subtree evaluation: only the nodes whose subtree meets the range are expanded, so a range of
/// `r` indices costs about `r / 128 + 2 · depth` PRG calls instead of `2^n / 128`. This is what
/// lets a shard's expansion shrink with the shard, as its scan does.
pub fn eval_range(key: &DpfKey, range: std::ops::Range<u64>) -> Result<Vec<u64>, RangeError> {
    let mut out = vec![0u64; range_words(&range)];
    eval_range_into(key, range, &mut out)?;
    Ok(out)
}

/// [`eval_range`] into `out`, which must be [`range_words`] long.
pub fn eval_range_into(
    key: &DpfKey,
    range: std::ops::Range<u64>,
    out: &mut [u64],
) -> Result<(), RangeError> {
    let n = key.domain_bits();
    let (lo, hi) = (range.start, range.end);
    if lo % 128 != 0 || lo > hi || hi > 1u64 << n {
        return Err(RangeError::Bad { lo, hi, n });
    }
    assert_eq!(
        out.len(),
        range_words(&range),
        "bitmap length for {range:?}"
    );
    if lo == hi {
        return Ok(());
    }
    let m = tree_depth(n);
    if m == 0 {
        // One leaf: the whole domain is at most 128 indices.
        let full = eval_full(key);
        out.copy_from_slice(&full[..out.len()]);
    } else {
        let (first_leaf, end_leaf) = (lo >> 7, hi.div_ceil(128));
        let sub = m.min(SUBTREE_LEVELS);
        let (top_cws, sub_cws) = key.correction_words().split_at((m - sub) as usize);
        // The top levels, trimmed at every level to the nodes above the range.
        let mut top = Level::root((*key.root(), key.party() == 1));
        let top_first = top.expand_trimmed(
            top_cws,
            0,
            (first_leaf >> sub, ((end_leaf - 1) >> sub) + 1),
            &mut Level::default(),
        );
        // Each top node's subtree: the part of [first_leaf, end_leaf) below it, and its words.
        let mut tasks = Vec::with_capacity(top.len);
        let mut rest = &mut *out;
        for i in 0..top.len {
            let node = top_first + i as u64;
            let a = first_leaf.max(node << sub);
            let b = end_leaf.min((node + 1) << sub);
            let words = (2 * (b - a) as usize).min(rest.len());
            let (mine, tail) = rest.split_at_mut(words);
            rest = tail;
            tasks.push((top.node(i), a - (node << sub), b - (node << sub), mine));
        }
        let finish =
            |(level, spare): &mut (Level, Level),
             (root, a, b, out): ((Seed, bool), u64, u64, &mut [u64])| {
                level.reset_to(root);
                level.expand_trimmed(sub_cws, 0, (a, b), spare);
                if out.len() == 2 * level.len {
                    level.write_leaves(key.cw_out(), out);
                } else {
                    // The last leaf is cut by the range's end: write it whole, keep its first word.
                    let mut whole = vec![0u64; 2 * level.len];
                    level.write_leaves(key.cw_out(), &mut whole);
                    out.copy_from_slice(&whole[..out.len()]);
                }
            };
        #[cfg(feature = "parallel")]
        let tasks = if tasks.len() >= 2 * SUBTREES_PER_TASK {
            use rayon::prelude::*;
            tasks
                .into_par_iter()
                .with_min_len(SUBTREES_PER_TASK)
                .for_each_init(|| (Level::default(), Level::default()), finish);
            Vec::new()
        } else {
            tasks
        };
        let mut scratch = (Level::default(), Level::default());
        for task in tasks {
            finish(&mut scratch, task);
        }
    }
    let tail_bits = (hi - lo) % 64;
    if tail_bits != 0 {
        *out.last_mut().expect("non-empty range") &= (1u64 << tail_bits) - 1;
    }
    Ok(())
}

/// One level of the tree in structure-of-arrays form, so that [`LANES`] consecutive nodes load
/// straight into SIMD registers: `w[j][i]` is word `j` of node `i`'s seed, `t[i]` its control bit
/// as an all-ones or all-zero mask. Vectors are padded to whole lane groups.
#[derive(Default)]
struct Level {
    w: [Vec<u32>; 4],
    t: Vec<u32>,
    len: usize,
}

impl Level {
    fn root(node: (Seed, bool)) -> Level {
        let mut level = Level::default();
        level.reset_to(node);
        level
    }

    fn reset_to(&mut self, (seed, t): (Seed, bool)) {
        self.resize(1);
        for (w, s) in self.w.iter_mut().zip(seed) {
            w[0] = s;
        }
        self.t[0] = if t { u32::MAX } else { 0 };
    }

    fn resize(&mut self, len: usize) {
        // Whole pairs of lane groups: the children of a padded parent group always fit.
        let padded = len.next_multiple_of(2 * LANES);
        for w in &mut self.w {
            w.resize(padded, 0);
        }
        self.t.resize(padded, 0);
        self.len = len;
    }

    fn node(&self, i: usize) -> (Seed, bool) {
        (std::array::from_fn(|j| self.w[j][i]), self.t[i] != 0)
    }

    /// Expands one level per correction word; `spare` is scratch space reused across calls.
    fn expand_through(&mut self, cws: &[CorrectionWord], spare: &mut Level) {
        for cw in cws {
            spare.resize(self.len * 2);
            expand_level(self, cw, spare);
            std::mem::swap(self, spare);
        }
    }

    /// Expands one level per correction word like [`expand_through`](Self::expand_through), but
    /// keeps at each level only the nodes whose subtree meets `want` (node indices at the level
    /// reached after the last word). `first` is the index of this level's node 0; returns the
    /// index of the kept nodes' first at the last level.
    fn expand_trimmed(
        &mut self,
        cws: &[CorrectionWord],
        mut first: u64,
        want: (u64, u64),
        spare: &mut Level,
    ) -> u64 {
        for (done, cw) in cws.iter().enumerate() {
            spare.resize(self.len * 2);
            expand_level(self, cw, spare);
            std::mem::swap(self, spare);
            let below = (cws.len() - done - 1) as u32;
            let (lo, hi) = (want.0 >> below, ((want.1 - 1) >> below) + 1);
            self.keep((lo - 2 * first) as usize, (hi - lo) as usize);
            first = lo;
        }
        first
    }

    /// Keeps nodes `from..from + len` only, moved to the front.
    fn keep(&mut self, from: usize, len: usize) {
        if from > 0 {
            for w in &mut self.w {
                w.copy_within(from..from + len, 0);
            }
            self.t.copy_within(from..from + len, 0);
        }
        self.resize(len);
    }

    /// Writes this level's nodes as leaves (after the output correction) to bitmap words.
    fn write_leaves(&self, cw_out: &Seed, out: &mut [u64]) {
        for (i, words) in out.chunks_exact_mut(2).enumerate().take(self.len) {
            let t = self.t[i];
            let v: Seed = std::array::from_fn(|j| self.w[j][i] ^ (cw_out[j] & t));
            words.copy_from_slice(&leaf_words(&v));
        }
    }
}

fn expand_level(parents: &Level, cw: &CorrectionWord, children: &mut Level) {
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
unsafe fn expand_level_avx2(parents: &Level, cw: &CorrectionWord, children: &mut Level) {
    expand_level_portable(parents, cw, children)
}

/// Children `2i` and `2i + 1` of every parent `i`, corrected where the parent's `t` is set.
#[inline(always)]
fn expand_level_portable(parents: &Level, cw: &CorrectionWord, children: &mut Level) {
    let t_left = if cw.t_left { u32::MAX } else { 0 };
    let t_right = if cw.t_right { u32::MAX } else { 0 };
    for g in 0..parents.len.div_ceil(LANES) {
        let at = g * LANES;
        let seeds: [[u32; LANES]; 4] =
            std::array::from_fn(|j| parents.w[j][at..at + LANES].try_into().unwrap());
        let t: [u32; LANES] = parents.t[at..at + LANES].try_into().unwrap();
        let out = expand_lanes(&seeds);
        for j in 0..4 {
            let dst = &mut children.w[j][2 * at..2 * at + 2 * LANES];
            for l in 0..LANES {
                dst[2 * l] = out[j][l] ^ (cw.seed[j] & t[l]);
                dst[2 * l + 1] = out[4 + j][l] ^ (cw.seed[j] & t[l]);
            }
        }
        let dst = &mut children.t[2 * at..2 * at + 2 * LANES];
        for l in 0..LANES {
            dst[2 * l] = (out[8][l] & 1).wrapping_neg() ^ (t_left & t[l]);
            dst[2 * l + 1] = (out[9][l] & 1).wrapping_neg() ^ (t_right & t[l]);
        }
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
