#!/usr/bin/env python3
"""Writes kv_v2.json: test vectors for the version 2 layouts of docs/spec/kv.md (sets and
variable-size values, slots in a signed page's usable bytes), from this independent
implementation of the spec in plain Python (hashlib only). `shared/tests/kv_vectors.rs` and the
TypeScript client's tests reproduce every value.

Run: python3 shared/tests/vectors/kv_v2_gen.py > shared/tests/vectors/kv_v2.json
"""
import base64
import hashlib
import json

from kv_v1_gen import TAG_LEN, candidates, tag
from kv_v1_gen import block as block_v1

MAGIC_V2 = b"PIRQKV\x00\x02"
KINDS = {"set": 1, "variable": 2}  # version 2 kinds; fixed values are version 1 (kv_v1_gen.py)
LEN_FIELD = 2
# Header bytes 74 (keys) and 75 (values): how the records were written; 0 = not recorded (hex).
ENCODINGS = {None: 0, "utf8": 1, "hex": 2, "base64": 3, "json": 4}


def block(kind: str, choices: int, value_size: int, key_size: int, seed: bytes) -> bytes:
    h = bytearray(512)
    h[64:72] = MAGIC_V2
    h[72] = choices
    h[73] = KINDS[kind]
    h[76:80] = value_size.to_bytes(4, "little")
    h[80:84] = key_size.to_bytes(4, "little")
    h[88:120] = seed
    return bytes(h[64:512])


def with_encodings(block_bytes: bytes, key_encoding, value_encoding) -> bytes:
    b = bytearray(block_bytes)
    b[74 - 64] = ENCODINGS[key_encoding]
    b[75 - 64] = ENCODINGS[value_encoding]
    return bytes(b)


def key_bytes(encoding: str, text: str) -> bytes:
    """A key as text in a table's key encoding (KV §3.0) -> the bytes that are hashed."""
    if encoding == "utf8":
        return text.encode("utf-8")
    if encoding == "hex":
        return bytes.fromhex(text.strip())
    if encoding == "base64":
        t = text.strip()
        return base64.b64decode(t + "=" * (-len(t) % 4), validate=True)
    raise ValueError(encoding)


def slot_size(kind: str, value_size: int) -> int:
    return TAG_LEN + {"fixed": value_size, "set": 0, "variable": LEN_FIELD + value_size}[kind]


def payload(kind: str, value_size: int, value: bytes) -> bytes:
    if kind == "fixed":
        assert len(value) == value_size
        return value
    if kind == "set":
        assert value == b""
        return b""
    assert len(value) <= value_size
    return len(value).to_bytes(2, "little") + value + bytes(value_size - len(value))


