// Epochs with real parties (gateways with --admin-token): a client keeps the info it read at
// connect and reads it again only when an answer shows a newer epoch; while one party is ahead
// of the other (an epoch being rolled out), the party ahead alone is asked again at the other's
// epoch, so the pages are right either way.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { connect } from "../src/index.js";
import { makePageDb, pageFromFile, Parties, pushEpoch, startParties, tempDir, warnings } from "./parties.js";

const PAGES = 300;
const PAGE_SIZE = 256;
const TOKEN = "admin-token-for-the-test";
let parties: Parties;
let db: Buffer;

before(async () => {
  const file = makePageDb(tempDir(), PAGES, PAGE_SIZE, 3);
  db = readFileSync(file);
  parties = await startParties({ db: file, adminToken: TOKEN });
});
after(async () => {
  await parties?.stop();
});

/** A fetch that records `METHOD path` of every request. */
function recording(): { fetch: typeof fetch; seen: string[] } {
  const seen: string[] = [];
  return {
    seen,
    fetch: (async (input: RequestInfo | URL, init: RequestInit = {}) => {
      seen.push(`${init.method ?? "GET"} ${new URL(String(input)).pathname}`);
      return fetch(input, init);
    }) as typeof fetch,
  };
}

test("an epoch rolled out to one party, then the other: right pages throughout, info re-read once it shows", async () => {
  const { fetch, seen } = recording();
  const pirq = await connect(parties.a.url, parties.b.url, { fetch });
  const page9 = new Uint8Array(PAGE_SIZE).fill(0xe1);

  // A is ahead: unpinned, A answers epoch 1 and B epoch 0; A alone is asked again at 0.
  await pushEpoch(parties.a, TOKEN, 1, [{ index: 9, page: page9 }]);
  seen.length = 0;
  let result = await pirq.getPages([9, 10]);
  assert.equal(result.epoch, 0);
  assert.deepEqual(result.pages, [pageFromFile(db, 9), pageFromFile(db, 10)]);
  assert.deepEqual(seen.sort(), ["POST /v1/queries", "POST /v1/queries", "POST /v1/queries"]);
  assert.equal(result.exchanges[0].length, 2, "A was asked twice");
  assert.equal(result.exchanges[1].length, 1, "B once");

  // Both at epoch 1: the answer is the new page, and says the info is out of date.
  await pushEpoch(parties.b, TOKEN, 1, [{ index: 9, page: page9 }]);
  seen.length = 0;
  result = await pirq.getPages([9, 10]);
  assert.equal(result.epoch, 1);
  assert.deepEqual(result.pages, [page9, pageFromFile(db, 10)]);
  assert.deepEqual(seen, ["POST /v1/queries", "POST /v1/queries"]);
  assert.equal(pirq.info.epoch.newest, 0, "not re-read yet");

  // The next lookup reads both infos first, the one after does not.
  seen.length = 0;
  assert.deepEqual(await pirq.getPage(9), page9);
  assert.deepEqual(seen.sort(), ["GET /v1/info", "GET /v1/info", "POST /v1/queries", "POST /v1/queries"]);
  assert.deepEqual(pirq.info.epoch, { oldest: 0, newest: 1 });
  seen.length = 0;
  assert.deepEqual(await pirq.getPage(9), page9);
  assert.deepEqual(seen, ["POST /v1/queries", "POST /v1/queries"]);

  // A pinned older epoch is still answered as it was.
  assert.deepEqual(await pirq.getPage(9, { epoch: 0 }), pageFromFile(db, 9));
});

test("no WARN or ERROR lines in the parties' logs", () => {
  for (const p of [parties.a, parties.b]) for (const proc of [p.gateway, p.worker]) assert.deepEqual(warnings(proc), [], proc.name);
});
