// A fake party of this client's own on loopback: a real HTTP server (node:http) that answers
// the documented API (docs/http-api.md) itself — honestly, DPF answers over its own pages —
// except for the one behaviour it is told to have. The behaviours of FAKE_PARTY.md, the ones
// both clients (Rust, TypeScript) are tested against, come from the shared binary
// (`pirq-fake-party`, shared-fake.ts); the ones here are checks of this client's own on top:
// redirects, floods, hostile info, error bodies, results for another query.
//
// Used by fake-party.test.ts (Node) and browser-fake.test.ts (Chromium): the browser reaches it
// across origins, so every answer carries CORS headers like a gateway with --cors-origin '*'.
import { createServer, IncomingMessage, Server, ServerResponse } from "node:http";
import { createServer as createTlsServer } from "node:https";
import { Socket } from "node:net";
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseKey, evalFullDomain } from "../src/dpf.js";
import { fromBase64, toBase64 } from "../src/bytes.js";

export const NODE_BEHAVIOURS = [
  "honest", "redirect", "poll-flood", "retry-after-long", "always-503", "sse-status-flood", "huge-error",
  "impossible-info", "nested-info", "wrong-id-result", "hostile-message", "bad-code", "wrong-page-count",
] as const;
export type NodeBehaviour = (typeof NODE_BEHAVIOURS)[number];

/** What a fake party was asked: FAKE_PARTY.md's `GET /fake/stats`. */
export interface FakeStats {
  info: number;
  submits: number;
  results: number;
  events: number;
}

/** A running fake party, of either kind (this file's, or the shared binary of shared-fake.ts). */
export interface Fake {
  url: string;
  stats(): Promise<FakeStats>;
  /** Every request with its headers (this file's fakes only). */
  seen?: SeenRequest[];
  close(): Promise<void>;
}

export interface FakePartyOptions {
  behaviour: NodeBehaviour;
  pages?: number;
  pageSize?: number;
  seed?: number;
  epoch?: number;
  /** Required as `Authorization: Bearer <token>` on the query routes (401 `unauthorized` otherwise). */
  token?: string;
  /** Where a `redirect` party sends its submits. */
  redirectTo?: string;
  /** Serve https:// with this PEM key and certificate chain (a certificate for 127.0.0.1). */
  tls?: { key: string; cert: string };
}

/** What the fake saw: every request's method, path and the headers a test checks. */
export interface SeenRequest {
  method: string;
  path: string;
  authorization?: string;
  idempotencyKey?: string;
}

const GiB = 1024 ** 3;

/** Deterministic page contents: both fakes with one seed serve the same database. */
export function fakePage(seed: number, index: number, pageSize: number): Uint8Array {
  return new Uint8Array(pageSize).map((_, j) => (seed * 131 + index * 31 + j * 7 + 1) & 255);
}

/** The fake's database digest: any 64 hex digits, the same for fakes of the same contents. */
export function fakeDigest(seed: number, pages: number, pageSize: number, epoch: number): string {
  return createHash("sha256").update(`fake ${seed} ${pages} ${pageSize} ${epoch}`).digest("hex");
}

const cors = {
  "access-control-allow-origin": "*",
  "access-control-expose-headers": "location, retry-after, preference-applied, server-timing",
};

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { ...cors, "content-type": "application/json", "content-length": Buffer.byteLength(text), ...headers });
  res.end(text);
}

function error(res: ServerResponse, status: number, code: string, message: string, headers: Record<string, string> = {}): void {
  json(res, status, { error: { code, message } }, headers);
}

