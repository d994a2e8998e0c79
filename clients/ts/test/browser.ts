// Real headless Chromium (Debian's `chromium`, driven by playwright-core) and a static server
// for the demo page and the bundle (dist/web, made by build-web.mjs).
import { createServer, Server } from "node:http";
import { mkdtempSync, readFileSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { extname, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium, BrowserContext } from "playwright-core";
import { createHash, X509Certificate } from "node:crypto";

export const webRoot = fileURLToPath(new URL("../web/", import.meta.url)); // dist/test → dist/web
export const chromiumPath = process.env.PIRQ_CHROMIUM ?? "/usr/bin/chromium";

const TYPES: Record<string, string> = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".map": "application/json" };

/** Serves dist/web on 127.0.0.1 (`port` 0: a free one); its origin is what the gateways must allow. */
export async function serveWeb(port = 0): Promise<{ server: Server; origin: string }> {
  if (!existsSync(join(webRoot, "index.html"))) throw new Error(`${webRoot} has no bundle: run \`npm run build\` first`);
  const server = createServer((req, res) => {
    const path = normalize(decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname)).replace(/^(\.\.[/\\])+/, "");
    const file = join(webRoot, path === "/" ? "index.html" : path);
    if (!file.startsWith(webRoot) || !existsSync(file)) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" }).end(readFileSync(file));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", resolve);
  });
  return { server, origin: `http://127.0.0.1:${(server.address() as { port: number }).port}` };
}

/**
 * The `--ignore-certificate-errors-spki-list` value that makes Chromium accept the TLS
 * certificates in `pemFiles` (base64 SHA-256 of each one's SubjectPublicKeyInfo): a test's or
 * the demo's throwaway CA and party certificates, without touching a system trust store.
 */
export function spkiList(pemFiles: string[]): string {
  const hashes: string[] = [];
  for (const file of pemFiles) {
    for (const pem of readFileSync(file, "utf8").match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g) ?? []) {
      const spki = new X509Certificate(pem).publicKey.export({ type: "spki", format: "der" });
      hashes.push(createHash("sha256").update(spki).digest("base64"));
    }
  }
  if (hashes.length === 0) throw new Error(`no certificate in ${pemFiles.join(", ")}`);
  return hashes.join(",");
}

/**
 * Headless Chromium with a fresh profile directory, removed by `close`. `trustCerts`: PEM files
 * whose certificates it accepts for TLS (see {@link spkiList}); none by default.
 */
export async function launchChromium(options: { trustCerts?: string[] } = {}): Promise<{ context: BrowserContext; close: () => Promise<void> }> {
  const profile = mkdtempSync(join(tmpdir(), "pirq-chromium-"));
  const trust = options.trustCerts?.length ? [`--ignore-certificate-errors-spki-list=${spkiList(options.trustCerts)}`] : [];
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      ...trust,
    ],
    viewport: { width: 1000, height: 700 },
  });
  return {
    context,
    close: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
