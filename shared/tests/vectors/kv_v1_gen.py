#!/usr/bin/env python3
"""Writes kv_v1.json: test vectors for docs/spec/kv.md, from this independent implementation
of the spec in plain Python (hashlib only). `shared/tests/kv_vectors.rs` reproduces every value.

Run: python3 shared/tests/vectors/kv_v1_gen.py > shared/tests/vectors/kv_v1.json
"""
import hashlib
import json

MAGIC = b"PIRQKV\x00\x01"
TAG_LEN = 16


def tag(seed: bytes, key: bytes) -> bytes:
    t = hashlib.sha256(b"pirq-kv-tag" + seed + key).digest()[:TAG_LEN]
    if t == bytes(TAG_LEN):
        t = bytes(TAG_LEN - 1) + b"\x01"
    return t


def candidates(seed: bytes, t: bytes, choices: int, num_pages: int):
    out = []
    counter = 0
    while True:
        d = hashlib.sha256(b"pirq-kv-bucket" + seed + t + counter.to_bytes(4, "little")).digest()
        for j in range(4):
            p = int.from_bytes(d[8 * j:8 * j + 8], "little") % num_pages
            if p not in out:
                out.append(p)
                if len(out) == choices:
                    return out
        counter += 1


def block(choices: int, value_size: int, key_size: int, seed: bytes) -> bytes:
    h = bytearray(512)
    h[64:72] = MAGIC
    h[72] = choices
    h[76:80] = value_size.to_bytes(4, "little")
    h[80:84] = key_size.to_bytes(4, "little")
    h[88:120] = seed
    return bytes(h[64:512])


def lookup(pages, slot_size, seed, key, choices, num_pages):
    t = tag(seed, key)
    for p in candidates(seed, t, choices, num_pages):
        page = pages[p]
        for s in range(len(page) // slot_size):
            if page[s * slot_size:s * slot_size + TAG_LEN] == t:
                return page[s * slot_size + TAG_LEN:(s + 1) * slot_size]
    return None


def main():
    seed = bytes(range(32))
    # Section 1: tags and candidates of a few keys under several geometries. num_pages = 3 and
    # 4 with d = 3 or 4 make repeats in the digest words likely, so the "skip repeats, next
    # counter" rule is exercised.
    keys = [b"", b"a", b"pirq", bytes(20), bytes(range(20)), b"\xff" * 32, b"x" * 100]
    hashes = []
    for key in keys:
        if not key:
            continue  # keys are 1..=1024 bytes
        t = tag(seed, key)
        entry = {"key": key.hex(), "tag": t.hex(), "candidates": []}
        for num_pages in (3, 4, 1000, 16777216, 1099511627775):
            for choices in (2, 3, 4):
                if num_pages < choices:
                    continue
                entry["candidates"].append(
                    {"num_pages": num_pages, "choices": choices,
                     "pages": candidates(seed, t, choices, num_pages)})
        hashes.append(entry)

    # Section 2: a tiny kv database (page_size 256, 16-byte values: 8 slots of 32 bytes, 8
    # pages, d = 2), filled by the reference placement: least-filled candidate (first on ties),
    # first empty slot; the vector is chosen so no eviction is needed.
    page_size, num_pages, choices, value_size, key_size = 256, 8, 2, 16, 4
    db_seed = hashlib.sha256(b"kv_v1 tiny db").digest()
    slot_size = TAG_LEN + value_size
    spp = page_size // slot_size
    pages = [bytearray(page_size) for _ in range(num_pages)]
    fill = [0] * num_pages
    records = []
    for i in range(40):
        key = (1000 + i).to_bytes(4, "big")
        value = hashlib.sha256(b"value" + key).digest()[:value_size]
        t = tag(db_seed, key)
        cands = candidates(db_seed, t, choices, num_pages)
        best = min(cands, key=lambda p: (fill[p], cands.index(p)))
        assert fill[best] < spp, "the tiny vector db needs an eviction: pick other records"
        s = next(s for s in range(spp) if pages[best][s * slot_size:s * slot_size + TAG_LEN] == bytes(TAG_LEN))
        pages[best][s * slot_size:(s + 1) * slot_size] = t + value
        fill[best] += 1
        records.append({"key": key.hex(), "value": value.hex()})
    absent = [(5000 + i).to_bytes(4, "big").hex() for i in range(10)]
    lookups = []
    for r in records[:10]:
        got = lookup(pages, slot_size, db_seed, bytes.fromhex(r["key"]), choices, num_pages)
        assert got.hex() == r["value"]
        lookups.append({"key": r["key"], "value": r["value"]})
    for k in absent:
        assert lookup(pages, slot_size, db_seed, bytes.fromhex(k), choices, num_pages) is None
        lookups.append({"key": k, "value": None})

    out = {
        "about": "Test vectors for docs/spec/kv.md (layout v1), written by kv_v1_gen.py "
                 "(an independent Python implementation of the spec).",
        "hash_seed": seed.hex(),
        "hashes": hashes,
        "block": {
            "choices": 3, "value_size": 32, "key_size": 20, "seed": seed.hex(),
            "bytes_64_512": block(3, 32, 20, seed).hex(),
        },
        "tiny_db": {
            "page_size": page_size, "num_pages": num_pages, "choices": choices,
            "value_size": value_size, "key_size": key_size, "seed": db_seed.hex(),
            "slot_size": slot_size, "slots_per_page": spp,
            "records": records,
            "pages": [bytes(p).hex() for p in pages],
            "lookups": lookups,
        },
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
