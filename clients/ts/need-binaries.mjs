// Run before `npm test` (package.json `pretest`): the Node and Chromium suites start the Rust
// build's binaries (real parties: pirq-gateway, pirq-worker; the shared fake party:
// pirq-fake-party; the data tools: pirq). From $PIRQ_BIN_DIR when set, which must then hold them
// all; else from <repo>/target/release, built (or brought up to date) here with the same cargo
// line as scripts/test.sh, so a plain `npm test` after the README's commands never runs a
// missing or stale binary. Without cargo, it says what to build and exits non-zero.
import { existsSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const BINARIES = ["pirq", "pirq-gateway", "pirq-worker", "pirq-fake-party"];
export const CARGO_BUILD = [
  "build", "--release", "--locked", "-p", "pirq-gateway", "-p", "pirq-worker", "-p", "pirq-cli", "-p", "pirq-testkit",
  ...BINARIES.flatMap((b) => ["--bin", b]),
];
const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
const binDir = process.env.PIRQ_BIN_DIR ?? join(repoRoot, "target", "release");
const missing = () => BINARIES.filter((b) => !existsSync(join(binDir, b)));
const howTo = `build them from the repository root with: cargo ${CARGO_BUILD.join(" ")}`;

if (process.env.PIRQ_BIN_DIR !== undefined) {
  const gone = missing();
  if (gone.length > 0) {
    console.error(`npm test: PIRQ_BIN_DIR=${binDir} lacks ${gone.join(", ")}; ${howTo} (and unset PIRQ_BIN_DIR), or point PIRQ_BIN_DIR at a directory holding them`);
    process.exit(1);
  }
} else if (spawnSync("cargo", ["--version"], { stdio: "ignore" }).status === 0) {
  console.error(`npm test: cargo ${CARGO_BUILD.join(" ")} (the binaries the tests start)`);
  const built = spawnSync("cargo", CARGO_BUILD, { cwd: repoRoot, stdio: "inherit" });
  if (built.status !== 0) {
    console.error("npm test: building the binaries failed (above)");
    process.exit(1);
  }
} else if (missing().length > 0) {
  console.error(`npm test needs the Rust binaries ${missing().join(", ")} in ${binDir}, and cargo is not installed: install Rust (scripts/install-deps.sh), then ${howTo}; or set PIRQ_BIN_DIR to a directory holding them`);
  process.exit(1);
}
