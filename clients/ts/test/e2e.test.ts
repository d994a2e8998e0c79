// The client against real parties (redis-server + pirq-gateway + pirq-worker each), in Node:
// pages exact at every wait mode (the answer held in the submit, SSE, long-poll), epoch pinning, errors carrying the server's code, and a party
// that is down reported as such.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { connect, Party, PirqError, generateKeys } from "../src/index.js";
import { freePort, makePageDb, pageFromFile, Parties, startParties, tempDir, warnings } from "./parties.js";

const PAGES = 1000; // domain 10 bits: a tree of 3 levels above the leaves
const PAGE_SIZE = 256;
let parties: Parties;
let db: Buffer;

before(async () => {
  const dir = tempDir();
  const file = makePageDb(dir, PAGES, PAGE_SIZE, 7);
  db = readFileSync(file);
  parties = await startParties({ db: file });
});
after(async () => {
  await parties?.stop();
});

test("connect reads both parties' info and agrees on the database", async () => {
  const pirq = await connect(parties.a.url, parties.b.url);
  assert.equal(pirq.info.numPages, PAGES);
  assert.equal(pirq.info.pageSize, PAGE_SIZE);
  assert.equal(pirq.info.domainBits, 10);
  assert.deepEqual(pirq.info.epoch, { oldest: 0, newest: 0 });
});

/** A fetch that records every request it makes: `METHOD path → status` (+ `Preference-Applied`). */
function recordingFetch(): { fetch: typeof fetch; seen: string[] } {
  const seen: string[] = [];
  const recording = (async (input: RequestInfo | URL, init: RequestInit = {}) => {
    const response = await fetch(input, init);
    const applied = response.headers.get("preference-applied");
    const path = new URL(String(input)).pathname.replace(/[0-9a-f]{32}/, "{id}");
    seen.push(`${init.method ?? "GET"} ${path} → ${response.status}${applied ? ` (${applied})` : ""}`);
    return response;
  }) as typeof fetch;
  return { fetch: recording, seen };
}

test("a lookup is one round trip: the info read at connect is kept, the party holds the answer (Prefer: wait)", async () => {
  const { fetch, seen } = recordingFetch();
  const pirq = await connect(parties.a.url, parties.b.url, { fetch });
  assert.deepEqual(seen.sort(), ["GET /v1/info → 200", "GET /v1/info → 200"]);
  seen.length = 0;
  const indices = [0, 1, 127, 128, 500, PAGES - 1];
  const result = await pirq.getPages(indices);
  indices.forEach((i, k) => assert.deepEqual(result.pages[k], pageFromFile(db, i), `page ${i}`));
  assert.equal(result.digest, pirq.info.parties[0].digest);
  // Every request that left the client, at both parties: one submit answered with the result,
  // honoured by the gateway; no info, no event stream, no status read.
  assert.deepEqual(seen.sort(), ["POST /v1/queries → 200 (wait)", "POST /v1/queries → 200 (wait)"]);
  for (const ex of result.exchanges) {
    assert.deepEqual(ex.map((e) => `${e.method} ${e.path} ${e.prefer ?? "-"} ${e.status}`), ["POST /v1/queries wait=25 200"]);
  }
  for (const i of [2, 640]) assert.deepEqual(await pirq.getPage(i), pageFromFile(db, i), `page ${i}`);
  assert.equal(seen.length, 6, seen.join(", "));
});

test("with wait: \"sse\" a query is submitted (202) and waited for by its events, as before", async () => {
  const { fetch, seen } = recordingFetch();
  const pirq = await connect(parties.a.url, parties.b.url, { fetch, wait: "sse" });
  for (const i of [0, 1, 127, 128, 500, PAGES - 1]) {
    seen.length = 0;
    assert.deepEqual(await pirq.getPage(i), pageFromFile(db, i), `page ${i}`);
    const perParty = ["POST /v1/queries → 202", "GET /v1/queries/{id}/events → 200"];
    assert.deepEqual(seen.sort(), [...perParty, ...perParty].sort(), `page ${i}`);
  }
});

test("several pages in one query, waiting by long-poll; both parties see the same shape", async () => {
  const pirq = await connect(parties.a.url, parties.b.url, { wait: "poll" });
  const indices = [3, 999, 3, 640, 12];
  const result = await pirq.getPages(indices);
  assert.equal(result.epoch, 0);
  indices.forEach((i, k) => assert.deepEqual(result.pages[k], pageFromFile(db, i), `page ${i}`));
  const [ea, eb] = result.exchanges;
  const shape = (ex: typeof ea) => ex.map((e) => `${e.method} ${e.path.replace(/[0-9a-f]{32}/, "{id}")} ${e.requestBytes} ${e.prefer ?? "-"} ${e.status}`);
  assert.deepEqual(shape(ea), shape(eb));
  assert.ok(ea.some((e) => e.method === "POST" && e.requestBytes > 0 && e.status === 202 && e.prefer === undefined));
  assert.ok(ea.some((e) => e.path.startsWith("/v1/queries/") && !e.path.endsWith("/events") && e.status === 200));
});

