//! Query bodies the suites send by hand, past the client library (which builds its own).

use pirq_shared::dpf::generate;
use pirq_shared::wire::QueryRequest;

/// A query of the one key `key`, at the party's newest epoch.
pub fn one_key(key: Vec<u8>) -> QueryRequest {
    QueryRequest {
        keys: vec![key],
        epoch: None,
    }
}

/// A query of page `index` in a domain of `2^domain_bits` pages: the first half of a fresh key
/// pair, for suites that test one party's handling of queries rather than the pages.
pub fn for_page(domain_bits: u8, index: u64) -> QueryRequest {
    let (key, _) = generate(domain_bits, index, &mut rand::rng()).expect("a key for the page");
    one_key(key.to_bytes())
}
