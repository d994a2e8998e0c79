/**
 * Publisher signatures on pages (SPEC §2.4): every page of a signed database ends in a tail of
 * `changed_epoch` and an Ed25519 signature over the database's identity, the page's index, that
 * epoch and the page's usable bytes. The tail travels inside the private answer, so the client
 * checks exactly the page it XORed out of the two answers: a party that XORs anything into its
 * answer (it cannot sign) is caught on that lookup.
 *
 * Ed25519 comes from WebCrypto (`crypto.subtle`, RFC 8032 pure Ed25519), which Node ≥ 20 and
 * current browsers (Chrome/Edge ≥ 137, Firefox ≥ 129, Safari ≥ 17) have: native, so a page costs
 * tens of microseconds. Where it is missing (an older browser) the client falls back to
 * `@noble/curves`' ed25519 — audited (Cure53 2024, Trail of Bits 2026), pinned, no dependencies
 * beyond `@noble/hashes` — loaded only then (a separate chunk in the browser bundle).
 *
 * Strictness (SIGNED §1: a canonical `S`, no small-order public key or `R`). The pinned key is
 * checked once, with `@noble/curves` (WebCrypto in Node accepts any 32 bytes): a valid point,
 * not of small order. WebCrypto's verification (OpenSSL in Node, BoringSSL in Chromium) refuses a
 * non-canonical `S` and compares `R` with `[S]B - [k]A` without the cofactor, which no
 * small-order `R` can equal for a key of prime order; the fallback runs with RFC 8032's
 * encodings (`zip215: false`) and refuses a small-order `R` itself. So both paths accept exactly
 * the signatures a conformant signer makes.
 *
 * Freshness (SIGNED §4): the publisher signs, for every update, a manifest of the pages it
 * replaced; a page whose tail says it last changed at `c`, answered at epoch `e > c`, is current
 * only if no manifest of `c+1 ..= e` names it.
 */

import { fromHex, toHex } from "./bytes.js";
import { PirqError } from "./errors.js";

/** Ed25519 (scheme 1): 8 bytes of `changed_epoch`, then the 64-byte signature. */
export const TAIL_LEN = 72;
const SIGNATURE_LEN = 64;
const MAX_EPOCH = 2 ** 53 - 1;
const PAGE_DOMAIN = new TextEncoder().encode("pirq.page.v1");

/** How signatures are checked: WebCrypto's Ed25519, or the audited JavaScript fallback. */
export type VerifierBackend = "webcrypto" | "noble";

/** Checks Ed25519 signatures under one public key. */
export interface SignatureVerifier {
  readonly backend: VerifierBackend;
  /** The public key, 64 hex digits. */
  readonly publicKey: string;
  verify(signature: Uint8Array, message: Uint8Array): Promise<boolean>;
}

/**
 * A publisher key as the caller has it: the text of the public key file (`pirq publisher keygen
 * --public`: 64 hex digits, surrounding whitespace allowed) or its 32 bytes.
 */
export function parsePublisherKey(key: string | Uint8Array): Uint8Array {
  if (key instanceof Uint8Array) {
    if (key.length !== 32) throw new PirqError("invalid_argument", `publisherKey: ${key.length} bytes, an Ed25519 public key is 32`);
    return new Uint8Array(key);
  }
  if (typeof key !== "string") throw new PirqError("invalid_argument", "publisherKey: the key file's text (64 hex digits) or 32 bytes");
  let text = key.trim();
  // Key files say what they are (docs/spec/signed.md §1); a bare-hex file predates the prefix.
  if (text.startsWith("pirq-publisher-secret-")) {
    throw new PirqError("invalid_argument", "publisherKey: this is the publisher's SECRET key file, not the public key: give the file `pirq publisher keygen --public` wrote");
  }
  if (text.startsWith("pirq-publisher-public-v1:")) text = text.slice("pirq-publisher-public-v1:".length);
  else if (text.startsWith("pirq-publisher-")) throw new PirqError("invalid_argument", "publisherKey: a key file of another kind or version; this client reads pirq-publisher-public-v1");
  if (!/^[0-9a-fA-F]{64}$/.test(text)) {
    throw new PirqError("invalid_argument", "publisherKey: not an Ed25519 public key (the key file holds 64 hex digits)");
  }
  return fromHex(text.toLowerCase());
}