def lookup(pages, usable, kind, value_size, seed, key, choices):
    """KV §4 lookup: None = absent, b"" = present in a set, "malformed" = a bad length."""
    ss = slot_size(kind, value_size)
    t = tag(seed, key)
    for p in candidates(seed, t, choices, len(pages)):
        page = pages[p]
        for s in range(usable // ss):
            slot = page[s * ss:(s + 1) * ss]
            if slot[:TAG_LEN] != t:
                continue
            if kind == "fixed":
                return slot[TAG_LEN:]
            if kind == "set":
                return b""
            n = int.from_bytes(slot[TAG_LEN:TAG_LEN + 2], "little")
            if n > value_size:
                return "malformed"
            return slot[TAG_LEN + 2:TAG_LEN + 2 + n]
    return None


def tiny(name, kind, value_size, tail_len, values):
    """A tiny table (page_size 256, 8 pages, d = 2) filled by the reference placement
    (least-filled candidate, first on ties; first empty slot), with no eviction needed. A signed
    table's pages end in a `tail_len`-byte stand-in for the signature tail (0xee bytes), which
    lookups must never read as slots."""
    page_size, num_pages, choices, key_size = 256, 8, 2, 0
    usable = page_size - tail_len
    seed = hashlib.sha256(b"kv_v2 " + name.encode()).digest()
    ss = slot_size(kind, value_size)
    spp = usable // ss
    pages = [bytearray(usable) + bytearray(b"\xee" * tail_len) for _ in range(num_pages)]
    fill = [0] * num_pages
    records = []
    for i, value in enumerate(values):
        key = f"key-{i}".encode()
        t = tag(seed, key)
        cands = candidates(seed, t, choices, num_pages)
        best = min(cands, key=lambda p: (fill[p], cands.index(p)))
        assert fill[best] < spp, "the tiny vector db needs an eviction: pick other records"
        s = next(s for s in range(spp) if pages[best][s * ss:s * ss + TAG_LEN] == bytes(TAG_LEN))
        pages[best][s * ss:(s + 1) * ss] = t + payload(kind, value_size, value)
        fill[best] += 1
        records.append({"key": key.hex(), "value": value.hex()})
    lookups = []
    for r in records:
        got = lookup(pages, usable, kind, value_size, seed, bytes.fromhex(r["key"]), choices)
        assert got is not None and got.hex() == r["value"]
        lookups.append({"key": r["key"], "present": True, "value": r["value"]})
    for i in range(8):
        key = f"absent-{i}".encode()
        assert lookup(pages, usable, kind, value_size, seed, key, choices) is None
        lookups.append({"key": key.hex(), "present": False, "value": None})
    return {
        "kind": kind, "page_size": page_size, "tail_len": tail_len, "num_pages": num_pages,
        "choices": choices, "value_size": value_size, "key_size": key_size, "seed": seed.hex(),
        "slot_size": ss, "slots_per_page": spp,
        "block_64_512": block(kind, choices, value_size, key_size, seed).hex(),
        "records": records,
        "pages": [bytes(p).hex() for p in pages],
        "lookups": lookups,
    }


def main():
    seed = bytes(range(32))
    blocks = [
        {"kind": kind, "choices": c, "value_size": v, "key_size": k, "seed": seed.hex(),
         "slot_size": slot_size(kind, v), "bytes_64_512": block(kind, c, v, k, seed).hex()}
        for kind, c, v, k in [("set", 2, 0, 0), ("set", 4, 0, 32), ("variable", 3, 30, 8),
                              ("variable", 2, 4078, 0)]
    ]
    # Variable values: every length class, the empty value and the largest one included.
    var_values = [hashlib.sha256(b"v" + bytes([i])).digest()[: [0, 1, 7, 30, 12, 29, 3][i % 7]]
                  for i in range(20)]
    var_values = [v * 2 if len(v) <= 15 else v[:30] for v in var_values]
    var_values[3] = bytes(range(30))  # exactly V
    var_values[0] = b""
    tables = {
        "set": tiny("set", "set", 0, 0, [b""] * 60),
        "variable": tiny("variable", "variable", 30, 0, var_values),
        "signed_set": tiny("signed_set", "set", 0, 72, [b""] * 40),
        "signed_variable": tiny("signed_variable", "variable", 30, 72, var_values[:12]),
    }
    # A variable-size page whose matching slot claims one byte more than V: a reader refuses it.
    bad = tables["variable"]
    t = bytes.fromhex(bad["records"][5]["key"])
    tg = tag(bytes.fromhex(bad["seed"]), t)
    pages = [bytearray(bytes.fromhex(p)) for p in bad["pages"]]
    where = next((p, s) for p, page in enumerate(pages)
                 for s in range(len(page) // bad["slot_size"])
                 if page[s * bad["slot_size"]:s * bad["slot_size"] + TAG_LEN] == tg)
    at = where[1] * bad["slot_size"] + TAG_LEN
    pages[where[0]][at:at + 2] = (bad["value_size"] + 1).to_bytes(2, "little")
    assert lookup(pages, 256, "variable", 30, bytes.fromhex(bad["seed"]), t, 2) == "malformed"
    malformed = {"table": "variable", "key": t.hex(), "page_index": where[0],
                 "page": bytes(pages[where[0]]).hex()}
    # Recorded encodings (header bytes 74 and 75) in blocks of every kind, version 1 included.
    recorded = []
    for kind, key_enc, value_enc in [("fixed", "utf8", "utf8"), ("fixed", "hex", "hex"),
                                     ("set", "utf8", None), ("variable", "utf8", "json"),
                                     ("variable", "base64", "base64")]:
        c, v, k = (2, 32, 0) if kind != "set" else (3, 0, 0)
        b = block_v1(c, v, k, seed) if kind == "fixed" else block(kind, c, v, k, seed)
        recorded.append({"kind": kind, "choices": c, "value_size": v, "key_size": k,
                         "seed": seed.hex(), "key_encoding": key_enc, "value_encoding": value_enc,
                         "bytes_64_512": with_encodings(b, key_enc, value_enc).hex()})
    # Keys as users write them, the bytes each encoding gives, and their tags under `seed`.
    keys = [{"encoding": e, "text": t, "key": key_bytes(e, t).hex(),
             "tag": tag(seed, key_bytes(e, t)).hex()}
            for e, t in [("utf8", "alice"), ("utf8", "1234"), ("hex", "1234"), ("hex", "AbCd"),
                         ("utf8", "Caf\u00e9"), ("utf8", "Cafe\u0301"), ("utf8", " x "),
                         ("base64", "AQID"), ("base64", "AQI")]]
    out = {
        "about": "Test vectors for docs/spec/kv.md layout version 2 (sets, variable-size values, "
                 "slots in a signed page's usable bytes), written by kv_v2_gen.py (an independent "
                 "Python implementation of the spec).",
        "blocks": blocks,
        "tables": tables,
        "malformed": malformed,
        "recorded_encodings": recorded,
        "encoded_keys": keys,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
