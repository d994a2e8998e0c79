/**
 * One party's HTTP API (docs/http-api.md): database info, query submission, and waiting for
 * the result: in the submit's own answer (`Prefer: wait`), else by server-sent events with a
 * long-poll fallback.
 *
 * A party is run by a stranger and may be broken, slow or hostile, so everything it sends is
 * read under the caller's deadline and within a byte bound ({@link readBounded}), every id it
 * returns is checked before it goes into a URL, and its error text is cleaned before it goes
 * into an error ({@link partyText}).
 *
 * Only `fetch` is used, in Node and browsers alike: SSE is read from a streamed `fetch` body
 * rather than `EventSource`, because `EventSource` cannot be aborted with a signal, hides the
 * HTTP status of a refused stream, cannot send a bearer token, and does not exist in Node 20.
 */

import { answerLimit, discard, ENVELOPE_LIMIT, INFO_LIMIT, MANIFESTS_LIMIT, raceAbort, readBounded, SseParser, STREAM_SLACK, TooLarge } from "./body.js";
import { fromBase64, randomBytes, toBase64, toHex } from "./bytes.js";
import { partyCode, partyText, Phase, PirqError } from "./errors.js";
import { parseRetryAfter, retryDelayMs, sleep } from "./retry.js";
import { partyBaseUrl } from "./url.js";
import { Manifest, parseManifests } from "./signed.js";

/**
 * A signed database's `signing` object of `/v1/info` (SPEC §2.4): who signed its pages, and
 * how many bytes at the end of every page the signature tail takes.
 */
export interface Signing {
  scheme: "ed25519";
  /** Bytes of the signature tail at the end of every page (72 for Ed25519). */
  tailLen: number;
  /** The publisher's Ed25519 public key, 64 hex digits. */
  publisherKey: string;
  /** The database's identity, 64 hex digits. */
  dbId: string;
}

/** `GET /v1/info` (fields other helpers add are kept in `raw`). */
export interface PartyInfo {
  numPages: number;
  pageSize: number;
  domainBits: number;
  epoch: { oldest: number; newest: number };
  maxKeysPerQuery: number;
  /** Workers with a live heartbeat, when the party reports it. */
  workers?: number;
  /** The party's identity (32 hex digits), if it reports one: two URLs of one party are refused. */
  party?: string;
  /** SPEC §2.1 digest of the database at `epoch.newest` (64 hex digits), if reported. */
  digest?: string;
  /** How the pages are signed, if they are (SPEC §2.4). */
  signing?: Signing;
  raw: Record<string, unknown>;
}

/** A done query's answer from one party. */
export interface PartyAnswer {
  id: string;
  epoch: number;
  pages: Uint8Array[];
  /** SPEC §2.1 digest of the database the pages were computed from (64 hex digits), if stamped. */
  digest?: string;
  raw: Record<string, unknown>;
}

/**
 * How to wait for a result:
 * - `"inline"` (default): the submit asks the party to hold its answer until the query is final
 *   (`Prefer: wait`, docs/http-api.md): one round trip a query when it is answered in time; a
 *   query still pending then (202) is waited for as in `"sse"`;
 * - `"sse"`: submit, then follow the query's server-sent events (falls back to long-poll);
 * - `"poll"`: submit, then long-poll only.
 */
export type WaitMode = "inline" | "sse" | "poll";

/** One HTTP exchange, as the demo and tests show it: what the party saw of a query. */
export interface Exchange {
  method: string;
  path: string;
  /** Bytes of the request body (0 for GET). */
  requestBytes: number;
  /** The `Prefer` header sent, if any (e.g. `wait=25`). */
  prefer?: string;
  status: number;
}

