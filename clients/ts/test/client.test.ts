// The two-party rules against scripted parties (what real gateways cannot easily be made to do):
// answers with different or missing digests are never combined, one party behind both URLs and a
// party without workers are refused, epoch windows must overlap. Real parties: e2e.test.ts.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect, PirqError, toBase64 } from "../src/index.js";

/** The fake parties' URLs: loopback, so plain HTTP is allowed (the fetch below never sends anything). */
const A = "http://127.0.0.1:1";
const B = "http://127.0.0.2:1";
const D1 = "11".repeat(32);
const D2 = "22".repeat(32);

interface FakeParty {
  info?: Record<string, unknown>;
  /** Never answer: every long-poll returns 202 after 50 ms. */
  stall?: boolean;
  digest?: string | null; // null: no digest on the answer
  epoch?: number;
}

/**
 * A fetch serving two fake parties at http://a and http://b. A submit with `Prefer: wait` is
 * answered 200 with the result (the gateway held it), one without it 202.
 */
function fakeParties(a: FakeParty, b: FakeParty): typeof fetch {
  const baseInfo = { num_pages: 100, page_size: 256, domain_bits: 7, epoch: { oldest: 0, newest: 2 }, max_keys_per_query: 64, workers: 1 };
  return (async (input: RequestInfo | URL, init: RequestInit = {}) => {
    const url = new URL(String(input));
    const party = url.origin === A ? a : b;
    if (url.pathname === "/v1/info") return Response.json({ ...baseInfo, party: (party === a ? "a" : "b").repeat(32), ...party.info });
    const done = () => {
      const n = (party as { keys?: number }).keys ?? 1;
      const result: Record<string, unknown> = { id: "ab".repeat(16), status: "done", epoch: party.epoch ?? 2, pages: Array(n).fill(toBase64(new Uint8Array(256))) };
      if (party.digest !== null) result.digest = party.digest ?? D1;
      return Response.json(result);
    };
    if (init.method === "POST") {
      const body = JSON.parse(String(init.body));
      (party as { keys?: number }).keys = body.keys.length;
      if (new Headers(init.headers).has("prefer") && !party.stall) return done();
      return Response.json({ id: "ab".repeat(16), status: "queued" }, { status: 202 });
    }
    if (party.stall) {
      await new Promise((r) => setTimeout(r, 50));
      return Response.json({ id: "ab".repeat(16), status: "queued" }, { status: 202 });
    }
    return done();
  }) as typeof fetch;
}

const rejectsWith = (code: string, pattern?: RegExp) => (e: unknown) =>
  e instanceof PirqError && e.code === code && (!pattern || pattern.test(e.message));

// Each rule holds for answers waited for and answers held in the submit (`Prefer: wait`) alike.
for (const wait of ["poll", "inline"] as const) {
  test(`equal digests combine (${wait})`, async () => {
    const pirq = await connect(A, B, { fetch: fakeParties({}, {}), wait });
    const result = await pirq.getPages([5]);
    assert.deepEqual(result.pages[0], new Uint8Array(256));
    // the fake answers a submit at once only when asked to hold it: this mode's path was taken
    const statuses = result.exchanges[0].filter((e) => e.method === "POST").map((e) => e.status);
    assert.deepEqual(statuses, [wait === "inline" ? 200 : 202]);
  });

  test(`answers with different digests are refused, never combined (${wait})`, async () => {
    const pirq = await connect(A, B, { fetch: fakeParties({ digest: D1 }, { digest: D2 }), wait });
    await assert.rejects(pirq.getPage(5), rejectsWith("parties_disagree", /different databases at epoch 2/));
  });

  test(`an answer without a digest is refused (${wait})`, async () => {
    const pirq = await connect(A, B, { fetch: fakeParties({}, { digest: null }), wait });
    await assert.rejects(pirq.getPage(5), (e: unknown) => rejectsWith("bad_response", /without a database digest/)(e) && (e as PirqError).party === `B (${B})`);
  });

  test(`an answer at another epoch than pinned is refused (${wait})`, async () => {
    const pirq = await connect(A, B, { fetch: fakeParties({ epoch: 1 }, {}), wait });
    await assert.rejects(pirq.getPage(5), rejectsWith("epoch_mismatch"));
  });
}

