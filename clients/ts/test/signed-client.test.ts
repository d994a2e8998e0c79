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
import { manifestMessage, pageMessage } from "../src/signed.js";

const V = JSON.parse(readFileSync(fileURLToPath(new URL("../../../../shared/tests/vectors/signed_v1.json", import.meta.url)), "utf8"));
const A = "http://127.0.0.1:1";
const B = "http://127.0.0.2:1";
const PAGES = 100;
const PAGE_SIZE = 256;
const USABLE = PAGE_SIZE - 72;

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
  /** The pages at epoch 0. */
  pages: Uint8Array[];
  /** The pages at epochs 1, 2, … (when the database has been updated). */
  later?: Uint8Array[][];
  signing?: boolean;
  /** XORed into this party's answer to every key (the digest stamp kept). */
  tamper?: (answer: Uint8Array, keyIndex: number) => void;
  /** The newest epoch the party claims (default: its last). */
  epoch?: number;
  /** What GET /v1/manifests serves; absent: 404 no_manifests. */
  manifests?: unknown[];
}

/** The digest stamped on answers at `epoch` (any 32 bytes: the fake's contents are not hashed). */
const digestAt = (epoch: number) => (17 * (epoch + 1)).toString(16).padStart(2, "0").repeat(32);

/** A fetch serving two parties that answer honestly from `pages` (a DPF full-domain scan), then tamper. */
function parties(a: Fake, b: Fake): typeof fetch {
  return (async (input: RequestInfo | URL, init: RequestInit = {}) => {
    const url = new URL(String(input));
    const party = url.origin === A ? a : b;
    if (url.pathname === "/v1/info") {
      const signing = { scheme: "ed25519", tail_len: 72, publisher_key: V.public_key, db_id: V.db_id };
      return Response.json({
        num_pages: PAGES, page_size: PAGE_SIZE, domain_bits: 7, epoch: { oldest: 0, newest: newest(party) }, max_keys_per_query: 64, workers: 1,
        party: (url.origin === A ? "a" : "b").repeat(32),
        ...(party.signing === false ? {} : { signing }),
      });
    }
    if (url.pathname === "/v1/manifests") {
      if (!party.manifests) return Response.json({ error: { code: "no_manifests", message: "no manifest file" } }, { status: 404 });
      return Response.json(party.manifests);
    }
    const body = JSON.parse(String(init.body));
    const epoch = body.epoch ?? newest(party);
    const pages = epoch === 0 ? party.pages : party.later![epoch - 1];
    const answers = body.keys.map((k: string, n: number) => {
      const bits = evalFullDomain(parseKey(fromBase64(k)!));
      let answer: Uint8Array = new Uint8Array(PAGE_SIZE);
      for (let p = 0; p < PAGES; p++) if ((bits[p >> 3] >> (p & 7)) & 1) answer = xorBytes(answer, pages[p]);
      party.tamper?.(answer, n);
      return toBase64(answer);
    });
    return Response.json({ id: "ab".repeat(16), status: "done", epoch, pages: answers, digest: digestAt(epoch) });
  }) as typeof fetch;
}

const newest = (party: Fake) => party.epoch ?? party.later?.length ?? 0;

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
    assert.equal(pirq.verifierBackend, "webcrypto", "Node 20 has WebCrypto Ed25519");
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

/** The publisher's manifest of `epoch` (SIGNED §4.1), signed with `secret`. */
function manifest(secret: Uint8Array, epoch: number, pages: number[], digest = digestAt(epoch)) {
  const m = { epoch, digest, pages, signature: "" };
  m.signature = Buffer.from(ed25519.sign(manifestMessage(fromHex(V.db_id), m), secret)).toString("hex");
  return m;
}

// Epoch 1 replaced pages 7 and 8 (signed with changed_epoch 1); epoch 2 replaced page 9.
const EPOCH1 = DB.map((p, i) => (i === 7 || i === 8 ? signedPage(SECRET, i, 1, 0x55) : p));
const EPOCH2 = EPOCH1.map((p, i) => (i === 9 ? signedPage(SECRET, i, 2, 0x99) : p));
const MANIFESTS = [manifest(SECRET, 1, [7, 8]), manifest(SECRET, 2, [9])];
const updated = (extra: Partial<Fake> = {}): Fake => ({ pages: DB, later: [EPOCH1, EPOCH2], manifests: MANIFESTS, ...extra });

