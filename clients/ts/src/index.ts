/**
 * pirq client: private lookups from two non-colluding pirq parties, for browsers and Node.
 *
 * ```ts
 * import { connect } from "pirq-client";
 * const pirq = await connect("https://a.example", "https://b.example");
 * const page = await pirq.getPage(42);            // Uint8Array of page_size bytes
 * const value = await pirq.getValue("alice");    // text, JSON or bytes as the table records; null when absent
 * ```
 *
 * Implemented from docs/spec/v1.md and docs/http-api.md alone. One runtime dependency,
 * `@noble/curves`, loaded only where WebCrypto has no Ed25519 (signed databases, SPEC §2.4).
 */
export { connect, agree, Pirq } from "./client.js";
export type { ConnectOptions, DatabaseInfo, GetResult, LookupOptions, LookupTrace, PagesResult } from "./client.js";
export type { KvLayout, ValueKind, KeyEncoding, ValueEncoding } from "./kv.js";
export { kvTag, kvCandidates, keyBytes, decodeValue } from "./kv.js";
export { Party } from "./party.js";
export type { CallContext, Exchange, PartyAnswer, PartyInfo, PartyOptions, Signing, WaitMode } from "./party.js";
export { PirqError, isPirqError, PARTY_TEXT_LIMIT } from "./errors.js";
export type { ClientErrorCode, PartyErrorCode, PirqErrorCode, Phase } from "./errors.js";
export { INFO_LIMIT, ENVELOPE_LIMIT, answerLimit } from "./body.js";
export { isLoopbackHost } from "./url.js";
export { parsePublisherKey, ed25519Verifier, checkPage, pageMessage, readTail, TAIL_LEN } from "./signed.js";
export type { PageTail, SignatureVerifier, VerifierBackend } from "./signed.js";
export { generateKeys, parseKey, evalPoint, evalFullDomain, keyLength, treeDepth } from "./dpf.js";
export { toBase64, fromBase64, toHex, fromHex } from "./bytes.js";
