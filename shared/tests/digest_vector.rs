//! SPEC §2.1's test vector (`vectors/digest_v1.json`, computed by an independent Python
//! implementation): the content digest of the vector's pages, and the chain through one update.
//! That `pirq-db`'s writers record exactly this digest is `db/tests/pirdb.rs`'s test.

use pirq_shared::digest::Digest;
use pirq_shared::update::{EpochUpdate, PageWrite};

#[test]
fn digest_test_vector() {
    let v: serde_json::Value =
        serde_json::from_str(include_str!("vectors/digest_v1.json")).unwrap();
    let page_size = v["page_size"].as_u64().unwrap() as u32;
    let num_pages = v["num_pages"].as_u64().unwrap();
    let epoch = v["epoch"].as_u64().unwrap();
    // Page p, byte i: (31p + i) mod 256, as the vector's generator writes it.
    let pages: Vec<u8> = (0..num_pages as usize)
        .flat_map(|p| (0..page_size as usize).map(move |i| (31 * p + i) as u8))
        .collect();
    let expect = Digest::from_hex(v["content_digest"].as_str().unwrap()).unwrap();
    assert_eq!(Digest::content(page_size, num_pages, epoch, &pages), expect);
    let mut hasher = Digest::content_hasher(page_size, num_pages, epoch);
    for chunk in pages.chunks(page_size as usize) {
        hasher.update(chunk);
    }
    assert_eq!(hasher.finish(), expect, "hashed page by page");
    let update = EpochUpdate {
        epoch: v["update"]["epoch"].as_u64().unwrap(),
        pages: v["update"]["pages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| PageWrite {
                index: w["index"].as_u64().unwrap(),
                page: vec![w["fill"].as_u64().unwrap() as u8; page_size as usize],
            })
            .collect(),
    };
    assert_eq!(
        expect.next(&update).to_hex(),
        v["epoch_1_digest"].as_str().unwrap()
    );
}
