// Test harness: two real pirq parties on loopback, each its own redis-server, pirq-gateway and
// pirq-worker (the binaries of the Rust build), started and stopped by the test itself.
//
// Binaries: $PIRQ_BIN_DIR, else <repo>/target/release (scripts/test.sh builds them first).
import { spawn, ChildProcess, execFileSync } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync, existsSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { get as httpsGet } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));
export const binDir = process.env.PIRQ_BIN_DIR ?? join(repoRoot, "target", "release");

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as { port: number }).port;
      server.close(() => resolve(port));
    });
  });
}

const everyChild = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of everyChild) child.kill("SIGKILL");
});

class Proc {
  readonly child: ChildProcess;
  constructor(readonly name: string, readonly log: string, cmd: string, args: string[]) {
    const fd = openSync(log, "w");
    this.child = spawn(cmd, args, { stdio: ["ignore", fd, fd], env: { ...process.env, RUST_LOG: "info" } });
    everyChild.add(this.child);
    this.child.once("exit", () => everyChild.delete(this.child));
  }
  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }
  async stop(): Promise<void> {
    if (!this.running) return;
    const exited = new Promise((r) => this.child.once("exit", r));
    this.child.kill("SIGTERM");
    const timer = setTimeout(() => this.child.kill("SIGKILL"), 3000);
    await exited;
    clearTimeout(timer);
  }
  logText(): string {
    return existsSync(this.log) ? readFileSync(this.log, "utf8") : "";
  }
}

async function waitFor(what: string, procs: Proc[], check: () => Promise<boolean>, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return;
    const dead = procs.find((p) => !p.running);
    if (dead) throw new Error(`${dead.name} exited while waiting for ${what}:\n${dead.logText().slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}:\n${procs.map((p) => `--- ${p.name}\n${p.logText().slice(-1000)}`).join("\n")}`);
}

export interface PartyProcs {
  name: string;
  url: string;
  redis: Proc;
  gateway: Proc;
  worker: Proc;
}

export interface Parties {
  dir: string;
  a: PartyProcs;
  b: PartyProcs;
  stop(): Promise<void>;
}

export interface PartiesOptions {
  /** The .pirdb both parties serve. */
  db: string;
  /** Another .pirdb for party B (to test parties that disagree). */
  dbB?: string;
  /** Origins for the gateways' --cors-origin (none: flag left out). */
  corsOrigins?: string[];
  /** The gateways' --admin-token (none: admin routes off), for tests that push epochs. */
  adminToken?: string;
  /** Serve https: the gateways' --tls-cert/--tls-key (a certificate for 127.0.0.1), trusted by `caFile`. */
  tls?: { certFile: string; keyFile: string; caFile: string };
  /** Tokens for each gateway's --query-tokens file (one a line): queries then need one of them. */
  queryTokens?: { a: string[]; b: string[] };
  /** More flags for both gateways (e.g. `--manifests FILE`). */
  gatewayArgs?: string[];
  /**
   * Named tables both workers serve beside `db` (the table `default`): `--table NAME=FILE` each
   * (issue 38). The parties are started once every one of them is listed by `GET /v1/tables`.
   */
  tables?: Record<string, string>;
}

/** `pirq db gen` (the Rust tool) into `dir`: a synthetic page database, signed with `signKey` (a secret key file) when given. */
export function makePageDb(dir: string, pages: number, pageSize: number, seed = 1, signKey?: string): string {
  const out = join(dir, `pages-${pages}x${pageSize}-seed${seed}${signKey ? "-signed" : ""}.pirdb`);
  const sign = signKey ? ["--sign-key", signKey] : [];
  execFileSync(join(binDir, "pirq"), ["db", "gen", "--pages", String(pages), "--page-size", String(pageSize), "--seed", String(seed), ...sign, "--out", out], { stdio: "pipe" });
  return out;
}

/** `pirq publisher keygen` into `dir`: a publisher's key pair, as file paths and the public key's text. */
export function makePublisherKey(dir: string, name: string): { secretFile: string; publicFile: string; publicKey: string; publicHex: string } {
  const secretFile = join(dir, `${name}.secret`);
  const publicFile = join(dir, `${name}.pub`);
  execFileSync(join(binDir, "pirq"), ["publisher", "keygen", "--secret", secretFile, "--public", publicFile], { stdio: "pipe" });
  const publicKey = readFileSync(publicFile, "utf8");
  // the key file's text is `pirq-publisher-public-v1:<64 hex>` (docs/spec/signed.md §1)
  return { secretFile, publicFile, publicKey, publicHex: publicKey.trim().replace(/^pirq-publisher-public-v1:/, "") };
}

