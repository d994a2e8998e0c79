// The package as npm ships it: `npm pack` in a fresh copy of clients/ts (the files git has, no
// dist/; node_modules as `npm ci` made it) builds through `prepack` and ships the built module,
// its types, the browser bundle and the examples; the tarball, installed into another project,
// imports. Then the Node example runs against two (fake) parties.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { fakePage, startFakeParty } from "./fake-party.js";
import { toHex } from "../src/bytes.js";

const packageRoot = fileURLToPath(new URL("../../", import.meta.url)); // dist/test → clients/ts

test("npm test builds the Rust binaries it starts, or says which are missing and how to build them (issue 36)", () => {
  const pkg = JSON.parse(readFileSync(join(packageRoot, "package.json"), "utf8"));
  for (const script of ["pretest", "pretest:node", "pretest:browser"]) assert.equal(pkg.scripts[script], "node need-binaries.mjs", script);
  const empty = mkdtempSync(join(tmpdir(), "pirq-ts-bins-"));
  try {
    const run = spawnSync(process.execPath, [join(packageRoot, "need-binaries.mjs")], { env: { ...process.env, PIRQ_BIN_DIR: empty }, encoding: "utf8" });
    assert.equal(run.status, 1, run.stderr);
    for (const bin of ["pirq", "pirq-gateway", "pirq-worker", "pirq-fake-party"]) assert.ok(run.stderr.includes(bin), run.stderr);
    assert.match(run.stderr, /cargo build --release .*--bin pirq-fake-party/);
  } finally {
    rmSync(empty, { recursive: true, force: true });
  }
});

test("npm pack in a fresh copy builds (prepack) and ships dist/src, the bundle and the examples; the tarball imports", () => {
  const dir = mkdtempSync(join(tmpdir(), "pirq-ts-pack-"));
  try {
    const copy = join(dir, "pirq-client");
    // What a clone has: tracked files, and new ones not ignored (so this test sees work in progress too).
    const files = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard", "."], { cwd: packageRoot, encoding: "utf8" })
      .split("\n").filter(Boolean);
    assert.ok(!files.some((f) => f.startsWith("dist/")), "dist/ is not in git");
    for (const f of files) {
      mkdirSync(dirname(join(copy, f)), { recursive: true });
      cpSync(join(packageRoot, f), join(copy, f));
    }
    symlinkSync(join(packageRoot, "node_modules"), join(copy, "node_modules"));
    execFileSync("npm", ["pack", "--pack-destination", dir, "--loglevel=error"], { cwd: copy, stdio: "pipe" });
    const tarball = readdirSync(dir).find((f) => f.endsWith(".tgz"));
    assert.ok(tarball, "npm pack made a tarball");
    const shipped = execFileSync("tar", ["-tzf", join(dir, tarball)], { encoding: "utf8" }).split("\n").filter(Boolean).map((f) => f.replace(/^package\//, ""));
    for (const f of ["package.json", "README.md", "dist/src/index.js", "dist/src/index.d.ts", "dist/src/party.js", "dist/web/pirq.min.js", "examples/node.ts", "examples/browser.html"]) {
      assert.ok(shipped.includes(f), `${f} shipped (${shipped.length} files)`);
    }
    // the bundle's Ed25519 fallback chunk (fetched only where WebCrypto lacks Ed25519) ships beside it
    const bundle = execFileSync("tar", ["-xzOf", join(dir, tarball), "package/dist/web/pirq.min.js"], { encoding: "utf8" });
    const chunks = [...bundle.matchAll(/import\("\.\/(pirq-[^"]+\.js)"\)/g)].map((m) => `dist/web/${m[1]}`);
    assert.equal(chunks.length, 1, "one lazily loaded chunk: the Ed25519 fallback");
    assert.ok(shipped.includes(chunks[0]), `${chunks[0]} shipped`);
    assert.ok(!shipped.some((f) => f.startsWith("dist/test/") || f.startsWith("src/") || f.startsWith("node_modules/")), shipped.join(" "));

    // installed into another project, it imports by name
    const project = join(dir, "app");
    mkdirSync(join(project, "node_modules", "pirq-client"), { recursive: true });
    execFileSync("tar", ["-xzf", join(dir, tarball), "-C", join(project, "node_modules", "pirq-client"), "--strip-components=1"]);
    const out = execFileSync(process.execPath, ["--input-type=module", "-e", "import * as p from 'pirq-client'; console.log(typeof p.connect, typeof p.PirqError, typeof p.isPirqError)"], { cwd: project, encoding: "utf8" });
    assert.equal(out.trim(), "function function function");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the Node example looks up a page, and reports errors by their code", async () => {
  const a = await startFakeParty({ behaviour: "honest" });
  const b = await startFakeParty({ behaviour: "honest" });
  try {
    const example = fileURLToPath(new URL("../examples/node.js", import.meta.url));
    const run = (args: string[]) =>
      new Promise<string>((resolve) => {
        // (async: the fake parties answer from this process)
        import("node:child_process").then(({ execFile }) => execFile(process.execPath, [example, ...args], (_e, stdout) => resolve(stdout)));
      });
    const ok = JSON.parse(await run([a.url, b.url, "page", "12"]));
    assert.equal(ok.page, toHex(fakePage(7, 12, 256)));
    assert.equal(ok.index, 12);
    const kv = JSON.parse(await run([a.url, b.url, "key", "alice"]));
    assert.equal(kv.error, "not_kv");
    const refused = JSON.parse(await run([a.url, "http://party-b.invalid", "page", "1"]));
    assert.equal(refused.error, "insecure_http");
    assert.equal((await a.stats()).info, 2, "the refused run sent nothing");
  } finally {
    for (const p of [a, b]) await p.close();
  }
});
