/**
 * The two-party client: agree on a database and an epoch, send one DPF key of each pair to
 * each party, XOR the two answers (SPEC §0, §3).
 */

import { xorBytes } from "./bytes.js";
import { generateKeys } from "./dpf.js";
import { PirqError } from "./errors.js";
import { checkKey, findInPage, KvLayout, kvCandidates, kvTag, parseKvLayout, sameLayout } from "./kv.js";
import { CallContext, Exchange, Party, PartyInfo, PartyOptions } from "./party.js";

export interface ConnectOptions extends PartyOptions {
  /** Longest a lookup may take, in milliseconds, before it fails with `timeout` (default 60 000). */
  timeoutMs?: number;
}

/** What both parties serve, checked to agree. */
export interface DatabaseInfo {
  numPages: number;
  pageSize: number;
  domainBits: number;
  /** Epochs both parties answer: `oldest..=newest` of the overlap of their windows. */
  epoch: { oldest: number; newest: number };
  /** Keys per query both accept. */
  maxKeysPerQuery: number;
  /** The key-value layout both advertise (KV §5); absent for a plain page database. */
  kv?: KvLayout;
  /** Each party's own `/v1/info`. */
  parties: [PartyInfo, PartyInfo];
}

/** What one lookup cost and what each party saw of it. */
export interface LookupTrace {
  /** The epoch both parties answered (pinned by the client). */
  epoch: number;
  /** Per party (A, B): the HTTP exchanges of this lookup; the same shape for both by design. */
  exchanges: [Exchange[], Exchange[]];
  /** DPF keys sent to each party. */
  dpfKeys: number;
  /** Milliseconds from the first request to the combined answer. */
  elapsedMs: number;
}

/** Values found by one key-value lookup. */
export interface GetResult extends LookupTrace {
  /** `values[i]` is the value of `keys[i]`, or null when the database has no such key. */
  values: (Uint8Array | null)[];
}

/** Pages fetched by one lookup, with what each party was sent. */
export interface PagesResult extends LookupTrace {
  /** `pages[i]` is page `indices[i]`. */
  pages: Uint8Array[];
}

export interface LookupOptions {
  /** Pin this epoch instead of the newest both parties serve. */
  epoch?: number;
  /** Abort the lookup. */
  signal?: AbortSignal;
}

export class Pirq {
  readonly a: Party;
  readonly b: Party;
  /** The database as of the last agreement (refreshed by every lookup). */
  info: DatabaseInfo;
  private readonly timeoutMs: number;

  /** Use {@link connect}. */
  constructor(a: Party, b: Party, info: DatabaseInfo, timeoutMs: number) {
    this.a = a;
    this.b = b;
    this.info = info;
    this.timeoutMs = timeoutMs;
  }

  /** Reads both parties' `/v1/info` and checks that they serve the same database. */
  async agree(signal?: AbortSignal): Promise<DatabaseInfo> {
    this.info = await agree(this.a, this.b, { signal }, { signal });
    return this.info;
  }

  /** Page `index`, fetched privately: neither party learns `index`. */
  async getPage(index: number, options: LookupOptions = {}): Promise<Uint8Array> {
    return (await this.getPages([index], options)).pages[0];
  }

  /**
   * Several pages in one lookup (one query per party, split into chunks of the parties' key
   * limit), all at one epoch: the newest both parties serve, unless `options.epoch` pins one.
   */
  async getPages(indices: number[], options: LookupOptions = {}): Promise<PagesResult> {
    if (indices.length === 0) throw new PirqError("invalid_argument", "no page indices");
    return this.lookup(options, 1, async (info) => {
      for (const i of indices) {
        if (!Number.isSafeInteger(i) || i < 0 || i >= info.numPages) {
          throw new PirqError("invalid_argument", `page index ${i} outside 0..${info.numPages}`);
        }
      }
      return indices;
    });
  }

  /**
   * The value of `key` in a key-value database (KV §6), or `null` when it holds no such key.
   * Either way each party is sent `choices` DPF keys at one epoch: the same shape of query.
   */
  async get(key: Uint8Array, options: LookupOptions = {}): Promise<Uint8Array | null> {
    return (await this.getMany([key], options)).values[0];
  }

