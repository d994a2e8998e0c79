//! The checks of a query that both of a party's servers make, written once: the gateway before
//! it queues a query (so a client hears of a bad key at once), the worker again before it scans
//! (the job stream is not trusted). Both answer with the same codes and messages.

use crate::dpf::DpfKey;
use crate::error::ErrorCode;
use crate::wire::{EpochRange, ErrorBody};

/// SPEC §1.3 parse of every key; the first bad one is named (`key_index`).
pub fn parse_keys(raw: &[Vec<u8>]) -> Result<Vec<DpfKey>, ErrorBody> {
    raw.iter()
        .enumerate()
        .map(|(i, bytes)| {
            DpfKey::parse(bytes).map_err(|e| {
                ErrorBody::new(ErrorCode::from(&e), format!("key {i}: {e}")).with_key_index(i)
            })
        })
        .collect()
}

/// Every key must have the database's domain bits `n` (SPEC §2).
pub fn check_domain(keys: &[DpfKey], domain_bits: u8) -> Result<(), ErrorBody> {
    match keys
        .iter()
        .enumerate()
        .find(|(_, k)| k.domain_bits() != domain_bits)
    {
        None => Ok(()),
        Some((i, k)) => Err(ErrorBody::new(
            ErrorCode::KeyDomainMismatch,
            format!(
                "key {i} has {} domain bits, this database needs {domain_bits}",
                k.domain_bits()
            ),
        )
        .with_key_index(i)),
    }
}

/// A pinned epoch must be inside the window answered exactly (the answer names the window).
pub fn check_epoch(epoch: u64, window: EpochRange) -> Result<(), ErrorBody> {
    if window.contains(epoch) {
        return Ok(());
    }
    let limit = if epoch > crate::update::MAX_EPOCH {
        " (and above the highest epoch, 2^53-1)"
    } else {
        ""
    };
    Err(ErrorBody::new(
        ErrorCode::EpochUnavailable,
        format!(
            "epoch {epoch} is outside the window {}..={} this party answers{limit}",
            window.oldest, window.newest
        ),
    )
    .with_window(window))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dpf::generate;

    #[test]
    fn the_first_bad_key_is_named() {
        let (a, _) = generate(10, 3, &mut rand::rng()).unwrap();
        let raw = vec![a.to_bytes(), vec![1, 2, 3]];
        let e = parse_keys(&raw).unwrap_err();
        assert_eq!(e.key_index, Some(1));
        let keys = parse_keys(&raw[..1]).unwrap();
        assert!(check_domain(&keys, 10).is_ok());
        let e = check_domain(&keys, 12).unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.key_index),
            (ErrorCode::KeyDomainMismatch.as_str(), Some(0))
        );
    }

    #[test]
    fn epochs_outside_the_window_name_it() {
        let window = EpochRange {
            oldest: 2,
            newest: 5,
        };
        assert!(check_epoch(2, window).is_ok() && check_epoch(5, window).is_ok());
        let e = check_epoch(6, window).unwrap_err();
        assert_eq!(e.code, ErrorCode::EpochUnavailable.as_str());
        assert_eq!(e.window, Some(window));
    }
}