test("a query that stays pending fails with timeout at the client's limit", async () => {
  const pirq = await connect(A, B, { fetch: fakeParties({}, { stall: true }), wait: "poll", timeoutMs: 300 });
  const started = performance.now();
  await assert.rejects(pirq.getPage(5), rejectsWith("timeout", /300 ms/));
  assert.ok(performance.now() - started < 3000);
});

test("info: same party, no workers, different digests at one epoch, disjoint windows, other geometry", async () => {
  const same = { party: "5a0d3c9e2b7f41e8a6c4d2f0b8e6a4c2" };
  await assert.rejects(connect(A, B, { fetch: fakeParties({ info: same }, { info: same }) }), rejectsWith("same_party"));
  // issue 36: a party that gives no id, or not one of 32 lowercase hex digits, cannot be told apart
  for (const party of [undefined, "", "same", "5A0D3C9E2B7F41E8A6C4D2F0B8E6A4C2"]) {
    await assert.rejects(connect(A, B, { fetch: fakeParties({}, { info: { party } }) }), (e: unknown) => rejectsWith("same_party", /party id/)(e) && (e as PirqError).party === `B (${B})`, String(party));
  }
  await assert.rejects(connect(A, B, { fetch: fakeParties({}, { info: { workers: 0 } }) }), (e: unknown) => rejectsWith("no_workers")(e) && (e as PirqError).party === `B (${B})`);
  await assert.rejects(connect(A, B, { fetch: fakeParties({ info: { digest: D1 } }, { info: { digest: D2 } }) }), rejectsWith("parties_disagree", /digest/));
  // different newest epochs: different digests are expected, the lookup pins the older one
  const ahead = await connect(A, B, { fetch: fakeParties({ info: { digest: D1, epoch: { oldest: 0, newest: 3 } } }, { info: { digest: D2 } }) });
  assert.deepEqual(ahead.info.epoch, { oldest: 0, newest: 2 });
  await assert.rejects(connect(A, B, { fetch: fakeParties({ info: { epoch: { oldest: 5, newest: 6 } } }, {}) }), rejectsWith("epoch_mismatch"));
  await assert.rejects(connect(A, B, { fetch: fakeParties({ info: { page_size: 512 } }, {}) }), rejectsWith("parties_disagree", /page_size = 512, party B 256/));
});

test("signed pages (SPEC §2.4): both parties must advertise the same signing; an unknown scheme is refused", async () => {
  const key = "ab".repeat(32);
  const signing = { scheme: "ed25519", tail_len: 72, publisher_key: key, db_id: "cd".repeat(32) };
  const pirq = await connect(A, B, { fetch: fakeParties({ info: { signing } }, { info: { signing } }) });
  assert.deepEqual(pirq.info.signing, { scheme: "ed25519", tailLen: 72, publisherKey: key, dbId: "cd".repeat(32) });
  await assert.rejects(connect(A, B, { fetch: fakeParties({ info: { signing } }, {}) }), rejectsWith("parties_disagree", /signing/));
  await assert.rejects(connect(A, B, { fetch: fakeParties({ info: { signing } }, { info: { signing: { ...signing, publisher_key: "ef".repeat(32) } } }) }), rejectsWith("parties_disagree", /signing/));
  await assert.rejects(connect(A, B, { fetch: fakeParties({ info: { signing: { ...signing, scheme: "rsa" } } }, {}) }), rejectsWith("bad_response", /signing/));
  // a kv table of a signed database: its slots in the bytes before the 72-byte tail
  const kv = { version: 2, value_kind: "set", choices: 2, tag_size: 16, value_size: 0, key_size: 0, slot_size: 16, slots_per_page: Math.floor((256 - 72) / 16), seed: "00".repeat(32) };
  const signedKv = await connect(A, B, { fetch: fakeParties({ info: { signing, kv } }, { info: { signing, kv } }) });
  assert.equal(signedKv.info.kv?.usableBytes, 256 - 72);
  await assert.rejects(connect(A, B, { fetch: fakeParties({ info: { kv } }, { info: { kv } }) }), rejectsWith("not_kv", /differ/), "unsigned: 16 slots, not 11");
});