/** Per call: an abort signal, the deadline, and where to record the call's HTTP exchanges. */
export interface CallContext {
  /** Ends the call (every request and body read) when it aborts. */
  signal?: AbortSignal;
  /** Every exchange of the call is appended here (the lookup's trace). */
  trace?: Exchange[];
  /**
   * When the call must be over (`performance.now()` milliseconds): a submit asks the party to
   * hold its answer (`Prefer: wait`) no longer than what is left, and a retry that would end
   * past it is not made. Without it (and without `signal`) a call gets the party's `timeoutMs`.
   */
  deadline?: number;
  /** The whole deadline in milliseconds, named in a `timeout` error. */
  timeoutMs?: number;
  /** The page size the answer's pages have (bounds the answer's bytes); default: the party's last info. */
  pageSize?: number;
}

export interface PartyOptions {
  /** "inline" (default), "sse" or "poll": see {@link WaitMode}. */
  wait?: WaitMode;
  /**
   * How often a request is tried again after 429/503 (after its `Retry-After`, jittered) or, for
   * a submit, a failed connection (default 4); never past the deadline.
   */
  retries?: number;
  /** The fetch to use (default: the global one): proxies, instrumentation, tests. */
  fetch?: typeof fetch;
  /** Bearer token for this party's queries (`Authorization: Bearer …`, `--query-tokens` parties). Never logged or put into errors. */
  token?: string;
  /** Allow plain `http://` to a host that is not loopback (issue 23): only for networks where nobody can watch. */
  insecureHttp?: boolean;
  /** Deadline of a call made without one (`CallContext.deadline`/`signal`), in ms (default 60 000). */
  timeoutMs?: number;
  /**
   * The party's table to ask (issue 38: `GET /v1/tables` lists a party's tables): its routes are
   * `/v1/tables/NAME/…`; absent or `"default"`, the routes without a table name. 1 to 64 of
   * `[A-Za-z0-9_-]` (`invalid_argument` otherwise).
   */
  table?: string;
}

const LONG_POLL_SECONDS = 30;

/**
 * The longest a submit asks the party to hold its answer (`Prefer: wait`, seconds): below the
 * gateway's cap of 30 s and the idle timeouts of common proxies; a query not answered by then is
 * waited for as usual. The Rust client's `INLINE_WAIT`.
 */
const INLINE_WAIT_SECONDS = 25;

/** A query id as the API defines it (docs/http-api.md): 128 random bits, 32 lowercase hex digits. */
const QUERY_ID = /^[0-9a-f]{32}$/;

/**
 * The `Prefer: wait` of a submit with `deadline` ahead: {@link INLINE_WAIT_SECONDS}, or the time
 * left if that is shorter, in whole seconds (rounded up), at least 1.
 */
function preferWait(deadline: number | undefined): string {
  const left = deadline === undefined ? INLINE_WAIT_SECONDS : Math.ceil((deadline - performance.now()) / 1000);
  return `wait=${Math.max(1, Math.min(INLINE_WAIT_SECONDS, left))}`;
}

/** A submit's answer: the query id, and its final result when the party answered with it (200). */
interface Submitted {
  id: string;
  final?: unknown;
}

