/**
 * Reading what a party sends, bounded in bytes and in time. A party is run by a stranger: its
 * body may never end, arrive a byte at a time, or be gigabytes long. Every body is read as a
 * stream with a running byte count (never `response.text()`, which holds whatever comes), and
 * every read is raced against the lookup's abort signal, so the deadline holds even with a
 * caller-supplied `fetch` that ignores signals.
 */

/** The most `GET /v1/info` may take (issue 24): it is a few hundred bytes, a sharded party's a few KiB. */
export const INFO_LIMIT = 64 * 1024;

/**
 * The most `GET /v1/manifests` may take (SIGNED §4.2): one manifest per epoch, ~250 bytes and
 * ~8 per replaced page; 32 MiB holds millions of replaced pages.
 */
export const MANIFESTS_LIMIT = 32 * 1024 * 1024;

/**
 * Room for everything in an answer besides its pages: id, status, epoch, digest, an error with
 * its message, JSON punctuation. Error answers and 202 bodies get only this much.
 */
export const ENVELOPE_LIMIT = 64 * 1024;

/**
 * The most a final answer to `keys` DPF keys over pages of `pageSize` bytes may take in JSON
 * (SPEC §4.1): each page as padded base64 plus 4 bytes (quotes, comma, room), plus the
 * {@link ENVELOPE_LIMIT}.
 */
export function answerLimit(keys: number, pageSize: number): number {
  return keys * (4 * Math.ceil(pageSize / 3) + 4) + ENVELOPE_LIMIT;
}

/**
 * Bytes an event stream may carry beyond its one result: status events and keep-alive comments
 * (a few dozen bytes each, seconds apart). A stream past its result's bound plus this is not
 * the documented API.
 */
export const STREAM_SLACK = 1024 * 1024;

/** Thrown by the readers below; the party layer turns it into a `too_large` PirqError. */
export class TooLarge extends Error {
  constructor(readonly limit: number, readonly declared?: number) {
    super(`more than ${limit} bytes`);
  }
}

/** `promise`, or the signal's reason as soon as it aborts (whichever comes first). */
export function raceAbort<T>(promise: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return promise;
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}

/** Drops a body without reading it (a refusal we retry, a stream we leave). Never waits on the party. */
export function discard(response: Response): void {
  response.body?.cancel().catch(() => {});
}

/**
 * The whole body of `response`, at most `limit` bytes: refused at once when its `Content-Length`
 * says more, else read chunk by chunk and cut off (the connection dropped) at the first byte
 * past the limit. Throws {@link TooLarge}, the signal's reason, or the stream's error.
 */
export async function readBounded(response: Response, limit: number, signal?: AbortSignal): Promise<Uint8Array> {
  const declared = Number(response.headers.get("content-length") ?? NaN);
  if (Number.isFinite(declared) && declared > limit) {
    discard(response);
    throw new TooLarge(limit, declared);
  }
  if (!response.body) return new Uint8Array(0);
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    for (;;) {
      const { done, value } = await raceAbort(reader.read(), signal);
      if (done) break;
      total += value.byteLength;
      if (total > limit) throw new TooLarge(limit);
      chunks.push(value);
    }
  } catch (e) {
    reader.cancel().catch(() => {});
    throw e;
  }
  if (chunks.length === 1) return chunks[0];
  const out = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}

/** One server-sent event (WHATWG HTML §9.2.6): its type and its data lines joined by "\n". */
export interface SseEvent {
  event: string;
  data: string;
}

/**
 * An event-stream parser over bytes, bounded: a line longer than `lineLimit` bytes or an event
 * whose data lines add up to more than `eventLimit` bytes throws {@link TooLarge} at the first
 * byte past the bound, whatever the chunking (lines end in \n, \r\n or \r, even split across
 * chunks). Only whole lines are decoded (UTF-8, with replacement, as the standard says).
 */
export class SseParser {
  private pieces: Uint8Array[] = [];
  private lineBytes = 0;
  private afterCr = false;
  private first = true;
  private event = "";
  private data: string[] = [];
  private dataBytes = 0;
  private readonly decoder = new TextDecoder();

  constructor(private readonly lineLimit: number, private readonly eventLimit: number) {}

  /** Feeds one chunk; returns the events it completed, in order. */
  push(chunk: Uint8Array): SseEvent[] {
    const events: SseEvent[] = [];
    let start = 0;
    for (let i = 0; i < chunk.length; i++) {
      const b = chunk[i];
      if (b !== 0x0a && b !== 0x0d) continue;
      if (b === 0x0a && this.afterCr && i === start && this.lineBytes === 0 && this.pieces.length === 0) {
        // the \n of a \r\n whose \r ended the previous line
        this.afterCr = false;
        start = i + 1;
        continue;
      }
      if (i > start) this.take(chunk.subarray(start, i));
      this.endLine(events);
      this.afterCr = b === 0x0d;
      start = i + 1;
    }
    if (start < chunk.length) {
      this.take(chunk.subarray(start));
      this.afterCr = false;
    }
    return events;
  }

  /** A blank line ends an event: emit it if it has data, and start the next. */
  private dispatch(events: SseEvent[]): void {
    if (this.data.length > 0) events.push({ event: this.event || "message", data: this.data.join("\n") });
    this.event = "";
    this.data = [];
    this.dataBytes = 0;
  }

  private take(bytes: Uint8Array): void {
    if (bytes.length === 0) return;
    this.lineBytes += bytes.length;
    if (this.lineBytes > this.lineLimit) throw new TooLarge(this.lineLimit);
    this.pieces.push(bytes);
  }

  private endLine(events: SseEvent[]): void {
    if (this.lineBytes === 0) {
      // A blank line (the common case, and all of a flood of newlines): dispatch, no decoding.
      this.first = false;
      this.dispatch(events);
      return;
    }
    let bytes: Uint8Array;
    if (this.pieces.length === 1) bytes = this.pieces[0];
    else {
      bytes = new Uint8Array(this.lineBytes);
      let at = 0;
      for (const p of this.pieces) {
        bytes.set(p, at);
        at += p.length;
      }
    }
    let line = this.decoder.decode(bytes);
    this.pieces = [];
    this.lineBytes = 0;
    if (this.first) {
      this.first = false;
      if (line.startsWith("\ufeff")) line = line.slice(1);
    }
    if (line === "") return this.dispatch(events); // (a lone BOM)
    if (line.startsWith(":")) return; // a comment: keep-alive
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") {
      this.dataBytes += bytes.length + 1;
      if (this.dataBytes > this.eventLimit) throw new TooLarge(this.eventLimit);
      this.data.push(value);
    }
  }
}
