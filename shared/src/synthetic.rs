//! Deterministic synthetic pages, the same on every machine and on the GPU.
//!
//! Word `i` (little-endian u64) of page `p` under `seed` is
//! `mix64(base + (i + 1) * G)` with `base = mix64(seed + (p + 1) * G)`, all arithmetic
//! wrapping, `G = 0x9E3779B97F4A7C15` and `mix64` the SplitMix64 finalizer. Every word is
//! independent, so a GPU kernel (or many threads) can generate any page without the others:
//! benches build 64 GiB databases on the device instead of shipping files.

const G: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function.
#[inline(always)]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Word `i` of page `p`.
#[inline(always)]
pub fn word(seed: u64, p: u64, i: u64) -> u64 {
    mix64(page_base(seed, p).wrapping_add(i.wrapping_add(1).wrapping_mul(G)))
}

#[inline(always)]
fn page_base(seed: u64, p: u64) -> u64 {
    mix64(seed.wrapping_add(p.wrapping_add(1).wrapping_mul(G)))
}

/// Fills `out` (a whole page, length a multiple of 8) with page `p`.
pub fn fill_page(seed: u64, p: u64, out: &mut [u8]) {
    let base = page_base(seed, p);
    for (i, chunk) in out.chunks_exact_mut(8).enumerate() {
        let w = mix64(base.wrapping_add((i as u64).wrapping_add(1).wrapping_mul(G)));
        chunk.copy_from_slice(&w.to_le_bytes());
    }
}

/// The name the generator's database goes by where a digest is needed (SPEC §2.1): a worker
/// serving `--synthetic PAGES:PAGE_SIZE:SEED` registers it at epoch 0. It is not the content
/// digest (hashing pages that exist only on a GPU would cost a pass over them); it names the
/// same pages on every machine: BLAKE3("pirq.synthetic.v1" || u32le(page_size) ||
/// u64le(num_pages) || u64le(seed)).
pub fn digest(page_size: u32, num_pages: u64, seed: u64) -> crate::digest::Digest {
    let mut h = blake3::Hasher::new();
    h.update(b"pirq.synthetic.v1");
    h.update(&page_size.to_le_bytes());
    h.update(&num_pages.to_le_bytes());
    h.update(&seed.to_le_bytes());
    crate::digest::Digest(*h.finalize().as_bytes())
}
