/**
 * Key-value layouts (docs/spec/kv.md, "KV"): the client's half. Records sit in cuckoo-hashed
 * slots of ordinary pages; a lookup fetches all `choices` candidate pages of a key privately and
 * searches them for the key's tag. Layout version 1 is the fixed-size-value table; version 2 a
 * set (tags only: a key is present or not) or a table of variable-size values (each slot has room
 * for the largest, and a length). Hashes are SHA-256 through WebCrypto, present in browsers
 * (secure contexts: https or localhost) and Node alike.
 */

import { equalBytes, fromBase64, fromHex } from "./bytes.js";
import { PirqError } from "./errors.js";

/** What a table stores per key (KV §2): a value of one size, nothing (a set), or a value of up to `valueSize` bytes. */
export type ValueKind = "fixed" | "set" | "variable";

/** How a table's keys are written (KV §3.0), as its builder recorded (KV §2 byte 74). */
export type KeyEncoding = "utf8" | "hex" | "base64";
/** How a table's values were given (KV §2 byte 75): JSON values are stored as compact JSON text. */
export type ValueEncoding = KeyEncoding | "json";

/** The `kv` object of `/v1/info`, checked (KV §2, §5). */
export interface KvLayout {
  version: 1 | 2;
  valueKind: ValueKind;
  choices: number;
  tagSize: 16;
  /** fixed: bytes of every value; set: 0; variable: the most bytes a value has. */
  valueSize: number;
  /** Bytes of every key; 0 = any length in 1..=1024. */
  keySize: number;
  slotSize: number;
  slotsPerPage: number;
  /** Bytes of a page the slots may use (SPEC §2.5): the page size less a signed database's signature tail. */
  usableBytes: number;
  seed: Uint8Array;
  /** How a string key is read; null when the table records nothing (read as hex). */
  keyEncoding: KeyEncoding | null;
  /** How values decode ({@link decodeValue}); null when the table records nothing (bytes). */
  valueEncoding: ValueEncoding | null;
}

const TAG_SIZE = 16;
const MAX_KEY = 1024;
const TAG_LABEL = new TextEncoder().encode("pirq-kv-tag");
const BUCKET_LABEL = new TextEncoder().encode("pirq-kv-bucket");

function isU32(v: unknown): v is number {
  return typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= 0xffffffff;
}

/**
 * Reads and checks a party's `kv` object against the page geometry: the derived sizes must be
 * this client's own arithmetic over the usable bytes `pageSize - tailLen` (SPEC §2.5), and only
 * versions 1 (fixed) and 2 (set, variable) are known (KV §5).
 */
export function parseKvLayout(kv: unknown, pageSize: number, numPages: number, tailLen = 0): KvLayout {
  const bad = (why: string) => new PirqError("not_kv", `the kv layout in /v1/info is not usable: ${why}`);
  if (typeof kv !== "object" || kv === null) throw bad("not an object");
  const o = kv as Record<string, unknown>;
  let valueKind: ValueKind;
  if (o.version === 1) {
    if (o.value_kind !== undefined) throw bad("a version 1 layout has no value_kind");
    valueKind = "fixed";
  } else if (o.version === 2) {
    if (o.value_kind !== "set" && o.value_kind !== "variable") throw bad(`unknown value_kind ${JSON.stringify(o.value_kind)} of version 2`);
    valueKind = o.value_kind;
  } else {
    throw bad(`unknown version ${String(o.version)}`);
  }
  if (!isU32(o.choices) || o.choices < 2 || o.choices > 4) throw bad(`choices ${String(o.choices)}`);
  if (!isU32(o.value_size) || (valueKind === "set" ? o.value_size !== 0 : o.value_size < 1)) {
    throw bad(`value_size ${String(o.value_size)} for ${valueKind} values`);
  }
  if (valueKind === "variable" && o.value_size > 0xffff) throw bad(`value_size ${o.value_size} does not fit the u16 length`);
  if (!isU32(o.key_size) || o.key_size > MAX_KEY) throw bad(`key_size ${String(o.key_size)}`);
  if (typeof o.seed !== "string" || !/^[0-9a-f]{64}$/.test(o.seed)) throw bad("seed is not 64 lowercase hex digits");
  const encoding = <E extends string>(v: unknown, known: readonly E[], what: string): E | null => {
    if (v === undefined) return null;
    if (typeof v !== "string" || !(known as readonly string[]).includes(v)) throw bad(`unknown ${what} ${JSON.stringify(v)}`);
    return v as E;
  };
  const keyEncoding = encoding<KeyEncoding>(o.key_encoding, ["utf8", "hex", "base64"], "key_encoding");
  const valueEncoding = encoding<ValueEncoding>(o.value_encoding, ["utf8", "hex", "base64", "json"], "value_encoding");
  const usableBytes = pageSize - tailLen;
  const slotSize = valueKind === "fixed" ? TAG_SIZE + o.value_size : valueKind === "set" ? TAG_SIZE : TAG_SIZE + 2 + o.value_size;
  const slotsPerPage = Math.floor(usableBytes / slotSize);
  if (slotsPerPage < 1) throw bad(`a slot of ${slotSize} bytes does not fit the ${usableBytes} usable bytes of a page`);
  if (numPages < o.choices) throw bad(`${numPages} pages for ${o.choices} choices`);
  if (o.tag_size !== TAG_SIZE || o.slot_size !== slotSize || o.slots_per_page !== slotsPerPage) {
    throw bad(`derived sizes (tag ${String(o.tag_size)}, slot ${String(o.slot_size)}, ${String(o.slots_per_page)} per page) differ from 16, ${slotSize}, ${slotsPerPage}`);
  }
  return {
    version: o.version,
    valueKind,
    choices: o.choices,
    tagSize: TAG_SIZE,
    valueSize: o.value_size,
    keySize: o.key_size,
    slotSize,
    slotsPerPage,
    usableBytes,
    seed: fromHex(o.seed),
    keyEncoding,
    valueEncoding,
  };
}