test("after updates: changed and unchanged pages verified current with the publisher's manifests, at every epoch", async () => {
  const pirq = await connect(A, B, { fetch: parties(updated(), updated()), publisherKey: V.public_key });
  const got = await pirq.getPages([7, 9, 5]);
  assert.equal(got.epoch, 2);
  assert.deepEqual(got.pages, [EPOCH2[7], EPOCH2[9], EPOCH2[5]].map((p) => p.subarray(0, USABLE)));
  assert.deepEqual(got.changedEpochs, [1, 2, 0]);
  assert.equal(pirq.newestSignedEpoch, 2);
});

test("a party that hands back the old signed version of a replaced page (XOR old ⊕ new) is refused", async () => {
  for (const [index, version] of [[7, DB[7]], [9, EPOCH1[9]]] as const) {
    const rollback = (x: Uint8Array) => x.set(xorBytes(x, xorBytes(EPOCH2[index], version)));
    for (const liar of ["A", "B"]) {
      const fetch = liar === "A" ? parties(updated({ tamper: rollback }), updated()) : parties(updated(), updated({ tamper: rollback }));
      const pirq = await connect(A, B, { fetch, publisherKey: V.public_key });
      await assert.rejects(pirq.getPage(index), rejectsWith("stale_page", new RegExp(`page ${index} answered at epoch 2 is its version of epoch \\d, which the publisher's manifest of epoch \\d replaced`)), `page ${index} by ${liar}`);
    }
  }
});

test("manifests are read on the answered epoch alone, never because of the page asked for (SIGNED §4.3), and once per epoch", async () => {
  let reads = 0;
  const inner = parties(updated(), updated());
  const counting = (async (input: RequestInfo | URL, init?: RequestInit) => {
    if (new URL(String(input)).pathname === "/v1/manifests") reads++;
    return inner(input, init);
  }) as typeof fetch;
  const pirq = await connect(A, B, { fetch: counting, publisherKey: V.public_key });
  // page 9 changed at the answered epoch: it needs no manifest, and both parties' are read anyway
  assert.deepEqual((await pirq.getPages([9])).changedEpochs, [2]);
  assert.equal(reads, 2);
  assert.deepEqual((await pirq.getPages([5, 7])).changedEpochs, [0, 1]);
  assert.equal(reads, 2, "kept: not read again at the same epoch");
});

