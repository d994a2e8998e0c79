// The pieces that keep a party's bytes in bounds, alone: the event-stream parser (every way a
// stream can be cut into chunks, and its byte bounds), the bounded body reader, the cleaning
// of a party's text, Retry-After and the jittered back-off, the loopback rule's host test.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readBounded, SseParser, TooLarge, answerLimit, ENVELOPE_LIMIT } from "../src/body.js";
import { partyText, partyCode, PARTY_TEXT_LIMIT } from "../src/errors.js";
import { parseRetryAfter, retryDelayMs } from "../src/retry.js";
import { isLoopbackHost, partyBaseUrl } from "../src/url.js";

const enc = (s: string) => new TextEncoder().encode(s);

test("SSE parser: the same events however the bytes are cut, with \\n, \\r\\n and \\r line ends", () => {
  const result = '{"id":"x","pages":["AAEC"]}';
  for (const nl of ["\n", "\r\n", "\r"]) {
    const text = `\ufeff: keep-alive${nl}${nl}event: status${nl}data: {"s":1}${nl}${nl}event: result${nl}data:${result.slice(0, 9)}${nl}data: ${result.slice(9)}${nl}${nl}`;
    const bytes = enc(text);
    const expected = [{ event: "status", data: '{"s":1}' }, { event: "result", data: `${result.slice(0, 9)}\n${result.slice(9)}` }];
    for (let cut = 0; cut <= bytes.length; cut++) {
      for (const size of [1, 2, 3, 7]) {
        // the stream cut at `cut`, then in pieces of `size` bytes
        const parser = new SseParser(1000, 1000);
        const events = [...parser.push(bytes.subarray(0, cut))];
        for (let i = cut; i < bytes.length; i += size) events.push(...parser.push(bytes.subarray(i, i + size)));
        assert.deepEqual(events, expected, `${JSON.stringify(nl)} cut at ${cut}, then ${size}`);
      }
    }
  }
});

test("SSE parser: multi-byte UTF-8 split across chunks is decoded whole", () => {
  const bytes = enc("data: ünïcødé ✓\n\n");
  for (let cut = 1; cut < bytes.length; cut++) {
    const parser = new SseParser(100, 100);
    const events = [...parser.push(bytes.subarray(0, cut)), ...parser.push(bytes.subarray(cut))];
    assert.deepEqual(events, [{ event: "message", data: "ünïcødé ✓" }]);
  }
});

test("SSE parser: a line or an event past its bound throws at the first byte over, whatever the chunking", () => {
  const parser = new SseParser(10, 1000);
  parser.push(enc("data: 1234")); // 10 bytes: at the bound
  assert.throws(() => parser.push(enc("5")), TooLarge);
  const lines = new SseParser(100, 20);
  lines.push(enc("data: 0123456789\n")); // 10 bytes of data + newline
  assert.throws(() => lines.push(enc("data: 0123456789\n")), TooLarge); // 22 > 20
  // comments and blank lines do not count towards an event
  const ok = new SseParser(100, 20);
  for (let i = 0; i < 100; i++) ok.push(enc(": keep-alive\n\n"));
});

function body(chunks: string[], headers: Record<string, string> = {}): Response {
  return new Response(new ReadableStream({ start(c) { for (const x of chunks) c.enqueue(enc(x)); c.close(); } }), { headers });
}

test("readBounded: a body up to the limit is whole; one byte more, or a Content-Length over it, is TooLarge", async () => {
  assert.equal(new TextDecoder().decode(await readBounded(body(["ab", "cd", "e"]), 5)), "abcde");
  await assert.rejects(readBounded(body(["ab", "cd", "ef"]), 5), TooLarge);
  // refused on the header, before a byte of the body is read
  let pulled = false;
  const never = new Response(new ReadableStream({ pull() { pulled = true; } }), { headers: { "content-length": "1073741824" } });
  await assert.rejects(readBounded(never, 1000), (e: unknown) => e instanceof TooLarge && e.declared === 1073741824);
  assert.equal(pulled, false);
});

test("readBounded: a body that never ends is left when the signal aborts", async () => {
  const controller = new AbortController();
  const stalled = new Response(new ReadableStream({ start(c) { c.enqueue(enc("{")); } }));
  setTimeout(() => controller.abort(new Error("deadline")), 50);
  await assert.rejects(readBounded(stalled, 1000, controller.signal), /deadline/);
});

