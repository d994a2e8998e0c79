//! Property tests of DPF v1: correctness of the pair, serialization, and evaluator agreement.

use pirq_shared::bits::bit;
use pirq_shared::dpf::{
    bitmap_words, eval_full, eval_point, eval_range, generate, range_words, DpfKey,
};
use proptest::prelude::*;
use rand::{rngs::StdRng, SeedableRng};

fn pair(n: u8, alpha: u64, seed: u64) -> (DpfKey, DpfKey) {
    generate(n, alpha, &mut StdRng::seed_from_u64(seed)).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// XOR of the two bitmaps is exactly the unit vector at α.
    #[test]
    fn bitmaps_xor_to_unit_vector(n in 1u8..=16, alpha_frac in 0.0f64..1.0, seed in any::<u64>()) {
        let alpha = ((1u64 << n) as f64 * alpha_frac) as u64;
        let (k0, k1) = pair(n, alpha, seed);
        let (b0, b1) = (eval_full(&k0), eval_full(&k1));
        prop_assert_eq!(b0.len(), bitmap_words(n));
        for (w, (x, y)) in b0.iter().zip(&b1).enumerate() {
            let expect = if alpha / 64 == w as u64 { 1u64 << (alpha % 64) } else { 0 };
            prop_assert_eq!(x ^ y, expect, "word {}", w);
        }
    }

    #[test]
    fn parse_of_serialize_is_identity(n in 1u8..=40, seed in any::<u64>()) {
        let alpha = seed >> (64 - n as u32);
        let (k0, k1) = pair(n, alpha, seed);
        for k in [k0, k1] {
            let bytes = k.to_bytes();
            prop_assert_eq!(bytes.len(), 35 + 17 * (n as usize).saturating_sub(7));
            prop_assert_eq!(DpfKey::parse(&bytes).unwrap(), k);
        }
    }

    /// Point evaluation agrees with the full-domain bitmap everywhere it is sampled.
    #[test]
    fn point_matches_full_domain(n in 1u8..=18, seed in any::<u64>(), samples in prop::collection::vec(any::<u64>(), 32)) {
        let alpha = seed % (1u64 << n);
        let (k0, _) = pair(n, alpha, seed);
        let bits = eval_full(&k0);
        for x in samples.into_iter().map(|s| s % (1u64 << n)).chain([alpha]) {
            prop_assert_eq!(eval_point(&k0, x).unwrap(), bit(&bits, x as usize));
        }
        prop_assert!(eval_point(&k0, 1u64 << n).is_err());
    }

    /// Large domains, checked by point evaluation at α and nearby indices.
    #[test]
    fn large_domains_are_correct(n in 19u8..=40, seed in any::<u64>()) {
        let alpha = seed >> (64 - n as u32);
        let (k0, k1) = pair(n, alpha, seed);
        for x in [alpha, alpha ^ 1, alpha ^ 128, alpha ^ (1 << (n - 1)), 0] {
            let v = eval_point(&k0, x).unwrap() ^ eval_point(&k1, x).unwrap();
            prop_assert_eq!(v, x == alpha, "x={}", x);
        }
    }

    /// Subtree evaluation of any leaf-aligned range equals that slice of the full domain (and
    /// bits past the range's end are zero), for both keys of a pair.
    #[test]
    fn range_matches_full_domain(
        n in 1u8..=20,
        seed in any::<u64>(),
        lo_frac in 0.0f64..1.0,
        len_frac in 0.0f64..1.0,
    ) {
        let size = 1u64 << n;
        let alpha = seed % size;
        let lo = ((size as f64 * lo_frac) as u64 / 128 * 128).min(size);
        let hi = lo + ((size - lo) as f64 * len_frac).round() as u64;
        let (k0, k1) = pair(n, alpha, seed);
        for key in [&k0, &k1] {
            let full = eval_full(key);
            let part = eval_range(key, lo..hi).unwrap();
            prop_assert_eq!(part.len(), range_words(&(lo..hi)));
            for j in 0..(hi - lo) as usize {
                prop_assert_eq!(bit(&part, j), bit(&full, lo as usize + j), "n={} range {}..{} index {}", n, lo, hi, lo + j as u64);
            }
            for j in (hi - lo) as usize..64 * part.len() {
                prop_assert!(!bit(&part, j), "bit {} past the range end is set", j);
            }
        }
        prop_assert!(eval_range(&k0, 1..size).is_err());
        prop_assert!(eval_range(&k0, 0..size + 1).is_err());
    }

    /// Any byte string either parses into a key that re-serializes to it, or is rejected.
    #[test]
    fn parse_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(k) = DpfKey::parse(&bytes) {
            prop_assert_eq!(k.to_bytes(), bytes);
        }
    }
}

#[test]
fn generate_rejects_out_of_domain_inputs() {
    let mut rng = StdRng::seed_from_u64(7);
    assert!(generate(0, 0, &mut rng).is_err());
    assert!(generate(41, 0, &mut rng).is_err());
    assert!(generate(8, 256, &mut rng).is_err());
}
