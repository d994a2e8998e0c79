// A client process for fake-party.test.ts's memory test: one lookup against the parties at
// argv[2] (A) and argv[3] (B), then prints its error code and its peak resident memory as JSON.
// Its own process, so that the peak is the client's alone.
import { connect, isPirqError } from "../src/index.js";

const baselineRssBytes = process.memoryUsage().rss;
let code = "ok";
try {
  const pirq = await connect(process.argv[2], process.argv[3], { timeoutMs: 30_000 });
  await pirq.getPage(1);
} catch (e) {
  code = isPirqError(e) ? e.code : String(e);
}
// maxRSS: the peak resident set of this process so far, in KiB.
console.log(JSON.stringify({ code, maxRssBytes: process.resourceUsage().maxRSS * 1024, baselineRssBytes }));
