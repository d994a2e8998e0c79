// The client in real headless Chromium against real parties (redis-server + pirq-gateway +
// pirq-worker each, gateways with --cors-origin for the page's origin): the demo page's bundle,
// pages exact, the demo UI, errors with codes, a party that is down.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import type { Server } from "node:http";
import type { BrowserContext, Page } from "playwright-core";
import { toHex } from "../src/bytes.js";
import { freePort, makePageDb, pageFromFile, Parties, startParties, tempDir, warnings } from "./parties.js";
import { launchChromium, serveWeb } from "./browser.js";

const PAGES = 3000; // domain 12 bits
const PAGE_SIZE = 512;
let parties: Parties;
let db: Buffer;
let web: { server: Server; origin: string };
let browser: { context: BrowserContext; close: () => Promise<void> };
let page: Page;

before(async () => {
  web = await serveWeb();
  const file = makePageDb(tempDir(), PAGES, PAGE_SIZE, 11);
  db = readFileSync(file);
  parties = await startParties({ db: file, corsOrigins: [web.origin] });
  browser = await launchChromium();
  page = await browser.context.newPage();
  await page.goto(`${web.origin}/?a=${encodeURIComponent(parties.a.url)}&b=${encodeURIComponent(parties.b.url)}`);
  await page.waitForFunction(() => document.getElementById("status")?.dataset.state === "ok" || document.getElementById("status")?.dataset.state === "error");
});
after(async () => {
  await browser?.close();
  web?.server.close();
  await parties?.stop();
});

test("the page connected to both parties across origins (CORS)", async () => {
  assert.equal(await page.locator("#status").getAttribute("data-state"), "ok", await page.locator("#status").textContent() ?? "");
  assert.match((await page.locator("#info").textContent()) ?? "", new RegExp(`^${PAGES} pages of ${PAGE_SIZE} B \\(domain 12 bits\\)`));
});

test("pages fetched in the browser are exact (SSE and long-poll)", async () => {
  const indices = [0, 1, 2047, 2048, PAGES - 1];
  for (const wait of ["sse", "poll"] as const) {
    const got = await page.evaluate(
      async ({ a, b, indices, wait }) => {
        const { connect, toHex } = (window as any).pirq;
        const pirq = await connect(a, b, { wait });
        const result = await pirq.getPages(indices);
        return { epoch: result.epoch, pages: result.pages.map((p: Uint8Array) => toHex(p)) };
      },
      { a: parties.a.url, b: parties.b.url, indices, wait },
    );
    assert.equal(got.epoch, 0);
    indices.forEach((i, k) => assert.equal(got.pages[k], toHex(pageFromFile(db, i)), `${wait}: page ${i}`));
  }
});

test("the demo UI shows the page, the time, and the same shape of query at both parties", async () => {
  await page.fill("#page-index", "1234");
  await page.click("#get-page");
  await page.waitForFunction(() => document.getElementById("status")?.dataset.state !== "busy");
  const statusText = (await page.locator("#status").textContent()) ?? "";
  assert.match(statusText, /^page 1234: 512 B at epoch 0 in [0-9.]+ ms$/);
  assert.equal(await page.locator("#value").getAttribute("data-hex"), toHex(pageFromFile(db, 1234)));
  assert.equal(await page.locator("#shape").getAttribute("data-same"), "true");
  // per party: the database info, the query, its result by server-sent events
  const rows = await page.locator("#exchanges tr").allTextContents();
  assert.equal(rows.length, 3);
  assert.match(rows[0], /GET \/v1\/info/);
  assert.match(rows[1], /POST \/v1\/queries · \d+ B → 202/);
  assert.match(rows[2], /GET \/v1\/queries\/\{id\}\/events · 0 B → 200/);
});

test("a party's error code reaches the browser: an epoch outside the window", async () => {
  const err = await page.evaluate(async ({ a, b }) => {
    const pirq = await (window as any).pirq.connect(a, b);
    try {
      await pirq.getPage(3, { epoch: 5 });
      return null;
    } catch (e: any) {
      return { name: e.name, code: e.code, status: e.status, window: e.window };
    }
  }, { a: parties.a.url, b: parties.b.url });
  assert.deepEqual(err, { name: "PirqError", code: "epoch_unavailable", status: 410, window: { oldest: 0, newest: 0 } });
});

test("a party that is down is reported as party_unreachable, naming it", async () => {
  const down = `http://127.0.0.1:${await freePort()}`;
  const err = await page.evaluate(async ({ a, b }) => {
    try {
      await (window as any).pirq.connect(a, b, { retries: 0 });
      return null;
    } catch (e: any) {
      return { code: e.code, message: e.message };
    }
  }, { a: parties.a.url, b: down });
  assert.ok(err);
  assert.equal(err.code, "party_unreachable");
  assert.ok(err.message.includes(`party B (${down})`), err.message);
});

test("no WARN or ERROR lines in the gateways' logs", () => {
  for (const p of [parties.a, parties.b]) assert.deepEqual(warnings(p.gateway), [], p.gateway.name);
});
