// Key-value layout version 2 against real parties (docs/spec/kv.md §2, §4): a set (keys only:
// `has`, and `get` gives an empty value for a member) and a table of variable-size values
// (each value back at its own length, the empty value included), both built by `pirq kv build`.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { connect, toHex } from "../src/index.js";
import { makeKvDb, makeTextKvDb, Parties, startParties, tempDir, warnings } from "./parties.js";

const enc = new TextEncoder();
const running: Parties[] = [];
after(async () => {
  for (const p of running) await p.stop();
});

async function parties(db: string): Promise<Parties> {
  const p = await startParties({ db });
  running.push(p);
  return p;
}

test("a set: members are present (empty value), others absent; the same query either way", async () => {
  const members = Array.from({ length: 300 }, (_, i) => enc.encode(`member:${i}`));
  const p = await parties(makeKvDb(tempDir(), members.map((k) => [k, null]), { valueSize: 0, pageSize: 256, pages: 64, choices: 2 }));
  const pirq = await connect(p.a.url, p.b.url);
  assert.equal(pirq.info.kv?.valueKind, "set");
  assert.equal(pirq.info.kv?.version, 2);
  for (const i of [0, 7, 299]) assert.equal(await pirq.has(members[i]), true, `member ${i}`);
  assert.equal(await pirq.has(enc.encode("member:300")), false);
  const result = await pirq.getMany([members[1], enc.encode("stranger"), members[2]]);
  assert.equal(result.valueKind, "set");
  assert.deepEqual(result.values.map((v) => v && v.length), [0, null, 0]);
  // present and absent: the same requests of the same sizes
  const absent = await pirq.getMany([enc.encode("a"), enc.encode("b"), enc.encode("c")]);
  const shape = (r: typeof result) => r.exchanges.map((ex) => ex.map((e) => `${e.method} ${e.path} ${e.requestBytes}`));
  assert.deepEqual(shape(absent), shape(result));
});

test("variable-size values: each back at its own length, 0 bytes to the largest", async () => {
  const MAX = 40;
  const records: [Uint8Array, Uint8Array][] = Array.from({ length: 200 }, (_, i) => [
    enc.encode(`user:${i}`),
    new Uint8Array(i % (MAX + 1)).map((_, j) => (i * 13 + j) & 255),
  ]);
  const p = await parties(makeKvDb(tempDir(), records, { maxValueSize: MAX, pageSize: 256, pages: 64, choices: 2 }));
  const pirq = await connect(p.a.url, p.b.url);
  assert.equal(pirq.info.kv?.valueKind, "variable");
  assert.equal(pirq.info.kv?.valueSize, MAX);
  const picks = [0, 1, 39, 40, 41, 123, 199];
  const result = await pirq.getMany([...picks.map((i) => records[i][0]), enc.encode("user:nobody")]);
  assert.equal(result.valueKind, "variable");
  picks.forEach((i, k) => assert.equal(toHex(result.values[k]!), toHex(records[i][1]), `user:${i} (${records[i][1].length} B)`));
  assert.equal(result.values[picks.length], null);
  assert.equal((await pirq.get(records[0][0]))?.length, 0, "a present empty value is not absent");
});

test("a text table built with no encoding flags: string keys as text, values as given (text, JSON)", async () => {
  const dir = tempDir();
  const text = await parties(makeTextKvDb(dir, [
    { key: "1234", value: "abcd" },
    { key: "alice@example.org", value: "Alice, Lisbon" },
  ], { maxValueSize: 40 }));
  const pirq = await connect(text.a.url, text.b.url);
  assert.equal(pirq.info.kv?.keyEncoding, "utf8");
  assert.equal(pirq.info.kv?.valueEncoding, "utf8");
  // A text key that looks like hex stays the text.
  assert.equal(await pirq.getValue("1234"), "abcd");
  assert.equal(await pirq.getValue("alice@example.org"), "Alice, Lisbon");
  assert.equal(await pirq.getValue("carol@example.org"), null);
  const got = await pirq.get("1234");
  assert.equal(new TextDecoder().decode(got!), "abcd");
  const many = await pirq.getMany(["1234", enc.encode("alice@example.org")]);
  assert.equal(many.keyEncoding, "utf8");
  assert.equal(many.values.filter((v) => v !== null).length, 2);

  const json = await parties(makeTextKvDb(tempDir(), [
    { key: "ann", value: { age: 31, tags: ["a", "b"] } },
    { key: "bob", value: 7 },
  ], { maxValueSize: 40, json: true }));
  const pj = await connect(json.a.url, json.b.url);
  assert.deepEqual(await pj.getValue("ann"), { age: 31, tags: ["a", "b"] });
  assert.equal(await pj.getValue("bob"), 7);
});

test("no WARN or ERROR lines in the parties' logs", () => {
  for (const p of running) for (const side of [p.a, p.b]) for (const proc of [side.gateway, side.worker]) assert.deepEqual(warnings(proc), [], proc.name);
});