  /** Several keys in one lookup: `choices` DPF keys per key, whole lookups per query (KV §6). */
  async getMany(keys: Uint8Array[], options: LookupOptions = {}): Promise<GetResult> {
    if (keys.length === 0) throw new PirqError("invalid_argument", "no keys");
    let tags: Uint8Array[] = [];
    let layout: KvLayout | undefined;
    const result = await this.lookup(options, () => layout!.choices, async (info) => {
      if (!info.kv) throw new PirqError("not_kv", "the parties serve a page database, not a key-value database (no kv in /v1/info)");
      layout = info.kv;
      for (const key of keys) checkKey(layout, key);
      tags = await Promise.all(keys.map((k) => kvTag(layout!.seed, k)));
      const candidates = await Promise.all(tags.map((t) => kvCandidates(layout!.seed, t, layout!.choices, info.numPages)));
      return candidates.flat();
    });
    const d = layout!.choices;
    const values = tags.map((tag, k) => {
      for (let c = 0; c < d; c++) {
        const value = findInPage(layout!, result.pages[k * d + c], tag);
        if (value) return value;
      }
      return null;
    });
    const { pages: _pages, ...trace } = result;
    return { ...trace, values };
  }

  /**
   * One lookup: agree on the database and epoch, let `plan` name the pages, fetch them in
   * chunks of whole groups (`group` DPF keys per lookup, KV §6) under the key limit.
   */
  private async lookup(
    options: LookupOptions,
    group: number | (() => number),
    plan: (info: DatabaseInfo) => Promise<number[]>,
  ): Promise<PagesResult> {
    return this.withDeadline(options.signal, async (signal, deadline) => {
      const ctxA: CallContext = { signal, trace: [], deadline };
      const ctxB: CallContext = { signal, trace: [], deadline };
      const started = performance.now();
      const info = await agree(this.a, this.b, ctxA, ctxB);
      this.info = info;
      const indices = await plan(info);
      const size = typeof group === "number" ? group : group();
      const perQuery = Math.floor(info.maxKeysPerQuery / size) * size;
      if (perQuery === 0) {
        throw new PirqError("invalid_argument", `the parties take ${info.maxKeysPerQuery} keys per query, one lookup needs ${size}`);
      }
      const epoch = options.epoch ?? info.epoch.newest;
      const pages: Uint8Array[] = [];
      for (let from = 0; from < indices.length; from += perQuery) {
        pages.push(...(await this.queryChunk(indices.slice(from, from + perQuery), epoch, info, ctxA, ctxB)));
      }
      return {
        epoch,
        pages,
        exchanges: [ctxA.trace!, ctxB.trace!],
        elapsedMs: performance.now() - started,
        dpfKeys: indices.length,
      };
    });
  }

  /** One query to each party for `indices` (at most the key limit), combined. */
  private async queryChunk(indices: number[], epoch: number, info: DatabaseInfo, ctxA: CallContext, ctxB: CallContext): Promise<Uint8Array[]> {
    const keysA: Uint8Array[] = [];
    const keysB: Uint8Array[] = [];
    for (const i of indices) {
      const [k0, k1] = generateKeys(info.domainBits, i);
      keysA.push(k0);
      keysB.push(k1);
    }
    const [answerA, answerB] = await Promise.all([this.a.query(keysA, epoch, ctxA), this.b.query(keysB, epoch, ctxB)]);
    for (const [party, answer] of [[this.a, answerA], [this.b, answerB]] as const) {
      if (answer.epoch !== epoch) {
        throw new PirqError("epoch_mismatch", `answered epoch ${answer.epoch}, ${epoch} was pinned`, { party: party.name });
      }
      if (answer.pages.length !== indices.length || answer.pages.some((p) => p.length !== info.pageSize)) {
        throw new PirqError("bad_response", `answer has ${answer.pages.length} pages, ${indices.length} of ${info.pageSize} B expected`, { party: party.name });
      }
    }
    // SPEC §2.1, §4: answers computed from different contents XOR into a wrong page that looks
    // like any other, so combine only answers stamped with the same database digest; an answer
    // without one cannot be checked, and is refused like a mismatch (never a page).
    for (const [party, answer] of [[this.a, answerA], [this.b, answerB]] as const) {
      if (!answer.digest) {
        throw new PirqError("bad_response", "done result without a database digest (SPEC §4): cannot check that both answers come from the same contents", { party: `${party.name} (${party.url})` });
      }
    }
    if (answerA.digest !== answerB.digest) {
      throw new PirqError(
        "parties_disagree",
        `the parties answered from different databases at epoch ${epoch} (digest ${answerA.digest!.slice(0, 12)} vs ${answerB.digest!.slice(0, 12)})`,
      );
    }
    return answerA.pages.map((page, i) => xorBytes(page, answerB.pages[i]));
  }

