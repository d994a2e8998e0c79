/**
 * DPF v1 (SPEC §1): key generation for a client, and the parser and evaluator a party runs.
 *
 * The client only needs {@link generateKeys}; parsing and evaluation are here so the package can
 * check itself against the spec's vectors (full-domain and point evaluation, database answers),
 * which is what makes it a conformance proof rather than a copy of the Rust code.
 *
 * Seeds are 4 little-endian 32-bit words (`Uint32Array(4)`), the PRG's native unit.
 */

import { prg } from "./chacha.js";
import { randomBytes } from "./bytes.js";
import { PirqError } from "./errors.js";

/** Largest domain a key may have (SPEC §1.2). */
export const MAX_DOMAIN_BITS = 40;
/** Indices per GGM leaf: the last 7 levels are one 128-bit leaf value (early termination). */
const LEAF_BITS = 7;

/** Tree depth for a domain of `n` bits. */
export function treeDepth(n: number): number {
  return Math.max(n - LEAF_BITS, 0);
}

/** Exact key length for a domain of `n` bits: 35 + 17·m bytes. */
export function keyLength(n: number): number {
  return 35 + 17 * treeDepth(n);
}

/** A parsed key (SPEC §1.3). */
export interface DpfKey {
  party: 0 | 1;
  n: number;
  root: Uint32Array;
  /** per level: seed correction word */
  cwSeed: Uint32Array[];
  /** per level: left and right control-bit corrections */
  cwTL: number[];
  cwTR: number[];
  cwOut: Uint32Array;
}

function readWords(bytes: Uint8Array, off: number): Uint32Array {
  const w = new Uint32Array(4);
  for (let i = 0; i < 4; i++) {
    const o = off + 4 * i;
    w[i] = bytes[o] | (bytes[o + 1] << 8) | (bytes[o + 2] << 16) | (bytes[o + 3] << 24);
  }
  return w;
}

function writeWords(bytes: Uint8Array, off: number, w: ArrayLike<number>): void {
  for (let i = 0; i < 4; i++) {
    const v = w[i];
    const o = off + 4 * i;
    bytes[o] = v & 255;
    bytes[o + 1] = (v >>> 8) & 255;
    bytes[o + 2] = (v >>> 16) & 255;
    bytes[o + 3] = (v >>> 24) & 255;
  }
}

/**
 * Bit `i` of `hi` counted from the most significant of `m` bits (the path to a leaf).
 * Division, not `>>`: `hi` may exceed 32 bits (n up to 40).
 */
function pathBit(hi: number, m: number, level: number): number {
  return Math.floor(hi / 2 ** (m - 1 - level)) % 2;
}

/** Root seeds given explicitly: for the spec vectors only. Everything else uses {@link generateKeys}. */
export function generateKeysFromSeeds(
  n: number,
  alpha: number,
  root0: Uint32Array,
  root1: Uint32Array,
): [Uint8Array, Uint8Array] {
  if (!Number.isInteger(n) || n < 1 || n > MAX_DOMAIN_BITS) {
    throw new PirqError("invalid_argument", `domain bits ${n} outside 1..=${MAX_DOMAIN_BITS}`);
  }
  if (!Number.isSafeInteger(alpha) || alpha < 0 || alpha >= 2 ** n) {
    throw new PirqError("invalid_argument", `index ${alpha} outside 0..2^${n}`);
  }
  const m = treeDepth(n);
  const hi = Math.floor(alpha / 128);
  const lo = alpha % 128;
  const k0 = new Uint8Array(keyLength(n));
  const k1 = new Uint8Array(keyLength(n));
  k0[0] = 1; k0[1] = 0; k0[2] = n;
  k1[0] = 1; k1[1] = 1; k1[2] = n;
  writeWords(k0, 3, root0);
  writeWords(k1, 3, root1);

  const s0 = Uint32Array.from(root0);
  const s1 = Uint32Array.from(root1);
  let t0 = 0;
  let t1 = 1;
  const g0 = new Uint32Array(16);
  const g1 = new Uint32Array(16);
  const cw = new Uint32Array(4);
  for (let level = 0; level < m; level++) {
    const a = pathBit(hi, m, level);
    prg(s0, g0);
    prg(s1, g1);
    const keep = a === 0 ? 0 : 4; // word offset of the kept child's seed
    const lose = a === 0 ? 4 : 0;
    for (let i = 0; i < 4; i++) cw[i] = g0[lose + i] ^ g1[lose + i];
    const tLcw = (g0[8] ^ g1[8] ^ a ^ 1) & 1;
    const tRcw = (g0[9] ^ g1[9] ^ a) & 1;
    const tKeepCw = a === 0 ? tLcw : tRcw;
    const tKeep0 = g0[a === 0 ? 8 : 9] & 1;
    const tKeep1 = g1[a === 0 ? 8 : 9] & 1;
    for (let i = 0; i < 4; i++) {
      s0[i] = g0[keep + i] ^ (t0 ? cw[i] : 0);
      s1[i] = g1[keep + i] ^ (t1 ? cw[i] : 0);
    }
    const nt0 = tKeep0 ^ (t0 & tKeepCw);
    const nt1 = tKeep1 ^ (t1 & tKeepCw);
    t0 = nt0;
    t1 = nt1;
    const off = 19 + 17 * level;
    writeWords(k0, off, cw);
    writeWords(k1, off, cw);
    k0[off + 16] = k1[off + 16] = tLcw | (tRcw << 1);
  }
  const out = new Uint32Array(4);
  for (let i = 0; i < 4; i++) out[i] = s0[i] ^ s1[i];
  out[lo >>> 5] ^= 1 << (lo & 31); // unit(lo): bit lo of the LE 16-byte value
  const off = 19 + 17 * m;
  writeWords(k0, off, out);
  writeWords(k1, off, out);
  return [k0, k1];
}