function uuid4(): string {
  const b = randomBytes(16);
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = toHex(b);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function isDigest(v: unknown): v is string {
  return typeof v === "string" && /^[0-9a-f]{64}$/.test(v);
}

function isU64(v: unknown): v is number {
  return typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
}

/** What one request is, for errors and the trace. */
interface Step {
  phase: Phase;
  /** e.g. "GET /v1/info"; never holds anything the party chose (ids are checked first). */
  what: string;
}

export class Party {
  /** "A" or "B": named in every error. */
  readonly name: string;
  /** Base URL without a trailing slash. */
  readonly url: string;
  /** The last `/v1/info` read (its page size and key limit bound the answers). */
  lastInfo?: PartyInfo;
  private readonly wait: WaitMode;
  private readonly retries: number;
  private readonly fetchFn: typeof fetch;
  private readonly timeoutMs: number;
  /** Where the table's routes are: `/v1`, or `/v1/tables/NAME`. */
  private readonly api: string;
  /** A private field: not shown by `console.log(party)`, `JSON.stringify` or a debugger's summary. */
  readonly #authorization?: string;

  /**
   * Checks `url` (https://, or http:// to loopback unless `insecureHttp`; `insecure_http` or
   * `invalid_argument` otherwise) and the options; sends nothing.
   */
  constructor(name: string, url: string, options: PartyOptions = {}) {
    this.name = name;
    this.url = partyBaseUrl(name, url, options.insecureHttp);
    if (options.table !== undefined && !/^[A-Za-z0-9_-]{1,64}$/.test(options.table)) {
      throw new PirqError("invalid_argument", "table must be 1..64 characters of [A-Za-z0-9_-]");
    }
    this.api = options.table === undefined || options.table === "default" ? "/v1" : `/v1/tables/${options.table}`;
    this.wait = options.wait ?? "inline";
    if (!["inline", "sse", "poll"].includes(this.wait)) throw new PirqError("invalid_argument", `wait must be "inline", "sse" or "poll"`);
    this.retries = options.retries ?? 4;
    if (!Number.isSafeInteger(this.retries) || this.retries < 0) throw new PirqError("invalid_argument", "retries must be a whole number ≥ 0");
    this.timeoutMs = options.timeoutMs ?? 60_000;
    checkTimeout(this.timeoutMs);
    this.fetchFn = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    if (options.token !== undefined) {
      // A token is sent as-is in a header: refuse what would break the header or leak into a
      // URL or log line (RFC 6750 b64token is narrower; any visible ASCII is accepted here).
      if (!/^[\x21-\x7e]{1,4096}$/.test(options.token)) {
        throw new PirqError("invalid_argument", `party ${name}: the token must be 1..4096 visible ASCII characters`);
      }
      this.#authorization = `Bearer ${options.token}`;
    }
  }

  /** For `console.log` and `util.inspect`: name and URL only (never the token). */
  toJSON(): { name: string; url: string } {
    return { name: this.name, url: this.url };
  }

  private err(code: string, message: string, extra: ConstructorParameters<typeof PirqError>[2] = {}): PirqError {
    return new PirqError(code, message, { party: `${this.name} (${this.url})`, ...extra });
  }

  /**
   * `e`, or, when the call's signal has aborted, the reason: a deadline becomes a `timeout`
   * naming this party, the phase and the request that was open; the caller's own abort passes as is.
   */
  private stopped(e: unknown, ctx: CallContext, step: Step): unknown {
    if (!ctx.signal?.aborted) return e;
    const reason = ctx.signal.reason;
    if (reason instanceof PirqError && reason.code === "timeout" && reason.party === undefined) {
      // The Rust client's words (FAKE_PARTY.md): "submit: no answer within 2 s (the lookup's deadline)".
      const within = ctx.timeoutMs !== undefined ? ` within ${ctx.timeoutMs} ms` : "";
      return this.err("timeout", `${step.phase}: no answer${within} (the lookup's deadline; ${step.what})`, { phase: step.phase, cause: reason });
    }
    return reason;
  }

  /**
   * Runs `body` with a deadline: the context's, or (for a call made without one) the party's
   * `timeoutMs`, so that no call of this class can wait forever on a silent party.
   */
  private async bounded<T>(ctx: CallContext, body: (ctx: CallContext) => Promise<T>): Promise<T> {
    if (ctx.deadline !== undefined || ctx.signal !== undefined) return body(ctx);
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new PirqError("timeout", `deadline of ${this.timeoutMs} ms passed`)), this.timeoutMs);
    try {
      return await body({ ...ctx, signal: controller.signal, deadline: performance.now() + this.timeoutMs, timeoutMs: this.timeoutMs });
    } finally {
      clearTimeout(timer);
      controller.abort();
    }
  }

  /** One fetch: network failures → `party_unreachable`; records the exchange. */
  private async fetchOnce(path: string, init: RequestInit & { bodyBytes?: number }, ctx: CallContext, step: Step): Promise<Response> {
    // A fetch given an aborted signal rejects, but check here too: a loop of long-polls must
    // end at the deadline even with a fetch that ignores signals.
    if (ctx.signal?.aborted) throw this.stopped(undefined, ctx, step);
    const headers = new Headers(init.headers);
    if (this.#authorization !== undefined && step.phase !== "info") headers.set("authorization", this.#authorization);
    let response: Response;
    try {
      // redirect: "manual": the API never redirects, and following one could carry a DPF key
      // to another host or over plain HTTP; a redirect is refused below.
      response = await raceAbort(this.fetchFn(this.url + path, { ...init, headers, signal: ctx.signal, redirect: "manual" }), ctx.signal);
    } catch (cause) {
      if (ctx.signal?.aborted) throw this.stopped(cause, ctx, step);
      // The cause is the platform's (undici, the browser's): never the party's words, but
      // cleaned and cut all the same.
      const why = partyText(String((cause as Error)?.cause ?? cause));
      throw this.err("party_unreachable", `cannot reach ${this.url}${step.what.replace(/^\S+ /, "")}: ${why}`, { phase: step.phase, cause });
    }
    if (response.type === "opaqueredirect" || (response.status >= 300 && response.status < 400)) {
      // (A browser shows a redirect as an opaque answer of status 0, Node as the 3xx itself.)
      discard(response);
      throw this.err("bad_response", `${step.what}: answered with a redirect, which the API never sends: not followed`, { phase: step.phase, status: response.status || undefined });
    }
    const prefer = headers.get("prefer") ?? undefined;
    ctx.trace?.push({
      method: init.method ?? "GET",
      path: path.replace(/\?.*/, ""),
      requestBytes: init.bodyBytes ?? 0,
      ...(prefer === undefined ? {} : { prefer }),
      status: response.status,
    });
    return response;
  }

  /**
   * A request, tried again while the party refuses for now (429/503: after `Retry-After`,
   * jittered) or, when `retryUnreachable`, cannot be reached — at most `retries` more times and
   * never past the deadline. The answer is never a 429/503: the last refusal is thrown as the
   * party's error, with its `retryAfter`.
   */
  private async send(path: string, init: RequestInit & { bodyBytes?: number }, ctx: CallContext, step: Step, retryUnreachable = false): Promise<Response> {
    for (let attempt = 0; ; attempt++) {
      let response: Response;
      try {
        response = await this.fetchOnce(path, init, ctx, step);
      } catch (e) {
        if (retryUnreachable && e instanceof PirqError && e.code === "party_unreachable" && attempt < this.retries) {
          const delay = retryDelayMs(attempt, undefined);
          if (fits(ctx, delay)) {
            await this.pause(delay, ctx, step);
            continue;
          }
        }
        throw e;
      }
      if (response.status !== 429 && response.status !== 503) return response;
      const retryAfter = parseRetryAfter(response.headers.get("retry-after"));
      const delay = retryDelayMs(attempt, retryAfter);
      if (attempt < this.retries && fits(ctx, delay)) {
        discard(response);
        await this.pause(delay, ctx, step);
        continue;
      }
      throw await this.errorFrom(response, ctx, step, retryAfter);
    }
  }

  private async pause(ms: number, ctx: CallContext, step: Step): Promise<void> {
    try {
      await sleep(ms, ctx.signal);
    } catch (e) {
      throw this.stopped(e, ctx, { phase: "retry wait", what: `waiting to retry ${step.what}` });
    }
  }

  /** The body, at most `limit` bytes, as text (UTF-8): `too_large` past the bound. */
  private async text(response: Response, limit: number, ctx: CallContext, step: Step): Promise<string> {
    try {
      return new TextDecoder().decode(await readBounded(response, limit, ctx.signal));
    } catch (e) {
      if (e instanceof TooLarge) {
        const declared = e.declared !== undefined ? ` (Content-Length: ${e.declared})` : "";
        throw this.err("too_large", `${step.what}: HTTP ${response.status} body larger than ${limit} bytes${declared}`, { phase: step.phase, status: response.status });
      }
      if (ctx.signal?.aborted) throw this.stopped(e, ctx, step);
      throw this.err("party_unreachable", `${step.what}: connection broke while reading the answer: ${partyText(String(e))}`, { phase: step.phase, cause: e });
    }
  }

  /** The JSON of an answer, at most `limit` bytes; `bad_response` when it is not JSON. */
  private async json(response: Response, limit: number, ctx: CallContext, step: Step): Promise<unknown> {
    const text = await this.text(response, limit, ctx, step);
    try {
      return JSON.parse(text);
    } catch {
      throw this.err("bad_response", `${step.what}: HTTP ${response.status}, body is not JSON: ${partyText(text.slice(0, 120))}`, { phase: step.phase, status: response.status });
    }
  }

  /** The party's documented error body → PirqError with its code (docs/http-api.md "Errors"). */
  private async errorFrom(response: Response, ctx: CallContext, step: Step, retryAfter?: number): Promise<PirqError> {
    const text = await this.text(response, ENVELOPE_LIMIT, ctx, step);
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    const e = isObject(body) && isObject(body.error) ? body.error : undefined;
    if (e) return this.errorBody(e, step, response.status, retryAfter);
    return this.err(`http_${response.status}`, `${step.what}: HTTP ${response.status} without an error body`, { status: response.status, phase: step.phase, retryAfter });
  }

  /** `{"code","message","key_index"?,"window"?}` → PirqError; a code not of the documented form is `bad_response`. */
  private errorBody(e: Record<string, unknown>, step: Step, status?: number, retryAfter?: number): PirqError {
    const w = isObject(e.window) && isU64(e.window.oldest) && isU64(e.window.newest)
      ? { oldest: e.window.oldest, newest: e.window.newest }
      : undefined;
    const message = typeof e.message === "string" ? partyText(e.message) : "error";
    const code = partyCode(e.code);
    if (code === undefined) {
      return this.err("bad_response", `${step.what}: an error whose code is not of the documented form ([a-z0-9_]): ${message}`, { status, phase: step.phase });
    }
    return this.err(code, `${step.what}: ${message}`, {
      status,
      phase: step.phase,
      keyIndex: isU64(e.key_index) ? e.key_index : undefined,
      window: w,
      retryAfter,
    });
  }

  /** `GET /v1/info` (at most {@link INFO_LIMIT} bytes), checked to be the documented shape. */
  async info(ctx: CallContext = {}): Promise<PartyInfo> {
    return this.bounded(ctx, async (ctx) => {
      const step: Step = { phase: "info", what: "GET /v1/info" };
      const response = await this.send(`${this.api}/info`, { headers: { accept: "application/json" } }, ctx, step);
      if (!response.ok) throw await this.errorFrom(response, ctx, step);
      const body = await this.json(response, INFO_LIMIT, ctx, step);
      if (
        !isObject(body) || !isU64(body.num_pages) || !isU64(body.page_size) || !isU64(body.domain_bits) ||
        !isObject(body.epoch) || !isU64(body.epoch.oldest) || !isU64(body.epoch.newest)
      ) {
        throw this.err("bad_response", "GET /v1/info: not the documented shape", { phase: "info" });
      }
      // Geometry a lookup relies on (SPEC §1, §2): a party that claims otherwise is broken or lying.
      const domainOk = body.domain_bits >= 1 && body.domain_bits <= 40;
      if (!domainOk || body.page_size < 1 || body.num_pages < 1 || body.num_pages > 2 ** body.domain_bits || body.epoch.oldest > body.epoch.newest) {
        throw this.err(
          "bad_response",
          `GET /v1/info: impossible database (num_pages ${body.num_pages}, page_size ${body.page_size}, domain_bits ${body.domain_bits}, epochs ${body.epoch.oldest}..=${body.epoch.newest})`,
          { phase: "info" },
        );
      }
      if (body.max_keys_per_query !== undefined && !(isU64(body.max_keys_per_query) && body.max_keys_per_query >= 1)) {
        throw this.err("bad_response", "GET /v1/info: max_keys_per_query is not a whole number ≥ 1", { phase: "info" });
      }
      let signing: Signing | undefined;
      if (body.signing !== undefined) {
        const g = body.signing;
        // SPEC §2.4: scheme 1, Ed25519, the only one defined, with its 72-byte tail.
        if (!isObject(g) || g.scheme !== "ed25519" || g.tail_len !== 72 || !isDigest(g.publisher_key) || !isDigest(g.db_id) || body.page_size < 72 + 16) {
          throw this.err("bad_response", "GET /v1/info: a signing object this client does not know (SPEC §2.4: ed25519, tail_len 72)", { phase: "info" });
        }
        signing = { scheme: "ed25519", tailLen: 72, publisherKey: g.publisher_key, dbId: g.db_id };
      }
      const info: PartyInfo = {
        numPages: body.num_pages,
        pageSize: body.page_size,
        domainBits: body.domain_bits,
        epoch: { oldest: body.epoch.oldest, newest: body.epoch.newest },
        maxKeysPerQuery: isU64(body.max_keys_per_query) ? body.max_keys_per_query : 64,
        workers: isU64(body.workers) ? body.workers : undefined,
        party: typeof body.party === "string" ? body.party : undefined,
        digest: isDigest(body.digest) ? body.digest : undefined,
        signing,
        raw: body,
      };
      this.lastInfo = info;
      return info;
    });
  }

  /**
   * `GET /v1/manifests` (SIGNED §4.2: the publisher's signed epoch manifests, a JSON array, at
   * most {@link MANIFESTS_LIMIT} bytes), shape-checked, not yet verified; `[]` when the party
   * has none (404 `no_manifests`): the other party may, and a needed one missing is the caller's
   * refusal, not this party's error.
   */
  async manifests(ctx: CallContext = {}): Promise<Manifest[]> {
    return this.bounded(ctx, async (ctx) => {
      const step: Step = { phase: "manifests", what: "GET /v1/manifests" };
      const response = await this.send(`${this.api}/manifests`, { headers: { accept: "application/json" } }, ctx, step);
      if (response.status === 404) {
        const e = await this.errorFrom(response, ctx, step);
        if (e.code === "no_manifests") return [];
        throw e;
      }
      if (!response.ok) throw await this.errorFrom(response, ctx, step);
      const manifests = parseManifests(await this.json(response, MANIFESTS_LIMIT, ctx, step));
      if (!manifests) throw this.err("bad_response", "GET /v1/manifests: not the documented shape (SIGNED §4.1)", { phase: "manifests" });
      return manifests;
    });
  }

  /** Page size for the answer bound: the context's, else the last info's, else a fresh info. */
  private async pageSize(ctx: CallContext): Promise<number> {
    return ctx.pageSize ?? this.lastInfo?.pageSize ?? (await this.info(ctx)).pageSize;
  }

  /**
   * One party's half of a lookup: submits `keys` and returns the answer; a failed query throws
   * its error code. In `"inline"` mode the submit asks the party to hold its answer
   * (`Prefer: wait`, up to {@link INLINE_WAIT_SECONDS} or what is left before `ctx.deadline`):
   * answered in time, the query took one round trip. A submit answered 202 is waited for by
   * {@link result}.
   */
  async query(keys: Uint8Array[], epoch: number | undefined, ctx: CallContext = {}): Promise<PartyAnswer> {
    return this.bounded(ctx, async (ctx) => {
      const limit = answerLimit(keys.length, await this.pageSize(ctx));
      const prefer = this.wait === "inline" ? preferWait(ctx.deadline) : undefined;
      const submitted = await this.post(keys, epoch, ctx, limit, prefer);
      // Final at once: the held answer, or (in any mode) the replay of a query already finished.
      if (submitted.final !== undefined) return this.finalResult(submitted.final, submitted.id, "answer");
      return this.waitFor(submitted.id, ctx, limit);
    });
  }

  /**
   * `POST /v1/queries` with an `Idempotency-Key`, retried (same key, so never queued twice)
   * after `Retry-After` on 429/503 or when the connection fails; returns the query id (wait for
   * it with {@link result}, or use {@link query} for both).
   */
  async submit(keys: Uint8Array[], epoch: number | undefined, ctx: CallContext = {}): Promise<string> {
    return this.bounded(ctx, async (ctx) => (await this.post(keys, epoch, ctx, answerLimit(keys.length, await this.pageSize(ctx)))).id);
  }

  /** {@link submit}, sending `Prefer: <prefer>` if given; keeps a final answer (200). */
  private async post(keys: Uint8Array[], epoch: number | undefined, ctx: CallContext, limit: number, prefer?: string): Promise<Submitted> {
    const body = JSON.stringify(epoch === undefined ? { keys: keys.map(toBase64) } : { keys: keys.map(toBase64), epoch });
    const bodyBytes = new TextEncoder().encode(body).length;
    const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json", "idempotency-key": uuid4() };
    if (prefer !== undefined) headers.prefer = prefer;
    const step: Step = { phase: "submit", what: "POST /v1/queries" };
    const response = await this.send(`${this.api}/queries`, { method: "POST", headers, body, bodyBytes }, ctx, step, true);
    if (response.status !== 200 && response.status !== 202) throw await this.errorFrom(response, ctx, step);
    // 202 carries only the id and status; 200 the final result, read in the phase "answer".
    const held = response.status === 200;
    const result = await this.json(response, held ? limit : ENVELOPE_LIMIT, ctx, held ? { phase: "answer", what: step.what } : step);
    if (!isObject(result) || typeof result.id !== "string" || !QUERY_ID.test(result.id)) {
      // Checked before the id goes into any URL: `../../v1/info?x=` must never be followed.
      throw this.err("bad_response", "POST /v1/queries: the answer has no query id of 32 lowercase hex digits", { phase: "submit", status: response.status });
    }
    const final = response.status === 200 && (result.status === "done" || result.status === "failed");
    return final ? { id: result.id, final: result } : { id: result.id };
  }

  /** Waits for query `id` and returns its answer; a failed query throws its error code. */
  async result(id: string, ctx: CallContext = {}): Promise<PartyAnswer> {
    if (!QUERY_ID.test(id)) throw new PirqError("invalid_argument", "a query id is 32 lowercase hex digits");
    return this.bounded(ctx, async (ctx) => {
      // The query's key count is not known here: bound by the most the party takes in one query.
      const keys = this.lastInfo?.maxKeysPerQuery ?? (await this.info(ctx)).maxKeysPerQuery;
      return this.waitFor(id, ctx, answerLimit(keys, await this.pageSize(ctx)));
    });
  }

  private async waitFor(id: string, ctx: CallContext, limit: number): Promise<PartyAnswer> {
    if (this.wait !== "poll") {
      const answer = await this.resultBySse(id, ctx, limit);
      if (answer) return answer;
      // the stream ended without a result (gateway shutting down, proxy cut it): poll instead
    }
    return this.resultByPolling(id, ctx, limit);
  }

  private async resultByPolling(id: string, ctx: CallContext, limit: number): Promise<PartyAnswer> {
    const step: Step = { phase: "poll", what: "GET /v1/queries/{id}" };
    for (let early = 0; ; ) {
      const sent = performance.now();
      const response = await this.send(`${this.api}/queries/${id}?wait=${LONG_POLL_SECONDS}`, { headers: { accept: "application/json" } }, ctx, step);
      if (response.status === 202) {
        const retryAfter = parseRetryAfter(response.headers.get("retry-after"));
        discard(response);
        // A long-poll answered pending well before its wait (a gateway shutting down, or a
        // party that does not hold long-polls): come back after Retry-After, not at once.
        if (performance.now() - sent < (LONG_POLL_SECONDS * 1000) / 2) await this.pause(retryDelayMs(early++, retryAfter), ctx, step);
        continue;
      }
      if (response.status !== 200) throw await this.errorFrom(response, ctx, step);
      return this.finalResult(await this.json(response, limit, ctx, step), id, "poll");
    }
  }

  /** SSE over a streamed fetch; `null` when the stream ends without a `result` event. */
  private async resultBySse(id: string, ctx: CallContext, limit: number): Promise<PartyAnswer | null> {
    const step: Step = { phase: "events", what: "GET /v1/queries/{id}/events" };
    const response = await this.send(`${this.api}/queries/${id}/events`, { headers: { accept: "text/event-stream" } }, ctx, step);
    if (!response.ok) throw await this.errorFrom(response, ctx, step);
    if (!response.body || !(response.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
      discard(response);
      return null;
    }
    const reader = response.body.getReader();
    // The result is one `data:` line of the answer's JSON; a stream past that plus status
    // events and keep-alives is not the documented API.
    const parser = new SseParser(limit + 16, limit);
    const streamLimit = limit + STREAM_SLACK;
    let total = 0;
    try {
      for (;;) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await raceAbort(reader.read(), ctx.signal);
        } catch (cause) {
          if (ctx.signal?.aborted) throw this.stopped(cause, ctx, step);
          return null; // connection cut mid-stream: the caller polls
        }
        if (chunk.done) return null;
        total += chunk.value.byteLength;
        let events;
        try {
          if (total > streamLimit) throw new TooLarge(streamLimit);
          events = parser.push(chunk.value);
        } catch (e) {
          if (!(e instanceof TooLarge)) throw e;
          throw this.err("too_large", `${step.what}: event stream larger than ${e.limit} bytes (a line, an event or the whole stream)`, { phase: "events" });
        }
        for (const { event, data } of events) {
          if (event === "result") return this.finalResult(this.parseJson(data, "SSE result", step), id, "events");
          if (event === "error") {
            const body = this.parseJson(data, "SSE error", step);
            if (isObject(body) && isObject(body.error)) throw this.errorBody(body.error, step);
            throw this.err("bad_response", "SSE error event without an error body", { phase: "events" });
          }
        }
      }
    } finally {
      reader.cancel().catch(() => {});
    }
  }

  private parseJson(text: string, what: string, step: Step): unknown {
    try {
      return JSON.parse(text);
    } catch {
      throw this.err("bad_response", `${what}: not JSON`, { phase: step.phase });
    }
  }

  /** A final (`done` or `failed`) QueryResult body for query `id` → answer, or the failure as a PirqError. */
  private finalResult(body: unknown, id: string, phase: Phase): PartyAnswer {
    if (!isObject(body) || body.id !== id) throw this.err("bad_response", `the result is not for query ${id}`, { phase });
    if (body.status === "failed") {
      if (isObject(body.error)) throw this.errorBody(body.error, { phase, what: `query ${id} failed` });
      throw this.err("bad_response", `query ${id} failed without an error body`, { phase });
    }
    if (body.status !== "done" || !isU64(body.epoch) || !Array.isArray(body.pages)) {
      throw this.err("bad_response", `query ${id}: not a final answer (status, epoch or pages missing)`, { phase });
    }
    const pages = body.pages.map((p) => (typeof p === "string" ? fromBase64(p) : null));
    if (pages.some((p) => p === null)) throw this.err("bad_response", `query ${id}: a page is not padded base64`, { phase });
    if (body.digest !== undefined && !isDigest(body.digest)) {
      throw this.err("bad_response", `query ${id}: digest is not 64 lowercase hex digits`, { phase });
    }
    return { id, epoch: body.epoch, pages: pages as Uint8Array[], digest: body.digest, raw: body };
  }
}

/** Whether a wait of `ms` ends before the context's deadline (always, without one). */
function fits(ctx: CallContext, ms: number): boolean {
  return ctx.deadline === undefined || performance.now() + ms < ctx.deadline;
}

/** A deadline in ms must be a finite number > 0 (a zero deadline would fail every lookup unseen). */
export function checkTimeout(ms: number): void {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms <= 0 || ms > 2 ** 31 - 1) {
    throw new PirqError("invalid_argument", `timeoutMs must be a number of milliseconds in 1..=${2 ** 31 - 1}, not ${String(ms)}`);
  }
}
