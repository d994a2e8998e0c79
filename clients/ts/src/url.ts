/**
 * Which party URLs the client accepts (issue 23, docs/security.md): `https://` anywhere,
 * `http://` only to this machine. Whoever sees both of a client's connections in plaintext reads
 * both DPF keys of a pair and learns the index, so a plain-HTTP party elsewhere is refused before
 * anything is sent (before the name is even resolved), unless the caller opts out by name.
 */

import { PirqError } from "./errors.js";

/**
 * True for the hosts that never leave the machine: `localhost`, 127.0.0.0/8 and `[::1]`, as the
 * WHATWG URL parser normalises them (`127.1`, `0x7f.0.0.1` and `[0:0::1]` all become one of these;
 * `127.0.0.1.example` stays a name and is not loopback).
 */
export function isLoopbackHost(hostname: string): boolean {
  if (hostname === "localhost" || hostname === "[::1]") return true;
  const octets = /^127\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(hostname);
  return octets !== null && octets.slice(1).every((o) => Number(o) <= 255);
}

/**
 * A party's base URL, checked and normalised (no trailing slash): `https:`, or `http:` to a
 * loopback host, or `http:` anywhere when `insecureHttp` is set; no user name, password, query
 * or fragment (a token belongs in the `token` option, where it is never part of a URL).
 * `name` ("A"/"B") is named in the error.
 */
export function partyBaseUrl(name: string, url: string, insecureHttp = false): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new PirqError("invalid_argument", `party ${name}: ${JSON.stringify(url)} is not a URL`);
  }
  if (u.protocol !== "https:" && u.protocol !== "http:") {
    throw new PirqError("invalid_argument", `party ${name}: ${u.protocol} URLs are not supported (https:// or, on this machine, http://)`);
  }
  if (u.username !== "" || u.password !== "" || u.search !== "" || u.hash !== "") {
    throw new PirqError("invalid_argument", `party ${name}: the URL must be a base URL without credentials, query or fragment (tokens go in the tokenA/tokenB options)`);
  }
  if (u.protocol === "http:" && !insecureHttp && !isLoopbackHost(u.hostname)) {
    throw new PirqError(
      "insecure_http",
      `party ${name}: refusing plain HTTP to ${u.host}: an observer of both connections reads both halves of every key and learns ` +
        "what is looked up; use https:// (plain http:// is accepted only for localhost, 127.0.0.0/8 and [::1], or with the insecureHttp option)",
    );
  }
  return (u.origin + u.pathname).replace(/\/+$/, "");
}
