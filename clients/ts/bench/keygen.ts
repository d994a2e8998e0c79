// Benchmark: bundle size and DPF key generation time, in Node and in headless Chromium.
//   npm run bench            (after npm run build; prints a markdown table)
// Key generation is the client's only CPU work per page: two ChaCha8 blocks per tree level.
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { join } from "node:path";
import { generateKeys } from "../src/dpf.js";
import { launchChromium, serveWeb, webRoot } from "../test/browser.js";

const DOMAINS = [10, 16, 20, 24, 30, 40];
const ROUNDS = 15;

/**
 * Microseconds per key pair over ROUNDS runs of `count` pairs each: [median, fastest]. The
 * fastest run is the one least disturbed by other processes on a shared machine.
 */
function measure(gen: (n: number, alpha: number) => unknown, n: number, count: number): [number, number] {
  for (let i = 0; i < 200; i++) gen(n, i % 2 ** n); // warm-up (JIT)
  const times: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const t0 = performance.now();
    for (let i = 0; i < count; i++) gen(n, (i * 2654435761) % 2 ** n);
    times.push(((performance.now() - t0) * 1000) / count);
  }
  times.sort((a, b) => a - b);
  return [times[Math.floor(ROUNDS / 2)], times[0]];
}

const count = Number(process.env.PIRQ_BENCH_PAIRS ?? 2000);
const node = DOMAINS.map((n) => measure(generateKeys, n, count));

const web = await serveWeb();
const browser = await launchChromium();
const page = await browser.context.newPage();
await page.goto(`${web.origin}/`);
await page.waitForFunction(() => (window as any).pirq !== undefined);
const userAgent = await page.evaluate(() => navigator.userAgent);
const inBrowser = await page.evaluate(
  ({ domains, count, rounds, measureSrc }) => {
    const gen = (window as any).pirq.generateKeys;
    const measureFn = new Function("ROUNDS", `return ${measureSrc}`)(rounds);
    return domains.map((n: number) => measureFn(gen, n, count));
  },
  { domains: DOMAINS, count, rounds: ROUNDS, measureSrc: measure.toString() },
);
await browser.close();
web.server.close();

const bundle = readFileSync(join(webRoot, "pirq.min.js"));
console.log(`bundle dist/web/pirq.min.js: ${bundle.length} B minified, ${gzipSync(bundle, { level: 9 }).length} B gzip -9`);
console.log(`node ${process.version}; browser: ${userAgent}`);
console.log(`${count} key pairs per run, ${ROUNDS} runs: median (fastest)\n`);
console.log("| domain bits n | key bytes | ChaCha8 blocks | Node µs / pair | Chromium µs / pair |");
console.log("|---:|---:|---:|---:|---:|");
const fmt = ([median, fastest]: [number, number]) => `${median.toFixed(1)} (${fastest.toFixed(1)})`;
DOMAINS.forEach((n, i) => {
  const m = Math.max(n - 7, 0);
  console.log(`| ${n} | ${35 + 17 * m} | ${2 * m} | ${fmt(node[i])} | ${fmt(inBrowser[i] as [number, number])} |`);
});
