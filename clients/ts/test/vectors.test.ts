// The spec's test vectors (shared/tests/vectors/dpf_v1.json, produced by an independent
// implementation of SPEC §1), reproduced by this package: PRG, key generation from the vectors'
// own root seeds (byte for byte), full-domain and point evaluation, database answers, bad keys.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { chachaBlock, prg } from "../src/chacha.js";
import { evalFullDomain, evalPoint, generateKeys, generateKeysFromSeeds, parseKey } from "../src/dpf.js";
import { fromHex, toHex, xorBytes } from "../src/bytes.js";
import { PirqError } from "../src/errors.js";

// dist/test/ → clients/ts/ → repo root
const vectorsPath = fileURLToPath(new URL("../../../../shared/tests/vectors/dpf_v1.json", import.meta.url));
const V = JSON.parse(readFileSync(vectorsPath, "utf8"));

function words(hex: string): Uint32Array {
  const b = fromHex(hex);
  const w = new Uint32Array(4);
  for (let i = 0; i < 4; i++) w[i] = b[4 * i] | (b[4 * i + 1] << 8) | (b[4 * i + 2] << 16) | (b[4 * i + 3] << 24);
  return w;
}
function wordsHex(w: Uint32Array, from: number): string {
  const b = new Uint8Array(16);
  for (let i = 0; i < 4; i++) for (let j = 0; j < 4; j++) b[4 * i + j] = (w[from + i] >>> (8 * j)) & 255;
  return toHex(b);
}

test("ChaCha block: RFC 8439 §2.3.2 test vector with 20 rounds (the sanity check of SPEC §1.1)", () => {
  const keyBytes = new Uint8Array(32).map((_, i) => i);
  const key = new Uint32Array(keyBytes.buffer);
  const nonce = [0x09000000, 0x4a000000, 0x00000000];
  const out = new Uint32Array(16);
  chachaBlock(Array.from(key, (x) => x), 1, nonce, 20, out);
  const expected = [
    0xe4e7f110, 0x15593bd1, 0x1fdd0f50, 0xc47120a3, 0xc7f4d1c7, 0x0368c033, 0x9aaa2204, 0x4e6cd4c3,
    0x466482d2, 0x09aa9f07, 0x05d7c214, 0xa2028bd9, 0xd19c12b5, 0xb94e16de, 0xe883d0cb, 0x4e3c50a2,
  ];
  assert.deepEqual(Array.from(out), expected);
});

test("PRG vectors", () => {
  assert.ok(V.prg.length > 0);
  for (const v of V.prg) {
    const out = new Uint32Array(16);
    prg(words(v.seed), out);
    assert.equal(wordsHex(out, 0), v.left, `left child of ${v.seed}`);
    assert.equal(wordsHex(out, 4), v.right, `right child of ${v.seed}`);
    assert.equal(out[8] & 1, v.t_left);
    assert.equal(out[9] & 1, v.t_right);
  }
});

/** Regenerates a vector's key pair from its own root seeds: must match byte for byte. */
function regenerate(v: { n: number; alpha: number; key0: string; key1: string }): void {
  const k0 = fromHex(v.key0);
  const k1 = fromHex(v.key1);
  const [g0, g1] = generateKeysFromSeeds(v.n, v.alpha, words(toHex(k0.subarray(3, 19))), words(toHex(k1.subarray(3, 19))));
  assert.equal(toHex(g0), v.key0, `key0 n=${v.n} alpha=${v.alpha}`);
  assert.equal(toHex(g1), v.key1, `key1 n=${v.n} alpha=${v.alpha}`);
}

test("key generation reproduces every vector key from its root seeds", () => {
  const all = [...V.full_domain, ...V.point_evals, ...V.db_answers];
  assert.ok(all.length >= 10);
  for (const v of all) regenerate(v);
});

test("full-domain evaluation vectors", () => {
  for (const v of V.full_domain) {
    const b0 = evalFullDomain(parseKey(fromHex(v.key0)));
    const b1 = evalFullDomain(parseKey(fromHex(v.key1)));
    assert.equal(toHex(b0), v.bits0, `bits0 n=${v.n}`);
    assert.equal(toHex(b1), v.bits1, `bits1 n=${v.n}`);
    // and the XOR is the unit vector at alpha
    const x = xorBytes(b0, b1);
    for (let p = 0; p < 2 ** v.n; p++) {
      assert.equal((x[p >> 3] >> (p & 7)) & 1, p === v.alpha ? 1 : 0, `n=${v.n} p=${p}`);
    }
  }
});

