// ethers v6 (a wallet library nobody here wrote) reading Ethereum state through `pirq eth serve`
// in front of two real pirq parties on loopback: each its own redis-server, pirq-gateway and
// pirq-worker serving the tables accounts, code and storage that `pirq eth import` made from a
// synthetic geth dump (`pirq eth gen`), signed by a publisher whose key the endpoint verifies every
// page against (`--publisher-key`; each party serves each table's manifests with
// `--table-manifests`). Every value read is compared with the dump itself, before and after a
// block update made from the block's changes (`eth import --changes`, which also deletes two
// accounts: `{"address": A, "deleted": true, "storage": {slot: "0", …}}`) and pushed with
// `pirq epoch push --table NAME`.
//
// Binaries: $PIRQ_BIN_DIR, else <repo>/target/release (scripts/test.sh builds them first).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { appendFileSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, renameSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { JsonRpcProvider, ZeroHash, zeroPadValue, toBeHex, Wallet } from "ethers";

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
const binDir = process.env.PIRQ_BIN_DIR ?? join(repoRoot, "target", "release");
const bin = (name) => join(binDir, name);
const TOKEN = "eth-test-admin-token";
const BLOCK = 1000;
const CHAIN_ID = 1337;

for (const b of ["pirq", "pirq-gateway", "pirq-worker"]) {
  if (!existsSync(bin(b))) {
    throw new Error(`${bin(b)} is missing: build it with cargo build --release -p pirq-cli -p pirq-gateway -p pirq-worker (or set PIRQ_BIN_DIR)`);
  }
}

const dir = mkdtempSync(join(tmpdir(), "pirq-eth-"));
const children = [];
process.on("exit", () => children.forEach((c) => c.kill("SIGKILL")));

function start(name, cmd, args) {
  const log = join(dir, `${name}.log`);
  const fd = openSync(log, "w");
  const child = spawn(cmd, args, { stdio: ["ignore", fd, fd], env: { ...process.env, RUST_LOG: "info" } });
  children.push(child);
  return { name, log, child };
}

async function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = s.address().port;
      s.close(() => resolve(port));
    });
  });
}

async function waitFor(what, check, ms = 30_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await check().catch(() => false)) return;
    const dead = children.find((c) => c.exitCode !== null);
    if (dead) throw new Error(`a process exited while waiting for ${what} (logs in ${dir})`);
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (logs in ${dir})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const pirq = (...args) => execFileSync(bin("pirq"), args, { stdio: "pipe", env: { ...process.env, PIRQ_ADMIN_TOKEN: TOKEN } });

/** The dump's accounts by lowercase address: balance, nonce, code, storage (slot → 32-byte value). */
function readDump(path) {
  const accounts = new Map();
  for (const line of readFileSync(path, "utf8").split("\n")) {
    if (!line.trim()) continue;
    const a = JSON.parse(line);
    if (!a.address) continue;
    const storage = new Map();
    for (const [slot, value] of Object.entries(a.storage ?? {})) {
      // geth prints values without 0x and without their leading zero bytes
      const digits = value.replace(/^0x/, "");
      storage.set(BigInt(slot), zeroPadValue("0x" + (digits.length % 2 ? "0" : "") + digits, 32));
    }
    accounts.set(a.address.toLowerCase(), { balance: BigInt(a.balance), nonce: a.nonce, code: a.code ?? "0x", storage });
  }
  return accounts;
}

async function startParty(name, tables, manifests) {
  const redisPort = await freePort();
  const gatewayPort = await freePort();
  start(`redis-${name}`, "redis-server", ["--port", String(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--dbfilename", `${name}.rdb`]);
  await waitFor(`redis ${name}`, async () => {
    execFileSync("redis-cli", ["-p", String(redisPort), "ping"], { stdio: "pipe" });
    return true;
  });
  const redis = `redis://127.0.0.1:${redisPort}`;
  const gateway = start(`gateway-${name}`, bin("pirq-gateway"), ["--redis", redis, "--prefix", `eth-${name}`, "--listen", `127.0.0.1:${gatewayPort}`, "--admin-token", TOKEN,
    "--table-manifests", ["accounts", "code", "storage"].map((t) => `${t}=${join(manifests, `${t}.manifests.json`)}`).join(",")]);
  const worker = start(`worker-${name}`, bin("pirq-worker"), [
    "--redis", redis, "--prefix", `eth-${name}`, "--backend", "cpu", "--threads", "1",
    ...["accounts", "code", "storage"].flatMap((t) => ["--table", `${t}=${join(tables, `${t}.pirdb`)}`]),
  ]);
  const url = `http://127.0.0.1:${gatewayPort}`;
  // The party has no default table: it is ready when all three tables have a live worker.
  await waitFor(`party ${name}`, async () => {
    const listed = await (await fetch(`${url}/v1/tables`)).json();
    return listed.tables?.length === 3 && listed.tables.every((t) => t.workers > 0);
  });
  return { url, logs: [gateway.log, worker.log] };
}

const rpc = async (url, body) => (await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) })).json();

