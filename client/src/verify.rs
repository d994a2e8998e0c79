//! Verifying answers against the publisher's signatures (`docs/spec/signed.md` §3): the pinned
//! key, the checks of the parties' `signing` object, every retrieved page's signature, and the
//! publisher's epoch manifests that show a page is the current version (§4.3), and the newest
//! signed epoch remembered per database so the client's view never goes back (§4.4).
//!
//! Every page of a lookup is checked before the lookup returns: a failure fails the whole
//! lookup, so nothing of it reaches a caller, a terminal or a file.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pirq_shared::digest::Digest;
use pirq_shared::signing::{
    check_fresh, Manifest, PublisherKey, SignError, SigningBlock, SigningInfo,
};

use crate::ClientError;

/// What was checked about the pages or values a lookup returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verification {
    /// The database is not signed and the client pins no key: nothing to check.
    Unsigned,
    /// Every page's publisher signature was checked against the pinned key.
    Verified,
    /// Every page's publisher signature was checked against the key both parties advertise
    /// (the client pins none): an altered, stale or rolled-back page is refused as with a
    /// pinned key, but a database re-signed by someone else as a whole would not be.
    Advertised,
    /// The database is signed, and the client was told not to verify (`--no-verify`).
    Unchecked,
}

/// How soon a client reads the parties' manifests again for the same answered epoch while the
/// manifest of that epoch is still missing (an operator installs it just after the update).
pub(crate) const MANIFEST_REREAD: Duration = Duration::from_secs(10);

/// What this client knows of one signed database's history (`docs/spec/signed.md` §4.3, §4.4).
#[derive(Debug, Default)]
struct History {
    /// The newest epoch the publisher's signatures have shown this client: the highest
    /// `changed_epoch` of a verified page and the highest epoch of a verified manifest.
    newest: u64,
    /// The publisher's manifests this client verified, by epoch.
    manifests: BTreeMap<u64, Manifest>,
    /// The answered epoch the parties' manifests were last read for, and when.
    read: Option<(u64, Instant)>,
}

/// The client's pinned publisher key and what it remembers.
#[derive(Debug, Default)]
pub(crate) struct Verifier {
    pub(crate) publisher: Option<PublisherKey>,
    /// Verify against the key both parties advertise when none is pinned (the default;
    /// `--no-verify` turns it off).
    pub(crate) verify_advertised: bool,
    /// Answers at an epoch below this are refused (`--min-epoch`).
    pub(crate) min_epoch: u64,
    /// Per `db_id`: its newest signed epoch and verified manifests.
    histories: Mutex<HashMap<[u8; 32], History>>,
}

impl Verifier {
    pub(crate) fn new(publisher: Option<PublisherKey>, min_epoch: u64) -> Verifier {
        Verifier {
            publisher,
            verify_advertised: true,
            min_epoch,
            histories: Mutex::default(),
        }
    }

    /// Whether a lookup answered at `epoch` must read the parties' manifests before its pages
    /// are checked: when this client lacks the manifest of that epoch and has not just read
    /// them for it. This depends on the answered epoch only, never on the pages: reading them
    /// only when a page needs an older manifest would tell the parties that the page asked for
    /// did not change at `epoch`.
    pub(crate) fn wants_manifests(&self, db_id: &[u8; 32], epoch: u64) -> bool {
        if epoch == 0 {
            return false;
        }
        let mut histories = self.histories.lock().expect("not poisoned");
        let history = histories.entry(*db_id).or_default();
        if history.manifests.contains_key(&epoch) {
            return false;
        }
        if matches!(history.read, Some((e, at)) if e == epoch && at.elapsed() < MANIFEST_REREAD) {
            return false;
        }
        history.read = Some((epoch, Instant::now()));
        true
    }

    /// Keeps the manifests whose signature verifies under `block` (the union of both parties'
    /// lists: each is signed, so a party can withhold one but not forge it), and raises the
    /// newest signed epoch to the newest of them.
    pub(crate) fn add_manifests(&self, block: &SigningBlock, manifests: Vec<Manifest>) {
        let mut histories = self.histories.lock().expect("not poisoned");
        let history = histories.entry(block.db_id).or_default();
        for m in manifests {
            if history.manifests.contains_key(&m.epoch) || m.verify(block).is_err() {
                continue;
            }
            history.newest = history.newest.max(m.epoch);
            history.manifests.insert(m.epoch, m);
        }
    }