  /**
   * Runs `body` under the client's time limit and the caller's signal (`deadline`: when the
   * limit runs out, in `performance.now()` milliseconds); a lookup that fails aborts whatever
   * is still open at the other party.
   */
  private async withDeadline<T>(outer: AbortSignal | undefined, body: (signal: AbortSignal, deadline: number) => Promise<T>): Promise<T> {
    const deadline = performance.now() + this.timeoutMs;
    const controller = new AbortController();
    const timer = setTimeout(
      () => controller.abort(new PirqError("timeout", `lookup still pending after ${this.timeoutMs} ms`)),
      this.timeoutMs,
    );
    const onOuter = () => controller.abort(outer!.reason);
    outer?.addEventListener("abort", onOuter, { once: true });
    try {
      return await body(controller.signal, deadline);
    } catch (e) {
      if (controller.signal.aborted && !(e instanceof PirqError)) throw controller.signal.reason;
      throw e;
    } finally {
      clearTimeout(timer);
      outer?.removeEventListener("abort", onOuter);
      controller.abort(); // ends any stream still open (e.g. the other party's SSE)
    }
  }
}

/** Both parties' info, checked to describe the same database, with their common epoch window. */
export async function agree(a: Party, b: Party, ctxA: CallContext = {}, ctxB: CallContext = {}): Promise<DatabaseInfo> {
  const [ia, ib] = await Promise.all([a.info(ctxA), b.info(ctxB)]);
  for (const [field, name] of [["numPages", "num_pages"], ["pageSize", "page_size"], ["domainBits", "domain_bits"]] as const) {
    if (ia[field] !== ib[field]) {
      throw new PirqError("parties_disagree", `party A serves ${name} = ${ia[field]}, party B ${ib[field]}`);
    }
  }
  for (const [party, info] of [[a, ia], [b, ib]] as const) {
    if (info.workers === 0) {
      // Its queries would wait for a worker; say so now instead of at the timeout.
      throw new PirqError("no_workers", "has no live workers", { party: `${party.name} (${party.url})` });
    }
  }
  if (ia.party !== undefined && ia.party === ib.party) {
    // One party behind both URLs would see both halves of every key pair: no privacy at all.
    throw new PirqError("same_party", `both URLs are the same party (identity ${ia.party}): ${a.url} and ${b.url}`);
  }
  if (ia.digest && ib.digest && ia.epoch.newest === ib.epoch.newest && ia.digest !== ib.digest) {
    throw new PirqError(
      "parties_disagree",
      `the parties serve different databases at epoch ${ia.epoch.newest} (digest ${ia.digest.slice(0, 12)} vs ${ib.digest.slice(0, 12)})`,
    );
  }
  let kv: KvLayout | undefined;
  if (ia.raw.kv !== undefined || ib.raw.kv !== undefined) {
    if (ia.raw.kv === undefined || ib.raw.kv === undefined) {
      throw new PirqError("parties_disagree", `only party ${ia.raw.kv === undefined ? "B" : "A"} serves a key-value database`);
    }
    const la = parseKvLayout(ia.raw.kv, ia.pageSize, ia.numPages);
    const lb = parseKvLayout(ib.raw.kv, ib.pageSize, ib.numPages);
    if (!sameLayout(la, lb)) throw new PirqError("parties_disagree", "the parties advertise different key-value layouts");
    kv = la;
  }
  const oldest = Math.max(ia.epoch.oldest, ib.epoch.oldest);
  const newest = Math.min(ia.epoch.newest, ib.epoch.newest);
  if (oldest > newest) {
    throw new PirqError(
      "epoch_mismatch",
      `no epoch served by both parties: A ${ia.epoch.oldest}..=${ia.epoch.newest}, B ${ib.epoch.oldest}..=${ib.epoch.newest}`,
    );
  }
  return {
    numPages: ia.numPages,
    pageSize: ia.pageSize,
    domainBits: ia.domainBits,
    epoch: { oldest, newest },
    maxKeysPerQuery: Math.max(1, Math.min(ia.maxKeysPerQuery, ib.maxKeysPerQuery)),
    kv,
    parties: [ia, ib],
  };
}

/**
 * Connects to two parties (base URLs of their gateways): reads both `/v1/info` and checks that
 * they serve the same database. Fails with `party_unreachable` (naming the party) when one is
 * down, `parties_disagree` when they serve different databases.
 */
export async function connect(a: string, b: string, options: ConnectOptions = {}): Promise<Pirq> {
  const partyA = new Party("A", a, options);
  const partyB = new Party("B", b, options);
  const timeoutMs = options.timeoutMs ?? 60_000;
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new PirqError("timeout", `no answer to /v1/info after ${timeoutMs} ms`)), timeoutMs);
  let info: DatabaseInfo;
  try {
    info = await agree(partyA, partyB, { signal: controller.signal }, { signal: controller.signal });
  } finally {
    clearTimeout(timer);
  }
  return new Pirq(partyA, partyB, info, timeoutMs);
}
