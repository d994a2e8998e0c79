//! The DPF PRG `G(s)`: one ChaCha8 block keyed by `s || s` (SPEC §1.1).
//!
//! Two implementations share one round function: [`expand`] for a single seed (key generation,
//! point evaluation) and [`expand_lanes`] for [`LANES`] seeds at once in structure-of-arrays form,
//! which the compiler turns into SIMD (8 × u32 = one AVX2 register per state word). Full-domain
//! evaluation uses the latter; that is where all the time goes.

/// A 16-byte seed, as four little-endian u32 words.
pub type Seed = [u32; 4];

/// How many seeds [`expand_lanes`] expands per call.
pub const LANES: usize = 8;

const CONSTANTS: [u32; 4] = [0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574];

/// The children of one tree node, before correction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Children {
    pub left: Seed,
    pub t_left: bool,
    pub right: Seed,
    pub t_right: bool,
}

/// Reads 16 bytes as a seed.
pub fn seed_from_bytes(bytes: &[u8; 16]) -> Seed {
    std::array::from_fn(|i| u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()))
}

/// Writes a seed as 16 bytes.
pub fn seed_to_bytes(seed: &Seed) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (i, w) in seed.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// The ChaCha block function with a chosen round count (RFC 8439 §2.3 layout).
///
/// Exposed so tests can check it against the RFC's 20-round vector; the DPF uses 8 rounds.
pub fn chacha_block(key: &[u32; 8], counter: u32, nonce: &[u32; 3], rounds: usize) -> [u32; 16] {
    let mut input = [0u32; 16];
    input[..4].copy_from_slice(&CONSTANTS);
    input[4..12].copy_from_slice(key);
    input[12] = counter;
    input[13..].copy_from_slice(nonce);
    let mut x = input;
    for _ in 0..rounds / 2 {
        double_round(&mut x);
    }
    for (o, i) in x.iter_mut().zip(input) {
        *o = o.wrapping_add(i);
    }
    x
}

/// `G(s)` for one seed.
pub fn expand(seed: &Seed) -> Children {
    let key = [
        seed[0], seed[1], seed[2], seed[3], seed[0], seed[1], seed[2], seed[3],
    ];
    let w = chacha_block(&key, 0, &[0; 3], 8);
    Children {
        left: [w[0], w[1], w[2], w[3]],
        t_left: w[8] & 1 == 1,
        right: [w[4], w[5], w[6], w[7]],
        t_right: w[9] & 1 == 1,
    }
}

/// `G(s)` for [`LANES`] seeds: `seeds[j][lane]` is word `j` of lane's seed (structure of arrays).
///
/// Returns the output words `w0..w9` per lane (the rest of the block is unused by the DPF).
#[inline(always)]
pub fn expand_lanes(seeds: &[[u32; LANES]; 4]) -> [[u32; LANES]; 10] {
    let mut x = [[0u32; LANES]; 16];
    for (j, c) in CONSTANTS.iter().enumerate() {
        x[j] = [*c; LANES];
    }
    x[4..8].copy_from_slice(seeds);
    x[8..12].copy_from_slice(seeds);
    // words 12..16 (counter, nonce) are zero.
    let input = x;
    for _ in 0..4 {
        double_round_lanes(&mut x);
    }
    let mut out = [[0u32; LANES]; 10];
    for j in 0..10 {
        for l in 0..LANES {
            out[j][l] = x[j][l].wrapping_add(input[j][l]);
        }
    }
    out
}

#[inline(always)]
fn quarter_round(x: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize) {
    x[a] = x[a].wrapping_add(x[b]);
    x[d] = (x[d] ^ x[a]).rotate_left(16);
    x[c] = x[c].wrapping_add(x[d]);
    x[b] = (x[b] ^ x[c]).rotate_left(12);
    x[a] = x[a].wrapping_add(x[b]);
    x[d] = (x[d] ^ x[a]).rotate_left(8);
    x[c] = x[c].wrapping_add(x[d]);
    x[b] = (x[b] ^ x[c]).rotate_left(7);
}

