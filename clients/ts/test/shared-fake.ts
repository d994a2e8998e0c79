// The shared fake party: `pirq-fake-party` (testkit/src/fake_party.rs, the Rust build), the
// behaviours of FAKE_PARTY.md that the Rust client is tested against too. One process per fake,
// started and killed by the test; its first line of output is its URL.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { join } from "node:path";
import type { Fake, FakeStats } from "./fake-party.js";
import { binDir, makePageDb, pageFromFile, tempDir } from "./parties.js";
import { readFileSync } from "node:fs";

export const SHARED_BEHAVIOURS = [
  "honest", "silent-connect", "silent-info", "dribble-info", "huge-info", "silent-submit", "dribble-answer",
  "huge-answer", "huge-answer-declared", "pending-silent", "sse-keepalive", "sse-huge-line", "bad-id",
  "hostile-error", "retry-503", "retry-429", "wrong-digest",
] as const;
export type SharedBehaviour = (typeof SHARED_BEHAVIOURS)[number];

export interface SharedFakeOptions {
  /** Queries and result reads need `Authorization: Bearer <token>`. */
  token?: string;
  /** Serve https:// with these PEM files (a certificate for 127.0.0.1). */
  tls?: { certFile: string; keyFile: string };
}

/** The shared fake's geometry and contents: its defaults, `pirq db gen --pages 256 --page-size 256 --seed 7`. */
export const SHARED_PAGES = 256;
export const SHARED_PAGE_SIZE = 256;
const SHARED_SEED = 7;

let synthetic: Buffer | undefined;

/** Page `index` of the shared fake's database, from the same generator (`pirq db gen`). */
export function sharedPage(index: number): Uint8Array {
  synthetic ??= readFileSync(makePageDb(tempDir(), SHARED_PAGES, SHARED_PAGE_SIZE, SHARED_SEED));
  return pageFromFile(synthetic, index);
}

export async function startSharedFake(behaviour: SharedBehaviour, options: SharedFakeOptions = {}): Promise<Fake> {
  const args = ["--listen", "127.0.0.1:0", "--behaviour", behaviour];
  if (options.token !== undefined) args.push("--token", options.token);
  if (options.tls) args.push("--tls-cert", options.tls.certFile, "--tls-key", options.tls.keyFile);
  const child = spawn(join(binDir, "pirq-fake-party"), args, { stdio: ["ignore", "pipe", "inherit"] });
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const url = await new Promise<string>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    lines.once("line", (line) => {
      const m = /^listening on (https?:\/\/\S+)$/.exec(line);
      m ? resolve(m[1]) : reject(new Error(`pirq-fake-party said: ${line}`));
    });
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`pirq-fake-party --behaviour ${behaviour} exited (${code}) before its URL`)));
  });
  return {
    url,
    async stats(): Promise<FakeStats> {
      // (with --tls-cert the stats route is https too; the tests read stats of plain fakes only)
      return (await (await fetch(`${url}/fake/stats`)).json()) as FakeStats;
    },
    async close(): Promise<void> {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
  };
}
