// The key-value layout's vectors (shared/tests/vectors/kv_v1.json, from an independent Python
// implementation of docs/spec/kv.md): tags, candidate pages, and lookups in a tiny database.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { findInPage, kvCandidates, kvTag, parseKvLayout } from "../src/kv.js";
import { fromHex, toHex } from "../src/bytes.js";
import { PirqError } from "../src/errors.js";

const V = JSON.parse(readFileSync(fileURLToPath(new URL("../../../../shared/tests/vectors/kv_v1.json", import.meta.url)), "utf8"));

test("tags and candidate pages", async () => {
  const seed = fromHex(V.hash_seed);
  assert.ok(V.hashes.length > 0);
  for (const h of V.hashes) {
    const tag = await kvTag(seed, fromHex(h.key));
    assert.equal(toHex(tag), h.tag, `tag of ${h.key.slice(0, 16)}`);
    for (const c of h.candidates) {
      assert.deepEqual(await kvCandidates(seed, tag, c.choices, c.num_pages), c.pages, `${h.key.slice(0, 16)} ${c.num_pages}/${c.choices}`);
    }
  }
});

test("the layout block's fields as /v1/info carries them", () => {
  const b = V.block;
  const bytes = fromHex(b.bytes_64_512);
  // The block bytes and the info object describe the same layout (KV §2 vs §5).
  assert.equal(new TextDecoder().decode(bytes.subarray(0, 6)), "PIRQKV");
  assert.equal(bytes[8], b.choices);
  const view = new DataView(bytes.buffer, bytes.byteOffset);
  assert.equal(view.getUint32(12, true), b.value_size);
  assert.equal(view.getUint32(16, true), b.key_size);
  assert.equal(toHex(bytes.subarray(24, 56)), b.seed);
  const layout = parseKvLayout(
    { version: 1, choices: b.choices, tag_size: 16, value_size: b.value_size, key_size: b.key_size, slot_size: 16 + b.value_size, slots_per_page: Math.floor(4096 / (16 + b.value_size)), seed: b.seed },
    4096,
    1000,
  );
  assert.equal(layout.slotSize, 48);
  assert.throws(
    () => parseKvLayout({ version: 1, choices: b.choices, tag_size: 16, value_size: b.value_size, key_size: b.key_size, slot_size: 40, slots_per_page: 85, seed: b.seed }, 4096, 1000),
    (e: unknown) => e instanceof PirqError && e.code === "not_kv",
  );
  assert.throws(() => parseKvLayout({ version: 2 }, 4096, 1000), (e: unknown) => e instanceof PirqError && e.code === "not_kv");
});

test("lookups in the tiny database: present keys give their value, absent ones null", async () => {
  const t = V.tiny_db;
  const layout = parseKvLayout(
    { version: 1, choices: t.choices, tag_size: 16, value_size: t.value_size, key_size: t.key_size, slot_size: t.slot_size, slots_per_page: t.slots_per_page, seed: t.seed },
    t.page_size,
    t.num_pages,
  );
  const pages: Uint8Array[] = t.pages.map(fromHex);
  let present = 0;
  let absent = 0;
  for (const l of t.lookups) {
    const tag = await kvTag(layout.seed, fromHex(l.key));
    const candidates = await kvCandidates(layout.seed, tag, layout.choices, t.num_pages);
    let value: Uint8Array | null = null;
    for (const p of candidates) {
      value = findInPage(layout, pages[p], tag);
      if (value) break;
    }
    if (l.value === null) {
      assert.equal(value, null, `absent ${l.key}`);
      absent++;
    } else {
      assert.equal(value && toHex(value), l.value, `value of ${l.key}`);
      present++;
    }
  }
  assert.ok(present > 0 && absent > 0);
});
