// Browser bundles (esbuild): dist/web/pirq.min.js (the package as one ES module, for size
// and for pages that load it directly) and dist/web/demo.js + index.html (the demo page).
import { build } from "esbuild";
import { copyFileSync, mkdirSync } from "node:fs";

mkdirSync("dist/web", { recursive: true });
const common = { bundle: true, format: "esm", target: "es2022", minify: true, sourcemap: true, logLevel: "warning" };
await build({ ...common, entryPoints: ["src/index.ts"], outfile: "dist/web/pirq.min.js" });
await build({ ...common, entryPoints: ["demo/demo.ts"], outfile: "dist/web/demo.js" });
copyFileSync("demo/index.html", "dist/web/index.html");
copyFileSync("examples/browser.html", "dist/web/example.html");
