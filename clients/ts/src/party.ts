/**
 * One party's HTTP API (docs/http-api.md): database info, query submission, and waiting for
 * the result: in the submit's own answer (`Prefer: wait`), else by server-sent events with a
 * long-poll fallback.
 *
 * Only `fetch` is used, in Node and browsers alike: SSE is read from a streamed `fetch` body
 * rather than `EventSource`, because `EventSource` cannot be aborted with a signal, hides the
 * HTTP status of a refused stream, and does not exist in Node 20.
 */

import { fromBase64, randomBytes, toBase64, toHex } from "./bytes.js";
import { PirqError } from "./errors.js";

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

/** Per call: an abort signal, and where to record the call's HTTP exchanges. */
export interface CallContext {
  signal?: AbortSignal;
  /** Every exchange of the call is appended here (the lookup's trace). */
  trace?: Exchange[];
  /**
   * When the call must be over (`performance.now()` milliseconds): a submit asks the party to
   * hold its answer (`Prefer: wait`) no longer than what is left.
   */
  deadline?: number;
}

export interface PartyOptions {
  /** "inline" (default), "sse" or "poll": see {@link WaitMode}. */
  wait?: WaitMode;
  /** How often a submit is retried after 429/503 or a refused connection (default 2). */
  retries?: number;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
}

const LONG_POLL_SECONDS = 30;

/**
 * The longest a submit asks the party to hold its answer (`Prefer: wait`, seconds): below the
 * gateway's cap of 30 s and the idle timeouts of common proxies; a query not answered by then is
 * waited for as usual. The Rust client's `INLINE_WAIT`.
 */
const INLINE_WAIT_SECONDS = 25;

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

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(done, ms);
    function done() {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }
    function onAbort() {
      clearTimeout(t);
      reject(signal!.reason);
    }
    signal?.addEventListener("abort", onAbort, { once: true });
  });
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

export class Party {
  /** "A" or "B": named in every error. */
  readonly name: string;
  /** Base URL without a trailing slash. */
  readonly url: string;
  private readonly wait: WaitMode;
  private readonly retries: number;
  private readonly fetchFn: typeof fetch;

  constructor(name: string, url: string, options: PartyOptions = {}) {
    this.name = name;
    this.url = url.replace(/\/+$/, "");
    this.wait = options.wait ?? "inline";
    this.retries = options.retries ?? 2;
    this.fetchFn = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
  }

  private err(code: string, message: string, extra: ConstructorParameters<typeof PirqError>[2] = {}): PirqError {
    return new PirqError(code, message, { party: `${this.name} (${this.url})`, ...extra });
  }

  /** fetch that turns a network failure into `party_unreachable` and records the exchange. */
  private async request(path: string, init: RequestInit & { bodyBytes?: number }, ctx: CallContext): Promise<Response> {
    // A fetch given an aborted signal rejects, but check here too: a loop of long-polls must
    // end at the deadline even with a fetch that ignores signals.
    ctx.signal?.throwIfAborted();
    let response: Response;
    try {
      response = await this.fetchFn(this.url + path, { ...init, signal: ctx.signal });
    } catch (cause) {
      if (ctx.signal?.aborted) throw ctx.signal.reason;
      throw this.err("party_unreachable", `cannot reach ${this.url}${path}: ${String((cause as Error)?.cause ?? cause)}`, { cause });
    }
    const prefer = new Headers(init.headers).get("prefer") ?? undefined;
    ctx.trace?.push({
      method: init.method ?? "GET",
      path: path.replace(/\?.*/, ""),
      requestBytes: init.bodyBytes ?? 0,
      ...(prefer === undefined ? {} : { prefer }),
      status: response.status,
    });
    return response;
  }

  /** The JSON of an answer; `bad_response` when it is not JSON. */
  private async json(response: Response, what: string): Promise<unknown> {
    const text = await response.text();
    try {
      return JSON.parse(text);
    } catch {
      throw this.err("bad_response", `${what}: HTTP ${response.status}, body is not JSON: ${text.slice(0, 80)}`, { status: response.status });
    }
  }

  /** The party's documented error body → PirqError with its code (docs/http-api.md "Errors"). */
  private async errorFrom(response: Response, what: string): Promise<PirqError> {
    let body: unknown;
    try {
      body = JSON.parse(await response.text());
    } catch {
      body = undefined;
    }
    const e = isObject(body) && isObject(body.error) ? body.error : undefined;
    if (e && typeof e.code === "string") {
      return this.errorBody(e, what, response.status);
    }
    return this.err(`http_${response.status}`, `${what}: HTTP ${response.status} without an error body`, { status: response.status });
  }

