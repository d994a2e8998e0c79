// The TypeScript client's half of ops/bench/kv-million.sh: looks keys up in the key-value table
// two running parties serve and checks every answer against what the table was built from.
//   node dist/bench/kv-check.js <party A URL> <party B URL> <expected.jsonl> [single lookups, default 10]
// expected.jsonl: one {"key": "...", "value": "..." | null} a line (null: the key must be absent).
// First `single` lookups one by one with getValue (the latency of one lookup), then all the keys
// in one getMany (the client splits them into as few queries as the parties' key limit allows).
// Prints one JSON object: counts, mismatches (must be 0) and times.
import { readFileSync } from "node:fs";
import { connect } from "../src/index.js";

const [a, b, file, singleArg] = process.argv.slice(2);
if (!a || !b || !file) {
  console.error("usage: kv-check.js <party A URL> <party B URL> <expected.jsonl> [single lookups]");
  process.exit(2);
}
const expected: { key: string; value: string | null }[] = readFileSync(file, "utf8")
  .split("\n")
  .filter((l) => l.trim() !== "")
  .map((l) => JSON.parse(l));
const single = Math.min(Number(singleArg ?? 10), expected.length);

const pirq = await connect(a, b, { timeoutMs: 600_000 });
const kv = pirq.info.kv;
if (!kv) throw new Error("the parties serve a page database, not a key-value database");
let mismatches = 0;
const check = (i: number, got: unknown) => {
  if (got !== expected[i].value) {
    mismatches++;
    if (mismatches <= 5) console.error(`key ${JSON.stringify(expected[i].key)}: got ${JSON.stringify(got)}, expected ${JSON.stringify(expected[i].value)}`);
  }
};

// One by one: each lookup its own query per party.
const times: number[] = [];
for (let i = 0; i < single; i++) {
  const t0 = performance.now();
  const value = await pirq.getValue(expected[i].key);
  times.push(performance.now() - t0);
  check(i, value);
}
times.sort((x, y) => x - y);

// All at once.
const t0 = performance.now();
const many = await pirq.getMany(expected.map((e) => e.key));
const manySeconds = (performance.now() - t0) / 1000;
const text = new TextDecoder("utf-8", { fatal: true });
many.values.forEach((v, i) => check(i, v === null ? null : text.decode(v)));

console.log(JSON.stringify({
  client: "typescript",
  node: process.version,
  pages: pirq.info.numPages,
  key_encoding: kv.keyEncoding,
  value_encoding: kv.valueEncoding,
  epoch: many.epoch,
  single_lookups: single,
  single_ms_median: times[Math.floor(times.length / 2)] ?? null,
  single_ms_max: times[times.length - 1] ?? null,
  many_lookups: expected.length,
  many_found: many.values.filter((v) => v !== null).length,
  many_seconds: manySeconds,
  mismatches,
}));
process.exit(mismatches === 0 ? 0 : 1);
