//! Verifying answers against the publisher's signatures (`docs/spec/signed.md` §3): the pinned
//! key, the checks of the parties' `signing` object, every retrieved page's signature, and the
//! newest signed epoch remembered per database so the client's view never goes back (§4.4).
//!
//! Every page of a lookup is checked before the lookup returns: a failure fails the whole
//! lookup, so nothing of it reaches a caller, a terminal or a file.

use std::collections::HashMap;
use std::sync::Mutex;

use pirq_shared::signing::{PublisherKey, SigningBlock, SigningInfo};

use crate::ClientError;

/// What was checked about the pages or values a lookup returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verification {
    /// The database is not signed and the client pins no key: nothing to check.
    Unsigned,
    /// Every page's publisher signature was checked against the pinned key.
    Verified,
    /// The database is signed, but the client pins no publisher key: not checked.
    Unchecked,
}

/// The client's pinned publisher key and what it remembers.
#[derive(Debug, Default)]
pub(crate) struct Verifier {
    pub(crate) publisher: Option<PublisherKey>,
    /// Answers at an epoch below this are refused (`--min-epoch`).
    pub(crate) min_epoch: u64,
    /// Per `db_id`: the newest epoch the publisher's signatures have shown this client (the
    /// highest `changed_epoch` of a verified page).
    newest_signed: Mutex<HashMap<[u8; 32], u64>>,
}

impl Verifier {
    pub(crate) fn new(publisher: Option<PublisherKey>, min_epoch: u64) -> Verifier {
        Verifier {
            publisher,
            min_epoch,
            newest_signed: Mutex::default(),
        }
    }

    /// Checks both parties' `signing` objects (they must agree) against the pinned key, and
    /// returns the block to verify pages with (`None`: nothing to verify).
    pub(crate) fn agree(
        &self,
        a: &Option<SigningInfo>,
        b: &Option<SigningInfo>,
    ) -> Result<Option<SigningBlock>, ClientError> {
        if a != b {
            let show = |s: &Option<SigningInfo>| match s {
                Some(s) => crate::text::sanitize(&format!(
                    "publisher key {}, db_id {}",
                    s.publisher_key, s.db_id
                )),
                None => "an unsigned database".into(),
            };
            return Err(ClientError::Mismatch(format!(
                "signing: party A serves {}, party B {}",
                show(a),
                show(b)
            )));
        }
        let Some(publisher) = self.publisher else {
            return Ok(None);
        };
        let Some(info) = a else {
            return Err(ClientError::Unverifiable(format!(
                "the parties serve an unsigned database; this client is pinned to publisher \
                 key {publisher} and refuses unsigned answers"
            )));
        };
        let block = info.block().map_err(|e| {
            ClientError::Unverifiable(format!(
                "the parties advertise a signing block this client cannot use: {}",
                crate::text::sanitize(&e.to_string())
            ))
        })?;
        if block.publisher != publisher {
            return Err(ClientError::Unverifiable(format!(
                "the parties serve a database signed by publisher key {}, this client is \
                 pinned to {publisher}",
                block.publisher
            )));
        }
        Ok(Some(block))
    }

    /// Checks pages `pages[i]` = database page `indices[i]`, answered at `epoch` by `parties`:
    /// signatures, epochs of last change, and the epoch against the client's floor.
    pub(crate) fn check(
        &self,
        block: &SigningBlock,
        parties: &str,
        indices: &[u64],
        epoch: u64,
        pages: &[Vec<u8>],
    ) -> Result<(), ClientError> {
        let floor = self.floor(&block.db_id);
        if epoch < floor {
            return Err(ClientError::Forged {
                parties: parties.to_string(),
                detail: format!(
                    "they answered at epoch {epoch}, older than epoch {floor}, which this \
                     client has already seen signed (or was told with --min-epoch): a frozen \
                     or rolled-back database"
                ),
            });
        }
        let mut newest = 0;
        for (&index, page) in indices.iter().zip(pages) {
            let forged = |e: pirq_shared::signing::SignError| ClientError::Forged {
                parties: parties.to_string(),
                detail: e.to_string(),
            };
            let changed = block.verify_page(index, page).map_err(forged)?;
            pirq_shared::signing::check_fresh(index, changed, epoch, &[]).map_err(forged)?;
            newest = newest.max(changed);
        }
        let mut seen = self.newest_signed.lock().expect("not poisoned");
        let entry = seen.entry(block.db_id).or_default();
        *entry = (*entry).max(newest);
        Ok(())
    }

    /// The oldest epoch this client accepts answers at, for database `db_id`.
    pub(crate) fn floor(&self, db_id: &[u8; 32]) -> u64 {
        let seen = self.newest_signed.lock().expect("not poisoned");
        self.min_epoch.max(seen.get(db_id).copied().unwrap_or(0))
    }

    /// The newest epoch the publisher's signatures have shown this client for `db_id`.
    pub(crate) fn newest_signed(&self, db_id: &[u8; 32]) -> Option<u64> {
        self.newest_signed
            .lock()
            .expect("not poisoned")
            .get(db_id)
            .copied()
    }
}
