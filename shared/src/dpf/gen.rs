//! Client-side key generation (SPEC §1.5, standard BGI with early termination).

use rand::{CryptoRng, RngCore};

use super::key::{CorrectionWord, DpfKey, MAX_DOMAIN_BITS};
use super::prg::{expand, Seed};
use super::tree_depth;

/// Why a key pair could not be generated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GenError {
    #[error("domain bits {0} outside 1..=40")]
    DomainBits(u8),
    #[error("index {alpha} is outside the domain of {n} bits")]
    IndexOutOfDomain { n: u8, alpha: u64 },
}

fn xor(a: &Seed, b: &Seed) -> Seed {
    std::array::from_fn(|i| a[i] ^ b[i])
}

/// Generates the key pair `(k0, k1)` for the point function that is 1 at `alpha` in a domain of
/// `n` bits. Seeds come from `rng`, which must be a cryptographic generator.
pub fn generate<R: RngCore + CryptoRng>(
    n: u8,
    alpha: u64,
    rng: &mut R,
) -> Result<(DpfKey, DpfKey), GenError> {
    if !(1..=MAX_DOMAIN_BITS).contains(&n) {
        return Err(GenError::DomainBits(n));
    }
    if alpha >> n != 0 {
        return Err(GenError::IndexOutOfDomain { n, alpha });
    }
    let m = tree_depth(n);
    let hi = alpha >> 7;
    let lo = (alpha & 127) as usize;
    let mut random_seed = || -> Seed { std::array::from_fn(|_| rng.next_u32()) };
    let roots = [random_seed(), random_seed()];
    let (mut s, mut t) = (roots, [false, true]);
    let mut correction = Vec::with_capacity(m as usize);
    for level in 0..m {
        let a = (hi >> (m - 1 - level)) & 1 == 1;
        let c = [expand(&s[0]), expand(&s[1])];
        let lose = |c: &super::prg::Children| if a { c.left } else { c.right };
        let cw = CorrectionWord {
            seed: xor(&lose(&c[0]), &lose(&c[1])),
            t_left: c[0].t_left ^ c[1].t_left ^ a ^ true,
            t_right: c[0].t_right ^ c[1].t_right ^ a,
        };
        for b in 0..2 {
            let (keep_s, keep_t, t_cw) = if a {
                (c[b].right, c[b].t_right, cw.t_right)
            } else {
                (c[b].left, c[b].t_left, cw.t_left)
            };
            s[b] = if t[b] { xor(&keep_s, &cw.seed) } else { keep_s };
            t[b] = keep_t ^ (t[b] & t_cw);
        }
        correction.push(cw);
    }
    let mut unit = [0u32; 4];
    unit[lo / 32] = 1 << (lo % 32);
    let cw_out = xor(&xor(&s[0], &s[1]), &unit);
    Ok((
        DpfKey::from_parts(0, n, roots[0], correction.clone(), cw_out),
        DpfKey::from_parts(1, n, roots[1], correction, cw_out),
    ))
}
