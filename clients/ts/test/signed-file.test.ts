// The Rust tools sign, this client verifies (issue 27): a database written by `pirq db gen
// --sign-key` and an update by `pirq epoch make --sign-key`, with a key from `pirq publisher
// keygen`, checked page by page with `checkPage` under both backends — every page of the file
// at its index, the update's pages as changed at their epoch; a flipped byte, another index,
// another key or another database's identity refused. Two independent implementations of
// SIGNED §2 agreeing byte for byte on real files, no party in between.
import { before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { fromBase64, fromHex, toHex } from "../src/bytes.js";
import { checkPage, ed25519Verifier, parsePublisherKey, VerifierBackend } from "../src/signed.js";
import { binDir, makePageDb, makePublisherKey, pageFromFile, tempDir } from "./parties.js";

const PAGES = 200;
const PAGE_SIZE = 256;
let file: Buffer;
let update: { epoch: number; pages: { index: number; page: string }[] };
let publisher: ReturnType<typeof makePublisherKey>;
let other: ReturnType<typeof makePublisherKey>;

before(() => {
  const dir = tempDir();
  publisher = makePublisherKey(dir, "publisher");
  other = makePublisherKey(dir, "other");
  const db = makePageDb(dir, PAGES, PAGE_SIZE, 3, publisher.secretFile);
  file = readFileSync(db);
  const out = join(dir, "update-1.json");
  execFileSync(join(binDir, "pirq"), ["epoch", "make", "--db", db, "--epoch", "1", "--pages", "5", "--seed", "4", "--sign-key", publisher.secretFile, "--manifests", join(dir, "manifests.json"), "--out", out], { stdio: "pipe" });
  update = JSON.parse(readFileSync(out, "utf8"));
  // SIGNED §1: the secret key file is the owner's alone
  assert.equal(statSync(publisher.secretFile).mode & 0o077, 0, "secret key file 0600");
});

/** The header's signing block (SPEC §2.4, bytes 560..688): the publisher key and the database identity. */
function signingBlock(db: Buffer): { publisherKey: string; dbId: Uint8Array; tailLen: number } {
  assert.equal(db.subarray(560, 568).toString("latin1"), "PIRQSIGN");
  assert.equal(db[568], 1, "scheme 1: Ed25519");
  return { tailLen: db.readUInt32LE(572), publisherKey: toHex(db.subarray(576, 608)), dbId: new Uint8Array(db.subarray(608, 640)) };
}

for (const backend of ["webcrypto", "noble"] as VerifierBackend[]) {
  test(`every page of a file signed by pirq db gen --sign-key verifies (${backend}), and only as itself`, async () => {
    const block = signingBlock(file);
    assert.equal(block.tailLen, 72);
    assert.equal(block.publisherKey, publisher.publicHex, "the header names the key file's key");
    const verifier = await ed25519Verifier(parsePublisherKey(publisher.publicKey), backend);
    for (let p = 0; p < PAGES; p++) {
      const tail = await checkPage(verifier, block.dbId, p, pageFromFile(file, p));
      assert.equal(tail?.changedEpoch, 0, `page ${p}`);
    }
    const page = pageFromFile(file, 17);
    assert.equal(await checkPage(verifier, block.dbId, 18, page), undefined, "another index");
    const flipped = new Uint8Array(page);
    flipped[3] ^= 0x10;
    assert.equal(await checkPage(verifier, block.dbId, 17, flipped), undefined, "a flipped byte");
    const otherDb = new Uint8Array(block.dbId);
    otherDb[31] ^= 1;
    assert.equal(await checkPage(verifier, otherDb, 17, page), undefined, "another database");
    const otherVerifier = await ed25519Verifier(parsePublisherKey(other.publicKey), backend);
    assert.equal(await checkPage(otherVerifier, block.dbId, 17, page), undefined, "another publisher");
  });

  test(`an update made by pirq epoch make --sign-key: its pages verify as changed at epoch 1 (${backend})`, async () => {
    const { dbId } = signingBlock(file);
    const verifier = await ed25519Verifier(fromHex(publisher.publicHex), backend);
    assert.equal(update.epoch, 1);
    assert.ok(update.pages.length > 0);
    for (const w of update.pages) {
      const page = fromBase64(w.page)!;
      assert.equal(page.length, PAGE_SIZE);
      assert.equal((await checkPage(verifier, dbId, w.index, page))?.changedEpoch, 1, `page ${w.index}`);
      assert.notEqual(toHex(page), toHex(pageFromFile(file, w.index)), "a new version");
    }
  });
}
