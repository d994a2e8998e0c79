// Authenticated answers (issue 27, docs/spec/signed.md) against real parties: a database signed
// by `pirq db gen --sign-key` (the publisher's key from `pirq publisher keygen`), served by two
// real parties, party B reached through a tampering proxy (test/tampering-proxy.ts) that XORs
// bytes into its answers and keeps the digest stamp. In Node and in headless Chromium, every
// wait mode: untampered pages verified and exact; tampered answers refused on every lookup; the
// parties pinned to another publisher's key refused; an unsigned database refused when pinned
// (and, unpinned, the same lie passing unnoticed: what the digest alone cannot catch). Freshness
// (SIGNED §4): after a signed update whose manifest the parties serve (--manifests), a party
// that hands back the older, validly signed version of a page (Node and Chromium) or of a kv
// value (Node) is refused with stale_page.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { Server } from "node:http";
import { connect, kvCandidates, kvTag, PirqError, toHex } from "../src/index.js";
import { launchChromium, serveWeb } from "./browser.js";
import { binDir, kvRecords, makeKvDb, makePageDb, makePublisherKey, pageFromFile, Parties, pushEpoch, startParties, tempDir, warnings } from "./parties.js";
import { startTamperingProxy, TamperingProxy } from "./tampering-proxy.js";

const PAGES = 300;
const PAGE_SIZE = 512;
const USABLE = PAGE_SIZE - 72;
const WAITS = ["inline", "sse", "poll"] as const;

let dir: string;
let publisher: ReturnType<typeof makePublisherKey>;
let other: ReturnType<typeof makePublisherKey>;
let db: Buffer;
let parties: Parties;
let proxyB: TamperingProxy;
let web: { server: Server; origin: string };

before(async () => {
  dir = tempDir();
  publisher = makePublisherKey(dir, "publisher");
  other = makePublisherKey(dir, "other");
  const file = makePageDb(dir, PAGES, PAGE_SIZE, 5, publisher.secretFile);
  db = readFileSync(file);
  web = await serveWeb();
  parties = await startParties({ db: file, corsOrigins: [web.origin] });
  proxyB = await startTamperingProxy(parties.b.url);
});
after(async () => {
  await proxyB?.close();
  web?.server.close();
  await parties?.stop();
});

const usable = (i: number) => toHex(pageFromFile(db, i).subarray(0, USABLE));
/** Flips one bit of a page's usable bytes: the smallest lie. */
const flipBit = (page: Uint8Array) => {
  page[100] ^= 0x04;
};

test("the parties advertise the publisher's key; pinned to it, every page verified and exact in every wait mode", async () => {
  proxyB.tamper = undefined;
  for (const wait of WAITS) {
    const pirq = await connect(parties.a.url, proxyB.url, { publisherKey: publisher.publicKey, wait });
    assert.equal(pirq.info.signing?.publisherKey, publisher.publicHex);
    const got = await pirq.getPages([0, 299, 150]);
    assert.equal(got.verified, true);
    assert.deepEqual(got.pages.map(toHex), [0, 299, 150].map(usable), wait);
    assert.deepEqual(got.changedEpochs, [0, 0, 0]);
  }
});

test("a party that XORs bytes into its answers (digest kept) is refused on every lookup, in every wait mode", async () => {
  proxyB.tamper = flipBit;
  const before = proxyB.tampered;
  try {
    for (const wait of WAITS) {
      const pirq = await connect(parties.a.url, proxyB.url, { publisherKey: publisher.publicKey, wait });
      for (const index of [0, 7, 299]) {
        await assert.rejects(pirq.getPage(index), (e: unknown) => {
          assert.ok(e instanceof PirqError, String(e));
          assert.equal(e.code, "bad_signature", e.message);
          assert.match(e.message, new RegExp(`page ${index} at epoch 0 failed the publisher's signature.*served by A \\(${parties.a.url}\\) and B \\(${proxyB.url}\\)`));
          return true;
        }, `${wait} ${index}`);
      }
    }
    assert.equal(proxyB.tampered - before, 9, "the proxy changed every answer");
  } finally {
    proxyB.tamper = undefined;
  }
});

