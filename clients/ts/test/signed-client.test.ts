// The client against scripted parties that serve a signed database (SPEC §2.4), signed here with
// the vectors' publisher key: pages verified and exact with `publisherKey`; a party that XORs
// bytes into its answer (keeping the digest stamp) refused every time, whichever bytes; a page
// from a later epoch XORed into an earlier one refused; another publisher's database and an
// unsigned one refused when pinned; without a key, it works and says once that it does not
// verify. Real parties and the Rust tools: signed-e2e.test.ts.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { ed25519 } from "@noble/curves/ed25519.js";
import { connect, fromBase64, fromHex, PirqError, toBase64 } from "../src/index.js";
import { xorBytes } from "../src/bytes.js";
import { evalFullDomain, parseKey } from "../src/dpf.js";
import { pageMessage } from "../src/signed.js";

const V = JSON.parse(readFileSync(fileURLToPath(new URL("../../../../shared/tests/vectors/signed_v1.json", import.meta.url)), "utf8"));
const A = "http://127.0.0.1:1";
const B = "http://127.0.0.2:1";
const PAGES = 100;
const PAGE_SIZE = 256;
const USABLE = PAGE_SIZE - 72;
const DIGEST = "11".repeat(32);

/** Page `index` as the publisher signs it: usable bytes, then `changed_epoch` and the signature. */
function signedPage(secret: Uint8Array, index: number, changedEpoch: number, fill: number): Uint8Array {
  const usable = new Uint8Array(USABLE).map((_, i) => (fill + 31 * index + i) & 0xff);
  const page = new Uint8Array(PAGE_SIZE);
  page.set(usable);
  new DataView(page.buffer).setBigUint64(USABLE, BigInt(changedEpoch), true);
  page.set(ed25519.sign(pageMessage(fromHex(V.db_id), index, changedEpoch, usable), secret), USABLE + 8);
  return page;
}

const SECRET = fromHex(V.secret_seed);
const OTHER_SECRET = new Uint8Array(32).fill(0xee);
assert.equal(Buffer.from(ed25519.getPublicKey(OTHER_SECRET)).toString("hex"), V.other_public_key);
const DB = Array.from({ length: PAGES }, (_, i) => signedPage(SECRET, i, 0, 0));

interface Fake {
  pages: Uint8Array[];
  signing?: boolean;
  /** XORed into this party's answer to every key (the digest stamp kept). */
  tamper?: (answer: Uint8Array, keyIndex: number) => void;
  epoch?: number;
}

/** A fetch serving two parties that answer honestly from `pages` (a DPF full-domain scan), then tamper. */
function parties(a: Fake, b: Fake): typeof fetch {
  return (async (input: RequestInfo | URL, init: RequestInit = {}) => {
    const url = new URL(String(input));
    const party = url.origin === A ? a : b;
    if (url.pathname === "/v1/info") {
      const signing = { scheme: "ed25519", tail_len: 72, publisher_key: V.public_key, db_id: V.db_id };
      return Response.json({
        num_pages: PAGES, page_size: PAGE_SIZE, domain_bits: 7, epoch: { oldest: 0, newest: party.epoch ?? 0 }, max_keys_per_query: 64, workers: 1,
        ...(party.signing === false ? {} : { signing }),
      });
    }
    const body = JSON.parse(String(init.body));
    const answers = body.keys.map((k: string, n: number) => {
      const bits = evalFullDomain(parseKey(fromBase64(k)!));
      let answer: Uint8Array = new Uint8Array(PAGE_SIZE);
      for (let p = 0; p < PAGES; p++) if ((bits[p >> 3] >> (p & 7)) & 1) answer = xorBytes(answer, party.pages[p]);
      party.tamper?.(answer, n);
      return toBase64(answer);
    });
    return Response.json({ id: "ab".repeat(16), status: "done", epoch: body.epoch ?? party.epoch ?? 0, pages: answers, digest: DIGEST });
  }) as typeof fetch;
}

const rejectsWith = (code: string, pattern?: RegExp) => (e: unknown) => {
  assert.ok(e instanceof PirqError, String(e));
  assert.equal(e.code, code, e.message);
  if (pattern) assert.match(e.message, pattern);
  return true;
};

