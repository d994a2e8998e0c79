// The demo page's script: connect to two parties, look up a page or a key, show the value, the
// time, and what each party was sent (the same shape of query for both, whatever is looked up).
import * as pirqClient from "../src/index.js";
import type { Exchange, LookupTrace, Pirq } from "../src/index.js";

// Tests and the console reach the whole package as `window.pirq`.
(globalThis as unknown as { pirq: typeof pirqClient }).pirq = pirqClient;

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const partyA = $<HTMLInputElement>("party-a");
const partyB = $<HTMLInputElement>("party-b");
const publisherKey = $<HTMLInputElement>("publisher-key");
const pageIndex = $<HTMLInputElement>("page-index");
const kvKey = $<HTMLInputElement>("kv-key");
const getPageButton = $<HTMLButtonElement>("get-page");
const getKeyButton = $<HTMLButtonElement>("get-key");
let client: Pirq | undefined;

const params = new URLSearchParams(location.search);
partyA.value = params.get("a") ?? "";
partyB.value = params.get("b") ?? "";
publisherKey.value = params.get("key") ?? "";
// `?table=NAME`: the parties' table to look up in (issue 38); absent, the table `default`.
const table = params.get("table") ?? undefined;

function status(text: string, kind: "ok" | "error" | "busy"): void {
  const el = $("status");
  el.textContent = text;
  el.className = kind;
  el.dataset.state = kind;
}

function hexDump(bytes: Uint8Array, limit: number): string {
  const hex = pirqClient.toHex(bytes.subarray(0, limit)).replace(/(.{2})/g, "$1 ").replace(/((?:\S\S ){32})/g, "$1\n");
  return hex.trim() + (bytes.length > limit ? `\n… ${bytes.length - limit} more bytes` : "");
}

function shapeOf(e: Exchange): string {
  const prefer = e.prefer ? ` (Prefer: ${e.prefer})` : "";
  return `${e.method} ${e.path.replace(/[0-9a-f]{32}/, "{id}")}${prefer} · ${e.requestBytes} B → ${e.status}`;
}

function showTrace(trace: LookupTrace): void {
  const [a, b] = trace.exchanges;
  const rows = $("exchanges");
  rows.replaceChildren();
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const tr = document.createElement("tr");
    for (const text of [String(i + 1), a[i] ? shapeOf(a[i]) : "", b[i] ? shapeOf(b[i]) : ""]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    rows.append(tr);
  }
  const same = a.length === b.length && a.every((e, i) => shapeOf(e) === shapeOf(b[i]));
  const bytes = (x: Exchange[]) => x.reduce((n, e) => n + e.requestBytes, 0);
  const shape = $("shape");
  shape.className = same ? "same" : "differs";
  shape.dataset.same = String(same);
  shape.textContent = same
    ? `Same shape: each party got ${a.length} requests, ${bytes(a)} B of request bodies, ${trace.dpfKeys} DPF key${trace.dpfKeys === 1 ? "" : "s"} of one length.`
    : "The parties were asked differently shaped queries!";
}

async function onConnect(): Promise<void> {
  status("connecting…", "busy");
  try {
    const key = publisherKey.value.trim();
    client = await pirqClient.connect(partyA.value.trim(), partyB.value.trim(), { ...(key ? { publisherKey: key } : {}), ...(table ? { table } : {}) });
    const i = client.info;
    const values = !i.kv ? "" : i.kv.valueKind === "set" ? "a set (keys only)" : i.kv.valueKind === "variable" ? `values of up to ${i.kv.valueSize} B` : `${i.kv.valueSize}-byte values`;
    const kv = i.kv ? `, key-value: ${i.kv.choices} choices, ${values}, ${i.kv.slotsPerPage} slots per page` : ", page database";
    const signed = !i.signing ? ", unsigned" : client.verifying ? `, signed: every page verified (${client.verifierBackend})` : ", signed: NOT verified (no publisher key given)";
    $("info").textContent = `${table ? `table ${table}: ` : ""}${i.numPages} pages of ${i.pageSize} B (domain ${i.domainBits} bits), epochs ${i.epoch.oldest}..${i.epoch.newest}${kv}${signed}`;
    getPageButton.disabled = false;
    getKeyButton.disabled = !i.kv;
    status("connected", "ok");
  } catch (e) {
    showError(e);
  }
}

function showError(e: unknown): void {
  const code = e instanceof pirqClient.PirqError ? e.code : "error";
  status(`${code}: ${(e as Error).message}`, "error");
  $("status").dataset.code = code;
  $("value").textContent = "";
}

async function onGetPage(): Promise<void> {
  if (!client) return;
  status("fetching…", "busy");
  try {
    const result = await client.getPages([Number(pageIndex.value)]);
    $("value").textContent = hexDump(result.pages[0], 256);
    $("value").dataset.hex = pirqClient.toHex(result.pages[0]);
    status(`page ${pageIndex.value}: ${result.pages[0].length} B at epoch ${result.epoch} in ${result.elapsedMs.toFixed(1)} ms${verifiedText(result)}`, "ok");
    showTrace(result);
  } catch (e) {
    showError(e);
  }
}

function verifiedText(result: LookupTrace): string {
  return result.verified ? ", verified: the publisher signed it" : "";
}

/**
 * A value the way the table records it was given (KV §2): text as text, JSON laid out, bytes (or a
 * table that records nothing) as a hex dump.
 */
function shownValue(encoding: string | null, value: Uint8Array): string {
  if (encoding === "utf8" || encoding === "json") {
    try {
      const text = new TextDecoder("utf-8", { fatal: true }).decode(value);
      return encoding === "json" ? JSON.stringify(JSON.parse(text), null, 2) : text;
    } catch {
      // not what the table says it holds: shown as the bytes it is
    }
  }
  return hexDump(value, 256);
}

function keyBytes(text: string): Uint8Array {
  return text.startsWith("0x") ? pirqClient.fromHex(text.slice(2)) : new TextEncoder().encode(text);
}

async function onGetKey(): Promise<void> {
  if (!client) return;
  status("fetching…", "busy");
  try {
    const result = await client.getMany([keyBytes(kvKey.value)]);
    const value = result.values[0];
    const member = result.valueKind === "set" && value !== null; // a set's keys have no value
    $("value").textContent = value === null ? "(absent)" : member ? "(present)" : shownValue(result.valueEncoding, value);
    $("value").dataset.hex = value === null ? "absent" : member ? "present" : pirqClient.toHex(value);
    const what = value === null ? "key absent" : member ? "key present" : `value of ${value.length} B`;
    status(`${what} at epoch ${result.epoch} in ${result.elapsedMs.toFixed(1)} ms${verifiedText(result)}`, "ok");
    showTrace(result);
  } catch (e) {
    showError(e);
  }
}

$("connect").addEventListener("click", onConnect);
getPageButton.addEventListener("click", onGetPage);
getKeyButton.addEventListener("click", onGetKey);
if (partyA.value && partyB.value) void onConnect();
