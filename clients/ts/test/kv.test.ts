// The key-value layout's vectors (shared/tests/vectors/kv_v1.json, from an independent Python
// implementation of docs/spec/kv.md): tags, candidate pages, and lookups in a tiny database.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { decodeValue, findInPage, keyBytes, kvCandidates, kvTag, parseKvLayout, sameLayout } from "../src/kv.js";
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
  assert.throws(() => parseKvLayout({ version: 3 }, 4096, 1000), (e: unknown) => e instanceof PirqError && e.code === "not_kv");
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

// Layout version 2 (KV §2, §4): sets and variable-size values, also in a signed database's
// usable bytes; shared/tests/vectors/kv_v2.json, from another independent Python implementation.
const V2 = JSON.parse(readFileSync(fileURLToPath(new URL("../../../../shared/tests/vectors/kv_v2.json", import.meta.url)), "utf8"));

/** The `/v1/info` kv object of a vector's table or block (KV §5). */
function infoObject(t: { kind: string; choices: number; value_size: number; key_size: number; slot_size: number; seed: string }, slotsPerPage: number) {
  return { version: 2, value_kind: t.kind, choices: t.choices, tag_size: 16, value_size: t.value_size, key_size: t.key_size, slot_size: t.slot_size, slots_per_page: slotsPerPage, seed: t.seed };
}

test("v2 layout blocks: the block bytes and the info object describe the same layout", () => {
  assert.ok(V2.blocks.length >= 4);
  for (const b of V2.blocks) {
    const bytes = fromHex(b.bytes_64_512);
    assert.equal(new TextDecoder().decode(bytes.subarray(0, 8)), "PIRQKV\0\u0002");
    assert.equal(bytes[9], b.kind === "set" ? 1 : 2, "value_kind byte");
    const pageSize = 4096;
    const layout = parseKvLayout(infoObject(b, Math.floor(pageSize / b.slot_size)), pageSize, 100);
    assert.equal(layout.valueKind, b.kind);
    assert.equal(layout.slotSize, b.slot_size);
  }
});

test("v2 layouts: refused when the kind, sizes or version do not fit", () => {
  const t = V2.tables.variable;
  const good = infoObject(t, t.slots_per_page);
  const notKv = (e: unknown) => e instanceof PirqError && e.code === "not_kv";
  assert.equal(parseKvLayout(good, t.page_size, t.num_pages).slotsPerPage, t.slots_per_page);
  for (const bad of [
    { ...good, value_kind: "fixed" }, // fixed tables are version 1
    { ...good, value_kind: undefined },
    { ...good, version: 1 }, // version 1 has no value_kind
    { ...good, version: 3 },
    { ...good, value_kind: "set" }, // a set has value_size 0
    { ...good, slot_size: 46 },
    { ...good, slots_per_page: t.slots_per_page + 1 },
  ]) {
    assert.throws(() => parseKvLayout(bad, t.page_size, t.num_pages), notKv, JSON.stringify(bad).slice(0, 80));
  }
  const set = V2.tables.set;
  assert.throws(() => parseKvLayout({ ...infoObject(set, set.slots_per_page), value_size: 1 }, set.page_size, set.num_pages), notKv);
});

test("v2 lookups: sets (present: empty value), variable-size values, both in signed pages' usable bytes", async () => {
  for (const [name, t] of Object.entries(V2.tables) as [string, any][]) {
    const layout = parseKvLayout(infoObject(t, t.slots_per_page), t.page_size, t.num_pages, t.tail_len);
    assert.equal(layout.usableBytes, t.page_size - t.tail_len, name);
    const pages: Uint8Array[] = t.pages.map(fromHex);
    let present = 0;
    let absent = 0;
    for (const l of t.lookups) {
      const tag = await kvTag(layout.seed, fromHex(l.key));
      let value: Uint8Array | null = null;
      for (const p of await kvCandidates(layout.seed, tag, layout.choices, t.num_pages)) {
        value = findInPage(layout, pages[p], tag);
        if (value) break;
      }
      if (l.present) {
        assert.ok(value, `${name}: ${l.key} present`);
        assert.equal(toHex(value), l.value, `${name}: value of ${l.key}`);
        present++;
      } else {
        assert.equal(value, null, `${name}: ${l.key} absent`);
        absent++;
      }
    }
    assert.ok(present > 0 && absent > 0, name);
  }
});

