// The demo page in headless Chromium, for scripts/demo.sh: serves dist/web on --port, opens the
// page against two running parties, looks up a page (and a key, on a kv database) through the
// page's own buttons, prints what the page shows, and checks the page against the database file.
//
//   node dist/demo/headless.js --a URL --b URL --port P --index I [--key TEXT] [--db FILE] [--screenshot PNG]
// The gateways must allow the origin http://127.0.0.1:P (--cors-origin).
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { launchChromium, serveWeb } from "../test/browser.js";

const { values: args } = parseArgs({
  options: {
    a: { type: "string" },
    b: { type: "string" },
    port: { type: "string", default: "0" },
    index: { type: "string", default: "0" },
    key: { type: "string" },
    db: { type: "string" },
    screenshot: { type: "string" },
  },
});
if (!args.a || !args.b) throw new Error("--a and --b (the parties' URLs) are required");

const web = await serveWeb(Number(args.port));
const browser = await launchChromium();
let failed = false;
try {
  const page = await browser.context.newPage();
  await page.goto(`${web.origin}/?a=${encodeURIComponent(args.a)}&b=${encodeURIComponent(args.b)}`);
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
  if (args.key !== undefined) {
    await page.fill("#kv-key", args.key);
    await page.click("#get-key");
    await settled();
    await show(`key ${JSON.stringify(args.key)}`);
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
