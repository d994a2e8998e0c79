/**
 * Key-value layout v1 (docs/spec/kv.md, "KV"): the client's half. Records sit in cuckoo-hashed
 * slots of ordinary pages; a lookup fetches all `choices` candidate pages of a key privately and
 * searches them for the key's tag. Hashes are SHA-256 through WebCrypto, present in browsers
 * (secure contexts: https or localhost) and Node alike.
 */

import { equalBytes, fromHex } from "./bytes.js";
import { PirqError } from "./errors.js";

/** The `kv` object of `/v1/info`, checked (KV §2, §5). */
export interface KvLayout {
  version: 1;
  choices: number;
  tagSize: 16;
  valueSize: number;
  /** Bytes of every key; 0 = any length in 1..=1024. */
  keySize: number;
  slotSize: number;
  slotsPerPage: number;
  seed: Uint8Array;
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
 * this client's own arithmetic, and only version 1 is known (KV §5).
 */
export function parseKvLayout(kv: unknown, pageSize: number, numPages: number): KvLayout {
  const bad = (why: string) => new PirqError("not_kv", `the kv layout in /v1/info is not usable: ${why}`);
  if (typeof kv !== "object" || kv === null) throw bad("not an object");
  const o = kv as Record<string, unknown>;
  if (o.version !== 1) throw bad(`unknown version ${String(o.version)}`);
  if (!isU32(o.choices) || o.choices < 2 || o.choices > 4) throw bad(`choices ${String(o.choices)}`);
  if (!isU32(o.value_size) || o.value_size < 1) throw bad(`value_size ${String(o.value_size)}`);
  if (!isU32(o.key_size) || o.key_size > MAX_KEY) throw bad(`key_size ${String(o.key_size)}`);
  if (typeof o.seed !== "string" || !/^[0-9a-f]{64}$/.test(o.seed)) throw bad("seed is not 64 lowercase hex digits");
  const slotSize = TAG_SIZE + o.value_size;
  const slotsPerPage = Math.floor(pageSize / slotSize);
  if (slotsPerPage < 1) throw bad(`value_size ${o.value_size} does not fit a page of ${pageSize}`);
  if (numPages < o.choices) throw bad(`${numPages} pages for ${o.choices} choices`);
  if (o.tag_size !== TAG_SIZE || o.slot_size !== slotSize || o.slots_per_page !== slotsPerPage) {
    throw bad(`derived sizes (tag ${String(o.tag_size)}, slot ${String(o.slot_size)}, ${String(o.slots_per_page)} per page) differ from 16, ${slotSize}, ${slotsPerPage}`);
  }
  return {
    version: 1,
    choices: o.choices,
    tagSize: TAG_SIZE,
    valueSize: o.value_size,
    keySize: o.key_size,
    slotSize,
    slotsPerPage,
    seed: fromHex(o.seed),
  };
}

/** Two layouts describe the same table. */
export function sameLayout(a: KvLayout, b: KvLayout): boolean {
  return a.choices === b.choices && a.valueSize === b.valueSize && a.keySize === b.keySize && equalBytes(a.seed, b.seed);
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

/** KV §4: the value in the first slot of `page` whose tag is `tag`, or null. */
export function findInPage(layout: KvLayout, page: Uint8Array, tag: Uint8Array): Uint8Array | null {
  for (let j = 0; j < layout.slotsPerPage; j++) {
    const slot = j * layout.slotSize;
    if (equalBytes(page.subarray(slot, slot + TAG_SIZE), tag)) {
      return page.slice(slot + TAG_SIZE, slot + layout.slotSize);
    }
  }
  return null;
}
