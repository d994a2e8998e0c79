// The signed pages' vectors (shared/tests/vectors/signed_v1.json, from an independent Python
// implementation of docs/spec/signed.md): the signed message, a signed page verified, tampered
// pages refused, under both signature backends (WebCrypto's Ed25519 and the @noble/curves fallback).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { fromHex, toHex } from "../src/bytes.js";
import { checkManifest, checkPage, ed25519Verifier, freshness, Manifest, manifestMessage, pageMessage, parseManifests, parsePublisherKey, readTail, VerifierBackend } from "../src/signed.js";
import { isPirqError } from "../src/errors.js";

const V = JSON.parse(readFileSync(fileURLToPath(new URL("../../../../shared/tests/vectors/signed_v1.json", import.meta.url)), "utf8"));
const BACKENDS: VerifierBackend[] = ["webcrypto", "noble"];

test("the public key file parses to the vectors' key; other text is refused", () => {
  assert.equal(toHex(parsePublisherKey(V.public_key_file)), V.public_key);
  assert.equal(toHex(parsePublisherKey(V.public_key_file_bare)), V.public_key);
  // issue 36: a secret key file where the public key goes is refused, its bytes not shown
  const secretFile = "pirq-publisher-secret-v1:" + "88".repeat(32) + "\n";
  assert.throws(() => parsePublisherKey(secretFile), (e: Error) => /SECRET key file/.test(e.message) && !e.message.includes("8888"));
  assert.equal(toHex(parsePublisherKey(`  ${V.public_key.toUpperCase()}\r\n`)), V.public_key);
  assert.equal(toHex(parsePublisherKey(fromHex(V.public_key))), V.public_key);
  for (const bad of ["", V.public_key.slice(2), V.public_key + "00", `0x${V.public_key}`, V.public_key.replace(/^../, "zz"), new Uint8Array(31)]) {
    assert.throws(() => parsePublisherKey(bad), (e) => isPirqError(e, "invalid_argument"), String(bad));
  }
});

test("the signed message of the vectors' page", () => {
  const signed = V.pages.find((p: { name: string }) => p.name === "signed");
  const page = fromHex(signed.page);
  assert.equal(page.length, V.page_size);
  const tail = readTail(page, V.tail_len)!;
  assert.equal(tail.changedEpoch, signed.changed_epoch);
  assert.equal(toHex(tail.signature), signed.signature);
  assert.equal(toHex(pageMessage(fromHex(V.db_id), signed.index, tail.changedEpoch, tail.usable)), signed.message);
});

for (const backend of BACKENDS) {
  test(`every page vector (${backend}): the signed verify, each tampered one is refused`, async () => {
    const verifier = await ed25519Verifier(fromHex(V.public_key), backend);
    assert.equal(verifier.backend, backend);
    assert.ok(V.pages.some((p: { valid: boolean }) => p.valid) && V.pages.some((p: { valid: boolean }) => !p.valid));
    for (const p of V.pages) {
      const tail = await checkPage(verifier, fromHex(V.db_id), p.index, fromHex(p.page), V.tail_len);
      assert.equal(tail !== undefined, p.valid, p.name);
      if (p.valid) assert.equal(tail!.changedEpoch, p.changed_epoch, p.name);
    }
  });

  test(`another publisher's key refuses the vectors' pages (${backend})`, async () => {
    const other = await ed25519Verifier(fromHex(V.other_public_key), backend);
    for (const p of V.pages.filter((p: { valid: boolean }) => p.valid)) {
      assert.equal(await checkPage(other, fromHex(V.db_id), p.index, fromHex(p.page), V.tail_len), undefined, p.name);
    }
  });

  test(`another database's identity refuses the vectors' pages (${backend})`, async () => {
    const verifier = await ed25519Verifier(fromHex(V.public_key), backend);
    const otherDb = fromHex(V.db_id);
    otherDb[0] ^= 1;
    const signed = V.pages.find((p: { name: string }) => p.name === "signed");
    assert.equal(await checkPage(verifier, otherDb, signed.index, fromHex(signed.page), V.tail_len), undefined);
  });
}