/**
 * A verifier for `publicKey`: WebCrypto's Ed25519 where the platform has it, else `@noble/curves`
 * (or the one `backend` names: the tests run both on the same vectors).
 */
export async function ed25519Verifier(publicKey: Uint8Array, backend?: VerifierBackend): Promise<SignatureVerifier> {
  const hex = toHex(publicKey);
  const { ed25519 } = await loadNoble();
  try {
    if (ed25519.Point.fromBytes(publicKey, false).isSmallOrder()) throw new Error("of small order");
  } catch (e) {
    throw new PirqError("invalid_argument", `publisherKey: not a valid Ed25519 public key (${(e as Error).message})`);
  }
  if (backend !== "noble") {
    const key = await importWebCryptoKey(publicKey);
    if (key) {
      return {
        backend: "webcrypto",
        publicKey: hex,
        verify: (signature, message) => globalThis.crypto.subtle.verify("Ed25519", key, signature as BufferSource, message as BufferSource),
      };
    }
    if (backend === "webcrypto") throw new PirqError("invalid_argument", "this platform's WebCrypto has no Ed25519");
  }
  const key = new Uint8Array(publicKey);
  return {
    backend: "noble",
    publicKey: hex,
    verify: async (signature, message) => {
      try {
        if (ed25519.Point.fromBytes(signature.subarray(0, 32), false).isSmallOrder()) return false;
        return ed25519.verify(signature, message, key, { zip215: false });
      } catch {
        return false; // a malformed point or signature is a failed check, never a crash
      }
    },
  };
}

/** `@noble/curves`' ed25519, imported on first use (in a browser: its chunk fetched then). */
function loadNoble(): Promise<typeof import("@noble/curves/ed25519.js")> {
  return import("@noble/curves/ed25519.js");
}

/** The key imported into WebCrypto, or undefined when this platform's WebCrypto lacks Ed25519. */
async function importWebCryptoKey(publicKey: Uint8Array): Promise<CryptoKey | undefined> {
  const subtle = globalThis.crypto?.subtle;
  if (!subtle) return undefined;
  try {
    return await subtle.importKey("raw", publicKey as BufferSource, { name: "Ed25519" }, false, ["verify"]);
  } catch (e) {
    // NotSupportedError (browsers), or a TypeError/NotSupportedError naming the algorithm (Node).
    if (e instanceof Error && e.name === "DataError") throw new PirqError("invalid_argument", "publisherKey: not a valid Ed25519 public key");
    return undefined; // no Ed25519 in this WebCrypto
  }
}

function u64le(value: number): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(value), true);
  return out;
}

