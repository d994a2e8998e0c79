/** Byte helpers: hex, padded standard base64 (SPEC §4) and XOR, with no platform dependency. */

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64_INDEX = (() => {
  const t = new Int16Array(128).fill(-1);
  for (let i = 0; i < 64; i++) t[B64.charCodeAt(i)] = i;
  return t;
})();

/** Standard base64 with padding (what the parties require for keys). */
export function toBase64(bytes: Uint8Array): string {
  let out = "";
  let i = 0;
  for (; i + 3 <= bytes.length; i += 3) {
    const v = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
    out += B64[v >> 18] + B64[(v >> 12) & 63] + B64[(v >> 6) & 63] + B64[v & 63];
  }
  const rest = bytes.length - i;
  if (rest === 1) {
    const v = bytes[i] << 16;
    out += B64[v >> 18] + B64[(v >> 12) & 63] + "==";
  } else if (rest === 2) {
    const v = (bytes[i] << 16) | (bytes[i + 1] << 8);
    out += B64[v >> 18] + B64[(v >> 12) & 63] + B64[(v >> 6) & 63] + "=";
  }
  return out;
}

/** Strict decoder of standard padded base64; `null` on anything else. */
export function fromBase64(text: string): Uint8Array | null {
  if (text.length % 4 !== 0) return null;
  let pad = 0;
  if (text.endsWith("==")) pad = 2;
  else if (text.endsWith("=")) pad = 1;
  const out = new Uint8Array((text.length / 4) * 3 - pad);
  let o = 0;
  for (let i = 0; i < text.length; i += 4) {
    let v = 0;
    for (let j = 0; j < 4; j++) {
      const c = text.charCodeAt(i + j);
      let d: number;
      if (c === 61 /* = */ && i + 4 === text.length && j >= 4 - pad) d = 0;
      else d = c < 128 ? B64_INDEX[c] : -1;
      if (d < 0) return null;
      v = (v << 6) | d;
    }
    if (o < out.length) out[o++] = (v >> 16) & 255;
    if (o < out.length) out[o++] = (v >> 8) & 255;
    if (o < out.length) out[o++] = v & 255;
  }
  return out;
}

export function toHex(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += (b < 16 ? "0" : "") + b.toString(16);
  return s;
}

export function fromHex(hex: string): Uint8Array {
  if (hex.length % 2 !== 0 || /[^0-9a-fA-F]/.test(hex)) throw new Error(`not hex: ${hex.slice(0, 16)}…`);
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** a XOR b into a new array; the two must have the same length. */
export function xorBytes(a: Uint8Array, b: Uint8Array): Uint8Array {
  if (a.length !== b.length) throw new Error(`xor of ${a.length} and ${b.length} bytes`);
  const out = new Uint8Array(a.length);
  for (let i = 0; i < a.length; i++) out[i] = a[i] ^ b[i];
  return out;
}

export function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * Fresh random bytes, only ever from the platform's CSPRNG (`crypto.getRandomValues`).
 *
 * Small requests are served from a 4 KiB pool filled by one call: in Node each call costs about
 * 19 µs whatever its size (measured: docs/bench/ts-client.md), more than a whole key pair's
 * ChaCha work; handed-out bytes are zeroed in the pool so no copy of a seed stays behind.
 */
export function randomBytes(n: number): Uint8Array {
  if (n > POOL_SIZE / 4) {
    const out = new Uint8Array(n);
    // getRandomValues fills at most 65536 bytes per call.
    for (let i = 0; i < n; i += 65536) crypto.getRandomValues(out.subarray(i, Math.min(n, i + 65536)));
    return out;
  }
  if (poolUsed + n > POOL_SIZE) {
    crypto.getRandomValues(pool);
    poolUsed = 0;
  }
  const out = pool.slice(poolUsed, poolUsed + n);
  pool.fill(0, poolUsed, poolUsed + n);
  poolUsed += n;
  return out;
}

const POOL_SIZE = 4096;
const pool = new Uint8Array(POOL_SIZE);
let poolUsed = POOL_SIZE;
