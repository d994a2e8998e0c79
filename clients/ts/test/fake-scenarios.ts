// The misbehaving-party scenarios, one table for Node (fake-party.test.ts) and Chromium
// (browser-fake.test.ts): party A is an honest fake, party B has the behaviour; each row says
// what the lookup must end with. The rows of FAKE_PARTY.md's behaviours run against the shared
// binary (`pirq-fake-party`, the one the Rust client is tested against, with the same outcomes);
// the rest against this client's own fake (fake-party.ts).
import assert from "node:assert/strict";
import { toHex } from "../src/bytes.js";
import { fakePage, Fake, NodeBehaviour, startFakeParty } from "./fake-party.js";
import { SHARED_BEHAVIOURS, SharedBehaviour, sharedPage, startSharedFake } from "./shared-fake.js";

/** The deadline of the lookups below: short, so the suite stays quick. */
export const TIMEOUT_MS = 1500;
/** Scenarios that retry after `Retry-After: 1` twice need more room. */
export const RETRY_TIMEOUT_MS = 6000;
/** The page every scenario looks up. */
export const INDEX = 77;

export interface Scenario {
  behaviour: SharedBehaviour | NodeBehaviour;
  wait?: "inline" | "sse" | "poll";
  /** `ok`: the lookup succeeds with the right page; else the error's code and phase at party B. */
  expect: "ok" | { code: string; phase?: string };
  /** A deadline failure (at TIMEOUT_MS, not sooner, at most 1 s later); else it must fail before the deadline. */
  deadline?: boolean;
  timeoutMs?: number;
  /** More checks on what the fake parties saw, or on the error. */
  check?: (outcome: Outcome, a: Fake, b: Fake) => void | Promise<void>;
}

/** What one lookup ended with, as plain data (it crosses from the browser). */
export interface Outcome {
  ok: boolean;
  pageHex?: string;
  code?: string;
  phase?: string;
  party?: string;
  message?: string;
  retryAfter?: number;
  elapsedMs: number;
}

const isShared = (s: Scenario) => (SHARED_BEHAVIOURS as readonly string[]).includes(s.behaviour);

/** A message that shows a party's hostile text cleaned: no control character, cut to 300 characters. */
function cleaned(message: string, filler: string): void {
  // eslint-disable-next-line no-control-regex
  assert.doesNotMatch(message, /[\u0000-\u001f\u007f-\u009f]/);
  assert.match(message, new RegExp(`red2J${filler}{10}`));
  assert.match(message, new RegExp(`${filler}…`));
  assert.ok(message.length < 450, `${message.length} characters`);
}