test("key-value lookups of a signed table (pirq kv build --sign-key): values verified and exact, absent keys null; a tampered candidate refused", async () => {
  const records = kvRecords(400, 24);
  const kv = await startParties({ db: makeKvDb(dir, records, { valueSize: 24, pageSize: 512, pages: 256, choices: 3, signKey: publisher.secretFile }) });
  const proxy = await startTamperingProxy(kv.b.url);
  try {
    for (const wait of WAITS) {
      const pirq = await connect(kv.a.url, proxy.url, { publisherKey: publisher.publicKey, wait });
      assert.equal(pirq.info.kv?.usableBytes, USABLE);
      const absent = new TextEncoder().encode("nobody");
      const got = await pirq.getMany([records[0][0], records[399][0], absent]);
      assert.equal(got.verified, true);
      assert.deepEqual(got.values.map((v) => v && toHex(v)), [toHex(records[0][1]), toHex(records[399][1]), null], wait);
    }
    proxy.tamper = flipBit;
    const pirq = await connect(kv.a.url, proxy.url, { publisherKey: publisher.publicKey });
    for (const [key] of [records[5], records[6]]) {
      await assert.rejects(pirq.get(key), (e: unknown) => e instanceof PirqError && e.code === "bad_signature");
    }
  } finally {
    await proxy.close();
    await kv.stop();
  }
});

test("the Node example with PIRQ_PUBLISHER_KEY, in its own process: verified, then refused when B lies (nothing printed but the error)", async () => {
  const example = fileURLToPath(new URL("../examples/node.js", import.meta.url));
  const run = async () => {
    const env = { ...process.env, PIRQ_PUBLISHER_KEY: publisher.publicFile };
    const { stdout } = await promisify(execFile)(process.execPath, [example, parties.a.url, proxyB.url, "page", "42"], { env }).catch((e: { stdout: string }) => ({ stdout: e.stdout }));
    return JSON.parse(stdout);
  };
  proxyB.tamper = undefined;
  assert.deepEqual(await run(), { index: 42, page: usable(42), epoch: 0, digest: (await (await fetch(`${parties.a.url}/v1/info`)).json()).digest, verified: true });
  proxyB.tamper = flipBit;
  try {
    const refused = await run();
    assert.equal(refused.error, "bad_signature", JSON.stringify(refused));
    assert.equal(refused.page, undefined);
  } finally {
    proxyB.tamper = undefined;
  }
});

test("pinned to another publisher's key: refused at connect, before any key is sent", async () => {
  await assert.rejects(connect(parties.a.url, proxyB.url, { publisherKey: other.publicKey }), (e: unknown) => e instanceof PirqError && e.code === "wrong_publisher");
});

test("an unsigned database: refused when pinned; unpinned, the same lie passes (what the digest cannot catch)", async () => {
  const unsigned = await startParties({ db: makePageDb(dir, 64, 256, 9) });
  const proxy = await startTamperingProxy(unsigned.b.url);
  try {
    await assert.rejects(connect(unsigned.a.url, proxy.url, { publisherKey: publisher.publicKey }), (e: unknown) => e instanceof PirqError && e.code === "not_signed");
    proxy.tamper = flipBit;
    const pirq = await connect(unsigned.a.url, proxy.url, { warn: () => assert.fail("nothing to say of an unsigned database") });
    const got = await pirq.getPages([3]);
    assert.equal(got.verified, false);
    const expected = pageFromFile(readFileSync(makePageDb(dir, 64, 256, 9)), 3);
    expected[100] ^= 0x04;
    assert.equal(toHex(got.pages[0]), toHex(expected), "the tampered page came back as if it were right");
  } finally {
    await proxy.close();
    await unsigned.stop();
  }
});

test("Chromium: verified pages exact in every wait mode, the tampering party refused, the @noble/curves fallback too", async () => {
  const browser = await launchChromium();
  try {
    for (const fallback of [false, true]) {
      const page = await browser.context.newPage();
      if (fallback) {
        // A browser whose WebCrypto has no Ed25519 (before Chrome 137): the client loads its fallback chunk.
        await page.addInitScript(() => {
          const importKey = crypto.subtle.importKey.bind(crypto.subtle);
          crypto.subtle.importKey = ((format: any, key: any, algorithm: any, ...rest: any[]) => {
            if ((algorithm?.name ?? algorithm) === "Ed25519") return Promise.reject(new DOMException("Unrecognized name.", "NotSupportedError"));
            return (importKey as any)(format, key, algorithm, ...rest);
          }) as typeof crypto.subtle.importKey;
        });
      }
      await page.goto(`${web.origin}/`);
      await page.waitForFunction(() => "pirq" in window);
      for (const wait of WAITS) {
        proxyB.tamper = undefined;
        const run = (index: number) => page.evaluate(async ({ a, b, wait, key, index }) => {
          const { connect, toHex } = (window as any).pirq;
          try {
            const pirq = await connect(a, b, { wait, publisherKey: key, timeoutMs: 20_000 });
            const result = await pirq.getPages([index]);
            return { page: toHex(result.pages[0]), verified: result.verified, backend: pirq.verifierBackend };
          } catch (e: any) {
            return { code: e.code, message: e.message };
          }
        }, { a: parties.a.url, b: proxyB.url, wait, key: publisher.publicKey, index });
        const ok = await run(123);
        assert.deepEqual(ok, { page: usable(123), verified: true, backend: fallback ? "noble" : "webcrypto" }, `${wait} fallback=${fallback}`);
        proxyB.tamper = flipBit;
        for (const index of [123, 5]) {
          const refused = await run(index);
          assert.equal(refused.code, "bad_signature", `${wait} fallback=${fallback}: ${JSON.stringify(refused)}`);
        }
      }
      await page.close();
    }
  } finally {
    proxyB.tamper = undefined;
    await browser.close();
  }
});