/**
 * A fresh key pair for index `alpha` in a domain of `n` bits: `[key for party A (0), key for
 * party B (1)]`. Root seeds come from `crypto.getRandomValues` and nothing else.
 */
export function generateKeys(n: number, alpha: number): [Uint8Array, Uint8Array] {
  const seeds = randomBytes(32);
  return generateKeysFromSeeds(n, alpha, readWords(seeds, 0), readWords(seeds, 16));
}

/** The SPEC §1.3 parser; throws {@link PirqError} with the same `key_*` codes a party uses. */
export function parseKey(bytes: Uint8Array): DpfKey {
  if (bytes.length < 3) throw new PirqError("key_too_short", `key of ${bytes.length} bytes`);
  if (bytes[0] !== 1) throw new PirqError("key_version", `key version ${bytes[0]}`);
  if (bytes[1] > 1) throw new PirqError("key_party", `key party ${bytes[1]}`);
  const n = bytes[2];
  if (n < 1 || n > MAX_DOMAIN_BITS) throw new PirqError("key_domain_bits", `key domain bits ${n}`);
  if (bytes.length !== keyLength(n)) {
    throw new PirqError("key_length", `key of ${bytes.length} bytes, ${keyLength(n)} expected for n = ${n}`);
  }
  const m = treeDepth(n);
  const key: DpfKey = {
    party: bytes[1] as 0 | 1,
    n,
    root: readWords(bytes, 3),
    cwSeed: [],
    cwTL: [],
    cwTR: [],
    cwOut: readWords(bytes, 19 + 17 * m),
  };
  for (let level = 0; level < m; level++) {
    const off = 19 + 17 * level;
    const t = bytes[off + 16];
    if (t & ~3) throw new PirqError("key_control_byte", `t byte ${t} at level ${level}`);
    key.cwSeed.push(readWords(bytes, off));
    key.cwTL.push(t & 1);
    key.cwTR.push((t >> 1) & 1);
  }
  return key;
}

/** The 128 selection bits of leaf `j` (16 bytes, bit i = bit i%8 of byte i/8), SPEC §1.4. */
export function evalLeaf(key: DpfKey, j: number): Uint8Array {
  const m = treeDepth(key.n);
  const s = Uint32Array.from(key.root);
  let t = key.party;
  const g = new Uint32Array(16);
  for (let level = 0; level < m; level++) {
    prg(s, g);
    const right = pathBit(j, m, level);
    const off = right ? 4 : 0;
    let nt = g[right ? 9 : 8] & 1;
    for (let i = 0; i < 4; i++) s[i] = g[off + i] ^ (t ? key.cwSeed[level][i] : 0);
    if (t) nt ^= right ? key.cwTR[level] : key.cwTL[level];
    t = nt as 0 | 1;
  }
  const leaf = new Uint8Array(16);
  const v = new Uint32Array(4);
  for (let i = 0; i < 4; i++) v[i] = s[i] ^ (t ? key.cwOut[i] : 0);
  writeWords(leaf, 0, v);
  return leaf;
}

/** The selection bit of index `p`. */
export function evalPoint(key: DpfKey, p: number): number {
  const leaf = evalLeaf(key, Math.floor(p / 128));
  const bit = p % 128;
  return (leaf[bit >> 3] >> (bit & 7)) & 1;
}

/**
 * All `2^n` selection bits, packed LSB-first (index p = bit p%8 of byte p/8); for n < 3 the one
 * byte's unused high bits are zero. Depth-first, one PRG call per inner node.
 */
export function evalFullDomain(key: DpfKey): Uint8Array {
  const m = treeDepth(key.n);
  const total = 2 ** key.n;
  const out = new Uint8Array(Math.ceil(total / 8));
  if (m === 0) {
    const leaf = evalLeaf(key, 0);
    out.set(leaf.subarray(0, out.length));
    if (total < 8) out[0] &= (1 << total) - 1;
    return out;
  }
  const g = new Uint32Array(16);
  const leafBytes = new Uint8Array(16);
  const v = new Uint32Array(4);
  const walk = (s: Uint32Array, t: number, level: number, j: number): void => {
    if (level === m) {
      for (let i = 0; i < 4; i++) v[i] = s[i] ^ (t ? key.cwOut[i] : 0);
      writeWords(leafBytes, 0, v);
      out.set(leafBytes, j * 16);
      return;
    }
    prg(s, g);
    const left = new Uint32Array(4);
    const right = new Uint32Array(4);
    for (let i = 0; i < 4; i++) {
      const c = t ? key.cwSeed[level][i] : 0;
      left[i] = g[i] ^ c;
      right[i] = g[4 + i] ^ c;
    }
    const tl = (g[8] & 1) ^ (t & key.cwTL[level]);
    const tr = (g[9] & 1) ^ (t & key.cwTR[level]);
    walk(left, tl, level + 1, 2 * j);
    walk(right, tr, level + 1, 2 * j + 1);
  };
  walk(key.root, key.party, 0, 0);
  return out;
}