export const SCENARIOS: Scenario[] = [
  // FAKE_PARTY.md, against pirq-fake-party
  { behaviour: "honest", expect: "ok", check: async (_, a, b) => {
    // one round trip a lookup: connect read each info once, the lookup one submit each
    for (const p of [a, b]) {
      const { info, submits, results, events } = await p.stats();
      assert.deepEqual({ info, submits, results, events }, { info: 1, submits: 1, results: 0, events: 0 });
    }
  } },
  { behaviour: "silent-connect", expect: { code: "timeout", phase: "info" }, deadline: true },
  { behaviour: "silent-info", expect: { code: "timeout", phase: "info" }, deadline: true },
  { behaviour: "dribble-info", expect: { code: "timeout", phase: "info" }, deadline: true },
  { behaviour: "huge-info", expect: { code: "too_large", phase: "info" }, check: (o) => assert.match(o.message!, /larger than 65536 bytes/) },
  { behaviour: "silent-submit", expect: { code: "timeout", phase: "submit" }, deadline: true },
  { behaviour: "dribble-answer", expect: { code: "timeout", phase: "answer" }, deadline: true },
  { behaviour: "huge-answer", expect: { code: "too_large", phase: "answer" } },
  { behaviour: "huge-answer-declared", expect: { code: "too_large", phase: "answer" }, check: (o) => assert.match(o.message!, /Content-Length: 1073741824/) },
  { behaviour: "pending-silent", wait: "inline", expect: { code: "timeout", phase: "events" }, deadline: true },
  { behaviour: "pending-silent", wait: "poll", expect: { code: "timeout", phase: "poll" }, deadline: true },
  { behaviour: "sse-keepalive", expect: { code: "timeout", phase: "events" }, deadline: true },
  { behaviour: "sse-huge-line", expect: { code: "too_large", phase: "events" } },
  { behaviour: "bad-id", expect: { code: "bad_response", phase: "submit" }, check: async (_, _a, b) => {
    // the id was refused before any URL was made of it: no result read, no event stream
    const { results, events } = await b.stats();
    assert.deepEqual({ results, events }, { results: 0, events: 0 });
  } },
  // its code is hostile too: not passed on as a code, and the message is cleaned
  { behaviour: "hostile-error", expect: { code: "bad_response", phase: "submit" }, check: (o) => cleaned(o.message!, "A") },
  { behaviour: "retry-503", expect: "ok", timeoutMs: RETRY_TIMEOUT_MS, check: async (o, _a, b) => {
    assert.equal((await b.stats()).submits, 3);
    assert.ok(o.elapsedMs >= 2000, `retried after Retry-After: 1 twice, in ${o.elapsedMs} ms`);
  } },
  { behaviour: "retry-429", expect: "ok", timeoutMs: RETRY_TIMEOUT_MS, check: async (o, _a, b) => {
    assert.equal((await b.stats()).submits, 3);
    assert.ok(o.elapsedMs >= 2000, `retried after Retry-After: 1 twice, in ${o.elapsedMs} ms`);
  } },
  { behaviour: "wrong-digest", expect: { code: "parties_disagree" } },

  // this client's own, against fake-party.ts
  { behaviour: "impossible-info", expect: { code: "bad_response", phase: "info" } },
  { behaviour: "nested-info", expect: { code: "bad_response", phase: "info" } },
  { behaviour: "huge-error", expect: { code: "too_large", phase: "submit" } },
  { behaviour: "sse-status-flood", expect: { code: "too_large", phase: "events" } },
  { behaviour: "wrong-id-result", expect: { code: "bad_response", phase: "events" } },
  { behaviour: "poll-flood", wait: "poll", expect: { code: "timeout" }, deadline: true, check: (_, _a, b) => {
    // 202 at once, forever: the client backs off (100 ms doubling) instead of asking in a loop
    const polls = b.seen!.filter((r) => r.method === "GET" && r.path.startsWith("/v1/queries/")).length;
    assert.ok(polls >= 2 && polls <= 12, `${polls} long-polls in ${TIMEOUT_MS} ms`);
  } },
  { behaviour: "hostile-message", expect: { code: "invalid_json", phase: "submit" }, check: (o) => cleaned(o.message!, "x") },
  { behaviour: "bad-code", expect: { code: "bad_response", phase: "submit" } },
  { behaviour: "redirect", expect: { code: "bad_response", phase: "submit" }, check: async (_, a) => {
    // the redirect (to party A) was not followed: A saw only its own submit
    assert.equal((await a.stats()).submits, 1);
  } },
  { behaviour: "always-503", expect: { code: "too_many_waiters", phase: "submit" }, timeoutMs: RETRY_TIMEOUT_MS, check: async (o, _a, b) => {
    assert.equal((await b.stats()).submits, 5, "the first try and 4 retries");
    assert.equal(o.retryAfter, 0);
  } },
  { behaviour: "retry-after-long", expect: { code: "not_durable", phase: "submit" }, check: async (o, _a, b) => {
    // a wait past the deadline is not made: the refusal is the answer, at once
    assert.equal((await b.stats()).submits, 1);
    assert.equal(o.retryAfter, 3600);
  } },
  { behaviour: "wrong-page-count", expect: { code: "bad_response" } },
];

