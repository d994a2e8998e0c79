/**
 * The DPF's PRG: one ChaCha block (RFC 8439 layout) on 32-bit words (SPEC §1.1).
 *
 * Written out on plain numbers with `| 0` / `>>> 0` arithmetic rather than through a crypto
 * library: WebCrypto has no raw ChaCha block function, the block is 30 lines, and key generation
 * calls it twice per tree level, so it must be cheap in every JavaScript engine.
 */

const SIGMA = [0x61707865, 0x3320646e, 0x79622d32, 0x6b206574];

/**
 * One ChaCha block with `rounds` rounds (8 for the DPF; 20 only for the RFC sanity test).
 * `key` is 8 words, `nonce` 3 words; the 16 output words (after the feed-forward addition)
 * are written into `out`.
 */
export function chachaBlock(
  key: ArrayLike<number>,
  counter: number,
  nonce: ArrayLike<number>,
  rounds: number,
  out: Uint32Array,
): void {
  const i0 = SIGMA[0], i1 = SIGMA[1], i2 = SIGMA[2], i3 = SIGMA[3];
  const i4 = key[0] | 0, i5 = key[1] | 0, i6 = key[2] | 0, i7 = key[3] | 0;
  const i8 = key[4] | 0, i9 = key[5] | 0, i10 = key[6] | 0, i11 = key[7] | 0;
  const i12 = counter | 0, i13 = nonce[0] | 0, i14 = nonce[1] | 0, i15 = nonce[2] | 0;
  let x0 = i0, x1 = i1, x2 = i2, x3 = i3, x4 = i4, x5 = i5, x6 = i6, x7 = i7;
  let x8 = i8, x9 = i9, x10 = i10, x11 = i11, x12 = i12, x13 = i13, x14 = i14, x15 = i15;
  for (let r = 0; r < rounds; r += 2) {
    // column round
    x0 = (x0 + x4) | 0; x12 ^= x0; x12 = (x12 << 16) | (x12 >>> 16);
    x8 = (x8 + x12) | 0; x4 ^= x8; x4 = (x4 << 12) | (x4 >>> 20);
    x0 = (x0 + x4) | 0; x12 ^= x0; x12 = (x12 << 8) | (x12 >>> 24);
    x8 = (x8 + x12) | 0; x4 ^= x8; x4 = (x4 << 7) | (x4 >>> 25);
    x1 = (x1 + x5) | 0; x13 ^= x1; x13 = (x13 << 16) | (x13 >>> 16);
    x9 = (x9 + x13) | 0; x5 ^= x9; x5 = (x5 << 12) | (x5 >>> 20);
    x1 = (x1 + x5) | 0; x13 ^= x1; x13 = (x13 << 8) | (x13 >>> 24);
    x9 = (x9 + x13) | 0; x5 ^= x9; x5 = (x5 << 7) | (x5 >>> 25);
    x2 = (x2 + x6) | 0; x14 ^= x2; x14 = (x14 << 16) | (x14 >>> 16);
    x10 = (x10 + x14) | 0; x6 ^= x10; x6 = (x6 << 12) | (x6 >>> 20);
    x2 = (x2 + x6) | 0; x14 ^= x2; x14 = (x14 << 8) | (x14 >>> 24);
    x10 = (x10 + x14) | 0; x6 ^= x10; x6 = (x6 << 7) | (x6 >>> 25);
    x3 = (x3 + x7) | 0; x15 ^= x3; x15 = (x15 << 16) | (x15 >>> 16);
    x11 = (x11 + x15) | 0; x7 ^= x11; x7 = (x7 << 12) | (x7 >>> 20);
    x3 = (x3 + x7) | 0; x15 ^= x3; x15 = (x15 << 8) | (x15 >>> 24);
    x11 = (x11 + x15) | 0; x7 ^= x11; x7 = (x7 << 7) | (x7 >>> 25);
    // diagonal round
    x0 = (x0 + x5) | 0; x15 ^= x0; x15 = (x15 << 16) | (x15 >>> 16);
    x10 = (x10 + x15) | 0; x5 ^= x10; x5 = (x5 << 12) | (x5 >>> 20);
    x0 = (x0 + x5) | 0; x15 ^= x0; x15 = (x15 << 8) | (x15 >>> 24);
    x10 = (x10 + x15) | 0; x5 ^= x10; x5 = (x5 << 7) | (x5 >>> 25);
    x1 = (x1 + x6) | 0; x12 ^= x1; x12 = (x12 << 16) | (x12 >>> 16);
    x11 = (x11 + x12) | 0; x6 ^= x11; x6 = (x6 << 12) | (x6 >>> 20);
    x1 = (x1 + x6) | 0; x12 ^= x1; x12 = (x12 << 8) | (x12 >>> 24);
    x11 = (x11 + x12) | 0; x6 ^= x11; x6 = (x6 << 7) | (x6 >>> 25);
    x2 = (x2 + x7) | 0; x13 ^= x2; x13 = (x13 << 16) | (x13 >>> 16);
    x8 = (x8 + x13) | 0; x7 ^= x8; x7 = (x7 << 12) | (x7 >>> 20);
    x2 = (x2 + x7) | 0; x13 ^= x2; x13 = (x13 << 8) | (x13 >>> 24);
    x8 = (x8 + x13) | 0; x7 ^= x8; x7 = (x7 << 7) | (x7 >>> 25);
    x3 = (x3 + x4) | 0; x14 ^= x3; x14 = (x14 << 16) | (x14 >>> 16);
    x9 = (x9 + x14) | 0; x4 ^= x9; x4 = (x4 << 12) | (x4 >>> 20);
    x3 = (x3 + x4) | 0; x14 ^= x3; x14 = (x14 << 8) | (x14 >>> 24);
    x9 = (x9 + x14) | 0; x4 ^= x9; x4 = (x4 << 7) | (x4 >>> 25);
  }
  out[0] = x0 + i0; out[1] = x1 + i1; out[2] = x2 + i2; out[3] = x3 + i3;
  out[4] = x4 + i4; out[5] = x5 + i5; out[6] = x6 + i6; out[7] = x7 + i7;
  out[8] = x8 + i8; out[9] = x9 + i9; out[10] = x10 + i10; out[11] = x11 + i11;
  out[12] = x12 + i12; out[13] = x13 + i13; out[14] = x14 + i14; out[15] = x15 + i15;
}

const ZERO_NONCE = [0, 0, 0];

/**
 * The DPF PRG `G(s)`: a seed is 4 little-endian words; key = s || s, counter 0, nonce 0,
 * 8 rounds. Left child seed = out[0..4], right = out[4..8], tL = out[8] & 1, tR = out[9] & 1.
 */
export function prg(seed: Uint32Array, out: Uint32Array): void {
  PRG_KEY[0] = PRG_KEY[4] = seed[0];
  PRG_KEY[1] = PRG_KEY[5] = seed[1];
  PRG_KEY[2] = PRG_KEY[6] = seed[2];
  PRG_KEY[3] = PRG_KEY[7] = seed[3];
  chachaBlock(PRG_KEY, 0, ZERO_NONCE, 8, out);
}

/** Scratch for the PRG's key (s || s), reused: key generation calls the PRG 2·(n−7) times. */
const PRG_KEY = new Uint32Array(8);
