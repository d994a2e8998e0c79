// Browser bundles (esbuild): dist/web/pirq.min.js (the package as one ES module, for size
// and for pages that load it directly) and dist/web/demo.js + index.html (the demo page).
// The Ed25519 fallback (@noble/curves, for browsers whose WebCrypto lacks Ed25519) is split into
// its own chunk beside them, dist/web/pirq-ed25519-<hash>.js, which a browser fetches only when it needs it.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, readdirSync, rmSync } from "node:fs";

mkdirSync("dist/web", { recursive: true });
for (const f of readdirSync("dist/web")) if (/^pirq-.*\.js(\.map)?$/.test(f)) rmSync(`dist/web/${f}`);
const common = { bundle: true, format: "esm", target: "es2022", minify: true, sourcemap: true, logLevel: "warning", splitting: true, outdir: "dist/web", chunkNames: "pirq-[name]-[hash]" };
await build({ ...common, entryPoints: { "pirq.min": "src/index.ts" } });
await build({ ...common, entryPoints: { demo: "demo/demo.ts" } });
copyFileSync("demo/index.html", "dist/web/index.html");
copyFileSync("examples/browser.html", "dist/web/example.html");
