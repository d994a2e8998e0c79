//! Reproduces every vector in `tests/vectors/dpf_v1.json` (a copy of the spec's vectors, made by
//! an independent implementation of SPEC §1).

use pirq_shared::bits::{bitmap_to_bytes, xor_into};
use pirq_shared::dpf::prg::{expand, seed_from_bytes, seed_to_bytes};
use pirq_shared::dpf::{eval_full, eval_point, DpfKey, KeyError};
use serde_json::Value;

fn vectors() -> Value {
    serde_json::from_str(include_str!("vectors/dpf_v1.json")).expect("vector file is JSON")
}

fn hex_of(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().expect("hex string")).expect("valid hex")
}

fn key(v: &Value) -> DpfKey {
    DpfKey::parse(&hex_of(v)).expect("vector key parses")
}

/// Page `p` of the tiny vector databases: byte `i` = (p·131 + i·7 + 3) mod 256.
fn tiny_page(p: usize, page_size: usize) -> Vec<u8> {
    (0..page_size)
        .map(|i| ((p * 131 + i * 7 + 3) % 256) as u8)
        .collect()
}

#[test]
fn prg_outputs() {
    let all = vectors();
    let cases = all["prg"].as_array().unwrap();
    assert!(!cases.is_empty());
    for case in cases {
        let seed = seed_from_bytes(&hex_of(&case["seed"]).try_into().unwrap());
        let c = expand(&seed);
        assert_eq!(seed_to_bytes(&c.left).to_vec(), hex_of(&case["left"]));
        assert_eq!(seed_to_bytes(&c.right).to_vec(), hex_of(&case["right"]));
        assert_eq!(c.t_left as u64, case["t_left"].as_u64().unwrap());
        assert_eq!(c.t_right as u64, case["t_right"].as_u64().unwrap());
    }
}

#[test]
fn full_domain_bitmaps() {
    let all = vectors();
    let cases = all["full_domain"].as_array().unwrap();
    assert_eq!(cases.len(), 9);
    for case in cases {
        let n = case["n"].as_u64().unwrap() as u8;
        let alpha = case["alpha"].as_u64().unwrap() as usize;
        let len = (1usize << n).div_ceil(8);
        for (k, b) in [("key0", "bits0"), ("key1", "bits1")] {
            let key = key(&case[k]);
            assert_eq!(key.domain_bits(), n);
            assert_eq!(key.to_bytes(), hex_of(&case[k]), "serialize round trip");
            let bits = bitmap_to_bytes(&eval_full(&key), len);
            assert_eq!(bits, hex_of(&case[b]), "n={n} alpha={alpha} {b}");
        }
        let mut x = hex_of(&case["bits0"]);
        xor_into(&mut x, &hex_of(&case["bits1"]));
        let mut unit = vec![0u8; len];
        unit[alpha / 8] = 1 << (alpha % 8);
        assert_eq!(x, unit);
    }
}

#[test]
fn point_evaluations() {
    let all = vectors();
    let cases = all["point_evals"].as_array().unwrap();
    assert!(cases.iter().any(|c| c["n"] == 30));
    for case in cases {
        let n = case["n"].as_u64().unwrap() as u8;
        let alpha = case["alpha"].as_u64().unwrap();
        let (k0, k1) = (key(&case["key0"]), key(&case["key1"]));
        assert_eq!(k0.domain_bits(), n);
        assert!(eval_point(&k0, alpha).unwrap() ^ eval_point(&k1, alpha).unwrap());
        // The vectors list (index, bit) pairs for each key; check every one.
        for (k, name) in [(&k0, "bits0"), (&k1, "bits1")] {
            let points = case[name].as_object().expect("point map");
            assert!(!points.is_empty());
            for (index, bit) in points {
                let index: u64 = index.parse().unwrap();
                assert_eq!(
                    eval_point(k, index).unwrap() as u64,
                    bit.as_u64().unwrap(),
                    "{index}"
                );
            }
        }
    }
}

#[test]
fn tiny_database_answers() {
    let all = vectors();
    let cases = all["db_answers"].as_array().unwrap();
    assert_eq!(cases.len(), 3);
    for case in cases {
        let num_pages = case["num_pages"].as_u64().unwrap() as usize;
        let page_size = case["page_size"].as_u64().unwrap() as usize;
        let alpha = case["alpha"].as_u64().unwrap() as usize;
        let mut answers = Vec::new();
        for (k, a) in [("key0", "answer0"), ("key1", "answer1")] {
            let bits = eval_full(&key(&case[k]));
            let mut acc = vec![0u8; page_size];
            for p in (0..num_pages).filter(|p| pirq_shared::bits::bit(&bits, *p)) {
                xor_into(&mut acc, &tiny_page(p, page_size));
            }
            assert_eq!(acc, hex_of(&case[a]), "{k}");
            answers.push(acc);
        }
        let (a, b) = answers.split_at_mut(1);
        xor_into(&mut a[0], &b[0]);
        assert_eq!(a[0], tiny_page(alpha, page_size));
    }
}

#[test]
fn bad_keys_rejected_with_the_right_error() {
    let all = vectors();
    let bad = all["bad_keys"].as_object().unwrap();
    let expect = |name: &str, err: &KeyError| match name {
        "wrong_version" => matches!(err, KeyError::Version(2)),
        "party_2" => matches!(err, KeyError::Party(2)),
        "n_0" => matches!(err, KeyError::DomainBits(0)),
        "n_41" => matches!(err, KeyError::DomainBits(41)),
        "truncated" | "one_byte_long" => matches!(err, KeyError::Length { .. }),
        "t_byte_bit2" => matches!(err, KeyError::ControlByte { value: 4.., .. }),
        "empty" => matches!(err, KeyError::TooShort { len: 0 }),
        other => panic!("vector file has a bad key this test does not know: {other}"),
    };
    assert_eq!(bad.len(), 8);
    for (name, bytes) in bad {
        let err = DpfKey::parse(&hex_of(bytes)).expect_err(name);
        assert!(expect(name, &err), "{name}: got {err:?}");
    }
}
