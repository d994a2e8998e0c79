//! Any bytes: the key parser never panics, and whatever it accepts re-serializes to the same
//! bytes and evaluates without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pirq_shared::dpf::{eval_full, eval_point, DpfKey};

fuzz_target!(|data: &[u8]| {
    if let Ok(key) = DpfKey::parse(data) {
        assert_eq!(key.to_bytes(), data);
        let n = key.domain_bits();
        let _ = eval_point(&key, u64::from_le_bytes([data[3]; 8]) & ((1u64 << n) - 1));
        assert!(eval_point(&key, 1u64 << n).is_err());
        if n <= 12 {
            let _ = eval_full(&key);
        }
    }
});
