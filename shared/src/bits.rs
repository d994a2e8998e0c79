//! Small bit and byte helpers shared by the scanners and the tools.

/// `dst ^= src`, byte for byte. The compiler vectorizes this loop.
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "xor of unequal lengths");
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= *s;
    }
}

/// Bit `i` of an LSB-first u64 bitmap.
pub fn bit(bitmap: &[u64], i: usize) -> bool {
    (bitmap[i / 64] >> (i % 64)) & 1 == 1
}

/// The bitmap as SPEC bytes: index `p` at bit `p % 8` of byte `p / 8`, `len` bytes.
pub fn bitmap_to_bytes(bitmap: &[u64], len: usize) -> Vec<u8> {
    bitmap
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .take(len)
        .collect()
}
