//! Reproduces every value in `tests/vectors/signed_v1.json`, written by an independent Python
//! implementation of `docs/spec/signed.md` (`tests/vectors/signed_v1_gen.py`).

use pirq_shared::digest::Digest;
use pirq_shared::signing::{
    self, check_fresh, Manifest, PublisherKey, SecretKey, SigningBlock, BLOCK,
};
use serde_json::Value;

fn vectors() -> Value {
    serde_json::from_str(include_str!("vectors/signed_v1.json")).expect("vector file is JSON")
}

fn hex_of(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().expect("hex string")).expect("valid hex")
}

fn arr32(v: &Value) -> [u8; 32] {
    hex_of(v).try_into().expect("32 bytes")
}

fn block_of(all: &Value) -> SigningBlock {
    let mut header = vec![0u8; 4096];
    header[BLOCK].copy_from_slice(&hex_of(&all["signing_block"]));
    let block = SigningBlock::from_header(&header, all["page_size"].as_u64().unwrap() as u32)
        .expect("valid block")
        .expect("not zero");
    assert_eq!(block.publisher.0, arr32(&all["public_key"]));
    assert_eq!(block.db_id, arr32(&all["db_id"]));
    block
}

#[test]
fn keys_and_block() {
    let all = vectors();
    let secret = SecretKey::from_seed(arr32(&all["secret_seed"]));
    let public = secret.public();
    assert_eq!(public.0, arr32(&all["public_key"]));
    assert_eq!(public.to_text(), all["public_key_file"].as_str().unwrap());
    for file in ["public_key_file", "public_key_file_bare"] {
        assert_eq!(
            PublisherKey::parse_file(all[file].as_str().unwrap()),
            Ok(public),
            "{file}"
        );
    }
    let block = block_of(&all);
    assert_eq!(block.to_block().to_vec(), hex_of(&all["signing_block"]));
}

#[test]
fn signed_and_tampered_pages() {
    let all = vectors();
    let block = block_of(&all);
    let other = SigningBlock {
        publisher: PublisherKey::parse(all["other_public_key"].as_str().unwrap()).unwrap(),
        ..block
    };
    let secret = SecretKey::from_seed(arr32(&all["secret_seed"]));
    let pages = all["pages"].as_array().unwrap();
    assert!(pages.len() >= 8);
    for case in pages {
        let name = case["name"].as_str().unwrap();
        let index = case["index"].as_u64().unwrap();
        let page = hex_of(&case["page"]);
        let got = block.verify_page(index, &page);
        if case["valid"].as_bool().unwrap() {
            let changed = case["changed_epoch"].as_u64().unwrap();
            assert_eq!(got, Ok(changed), "{name}");
            // Signing reproduces the page byte for byte (Ed25519 is deterministic).
            let mut resigned = page.clone();
            resigned[page.len() - 72..].fill(0);
            block.sign_page(&secret, index, changed, &mut resigned);
            assert_eq!(resigned, page, "{name}");
        } else {
            assert!(got.is_err(), "{name} must be refused");
        }
        if let Some(message) = case.get("message") {
            let usable = &page[..page.len() - 72];
            assert_eq!(
                signing::page_message(&block.db_id, index, 0, usable),
                hex_of(message),
                "{name}"
            );
            assert_eq!(&page[page.len() - 64..], &hex_of(&case["signature"])[..]);
        }
        if name == "another_publisher" {
            assert_eq!(other.verify_page(index, &page), Ok(0));
        }
    }
}

#[test]
fn manifest_and_freshness() {
    let all = vectors();
    let block = block_of(&all);
    let secret = SecretKey::from_seed(arr32(&all["secret_seed"]));
    let m = &all["manifest"];
    let pages: Vec<u64> = m["pages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap())
        .collect();
    let digest = Digest(arr32(&m["digest"]));
    let epoch = m["epoch"].as_u64().unwrap();
    assert_eq!(
        signing::manifest_message(&block.db_id, epoch, &digest, &pages),
        hex_of(&m["message"])
    );
    let manifest = Manifest::sign(&block, &secret, epoch, digest, pages);
    assert_eq!(manifest.signature.to_vec(), hex_of(&m["signature"]));
    manifest.verify(&block).unwrap();
    let by_name = |n: &str| {
        all["pages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == n)
            .map(|c| hex_of(&c["page"]))
            .unwrap()
    };
    for case in all["freshness"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let index = case["index"].as_u64().unwrap();
        let page = by_name(case["page_name"].as_str().unwrap());
        let changed = block.verify_page(index, &page).expect("a valid page");
        let fresh = check_fresh(
            index,
            changed,
            case["epoch"].as_u64().unwrap(),
            std::slice::from_ref(&manifest),
        );
        assert_eq!(fresh.is_ok(), case["fresh"].as_bool().unwrap(), "{name}");
    }
}
