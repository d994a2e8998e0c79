/**
 * One error type for everything the client reports, so callers switch on a stable `code`:
 * the server's own error code (docs/http-api.md, "Errors") when a party answered with one, or
 * one of the client-side codes below when the client itself found the problem.
 */

/** Codes the client raises itself (a party's codes are passed through unchanged). */
export type ClientErrorCode =
  /** The party could not be reached (connection refused, DNS, TLS, CORS refusal). */
  | "party_unreachable"
  /** The party answered something that is not the documented API (bad JSON, wrong shape, a bad id). */
  | "bad_response"
  /** The party sent more bytes than the answer can hold (`/v1/info` over 64 KiB, an answer over its bound). */
  | "too_large"
  /** The two parties serve different databases (sizes, domain, or content digest differ). */
  | "parties_disagree"
  /** A party reports no live worker (`workers: 0` in /v1/info): its queries would only wait. */
  | "no_workers"
  /** Both URLs lead to the same party (same identity in /v1/info): it would see both keys. */
  | "same_party"
  /** The parties' epoch windows do not overlap, or an answer carries another epoch than pinned. */
  | "epoch_mismatch"
  /** The caller asked for something out of range (a page index ≥ num_pages, a bad option). */
  | "invalid_argument"
  /** A party URL is plain `http://` to a host that is not loopback, without `insecureHttp`. */
  | "insecure_http"
  /** The lookup's deadline (`timeoutMs`) passed; `party` and `phase` say where it was. */
  | "timeout"
  /** The key-value database holds no such key (also see `get`, which returns null instead). */
  | "key_absent"
  /** The database is not a key-value database (`get` on a page database) or its layout is unknown. */
  | "not_kv"
  /** A retrieved page failed the pinned publisher's signature (SPEC §2.4): a party altered its answer. */
  | "bad_signature"
  /**
   * A retrieved page carries a valid signature but is not current (SIGNED §4.3): a publisher's
   * manifest of a later epoch replaced it, or the manifest needed to tell is missing.
   */
  | "stale_page"
  /** An answer at an epoch older than the newest signed epoch this client has seen (or `minEpoch`), SIGNED §4.4. */
  | "stale_epoch"
  /**
   * A party whose newest epoch is older than the publisher's signed manifests (or `minEpoch`)
   * show exists (SIGNED §4.4): stale, or lying to roll the client back; refused before any key is sent.
   */
  | "stale_party"
  /** The client is pinned to a publisher key (`publisherKey`) and the parties serve an unsigned database. */
  | "not_signed"
  /** The client is pinned to a publisher key and the parties serve a database signed by another. */
  | "wrong_publisher"
  /** The DPF key parser rejected bytes (SPEC §1.3), same codes as the server's: key_*. */
  | "key_too_short" | "key_version" | "key_party" | "key_domain_bits" | "key_length" | "key_control_byte";

/** Codes a party answers with (docs/http-api.md, "Errors"), passed through as they come. */
export type PartyErrorCode =
  | "invalid_json" | "invalid_bincode" | "invalid_base64" | "no_keys" | "too_many_keys"
  | "key_domain_mismatch" | "epoch_unavailable" | "unauthorized" | "rate_limited" | "invalid_parameter"
  | "not_found" | "method_not_allowed" | "body_too_large" | "body_timeout" | "invalid_id" | "uri_too_long"
  | "headers_too_large" | "too_many_connections" | "too_many_waiters" | "unsupported_media_type"
  | "scan_failed" | "internal" | "redis_unavailable" | "no_database" | "invalid_idempotency_key"
  | "idempotency_key_reused" | "backlog_full" | "storage_full" | "not_durable" | "delivery_limit" | "invalid_job";

/**
 * Every code a {@link PirqError} may carry: the client's, the documented party codes, `http_<status>`
 * for an error answer without a JSON body, and any other code a newer party may send (a string of
 * `[a-z0-9_]`, checked before it is passed on).
 */
export type PirqErrorCode = ClientErrorCode | PartyErrorCode | `http_${number}` | (string & {});

/**
 * Where in a lookup an error happened (the same names as the Rust client's): reading a party's
 * `/v1/info`; submitting the query (`POST /v1/queries`, up to its answer's status line); reading
 * the answer the submit was answered with (`Prefer: wait`); waiting by its event stream or by
 * long-poll; waiting to retry after a refusal; or reading the publisher's epoch manifests (signed
 * databases, SIGNED §4).
 */
export type Phase = "info" | "submit" | "answer" | "events" | "poll" | "retry wait" | "manifests";

export class PirqError extends Error {
  /** Stable code: the server's (e.g. `epoch_unavailable`, `backlog_full`) or a {@link ClientErrorCode}. */
  readonly code: PirqErrorCode;
  /** HTTP status of the party's answer, when the error came from one. */
  readonly status?: number;
  /** Which party ("A" or "B") and its base URL, when the error concerns one party. */
  readonly party?: string;
  /** The phase of the lookup at that party, when the error concerns one party's exchange. */
  readonly phase?: Phase;
  /** The offending key's index in the query, when the server named one. */
  readonly keyIndex?: number;
  /** The party's epoch window, with `epoch_unavailable`. */
  readonly window?: { oldest: number; newest: number };
  /** Seconds the party asked to wait (`Retry-After`) with a refusal (429/503) that was not retried. */
  readonly retryAfter?: number;

  constructor(
    code: PirqErrorCode,
    message: string,
    extra: {
      status?: number;
      party?: string;
      phase?: Phase;
      keyIndex?: number;
      window?: { oldest: number; newest: number };
      retryAfter?: number;
      cause?: unknown;
    } = {},
  ) {
    super(extra.party ? `party ${extra.party}: ${message} (${code})` : `${message} (${code})`, {
      cause: extra.cause,
    });
    this.name = "PirqError";
    this.code = code;
    this.status = extra.status;
    this.party = extra.party;
    this.phase = extra.phase;
    this.keyIndex = extra.keyIndex;
    this.window = extra.window;
    this.retryAfter = extra.retryAfter;
  }
}

/** True when `e` is a {@link PirqError} (with `code`, if given): a type guard for `catch` blocks. */
export function isPirqError(e: unknown, code?: PirqErrorCode): e is PirqError {
  return e instanceof PirqError && (code === undefined || e.code === code);
}

/** The most characters of a party's own text (an error message, a body excerpt) put into an error. */
export const PARTY_TEXT_LIMIT = 300;

/**
 * Text a party sent, made safe to show: every control character (Unicode category Cc: C0, DEL
 * and C1, U+009B — the one-character CSI — included) removed, so it cannot move a terminal's
 * cursor, recolour it or hide lines; then cut to {@link PARTY_TEXT_LIMIT} characters with "…".
 */
export function partyText(text: string): string {
  // eslint-disable-next-line no-control-regex
  const clean = text.replace(/[\u0000-\u001f\u007f-\u009f]/g, "");
  const chars = Array.from(clean); // code points: never cut a surrogate pair in half
  return chars.length > PARTY_TEXT_LIMIT ? chars.slice(0, PARTY_TEXT_LIMIT).join("") + "…" : clean;
}

/** A party's error code when it is of the documented form (`[a-z0-9_]`, 1..64), else undefined. */
export function partyCode(code: unknown): string | undefined {
  return typeof code === "string" && /^[a-z][a-z0-9_]{0,63}$/.test(code) ? code : undefined;
}