/** Writes `bytes` of `fill` in 64 KiB chunks, waiting for the socket to drain; stops when the client goes. */
function stream(res: ServerResponse, bytes: number, fill: number): void {
  const chunk = Buffer.alloc(64 * 1024, fill);
  let sent = 0;
  const more = () => {
    while (sent < bytes && !res.destroyed) {
      sent += chunk.length;
      if (!res.write(chunk)) return void res.once("drain", more);
    }
    if (!res.destroyed) res.end();
  };
  res.on("close", () => (sent = bytes));
  more();
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

export async function startFakeParty(options: FakePartyOptions): Promise<Fake> {
  const { behaviour } = options;
  const pages = options.pages ?? 256;
  const pageSize = options.pageSize ?? 256;
  const seed = options.seed ?? 7;
  const epoch = options.epoch ?? 0;
  const domainBits = Math.max(1, Math.ceil(Math.log2(pages)));
  const db = Array.from({ length: pages }, (_, p) => fakePage(seed, p, pageSize));
  const digest = fakeDigest(seed, pages, pageSize, epoch);
  const partyId = createHash("md5").update(String(Math.random())).digest("hex");
  const seen: SeenRequest[] = [];
  const stats = { info: 0, submits: 0, results: 0, events: 0 };
  const results = new Map<string, unknown>();
  const sockets = new Set<Socket>();
  let submits = 0;

  const info = () => ({
    num_pages: pages, page_size: pageSize, domain_bits: domainBits, epoch: { oldest: epoch, newest: epoch },
    max_keys_per_query: 64, workers: 1, digest, party: partyId,
  });

  /** The honest answer to a submitted body: each key's selected pages XORed (SPEC §3). */
  const answer = (body: string, id: string) => {
    const request = JSON.parse(body) as { keys: string[] };
    const answers = request.keys.map((k) => {
      const bits = evalFullDomain(parseKey(fromBase64(k)!));
      const acc = new Uint8Array(pageSize);
      for (let p = 0; p < pages; p++) {
        if ((bits[p >> 3] >> (p & 7)) & 1) for (let j = 0; j < pageSize; j++) acc[j] ^= db[p][j];
      }
      return toBase64(acc);
    });
    if (behaviour === "wrong-page-count") answers.pop();
    return { id, status: "done", epoch, pages: answers, digest };
  };

  const newId = () => createHash("md5").update(String(Math.random())).digest("hex");

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://fake");
    const path = url.pathname;
    seen.push({
      method: req.method ?? "",
      path: req.url ?? "",
      authorization: req.headers.authorization,
      idempotencyKey: req.headers["idempotency-key"] as string | undefined,
    });
    if (req.method === "OPTIONS") {
      res.writeHead(204, {
        ...cors,
        "access-control-allow-methods": "GET, POST",
        "access-control-allow-headers": "content-type, accept, idempotency-key, prefer, authorization",
        "access-control-max-age": "600",
      });
      return void res.end();
    }
    if (path === "/fake/stats") return json(res, 200, stats);
    if (path === "/v1/info") {
      stats.info++;
      switch (behaviour) {
        case "impossible-info":
          return json(res, 200, { ...info(), num_pages: 2 ** domainBits + 1 });
        case "nested-info":
          res.writeHead(200, { ...cors, "content-type": "application/json" });
          return void res.end("[".repeat(30_000) + "]".repeat(30_000));
        default:
          return json(res, 200, info());
      }
    }
    if (!path.startsWith("/v1/queries")) return error(res, 404, "not_found", "no such route");
    if (options.token !== undefined && req.headers.authorization !== `Bearer ${options.token}`) {
      return error(res, 401, "unauthorized", "a query needs this party's bearer token");
    }
    if (path === "/v1/queries" && req.method === "POST") {
      stats.submits++;
      submits++;
      const body = await readBody(req);
      const id = newId();
      const held = /wait=/.test(String(req.headers.prefer ?? ""));
      switch (behaviour) {
        case "hostile-message":
          // a documented code with a hostile message (the shared `hostile-error` has a hostile code too)
          return error(res, 400, "invalid_json", "\u001b[31mred\u0007\r\u009b2J\u0000" + "x".repeat(5000));
        case "bad-code":
          return error(res, 400, "\u001b[31minvalid", "a code that is not of the documented form");
        case "huge-error":
          res.writeHead(400, { ...cors, "content-type": "application/json" });
          return stream(res, GiB, 0x20);
        case "always-503":
          return error(res, 503, "too_many_waiters", "come back later", { "retry-after": "0" });
        case "retry-after-long":
          return error(res, 503, "not_durable", "come back much later", { "retry-after": "3600" });
        case "redirect":
          res.writeHead(307, { ...cors, location: `${options.redirectTo ?? "http://127.0.0.1:9"}/v1/queries` });
          return void res.end();
        case "sse-status-flood":
        case "poll-flood":
        case "wrong-id-result":
          results.set(id, null);
          return json(res, 202, { id, status: "queued" }, { location: `/v1/queries/${id}`, "retry-after": "1" });
      }
      const result = answer(body, id);
      results.set(id, result);
      if (held) return json(res, 200, result, { location: `/v1/queries/${id}`, "preference-applied": "wait" });
      return json(res, 202, { id, status: "queued" }, { location: `/v1/queries/${id}`, "retry-after": "1" });
    }
    const m = /^\/v1\/queries\/([0-9a-f]{32})(\/events)?$/.exec(path);
    if (!m) return error(res, 400, "invalid_id", "not a query id");
    if (!results.has(m[1])) return error(res, 404, "not_found", "no such query");
    const result = results.get(m[1]);
    if (m[2]) {
      stats.events++;
      res.writeHead(200, { ...cors, "content-type": "text/event-stream", "cache-control": "no-cache" });
      res.flushHeaders();
      switch (behaviour) {
        case "sse-status-flood":
          return stream(res, GiB, 0x0a); // empty lines: valid framing, no event, never ending
        case "wrong-id-result":
          return void res.end(`event: result\ndata: ${JSON.stringify({ id: newId(), status: "done", epoch, pages: [], digest })}\n\n`);
      }
      return void res.end(`event: status\ndata: {"id":"${m[1]}","status":"queued"}\n\nevent: result\ndata: ${JSON.stringify(result)}\n\n`);
    }
    stats.results++;
    if (behaviour === "poll-flood") return json(res, 202, { id: m[1], status: "queued" });
    return json(res, 200, result);
  }

  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    handle(req, res).catch((e) => {
      if (!res.headersSent) error(res, 500, "internal", String(e));
    });
  };
  const server = options.tls ? createTlsServer({ key: options.tls.key, cert: options.tls.cert }, onRequest) : createServer(onRequest);
  server.on(options.tls ? "secureConnection" : "connection", (socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `${options.tls ? "https" : "http"}://127.0.0.1:${(server.address() as { port: number }).port}`,
    seen,
    stats: async () => ({ ...stats }),
    close: () => closeAll(server, sockets),
  };
}

/**
 * A throwaway CA and a certificate for 127.0.0.1 and localhost signed by it, made by `openssl` in `dir`: the
 * files (the CA's for NODE_EXTRA_CA_CERTS) and the party's key and certificate as PEM text.
 */
export function makeTestCa(dir: string): { caFile: string; certFile: string; keyFile: string; key: string; cert: string } {
  const run = (args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  run(["req", "-x509", ...ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=pirq test CA"]);
  run(["req", ...ec, "-keyout", "party.key", "-out", "party.csr", "-subj", "/CN=127.0.0.1"]);
  writeFileSync(join(dir, "party.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n");
  run(["x509", "-req", "-in", "party.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "party.pem", "-days", "1", "-extfile", "party.ext"]);
  const read = (f: string) => readFileSync(join(dir, f), "utf8");
  return { caFile: join(dir, "ca.pem"), certFile: join(dir, "party.pem"), keyFile: join(dir, "party.key"), key: read("party.key"), cert: read("party.pem") };
}

async function closeAll(server: Server | ReturnType<typeof createTlsServer>, sockets: Set<Socket>): Promise<void> {
  for (const s of sockets) s.destroy();
  await new Promise<void>((r) => server.close(() => r()));
}
