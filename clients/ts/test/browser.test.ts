// The client in real headless Chromium against real parties (redis-server + pirq-gateway +
// pirq-worker each, gateways with --cors-origin for the page's origin) serving a key-value
// database built by `pirq kv build`: the demo page's bundle, pages and values exact at every wait
// mode (one round trip by default, as the browser's own network log shows), absent keys,
// the demo UI, errors with codes, a party that is down. A second pair serves a text table built
// as users build one (no encoding flags): getValue with string keys read as text and text values
// back (issue 37), and the first pair serves it too as its table `text`, read with the `table`
// option (issue 38). PIRQ_SCREENSHOT=file.png saves the demo page after a key lookup.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import type { Server } from "node:http";
import type { BrowserContext, Page, Response } from "playwright-core";
import { toHex } from "../src/bytes.js";
import { freePort, kvRecords, makeKvDb, makeTextKvDb, pageFromFile, Parties, startParties, tempDir, warnings } from "./parties.js";
import { launchChromium, serveWeb } from "./browser.js";

const PAGES = 1000; // domain 10 bits
const PAGE_SIZE = 256;
const VALUE_SIZE = 32;
const records = kvRecords(2000, VALUE_SIZE);
/** The text table's records, as a user writes them: a key that looks like hex, an address, non-ASCII text. */
const TEXT_RECORDS = [
  { key: "1234", value: "abcd" },
  { key: "alice@example.org", value: "Alice, Lisbon" },
  { key: "zoë", value: "Zoë, Zürich — café ☕" },
  ...Array.from({ length: 200 }, (_, i) => ({ key: `user-${i}`, value: `profile of user ${i}` })),
];
let parties: Parties;
let textParties: Parties;
let db: Buffer;
let web: { server: Server; origin: string };
let browser: { context: BrowserContext; close: () => Promise<void> };
let page: Page;

/** Playwright reports responses asynchronously: wait (briefly) until `done` holds. */
async function waitUntil(done: () => boolean, ms = 2000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!done() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
}

before(async () => {
  web = await serveWeb();
  const file = makeKvDb(tempDir(), records, { valueSize: VALUE_SIZE, pageSize: PAGE_SIZE, pages: PAGES, choices: 2 });
  db = readFileSync(file);
  const textFile = makeTextKvDb(tempDir(), TEXT_RECORDS, { maxValueSize: 40 });
  [parties, textParties] = await Promise.all([
    // The first pair serves the text table a second time, as its table `text` (issue 38).
    startParties({ db: file, corsOrigins: [web.origin], tables: { text: textFile } }),
    startParties({ db: textFile, corsOrigins: [web.origin] }),
  ]);
  browser = await launchChromium();
  page = await browser.context.newPage();
  await page.goto(`${web.origin}/?a=${encodeURIComponent(parties.a.url)}&b=${encodeURIComponent(parties.b.url)}`);
  await page.waitForFunction(() => document.getElementById("status")?.dataset.state === "ok" || document.getElementById("status")?.dataset.state === "error");
});
after(async () => {
  await browser?.close();
  web?.server.close();
  await parties?.stop();
  await textParties?.stop();
});

test("the page connected to both parties across origins (CORS)", async () => {
  assert.equal(await page.locator("#status").getAttribute("data-state"), "ok", await page.locator("#status").textContent() ?? "");
  assert.match((await page.locator("#info").textContent()) ?? "", new RegExp(`^${PAGES} pages of ${PAGE_SIZE} B \\(domain 10 bits\\).*key-value: 2 choices`));
});

test("pages fetched in the browser are exact (held answer, SSE and long-poll), each mode its own requests", async () => {
  const indices = [0, 1, 127, 128, PAGES - 1];
  // What Chromium itself sent to the parties (CORS preflights aside), as its network log shows.
  const seen: string[] = [];
  const partyOrigins = [parties.a.url, parties.b.url];
  const onResponse = async (response: Response) => {
    const request = response.request();
    const url = new URL(request.url());
    if (!partyOrigins.includes(url.origin) || request.method() === "OPTIONS") return;
    const applied = (await response.allHeaders())["preference-applied"];
    seen.push(`${request.method()} ${url.pathname.replace(/[0-9a-f]{32}/, "{id}")} → ${response.status()}${applied ? ` (${applied})` : ""}`);
  };
  page.on("response", onResponse);
  const expected = {
    inline: ["POST /v1/queries → 200 (wait)"],
    sse: ["POST /v1/queries → 202", "GET /v1/queries/{id}/events → 200"],
    poll: ["POST /v1/queries → 202", "GET /v1/queries/{id} → 200"],
  };
  for (const wait of ["inline", "sse", "poll"] as const) {
    seen.length = 0;
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
    // connect reads the info; the lookup does not read it again (one round trip by default)
    const perParty = ["GET /v1/info → 200", ...expected[wait]];
    await waitUntil(() => seen.length >= 2 * perParty.length);
    assert.deepEqual(seen.sort(), [...perParty, ...perParty].sort(), wait);
  }
  page.off("response", onResponse);
});