/** M(p) = "pirq.page.v1" || db_id || u64le(p) || u64le(changed_epoch) || usable bytes (SPEC §2.4). */
export function pageMessage(dbId: Uint8Array, index: number, changedEpoch: number, usable: Uint8Array): Uint8Array {
  const parts = [PAGE_DOMAIN, dbId, u64le(index), u64le(changedEpoch), usable];
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** A page's signature tail, read (not yet checked). */
export interface PageTail {
  /** The epoch at which the page last changed, as its tail says. */
  changedEpoch: number;
  signature: Uint8Array;
  /** The page's usable bytes (everything before the tail). */
  usable: Uint8Array;
}

/** Splits a signed page into its usable bytes and its tail; undefined when the tail's epoch is impossible. */
export function readTail(page: Uint8Array, tailLen = TAIL_LEN): PageTail | undefined {
  if (tailLen !== TAIL_LEN || page.length < tailLen) return undefined;
  const at = page.length - tailLen;
  const epoch = new DataView(page.buffer, page.byteOffset + at, 8).getBigUint64(0, true);
  if (epoch > BigInt(MAX_EPOCH)) return undefined;
  return { changedEpoch: Number(epoch), signature: page.subarray(at + 8, at + 8 + SIGNATURE_LEN), usable: page.subarray(0, at) };
}

/**
 * Whether `page` (whole, tail included) is page `index` of database `dbId` as the publisher
 * signed it: returns its tail when it is, undefined when it is not.
 */
export async function checkPage(verifier: SignatureVerifier, dbId: Uint8Array, index: number, page: Uint8Array, tailLen = TAIL_LEN): Promise<PageTail | undefined> {
  const tail = readTail(page, tailLen);
  if (!tail) return undefined;
  const ok = await verifier.verify(tail.signature, pageMessage(dbId, index, tail.changedEpoch, tail.usable));
  return ok ? tail : undefined;
}

/** One epoch's manifest (SIGNED §4.1): the pages the publisher's update to `epoch` replaced. */
export interface Manifest {
  epoch: number;
  /** The database digest `D(epoch)` (SPEC §2.1), 64 hex digits. */
  digest: string;
  /** The replaced pages' indices, ascending, each once. */
  pages: number[];
  /** 128 hex digits. */
  signature: string;
}

const MANIFEST_DOMAIN = new TextEncoder().encode("pirq.manifest.v1");

/** The `GET /v1/manifests` body (a JSON array of manifests), shape-checked; null when it is not one. */
export function parseManifests(body: unknown): Manifest[] | null {
  if (!Array.isArray(body)) return null;
  const out: Manifest[] = [];
  for (const m of body) {
    if (typeof m !== "object" || m === null) return null;
    const { epoch, digest, pages, signature } = m as Record<string, unknown>;
    if (!Number.isSafeInteger(epoch) || (epoch as number) < 1) return null;
    if (typeof digest !== "string" || !/^[0-9a-f]{64}$/.test(digest)) return null;
    if (typeof signature !== "string" || !/^[0-9a-f]{128}$/.test(signature)) return null;
    if (!Array.isArray(pages) || !pages.every((p, i) => Number.isSafeInteger(p) && p >= 0 && (i === 0 || p > pages[i - 1]))) return null;
    out.push({ epoch: epoch as number, digest, pages: pages as number[], signature });
  }
  return out;
}

/** MM(e) = "pirq.manifest.v1" || db_id || u64le(e) || D(e) || u64le(len(pages)) || u64le(p)… (SIGNED §4.1). */
export function manifestMessage(dbId: Uint8Array, m: Manifest): Uint8Array {
  const out = new Uint8Array(MANIFEST_DOMAIN.length + 32 + 8 + 32 + 8 + 8 * m.pages.length);
  let at = 0;
  for (const part of [MANIFEST_DOMAIN, dbId, u64le(m.epoch), fromHex(m.digest), u64le(m.pages.length), ...m.pages.map(u64le)]) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** Whether the publisher signed manifest `m` of database `dbId`. */
export function checkManifest(verifier: SignatureVerifier, dbId: Uint8Array, m: Manifest): Promise<boolean> {
  return verifier.verify(fromHex(m.signature), manifestMessage(dbId, m));
}

/**
 * Whether page `index`, last changed at `changedEpoch` by its verified tail, is current at
 * `epoch` given the verified manifests (SIGNED §4.3): `fresh`, `future` (changed after the epoch
 * it was served at), `replaced` (a manifest of a later epoch, `at`, names it) or `missing` (the
 * manifest of epoch `at`, needed to tell, is not known).
 */
export function freshness(
  index: number,
  changedEpoch: number,
  epoch: number,
  manifests: ReadonlyMap<number, Manifest>,
): { fresh: true } | { fresh: false; why: "future" } | { fresh: false; why: "replaced" | "missing"; at: number } {
  if (changedEpoch > epoch) return { fresh: false, why: "future" };
  for (let e = changedEpoch + 1; e <= epoch; e++) {
    const m = manifests.get(e);
    if (!m) return { fresh: false, why: "missing", at: e };
    if (includesSorted(m.pages, index)) return { fresh: false, why: "replaced", at: e };
  }
  return { fresh: true };
}

/** Whether the ascending `pages` (a manifest's, SIGNED §4.1) hold `index`: a binary search, as an update may replace millions. */
function includesSorted(pages: number[], index: number): boolean {
  let lo = 0;
  let hi = pages.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (pages[mid] < index) lo = mid + 1;
    else hi = mid;
  }
  return pages[lo] === index;
}