test("the demo page with a publisher key: says the page is verified; with B lying, shows bad_signature", async () => {
  const browser = await launchChromium();
  try {
    const page = await browser.context.newPage();
    await page.goto(`${web.origin}/?a=${encodeURIComponent(parties.a.url)}&b=${encodeURIComponent(proxyB.url)}&key=${publisher.publicHex}`);
    await page.waitForFunction(() => document.getElementById("status")?.textContent === "connected");
    assert.match(await page.textContent("#info") ?? "", /signed: every page verified \(webcrypto\)/);
    await page.fill("#page-index", "77");
    await page.click("#get-page");
    await page.waitForFunction(() => document.getElementById("status")?.dataset.state === "ok" && document.getElementById("status")!.textContent!.startsWith("page"));
    assert.match(await page.textContent("#status") ?? "", /^page 77: 440 B at epoch 0 .* verified: the publisher signed it$/);
    assert.equal(await page.getAttribute("#value", "data-hex"), usable(77));
    proxyB.tamper = flipBit;
    await page.click("#get-page");
    await page.waitForFunction(() => document.getElementById("status")?.dataset.state === "error");
    assert.equal(await page.getAttribute("#status", "data-code"), "bad_signature");
    assert.equal(await page.textContent("#value"), "");
  } finally {
    proxyB.tamper = undefined;
    await browser.close();
  }
});

/** `pirq` (the Rust CLI) with `args`; its standard error on failure. */
function pirqTool(args: string[]): void {
  execFileSync(join(binDir, "pirq"), args, { stdio: "pipe" });
}

/** The pages of an update file written by `pirq epoch make` / `pirq kv update` (`.json`). */
function updatePages(file: string): { index: number; page: Uint8Array }[] {
  const update = JSON.parse(readFileSync(file, "utf8")) as { pages: { index: number; page: string }[] };
  return update.pages.map((w) => ({ index: w.index, page: new Uint8Array(Buffer.from(w.page, "base64")) }));
}

const xorInto = (page: Uint8Array, delta: Uint8Array) => {
  for (let i = 0; i < page.length; i++) page[i] ^= delta[i];
};

