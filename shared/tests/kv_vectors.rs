//! Reproduces every value in `tests/vectors/kv_v1.json` and `kv_v2.json`, written by an
//! independent Python implementation of `docs/spec/kv.md` (`tests/vectors/kv_v1_gen.py`,
//! `kv_v2_gen.py`).

use pirq_shared::kv::{hash, Encoding, Encodings, KvError, KvLayout, KvParams, Table, ValueKind};
use serde_json::Value;

fn vectors() -> Value {
    serde_json::from_str(include_str!("vectors/kv_v1.json")).expect("vector file is JSON")
}

fn hex_of(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().expect("hex string")).expect("valid hex")
}

fn seed_of(v: &Value) -> [u8; 32] {
    hex_of(v).try_into().expect("32-byte seed")
}

#[test]
fn tags_and_candidates() {
    let all = vectors();
    let seed = seed_of(&all["hash_seed"]);
    let cases = all["hashes"].as_array().unwrap();
    assert!(cases.len() >= 5);
    let mut checked = 0;
    for case in cases {
        let key = hex_of(&case["key"]);
        let tag = hash::tag(&seed, &key);
        assert_eq!(tag.to_vec(), hex_of(&case["tag"]), "tag of {}", case["key"]);
        for c in case["candidates"].as_array().unwrap() {
            let num_pages = c["num_pages"].as_u64().unwrap();
            let choices = c["choices"].as_u64().unwrap() as u8;
            let want: Vec<u64> = c["pages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_u64().unwrap())
                .collect();
            let got = hash::candidates(&seed, &tag, choices, num_pages);
            assert_eq!(got.as_slice(), &want[..], "{} {c}", case["key"]);
            checked += 1;
        }
    }
    assert!(checked > 50);
}

#[test]
fn layout_block() {
    let all = vectors();
    let b = &all["block"];
    let layout = KvLayout {
        choices: b["choices"].as_u64().unwrap() as u8,
        kind: ValueKind::Fixed,
        value_size: b["value_size"].as_u64().unwrap() as u32,
        key_size: b["key_size"].as_u64().unwrap() as u32,
        seed: seed_of(&b["seed"]),
        encodings: Default::default(),
    };
    let want = hex_of(&b["bytes_64_512"]);
    assert_eq!(layout.to_block().to_vec(), want);
    let mut header = vec![0u8; 4096];
    header[64..512].copy_from_slice(&want);
    assert_eq!(KvLayout::from_header(&header).unwrap(), Some(layout));
}

fn tiny() -> (KvParams, Value) {
    let all = vectors();
    let t = all["tiny_db"].clone();
    let params = KvParams::new(
        KvLayout {
            choices: t["choices"].as_u64().unwrap() as u8,
            kind: ValueKind::Fixed,
            value_size: t["value_size"].as_u64().unwrap() as u32,
            key_size: t["key_size"].as_u64().unwrap() as u32,
            seed: seed_of(&t["seed"]),
            encodings: Default::default(),
        },
        t["page_size"].as_u64().unwrap() as u32,
        t["num_pages"].as_u64().unwrap(),
    )
    .unwrap();
    assert_eq!(params.slot_size() as u64, t["slot_size"].as_u64().unwrap());
    assert_eq!(
        params.slots_per_page() as u64,
        t["slots_per_page"].as_u64().unwrap()
    );
    (params, t)
}

/// A client's lookup: find the tag in the key's candidate pages.
#[test]
fn tiny_db_lookups() {
    let (params, t) = tiny();
    let pages: Vec<Vec<u8>> = t["pages"].as_array().unwrap().iter().map(hex_of).collect();
    let lookups = t["lookups"].as_array().unwrap();
    assert!(lookups.iter().any(|l| l["value"].is_null()));
    assert!(lookups.iter().any(|l| !l["value"].is_null()));
    for l in lookups {
        let key = hex_of(&l["key"]);
        params.check_key(&key).unwrap();
        let tag = params.tag(&key);
        let found = params.candidates(&tag).iter().find_map(|&p| {
            params
                .find(&pages[p as usize], &tag)
                .unwrap()
                .map(|v| v.to_vec())
        });
        let want = (!l["value"].is_null()).then(|| hex_of(&l["value"]));
        assert_eq!(found, want, "key {}", l["key"]);
    }
}

/// The builder, given the records in order, lays them out exactly as the reference placement
/// did (least-filled candidate, first empty slot: no eviction was needed).
#[test]
fn tiny_db_placement() {
    let (params, t) = tiny();
    let mut pages = vec![0u8; params.num_pages as usize * params.page_size as usize];
    let mut table = Table::empty(params, &mut pages, 0);
    for r in t["records"].as_array().unwrap() {
        let key = hex_of(&r["key"]);
        table
            .insert(&params.tag(&key), &hex_of(&r["value"]))
            .unwrap();
    }
    assert_eq!(table.kicks(), 0);
    let want: Vec<u8> = t["pages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(hex_of)
        .collect();
    assert_eq!(pages, want);
}

fn vectors_v2() -> Value {
    serde_json::from_str(include_str!("vectors/kv_v2.json")).expect("vector file is JSON")
}

fn kind_of(v: &Value) -> ValueKind {
    match v.as_str().unwrap() {
        "set" => ValueKind::Set,
        "variable" => ValueKind::Variable,
        other => panic!("kind {other}"),
    }
}

#[test]
fn v2_layout_blocks() {
    let all = vectors_v2();
    for b in all["blocks"].as_array().unwrap() {
        let layout = KvLayout {
            choices: b["choices"].as_u64().unwrap() as u8,
            kind: kind_of(&b["kind"]),
            value_size: b["value_size"].as_u64().unwrap() as u32,
            key_size: b["key_size"].as_u64().unwrap() as u32,
            seed: seed_of(&b["seed"]),
            encodings: Default::default(),
        };
        let want = hex_of(&b["bytes_64_512"]);
        assert_eq!(layout.to_block().to_vec(), want, "{b}");
        let mut header = vec![0u8; 4096];
        header[64..512].copy_from_slice(&want);
        assert_eq!(KvLayout::from_header(&header).unwrap(), Some(layout));
        assert_eq!(layout.slot_size() as u64, b["slot_size"].as_u64().unwrap());
    }
}

/// A v2 table of the vector file: its params (checked against the file's derived sizes and
/// its own block) and its pages.
fn v2_table(name: &str) -> (KvParams, Value, Vec<Vec<u8>>) {
    let t = vectors_v2()["tables"][name].clone();
    let num = |f: &str| t[f].as_u64().unwrap();
    let layout = KvLayout {
        choices: num("choices") as u8,
        kind: kind_of(&t["kind"]),
        value_size: num("value_size") as u32,
        key_size: num("key_size") as u32,
        seed: seed_of(&t["seed"]),
        encodings: Default::default(),
    };
    assert_eq!(layout.to_block().to_vec(), hex_of(&t["block_64_512"]));
    let params = KvParams::with_tail(
        layout,
        num("page_size") as u32,
        num("tail_len") as u32,
        num("num_pages"),
    )
    .unwrap();
    assert_eq!(params.slot_size() as u64, num("slot_size"));
    assert_eq!(params.slots_per_page() as u64, num("slots_per_page"));
    let pages = t["pages"].as_array().unwrap().iter().map(hex_of).collect();
    (params, t, pages)
}

const V2_TABLES: [&str; 4] = ["set", "variable", "signed_set", "signed_variable"];

#[test]
fn v2_lookups() {
    for name in V2_TABLES {
        let (params, t, pages) = v2_table(name);
        let lookups = t["lookups"].as_array().unwrap();
        assert!(lookups.iter().any(|l| l["present"] == true));
        assert!(lookups.iter().any(|l| l["present"] == false));
        for l in lookups {
            let key = hex_of(&l["key"]);
            params.check_key(&key).unwrap();
            let tag = params.tag(&key);
            let mut found = None;
            for &p in params.candidates(&tag).iter() {
                if let Some(v) = params.find(&pages[p as usize], &tag).unwrap() {
                    found = Some(v.to_vec());
                    break;
                }
            }
            assert_eq!(found.is_some(), l["present"] == true, "{name} {l}");
            if let Some(v) = found {
                assert_eq!(v, hex_of(&l["value"]), "{name} {l}");
            }
        }
    }
}

/// The builder lays the records out exactly as the reference placement did, leaving a signed
/// page's tail alone.
#[test]
fn v2_placement() {
    for name in V2_TABLES {
        let (params, t, want) = v2_table(name);
        let ps = params.page_size as usize;
        // Start from the vector's tails (the stand-in signature bytes) and empty slots.
        let mut pages: Vec<u8> = want
            .iter()
            .flat_map(|p| {
                let mut page = vec![0u8; ps];
                page[params.usable as usize..].copy_from_slice(&p[params.usable as usize..]);
                page
            })
            .collect();
        let mut table = Table::empty(params, &mut pages, 0);
        for r in t["records"].as_array().unwrap() {
            let value = hex_of(&r["value"]);
            params.check_value(&value).unwrap();
            table
                .insert(&params.tag(&hex_of(&r["key"])), &value)
                .unwrap();
        }
        assert_eq!(table.kicks(), 0);
        assert_eq!(pages, want.concat(), "{name}");
    }
}

#[test]
fn v2_malformed_slot_is_refused() {
    let m = vectors_v2()["malformed"].clone();
    let (params, _, _) = v2_table(m["table"].as_str().unwrap());
    let tag = params.tag(&hex_of(&m["key"]));
    let page = hex_of(&m["page"]);
    assert!(matches!(
        params.find(&page, &tag),
        Err(KvError::SlotLength { len: 31, max: 30 })
    ));
}

fn encoding_of(v: &Value) -> Option<Encoding> {
    v.as_str()
        .map(|name| Encoding::from_name(name).expect("a known encoding"))
}

#[test]
fn recorded_encodings_in_blocks() {
    let all = vectors_v2();
    for b in all["recorded_encodings"].as_array().unwrap() {
        let kind = match b["kind"].as_str().unwrap() {
            "fixed" => ValueKind::Fixed,
            _ => kind_of(&b["kind"]),
        };
        let layout = KvLayout {
            choices: b["choices"].as_u64().unwrap() as u8,
            kind,
            value_size: b["value_size"].as_u64().unwrap() as u32,
            key_size: b["key_size"].as_u64().unwrap() as u32,
            seed: seed_of(&b["seed"]),
            encodings: Encodings {
                key: encoding_of(&b["key_encoding"]),
                value: encoding_of(&b["value_encoding"]),
            },
        };
        let want = hex_of(&b["bytes_64_512"]);
        assert_eq!(layout.to_block().to_vec(), want, "{b}");
        let mut header = vec![0u8; 4096];
        header[64..512].copy_from_slice(&want);
        assert_eq!(KvLayout::from_header(&header).unwrap(), Some(layout));
        // /v1/info names them, and a client reads them back.
        let params = KvParams::new(layout, 4096, 16).unwrap();
        let info = params.info();
        assert_eq!(info.key_encoding.as_deref(), b["key_encoding"].as_str());
        assert_eq!(info.params(4096, 16), Ok(params));
    }
}

#[test]
fn keys_as_users_write_them() {
    let all = vectors_v2();
    let seed: [u8; 32] = std::array::from_fn(|i| i as u8);
    for k in all["encoded_keys"].as_array().unwrap() {
        let encoding = encoding_of(&k["encoding"]).unwrap();
        let key = encoding.decode(k["text"].as_str().unwrap()).unwrap();
        assert_eq!(key, hex_of(&k["key"]), "{k}");
        assert_eq!(hash::tag(&seed, &key).to_vec(), hex_of(&k["tag"]), "{k}");
    }
}