let before0, after1, deleted, a, b, serveUrl, serveLog, provider;
const manifests = join(dir, "manifests");
const staged = join(dir, "staged-manifests");

before(async () => {
  const d0 = join(dir, "block0.jsonl");
  const d1 = join(dir, "block1.jsonl");
  pirq("eth", "gen", "--accounts", "300", "--slots", "5", "--codes", "6", "--seed", "11", "--out", d0, "--quiet");
  pirq("eth", "gen", "--accounts", "300", "--slots", "5", "--codes", "6", "--seed", "11", "--changed", "40", "--out", d1, "--quiet");
  // Block 1 as its changes only: what the update is made from.
  const c1 = join(dir, "changes1.jsonl");
  pirq("eth", "gen", "--accounts", "300", "--slots", "5", "--codes", "6", "--seed", "11", "--changed", "40", "--changes-only", "--out", c1, "--quiet");
  // Block 1 also deletes a contract (listing the slots it held) and an account without code,
  // neither of which it changes: afterwards they read as a node reads an absent account.
  before0 = readDump(d0);
  after1 = readDump(d1);
  const inBlock = new Set(readFileSync(c1, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l).address?.toLowerCase()));
  const untouched = (contract) => [...before0.keys()].find((x) => !inBlock.has(x) && (before0.get(x).code !== "0x") === contract);
  deleted = [untouched(true), untouched(false)];
  const slots = Object.fromEntries([...before0.get(deleted[0]).storage.keys()].map((k) => [zeroPadValue(toBeHex(k), 32), "0"]));
  assert.ok(Object.keys(slots).length > 0, "the deleted contract has slots");
  appendFileSync(c1, JSON.stringify({ address: deleted[0], deleted: true, storage: slots }) + "\n" + JSON.stringify({ deleted: true, address: deleted[1] }) + "\n");
  for (const x of deleted) after1.delete(x);
  const [secret, pub] = [join(dir, "publisher.key"), join(dir, "publisher.pub")];
  pirq("publisher", "keygen", "--secret", secret, "--public", pub);
  pirq("eth", "import", "--dump", d0, "--out", join(dir, "s0"), "--block", String(BLOCK), "--seed", "3", "--sign-key", secret, "--quiet");
  // The publisher stages block 1's manifests; the parties serve them once they serve block 1.
  mkdirSync(manifests);
  mkdirSync(staged);
  pirq("eth", "import", "--changes", c1, "--base", join(dir, "s0"), "--update-out", join(dir, "u1"), "--sign-key", secret, "--manifests", staged, "--quiet");
  [a, b] = await Promise.all([startParty("a", join(dir, "s0"), manifests), startParty("b", join(dir, "s0"), manifests)]);
  const port = await freePort();
  serveUrl = `http://127.0.0.1:${port}/`;
  const serve = start("serve", bin("pirq"), ["eth", "serve", "--party-a", a.url, "--party-b", b.url, "--listen", `127.0.0.1:${port}`, "--chain-id", String(CHAIN_ID), "--publisher-key", pub]);
  serveLog = serve.log;
  await waitFor("pirq eth serve", async () => (await rpc(serveUrl, { jsonrpc: "2.0", id: 1, method: "eth_chainId" })).result === "0x539");
  provider = new JsonRpcProvider(serveUrl);
});

after(async () => {
  provider?.destroy();
  for (const c of children) c.kill("SIGTERM");
  await new Promise((r) => setTimeout(r, 300));
  rmSync(dir, { recursive: true, force: true });
});

/** Every account of `state` whose address is in `addresses`: balance, nonce, code and every slot, read through ethers (in batches, as ethers sends them). */
async function checkAccounts(state, addresses) {
  const reads = [];
  for (const address of addresses) {
    const want = state.get(address);
    reads.push(provider.getBalance(address).then((v) => assert.equal(v, want.balance, `balance of ${address}`)));
    reads.push(provider.getTransactionCount(address).then((v) => assert.equal(v, want.nonce, `nonce of ${address}`)));
    reads.push(provider.getCode(address).then((v) => assert.equal(v, want.code, `code of ${address}`)));
    for (const [slot, value] of want.storage) {
      reads.push(provider.getStorage(address, slot).then((v) => assert.equal(v, value, `slot ${slot} of ${address}`)));
    }
  }
  await Promise.all(reads);
  return reads.length;
}

test("ethers detects the chain and reads the served block", async () => {
  assert.equal((await provider.getNetwork()).chainId, BigInt(CHAIN_ID));
  assert.equal(await provider.getBlockNumber(), BLOCK);
});

test("present accounts read exactly the dump's balance, nonce, code and storage", async () => {
  // The first 60 accounts: six contracts (one with the largest code, 24,576 bytes) and EOAs.
  const addresses = [...before0.keys()].slice(0, 60);
  assert.ok(addresses.some((x) => before0.get(x).code.length === 2 + 2 * 24576), "the largest code is among them");
  const n = await checkAccounts(before0, addresses);
  assert.ok(n > 200, `${n} reads`);
});

