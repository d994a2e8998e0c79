// Benchmark: lookups per second and latency of one client against one pair of real CPU parties
// (redis-server + pirq-gateway + pirq-worker each, on this machine, started here), with the info
// kept from connect (one request per party a lookup, the default since issue 24) and with both
// infos read again before every lookup (what the client did before: `agree()` then the lookup,
// two round trips). Sequential lookups of one page each, closed loop, one client.
//   npm run build && node dist/bench/lookups.js [lookups per round, default 300] [rounds, default 3]
import { cpus, loadavg } from "node:os";
import { connect } from "../src/index.js";
import { makePageDb, startParties, tempDir } from "../test/parties.js";

const LOOKUPS = Number(process.argv[2] ?? 300);
const ROUNDS = Number(process.argv[3] ?? 3);
const PAGES = 4096;
const PAGE_SIZE = 1024;

const parties = await startParties({ db: makePageDb(tempDir(), PAGES, PAGE_SIZE, 11) });
try {
  const pirq = await connect(parties.a.url, parties.b.url);
  const run = async (rereadInfo: boolean) => {
    const times: number[] = [];
    const started = performance.now();
    for (let i = 0; i < LOOKUPS; i++) {
      const t0 = performance.now();
      if (rereadInfo) await pirq.agree();
      await pirq.getPage((i * 2654435761) % PAGES);
      times.push(performance.now() - t0);
    }
    const seconds = (performance.now() - started) / 1000;
    times.sort((a, b) => a - b);
    const q = (p: number) => times[Math.min(times.length - 1, Math.floor(p * times.length))];
    return { perSecond: LOOKUPS / seconds, p50: q(0.5), p99: q(0.99), max: times[times.length - 1] };
  };
  for (let i = 0; i < 20; i++) await pirq.getPage(i); // warm-up
  console.log(`${PAGES} pages of ${PAGE_SIZE} B, ${LOOKUPS} sequential lookups a round, ${ROUNDS} rounds alternating; ${cpus().length} CPUs, load ${loadavg().map((l) => l.toFixed(1)).join(" ")}; node ${process.version}\n`);
  console.log("| round | info | lookups/s | p50 ms | p99 ms | max ms |");
  console.log("|---:|---|---:|---:|---:|---:|");
  for (let r = 1; r <= ROUNDS; r++) {
    for (const reread of [true, false]) {
      const m = await run(reread);
      console.log(`| ${r} | ${reread ? "read before every lookup (before)" : "kept from connect (after)"} | ${m.perSecond.toFixed(1)} | ${m.p50.toFixed(2)} | ${m.p99.toFixed(2)} | ${m.max.toFixed(2)} |`);
    }
  }
  console.log(`\nload after: ${loadavg().map((l) => l.toFixed(1)).join(" ")}`);
} finally {
  await parties.stop();
}