  private errorBody(e: Record<string, unknown>, what: string, status?: number): PirqError {
    const w = isObject(e.window) && isU64(e.window.oldest) && isU64(e.window.newest)
      ? { oldest: e.window.oldest, newest: e.window.newest }
      : undefined;
    return this.err(String(e.code), `${what}: ${typeof e.message === "string" ? e.message : "error"}`, {
      status,
      keyIndex: isU64(e.key_index) ? e.key_index : undefined,
      window: w,
    });
  }

  /** `GET /v1/info`. */
  async info(ctx: CallContext = {}): Promise<PartyInfo> {
    const response = await this.request("/v1/info", {}, ctx);
    if (!response.ok) throw await this.errorFrom(response, "GET /v1/info");
    const body = await this.json(response, "GET /v1/info");
    if (
      !isObject(body) || !isU64(body.num_pages) || !isU64(body.page_size) || !isU64(body.domain_bits) ||
      !isObject(body.epoch) || !isU64(body.epoch.oldest) || !isU64(body.epoch.newest)
    ) {
      throw this.err("bad_response", "GET /v1/info: not the documented shape");
    }
    return {
      numPages: body.num_pages,
      pageSize: body.page_size,
      domainBits: body.domain_bits,
      epoch: { oldest: body.epoch.oldest, newest: body.epoch.newest },
      maxKeysPerQuery: isU64(body.max_keys_per_query) ? body.max_keys_per_query : 64,
      workers: isU64(body.workers) ? body.workers : undefined,
      party: typeof body.party === "string" ? body.party : undefined,
      digest: isDigest(body.digest) ? body.digest : undefined,
      raw: body,
    };
  }

  /**
   * One party's half of a lookup: submits `keys` and returns the answer; a failed query throws
   * its error code. In `"inline"` mode the submit asks the party to hold its answer
   * (`Prefer: wait`, up to {@link INLINE_WAIT_SECONDS} or what is left before `ctx.deadline`):
   * answered in time, the query took one round trip. A submit answered 202 is waited for by
   * {@link result}.
   */
  async query(keys: Uint8Array[], epoch: number | undefined, ctx: CallContext = {}): Promise<PartyAnswer> {
    const prefer = this.wait === "inline" ? preferWait(ctx.deadline) : undefined;
    const submitted = await this.post(keys, epoch, ctx, prefer);
    // Final at once: the held answer, or (in any mode) the replay of a query already finished.
    if (submitted.final !== undefined) return this.finalResult(submitted.final);
    return this.result(submitted.id, ctx);
  }

  /**
   * `POST /v1/queries` with an `Idempotency-Key`, retried (same key, so never queued twice)
   * after `Retry-After` on 429/503 or when the connection fails; returns the query id (wait for
   * it with {@link result}, or use {@link query} for both).
   */
  async submit(keys: Uint8Array[], epoch: number | undefined, ctx: CallContext = {}): Promise<string> {
    return (await this.post(keys, epoch, ctx)).id;
  }

  /** {@link submit}, sending `Prefer: <prefer>` if given; keeps a final answer (200). */
  private async post(keys: Uint8Array[], epoch: number | undefined, ctx: CallContext, prefer?: string): Promise<Submitted> {
    const body = JSON.stringify(epoch === undefined ? { keys: keys.map(toBase64) } : { keys: keys.map(toBase64), epoch });
    const bodyBytes = new TextEncoder().encode(body).length;
    const idempotencyKey = uuid4();
    const headers: Record<string, string> = { "content-type": "application/json", "idempotency-key": idempotencyKey };
    if (prefer !== undefined) headers.prefer = prefer;
    for (let attempt = 0; ; attempt++) {
      let response: Response;
      try {
        response = await this.request("/v1/queries", {
          method: "POST",
          headers,
          body,
          bodyBytes,
        }, ctx);
      } catch (e) {
        if (e instanceof PirqError && e.code === "party_unreachable" && attempt < this.retries) {
          await sleep(250 * (attempt + 1), ctx.signal);
          continue;
        }
        throw e;
      }
      if (response.status === 200 || response.status === 202) {
        const result = await this.json(response, "POST /v1/queries");
        if (!isObject(result) || typeof result.id !== "string" || !/^[0-9a-f]{32}$/.test(result.id)) {
          throw this.err("bad_response", "POST /v1/queries: no query id in the answer");
        }
        const final = response.status === 200 && (result.status === "done" || result.status === "failed");
        return final ? { id: result.id, final: result } : { id: result.id };
      }
      if ((response.status === 429 || response.status === 503) && attempt < this.retries) {
        const after = Number(response.headers.get("retry-after") ?? "1");
        await response.body?.cancel();
        await sleep(Math.min(Number.isFinite(after) ? after : 1, 5) * 1000, ctx.signal);
        continue;
      }
      throw await this.errorFrom(response, "POST /v1/queries");
    }
  }