test("absent accounts and slots read as a node reads them: 0, 0x, a zero word", async () => {
  const contract = [...before0.entries()].find(([, v]) => v.code !== "0x")[0];
  for (let i = 0; i < 3; i++) {
    const nobody = Wallet.createRandom().address;
    assert.equal(await provider.getBalance(nobody), 0n);
    assert.equal(await provider.getTransactionCount(nobody), 0);
    assert.equal(await provider.getCode(nobody), "0x");
    assert.equal(await provider.getStorage(nobody, 0), ZeroHash);
  }
  assert.equal(await provider.getStorage(contract, 123456789), ZeroHash);
});

test("a batch is answered call by call, in order, errors beside results", async () => {
  const [first, second] = [...before0.keys()];
  const batch = [
    { jsonrpc: "2.0", id: "x", method: "eth_getBalance", params: [first, "latest"] },
    { jsonrpc: "2.0", id: 2, method: "eth_getTransactionCount", params: [second, toBeHex(BLOCK)] },
    { jsonrpc: "2.0", id: 3, method: "eth_getBalance", params: [first, "pending"] },
    { jsonrpc: "2.0", id: 4, method: "eth_blockNumber" },
    { jsonrpc: "2.0", method: "eth_blockNumber" }, // a notification: no answer
    { jsonrpc: "2.0", id: 5, method: "eth_getBalance", params: ["0x1234", "latest"] },
  ];
  const answers = await rpc(serveUrl, batch);
  assert.deepEqual(answers.map((x) => x.id), ["x", 2, 3, 4, 5]);
  assert.equal(BigInt(answers[0].result), before0.get(first).balance);
  assert.equal(Number(answers[1].result), before0.get(second).nonce);
  assert.equal(answers[2].error.code, -32000);
  assert.equal(Number(answers[3].result), BLOCK);
  assert.equal(answers[4].error.code, -32602);
});

test("an unsupported method is refused with -32601 (no upstream)", async () => {
  await assert.rejects(provider.send("eth_gasPrice", []), (e) => {
    assert.equal(e.code, "UNSUPPORTED_OPERATION", e.message);
    assert.equal(e.info.error.code, -32601);
    return true;
  });
});

test("after a block update is pushed to every table, ethers reads the new block's values", async () => {
  for (const party of [a, b]) {
    for (const t of ["accounts", "code", "storage"]) {
      pirq("epoch", "push", "--party", party.url, "--table", t, "--from", join(dir, "u1", `${t}.update`));
    }
  }
  // Served only now: a manifest of an epoch the parties do not serve yet reads as a stale party.
  for (const t of ["accounts", "code", "storage"]) {
    copyFileSync(join(staged, `${t}.manifests.json`), join(manifests, `.${t}`));
    renameSync(join(manifests, `.${t}`), join(manifests, `${t}.manifests.json`));
  }
  // The next read after the push answers from the new epoch (the client notices it moved on).
  await waitFor("block 1001", async () => (await provider.getBlockNumber()) === BLOCK + 1, 15_000);
  const changed = [...after1.keys()].filter((x) => {
    const old = before0.get(x);
    const now = after1.get(x);
    return !old || old.balance !== now.balance || old.nonce !== now.nonce || [...old.storage].some(([k, v]) => now.storage.get(k) !== v) || old.storage.size !== now.storage.size;
  });
  assert.ok(changed.length >= 20, `${changed.length} accounts changed`);
  const cleared = changed.filter((x) => before0.get(x) && [...before0.get(x).storage.keys()].some((k) => !after1.get(x).storage.has(k)));
  assert.ok(cleared.length > 0, "a contract lost a slot");
  await checkAccounts(after1, [...changed, ...[...after1.keys()].slice(0, 20)]);
  for (const x of cleared) {
    for (const k of before0.get(x).storage.keys()) {
      if (!after1.get(x).storage.has(k)) assert.equal(await provider.getStorage(x, k), ZeroHash);
    }
  }
  // The deleted accounts read as absent: balance 0, nonce 0, no code, every slot they held 0.
  for (const x of deleted) {
    assert.equal(await provider.getBalance(x), 0n, `balance of deleted ${x}`);
    assert.equal(await provider.getTransactionCount(x), 0, `nonce of deleted ${x}`);
    assert.equal(await provider.getCode(x), "0x", `code of deleted ${x}`);
    for (const k of before0.get(x).storage.keys()) assert.equal(await provider.getStorage(x, k), ZeroHash, `slot ${k} of deleted ${x}`);
  }
  assert.ok(before0.get(deleted[0]).balance > 0n || before0.get(deleted[0]).nonce > 0, "the deleted contract held something before");
  // The old block is no longer the one served.
  await assert.rejects(provider.getBalance(changed[0], BLOCK));
});

test("no party and no endpoint logged a warning or an error", () => {
  for (const log of [...a.logs, ...b.logs, serveLog]) {
    const bad = readFileSync(log, "utf8").split("\n").filter((l) => /\b(WARN|ERROR)\b/.test(l));
    assert.deepEqual(bad, [], log);
  }
});