test("point evaluation vectors (large domains)", () => {
  for (const v of V.point_evals) {
    const k0 = parseKey(fromHex(v.key0));
    const k1 = parseKey(fromHex(v.key1));
    const points = Object.keys(v.bits0);
    assert.ok(points.length > 0);
    for (const p of points) {
      assert.equal(evalPoint(k0, Number(p)), v.bits0[p], `bits0 n=${v.n} p=${p}`);
      assert.equal(evalPoint(k1, Number(p)), v.bits1[p], `bits1 n=${v.n} p=${p}`);
    }
    assert.equal(evalPoint(k0, v.alpha) ^ evalPoint(k1, v.alpha), 1);
  }
});

/** The vectors' tiny databases: page p, byte i = (p * 131 + i * 7 + 3) mod 256. */
function tinyPage(p: number, size: number): Uint8Array {
  return new Uint8Array(size).map((_, i) => (p * 131 + i * 7 + 3) % 256);
}

test("database answers: each party's XOR of selected pages, and their XOR is the page", () => {
  for (const v of V.db_answers) {
    const answers = [v.key0, v.key1].map((hex) => {
      const bits = evalFullDomain(parseKey(fromHex(hex)));
      const acc = new Uint8Array(v.page_size);
      for (let p = 0; p < v.num_pages; p++) {
        if ((bits[p >> 3] >> (p & 7)) & 1) {
          const page = tinyPage(p, v.page_size);
          for (let i = 0; i < acc.length; i++) acc[i] ^= page[i];
        }
      }
      return acc;
    });
    assert.equal(toHex(answers[0]), v.answer0);
    assert.equal(toHex(answers[1]), v.answer1);
    assert.deepEqual(xorBytes(answers[0], answers[1]), tinyPage(v.alpha, v.page_size));
  }
});

test("bad keys are rejected with the parser's codes", () => {
  const expected: Record<string, string> = {
    wrong_version: "key_version",
    party_2: "key_party",
    n_0: "key_domain_bits",
    n_41: "key_domain_bits",
    truncated: "key_length",
    one_byte_long: "key_length",
    t_byte_bit2: "key_control_byte",
    empty: "key_too_short",
  };
  assert.deepEqual(Object.keys(V.bad_keys).sort(), Object.keys(expected).sort(), "every bad-key vector has an expected code here");
  for (const [name, hex] of Object.entries(V.bad_keys as Record<string, string>)) {
    assert.throws(
      () => parseKey(fromHex(hex)),
      (e: unknown) => e instanceof PirqError && e.code === expected[name],
      name,
    );
  }
});

test("fresh keys: random roots, right shape, XOR is the unit vector", () => {
  for (const [n, alpha] of [[1, 0], [7, 99], [10, 1000], [12, 4095], [40, 2 ** 40 - 1]] as const) {
    const [k0, k1] = generateKeys(n, alpha);
    const p0 = parseKey(k0);
    const p1 = parseKey(k1);
    assert.equal(p0.party, 0);
    assert.equal(p1.party, 1);
    assert.notEqual(toHex(k0.subarray(3, 19)), toHex(k1.subarray(3, 19)));
    if (n <= 12) {
      const x = xorBytes(evalFullDomain(p0), evalFullDomain(p1));
      for (let p = 0; p < 2 ** n; p++) assert.equal((x[p >> 3] >> (p & 7)) & 1, p === alpha ? 1 : 0);
    } else {
      for (const p of [alpha, alpha - 1, 0, 12345678]) {
        assert.equal(evalPoint(p0, p) ^ evalPoint(p1, p), p === alpha ? 1 : 0);
      }
    }
  }
  // two key pairs for the same index share nothing
  const [a] = generateKeys(20, 5);
  const [b] = generateKeys(20, 5);
  assert.notEqual(toHex(a), toHex(b));
  assert.throws(() => generateKeys(8, 256), (e: unknown) => e instanceof PirqError && e.code === "invalid_argument");
});