test("a query larger than the key limit is split into chunks", async () => {
  const pirq = await connect(parties.a.url, parties.b.url);
  const indices = Array.from({ length: 70 }, (_, k) => (k * 37) % PAGES);
  const result = await pirq.getPages(indices);
  indices.forEach((i, k) => assert.deepEqual(result.pages[k], pageFromFile(db, i)));
  assert.equal(result.exchanges[0].filter((e) => e.method === "POST").length, 2);
});

test("an epoch outside the window: 410 epoch_unavailable with the window", async () => {
  const pirq = await connect(parties.a.url, parties.b.url);
  await assert.rejects(pirq.getPage(5, { epoch: 9 }), (e: unknown) => {
    assert.ok(e instanceof PirqError);
    assert.equal(e.code, "epoch_unavailable");
    assert.equal(e.status, 410);
    assert.deepEqual(e.window, { oldest: 0, newest: 0 });
    return true;
  });
});

test("server error codes come through: a key of the wrong domain", async () => {
  const party = new Party("A", parties.a.url);
  const [k0] = generateKeys(12, 5);
  await assert.rejects(party.submit([k0], undefined), (e: unknown) => {
    assert.ok(e instanceof PirqError);
    assert.equal(e.code, "key_domain_mismatch");
    assert.equal(e.status, 400);
    assert.equal(e.keyIndex, 0);
    return true;
  });
  const pirq = await connect(parties.a.url, parties.b.url);
  await assert.rejects(pirq.getPage(PAGES), (e: unknown) => e instanceof PirqError && e.code === "invalid_argument");
});

test("a party that is down is named in a party_unreachable error", async () => {
  const nobody = `http://127.0.0.1:${await freePort()}`;
  await assert.rejects(connect(parties.a.url, nobody), (e: unknown) => {
    assert.ok(e instanceof PirqError);
    assert.equal(e.code, "party_unreachable");
    assert.match(e.message, /party B/);
    assert.match(e.message, new RegExp(nobody));
    return true;
  });
});

test("parties serving different contents are refused (database digest, SPEC §2.1)", async () => {
  const dir = tempDir();
  const other = await startParties({ db: makePageDb(dir, PAGES, PAGE_SIZE, 7), dbB: makePageDb(dir, PAGES, PAGE_SIZE, 8) });
  try {
    // Same geometry, different bytes: without the digest the XOR would be a wrong page that
    // looks like any other.
    const [ia, ib] = await Promise.all([new Party("A", other.a.url).info(), new Party("B", other.b.url).info()]);
    assert.match(ia.digest ?? "", /^[0-9a-f]{64}$/);
    assert.notEqual(ia.digest, ib.digest);
    await assert.rejects(connect(other.a.url, other.b.url), (e: unknown) => e instanceof PirqError && e.code === "parties_disagree" && /digest/.test(e.message));
  } finally {
    await other.stop();
  }
});

test("a party that goes down after connect: without workers, then without its gateway, is named", async () => {
  // (runs last: it stops party B)
  const pirq = await connect(parties.a.url, parties.b.url, { timeoutMs: 2000 });
  assert.deepEqual(await pirq.getPage(2), pageFromFile(db, 2));
  const named = (code: string) => (e: unknown) => {
    assert.ok(e instanceof PirqError, String(e));
    assert.equal(e.code, code, e.message);
    assert.equal(e.party, `B (${parties.b.url})`);
    return true;
  };
  await parties.b.worker.stop(); // B accepts the query, but nobody answers it
  // The lookup trusts the info read at connect (one round trip): it waits, and ends at its
  // deadline naming B; the next one reads both infos again and says why.
  await assert.rejects(pirq.getPage(2), named("timeout"));
  await assert.rejects(pirq.getPage(2), named("no_workers"));
  await parties.b.gateway.stop();
  await assert.rejects(pirq.getPage(2), named("party_unreachable"));
});

test("no WARN or ERROR lines in the parties' logs", () => {
  for (const p of [parties.a, parties.b]) for (const proc of [p.gateway, p.worker]) assert.deepEqual(warnings(proc), [], proc.name);
});