/** Two layouts describe the same table. */
export function sameLayout(a: KvLayout, b: KvLayout): boolean {
  return a.version === b.version && a.valueKind === b.valueKind && a.choices === b.choices && a.valueSize === b.valueSize &&
    a.keySize === b.keySize && a.usableBytes === b.usableBytes && equalBytes(a.seed, b.seed) &&
    a.keyEncoding === b.keyEncoding && a.valueEncoding === b.valueEncoding;
}

/**
 * A key's bytes (KV §3.0): bytes as they are; a string the way the table's keys are written
 * (its text's UTF-8 bytes for a text table, hex digits for a hex table or one that records
 * nothing, base64). A string that cannot be such a key is refused naming the encoding.
 */
export function keyBytes(layout: KvLayout, key: Uint8Array | string): Uint8Array {
  if (typeof key !== "string") return key;
  const encoding = layout.keyEncoding ?? "hex";
  const refused = () =>
    new PirqError("invalid_argument", `key ${JSON.stringify(key.slice(0, 40))} is not ${encoding}, as this table's keys are; pass the key's bytes as a Uint8Array for anything else`);
  switch (encoding) {
    case "utf8":
      return new TextEncoder().encode(key);
    case "hex":
      if (key.trim().length % 2 !== 0 || /[^0-9a-fA-F]/.test(key.trim())) throw refused();
      return fromHex(key.trim());
    case "base64": {
      const t = key.trim();
      const bytes = fromBase64(t + "=".repeat((4 - (t.length % 4)) % 4));
      if (!bytes) throw refused();
      return bytes;
    }
  }
}

/**
 * A value the way it was given to the builder (KV §2 byte 75): text as a string, JSON parsed,
 * bytes (hex, base64, or a table that records nothing) as they are.
 */
export function decodeValue(layout: KvLayout, value: Uint8Array): unknown {
  switch (layout.valueEncoding) {
    case "utf8":
      return new TextDecoder("utf-8", { fatal: true }).decode(value);
    case "json":
      return JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(value));
    default:
      return value;
  }
}

function concat(...parts: Uint8Array[]): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

async function sha256(data: Uint8Array<ArrayBuffer>): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", data));
}

/** Throws `invalid_argument` unless `key` has a length the layout allows (KV §6 step 2). */
export function checkKey(layout: KvLayout, key: Uint8Array): void {
  const ok = layout.keySize === 0 ? key.length >= 1 && key.length <= MAX_KEY : key.length === layout.keySize;
  if (!ok) {
    const want = layout.keySize === 0 ? `1..=${MAX_KEY}` : String(layout.keySize);
    throw new PirqError("invalid_argument", `key of ${key.length} bytes; this database's keys have ${want}`);
  }
}

/** KV §3.1: the first 16 bytes of SHA-256("pirq-kv-tag" || seed || key), never all zero. */
export async function kvTag(seed: Uint8Array, key: Uint8Array): Promise<Uint8Array> {
  const tag = (await sha256(concat(TAG_LABEL, seed, key))).slice(0, TAG_SIZE);
  if (tag.every((b) => b === 0)) tag[TAG_SIZE - 1] = 1;
  return tag;
}

/** KV §3.2: the first `choices` distinct values of the hash stream mod `numPages`, in order. */
export async function kvCandidates(seed: Uint8Array, tag: Uint8Array, choices: number, numPages: number): Promise<number[]> {
  const pages: number[] = [];
  const n = BigInt(numPages);
  for (let c = 0; pages.length < choices; c++) {
    const counter = new Uint8Array([c & 255, (c >>> 8) & 255, (c >>> 16) & 255, (c >>> 24) & 255]);
    const d = await sha256(concat(BUCKET_LABEL, seed, tag, counter));
    const view = new DataView(d.buffer, d.byteOffset, d.byteLength);
    for (let i = 0; i < 4 && pages.length < choices; i++) {
      const p = Number(view.getBigUint64(8 * i, true) % n);
      if (!pages.includes(p)) pages.push(p);
    }
  }
  return pages;
}

/**
 * KV §4: the value in the first slot of `page` whose tag is `tag` (a set's present key: an empty
 * value), or null. A variable-size slot whose length exceeds the layout's largest value is
 * malformed: `bad_response`, never a truncated or guessed value.
 */
export function findInPage(layout: KvLayout, page: Uint8Array, tag: Uint8Array): Uint8Array | null {
  for (let j = 0; j < layout.slotsPerPage; j++) {
    const slot = j * layout.slotSize;
    if (!equalBytes(page.subarray(slot, slot + TAG_SIZE), tag)) continue;
    switch (layout.valueKind) {
      case "fixed":
        return page.slice(slot + TAG_SIZE, slot + layout.slotSize);
      case "set":
        return new Uint8Array(0);
      case "variable": {
        const len = page[slot + TAG_SIZE] | (page[slot + TAG_SIZE + 1] << 8);
        if (len > layout.valueSize) {
          throw new PirqError("bad_response", `the combined answer holds a malformed kv slot: a value of ${len} bytes where ${layout.valueSize} is the most (KV §4)`);
        }
        return page.slice(slot + TAG_SIZE + 2, slot + TAG_SIZE + 2 + len);
      }
    }
  }
  return null;
}
