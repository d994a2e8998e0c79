// Key-value lookups (docs/spec/kv.md) in Node against real parties serving a database built by
// `pirq kv build`: every looked-up value exact, absent keys null, the same shape of query for
// present and absent keys, and `get` on a page database refused.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { connect, PirqError, toHex } from "../src/index.js";
import { kvRecords, makeKvDb, makePageDb, Parties, startParties, tempDir, warnings } from "./parties.js";

const VALUE_SIZE = 32;
const records = kvRecords(2000, VALUE_SIZE);
let parties: Parties;

before(async () => {
  const db = makeKvDb(tempDir(), records, { valueSize: VALUE_SIZE, pageSize: 256, pages: 1000, choices: 2 });
  parties = await startParties({ db });
});
after(async () => {
  await parties?.stop();
});

test("connect reads the kv layout from /v1/info", async () => {
  const pirq = await connect(parties.a.url, parties.b.url);
  assert.ok(pirq.info.kv);
  assert.equal(pirq.info.kv.choices, 2);
  assert.equal(pirq.info.kv.valueSize, VALUE_SIZE);
  assert.equal(pirq.info.kv.slotsPerPage, Math.floor(256 / (16 + VALUE_SIZE)));
});

test("present keys give their exact values, one by one and in one query", async () => {
  const pirq = await connect(parties.a.url, parties.b.url);
  for (const k of [0, 1, 999, 1999]) {
    const [key, value] = records[k];
    const got = await pirq.get(key);
    assert.ok(got, `record ${k} found`);
    assert.equal(toHex(got), toHex(value), `record ${k}`);
  }
  const picks = Array.from({ length: 40 }, (_, i) => (i * 53) % records.length); // 80 DPF keys: 2 queries
  const result = await pirq.getMany(picks.map((k) => records[k][0]));
  picks.forEach((k, i) => assert.equal(toHex(result.values[i]!), toHex(records[k][1]), `record ${k}`));
  assert.equal(result.dpfKeys, 80);
  assert.equal(result.exchanges[0].filter((e) => e.method === "POST").length, 2);
});

test("absent keys are null, and the parties see the same shape as for present ones", async () => {
  const pirq = await connect(parties.a.url, parties.b.url);
  const enc = new TextEncoder();
  const absent = await pirq.getMany([enc.encode("user:2000"), enc.encode("nobody")]);
  assert.deepEqual(absent.values, [null, null]);
  const present = await pirq.getMany([records[5][0], records[6][0]]);
  assert.ok(present.values.every((v) => v !== null));
  const shape = (r: typeof absent) =>
    r.exchanges.map((ex) => ex.map((e) => `${e.method} ${e.path.replace(/[0-9a-f]{32}/, "{id}")} ${e.requestBytes}`));
  // same requests and body sizes at A and at B, and the same for present and absent keys
  assert.deepEqual(shape(absent)[0], shape(absent)[1]);
  assert.deepEqual(shape(absent), shape(present));
  assert.equal(absent.dpfKeys, present.dpfKeys);
});

test("a key of a length the database does not take is an invalid_argument", async () => {
  const pirq = await connect(parties.a.url, parties.b.url);
  await assert.rejects(pirq.get(new Uint8Array(0)), (e: unknown) => e instanceof PirqError && e.code === "invalid_argument");
});

test("the Node example (examples/node.ts) looks up a key and a page from real parties", async () => {
  const example = fileURLToPath(new URL("../examples/node.js", import.meta.url));
  const run = (...args: string[]) => JSON.parse(execFileSync(process.execPath, [example, parties.a.url, parties.b.url, ...args], { encoding: "utf8" }));
  const [key, value] = records[42];
  const found = run("key", new TextDecoder().decode(key));
  assert.equal(found.value, toHex(value));
  assert.match(found.digest, /^[0-9a-f]{64}$/);
  assert.equal(run("key", "user:no-such").value, null);
  assert.equal(run("page", "7").page.length, 2 * 256);
});

test("get on a page database is not_kv", async () => {
  const pages = await startParties({ db: makePageDb(tempDir(), 300, 256, 3) });
  try {
    const pirq = await connect(pages.a.url, pages.b.url);
    await assert.rejects(pirq.get(new TextEncoder().encode("x")), (e: unknown) => e instanceof PirqError && e.code === "not_kv");
  } finally {
    await pages.stop();
  }
});

test("no WARN or ERROR lines in the parties' logs", () => {
  for (const p of [parties.a, parties.b]) for (const proc of [p.gateway, p.worker]) assert.deepEqual(warnings(proc), [], proc.name);
});
