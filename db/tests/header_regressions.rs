//! Headers the fuzzer (`scripts/fuzz.sh`, target `parse_header`) once made `Header::parse`
//! panic on: each must now be parsed or refused with an error, never a panic.

use pirq_db::{Header, HEADER_LEN};

/// Parses `bytes` as they are and padded to a full header, as the fuzz target does.
fn parse_both_ways(bytes: &[u8]) {
    let mut padded = bytes.to_vec();
    padded.resize(HEADER_LEN.max(bytes.len()), 0);
    for b in [bytes, &padded[..]] {
        if let Ok(header) = Header::parse(b) {
            assert_eq!(Header::parse(&header.to_bytes()).unwrap(), header);
        }
    }
}

/// A shard block whose first page is near u64::MAX: its end overflowed (2026-11-26).
#[test]
fn a_shard_block_whose_pages_end_past_u64_is_refused() {
    parse_both_ways(include_bytes!("data/header-shard-first-page-overflow.bin"));
}
