//! Any bytes as a `.pirdb` header: parsed or rejected with an error, never a panic; accepted
//! headers survive a round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pirq_db::{Header, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    // Most inputs are short: also try them padded to a full header so the field checks run.
    let mut padded = data.to_vec();
    padded.resize(HEADER_LEN.max(data.len()), 0);
    for bytes in [data, &padded[..]] {
        if let Ok(header) = Header::parse(bytes) {
            assert_eq!(Header::parse(&header.to_bytes()).unwrap(), header);
            let _ = header.domain_bits();
            let _ = header.file_len();
        }
    }
});
