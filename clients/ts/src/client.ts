/**
 * The two-party client: agree on a database and an epoch, send one DPF key of each pair to
 * each party, XOR the two answers (SPEC §0, §3).
 */

import { fromHex, xorBytes } from "./bytes.js";
import { generateKeys } from "./dpf.js";
import { PirqError } from "./errors.js";
import { checkKey, decodeValue, findInPage, keyBytes, KvLayout, kvCandidates, kvTag, parseKvLayout, sameLayout, ValueKind } from "./kv.js";
import type { KeyEncoding, ValueEncoding } from "./kv.js";
import { CallContext, checkTimeout, Exchange, Party, PartyAnswer, PartyInfo, PartyOptions, Signing } from "./party.js";
import { checkManifest, checkPage, ed25519Verifier, freshness, Manifest, parsePublisherKey, SignatureVerifier } from "./signed.js";

/** Everything {@link connect} takes besides the two URLs. */
export interface ConnectOptions extends Omit<PartyOptions, "token"> {
  /**
   * Longest a lookup (and `connect` itself) may take, in milliseconds, from its first request to
   * its answer — every connection, body read, retry wait and event stream included — before it
   * fails with `timeout` naming the party and phase that were still open (default 60 000).
   */
  timeoutMs?: number;
  /** Bearer token for party A (`Authorization: Bearer …`), for parties that meter access. */
  tokenA?: string;
  /** Bearer token for party B: the parties are different operators, so each has its own. */
  tokenB?: string;
  /**
   * The publisher's Ed25519 public key (the text of its key file, 64 hex digits, or 32 bytes):
   * every page a lookup retrieves is checked against it before anything is returned (SPEC §2.4),
   * so a party that alters its answer is caught (`bad_signature`). A database not signed
   * (`not_signed`), or signed by another key (`wrong_publisher`), is refused at `connect`.
   */
  publisherKey?: string | Uint8Array;
  /**
   * With `publisherKey`: refuse answers at an epoch below this one (`stale_epoch`), as if this
   * client had already seen it signed — the newest epoch a previous session saw
   * ({@link Pirq.newestSignedEpoch}), or one learned from the publisher directly (SIGNED §4.4).
   */
  minEpoch?: number;
  /**
   * Where the client says, once, that a signed database's answers are not being verified
   * because no `publisherKey` was given (default: `console.warn`).
   */
  warn?: (message: string) => void;
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
  /** The signing both advertise (SPEC §2.4); absent for unsigned pages. */
  signing?: Signing;
  /** Each party's own `/v1/info`. */
  parties: [PartyInfo, PartyInfo];
}

/** What one lookup cost and what each party saw of it. */
export interface LookupTrace {
  /** The epoch both parties answered. */
  epoch: number;
  /** The database digest (SPEC §2.1) both answers carried: the contents they were computed from. */
  digest: string;
  /** Per party (A, B): the HTTP exchanges of this lookup. */
  exchanges: [Exchange[], Exchange[]];
  /** DPF keys sent to each party. */
  dpfKeys: number;
  /** Milliseconds from the first request to the combined answer. */
  elapsedMs: number;
  /** Whether every retrieved page was checked against the pinned publisher key (`publisherKey`). */
  verified: boolean;
}

/** Values found by one key-value lookup. */
export interface GetResult extends LookupTrace {
  /** What the table stores: fixed-size values, variable-size values, or nothing (a set). */
  valueKind: ValueKind;
  /** `values[i]` is the value of `keys[i]` (empty for a set's present key), or null when the database has no such key. */
  values: (Uint8Array | null)[];
  /** How the table's keys are written (a string key was read this way); null: not recorded (hex). */
  keyEncoding: KeyEncoding | null;
  /** How the values were given ({@link Pirq.getValue} decodes them so); null: not recorded (bytes). */
  valueEncoding: ValueEncoding | null;
}

/** Pages fetched by one lookup, with what each party was sent. */
export interface PagesResult extends LookupTrace {
  /**
   * `pages[i]` is page `indices[i]`: its usable bytes (SPEC §2.5), which are all `page_size`
   * bytes of an unsigned database, and all but the signature tail of a signed one.
   */
  pages: Uint8Array[];
  /**
   * With a `publisherKey`: `changedEpochs[i]` is the epoch at which page `indices[i]` last
   * changed, as its verified signature tail says.
   */
  changedEpochs?: number[];
}

