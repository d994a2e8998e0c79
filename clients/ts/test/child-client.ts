// A client in its own process, for fake-party.test.ts: one lookup against the parties at
// argv[2] (A) and argv[3] (B), then prints its error code (or "ok"), the error's message, and
// its peak resident memory as JSON. Its own process, so that the peak is the client's alone and
// its environment (NODE_EXTRA_CA_CERTS) its own.
import { connect, isPirqError } from "../src/index.js";

const baselineRssBytes = process.memoryUsage().rss;
let code = "ok";
let message = "";
try {
  const pirq = await connect(process.argv[2], process.argv[3], { timeoutMs: 30_000 });
  await pirq.getPage(1);
} catch (e) {
  code = isPirqError(e) ? e.code : String(e);
  message = String((e as Error).message);
}
// maxRSS: the peak resident set of this process so far, in KiB.
console.log(JSON.stringify({ code, message, maxRssBytes: process.resourceUsage().maxRSS * 1024, baselineRssBytes }));
