// The demo page in headless Chromium, for scripts/demo.sh: serves dist/web on --port, opens the
// page against two running parties, looks up a page and/or keys through the page's own buttons,
// prints what the page shows, and checks the page against the database file (--db) and each
// key's value against --expect (hex, or "absent"; one per --key, in order).
//
//   node dist/demo/headless.js --a URL --b URL --port P [--table NAME] [--index I --db FILE]
//        [--key TEXT|0xHEX --expect HEX|absent]... [--screenshot PNG] [--trust-cert PEM]...
// --table: the parties' table the page looks up in (its `?table=`; default: the table `default`).
// The gateways must allow the origin http://127.0.0.1:P (--cors-origin). Parties over https
// with certificates of a private CA: --trust-cert names the PEM files (the party certificates,
// the CA's) whose keys this Chromium accepts (test/browser.ts, spkiList).
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { launchChromium, serveWeb } from "../test/browser.js";

const { values: args } = parseArgs({
  options: {
    a: { type: "string" },
    b: { type: "string" },
    port: { type: "string", default: "0" },
    table: { type: "string" },
    index: { type: "string" },
    key: { type: "string", multiple: true, default: [] },
    expect: { type: "string", multiple: true, default: [] },
    db: { type: "string" },
    screenshot: { type: "string" },
    "trust-cert": { type: "string", multiple: true, default: [] },
  },
});
if (!args.a || !args.b) throw new Error("--a and --b (the parties' URLs) are required");

const web = await serveWeb(Number(args.port));
const browser = await launchChromium({ trustCerts: args["trust-cert"] });
let failed = false;
try {
  const page = await browser.context.newPage();
  const table = args.table ? `&table=${encodeURIComponent(args.table)}` : "";
  await page.goto(`${web.origin}/?a=${encodeURIComponent(args.a)}&b=${encodeURIComponent(args.b)}${table}`);
  const settled = () => page.waitForFunction(() => !["busy", undefined].includes(document.getElementById("status")?.dataset.state));
  await settled();
  const show = async (what: string) => {
    const status = (await page.locator("#status").textContent()) ?? "";
    console.log(`   ${what}: ${status}`);
    if ((await page.locator("#status").getAttribute("data-state")) !== "ok") failed = true;
    const shape = await page.locator("#shape").textContent();
    if (shape) console.log(`   ${shape}`);
  };
  await show("connect");
  console.log(`   ${await page.locator("#info").textContent()}`);
  if (args.index !== undefined) {
    await page.fill("#page-index", args.index);
    await page.click("#get-page");
    await settled();
    await show("lookup");
    if (args.db) {
      const db = readFileSync(args.db);
      const pageSize = db.readUInt32LE(8);
      const i = Number(args.index);
      const expected = db.subarray(4096 + i * pageSize, 4096 + (i + 1) * pageSize).toString("hex");
      const same = (await page.locator("#value").getAttribute("data-hex")) === expected;
      console.log(`   page ${i} ${same ? "identical to" : "DIFFERS from"} the database file`);
      if (!same) failed = true;
    }
  }
  for (const [k, key] of args.key.entries()) {
    await page.fill("#kv-key", key);
    await page.click("#get-key");
    await settled();
    await show(`key ${key}`);
    console.log(`   the page shows: ${((await page.locator("#value").textContent()) ?? "").slice(0, 200)}`);
    const expected = args.expect[k];
    if (expected !== undefined) {
      const got = await page.locator("#value").getAttribute("data-hex");
      console.log(`   ${got === expected ? "as expected" : `EXPECTED ${expected}, the page shows ${got}`}`);
      if (got !== expected) failed = true;
    }
  }
  if (args.screenshot) {
    await page.screenshot({ path: args.screenshot, fullPage: true });
    console.log(`   screenshot: ${args.screenshot}`);
  }
} finally {
  await browser.close();
  web.server.close();
}
if (failed) process.exit(1);
