// Benchmark: what verification costs a whole lookup (issue 27): lookups per second and latency
// of one client against one pair of real CPU parties (redis-server + pirq-gateway + pirq-worker
// each, on this machine, started here) serving a database signed by `pirq db gen --sign-key`,
// without a publisher key (pages not verified) and with it (every page verified), rounds
// alternating. Sequential lookups of one page each, closed loop, one client.
//   npm run build && node dist/bench/verified-lookups.js [lookups per round, default 300] [rounds, default 3]
import { cpus, loadavg } from "node:os";
import { connect, Pirq } from "../src/index.js";
import { makePageDb, makePublisherKey, startParties, tempDir } from "../test/parties.js";

const LOOKUPS = Number(process.argv[2] ?? 300);
const ROUNDS = Number(process.argv[3] ?? 3);
const PAGES = 4096;
const PAGE_SIZE = 1024;

const dir = tempDir();
const publisher = makePublisherKey(dir, "publisher");
const parties = await startParties({ db: makePageDb(dir, PAGES, PAGE_SIZE, 11, publisher.secretFile) });
try {
  const plain = await connect(parties.a.url, parties.b.url, { warn: () => {} });
  const verified = await connect(parties.a.url, parties.b.url, { publisherKey: publisher.publicKey });
  const run = async (pirq: Pirq) => {
    const times: number[] = [];
    const started = performance.now();
    for (let i = 0; i < LOOKUPS; i++) {
      const t0 = performance.now();
      const result = await pirq.getPages([(i * 2654435761) % PAGES]);
      if (result.verified !== pirq.verifying) throw new Error("verification did not run as configured");
      times.push(performance.now() - t0);
    }
    const seconds = (performance.now() - started) / 1000;
    times.sort((a, b) => a - b);
    const q = (p: number) => times[Math.min(times.length - 1, Math.floor(p * times.length))];
    return { perSecond: LOOKUPS / seconds, p50: q(0.5), p99: q(0.99) };
  };
  for (let i = 0; i < 20; i++) for (const pirq of [plain, verified]) await pirq.getPage(i); // warm-up
  console.log(`${PAGES} signed pages of ${PAGE_SIZE} B, ${LOOKUPS} sequential lookups a round, ${ROUNDS} rounds alternating; ${cpus().length} CPUs, load ${loadavg().map((l) => l.toFixed(1)).join(" ")}; node ${process.version}; verifier ${verified.verifierBackend}\n`);
  console.log("| round | client | lookups/s | p50 ms | p99 ms |");
  console.log("|---:|---|---:|---:|---:|");
  for (let r = 1; r <= ROUNDS; r++) {
    for (const pirq of [plain, verified]) {
      const m = await run(pirq);
      console.log(`| ${r} | ${pirq.verifying ? "publisherKey: every page verified" : "no key: not verified"} | ${m.perSecond.toFixed(1)} | ${m.p50.toFixed(2)} | ${m.p99.toFixed(2)} |`);
    }
  }
  console.log(`\nload after: ${loadavg().map((l) => l.toFixed(1)).join(" ")}`);
} finally {
  await parties.stop();
}
