// The client in Node against fake parties that are silent, dribble, send gigabytes or lie
// (fake-party.ts; the table is fake-scenarios.ts, shared with the Chromium test): every lookup
// ends by its deadline or sooner, with an error naming the party and the phase. Also: the
// client's memory stays bounded against a 1 GiB answer (a child process, its peak RSS), plain
// HTTP to a remote host is refused before any request, and tokens go to their own party only.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { inspect, promisify } from "node:util";
import { fileURLToPath } from "node:url";
import * as pirq from "../src/index.js";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fakePage, Fake, makeTestCa, startFakeParty } from "./fake-party.js";
import { checkOutcome, INDEX, lookupOnce, scenarioName, scenarioOptions, SCENARIOS, startScenario } from "./fake-scenarios.js";
import { startSharedFake } from "./shared-fake.js";

(globalThis as unknown as { pirq: typeof pirq }).pirq = pirq;
const open: Fake[] = [];
after(async () => {
  for (const p of open) await p.close();
});

/** Closed with the suite. */
function kept<T extends Fake>(p: T): T {
  open.push(p);
  return p;
}

async function fake(...args: Parameters<typeof startFakeParty>): Promise<Fake> {
  return kept(await startFakeParty(...args));
}

for (const s of SCENARIOS) {
  test(`${scenarioName(s)}: ${s.expect === "ok" ? "ok" : s.expect.code}`, async () => {
    const { a, b, expectedPageHex } = await startScenario(s);
    kept(a);
    kept(b);
    const outcome = await lookupOnce({ a: a.url, b: b.url, index: INDEX, options: scenarioOptions(s) });
    await checkOutcome(s, outcome, a, b, expectedPageHex);
  });
}

const childClient = fileURLToPath(new URL("./child-client.js", import.meta.url));

for (const behaviour of ["huge-answer", "huge-info", "sse-huge-line"] as const) {
  test(`memory stays bounded against ${behaviour} (1 GiB): the client process's peak RSS < 100 MB`, async () => {
    const a = kept(await startSharedFake("honest"));
    const b = kept(await startSharedFake(behaviour));
    // A separate process, so that its peak RSS is the client's alone (the fake parties live here).
    const { stdout } = await promisify(execFile)(process.execPath, [childClient, a.url, b.url], { timeout: 60_000 });
    const result = JSON.parse(stdout) as { code: string; maxRssBytes: number; baselineRssBytes: number };
    assert.equal(result.code, "too_large");
    assert.ok(result.maxRssBytes < 100e6, `peak RSS ${(result.maxRssBytes / 1e6).toFixed(1)} MB (at start ${(result.baselineRssBytes / 1e6).toFixed(1)} MB)`);
  });
}