/** A row's name in test output. */
export function scenarioName(s: Scenario): string {
  return `${isShared(s) ? "pirq-fake-party" : "own fake"} B ${s.behaviour}${s.wait ? ` (wait: ${s.wait})` : ""}`;
}

/** Honest party A and party B with the row's behaviour (a `redirect` B sends its submits to A). */
export async function startScenario(s: Scenario): Promise<{ a: Fake; b: Fake; expectedPageHex: string }> {
  if (isShared(s)) {
    const a = await startSharedFake("honest");
    const b = await startSharedFake(s.behaviour as SharedBehaviour);
    return { a, b, expectedPageHex: toHex(sharedPage(INDEX)) };
  }
  const a = await startFakeParty({ behaviour: "honest" });
  const b = await startFakeParty({ behaviour: s.behaviour as NodeBehaviour, redirectTo: a.url });
  return { a, b, expectedPageHex: toHex(fakePage(7, INDEX, 256)) };
}

/**
 * One `connect` and one `getPage(index)` with the package found at `globalThis.pirq`, as plain
 * data. Self-contained (Playwright sends its source to the page): it must not use anything from
 * this module's scope.
 */
export async function lookupOnce(arg: { a: string; b: string; index: number; options: Record<string, unknown> }): Promise<Outcome> {
  const pirq = (globalThis as unknown as { pirq: typeof import("../src/index.js") }).pirq;
  const started = performance.now();
  try {
    const client = await pirq.connect(arg.a, arg.b, arg.options);
    const page = await client.getPage(arg.index);
    return { ok: true, pageHex: pirq.toHex(page), elapsedMs: performance.now() - started };
  } catch (e) {
    const err = e as InstanceType<typeof pirq.PirqError>;
    return { ok: false, code: err.code, phase: err.phase, party: err.party, message: err.message, retryAfter: err.retryAfter, elapsedMs: performance.now() - started };
  }
}

/** The lookup's options for a row. */
export function scenarioOptions(s: Scenario): Record<string, unknown> {
  return { timeoutMs: s.timeoutMs ?? TIMEOUT_MS, wait: s.wait ?? "inline" };
}

/** The row's expectations against what happened. */
export async function checkOutcome(s: Scenario, o: Outcome, a: Fake, b: Fake, expectedPageHex: string): Promise<void> {
  const timeoutMs = s.timeoutMs ?? TIMEOUT_MS;
  if (s.expect === "ok") {
    assert.ok(o.ok, `failed: ${o.message}`);
    assert.equal(o.pageHex, expectedPageHex);
  } else {
    assert.ok(!o.ok, "the lookup succeeded");
    assert.equal(o.code, s.expect.code, o.message);
    if (s.expect.phase) assert.equal(o.phase, s.expect.phase, o.message);
    if (s.expect.code !== "parties_disagree") {
      assert.equal(o.party, `B (${b.url})`, o.message);
      assert.ok(o.message!.startsWith(`party B (${b.url}): `), o.message);
    }
  }
  if (s.deadline && typeof s.expect === "object" && s.expect.phase) {
    // the words of the Rust client's error (FAKE_PARTY.md), with this client's units
    assert.ok(o.message!.startsWith(`party B (${b.url}): ${s.expect.phase}: no answer within ${timeoutMs} ms (the lookup's deadline`), o.message);
  }
  if (s.deadline) {
    // the deadline holds: not before it, and at most 1 s after (issue 24)
    assert.ok(o.elapsedMs >= timeoutMs - 50 && o.elapsedMs < timeoutMs + 1000, `ended after ${o.elapsedMs} ms (deadline ${timeoutMs})`);
  } else if (!o.ok) {
    assert.ok(o.elapsedMs < timeoutMs, `failed only after ${o.elapsedMs} ms`);
  }
  await s.check?.(o, a, b);
}
