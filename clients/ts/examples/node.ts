// pirq from Node: a private page lookup, or a key-value lookup, from two parties.
//
//   node dist/examples/node.js <party A URL> <party B URL> page <index>
//   node dist/examples/node.js <party A URL> <party B URL> key <text>
//
// Prints one JSON object. Bearer tokens (for parties that meter access) come from the
// environment, PIRQ_TOKEN_A and PIRQ_TOKEN_B, never from the command line. A party with a
// certificate from a private CA: NODE_EXTRA_CA_CERTS=ca.pem (Node's own way to add trust roots).
// A signed database: PIRQ_PUBLISHER_KEY=publisher.pub (the publisher's public key file) verifies
// every page against the publisher's signature before anything is printed.
import { readFileSync } from "node:fs";
import { connect, isPirqError, toHex } from "pirq-client";

const [a, b, what, arg] = process.argv.slice(2);
if (!a || !b || (what !== "page" && what !== "key") || arg === undefined) {
  console.error("usage: node.js <party A URL> <party B URL> page <index> | key <text>");
  process.exit(2);
}

try {
  // One deadline for everything a lookup does; https:// parties (http:// only on this machine).
  const pirq = await connect(a, b, {
    timeoutMs: 10_000,
    tokenA: process.env.PIRQ_TOKEN_A,
    tokenB: process.env.PIRQ_TOKEN_B,
    publisherKey: process.env.PIRQ_PUBLISHER_KEY ? readFileSync(process.env.PIRQ_PUBLISHER_KEY, "utf8") : undefined,
  });
  if (what === "page") {
    const result = await pirq.getPages([Number(arg)]);
    console.log(JSON.stringify({ index: Number(arg), page: toHex(result.pages[0]), epoch: result.epoch, digest: result.digest, verified: result.verified }));
  } else {
    const result = await pirq.getMany([new TextEncoder().encode(arg)]);
    const value = result.values[0];
    console.log(JSON.stringify({ key: arg, value: value && toHex(value), epoch: result.epoch, digest: result.digest, verified: result.verified }));
  }
} catch (e) {
  // Every failure is a PirqError with a stable code, and the party and phase when one is at fault.
  if (!isPirqError(e)) throw e;
  console.log(JSON.stringify({ error: e.code, party: e.party, phase: e.phase, message: e.message }));
  process.exitCode = 1;
}
