#!/usr/bin/env python3
"""Writes signed_v1.json: test vectors for publisher-signed pages and epoch manifests
(docs/spec/signed.md), from this independent implementation of the spec in plain Python (the
`cryptography` package's Ed25519, RFC 8032, which is deterministic: the same key and message give
the same signature in every implementation). `shared/tests/signed_vectors.rs` and the TypeScript
client's tests reproduce every value.

Run: python3 shared/tests/vectors/signed_v1_gen.py > shared/tests/vectors/signed_v1.json
"""
import json

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

PAGE_SIZE = 256
TAIL_LEN = 72
USABLE = PAGE_SIZE - TAIL_LEN


def u64(x: int) -> bytes:
    return x.to_bytes(8, "little")


def key(seed: bytes):
    secret = Ed25519PrivateKey.from_private_bytes(seed)
    public = secret.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return secret, public


def signing_block(public: bytes, db_id: bytes) -> bytes:
    b = bytearray(128)
    b[0:8] = b"PIRQSIGN"
    b[8] = 1
    b[12:16] = TAIL_LEN.to_bytes(4, "little")
    b[16:48] = public
    b[48:80] = db_id
    return bytes(b)


def page_message(db_id: bytes, index: int, changed: int, usable: bytes) -> bytes:
    return b"pirq.page.v1" + db_id + u64(index) + u64(changed) + usable


def signed_page(secret, db_id: bytes, index: int, changed: int, usable: bytes):
    message = page_message(db_id, index, changed, usable)
    signature = secret.sign(message)
    return usable + u64(changed) + signature, message, signature


def manifest_message(db_id: bytes, epoch: int, digest: bytes, pages) -> bytes:
    out = b"pirq.manifest.v1" + db_id + u64(epoch) + digest + u64(len(pages))
    for p in pages:
        out += u64(p)
    return out


def main():
    secret, public = key(bytes(range(32)))
    other_secret, other_public = key(bytes([0xEE] * 32))
    db_id = bytes((7 * i + 3) % 256 for i in range(32))

    # Page 5 at epoch 0: usable byte i = (31*5 + i) mod 256, then the tail.
    usable5 = bytes((31 * 5 + i) % 256 for i in range(USABLE))
    page5, message5, signature5 = signed_page(secret, db_id, 5, 0, usable5)
    tampered = bytearray(page5)
    tampered[17] ^= 0x01
    tail_tampered = bytearray(page5)
    tail_tampered[PAGE_SIZE - 1] ^= 0x80
    epoch_tampered = bytearray(page5)
    epoch_tampered[USABLE] ^= 0x01
    other_page5, _, _ = signed_page(other_secret, db_id, 5, 0, usable5)

    # Page 2 changed at epoch 1: its epoch-0 version is stale at epoch 1.
    old2, _, _ = signed_page(secret, db_id, 2, 0, bytes([0x11] * USABLE))
    new2, _, _ = signed_page(secret, db_id, 2, 1, bytes([0x22] * USABLE))
    digest1 = bytes(range(100, 132))
    manifest_pages = [2, 9]
    m_message = manifest_message(db_id, 1, digest1, manifest_pages)
    m_signature = secret.sign(m_message)

    out = {
        "spec": "docs/spec/signed.md",
        "page_size": PAGE_SIZE,
        "tail_len": TAIL_LEN,
        "secret_seed": bytes(range(32)).hex(),
        "public_key": public.hex(),
        "public_key_file": "pirq-publisher-public-v1:" + public.hex() + "\n",
        "public_key_file_bare": public.hex() + "\n",
        "other_public_key": other_public.hex(),
        "db_id": db_id.hex(),
        "signing_block": signing_block(public, db_id).hex(),
        "pages": [
            {"name": "signed", "index": 5, "page": page5.hex(), "message": message5.hex(),
             "signature": signature5.hex(), "changed_epoch": 0, "valid": True},
            {"name": "usable_byte_flipped", "index": 5, "page": bytes(tampered).hex(), "valid": False},
            {"name": "signature_bit_flipped", "index": 5, "page": bytes(tail_tampered).hex(),
             "valid": False},
            {"name": "changed_epoch_flipped", "index": 5, "page": bytes(epoch_tampered).hex(),
             "valid": False},
            {"name": "another_index", "index": 6, "page": page5.hex(), "valid": False},
            {"name": "another_publisher", "index": 5, "page": other_page5.hex(), "valid": False},
            {"name": "old_version", "index": 2, "page": old2.hex(), "changed_epoch": 0,
             "valid": True},
            {"name": "new_version", "index": 2, "page": new2.hex(), "changed_epoch": 1,
             "valid": True},
        ],
        "manifest": {
            "epoch": 1, "digest": digest1.hex(), "pages": manifest_pages,
            "message": m_message.hex(), "signature": m_signature.hex(),
        },
        "freshness": [
            {"name": "old_version_at_epoch_1", "index": 2, "page_name": "old_version",
             "epoch": 1, "fresh": False},
            {"name": "new_version_at_epoch_1", "index": 2, "page_name": "new_version",
             "epoch": 1, "fresh": True},
            {"name": "old_version_at_epoch_0", "index": 2, "page_name": "old_version",
             "epoch": 0, "fresh": True},
            {"name": "new_version_at_epoch_0", "index": 2, "page_name": "new_version",
             "epoch": 0, "fresh": False},
            {"name": "untouched_page_at_epoch_1", "index": 5, "page_name": "signed",
             "epoch": 1, "fresh": True},
        ],
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