test("invalid points and small-order keys are refused as publisher keys, by both backends", async () => {
  const bad = {
    "not on the curve": "02" + "00".repeat(31),
    "the identity (small order)": "01" + "00".repeat(31),
    "of order 2": "ec" + "ff".repeat(30) + "7f",
    "non-canonical y (≥ p)": "ee" + "ff".repeat(30) + "7f",
  };
  for (const backend of BACKENDS) {
    for (const [what, hex] of Object.entries(bad)) {
      await assert.rejects(ed25519Verifier(fromHex(hex), backend), (e) => isPirqError(e, "invalid_argument") && /not a valid Ed25519 public key/.test((e as Error).message), `${what} (${backend})`);
    }
  }
});

test("the manifest vector: its message, its signature (both backends), a changed field refused", async () => {
  const m: Manifest = { epoch: V.manifest.epoch, digest: V.manifest.digest, pages: V.manifest.pages, signature: V.manifest.signature };
  assert.deepEqual(parseManifests([m]), [m]);
  const dbId = fromHex(V.db_id);
  assert.equal(toHex(manifestMessage(dbId, m)), V.manifest.message);
  for (const backend of BACKENDS) {
    const verifier = await ed25519Verifier(fromHex(V.public_key), backend);
    assert.equal(await checkManifest(verifier, dbId, m), true, backend);
    for (const changed of [{ ...m, epoch: 2 }, { ...m, pages: [2] }, { ...m, pages: [2, 9, 10] }, { ...m, digest: "00".repeat(32) }]) {
      assert.equal(await checkManifest(verifier, dbId, changed), false, `${JSON.stringify(changed).slice(0, 60)} (${backend})`);
    }
    const other = await ed25519Verifier(fromHex(V.other_public_key), backend);
    assert.equal(await checkManifest(other, dbId, m), false);
  }
});

test("manifest bodies that are not the documented shape are refused", () => {
  const m = V.manifest;
  const ok = { epoch: m.epoch, digest: m.digest, pages: m.pages, signature: m.signature };
  assert.deepEqual(parseManifests([]), []);
  for (const bad of [{}, null, [null], [{ ...ok, epoch: 0 }], [{ ...ok, epoch: "1" }], [{ ...ok, digest: m.digest.toUpperCase() }], [{ ...ok, pages: [9, 2] }], [{ ...ok, pages: [2, 2] }], [{ ...ok, pages: [-1] }], [{ ...ok, signature: "ab" }]]) {
    assert.equal(parseManifests(bad), null, JSON.stringify(bad).slice(0, 80));
  }
});

test("the freshness vectors: each version of page 2 at epochs 0 and 1, with the manifest of epoch 1", () => {
  const manifests = new Map([[V.manifest.epoch, V.manifest as Manifest]]);
  assert.ok(V.freshness.length >= 4);
  for (const f of V.freshness) {
    const page = V.pages.find((p: { name: string }) => p.name === f.page_name);
    const tail = readTail(fromHex(page.page), V.tail_len)!;
    assert.equal(freshness(f.index, tail.changedEpoch, f.epoch, manifests).fresh, f.fresh, f.name);
  }
  // without the manifest of epoch 1 nothing older than epoch 1 can be shown current at epoch 1
  assert.deepEqual(freshness(5, 0, 1, new Map()), { fresh: false, why: "missing", at: 1 });
  assert.deepEqual(freshness(2, 0, 1, manifests), { fresh: false, why: "replaced", at: 1 });
  assert.deepEqual(freshness(2, 1, 0, manifests), { fresh: false, why: "future" });
});

test("a page whose tail claims an epoch past 2^53-1 is refused before any signature check", () => {
  const page = new Uint8Array(V.page_size);
  page.fill(0xff, V.page_size - V.tail_len, V.page_size - V.tail_len + 8);
  assert.equal(readTail(page, V.tail_len), undefined);
});
