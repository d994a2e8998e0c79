//! The database digest (SPEC §2.1) of every epoch this worker answers.
//!
//! The chain starts at the digest the `.pirdb` header records for its epoch and moves one step
//! per applied update, computed from the update alone (no page is read), so a worker that holds
//! only a range of pages computes the same digests as one that holds them all. Every result is
//! stamped with the digest of the epoch it answers; clients compare the two parties' stamps
//! before they combine answers.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use pirq_shared::digest::Digest;
use pirq_shared::update::EpochUpdate;
use pirq_shared::wire::EpochRange;

/// Epochs older than the oldest one answered that are still kept: a window folded forward
/// between a pass and the writing of its results must still find its epoch's digest.
const KEEP_BEHIND: u64 = 64;

/// Digests by epoch, shared by the updates follower (which extends it) and the serve loop and
/// heartbeat (which read it).
#[derive(Clone, Debug)]
pub struct Digests(Arc<RwLock<BTreeMap<u64, Digest>>>);

impl Digests {
    /// A chain whose first link is `digest` at `epoch` (the file's).
    pub fn new(epoch: u64, digest: Digest) -> Digests {
        Digests(Arc::new(RwLock::new(BTreeMap::from([(epoch, digest)]))))
    }

    /// The digest at `epoch`, if it is (still) known.
    pub fn get(&self, epoch: u64) -> Option<Digest> {
        self.0.read().unwrap().get(&epoch).copied()
    }

    /// The newest epoch and its digest.
    pub fn newest(&self) -> (u64, Digest) {
        let map = self.0.read().unwrap();
        let (e, d) = map.last_key_value().expect("the chain has its first link");
        (*e, *d)
    }

    /// Extends the chain by `update` (which must be the next epoch) and returns its digest.
    /// Called before the scanner applies the update, so no answer at that epoch can exist
    /// without its digest.
    pub fn push(&self, update: &EpochUpdate) -> Result<Digest, String> {
        let (newest, digest) = self.newest();
        if update.epoch != newest + 1 {
            return Err(format!(
                "update for epoch {} does not follow epoch {newest}",
                update.epoch
            ));
        }
        let next = digest.next(update);
        self.0.write().unwrap().insert(update.epoch, next);
        Ok(next)
    }

    /// Forgets digests well behind the window the scanner answers (never the newest).
    pub fn forget_before(&self, window: EpochRange) {
        let mut map = self.0.write().unwrap();
        let newest = *map
            .last_key_value()
            .expect("the chain has its first link")
            .0;
        let keep_from = window.oldest.saturating_sub(KEEP_BEHIND).min(newest);
        *map = map.split_off(&keep_from);
    }

    /// The digests of the epochs in `window` that are known, oldest first.
    pub fn in_window(&self, window: EpochRange) -> Vec<(u64, Digest)> {
        self.0
            .read()
            .unwrap()
            .range(window.oldest..=window.newest)
            .map(|(e, d)| (*e, *d))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pirq_shared::update::PageWrite;

    #[test]
    fn the_chain_follows_updates_in_order() {
        let d0 = Digest([1; 32]);
        let chain = Digests::new(5, d0);
        let u = |epoch| EpochUpdate {
            epoch,
            pages: vec![PageWrite {
                index: 0,
                page: vec![epoch as u8; 256],
            }],
        };
        assert!(chain.push(&u(7)).is_err(), "a gap is refused");
        let d6 = chain.push(&u(6)).unwrap();
        assert_eq!(d6, d0.next(&u(6)));
        let d7 = chain.push(&u(7)).unwrap();
        assert_eq!(chain.newest(), (7, d7));
        assert_eq!(chain.get(5), Some(d0));
        let window = EpochRange {
            oldest: 6,
            newest: 7,
        };
        assert_eq!(chain.in_window(window), vec![(6, d6), (7, d7)]);
        chain.forget_before(EpochRange {
            oldest: 200,
            newest: 200,
        });
        assert_eq!(chain.get(6), None);
        assert_eq!(chain.newest(), (7, d7), "the newest is kept");
    }
}