test("pinned to the publisher: every page verified, its usable bytes returned, exact", async () => {
  for (const key of [V.public_key_file, fromHex(V.public_key)]) {
    const pirq = await connect(A, B, { fetch: parties({ pages: DB }, { pages: DB }), publisherKey: key, warn: () => assert.fail("no warning when verifying") });
    assert.ok(pirq.verifying);
    const got = await pirq.getPages([0, 42, 99]);
    assert.equal(got.verified, true);
    assert.deepEqual(got.pages, [0, 42, 99].map((i) => DB[i].subarray(0, USABLE)));
    assert.deepEqual(got.changedEpochs, [0, 0, 0]);
  }
});

test("a party that XORs bytes into its answer is refused on every lookup, wherever the bytes go", async () => {
  // into the usable bytes, the changed_epoch, the signature; one bit or many; into one key's answer of several
  const tampers: [string, (answer: Uint8Array, keyIndex: number) => void][] = [
    ["first usable byte", (x) => (x[0] ^= 1)],
    ["last usable byte", (x) => (x[USABLE - 1] ^= 0x80)],
    ["changed_epoch", (x) => (x[USABLE] ^= 1)],
    ["signature", (x) => (x[PAGE_SIZE - 1] ^= 0x40)],
    ["another page's bytes", (x) => x.set(xorBytes(x, xorBytes(DB[3], DB[4])))],
    ["the second key only", (x, n) => n === 1 && (x[7] ^= 0xff)],
  ];
  for (const [what, tamper] of tampers) {
    for (const tampering of ["A", "B"]) {
      const honest = { pages: DB };
      const liar = { pages: DB, tamper };
      const pirq = await connect(A, B, { fetch: tampering === "A" ? parties(liar, honest) : parties(honest, liar), publisherKey: V.public_key });
      for (let round = 0; round < 3; round++) {
        await assert.rejects(pirq.getPages([round, 50 + round]), rejectsWith("bad_signature", /failed the publisher's signature.*served by A \(http:\/\/127\.0\.0\.1:1\) and B/), `${what} by ${tampering}`);
      }
    }
  }
});

test("a page of a later epoch XORed into an answer for an earlier one is refused", async () => {
  // page 7 changed at epoch 1; the client pins epoch 0; B XORs (epoch-0 page ⊕ epoch-1 page) in
  const newer = signedPage(SECRET, 7, 1, 0x55);
  const pirq = await connect(A, B, { fetch: parties({ pages: DB }, { pages: DB, tamper: (x) => x.set(xorBytes(x, xorBytes(DB[7], newer))) }), publisherKey: V.public_key });
  await assert.rejects(pirq.getPage(7, { epoch: 0 }), rejectsWith("bad_signature", /signed as changed at epoch 1/));
});

test("a database signed by another key, served as the pinned publisher's, fails every page", async () => {
  const forged = Array.from({ length: PAGES }, (_, i) => signedPage(OTHER_SECRET, i, 0, 0));
  const pirq = await connect(A, B, { fetch: parties({ pages: forged }, { pages: forged }), publisherKey: V.public_key });
  await assert.rejects(pirq.getPage(1), rejectsWith("bad_signature"));
});

test("pinned: a database advertised as another publisher's is refused at connect, an unsigned one too", async () => {
  await assert.rejects(connect(A, B, { fetch: parties({ pages: DB }, { pages: DB }), publisherKey: V.other_public_key }), rejectsWith("wrong_publisher", /signed by publisher key 03a107bff3ce…, not the pinned 814722de71c5…/));
  const unsigned = { pages: DB, signing: false };
  await assert.rejects(connect(A, B, { fetch: parties(unsigned, unsigned), publisherKey: V.public_key }), rejectsWith("not_signed"));
  for (const bad of ["", "00", "zz".repeat(32)]) {
    await assert.rejects(connect(A, B, { fetch: parties({ pages: DB }, { pages: DB }), publisherKey: bad }), rejectsWith("invalid_argument", /publisherKey/));
  }
});

test("without a publisher key a signed database works and the client says once that it does not verify", async () => {
  const said: string[] = [];
  const pirq = await connect(A, B, { fetch: parties({ pages: DB }, { pages: DB }), warn: (m) => said.push(m) });
  assert.equal(pirq.verifying, false);
  const got = await pirq.getPages([5]);
  await pirq.getPage(6);
  assert.equal(got.verified, false);
  assert.equal(got.changedEpochs, undefined);
  assert.deepEqual(got.pages, [DB[5].subarray(0, USABLE)]);
  assert.equal(said.length, 1);
  assert.match(said[0], /signed database .* not being verified/);
  // unsigned and unpinned: nothing to say
  const unsigned = { pages: DB, signing: false };
  await connect(A, B, { fetch: parties(unsigned, unsigned), warn: (m) => assert.fail(m) });
});