#[inline(always)]
fn double_round(x: &mut [u32; 16]) {
    quarter_round(x, 0, 4, 8, 12);
    quarter_round(x, 1, 5, 9, 13);
    quarter_round(x, 2, 6, 10, 14);
    quarter_round(x, 3, 7, 11, 15);
    quarter_round(x, 0, 5, 10, 15);
    quarter_round(x, 1, 6, 11, 12);
    quarter_round(x, 2, 7, 8, 13);
    quarter_round(x, 3, 4, 9, 14);
}

/// The quarter round on [`LANES`] states at once; each line is one SIMD instruction per lane group.
#[inline(always)]
fn quarter_round_lanes(x: &mut [[u32; LANES]; 16], a: usize, b: usize, c: usize, d: usize) {
    let (mut va, mut vb, mut vc, mut vd) = (x[a], x[b], x[c], x[d]);
    for l in 0..LANES {
        va[l] = va[l].wrapping_add(vb[l]);
        vd[l] = (vd[l] ^ va[l]).rotate_left(16);
        vc[l] = vc[l].wrapping_add(vd[l]);
        vb[l] = (vb[l] ^ vc[l]).rotate_left(12);
        va[l] = va[l].wrapping_add(vb[l]);
        vd[l] = (vd[l] ^ va[l]).rotate_left(8);
        vc[l] = vc[l].wrapping_add(vd[l]);
        vb[l] = (vb[l] ^ vc[l]).rotate_left(7);
    }
    (x[a], x[b], x[c], x[d]) = (va, vb, vc, vd);
}

#[inline(always)]
fn double_round_lanes(x: &mut [[u32; LANES]; 16]) {
    quarter_round_lanes(x, 0, 4, 8, 12);
    quarter_round_lanes(x, 1, 5, 9, 13);
    quarter_round_lanes(x, 2, 6, 10, 14);
    quarter_round_lanes(x, 3, 7, 11, 15);
    quarter_round_lanes(x, 0, 5, 10, 15);
    quarter_round_lanes(x, 1, 6, 11, 12);
    quarter_round_lanes(x, 2, 7, 8, 13);
    quarter_round_lanes(x, 3, 4, 9, 14);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8439 §2.3.2: 20 rounds, counter 1, nonce 00:00:00:09:00:00:00:4a:00:00:00:00.
    #[test]
    fn rfc8439_block_vector() {
        let key: [u32; 8] = std::array::from_fn(|i| {
            let b = [
                4 * i as u8,
                4 * i as u8 + 1,
                4 * i as u8 + 2,
                4 * i as u8 + 3,
            ];
            u32::from_le_bytes(b)
        });
        let nonce = [0x0900_0000, 0x4a00_0000, 0];
        let out = chacha_block(&key, 1, &nonce, 20);
        assert_eq!(out[0], 0xe4e7_f110);
        assert_eq!(out[1], 0x1559_3bd1);
        assert_eq!(out[15], 0x4e3c_50a2);
    }

    #[test]
    fn lanes_match_scalar() {
        let seeds: [Seed; LANES] =
            std::array::from_fn(|l| std::array::from_fn(|j| (l * 7919 + j * 104729) as u32));
        let soa: [[u32; LANES]; 4] = std::array::from_fn(|j| std::array::from_fn(|l| seeds[l][j]));
        let out = expand_lanes(&soa);
        for (l, seed) in seeds.iter().enumerate() {
            let c = expand(seed);
            assert_eq!([out[0][l], out[1][l], out[2][l], out[3][l]], c.left);
            assert_eq!([out[4][l], out[5][l], out[6][l], out[7][l]], c.right);
            assert_eq!(out[8][l] & 1 == 1, c.t_left);
            assert_eq!(out[9][l] & 1 == 1, c.t_right);
        }
    }
}