test("the demo UI shows the page, the time, and the same shape of query at both parties", async () => {
  await page.fill("#page-index", "777");
  await page.click("#get-page");
  await page.waitForFunction(() => document.getElementById("status")?.dataset.state !== "busy");
  const statusText = (await page.locator("#status").textContent()) ?? "";
  assert.match(statusText, /^page 777: 256 B at epoch 0 in [0-9.]+ ms$/);
  assert.equal(await page.locator("#value").getAttribute("data-hex"), toHex(pageFromFile(db, 777)));
  assert.equal(await page.locator("#shape").getAttribute("data-same"), "true");
  // per party: the query answered with its result (the party held it); the info was read at connect
  const rows = await page.locator("#exchanges tr").allTextContents();
  assert.equal(rows.length, 1);
  assert.match(rows[0], /POST \/v1\/queries \(Prefer: wait=25\) · \d+ B → 200/);
});

test("key-value lookups in the browser: values exact, absent keys null", async () => {
  const picks = [0, 1, 500, 1999];
  const got = await page.evaluate(
    async ({ a, b, keys }) => {
      const { connect, toHex, fromHex } = (window as any).pirq;
      const pirq = await connect(a, b);
      const one = await pirq.get(fromHex(keys[0]));
      const many = await pirq.getMany([...keys.map((k: string) => fromHex(k)), new TextEncoder().encode("user:9999")]);
      return { one: one && toHex(one), many: many.values.map((v: Uint8Array | null) => v && toHex(v)) };
    },
    { a: parties.a.url, b: parties.b.url, keys: picks.map((k) => toHex(records[k][0])) },
  );
  assert.equal(got.one, toHex(records[0][1]));
  assert.deepEqual(got.many, [...picks.map((k) => toHex(records[k][1])), null]);
});

test("the demo UI looks up a key: absent, then present, same shape", async () => {
  await page.fill("#kv-key", "user:12345");
  await page.click("#get-key");
  await page.waitForFunction(() => document.getElementById("status")?.dataset.state !== "busy");
  assert.match((await page.locator("#status").textContent()) ?? "", /^key absent at epoch 0 in [0-9.]+ ms$/);
  assert.equal(await page.locator("#value").getAttribute("data-hex"), "absent");
  const absentRows = await page.locator("#exchanges tr").allTextContents();

  await page.fill("#kv-key", "user:0042");
  await page.click("#get-key");
  await page.waitForFunction(() => document.getElementById("status")?.dataset.state !== "busy");
  assert.match((await page.locator("#status").textContent()) ?? "", /^value of 32 B at epoch 0 in [0-9.]+ ms$/);
  assert.equal(await page.locator("#value").getAttribute("data-hex"), toHex(records[42][1]));
  assert.equal(await page.locator("#shape").getAttribute("data-same"), "true");
  assert.match((await page.locator("#shape").textContent()) ?? "", /2 DPF keys of one length/);
  // an absent key and a present one: the same requests of the same sizes
  assert.deepEqual(await page.locator("#exchanges tr").allTextContents(), absentRows);
  if (process.env.PIRQ_SCREENSHOT) await page.screenshot({ path: process.env.PIRQ_SCREENSHOT, fullPage: true });
});

test("the browser example (examples/browser.html) looks up a page and a key", async () => {
  const example = await browser.context.newPage();
  try {
    const base = `${web.origin}/example.html?a=${encodeURIComponent(parties.a.url)}&b=${encodeURIComponent(parties.b.url)}`;
    // This table records hex keys and values: the key is given as hex, the value shown as hex.
    for (const [query, expected] of [["&page=640", toHex(pageFromFile(db, 640))], [`&key=${toHex(records[42][0])}`, toHex(records[42][1])], [`&key=${toHex(new TextEncoder().encode("nobody"))}`, "absent"]]) {
      await example.goto(base + query);
      await example.waitForFunction(() => document.getElementById("out")?.dataset.state !== undefined);
      assert.equal(await example.locator("#out").getAttribute("data-state"), "ok", (await example.locator("#out").textContent()) ?? "");
      assert.equal(await example.locator("#out").textContent(), expected, query);
    }
  } finally {
    await example.close();
  }
});