export interface LookupOptions {
  /** Pin this epoch instead of the newest both parties serve. */
  epoch?: number;
  /** Abort the lookup (its error is then the signal's reason). */
  signal?: AbortSignal;
}

/** What a verifying client knows of one signed database's history (SIGNED §4). */
interface SignedHistory {
  /** Verified manifests by epoch. */
  manifests: Map<number, Manifest>;
  /** The newest signed epoch seen: answers at an older one are refused. */
  newest: number;
  /** The answered epoch the parties' manifests were last read for, and when (ms since the epoch). */
  read?: { epoch: number; at: number };
}

/**
 * How soon the manifests are read again for the same answered epoch while its manifest is still
 * missing (an operator installs the file just after the update), in milliseconds.
 */
const MANIFEST_REREAD_MS = 10_000;

/** A party's combined answer to one chunk of keys. */
interface Combined {
  epoch: number;
  digest: string;
  /** Whole pages, signature tails included. */
  pages: Uint8Array[];
  /** Verified pages' `changed_epoch`s. */
  changedEpochs?: number[];
}

export class Pirq {
  readonly a: Party;
  readonly b: Party;
  /**
   * The database as of the last agreement: read by {@link connect}, and again by the first
   * lookup after an answer showed a newer epoch or another digest, or after a lookup failed.
   */
  info: DatabaseInfo;
  private readonly timeoutMs: number;
  /** The pinned publisher's key, when the caller gave one: every retrieved page is checked against it. */
  private readonly verifier?: SignatureVerifier;
  /** The oldest epoch a verified answer may be at (`minEpoch`), before anything is seen. */
  private readonly minEpoch: number;
  /** Per database identity: its verified manifests and the newest signed epoch seen. */
  private readonly histories = new Map<string, SignedHistory>();
  /** Set when `info` may be out of date: the next lookup reads both `/v1/info` first. */
  private stale = false;

  /** Use {@link connect}. */
  constructor(a: Party, b: Party, info: DatabaseInfo, timeoutMs: number, verifier?: SignatureVerifier, minEpoch = 0) {
    checkTimeout(timeoutMs);
    this.minEpoch = minEpoch;
    this.a = a;
    this.b = b;
    this.info = info;
    this.timeoutMs = timeoutMs;
    this.verifier = verifier;
  }

  /** Whether every page is checked against a pinned publisher key (`publisherKey`). */
  get verifying(): boolean {
    return this.verifier !== undefined;
  }

  /** How signatures are checked: the platform's WebCrypto Ed25519, or the `@noble/curves` fallback; undefined without `publisherKey`. */
  get verifierBackend(): "webcrypto" | "noble" | undefined {
    return this.verifier?.backend;
  }

  /** Reads both parties' `/v1/info` again (under the deadline) and checks that they serve the same database. */
  async agree(signal?: AbortSignal): Promise<DatabaseInfo> {
    return withDeadline(this.timeoutMs, signal, async (ctxA, ctxB) => {
      const info = await agree(this.a, this.b, ctxA, ctxB, this.verifier?.publicKey);
      await this.checkWindows(info, ctxA, ctxB);
      this.info = info;
      this.stale = false;
      return this.info;
    });
  }