test("https parties with a private CA: trusted through NODE_EXTRA_CA_CERTS (Node's own trust roots otherwise)", async () => {
  const dir = mkdtempSync(join(tmpdir(), "pirq-ts-ca-"));
  try {
    const { caFile, certFile, keyFile } = makeTestCa(dir);
    const a = kept(await startSharedFake("honest", { tls: { certFile, keyFile } }));
    const b = kept(await startSharedFake("honest", { tls: { certFile, keyFile } }));
    assert.match(a.url, /^https:\/\/(127\.0\.0\.1|localhost):/);
    const lookup = async (env: NodeJS.ProcessEnv) => {
      const { stdout } = await promisify(execFile)(process.execPath, [childClient, a.url, b.url], { timeout: 60_000, env });
      return JSON.parse(stdout) as { code: string; message: string };
    };
    const trusted = await lookup({ ...process.env, NODE_EXTRA_CA_CERTS: caFile });
    assert.equal(trusted.code, "ok", trusted.message);
    const { NODE_EXTRA_CA_CERTS: _, ...without } = process.env;
    const untrusted = await lookup(without);
    assert.equal(untrusted.code, "party_unreachable");
    assert.match(untrusted.message, /certificate/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("plain http:// to a remote host is refused before any request, with the reason; insecureHttp allows it", async () => {
  const requests: string[] = [];
  const spy = (async (input: RequestInfo | URL) => {
    requests.push(String(input));
    throw new TypeError("no network in this test");
  }) as typeof fetch;
  const local = await fake({ behaviour: "honest" });
  for (const remote of ["http://party-b.invalid", "http://10.0.0.1:8080", "http://127.0.0.1.invalid", "http://[::ffff:127.0.0.1]/"]) {
    await assert.rejects(pirq.connect(local.url, remote, { fetch: spy }), (e: unknown) => {
      assert.ok(pirq.isPirqError(e, "insecure_http"), String(e));
      assert.match(e.message, /party B: refusing plain HTTP/);
      assert.match(e.message, /observer of both connections/);
      assert.match(e.message, /use https:\/\//);
      return true;
    });
  }
  assert.deepEqual(requests, [], "nothing was sent, not even to the loopback party");
  // loopback in its spellings is accepted
  for (const host of ["localhost", "127.0.0.1", "127.1", "127.255.255.254", "[::1]", "[0:0:0:0:0:0:0:1]"]) {
    assert.match(new pirq.Party("A", `http://${host}:8080`).url, /^http:\/\/(localhost|127\.|\[::1\])/);
  }
  // the opt-out, by name
  await assert.rejects(pirq.connect(local.url, "http://party-b.invalid", { fetch: spy, insecureHttp: true }), (e: unknown) => pirq.isPirqError(e, "party_unreachable"));
  assert.deepEqual(requests.map((u) => new URL(u).host).sort(), [new URL(local.url).host, "party-b.invalid"].sort());
  // other schemes, credentials, queries: refused as arguments
  for (const bad of ["ftp://x.invalid", "https://user:pw@x.invalid", "https://x.invalid/?token=1", "not a url"]) {
    assert.throws(() => new pirq.Party("B", bad), (e: unknown) => pirq.isPirqError(e, "invalid_argument"), bad);
  }
});

test("tokens: each party gets its own on query routes, none on /v1/info; never in errors, logs or inspection", async () => {
  const a = await fake({ behaviour: "honest", token: "token-of-a" });
  const b = await fake({ behaviour: "honest", token: "token-of-b" });
  const client = await pirq.connect(a.url, b.url, { tokenA: "token-of-a", tokenB: "token-of-b", timeoutMs: 5000 });
  assert.equal(pirq.toHex(await client.getPage(INDEX)), pirq.toHex(fakePage(7, INDEX, 256)));
  for (const [p, token] of [[a, "token-of-a"], [b, "token-of-b"]] as const) {
    assert.deepEqual(p.seen!.map((r) => `${r.method} ${r.path.replace(/\?.*/, "")} ${r.authorization ?? "-"}`), ["GET /v1/info -", `POST /v1/queries Bearer ${token}`]);
  }
  for (const shown of [inspect(client, { depth: 5, showHidden: true }), JSON.stringify(client), String(Object.entries(client.a))]) {
    assert.doesNotMatch(shown, /token-of/);
  }
  // a wrong token: the party's 401 `unauthorized`, without the token in it
  const wrong = await pirq.connect(a.url, b.url, { tokenA: "token-of-a", tokenB: "not-the-token", timeoutMs: 5000 });
  await assert.rejects(wrong.getPage(1), (e: unknown) => {
    assert.ok(pirq.isPirqError(e, "unauthorized"), String(e));
    assert.equal(e.status, 401);
    assert.equal(e.phase, "submit");
    assert.doesNotMatch(`${e.message} ${inspect(e)}`, /not-the-token/);
    return true;
  });
  // one token for both is not an option: the parties are different operators
  await assert.rejects(pirq.connect(a.url, b.url, { token: "x" } as pirq.ConnectOptions), (e: unknown) => pirq.isPirqError(e, "invalid_argument"));
  assert.throws(() => new pirq.Party("A", a.url, { token: "two words" }), (e: unknown) => pirq.isPirqError(e, "invalid_argument"));
});

test("options are checked: a zero or negative deadline, retries, wait mode", async () => {
  const a = await fake({ behaviour: "honest" });
  const b = await fake({ behaviour: "honest" });
  for (const options of [{ timeoutMs: 0 }, { timeoutMs: -1 }, { timeoutMs: Number.NaN }, { retries: -1 }, { wait: "later" }]) {
    await assert.rejects(pirq.connect(a.url, b.url, options as pirq.ConnectOptions), (e: unknown) => pirq.isPirqError(e, "invalid_argument"), JSON.stringify(options));
  }
  await assert.rejects(pirq.connect(a.url, a.url + "/"), (e: unknown) => pirq.isPirqError(e, "same_party"));
  assert.deepEqual([(await a.stats()).info, (await b.stats()).info], [0, 0], "refused before any request");
});
