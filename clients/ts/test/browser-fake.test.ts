// The client in real headless Chromium against the fake parties of fake-party.ts (silent,
// dribbling, huge, hostile; the table is fake-scenarios.ts, the same rows as in Node): the
// browser's fetch and streams end every lookup by its deadline or sooner, with an error naming
// the party and the phase. Also: plain HTTP to a remote host refused before the browser sends
// anything, and bearer tokens sent to their own party only (through CORS).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { Server } from "node:http";
import type { BrowserContext, Page } from "playwright-core";
import { toHex } from "../src/bytes.js";
import { launchChromium, serveWeb } from "./browser.js";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fakePage, Fake, makeTestCa, startFakeParty } from "./fake-party.js";
import { sharedPage, startSharedFake } from "./shared-fake.js";
import { checkOutcome, INDEX, lookupOnce, scenarioName, scenarioOptions, SCENARIOS, startScenario } from "./fake-scenarios.js";

const expectedPage = toHex(fakePage(7, INDEX, 256));
let web: { server: Server; origin: string };
let browser: { context: BrowserContext; close: () => Promise<void> };
let page: Page;
const open: Fake[] = [];

before(async () => {
  web = await serveWeb();
  browser = await launchChromium();
  page = await browser.context.newPage();
  await page.goto(`${web.origin}/`); // the demo page: it puts the package at window.pirq
  await page.waitForFunction(() => "pirq" in window);
});
after(async () => {
  await browser?.close();
  web?.server.close();
  for (const p of open) await p.close();
});

async function fake(...args: Parameters<typeof startFakeParty>): Promise<Fake> {
  const p = await startFakeParty(...args);
  open.push(p);
  return p;
}

for (const s of SCENARIOS) {
  test(`Chromium, ${scenarioName(s)}: ${s.expect === "ok" ? "ok" : s.expect.code}`, async () => {
    const { a, b, expectedPageHex } = await startScenario(s);
    open.push(a, b);
    const outcome = await page.evaluate(lookupOnce, { a: a.url, b: b.url, index: INDEX, options: scenarioOptions(s) });
    await checkOutcome(s, outcome, a, b, expectedPageHex);
  });
}

test("Chromium: plain http:// to a remote host is refused before the browser sends anything", async () => {
  const a = await fake({ behaviour: "honest" });
  const requests: string[] = [];
  const onRequest = (r: { url(): string }) => requests.push(r.url());
  page.on("request", onRequest);
  const err = await page.evaluate(async ({ a }) => {
    try {
      await (window as any).pirq.connect(a, "http://party-b.invalid:8080");
      return null;
    } catch (e: any) {
      return { code: e.code, message: e.message };
    }
  }, { a: a.url });
  page.off("request", onRequest);
  assert.equal(err?.code, "insecure_http");
  assert.match(err!.message, /party B: refusing plain HTTP to party-b.invalid:8080/);
  assert.deepEqual(requests, []);
  assert.equal((await a.stats()).info, 0);
});

test("Chromium: each party gets its own bearer token on its query routes (CORS allows Authorization)", async () => {
  const a = await fake({ behaviour: "honest", token: "token-of-a" });
  const b = await fake({ behaviour: "honest", token: "token-of-b" });
  const got = await page.evaluate(async ({ a, b, index }) => {
    const { connect, toHex } = (window as any).pirq;
    const pirq = await connect(a, b, { tokenA: "token-of-a", tokenB: "token-of-b", timeoutMs: 5000 });
    return toHex(await pirq.getPage(index));
  }, { a: a.url, b: b.url, index: INDEX });
  assert.equal(got, expectedPage);
  for (const [p, token] of [[a, "token-of-a"], [b, "token-of-b"]] as const) {
    const requests = p.seen!.filter((r) => r.method !== "OPTIONS").map((r) => `${r.method} ${r.path} ${r.authorization ?? "-"}`);
    assert.deepEqual(requests, ["GET /v1/info -", `POST /v1/queries Bearer ${token}`]);
  }
});

test("Chromium: https parties with a private CA, accepted only when the browser is told (its own trust, not the client's)", async () => {
  const dir = mkdtempSync(join(tmpdir(), "pirq-ts-ca-"));
  const { certFile, keyFile, caFile } = makeTestCa(dir);
  const a = await startSharedFake("honest", { tls: { certFile, keyFile } });
  const b = await startSharedFake("honest", { tls: { certFile, keyFile } });
  open.push(a, b);
  const lookup = (p: Page) => p.evaluate(lookupOnce, { a: a.url, b: b.url, index: INDEX, options: { timeoutMs: 5000 } });
  // the page is served over http from 127.0.0.1: reaching https parties from it is allowed
  const untrusted = await lookup(page);
  assert.equal(untrusted.code, "party_unreachable", untrusted.message);
  const trusting = await launchChromium({ trustCerts: [certFile, caFile] });
  try {
    const p = await trusting.context.newPage();
    await p.goto(`${web.origin}/`);
    await p.waitForFunction(() => "pirq" in window);
    const trusted = await lookup(p);
    assert.ok(trusted.ok, trusted.message);
    assert.equal(trusted.pageHex, toHex(sharedPage(INDEX)));
  } finally {
    await trusting.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