/** Records for a kv test database: text keys `user:0000`.., values of `valueSize` bytes. */
export function kvRecords(count: number, valueSize: number): [Uint8Array, Uint8Array][] {
  const enc = new TextEncoder();
  return Array.from({ length: count }, (_, i) => {
    const value = new Uint8Array(valueSize).map((_, j) => (i * 31 + j * 7 + 1) & 255);
    return [enc.encode(`user:${String(i).padStart(4, "0")}`), value];
  });
}

/**
 * `pirq kv build` (the Rust tool) of `records` into `dir`: a key-value database of fixed-size
 * values (`valueSize`), a set (`valueSize: 0`; the records' values are ignored) or variable-size
 * values up to `maxValueSize` bytes (KV §2).
 */
export function makeKvDb(
  dir: string,
  records: [Uint8Array, Uint8Array | null][],
  options: { valueSize?: number; maxValueSize?: number; pageSize: number; pages: number; choices: number; signKey?: string },
): string {
  const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
  const input = join(dir, "records.jsonl");
  const set = options.valueSize === 0;
  writeFileSync(input, records.map(([k, v]) => JSON.stringify(set || v === null ? { key: hex(k) } : { key: hex(k), value: hex(v) })).join("\n") + "\n");
  const out = join(dir, `kv-${options.pages}x${options.pageSize}-${Math.random().toString(36).slice(2)}.pirdb`);
  const values = options.maxValueSize !== undefined ? ["--max-value-size", String(options.maxValueSize)] : ["--value-size", String(options.valueSize)];
  execFileSync(join(binDir, "pirq"), [
    "kv", "build", "--records", input, ...values, "--key-encoding", "hex", "--value-encoding", "hex",
    "--page-size", String(options.pageSize),
    "--pages", String(options.pages), "--choices", String(options.choices), "--seed", "5",
    ...(options.signKey ? ["--sign-key", options.signKey] : []), "--out", out,
  ], { stdio: "pipe" });
  return out;
}

/** A kv database of text records built as users build one: no encoding flags (text keys and values, or JSON values with `json`). */
export function makeTextKvDb(dir: string, lines: object[], options: { maxValueSize: number; json?: boolean }): string {
  const input = join(dir, "records.jsonl");
  writeFileSync(input, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
  const out = join(dir, `text-kv-${Math.random().toString(36).slice(2)}.pirdb`);
  execFileSync(join(binDir, "pirq"), [
    "kv", "build", "--records", input, "--max-value-size", String(options.maxValueSize), "--seed", "5",
    ...(options.json ? ["--value-encoding", "json"] : []), "--out", out,
  ], { stdio: "pipe" });
  return out;
}

/** Page `p` of a .pirdb file read straight from the file (SPEC §2: header 4096 B, then pages). */
export function pageFromFile(db: Buffer, p: number): Uint8Array {
  const pageSize = db.readUInt32LE(8);
  return new Uint8Array(db.subarray(4096 + p * pageSize, 4096 + (p + 1) * pageSize));
}

export function tempDir(): string {
  return mkdtempSync(join(tmpdir(), "pirq-ts-"));
}

/** Whether `url` answers 200 (over https trusting `ca`, the test's own CA, when given). */
async function httpOk(url: string, ca?: string): Promise<boolean> {
  if (!ca) {
    const r = await fetch(url);
    await r.body?.cancel();
    return r.status === 200;
  }
  return new Promise((resolve, reject) => {
    httpsGet(url, { ca }, (r) => {
      r.resume();
      resolve(r.statusCode === 200);
    }).on("error", reject);
  });
}

async function startParty(dir: string, name: string, options: PartiesOptions): Promise<PartyProcs> {
  // freePort() names a port that is free when asked; another process (test files run in
  // parallel) may bind it before the gateway does. A start that lost that race is retried on
  // fresh ports.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startPartyOnce(dir, name, options);
    } catch (e) {
      if (attempt >= 3 || !String(e).includes("Address already in use")) throw e;
    }
  }
}