  /**
   * With a pinned key and a signed database, whenever the parties' info is read (at any epoch,
   * epoch 0 included): both parties' manifests are read, and a party whose newest epoch is older
   * than the publisher's signed manifests (or `minEpoch`) show exists is refused as stale, by
   * name (SIGNED §4.4): otherwise one party claiming an old window pins a fresh client to it.
   * @internal called by {@link connect} too.
   */
  async checkWindows(info: DatabaseInfo, ctxA: CallContext, ctxB: CallContext): Promise<void> {
    if (!this.verifier || !info.signing) return;
    const history = this.historyOf(info.signing.dbId);
    await this.readManifests(history, fromHex(info.signing.dbId), ctxA, ctxB);
    for (const [party, raw] of [[this.a, info.parties[0]], [this.b, info.parties[1]]] as const) {
      if (raw.epoch.newest < history.newest) {
        throw new PirqError(
          "stale_party",
          `says its newest epoch is ${raw.epoch.newest}, but the publisher's signatures show epoch ${history.newest} exists: a stale or rolled-back party (or one the epoch was not pushed to yet); nothing was sent`,
          { party: `${party.name} (${party.url})` },
        );
      }
    }
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
    if (!Array.isArray(indices) || indices.length === 0) throw new PirqError("invalid_argument", "no page indices");
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
   * The value of `key` in a key-value database (KV §6), or `null` when it holds no such key (a
   * set's present key has the empty value). Either way each party is sent `choices` DPF keys at
   * one epoch: the same shape of query.
   */
  async get(key: Uint8Array | string, options: LookupOptions = {}): Promise<Uint8Array | null> {
    return (await this.getMany([key], options)).values[0];
  }

  /**
   * The value of `key` the way it was given to the builder (the table records it, KV §2): a
   * string for text values, the parsed value for JSON ones, bytes otherwise; `true` for a set's
   * present key; null when absent. A string key is read the way the table's keys are written
   * (text unless the table records hex or base64). The same query as {@link get}.
   */
  async getValue(key: Uint8Array | string, options: LookupOptions = {}): Promise<unknown> {
    let layout: KvLayout | undefined;
    const result = await this.getMany([key], options, (l) => (layout = l));
    const value = result.values[0];
    if (value === null) return null;
    if (result.valueKind === "set") return true;
    try {
      return decodeValue(layout!, value);
    } catch (e) {
      throw new PirqError("invalid_response", `the value is not the ${String(result.valueEncoding)} the table records: ${String(e)}`);
    }
  }

  /**
   * Whether the key-value database holds `key` (any kind; for a set, the only question there
   * is). The same query as {@link get}: neither party learns the key or the answer.
   */
  async has(key: Uint8Array | string, options: LookupOptions = {}): Promise<boolean> {
    return (await this.getMany([key], options)).values[0] !== null;
  }

  /**
   * Several keys in one lookup: `choices` DPF keys per key, all in one query per party (split
   * into several only where a party's key limit says so, never splitting one key's group, KV §6).
   */
  async getMany(keys: (Uint8Array | string)[], options: LookupOptions = {}, seen?: (layout: KvLayout) => void): Promise<GetResult> {
    if (!Array.isArray(keys) || keys.length === 0) throw new PirqError("invalid_argument", "no keys");
    let tags: Uint8Array[] = [];
    let layout: KvLayout | undefined;
    const result = await this.lookup(options, () => layout!.choices, async (info) => {
      if (!info.kv) throw new PirqError("not_kv", "the parties serve a page database, not a key-value database (no kv in /v1/info)");
      layout = info.kv;
      const bytes = keys.map((k) => keyBytes(layout!, k));
      for (const key of bytes) checkKey(layout, key);
      tags = await Promise.all(bytes.map((k) => kvTag(layout!.seed, k)));
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
    const { pages: _pages, changedEpochs: _epochs, ...trace } = result;
    seen?.(layout!);
    return { ...trace, valueKind: layout!.valueKind, values, keyEncoding: layout!.keyEncoding, valueEncoding: layout!.valueEncoding };
  }

  /**
   * One lookup: let `plan` name the pages, fetch them in chunks of whole groups (`group` DPF
   * keys per lookup, KV §6) under the key limit, one query per party per chunk. The parties'
   * info is the one already agreed (read again first only when it may be stale), so a lookup is
   * one request per party: the submit that the party answers with the result (`Prefer: wait`).
   */
  private async lookup(
    options: LookupOptions,
    group: number | (() => number),
    plan: (info: DatabaseInfo) => Promise<number[]>,
  ): Promise<PagesResult> {
    if (options.epoch !== undefined && !(Number.isSafeInteger(options.epoch) && options.epoch >= 0)) {
      throw new PirqError("invalid_argument", `epoch ${String(options.epoch)} is not a whole number ≥ 0`);
    }
    return withDeadline(this.timeoutMs, options.signal, async (ctxA, ctxB) => {
      const started = performance.now();
      if (this.stale) {
        const fresh = await agree(this.a, this.b, ctxA, ctxB, this.verifier?.publicKey);
        await this.checkWindows(fresh, ctxA, ctxB);
        this.info = fresh;
        this.stale = false;
      }
      const info = this.info;
      const indices = await plan(info);
      const size = typeof group === "number" ? group : group();
      const perQuery = Math.floor(info.maxKeysPerQuery / size) * size;
      if (perQuery === 0) {
        throw new PirqError("invalid_argument", `the parties take ${info.maxKeysPerQuery} keys per query, one lookup needs ${size}`);
      }
      ctxA.pageSize = ctxB.pageSize = info.pageSize;
      try {
        // The first chunk goes unpinned (each party answers its newest, and says which) unless
        // the caller pinned one; the rest are pinned to the first one's epoch.
        let epoch = options.epoch;
        let digest = "";
        const pages: Uint8Array[] = [];
        const changedEpochs: number[] = [];
        for (let from = 0; from < indices.length; from += perQuery) {
          const chunk = await this.queryChunk(indices.slice(from, from + perQuery), epoch, info, ctxA, ctxB);
          epoch = chunk.epoch;
          digest = chunk.digest;
          pages.push(...chunk.pages);
          changedEpochs.push(...(chunk.changedEpochs ?? []));
        }
        if (this.newerThanInfo(epoch!, digest)) this.stale = true;
        const usable = info.pageSize - (info.signing?.tailLen ?? 0);
        return {
          epoch: epoch!,
          digest,
          pages: usable === info.pageSize ? pages : pages.map((p) => p.subarray(0, usable)),
          ...(this.verifier ? { changedEpochs } : {}),
          verified: this.verifier !== undefined,
          exchanges: [ctxA.trace!, ctxB.trace!],
          elapsedMs: performance.now() - started,
          dpfKeys: indices.length,
        };
      } catch (e) {
        // A party that lost its workers, moved to another database or went away: read both
        // infos again before the next lookup, so that it fails (or works) for the right reason.
        this.stale = true;
        throw e;
      }
    });
  }

  /** Whether answers at `epoch` with `digest` show that the agreed info is out of date. */
  private newerThanInfo(epoch: number, digest: string): boolean {
    if (epoch > this.info.epoch.newest) return true;
    return this.info.parties.some((p) => p.epoch.newest === epoch && p.digest !== undefined && p.digest !== digest);
  }

  /**
   * One query to each party for `indices` (at most the key limit), combined. Unpinned
   * (`epoch` undefined), each party answers at its newest epoch; when one is ahead of the other
   * (an epoch being rolled out), it alone is asked again, with the same key, at the other's epoch.
   */
  private async queryChunk(indices: number[], epoch: number | undefined, info: DatabaseInfo, ctxA: CallContext, ctxB: CallContext): Promise<Combined> {
    const keysA: Uint8Array[] = [];
    const keysB: Uint8Array[] = [];
    for (const i of indices) {
      const [k0, k1] = generateKeys(info.domainBits, i);
      keysA.push(k0);
      keysB.push(k1);
    }
    const check = (party: Party, answer: PartyAnswer) => this.checkAnswer(party, answer, indices.length, info.pageSize);
    let [answerA, answerB] = await Promise.all([
      this.a.query(keysA, epoch, ctxA).then((x) => check(this.a, x)),
      this.b.query(keysB, epoch, ctxB).then((x) => check(this.b, x)),
    ]);
    if (epoch === undefined && answerA.epoch !== answerB.epoch) {
      epoch = Math.min(answerA.epoch, answerB.epoch);
      if (answerA.epoch > epoch) answerA = check(this.a, await this.a.query(keysA, epoch, ctxA));
      else answerB = check(this.b, await this.b.query(keysB, epoch, ctxB));
    }
    epoch ??= answerA.epoch;
    for (const [party, answer] of [[this.a, answerA], [this.b, answerB]] as const) {
      if (answer.epoch !== epoch) {
        throw new PirqError("epoch_mismatch", `answered epoch ${answer.epoch}, ${epoch} was asked for`, { party: `${party.name} (${party.url})` });
      }
    }
    // SPEC §2.1, §4: answers computed from different contents XOR into a wrong page that looks
    // like any other, so combine only answers stamped with the same database digest.
    if (answerA.digest !== answerB.digest) {
      throw new PirqError(
        "parties_disagree",
        `the parties answered from different databases at epoch ${epoch} (digest ${answerA.digest!.slice(0, 12)} vs ${answerB.digest!.slice(0, 12)})`,
      );
    }
    const pages = answerA.pages.map((page, i) => xorBytes(page, answerB.pages[i]));
    if (!this.verifier) return { epoch, digest: answerA.digest!, pages };
    return { epoch, digest: answerA.digest!, pages, changedEpochs: await this.verifyPages(indices, pages, epoch, answerA.digest!, info, ctxA, ctxB) };
  }

  /**
   * Checks every combined page against the pinned publisher key before anything is returned
   * (SIGNED §3): the signature over the database's identity, the page's index, the epoch it last
   * changed at and its bytes; then that it is current at the answered epoch (SIGNED §4.3: no
   * publisher manifest of a later epoch up to the answered one names it; the manifests are read
   * from both parties when this client lacks one, and each is verified). Either party may have
   * altered its answer and the client cannot tell which: the error names the pair.
   */
  private async verifyPages(indices: number[], pages: Uint8Array[], epoch: number, digest: string, info: DatabaseInfo, ctxA: CallContext, ctxB: CallContext): Promise<number[]> {
    const signing = info.signing!;
    const dbId = fromHex(signing.dbId);
    const history = this.historyOf(signing.dbId);
    const pair = `A (${this.a.url}) and B (${this.b.url})`;
    const refuse = (code: string, what: string) => new PirqError(code, `${what} (served by ${pair}); nothing was returned`);
    if (epoch < history.newest) {
      // SIGNED §4.4, the freeze: parties that claim (or pin) an old epoch serve pages that are
      // current at that epoch; this client has seen a newer one, so the pin never goes back.
      throw refuse("stale_epoch", `the answers are at epoch ${epoch}, older than epoch ${history.newest}, the newest this client has seen signed${this.minEpoch === history.newest ? " (minEpoch)" : ""}`);
    }
    const tails = await Promise.all(pages.map((page, i) => checkPage(this.verifier!, dbId, indices[i], page, signing.tailLen)));
    const changed = tails.map((tail, i) => {
      if (!tail) throw refuse("bad_signature", `page ${indices[i]} at epoch ${epoch} failed the publisher's signature: a party altered its answer`);
      return tail.changedEpoch;
    });
    // SIGNED §4.3, when to read: the first answer at an epoch whose manifest this client lacks,
    // whatever pages it asked for. Reading only when a page needs an older manifest would tell
    // the parties that the page asked for did not change at this epoch.
    const read = history.read;
    if (epoch >= 1 && !history.manifests.has(epoch) && !(read && read.epoch === epoch && Date.now() - read.at < MANIFEST_REREAD_MS)) {
      history.read = { epoch, at: Date.now() };
      await this.readManifests(history, dbId, ctxA, ctxB);
    }
    for (let i = 0; i < indices.length; i++) {
      const verdict = freshness(indices[i], changed[i], epoch, history.manifests);
      if (verdict.fresh) continue;
      switch (verdict.why) {
        case "future":
          throw refuse("bad_signature", `page ${indices[i]} answered at epoch ${epoch} is signed as changed at epoch ${changed[i]}: a party altered its answer`);
        case "replaced":
          throw refuse("stale_page", `page ${indices[i]} answered at epoch ${epoch} is its version of epoch ${changed[i]}, which the publisher's manifest of epoch ${verdict.at} replaced: a party handed back an old version`);
        case "missing":
          throw refuse("stale_page", `page ${indices[i]} answered at epoch ${epoch} is its version of epoch ${changed[i]}, and neither party serves the publisher's manifest of epoch ${verdict.at} that would show it current`);
      }
    }
    const manifest = history.manifests.get(epoch);
    if (manifest && manifest.digest !== digest) {
      throw refuse("bad_signature", `the answers at epoch ${epoch} carry digest ${digest.slice(0, 12)}…, the publisher's manifest of that epoch says ${manifest.digest.slice(0, 12)}…`);
    }
    for (const c of changed) if (c > history.newest) history.newest = c;
    return changed;
  }

  /**
   * Reads both parties' manifests (the union: each is signed, so a party can withhold one but not
   * forge it), keeps those whose signature holds and raises the newest signed epoch seen. A party
   * that cannot serve them is not an error here: a manifest still missing refuses the page.
   */
  private async readManifests(history: SignedHistory, dbId: Uint8Array, ctxA: CallContext, ctxB: CallContext): Promise<void> {
    const lists = await Promise.all([this.a.manifests(ctxA), this.b.manifests(ctxB)].map((p) => p.catch((e) => {
      // The deadline, or the caller's abort, ends the lookup; any other failure is this party withholding.
      if ((e instanceof PirqError && e.code === "timeout") || ctxA.signal?.aborted) throw e;
      return [] as Manifest[];
    })));
    for (const m of lists.flat()) {
      if (history.manifests.has(m.epoch)) continue;
      if (await checkManifest(this.verifier!, dbId, m)) {
        history.manifests.set(m.epoch, m);
        history.newest = Math.max(history.newest, m.epoch);
      }
    }
  }

  /** What this client knows of database `dbId`'s signed history (SIGNED §4.3, §4.4). */
  private historyOf(dbId: string): SignedHistory {
    let h = this.histories.get(dbId);
    if (!h) {
      h = { manifests: new Map(), newest: this.minEpoch };
      this.histories.set(dbId, h);
    }
    return h;
  }

  /**
   * The newest signed epoch this client has seen of the database it is connected to (the highest
   * `changed_epoch` of a verified page or epoch of a verified manifest, or `minEpoch`): answers at
   * an older epoch are refused (`stale_epoch`), so the pin never goes back (SIGNED §4.4). An
   * application that wants this to outlive the client stores it and passes it back as `minEpoch`.
   */
  get newestSignedEpoch(): number {
    return this.info.signing ? this.historyOf(this.info.signing.dbId).newest : this.minEpoch;
  }

  /** One page of `pageSize` bytes per key, and a digest (an answer without one cannot be checked: refused, never a page). */
  private checkAnswer(party: Party, answer: PartyAnswer, keys: number, pageSize: number): PartyAnswer {
    const name = `${party.name} (${party.url})`;
    if (answer.pages.length !== keys || answer.pages.some((p) => p.length !== pageSize)) {
      throw new PirqError("bad_response", `answer has ${answer.pages.length} pages, ${keys} of ${pageSize} B expected`, { party: name });
    }
    if (!answer.digest) {
      throw new PirqError("bad_response", "done result without a database digest (SPEC §4): cannot check that both answers come from the same contents", { party: name });
    }
    return answer;
  }
}

/**
 * Runs `body` under one deadline of `timeoutMs` and the caller's signal: each party gets a
 * context whose signal aborts when either does (reason: a `timeout` PirqError, which the party
 * layer turns into one naming itself and the phase). Whatever is still open at the end — the
 * other party's event stream after one failed — is aborted.
 */
async function withDeadline<T>(
  timeoutMs: number,
  outer: AbortSignal | undefined,
  body: (ctxA: CallContext, ctxB: CallContext) => Promise<T>,
): Promise<T> {
  outer?.throwIfAborted();
  const deadline = performance.now() + timeoutMs;
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new PirqError("timeout", `not done within ${timeoutMs} ms`)), timeoutMs);
  const onOuter = () => controller.abort(outer!.reason);
  outer?.addEventListener("abort", onOuter, { once: true });
  const ctx = (): CallContext => ({ signal: controller.signal, trace: [], deadline, timeoutMs });
  try {
    return await body(ctx(), ctx());
  } catch (e) {
    if (controller.signal.aborted && !(e instanceof PirqError)) throw controller.signal.reason;
    throw e;
  } finally {
    clearTimeout(timer);
    outer?.removeEventListener("abort", onOuter);
    controller.abort(); // ends any stream still open (e.g. the other party's SSE)
  }
}

function sameSigning(a: Signing | undefined, b: Signing | undefined): boolean {
  if (!a || !b) return a === b;
  return a.scheme === b.scheme && a.tailLen === b.tailLen && a.publisherKey === b.publisherKey && a.dbId === b.dbId;
}

function signingText(s: Signing | undefined): string {
  return s ? `${s.scheme}, key ${s.publisherKey.slice(0, 12)}…, database ${s.dbId.slice(0, 12)}…` : "unsigned";
}

/**
 * Both parties' info, checked to describe the same database, with their common epoch window;
 * with `publisherKey` (64 hex digits), checked to be signed by that key.
 */
export async function agree(a: Party, b: Party, ctxA: CallContext = {}, ctxB: CallContext = {}, publisherKey?: string): Promise<DatabaseInfo> {
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
  for (const [party, info] of [[a, ia], [b, ib]] as const) {
    // A party that does not say who it is cannot be told from the other (a proxy that strips
    // `party` would send both halves of every key to one party): refused (issue 36).
    if (typeof info.party !== "string" || !/^[0-9a-f]{32}$/.test(info.party)) {
      throw new PirqError("same_party", "does not give its party id (32 lowercase hex digits) in /v1/info: it cannot be told from the other party, which would then see both halves of every key", { party: `${party.name} (${party.url})` });
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
  const signing = ia.signing ?? ib.signing;
  if (!sameSigning(ia.signing, ib.signing)) {
    throw new PirqError("parties_disagree", `the parties advertise different signing (SPEC §2.4): ${signingText(ia.signing)} vs ${signingText(ib.signing)}`);
  }
  if (publisherKey !== undefined && !signing) {
    throw new PirqError("not_signed", `the parties serve an unsigned database, and the client is pinned to publisher key ${publisherKey.slice(0, 12)}…: its pages cannot be verified`);
  }
  if (publisherKey !== undefined && signing!.publisherKey !== publisherKey) {
    throw new PirqError("wrong_publisher", `the parties serve a database signed by publisher key ${signing!.publisherKey.slice(0, 12)}…, not the pinned ${publisherKey.slice(0, 12)}…`);
  }
  let kv: KvLayout | undefined;
  if (ia.raw.kv !== undefined || ib.raw.kv !== undefined) {
    if (ia.raw.kv === undefined || ib.raw.kv === undefined) {
      throw new PirqError("parties_disagree", `only party ${ia.raw.kv === undefined ? "B" : "A"} serves a key-value database`);
    }
    // A signed database's pages end in a signature tail: the slots use the bytes before it.
    const tailLen = signing?.tailLen ?? 0;
    const la = parseKvLayout(ia.raw.kv, ia.pageSize, ia.numPages, tailLen);
    const lb = parseKvLayout(ib.raw.kv, ib.pageSize, ib.numPages, tailLen);
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
    signing,
    parties: [ia, ib],
  };
}

/**
 * Connects to two parties (base URLs of their gateways): checks the URLs and options before
 * anything is sent (`insecure_http` for plain HTTP to a host that is not loopback), reads both
 * `/v1/info` under the deadline and checks that they serve the same database. Fails with
 * `party_unreachable` (naming the party) when one is down, `parties_disagree` when they serve
 * different databases, `timeout` when a party does not answer in time.
 */
export async function connect(a: string, b: string, options: ConnectOptions = {}): Promise<Pirq> {
  const { tokenA, tokenB, publisherKey, warn, minEpoch, ...shared } = options as ConnectOptions & { token?: unknown };
  if (minEpoch !== undefined && !(Number.isSafeInteger(minEpoch) && minEpoch >= 0)) throw new PirqError("invalid_argument", "minEpoch must be a whole number ≥ 0");
  if (minEpoch !== undefined && publisherKey === undefined) throw new PirqError("invalid_argument", "minEpoch needs publisherKey: only signed epochs can be held to it");
  if (warn !== undefined && typeof warn !== "function") throw new PirqError("invalid_argument", "warn must be a function");
  const verifier = publisherKey === undefined ? undefined : await ed25519Verifier(parsePublisherKey(publisherKey));
  if ("token" in shared) throw new PirqError("invalid_argument", "give each party its own token: tokenA and tokenB");
  const timeoutMs = options.timeoutMs ?? 60_000;
  checkTimeout(timeoutMs);
  const partyA = new Party("A", a, { ...shared, token: tokenA });
  const partyB = new Party("B", b, { ...shared, token: tokenB });
  if (partyA.url === partyB.url) {
    throw new PirqError("same_party", `both parties are ${partyA.url}: one party would see both halves of every key`);
  }
  const info = await withDeadline(timeoutMs, undefined, (ctxA, ctxB) => agree(partyA, partyB, ctxA, ctxB, verifier?.publicKey));
  if (info.signing && !verifier) {
    (warn ?? console.warn)(`pirq: the parties serve a signed database (publisher key ${info.signing.publisherKey}) but no publisherKey was given: answers are not being verified`);
  }
  const pirq = new Pirq(partyA, partyB, info, timeoutMs, verifier, minEpoch);
  await withDeadline(timeoutMs, undefined, (ctxA, ctxB) => pirq.checkWindows(info, ctxA, ctxB));
  return pirq;
}