test("the table option in the browser: a named table of the same parties, on its own routes", async () => {
  const partyOrigins = [parties.a.url, parties.b.url];
  const seen: string[] = [];
  const onResponse = (response: Response) => {
    const request = response.request();
    const url = new URL(request.url());
    if (partyOrigins.includes(url.origin) && request.method() !== "OPTIONS") seen.push(`${request.method()} ${url.pathname} → ${response.status()}`);
  };
  page.on("response", onResponse);
  const got = await page.evaluate(async ({ a, b }) => {
    const { connect } = (window as any).pirq;
    const text = await connect(a, b, { table: "text" });
    const byDefault = await connect(a, b);
    let unknown = "";
    try {
      await connect(a, b, { table: "nothing" });
    } catch (e) {
      unknown = (e as { code: string }).code;
    }
    return {
      text: [await text.getValue("zoë"), await text.getValue("alice@example.org"), await text.getValue("nobody")],
      // The routes without a table name are still the table `default`, fixed-size values.
      defaultValueSize: byDefault.info.kv.valueSize,
      textKind: text.info.kv.keyEncoding,
      unknown,
    };
  }, { a: parties.a.url, b: parties.b.url });
  await waitUntil(() => seen.filter((s) => s.startsWith("POST /v1/tables/text/queries")).length >= 6);
  page.off("response", onResponse);
  assert.deepEqual(got, {
    text: ["Zoë, Zürich — café ☕", "Alice, Lisbon", null],
    defaultValueSize: VALUE_SIZE,
    textKind: "utf8",
    unknown: "unknown_table",
  });
  // Each party: the text table's info and its three lookups under /v1/tables/text/, and the
  // default table's info under /v1 (the unknown table's requests aside: the first 404 may
  // cancel the other party's).
  const perParty = [
    "GET /v1/tables/text/info → 200",
    "POST /v1/tables/text/queries → 200",
    "POST /v1/tables/text/queries → 200",
    "POST /v1/tables/text/queries → 200",
    "GET /v1/info → 200",
  ];
  const known = () => seen.filter((s) => !s.includes("/nothing/"));
  await waitUntil(() => known().length >= 2 * perParty.length);
  assert.deepEqual(known().sort(), [...perParty, ...perParty].sort());
});

test("getValue in the browser on a text table: string keys read as text, text values back, absent null", async () => {
  const got = await page.evaluate(async ({ a, b }) => {
    const { connect } = (window as any).pirq;
    const pirq = await connect(a, b);
    const many = await pirq.getMany(["1234", "nobody", new TextEncoder().encode("zoë")]);
    return {
      encodings: [pirq.info.kv.keyEncoding, pirq.info.kv.valueEncoding, many.keyEncoding, many.valueEncoding],
      hexLooking: await pirq.getValue("1234"),
      // "1234" is text here, so its hex digits are another key (absent).
      hexDigits: await pirq.getValue("31323334"),
      address: await pirq.getValue("alice@example.org"),
      nonAscii: await pirq.getValue("zoë"),
      bytesKey: await pirq.getValue(new TextEncoder().encode("alice@example.org")),
      user: await pirq.getValue("user-199"),
      absent: await pirq.getValue("carol@example.org"),
      has: [await pirq.has("user-0"), await pirq.has("user-200")],
      many: many.values.map((v: Uint8Array | null) => v && new TextDecoder().decode(v)),
    };
  }, { a: textParties.a.url, b: textParties.b.url });
  assert.deepEqual(got, {
    encodings: ["utf8", "utf8", "utf8", "utf8"],
    hexLooking: "abcd",
    hexDigits: null,
    address: "Alice, Lisbon",
    nonAscii: "Zoë, Zürich — café ☕",
    bytesKey: "Alice, Lisbon",
    user: "profile of user 199",
    absent: null,
    has: [true, false],
    many: ["abcd", null, "Zoë, Zürich — café ☕"],
  });
});

test("the browser example looks a text key up in a text table and shows the text", async () => {
  const example = await browser.context.newPage();
  try {
    const base = `${web.origin}/example.html?a=${encodeURIComponent(textParties.a.url)}&b=${encodeURIComponent(textParties.b.url)}`;
    for (const [key, expected] of [["alice@example.org", "Alice, Lisbon"], ["zoë", "Zoë, Zürich — café ☕"], ["1234", "abcd"], ["carol@example.org", "absent"]]) {
      await example.goto(`${base}&key=${encodeURIComponent(key)}`);
      await example.waitForFunction(() => document.getElementById("out")?.dataset.state !== undefined);
      assert.equal(await example.locator("#out").getAttribute("data-state"), "ok", (await example.locator("#out").textContent()) ?? "");
      assert.equal(await example.locator("#out").textContent(), expected, key);
    }
  } finally {
    await example.close();
  }
});

test("the demo UI on a text table shows the value as text", async () => {
  const demo = await browser.context.newPage();
  try {
    await demo.goto(`${web.origin}/?a=${encodeURIComponent(textParties.a.url)}&b=${encodeURIComponent(textParties.b.url)}`);
    await demo.waitForFunction(() => ["ok", "error"].includes(document.getElementById("status")?.dataset.state ?? ""));
    await demo.fill("#kv-key", "zoë");
    await demo.click("#get-key");
    await demo.waitForFunction(() => document.getElementById("status")?.dataset.state !== "busy");
    const value = new TextEncoder().encode("Zoë, Zürich — café ☕");
    assert.match((await demo.locator("#status").textContent()) ?? "", new RegExp(`^value of ${value.length} B at epoch 0`));
    assert.equal(await demo.locator("#value").textContent(), "Zoë, Zürich — café ☕");
    assert.equal(await demo.locator("#value").getAttribute("data-hex"), toHex(value));
  } finally {
    await demo.close();
  }
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

test("no WARN or ERROR lines in the parties' logs", () => {
  for (const p of [parties.a, parties.b, textParties.a, textParties.b]) for (const proc of [p.gateway, p.worker]) assert.deepEqual(warnings(proc), [], proc.name);
});
