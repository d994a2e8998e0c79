// The client against real parties over TLS (pirq-gateway --tls-cert/--tls-key with a throwaway
// CA) that take queries only with a bearer token (--query-tokens, one file per party): in Node
// (the example, in its own process, trusting the CA through NODE_EXTRA_CA_CERTS and reading its
// tokens from PIRQ_TOKEN_A/B) and in headless Chromium (trusting the CA's certificates by
// SPKI, every wait mode: the held answer, the event stream, long-poll; the Authorization header
// through CORS). Without the CA, without a token or with the other party's: refused, by code.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { Server } from "node:http";
import { toHex } from "../src/bytes.js";
import { launchChromium, serveWeb } from "./browser.js";
import { makeTestCa } from "./fake-party.js";
import { makePageDb, pageFromFile, Parties, startParties, tempDir, warnings } from "./parties.js";

const TOKEN_A = "query-token-of-party-a";
const TOKEN_B = "query-token-of-party-b";
let parties: Parties;
let db: Buffer;
let ca: ReturnType<typeof makeTestCa>;
let web: { server: Server; origin: string };

before(async () => {
  ca = makeTestCa(mkdtempSync(join(tmpdir(), "pirq-ts-ca-")));
  const file = makePageDb(tempDir(), 500, 256, 9);
  db = readFileSync(file);
  web = await serveWeb();
  parties = await startParties({ db: file, tls: ca, queryTokens: { a: [TOKEN_A], b: [TOKEN_B] }, corsOrigins: [web.origin] });
});
after(async () => {
  web?.server.close();
  await parties?.stop();
});

const example = fileURLToPath(new URL("../examples/node.js", import.meta.url));

/** The Node example in its own process, with `env` (exits 1 on a PirqError, printing it as JSON). */
async function runExample(env: NodeJS.ProcessEnv, ...args: string[]): Promise<Record<string, unknown>> {
  const run = promisify(execFile)(process.execPath, [example, parties.a.url, parties.b.url, ...args], { env, timeout: 60_000 });
  const { stdout } = await run.catch((e: { stdout: string }) => ({ stdout: e.stdout }));
  return JSON.parse(stdout);
}

test("Node over TLS: the CA through NODE_EXTRA_CA_CERTS, each party's token from the environment; Node's own roots refuse it", async () => {
  assert.match(parties.a.url, /^https:\/\/127\.0\.0\.1:/);
  const { NODE_EXTRA_CA_CERTS: _, PIRQ_TOKEN_A: _a, PIRQ_TOKEN_B: _b, ...clean } = process.env;
  const trusted = { ...clean, NODE_EXTRA_CA_CERTS: ca.caFile };
  const ok = await runExample({ ...trusted, PIRQ_TOKEN_A: TOKEN_A, PIRQ_TOKEN_B: TOKEN_B }, "page", "321");
  assert.equal(ok.page, toHex(pageFromFile(db, 321)), JSON.stringify(ok));
  // Node's own roots do not know the CA
  const untrusted = await runExample({ ...clean, PIRQ_TOKEN_A: TOKEN_A, PIRQ_TOKEN_B: TOKEN_B }, "page", "1");
  assert.equal(untrusted.error, "party_unreachable", JSON.stringify(untrusted));
  assert.equal(untrusted.phase, "info");
  assert.match(String(untrusted.message), /certificate/);
  // no token, or each party given the other's: the party's 401 (/v1/info stays open: at submit)
  const none = await runExample(trusted, "page", "1");
  assert.equal(none.error, "unauthorized", JSON.stringify(none));
  assert.equal(none.phase, "submit");
  const swapped = await runExample({ ...trusted, PIRQ_TOKEN_A: TOKEN_B, PIRQ_TOKEN_B: TOKEN_A }, "page", "1");
  assert.equal(swapped.error, "unauthorized", JSON.stringify(swapped));
  assert.equal(swapped.phase, "submit");
  assert.doesNotMatch(JSON.stringify(swapped), /query-token-of/);
});

test("Chromium over TLS: pages exact in every wait mode (held answer, event stream, long-poll), tokens through CORS; no token is the party's 401", async () => {
  const browser = await launchChromium({ trustCerts: [ca.certFile, ca.caFile] });
  try {
    const page = await browser.context.newPage();
    await page.goto(`${web.origin}/`);
    await page.waitForFunction(() => "pirq" in window);
    for (const wait of ["inline", "sse", "poll"]) {
      const got = await page.evaluate(async ({ a, b, wait, tokenA, tokenB }) => {
        const { connect, toHex } = (window as any).pirq;
        const pirq = await connect(a, b, { wait, tokenA, tokenB, timeoutMs: 20_000 });
        const result = await pirq.getPages([0, 499, 250]);
        return { pages: result.pages.map((p: Uint8Array) => toHex(p)), statuses: result.exchanges[0].map((e: any) => `${e.method} ${e.status}`) };
      }, { a: parties.a.url, b: parties.b.url, wait, tokenA: TOKEN_A, tokenB: TOKEN_B });
      assert.deepEqual(got.pages, [0, 499, 250].map((i) => toHex(pageFromFile(db, i))), wait);
      assert.equal(got.statuses[0], wait === "inline" ? "POST 200" : "POST 202", wait);
    }
    const refused = await page.evaluate(async ({ a, b }) => {
      try {
        await (await (window as any).pirq.connect(a, b)).getPage(1);
        return null;
      } catch (e: any) {
        return { code: e.code, status: e.status, party: e.party };
      }
    }, { a: parties.a.url, b: parties.b.url });
    assert.equal(refused?.code, "unauthorized");
    assert.equal(refused?.status, 401);
  } finally {
    await browser.close();
  }
});

test("no WARN or ERROR lines in the parties' logs, and no token in them", () => {
  for (const p of [parties.a, parties.b]) {
    for (const proc of [p.gateway, p.worker]) {
      assert.deepEqual(warnings(proc), [], proc.name);
      assert.doesNotMatch(proc.logText(), /query-token-of/, proc.name);
    }
  }
});
