// The HTTP layer against a scripted fetch: SSE framing the real gateway happens not to produce
// (events split across chunks, CRLF, comments, multi-line data), the fallback to long-poll when a
// stream ends early, error bodies and retries. The real gateway is in e2e.test.ts.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Party, PirqError } from "../src/index.js";
import type { PartyOptions } from "../src/index.js";

type Handler = (url: string, init: RequestInit) => Response;

function scripted(handlers: Handler[]): { fetch: typeof fetch; calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    fetch: (async (input: RequestInfo | URL, init: RequestInit = {}) => {
      const url = String(input);
      calls.push(`${init.method ?? "GET"} ${url.replace(P, "")}`);
      const h = handlers.shift();
      if (!h) throw new Error(`unexpected request ${url}`);
      return h(url, init);
    }) as typeof fetch,
  };
}

function stream(chunks: string[]): Response {
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      for (const chunk of chunks) c.enqueue(new TextEncoder().encode(chunk));
      c.close();
    },
  });
  return new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } });
}

const ID = "0123456789abcdef0123456789abcdef";
/** The scripted party's URL: loopback, so plain HTTP is allowed (nothing is sent there). */
const P = "http://127.0.0.1:9";

/** A party that knows its database (pages of 3 bytes, 64 keys a query) without reading /v1/info. */
function scriptedParty(name: string, options: PartyOptions): Party {
  const p = new Party(name, P, options);
  p.lastInfo = { numPages: 4, pageSize: 3, domainBits: 2, epoch: { oldest: 0, newest: 4 }, maxKeysPerQuery: 64, raw: {} };
  return p;
}
const DONE = JSON.stringify({ id: ID, status: "done", epoch: 4, pages: ["AAEC"] });

test("SSE: events split across chunks, CRLF line ends, comments, multi-line data", async () => {
  const half = DONE.indexOf(`"pages"`); // between two JSON tokens
  const { fetch } = scripted([
    () => stream([": keep-alive\r\n\r\nevent: status\r\ndata: {\"id\":\"", `${ID}","status":"running"}\r\n\r`, "\nevent: result\r\ndata: ", DONE.slice(0, half), "\r\ndata:", DONE.slice(half), "\r\n\r\n"]),
  ]);
  // multi-line data joins with "\n", which JSON tolerates between tokens
  const answer = await scriptedParty("A", { fetch }).result(ID);
  assert.equal(answer.epoch, 4);
  assert.deepEqual(Array.from(answer.pages[0]), [0, 1, 2]);
});

test("SSE: a stream that ends without a result falls back to long-poll", async () => {
  const { fetch, calls } = scripted([
    () => stream([`event: status\ndata: {"id":"${ID}","status":"queued"}\n\n`]),
    () => new Response(JSON.stringify({ id: ID, status: "running" }), { status: 202 }),
    () => new Response(DONE, { status: 200 }),
  ]);
  const answer = await scriptedParty("A", { fetch }).result(ID);
  assert.equal(answer.epoch, 4);
  assert.deepEqual(calls, [`GET /v1/queries/${ID}/events`, `GET /v1/queries/${ID}?wait=30`, `GET /v1/queries/${ID}?wait=30`]);
});

test("SSE error event and failed results carry the server's code", async () => {
  const { fetch } = scripted([
    () => stream([`event: error\ndata: {"error":{"code":"redis_unavailable","message":"down"}}\n\n`]),
    () => stream([`event: result\ndata: {"id":"${ID}","status":"failed","error":{"code":"scan_failed","message":"gave up","key_index":3}}\n\n`]),
  ]);
  const party = scriptedParty("B", { fetch });
  await assert.rejects(party.result(ID), (e: unknown) => e instanceof PirqError && e.code === "redis_unavailable" && e.party === `B (${P})`);
  await assert.rejects(party.result(ID), (e: unknown) => e instanceof PirqError && e.code === "scan_failed" && e.keyIndex === 3);
});

