// Benchmark: what verifying a signed page costs the client (issue 27, SIGNED §3), in Node and in
// headless Chromium, with WebCrypto's Ed25519 and with the @noble/curves fallback.
//   npm run bench:verify     (builds first; prints a markdown table)
// A page lookup verifies one page; a key-value lookup verifies each of its `choices` candidate
// pages. The work per page is `checkPage`: read the tail, build M(p) (the page's usable bytes
// and 60 bytes of header), one Ed25519 verification. Pages are signed here with the spec's
// vector key (SIGNED §2), so every check passes, as for an honest answer.
import { ed25519 } from "@noble/curves/ed25519.js";
import { fromHex, toHex } from "../src/bytes.js";
import { checkPage, ed25519Verifier, pageMessage, VerifierBackend } from "../src/signed.js";
import { launchChromium, serveWeb } from "../test/browser.js";

const SECRET = fromHex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
const PUBLIC = ed25519.getPublicKey(SECRET);
const DB_ID = new Uint8Array(32).fill(7);
const PAGE_SIZES = [256, 4096, 65536];
const ROUNDS = 15;
const BACKENDS: VerifierBackend[] = ["webcrypto", "noble"];

/** One signed page of `size` bytes at index 12345. */
function signedPage(size: number): Uint8Array {
  const usable = new Uint8Array(size - 72).map((_, i) => (i * 31) & 0xff);
  const page = new Uint8Array(size);
  page.set(usable);
  page.set(ed25519.sign(pageMessage(DB_ID, 12345, 0, usable), SECRET), size - 64);
  return page;
}

/**
 * Microseconds per verified page over ROUNDS runs of `count` checks each, after a warm-up:
 * [median, fastest]. Written to run as is in the browser too (its source is sent there).
 */
async function measure(check: () => Promise<unknown>, count: number, rounds: number): Promise<[number, number]> {
  for (let i = 0; i < Math.min(count, 50); i++) if (!(await check())) throw new Error("a signed page failed to verify");
  const times: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const t0 = performance.now();
    for (let i = 0; i < count; i++) await check();
    times.push(((performance.now() - t0) * 1000) / count);
  }
  times.sort((a, b) => a - b);
  return [times[Math.floor(rounds / 2)], times[0]];
}

const count = (backend: VerifierBackend) => Number(process.env.PIRQ_BENCH_CHECKS ?? (backend === "webcrypto" ? 400 : 40));
const pages = PAGE_SIZES.map(signedPage);

const node: Record<string, [number, number]> = {};
for (const backend of BACKENDS) {
  const verifier = await ed25519Verifier(PUBLIC, backend);
  for (const [i, size] of PAGE_SIZES.entries()) {
    node[`${backend} ${size}`] = await measure(() => checkPage(verifier, DB_ID, 12345, pages[i]), count(backend), ROUNDS);
  }
}

const web = await serveWeb();
const browser = await launchChromium();
const tab = await browser.context.newPage();
await tab.goto(`${web.origin}/`);
await tab.waitForFunction(() => (window as any).pirq !== undefined);
const userAgent = await tab.evaluate(() => navigator.userAgent);
const inBrowser: Record<string, [number, number]> = await tab.evaluate(
  async ({ backends, sizes, pages, counts, rounds, publicKey, dbId, measureSrc }) => {
    const { ed25519Verifier, checkPage, fromHex } = (window as any).pirq;
    const measureFn = new Function(`return ${measureSrc}`)();
    const out: Record<string, [number, number]> = {};
    for (const backend of backends) {
      const verifier = await ed25519Verifier(fromHex(publicKey), backend);
      for (const [i, size] of sizes.entries()) {
        const page = fromHex(pages[i]);
        out[`${backend} ${size}`] = await measureFn(() => checkPage(verifier, fromHex(dbId), 12345, page), counts[backend], rounds);
      }
    }
    return out;
  },
  {
    backends: BACKENDS, sizes: PAGE_SIZES, pages: pages.map(toHex), counts: { webcrypto: count("webcrypto"), noble: count("noble") },
    rounds: ROUNDS, publicKey: toHex(PUBLIC), dbId: toHex(DB_ID), measureSrc: measure.toString(),
  },
);
await browser.close();
web.server.close();

console.log(`node ${process.version}; browser: ${userAgent}`);
console.log(`checks per run: webcrypto ${count("webcrypto")}, noble ${count("noble")}; ${ROUNDS} runs: median (fastest), µs per verified page\n`);
console.log("| backend | page size | Node | Chromium |");
console.log("|---|---:|---:|---:|");
const fmt = ([median, fastest]: [number, number]) => `${median.toFixed(1)} (${fastest.toFixed(1)})`;
for (const backend of BACKENDS) for (const size of PAGE_SIZES) console.log(`| ${backend} | ${size} | ${fmt(node[`${backend} ${size}`])} | ${fmt(inBrowser[`${backend} ${size}`])} |`);
