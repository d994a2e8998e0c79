// Many tables, one party pair (issue 38, "Done when"): each party is one redis-server, one
// pirq-gateway and ONE pirq-worker serving three tables, two page databases of different page
// sizes (`default`, 256 B pages; `wide`, 4096 B pages) and a key-value table (`users`). Both
// clients answer each table exactly: this TypeScript client (its `table` option) and the Rust
// one (`pirq query|get --table`, a process). One table's epoch is pushed (`pirq epoch push
// --table wide`) and moves alone: the other two stay at epoch 0 and answer as before.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { connect, PirqError, toHex } from "../src/index.js";
import { binDir, makePageDb, makeTextKvDb, pageFromFile, Parties, startParties, tempDir, warnings } from "./parties.js";

const TOKEN = "admin-token-for-the-tables-test";
const USERS = Array.from({ length: 150 }, (_, i) => ({ key: `user-${i}`, value: `profile of user ${i}` }));
let parties: Parties;
let dir: string;
let files: { default: string; wide: string; users: string };
let dbs: { default: Buffer; wide: Buffer };

before(async () => {
  dir = tempDir();
  files = {
    default: makePageDb(dir, 300, 256, 11),
    wide: makePageDb(dir, 70, 4096, 12),
    users: makeTextKvDb(dir, USERS, { maxValueSize: 32 }),
  };
  dbs = { default: readFileSync(files.default), wide: readFileSync(files.wide) };
  parties = await startParties({ db: files.default, tables: { wide: files.wide, users: files.users }, adminToken: TOKEN });
});
after(async () => {
  await parties?.stop();
});

/** The Rust client, `pirq ARGS...`, against the two parties: its stdout. */
function pirq(...args: string[]): string {
  return execFileSync(join(binDir, "pirq"), args, {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, PIRQ_PARTY_A: parties.a.url, PIRQ_PARTY_B: parties.b.url },
  });
}

/** Page `index` as `pirq query --table TABLE` writes it (a file per page in `--out`). */
function rustPage(table: string, index: number): Uint8Array {
  const out = join(dir, `rust-${table}-${index}-${Math.random().toString(36).slice(2)}`);
  pirq("query", "--table", table, "--index", String(index), "--out", out);
  return new Uint8Array(readFileSync(join(out, `page-${index}.bin`)));
}

interface Listed {
  name: string;
  kind: string;
  page_size: number;
  epoch: { oldest: number; newest: number };
  workers: number;
  digest?: string;
}

async function listed(url: string): Promise<Listed[]> {
  const body = (await (await fetch(`${url}/v1/tables`)).json()) as { tables: Listed[] };
  return body.tables;
}

test("each party lists its three tables, served by its one worker", async () => {
  for (const party of [parties.a, parties.b]) {
    const tables = await listed(party.url);
    assert.deepEqual(
      tables.map((t) => [t.name, t.kind, t.page_size]).sort(),
      [["default", "pages", 256], ["users", "kv", 4096], ["wide", "pages", 4096]].sort(),
    );
    // One worker process serves all three: each table counts it among its live workers.
    assert.deepEqual(tables.map((t) => t.workers), [1, 1, 1]);
  }
});

test("both clients answer every table exactly", async () => {
  // The TypeScript client: a connection per table (absent: `default`).
  const byDefault = await connect(parties.a.url, parties.b.url);
  const wide = await connect(parties.a.url, parties.b.url, { table: "wide" });
  const users = await connect(parties.a.url, parties.b.url, { table: "users" });
  assert.equal(byDefault.info.pageSize, 256);
  assert.equal(wide.info.pageSize, 4096);
  assert.ok(users.info.kv, "the users table is key-value");
  const small = await byDefault.getPages([0, 7, 299]);
  assert.deepEqual(small.pages, [0, 7, 299].map((i) => pageFromFile(dbs.default, i)));
  const big = await wide.getPages([0, 33, 69]);
  assert.deepEqual(big.pages, [0, 33, 69].map((i) => pageFromFile(dbs.wide, i)));
  assert.equal(await users.getValue("user-42"), "profile of user 42");
  assert.equal(await users.getValue("nobody"), null);
  // get on a page table is refused, whichever table the connection names.
  await assert.rejects(wide.get("user-1"), (e: unknown) => e instanceof PirqError && e.code === "not_kv");

  // The Rust client, the same tables by name.
  assert.equal(toHex(rustPage("default", 7)), toHex(pageFromFile(dbs.default, 7)));
  assert.equal(toHex(rustPage("wide", 33)), toHex(pageFromFile(dbs.wide, 33)));
  assert.equal(pirq("get", "--table", "users", "--key", "user-7").trim(), "profile of user 7");
});