test("answer bound: keys × base64 pages + the envelope", () => {
  assert.equal(answerLimit(1, 3), 4 + 4 + ENVELOPE_LIMIT);
  assert.equal(answerLimit(64, 4096), 64 * (5464 + 4) + ENVELOPE_LIMIT);
  // a real answer fits: 64 pages of 4096 B, base64 in quotes, the envelope's fields
  const page = "A".repeat(5464);
  const json = JSON.stringify({ id: "0".repeat(32), status: "done", epoch: 2 ** 53 - 1, pages: Array(64).fill(page), digest: "f".repeat(64) });
  assert.ok(json.length <= answerLimit(64, 4096));
});

test("party text: every control character (C0, DEL, C1, U+009B) removed, cut to 300 characters", () => {
  assert.equal(partyText("\u001b[31mred\u001b[0m\u0007\r\n\u009b2J\u007f\u0085ok"), "[31mred[0m2Jok");
  const long = partyText("é".repeat(5000));
  assert.equal(long, "é".repeat(PARTY_TEXT_LIMIT) + "…");
  // a cut never splits a surrogate pair
  const emoji = partyText("😀".repeat(400));
  assert.equal(Array.from(emoji).length, PARTY_TEXT_LIMIT + 1);
  assert.ok(!/[\ud800-\udbff](?![\udc00-\udfff])/.test(emoji));
  assert.equal(partyText("fine"), "fine");
  assert.equal(partyCode("backlog_full"), "backlog_full");
  for (const bad of ["", "Backlog", "a b", "\u001b[31m", "x".repeat(65), 3, null]) assert.equal(partyCode(bad), undefined, String(bad));
});

test("Retry-After: whole seconds only; the back-off is never sooner than asked, jittered up to 1.5×, 100 ms doubling to 2 s without one", () => {
  assert.equal(parseRetryAfter("5"), 5);
  assert.equal(parseRetryAfter(" 0 "), 0);
  for (const bad of [null, "", "-1", "1.5", "soon", "Wed, 21 Oct 2015 07:28:00 GMT", "9999999999"]) assert.equal(parseRetryAfter(bad), undefined, String(bad));
  assert.equal(retryDelayMs(0, 2, () => 0), 2000);
  assert.equal(retryDelayMs(0, 2, () => 0.999999), 2000 * 1.4999995);
  assert.deepEqual([0, 1, 2, 3, 4, 5, 9].map((n) => retryDelayMs(n, undefined, () => 0)), [100, 200, 400, 800, 1600, 2000, 2000]);
  // Retry-After: 0 (issue 36): the same capped back-off, never a busy loop
  assert.deepEqual([0, 1, 2, 3, 4, 5, 9].map((n) => retryDelayMs(n, 0, () => 0)), [100, 200, 400, 800, 1600, 2000, 2000]);
  assert.equal(retryDelayMs(6, 5, () => 0), 5000);
  // many clients refused together come back spread over [1, 1.5) × Retry-After
  const delays = Array.from({ length: 1000 }, () => retryDelayMs(0, 1));
  assert.ok(Math.min(...delays) >= 1000 && Math.max(...delays) < 1500);
  assert.ok(Math.max(...delays) - Math.min(...delays) > 300, "spread");
});

test("loopback hosts: localhost, 127.0.0.0/8, [::1] as the URL parser writes them; nothing else", () => {
  for (const url of ["http://localhost:1", "http://LOCALHOST", "http://127.0.0.1", "http://127.1", "http://0x7f.0.0.1", "http://127.255.255.255", "http://[::1]", "http://[0::1]"]) {
    assert.ok(isLoopbackHost(new URL(url).hostname), url);
  }
  // issue 36: the fully qualified forms go to DNS; the parser keeps the dot (and decodes %2e)
  for (const url of ["http://localhost.:1", "http://LOCALHOST.", "http://localhost%2e:1", "http://localhost%2E"]) {
    assert.ok(!isLoopbackHost(new URL(url).hostname), url);
    assert.throws(() => partyBaseUrl("A", url), /refusing plain HTTP/, url);
  }
  assert.throws(() => partyBaseUrl("A", "https://user:secret@pir.example.invalid"), (e: Error) => /without credentials/.test(e.message) && !e.message.includes("secret"));
  for (const url of ["http://10.0.0.1", "http://128.0.0.1", "http://localhost.invalid", "http://127.0.0.1.invalid", "http://[::ffff:127.0.0.1]", "http://[::2]", "http://0.0.0.0", "http://x.localhost"]) {
    assert.ok(!isLoopbackHost(new URL(url).hostname), url);
  }
});