test("freshness (SIGNED §4): a party that hands back the older, validly signed version of a page or of a kv value is refused against the publisher's manifests from GET /v1/manifests", async () => {
  const token = "ts-rollback-admin";
  const work = tempDir();
  const manifests = join(work, "manifests.json");
  const base = makePageDb(work, PAGES, PAGE_SIZE, 9, publisher.secretFile);
  const fresh = await startParties({ db: base, adminToken: token, corsOrigins: [web.origin], gatewayArgs: ["--manifests", manifests] });
  const proxy = await startTamperingProxy(fresh.b.url);
  try {
    // The publisher's update to epoch 1, its manifest appended to the file both parties serve.
    const e1 = join(work, "e1.json");
    pirqTool(["epoch", "make", "--db", base, "--epoch", "1", "--pages", "4", "--seed", "3", "--out", e1, "--sign-key", publisher.secretFile, "--manifests", manifests]);
    const writes = updatePages(e1);
    await pushEpoch(fresh.a, token, 1, writes);
    await pushEpoch(fresh.b, token, 1, writes);
    const { index: alpha, page: newPage } = writes[writes.length - 1];
    const oldPage = pageFromFile(readFileSync(base), alpha);
    const pirq = await connect(fresh.a.url, proxy.url, { publisherKey: publisher.publicKey });
    const got = await pirq.getPages([alpha]);
    assert.equal(got.verified, true);
    assert.deepEqual(got.changedEpochs, [1]);
    assert.equal(toHex(got.pages[0]), toHex(newPage.subarray(0, USABLE)));
    // Party B XORs old ⊕ new into its answer: the client gets the epoch-0 page, validly signed.
    const delta = oldPage.map((b, i) => b ^ newPage[i]);
    proxy.tamper = (page) => xorInto(page, delta);
    const before = proxy.tampered;
    for (const client of [pirq, await connect(fresh.a.url, proxy.url, { publisherKey: publisher.publicKey })]) {
      await assert.rejects(client.getPage(alpha), (e: unknown) => {
        assert.ok(e instanceof PirqError, String(e));
        assert.equal(e.code, "stale_page", e.message);
        assert.match(e.message, new RegExp(`page ${alpha} answered at epoch 1 is its version of epoch 0, which the publisher's manifest of epoch 1 replaced`));
        return true;
      });
    }
    assert.ok(proxy.tampered > before, "the proxy altered nothing");
    proxy.tamper = undefined;

    // The same in headless Chromium (the browser bundle): exact when honest, stale_page when rolled back.
    const browser = await launchChromium();
    try {
      const page = await browser.context.newPage();
      await page.goto(`${web.origin}/`);
      await page.waitForFunction(() => "pirq" in window);
      const run = () => page.evaluate(async ({ a, b, key, index }) => {
        const { connect, toHex } = (window as any).pirq;
        try {
          const pirq = await connect(a, b, { publisherKey: key, timeoutMs: 20_000 });
          const result = await pirq.getPages([index]);
          return { page: toHex(result.pages[0]), changed: result.changedEpochs };
        } catch (e: any) {
          return { code: e.code, message: e.message };
        }
      }, { a: fresh.a.url, b: proxy.url, key: publisher.publicKey, index: alpha });
      assert.deepEqual(await run(), { page: toHex(newPage.subarray(0, USABLE)), changed: [1] });
      proxy.tamper = (page) => xorInto(page, delta);
      const refused = await run();
      assert.equal(refused.code, "stale_page", JSON.stringify(refused));
      assert.match(refused.message, /which the publisher's manifest of epoch 1 replaced/);
      await page.close();
    } finally {
      proxy.tamper = undefined;
      await browser.close();
    }

    // A signed kv table: a value changed at epoch 1, rolled back by B.
    const records = kvRecords(200, 24);
    const table = makeKvDb(work, records, { valueSize: 24, pageSize: 512, pages: 128, choices: 2, signKey: publisher.secretFile });
    const kvManifests = join(work, "kv-manifests.json");
    const kv = await startParties({ db: table, adminToken: token, gatewayArgs: ["--manifests", kvManifests] });
    const kvProxy = await startTamperingProxy(kv.b.url);
    try {
      const changes = join(work, "changes.jsonl");
      const [key] = records[17];
      const value = new Uint8Array(24).fill(0xab);
      writeFileSync(changes, JSON.stringify({ key: toHex(key), value: toHex(value) }) + "\n");
      const kv1 = join(work, "kv1.json");
      pirqTool(["kv", "update", "--db", table, "--changes", changes, "--epoch", "1", "--out", kv1, "--sign-key", publisher.secretFile, "--manifests", kvManifests]);
      const kvWrites = updatePages(kv1);
      await pushEpoch(kv.a, token, 1, kvWrites);
      await pushEpoch(kv.b, token, 1, kvWrites);
      const client = await connect(kv.a.url, kvProxy.url, { publisherKey: publisher.publicKey });
      assert.equal(toHex((await client.get(key))!), toHex(value));
      // B XORs old ⊕ new of each of the key's candidate pages into its share of that page: the
      // client combines their epoch-0 versions, validly signed, which hold the old value.
      const layout = client.info.kv!;
      const candidates = await kvCandidates(layout.seed, await kvTag(layout.seed, key), layout.choices, client.info.numPages);
      const oldTable = readFileSync(table);
      const newer = new Map(kvWrites.map((w) => [w.index, w.page]));
      const deltas = candidates.map((c) => {
        const old = pageFromFile(oldTable, c);
        const now = newer.get(c) ?? old;
        return old.map((b, i) => b ^ now[i]);
      });
      assert.ok(deltas.some((d) => d.some((b) => b !== 0)), "the key's pages did not change");
      kvProxy.tamper = (page, keyIndex) => xorInto(page, deltas[keyIndex]);
      const before = kvProxy.tampered;
      for (const c of [client, await connect(kv.a.url, kvProxy.url, { publisherKey: publisher.publicKey })]) {
        await assert.rejects(c.get(key), (e: unknown) => {
          assert.ok(e instanceof PirqError, String(e));
          assert.equal(e.code, "stale_page", e.message);
          return true;
        });
      }
      assert.ok(kvProxy.tampered > before, "the proxy altered nothing");
    } finally {
      await kvProxy.close();
      await kv.stop();
    }
  } finally {
    await proxy.close();
    await fresh.stop();
  }
});

test("no WARN or ERROR lines in the parties' logs", () => {
  for (const p of [parties.a, parties.b]) for (const proc of [p.gateway, p.worker]) assert.deepEqual(warnings(proc), [], proc.name);
});