test("a table the parties do not serve is unknown_table, to both clients", async () => {
  const nothing = connect(parties.a.url, parties.b.url, { table: "nothing" });
  await assert.rejects(nothing, (e: unknown) => e instanceof PirqError && e.code === "unknown_table");
  assert.throws(() => pirq("query", "--table", "nothing", "--index", "1", "--out", "-"), /unknown_table|no table/);
});

test("one table's epoch is pushed and moves alone", async () => {
  // Epoch 1 of `wide` (both parties, by the Rust admin tool); `pirq db apply` folds the same
  // update into a reference copy.
  const update = join(dir, "wide-epoch-1.json");
  const reference = join(dir, "wide-1.pirdb");
  pirq("epoch", "make", "--db", files.wide, "--epoch", "1", "--pages", "9", "--seed", "4", "--out", update);
  pirq("db", "apply", "--db", files.wide, "--update", update, "--out", reference);
  const changed = [...readFileSync(update, "utf8").matchAll(/"index":\s*(\d+)/g)].map((m) => Number(m[1]));
  assert.ok(changed.length > 0, "the update replaces pages");
  for (const party of [parties.a, parties.b]) {
    execFileSync(join(binDir, "pirq"), ["epoch", "push", "--party", party.url, "--table", "wide", "--from", update], {
      stdio: "pipe",
      env: { ...process.env, PIRQ_ADMIN_TOKEN: TOKEN },
    });
  }
  const deadline = Date.now() + 30_000;
  for (const party of [parties.a, parties.b]) {
    // Pushed, and applied by the worker (the digest at the newest epoch is there then).
    const at1 = (t?: Listed) => t?.epoch.newest === 1 && t.digest !== undefined;
    while (!at1((await listed(party.url)).find((t) => t.name === "wide"))) {
      assert.ok(Date.now() < deadline, `party ${party.name}'s wide table never reached epoch 1`);
      await new Promise((r) => setTimeout(r, 50));
    }
    // The other two tables did not move.
    for (const t of await listed(party.url)) if (t.name !== "wide") assert.deepEqual(t.epoch, { oldest: 0, newest: 0 }, `${party.name}: ${t.name}`);
  }
  const wide1 = readFileSync(reference);
  const wide = await connect(parties.a.url, parties.b.url, { table: "wide" });
  const result = await wide.getPages(changed);
  assert.equal(result.epoch, 1);
  assert.deepEqual(result.pages, changed.map((i) => pageFromFile(wide1, i)));
  assert.ok(changed.some((i) => toHex(pageFromFile(wide1, i)) !== toHex(pageFromFile(dbs.wide, i))), "some page changed");
  assert.equal(toHex(rustPage("wide", changed[0])), toHex(pageFromFile(wide1, changed[0])));
  // The other tables answer at epoch 0, as before.
  const byDefault = await connect(parties.a.url, parties.b.url);
  const small = await byDefault.getPages([changed[0]]);
  assert.equal(small.epoch, 0);
  assert.deepEqual(small.pages, [pageFromFile(dbs.default, changed[0])]);
  const users = await connect(parties.a.url, parties.b.url, { table: "users" });
  assert.equal(users.info.epoch.newest, 0);
  assert.equal(await users.getValue("user-149"), "profile of user 149");
});

test("no WARN or ERROR lines in the parties' logs", () => {
  for (const p of [parties.a, parties.b]) for (const proc of [p.gateway, p.worker]) assert.deepEqual(warnings(proc), [], proc.name);
});
