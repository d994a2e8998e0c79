// A tampering party for tests: an HTTP proxy in front of a real party's gateway that passes
// everything through, except that it XORs bytes of its choosing into the pages of every result
// it forwards — the submit's held answer (`Prefer: wait`), a long-poll's, an event stream's
// `result` — keeping the digest stamp and everything else. This is what a malicious operator
// can do to its own answers (issue 27): the digest check cannot catch it, the publisher's
// signature must.
import { createServer, IncomingMessage, request, Server, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { fromBase64, toBase64 } from "../src/bytes.js";

/** Changes one answer page in place (`keyIndex`: its position among the query's keys). */
export type Tamper = (page: Uint8Array, keyIndex: number) => void;

export interface TamperingProxy {
  url: string;
  /** What to do to answers from now on; undefined: pass them through untouched. */
  tamper?: Tamper;
  /** Results whose pages were changed so far (a test checks that the lie was told). */
  tampered: number;
  close(): Promise<void>;
}

/** Applies the proxy's tamper to a result's pages (a JSON text); other JSON passes unchanged. */
function tamperJson(text: string, proxy: TamperingProxy): string {
  if (!proxy.tamper) return text;
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return text;
  }
  const result = body as { status?: string; pages?: unknown };
  if (typeof body !== "object" || body === null || result.status !== "done" || !Array.isArray(result.pages)) return text;
  result.pages = result.pages.map((b64, i) => {
    const page = fromBase64(String(b64))!;
    proxy.tamper!(page, i);
    return toBase64(page);
  });
  proxy.tampered++;
  return JSON.stringify(body);
}

/** An event stream, event by event: each `data:` line's JSON through {@link tamperJson}. */
function tamperEvents(upstream: IncomingMessage, res: ServerResponse, proxy: TamperingProxy): void {
  let buffered = "";
  upstream.setEncoding("utf8");
  upstream.on("data", (chunk: string) => {
    buffered += chunk;
    let end: number;
    while ((end = buffered.indexOf("\n\n")) >= 0) {
      const event = buffered.slice(0, end + 2);
      buffered = buffered.slice(end + 2);
      res.write(event.split("\n").map((line) => (line.startsWith("data:") ? `data: ${tamperJson(line.slice(5).trim(), proxy)}` : line)).join("\n"));
    }
  });
  upstream.on("end", () => res.end(buffered));
}

/** Starts a proxy on 127.0.0.1 in front of `target` (a plain-HTTP gateway URL). */
export async function startTamperingProxy(target: string): Promise<TamperingProxy> {
  const upstreamUrl = new URL(target);
  const sockets = new Set<Socket>();
  const proxy: TamperingProxy = { url: "", tampered: 0, close: async () => {} };
  const server: Server = createServer((req, res) => {
    const headers = { ...req.headers, host: upstreamUrl.host };
    const forward = request({ host: upstreamUrl.hostname, port: upstreamUrl.port, method: req.method, path: req.url, headers }, (upstream) => {
      const type = String(upstream.headers["content-type"] ?? "");
      if (type.startsWith("text/event-stream")) {
        res.writeHead(upstream.statusCode!, upstream.headers);
        tamperEvents(upstream, res, proxy);
        return;
      }
      if (!type.startsWith("application/json")) {
        res.writeHead(upstream.statusCode!, upstream.headers);
        upstream.pipe(res);
        return;
      }
      const chunks: Buffer[] = [];
      upstream.on("data", (c: Buffer) => chunks.push(c));
      upstream.on("end", () => {
        const body = Buffer.from(tamperJson(Buffer.concat(chunks).toString("utf8"), proxy));
        res.writeHead(upstream.statusCode!, { ...upstream.headers, "content-length": String(body.length) });
        res.end(body);
      });
    });
    forward.on("error", () => res.destroy());
    req.pipe(forward);
  });
  server.on("connection", (s: Socket) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  proxy.url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  proxy.close = async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return proxy;
}