    /// Checks both parties' `signing` objects (they must agree: two different publisher keys
    /// are refused) against the pinned key, and returns the block to verify pages with
    /// (`None`: nothing to verify). Without a pinned key, the block both parties advertise is
    /// verified against unless `verify_advertised` is off.
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
        if self.publisher.is_none() && !self.verify_advertised {
            return Ok(None);
        }
        let Some(info) = a else {
            return match self.publisher {
                Some(publisher) => Err(ClientError::Unverifiable(format!(
                    "the parties serve an unsigned database; this client is pinned to \
                     publisher key {publisher} and refuses unsigned answers"
                ))),
                None => Ok(None),
            };
        };
        let block = info.block().map_err(|e| {
            ClientError::Unverifiable(format!(
                "the parties advertise a signing block this client cannot use: {}",
                crate::text::sanitize(&e.to_string())
            ))
        })?;
        let Some(publisher) = self.publisher else {
            return Ok(Some(block));
        };
        if block.publisher != publisher {
            return Err(ClientError::Unverifiable(format!(
                "the parties serve a database signed by publisher key {}, this client is \
                 pinned to {publisher}",
                block.publisher
            )));
        }
        Ok(Some(block))
    }

    /// Checks pages `pages[i]` = database page `indices[i]`, answered at `epoch` with database
    /// digest `digest` by `parties`: the epoch against the client's floor, the digest against
    /// the publisher's manifest of that epoch, every page's signature, and every page's
    /// freshness against the manifests (`docs/spec/signed.md` §3, §4.3).
    pub(crate) fn check(
        &self,
        block: &SigningBlock,
        parties: &str,
        indices: &[u64],
        epoch: u64,
        digest: Option<Digest>,
        pages: &[Vec<u8>],
    ) -> Result<(), ClientError> {
        let forged = |detail: String| ClientError::Forged {
            parties: parties.to_string(),
            detail,
        };
        // Signatures first, without the lock (the costly part).
        let changed = indices
            .iter()
            .zip(pages)
            .map(|(&index, page)| {
                let changed = block
                    .verify_page(index, page)
                    .map_err(|e| forged(e.to_string()))?;
                check_fresh(index, changed, epoch, &[]).map_err(|e| forged(e.to_string()))?;
                Ok(changed)
            })
            .collect::<Result<Vec<u64>, ClientError>>()?;
        let mut histories = self.histories.lock().expect("not poisoned");
        let history = histories.entry(block.db_id).or_default();
        let floor = self.min_epoch.max(history.newest);
        if epoch < floor {
            return Err(forged(format!(
                "they answered at epoch {epoch}, older than epoch {floor}, which this client \
                 has already seen signed (or was told with --min-epoch): a frozen or \
                 rolled-back database"
            )));
        }
        if let (Some(manifest), Some(digest)) = (history.manifests.get(&epoch), digest) {
            if manifest.digest != digest {
                return Err(forged(format!(
                    "they answered at epoch {epoch} from database digest {digest}, the \
                     publisher's manifest of that epoch says {}",
                    manifest.digest
                )));
            }
        }
        for (&index, &changed) in indices.iter().zip(&changed) {
            if changed == epoch {
                continue;
            }
            let later = history.manifests.range(changed + 1..=epoch);
            if let Some((&at, _)) = later.clone().find(|(_, m)| m.replaced(index)) {
                return Err(forged(
                    SignError::Stale {
                        index,
                        changed,
                        later: at,
                    }
                    .to_string(),
                ));
            }
            // Every epoch of the range needs its manifest: one missing could be the one that
            // replaced this page.
            let held = later.count() as u64;
            if held != epoch - changed {
                let missing = (changed + 1..=epoch)
                    .find(|e| !history.manifests.contains_key(e))
                    .expect("fewer manifests than epochs");
                return Err(ClientError::MissingManifest {
                    parties: parties.to_string(),
                    epoch: missing,
                    detail: format!(
                        "page {index} answered at epoch {epoch} is its version of epoch \
                         {changed}, and without that manifest a stale page cannot be ruled out"
                    ),
                });
            }
        }
        let newest = changed.into_iter().max().unwrap_or(0);
        history.newest = history.newest.max(newest);
        Ok(())
    }

    /// The oldest epoch this client takes answers at for `db_id` (§4.4): the newest it has seen
    /// signed, or `--min-epoch`.
    pub(crate) fn floor(&self, db_id: &[u8; 32]) -> u64 {
        self.min_epoch.max(self.newest_signed(db_id).unwrap_or(0))
    }

    /// The newest epoch the publisher's signatures have shown this client for `db_id`.
    pub(crate) fn newest_signed(&self, db_id: &[u8; 32]) -> Option<u64> {
        self.histories
            .lock()
            .expect("not poisoned")
            .get(db_id)
            .map(|h| h.newest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pirq_shared::signing::{PageSigner, SecretKey};

    fn setup() -> (PageSigner, Verifier) {
        let signer = PageSigner::new(SecretKey::from_seed([5; 32]));
        let verifier = Verifier::new(Some(signer.block.publisher), 0);
        (signer, verifier)
    }

    fn page(signer: &PageSigner, index: u64, changed: u64, fill: u8) -> Vec<u8> {
        let mut page = vec![fill; 256];
        signer.sign(index, changed, &mut page);
        page
    }

    fn refused(result: Result<(), ClientError>, says: &str) {
        match result {
            Err(ClientError::Forged { detail, .. }) => assert!(detail.contains(says), "{detail}"),
            Err(e @ ClientError::MissingManifest { .. }) => {
                assert!(e.to_string().contains(says), "{e}")
            }
            other => panic!("expected a refusal saying {says:?}: {other:?}"),
        }
    }

    /// Issue 36, item 8: without a pinned key the advertised block is verified against (unless
    /// told not to); two different advertised keys are refused.
    #[test]
    fn unpinned_clients_verify_the_advertised_key_and_refuse_two_keys() {
        let signer = PageSigner::new(SecretKey::from_seed([5; 32]));
        let other = PageSigner::new(SecretKey::from_seed([6; 32]));
        let (mine, theirs) = (Some(signer.block.info()), Some(other.block.info()));
        let unpinned = Verifier::new(None, 0);
        assert_eq!(unpinned.agree(&mine, &mine).unwrap(), Some(signer.block));
        assert_eq!(unpinned.agree(&None, &None).unwrap(), None);
        assert!(matches!(
            unpinned.agree(&mine, &theirs),
            Err(ClientError::Mismatch(_))
        ));
        let mut opted_out = Verifier::new(None, 0);
        opted_out.verify_advertised = false;
        assert_eq!(opted_out.agree(&mine, &mine).unwrap(), None);
    }

    #[test]
    fn manifests_are_read_per_answered_epoch_never_per_page() {
        let (signer, v) = setup();
        let id = signer.block.db_id;
        assert!(!v.wants_manifests(&id, 0), "epoch 0 has no manifest");
        assert!(v.wants_manifests(&id, 1));
        assert!(!v.wants_manifests(&id, 1), "just read for epoch 1");
        v.add_manifests(
            &signer.block,
            vec![signer.manifest(1, Digest([1; 32]), vec![3])],
        );
        assert!(!v.wants_manifests(&id, 1), "held");
        assert!(v.wants_manifests(&id, 2));
    }

    #[test]
    fn stale_unprovable_and_frozen_answers_are_refused_and_forged_manifests_ignored() {
        let (signer, v) = setup();
        let block = signer.block;
        let forged = Manifest::sign(
            &block,
            &SecretKey::from_seed([6; 32]),
            2,
            Digest([2; 32]),
            vec![],
        );
        v.add_manifests(
            &block,
            vec![signer.manifest(1, Digest([1; 32]), vec![3]), forged],
        );
        let (old3, new3, p4) = (
            page(&signer, 3, 0, 1),
            page(&signer, 3, 1, 2),
            page(&signer, 4, 0, 3),
        );
        // Epoch 1 replaced page 3: its epoch-0 version is stale, its epoch-1 one and page 4 fresh.
        refused(
            v.check(&block, "A and B", &[3], 1, None, &[old3]),
            "a stale page",
        );
        v.check(
            &block,
            "A and B",
            &[3, 4],
            1,
            Some(Digest([1; 32])),
            &[new3, p4.clone()],
        )
        .unwrap();
        // Answers stamped with another digest than the manifest of their epoch.
        refused(
            v.check(
                &block,
                "A and B",
                &[4],
                1,
                Some(Digest([9; 32])),
                std::slice::from_ref(&p4),
            ),
            "the publisher's manifest of that epoch says",
        );
        // Epoch 2's only manifest was forged (dropped): page 4 cannot be shown current there.
        refused(
            v.check(&block, "A and B", &[4], 2, None, std::slice::from_ref(&p4)),
            "the parties do not serve the publisher's manifest of epoch 2",
        );
        // The floor: this client has seen epoch 1 signed, so answers at epoch 0 are refused.
        refused(
            v.check(&block, "A and B", &[4], 0, None, &[p4]),
            "older than epoch 1",
        );
    }
}