  /** Waits for query `id` and returns its answer; a failed query throws its error code. */
  async result(id: string, ctx: CallContext = {}): Promise<PartyAnswer> {
    if (this.wait !== "poll") {
      const answer = await this.resultBySse(id, ctx);
      if (answer) return answer;
      // the stream ended without a result (gateway shutting down, proxy cut it): poll instead
    }
    return this.resultByPolling(id, ctx);
  }

  private async resultByPolling(id: string, ctx: CallContext): Promise<PartyAnswer> {
    for (;;) {
      const response = await this.request(`/v1/queries/${id}?wait=${LONG_POLL_SECONDS}`, { headers: { accept: "application/json" } }, ctx);
      if (response.status === 202) {
        await response.body?.cancel();
        continue;
      }
      if (response.status !== 200) throw await this.errorFrom(response, `GET /v1/queries/${id}`);
      return this.finalResult(await this.json(response, `GET /v1/queries/${id}`));
    }
  }

  /** SSE over a streamed fetch; `null` when the stream ends without a `result` event. */
  private async resultBySse(id: string, ctx: CallContext): Promise<PartyAnswer | null> {
    const path = `/v1/queries/${id}/events`;
    const response = await this.request(path, { headers: { accept: "text/event-stream" } }, ctx);
    if (!response.ok) throw await this.errorFrom(response, `GET ${path}`);
    if (!response.body || !(response.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
      await response.body?.cancel();
      return null;
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let event = "message";
    let data: string[] = [];
    try {
      for (;;) {
        let chunk: ReadableStreamReadResult<string>;
        try {
          chunk = await reader.read();
        } catch (cause) {
          if (ctx.signal?.aborted) throw ctx.signal.reason;
          return null; // connection cut mid-stream: the caller polls
        }
        if (chunk.done) return null;
        buffer += chunk.value;
        // SSE framing (WHATWG HTML §9.2.6): lines end in \n, \r\n or \r; a blank line ends an event.
        let nl: number;
        while ((nl = buffer.search(/\r\n|\r|\n/)) >= 0) {
          if (buffer[nl] === "\r" && nl + 1 === buffer.length) break; // maybe a \r\n split across chunks
          const line = buffer.slice(0, nl);
          buffer = buffer.slice(nl + (buffer.startsWith("\r\n", nl) ? 2 : 1));
          if (line === "") {
            if (data.length > 0) {
              const payload = data.join("\n");
              if (event === "result") return this.finalResult(this.parseJson(payload, "SSE result"));
              if (event === "error") {
                const body = this.parseJson(payload, "SSE error");
                if (isObject(body) && isObject(body.error) && typeof body.error.code === "string") {
                  throw this.errorBody(body.error, `GET ${path}`);
                }
                throw this.err("bad_response", "SSE error event without an error body");
              }
            }
            event = "message";
            data = [];
          } else if (line.startsWith(":")) {
            // keep-alive comment
          } else {
            const colon = line.indexOf(":");
            const field = colon < 0 ? line : line.slice(0, colon);
            let value = colon < 0 ? "" : line.slice(colon + 1);
            if (value.startsWith(" ")) value = value.slice(1);
            if (field === "event") event = value;
            else if (field === "data") data.push(value);
          }
        }
      }
    } finally {
      reader.cancel().catch(() => {});
    }
  }

  private parseJson(text: string, what: string): unknown {
    try {
      return JSON.parse(text);
    } catch {
      throw this.err("bad_response", `${what}: not JSON`);
    }
  }

  /** A final (`done` or `failed`) QueryResult body → answer, or the failure as a PirqError. */
  private finalResult(body: unknown): PartyAnswer {
    if (!isObject(body) || typeof body.id !== "string") throw this.err("bad_response", "result without an id");
    if (body.status === "failed") {
      if (isObject(body.error) && typeof body.error.code === "string") throw this.errorBody(body.error, `query ${body.id} failed`);
      throw this.err("bad_response", `query ${body.id} failed without an error body`);
    }
    if (body.status !== "done" || !isU64(body.epoch) || !Array.isArray(body.pages)) {
      throw this.err("bad_response", `query ${body.id}: status ${String(body.status)} is not a final answer`);
    }
    const pages = body.pages.map((p) => (typeof p === "string" ? fromBase64(p) : null));
    if (pages.some((p) => p === null)) throw this.err("bad_response", `query ${body.id}: a page is not padded base64`);
    if (body.digest !== undefined && !isDigest(body.digest)) {
      throw this.err("bad_response", `query ${body.id}: digest is not 64 lowercase hex digits`);
    }
    return { id: body.id, epoch: body.epoch, pages: pages as Uint8Array[], digest: body.digest, raw: body };
  }
}