test("manifests: one party's suffice (the union); none, or only forged ones, refuse a page not shown current", async () => {
  const one = await connect(A, B, { fetch: parties(updated({ manifests: undefined }), updated()), publisherKey: V.public_key });
  assert.deepEqual((await one.getPages([5])).changedEpochs, [0]);
  const none = await connect(A, B, { fetch: parties(updated({ manifests: undefined }), updated({ manifests: undefined })), publisherKey: V.public_key });
  await assert.rejects(none.getPage(5), rejectsWith("stale_page", /neither party serves the publisher's manifest of epoch 1/));
  // a page changed at the answered epoch needs no manifest
  assert.deepEqual((await none.getPages([9])).changedEpochs, [2]);
  const forged = [manifest(OTHER_SECRET, 1, []), manifest(OTHER_SECRET, 2, [])];
  const liars = await connect(A, B, { fetch: parties(updated({ manifests: forged }), updated({ manifests: [MANIFESTS[0]] })), publisherKey: V.public_key });
  await assert.rejects(liars.getPage(5), rejectsWith("stale_page", /manifest of epoch 2/));
  // a manifest that drops the page it replaced is a forgery too: its signature fails, the real one still counts
  const dropped = [{ ...MANIFESTS[0], pages: [8] }, MANIFESTS[1]];
  const rollback = (x: Uint8Array) => x.set(xorBytes(x, xorBytes(EPOCH2[7], DB[7])));
  const both = await connect(A, B, { fetch: parties(updated({ manifests: dropped, tamper: rollback }), updated({ manifests: dropped })), publisherKey: V.public_key });
  await assert.rejects(both.getPage(7), rejectsWith("stale_page", /neither party serves the publisher's manifest of epoch 1/));
  // a manifest body that is not the documented shape is that party's bad_response, not a crash
  const garbage = await connect(A, B, { fetch: parties(updated({ manifests: [{ epoch: "one" }] }), updated()), publisherKey: V.public_key });
  assert.deepEqual((await garbage.getPages([5])).changedEpochs, [0], "the other party's manifests suffice");
});

test("answers stamped with another digest than the publisher's manifest of that epoch are refused", async () => {
  const wrong = [MANIFESTS[0], manifest(SECRET, 2, [9], "ee".repeat(32))];
  const pirq = await connect(A, B, { fetch: parties(updated({ manifests: wrong }), updated({ manifests: wrong })), publisherKey: V.public_key });
  await assert.rejects(pirq.getPage(5), rejectsWith("bad_signature", /digest .* the publisher's manifest of that epoch says eeeeeeeeeeee/));
});

test("one party claiming an older window than the publisher's manifests show is refused as stale at connect, at epoch 0 too (issue 36)", async () => {
  for (const claimed of [0, 1]) {
    await assert.rejects(
      connect(A, B, { fetch: parties(updated({ epoch: claimed }), updated()), publisherKey: V.public_key }),
      (e: unknown) => rejectsWith("stale_party", new RegExp(`says its newest epoch is ${claimed}, .* epoch 2 exists`))(e) && (e as PirqError).party === `A (${A})`,
    );
  }
  // the lying party withholds its manifests: the honest party's still show it
  await assert.rejects(connect(A, B, { fetch: parties(updated({ epoch: 0, manifests: undefined }), updated()), publisherKey: V.public_key }), rejectsWith("stale_party"));
});

test("the freeze: parties that fall back to an older epoch than this client has seen are refused; minEpoch holds a new client", async () => {
  const a = updated();
  const b = updated();
  const pirq = await connect(A, B, { fetch: parties(a, b), publisherKey: V.public_key });
  await pirq.getPage(9);
  assert.equal(pirq.newestSignedEpoch, 2);
  a.epoch = b.epoch = 1; // both now claim epoch 1 is their newest: every page there is current at 1
  // reading their info again, the manifest of epoch 2 shows both stale (issue 36)
  await assert.rejects(pirq.agree(), (e: unknown) => rejectsWith("stale_party", /says its newest epoch is 1, .* epoch 2 exists/)(e) && (e as PirqError).party === `A (${A})`);
  // and so is a lookup: before any key is sent (stale_party), or by its answer (stale_epoch)
  const refused = (e: unknown) => e instanceof PirqError && (e.code === "stale_party" || (e.code === "stale_epoch" && /epoch [01], older than epoch 2/.test(e.message)));
  await assert.rejects(pirq.getPage(5), refused);
  await assert.rejects(pirq.getPage(5, { epoch: 0 }), refused);
  // a fresh client reads the manifests at connect: refused before a key is sent (issue 36)
  await assert.rejects(connect(A, B, { fetch: parties(a, b), publisherKey: V.public_key }), rejectsWith("stale_party"));
  // without manifests a fresh client knows nothing newer (SIGNED §4.4) unless told
  const bare = () => parties({ ...a, manifests: undefined }, { ...b, manifests: undefined });
  await assert.rejects(connect(A, B, { fetch: bare(), publisherKey: V.public_key, minEpoch: 2 }), rejectsWith("stale_party", /newest epoch is 1/));
  a.epoch = b.epoch = undefined;
  const told = await connect(A, B, { fetch: bare(), publisherKey: V.public_key, minEpoch: 2 });
  await assert.rejects(told.getPage(9, { epoch: 1 }), rejectsWith("stale_epoch", /\(minEpoch\)/));
  await assert.rejects(connect(A, B, { fetch: parties(a, b), minEpoch: 2 }), rejectsWith("invalid_argument", /minEpoch needs publisherKey/));
});