test("v2: a variable-size slot whose length exceeds the largest value is refused, never truncated", async () => {
  const m = V2.malformed;
  const t = V2.tables[m.table];
  const layout = parseKvLayout(infoObject(t, t.slots_per_page), t.page_size, t.num_pages, t.tail_len);
  const tag = await kvTag(layout.seed, fromHex(m.key));
  assert.ok((await kvCandidates(layout.seed, tag, layout.choices, t.num_pages)).includes(m.page_index));
  assert.throws(() => findInPage(layout, fromHex(m.page), tag), (e: unknown) => e instanceof PirqError && e.code === "bad_response" && /malformed kv slot/.test(e.message));
});

// Recorded encodings (KV §2 bytes 74 and 75, §5 key_encoding/value_encoding): string keys read
// the table's way, values decode as given; kv_v2.json's encoded_keys from the Python spec.
test("recorded encodings: string keys become the vectors' bytes and tags; values decode as given", async () => {
  const t = V2.tables.variable;
  const base = infoObject(t, t.slots_per_page);
  const seed = fromHex(V2.blocks[0].seed);
  for (const k of V2.encoded_keys) {
    const layout = parseKvLayout({ ...base, key_encoding: k.encoding }, t.page_size, t.num_pages);
    assert.equal(layout.keyEncoding, k.encoding);
    const bytes = keyBytes(layout, k.text);
    assert.equal(toHex(bytes), k.key, `${k.encoding} ${k.text}`);
    assert.equal(toHex(await kvTag(seed, bytes)), k.tag);
  }
  // The blocks with recorded encodings carry them in bytes 74 and 75.
  const codes: Record<string, number> = { utf8: 1, hex: 2, base64: 3, json: 4 };
  for (const b of V2.recorded_encodings) {
    const bytes = fromHex(b.bytes_64_512);
    assert.equal(bytes[10], codes[b.key_encoding] ?? 0);
    assert.equal(bytes[11], codes[b.value_encoding] ?? 0);
  }
  // Nothing recorded: string keys are hex, values bytes (tables built before encodings).
  const old = parseKvLayout(base, t.page_size, t.num_pages);
  assert.equal(old.keyEncoding, null);
  assert.equal(toHex(keyBytes(old, "0A0b")), "0a0b");
  const notHex = (e: unknown) => e instanceof PirqError && e.code === "invalid_argument" && /not hex/.test(e.message);
  assert.throws(() => keyBytes(old, "alice"), notHex);
  assert.deepEqual(decodeValue(old, new Uint8Array([1, 2])), new Uint8Array([1, 2]));
  const text = parseKvLayout({ ...base, key_encoding: "utf8", value_encoding: "utf8" }, t.page_size, t.num_pages);
  assert.equal(decodeValue(text, new TextEncoder().encode("café")), "café");
  const json = parseKvLayout({ ...base, value_encoding: "json" }, t.page_size, t.num_pages);
  assert.deepEqual(decodeValue(json, new TextEncoder().encode('{"a":[1,2]}')), { a: [1, 2] });
  // Unknown encodings (and JSON keys) are refused; two parties must agree on them.
  const notKv = (e: unknown) => e instanceof PirqError && e.code === "not_kv";
  for (const bad of [{ key_encoding: "json" }, { key_encoding: "text" }, { value_encoding: "utf16" }, { value_encoding: 4 }]) {
    assert.throws(() => parseKvLayout({ ...base, ...bad }, t.page_size, t.num_pages), notKv, JSON.stringify(bad));
  }
  assert.equal(sameLayout(text, old), false);
});