async function startPartyOnce(dir: string, name: string, options: PartiesOptions): Promise<PartyProcs> {
  const redisPort = await freePort();
  const gatewayPort = await freePort();
  const prefix = `ts-${name}`;
  const redisDir = mkdtempSync(join(dir, `redis-${name}-`));
  const redis = new Proc(`redis-${name}`, join(dir, `redis-${name}.log`), "redis-server", [
    "--port", String(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", redisDir,
  ]);
  const redisUrl = `redis://127.0.0.1:${redisPort}`;
  await waitFor(`redis-server ${name}`, [redis], async () => {
    try {
      execFileSync("redis-cli", ["-p", String(redisPort), "ping"], { stdio: "pipe" });
      return true;
    } catch {
      return false;
    }
  });
  const cors = (options.corsOrigins ?? []).flatMap((o) => ["--cors-origin", o]);
  if (options.adminToken) cors.push("--admin-token", options.adminToken);
  if (options.tls) cors.push("--tls-cert", options.tls.certFile, "--tls-key", options.tls.keyFile);
  if (options.queryTokens) {
    const file = join(dir, `tokens-${name}.txt`);
    writeFileSync(file, options.queryTokens[name as "a" | "b"].join("\n") + "\n");
    cors.push("--query-tokens", file);
  }
  cors.push(...(options.gatewayArgs ?? []));
  const gateway = new Proc(`gateway-${name}`, join(dir, `gateway-${name}.log`), join(binDir, "pirq-gateway"), [
    "--redis", redisUrl, "--prefix", prefix, "--listen", `127.0.0.1:${gatewayPort}`, ...cors,
  ]);
  const tables = Object.entries(options.tables ?? {}).flatMap(([table, file]) => ["--table", `${table}=${file}`]);
  const worker = new Proc(`worker-${name}`, join(dir, `worker-${name}.log`), join(binDir, "pirq-worker"), [
    "--redis", redisUrl, "--prefix", prefix, "--db", name === "b" && options.dbB ? options.dbB : options.db, "--backend", "cpu", "--threads", "1",
    ...tables,
  ]);
  const url = `${options.tls ? "https" : "http"}://127.0.0.1:${gatewayPort}`;
  const ca = options.tls ? readFileSync(options.tls.caFile, "utf8") : undefined;
  try {
    await waitFor(`party ${name} ready`, [redis, gateway, worker], () => httpOk(`${url}/readyz`, ca));
    const named = Object.keys(options.tables ?? {});
    if (named.length > 0) {
      // The party is ready with its default table; the named ones register beside it.
      await waitFor(`party ${name}'s tables ${named.join(", ")}`, [redis, gateway, worker], async () => {
        const listed = (await (await fetch(`${url}/v1/tables`)).json()) as { tables: { name: string }[] };
        return named.every((t) => listed.tables.some((l) => l.name === t));
      });
    }
  } catch (e) {
    await Promise.all([gateway.stop(), worker.stop()]);
    await redis.stop();
    throw e;
  }
  return { name, url, redis, gateway, worker };
}

/** Starts party A and party B, both serving `options.db`. */
export async function startParties(options: PartiesOptions): Promise<Parties> {
  const dir = tempDir();
  const started: PartyProcs[] = [];
  const stop = async () => {
    for (const p of started) await Promise.all([p.gateway.stop(), p.worker.stop()]);
    for (const p of started) await p.redis.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    started.push(await startParty(dir, "a", options));
    started.push(await startParty(dir, "b", options));
  } catch (e) {
    await stop();
    throw e;
  }
  return { dir, a: started[0], b: started[1], stop };
}

/**
 * Appends epoch `epoch` (whole-page replacements) at a party through its admin route
 * (`POST /v1/admin/epochs`, docs/http-api.md), then waits until its workers serve it.
 */
export async function pushEpoch(party: PartyProcs, token: string, epoch: number, pages: { index: number; page: Uint8Array }[], table?: string): Promise<void> {
  const body = JSON.stringify({ epoch, pages: pages.map((p) => ({ index: p.index, page: Buffer.from(p.page).toString("base64") })) });
  const [admin, api] = table === undefined ? ["/v1/admin", "/v1"] : [`/v1/admin/tables/${table}`, `/v1/tables/${table}`];
  const response = await fetch(`${party.url}${admin}/epochs`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body });
  if (response.status !== 200) throw new Error(`epoch push to ${party.name}: HTTP ${response.status} ${await response.text()}`);
  await waitFor(`party ${party.name} at epoch ${epoch}`, [party.gateway, party.worker], async () => {
    const info = (await (await fetch(`${party.url}${api}/info`)).json()) as { epoch: { newest: number }; digest?: string };
    return info.epoch.newest === epoch && info.digest !== undefined;
  });
}

/** Lines at WARN or ERROR level in a process log (normal operation must have none). */
export function warnings(p: Proc): string[] {
  return p.logText().split("\n").filter((l) => /\b(WARN|ERROR)\b/.test(l));
}