test("submit: 429 retried after Retry-After with the same Idempotency-Key; non-JSON errors get http_<status>", async () => {
  const keys: string[] = [];
  const { fetch } = scripted([
    (_, init) => {
      keys.push(new Headers(init.headers).get("idempotency-key")!);
      return new Response(JSON.stringify({ error: { code: "backlog_full", message: "full" } }), { status: 429, headers: { "retry-after": "0" } });
    },
    (_, init) => {
      keys.push(new Headers(init.headers).get("idempotency-key")!);
      return new Response(JSON.stringify({ id: ID, status: "queued" }), { status: 202 });
    },
    () => new Response("<html>bad gateway</html>", { status: 502 }),
  ]);
  const party = scriptedParty("A", { fetch });
  assert.equal(await party.submit([new Uint8Array([1, 2, 3])], 0), ID);
  assert.equal(keys.length, 2);
  assert.equal(keys[0], keys[1]);
  assert.match(keys[0], /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  await assert.rejects(party.submit([new Uint8Array([1])], 0), (e: unknown) => e instanceof PirqError && e.code === "http_502" && e.status === 502);
});

test("answers that are not the documented API are bad_response", async () => {
  const { fetch } = scripted([
    () => new Response(JSON.stringify({ id: ID, status: "done", epoch: 1, pages: ["not base64!"] }), { status: 200 }),
    () => new Response(JSON.stringify({ num_pages: "many" }), { status: 200 }),
  ]);
  const party = scriptedParty("A", { fetch, wait: "poll" });
  await assert.rejects(party.result(ID), (e: unknown) => e instanceof PirqError && e.code === "bad_response");
  await assert.rejects(party.info(), (e: unknown) => e instanceof PirqError && e.code === "bad_response");
});

test("query (inline): Prefer: wait=25, or the whole seconds left before the deadline, at least 1", async () => {
  const prefers: (string | null)[] = [];
  const held: Handler = (_, init) => {
    prefers.push(new Headers(init.headers).get("prefer"));
    return new Response(DONE, { status: 200, headers: { "preference-applied": "wait" } });
  };
  const { fetch, calls } = scripted([held, held, held, held]);
  const party = scriptedParty("A", { fetch });
  const now = performance.now();
  for (const deadline of [undefined, now + 100_000, now + 2_400, now - 5_000]) {
    const answer = await party.query([new Uint8Array([1])], 4, { deadline });
    assert.equal(answer.epoch, 4);
    assert.deepEqual(Array.from(answer.pages[0]), [0, 1, 2]);
  }
  assert.deepEqual(prefers, ["wait=25", "wait=25", "wait=3", "wait=1"]);
  assert.deepEqual(calls, Array(4).fill("POST /v1/queries")); // one round trip each
});

test("query (inline): still pending (202) is followed by its events; a failed answer throws its code", async () => {
  const { fetch, calls } = scripted([
    () => new Response(JSON.stringify({ id: ID, status: "queued" }), { status: 202 }),
    () => stream([`event: result\ndata: ${DONE}\n\n`]),
    () => new Response(JSON.stringify({ id: ID, status: "failed", error: { code: "scan_failed", message: "gave up", key_index: 1 } }), { status: 200 }),
  ]);
  const party = scriptedParty("B", { fetch });
  assert.equal((await party.query([new Uint8Array([1])], 4)).epoch, 4);
  assert.deepEqual(calls, ["POST /v1/queries", `GET /v1/queries/${ID}/events`]);
  await assert.rejects(party.query([new Uint8Array([1])], 4), (e: unknown) => e instanceof PirqError && e.code === "scan_failed" && e.keyIndex === 1 && e.party === `B (${P})`);
});

test("query with wait sse or poll sends no Prefer; submit alone never does", async () => {
  for (const wait of ["sse", "poll"] as const) {
    const prefers: (string | null)[] = [];
    const { fetch, calls } = scripted([
      (_, init) => {
        prefers.push(new Headers(init.headers).get("prefer"));
        return new Response(JSON.stringify({ id: ID, status: "queued" }), { status: 202 });
      },
      () => (wait === "sse" ? stream([`event: result\ndata: ${DONE}\n\n`]) : new Response(DONE, { status: 200 })),
    ]);
    assert.equal((await scriptedParty("A", { fetch, wait }).query([new Uint8Array([1])], 4)).epoch, 4);
    assert.deepEqual(prefers, [null]);
    assert.deepEqual(calls, ["POST /v1/queries", wait === "sse" ? `GET /v1/queries/${ID}/events` : `GET /v1/queries/${ID}?wait=30`]);
  }
  let prefer: string | null = "unset";
  const { fetch } = scripted([
    (_, init) => {
      prefer = new Headers(init.headers).get("prefer");
      return new Response(JSON.stringify({ id: ID, status: "queued" }), { status: 202 });
    },
  ]);
  assert.equal(await scriptedParty("A", { fetch }).submit([new Uint8Array([1])], 4), ID);
  assert.equal(prefer, null);
});

test("a table's party asks the table's routes (issue 38); default is the routes without a name; a bad name is refused", async () => {
  const { fetch, calls } = scripted([
    () => stream([`event: result\ndata: ${DONE}\n\n`]),
    () => stream([`event: result\ndata: ${DONE}\n\n`]),
  ]);
  const answer = await scriptedParty("A", { fetch, wait: "sse", table: "accounts" }).result(ID);
  assert.deepEqual(Array.from(answer.pages[0]), [0, 1, 2]);
  await scriptedParty("A", { fetch, wait: "sse", table: "default" }).result(ID);
  assert.deepEqual(calls, [`GET /v1/tables/accounts/queries/${ID}/events`, `GET /v1/queries/${ID}/events`]);
  for (const table of ["", "a.b", "a/b", "x".repeat(65)]) {
    assert.throws(() => new Party("A", P, { table }), (e: unknown) => e instanceof PirqError && e.code === "invalid_argument", table);
  }
});
