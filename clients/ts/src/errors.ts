/**
 * One error type for everything the client reports, so callers switch on a stable `code`:
 * the server's own error code (docs/http-api.md, "Errors") when a party answered with one, or
 * one of the client-side codes below when the client itself found the problem.
 */

/** Codes the client raises itself (a party's codes are passed through unchanged). */
export type ClientErrorCode =
  /** The party could not be reached (connection refused, DNS, TLS, CORS refusal). */
  | "party_unreachable"
  /** The party answered something that is not the documented API (bad JSON, wrong shape). */
  | "bad_response"
  /** The two parties serve different databases (sizes, domain, or content digest differ). */
  | "parties_disagree"
  /** A party reports no live worker (`workers: 0` in /v1/info): its queries would only wait. */
  | "no_workers"
  /** Both URLs lead to the same party (same identity in /v1/info): it would see both keys. */
  | "same_party"
  /** The parties' epoch windows do not overlap, or an answer carries another epoch than pinned. */
  | "epoch_mismatch"
  /** The caller asked for something out of range (a page index ≥ num_pages, a bad argument). */
  | "invalid_argument"
  /** A query was still pending when the caller's time limit ran out. */
  | "timeout"
  /** The key-value database holds no such key (also see `get`, which returns null instead). */
  | "key_absent"
  /** The database is not a key-value database (`get` on a page database) or its layout is unknown. */
  | "not_kv"
  /** The DPF key parser rejected bytes (SPEC §1.3), same codes as the server's: key_*. */
  | "key_too_short" | "key_version" | "key_party" | "key_domain_bits" | "key_length" | "key_control_byte";

export class PirqError extends Error {
  /** Stable code: the server's (e.g. `epoch_unavailable`, `backlog_full`) or a {@link ClientErrorCode}. */
  readonly code: string;
  /** HTTP status of the party's answer, when the error came from one. */
  readonly status?: number;
  /** Which party ("A" or "B") and its base URL, when the error concerns one party. */
  readonly party?: string;
  /** The offending key's index in the query, when the server named one. */
  readonly keyIndex?: number;
  /** The party's epoch window, with `epoch_unavailable`. */
  readonly window?: { oldest: number; newest: number };

  constructor(
    code: string,
    message: string,
    extra: {
      status?: number;
      party?: string;
      keyIndex?: number;
      window?: { oldest: number; newest: number };
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
    this.keyIndex = extra.keyIndex;
    this.window = extra.window;
  }
}
