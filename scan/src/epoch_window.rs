//! The epoch window: exact answers at any recent epoch from one base copy plus page diffs.
//!
//! A scanner's database holds the pages at `base_epoch`. For every later epoch `e` in the window
//! this keeps, for each page changed since the base, `diff_e(p) = page_p(e) XOR page_p(base)`.
//! Because answers are XORs of selected pages (SPEC §3),
//!
//! ```text
//! answer(e) = scan(base) XOR  Σ_{p changed since base} bit(p) · diff_e(p)
//! ```
//!
//! so one scan of the base answers keys pinned to different epochs, and [`DeltaWindow::merge`]
//! fixes each answer up with only the changed pages. Diff sets are cumulative (a page changed at
//! `base + 1` stays in every later set while it differs from the base), and a diff that did not
//! change between two epochs is shared, not copied. A set holds only the pages that differ from
//! the base at its epoch, so the window's memory is bounded by the pages its epochs changed.
//!
//! When the window is full, [`DeltaWindow::fold_oldest`] moves the base forward one epoch: the
//! caller writes the returned pages into its base copy (only the pages that changed, no second
//! copy of the database), and the later diffs are re-based onto the new base.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use pirq_shared::bits::{bit, xor_into};
pub use pirq_shared::update::PageWrite;

/// Why an update or an epoch request was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EpochError {
    #[error("epoch {got} is not the next epoch (newest is {newest})")]
    NotNext { got: u64, newest: u64 },
    #[error("epoch {epoch} is outside the window {oldest}..={newest}")]
    OutsideWindow {
        epoch: u64,
        oldest: u64,
        newest: u64,
    },
    /// A page outside the database, or not whole ([`pirq_shared::update::validate_writes`]).
    #[error(transparent)]
    Pages(#[from] pirq_shared::update::UpdateError),
}

type Diffs = BTreeMap<u64, Arc<[u8]>>;

/// Page diffs to XOR into the base copy when the base moves forward: (page index, diff).
pub type Folded = Vec<(u64, Arc<[u8]>)>;

/// Base epoch plus the cumulative page diffs of up to `capacity - 1` later epochs.
#[derive(Clone, Debug)]
pub struct DeltaWindow {
    page_size: usize,
    num_pages: u64,
    capacity: usize,
    base_epoch: u64,
    /// `diffs[i]` belongs to epoch `base_epoch + 1 + i`.
    diffs: VecDeque<Diffs>,
}

impl DeltaWindow {
    /// An empty window over a base at `base_epoch`; `capacity` (≥ 1) epochs are answerable.
    pub fn new(page_size: usize, num_pages: u64, base_epoch: u64, capacity: usize) -> DeltaWindow {
        DeltaWindow {
            page_size,
            num_pages,
            capacity: capacity.max(1),
            base_epoch,
            diffs: VecDeque::new(),
        }
    }

    pub fn oldest(&self) -> u64 {
        self.base_epoch
    }

    pub fn newest(&self) -> u64 {
        self.base_epoch + self.diffs.len() as u64
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The epoch a request means: `None` is the newest; others must lie in the window.
    pub fn resolve(&self, epoch: Option<u64>) -> Result<u64, EpochError> {
        let e = epoch.unwrap_or(self.newest());
        if e < self.oldest() || e > self.newest() {
            return Err(EpochError::OutsideWindow {
                epoch: e,
                oldest: self.oldest(),
                newest: self.newest(),
            });
        }
        Ok(e)
    }

    /// Pages changed between the base and `epoch`, with their diffs.
    pub fn diffs_at(&self, epoch: u64) -> Option<&BTreeMap<u64, Arc<[u8]>>> {
        let i = epoch.checked_sub(self.base_epoch + 1)? as usize;
        self.diffs.get(i)
    }

    /// Checks an update before anything is changed: all of it applies, or none.
    pub fn check(&self, epoch: u64, writes: &[PageWrite]) -> Result<(), EpochError> {
        if epoch != self.newest() + 1 {
            return Err(EpochError::NotNext {
                got: epoch,
                newest: self.newest(),
            });
        }
        pirq_shared::update::validate_writes(writes, self.num_pages, self.page_size)?;
        Ok(())
    }

    /// Adds epoch `newest + 1`; `base_page(p)` reads page `p` of the base copy. A page written
    /// twice in one update takes the last write.
    ///
    /// When the window was already full, the base moves forward one epoch: the returned diffs
    /// (page index, diff) must be XORed into the base copy before the next scan, under the same
    /// lock. Otherwise the returned list is empty.
    pub fn push(
        &mut self,
        epoch: u64,
        writes: &[PageWrite],
        base_page: impl Fn(u64) -> Vec<u8>,
    ) -> Result<Folded, EpochError> {
        self.check(epoch, writes)?;
        let mut next = self.diffs.back().cloned().unwrap_or_default();
        for w in writes {
            let mut diff = base_page(w.index);
            xor_into(&mut diff, &w.page);
            next.insert(w.index, diff.into());
        }
        self.diffs.push_back(next);
        if self.diffs.len() < self.capacity {
            return Ok(Vec::new());
        }
        Ok(self.fold_oldest().unwrap_or_default())
    }

    /// Moves the base forward one epoch (also done by [`push`](Self::push) when full). Returns the diffs to XOR into the base copy (page index,
    /// diff); after the caller applied them, the base is at the new [`oldest`](Self::oldest).
    ///
    /// A later epoch's diff of a page is rebased by XORing the folded diff into it; a page whose
    /// rebased diff is zero (its contents at that epoch are the new base's) leaves that epoch's
    /// set. Without that, every page ever changed stayed in every later set as a zero diff: the
    /// sets, the memory they hold and the work of every fold and merge grew with each epoch
    /// applied (found by the soak, `docs/bench/soak.md`).
    pub fn fold_oldest(&mut self) -> Option<Folded> {
        let first = self.diffs.pop_front()?;
        for later in &mut self.diffs {
            for (p, d) in &first {
                // Absent from a later set: the page had the old base's contents there.
                let mut rebased = match later.get(p) {
                    Some(entry) => entry.to_vec(),
                    None => vec![0u8; d.len()],
                };
                xor_into(&mut rebased, d);
                if rebased.iter().all(|&b| b == 0) {
                    later.remove(p);
                } else {
                    later.insert(*p, rebased.into());
                }
            }
        }
        self.base_epoch += 1;
        Some(first.into_iter().collect())
    }

    /// Fixes up scan-of-base answers: `answers[q]` (of key `q` with full-domain bitmap
    /// `bitmaps[q]`) becomes the answer at `epochs[q]`.
    pub fn merge(
        &self,
        bitmaps: &[Vec<u64>],
        epochs: &[u64],
        answers: &mut [u8],
    ) -> Result<(), EpochError> {
        let ps = self.page_size;
        for (q, (bits, &epoch)) in bitmaps.iter().zip(epochs).enumerate() {
            self.resolve(Some(epoch))?;
            let Some(diffs) = self.diffs_at(epoch) else {
                continue;
            };
            let acc = &mut answers[q * ps..(q + 1) * ps];
            for (&p, diff) in diffs {
                if bit(bits, p as usize) {
                    xor_into(acc, diff);
                }
            }
        }
        Ok(())
    }
    /// One key's correction for the pages `pages` only: `answer` (the XOR of the key's selected
    /// pages of that range, read from this base) becomes the same XOR at `epoch`. The rotating
    /// scan ([`crate::rotation`]) merges each segment with the window it was scanned under.
    pub fn merge_pages(
        &self,
        bits: &[u64],
        epoch: u64,
        pages: std::ops::Range<u64>,
        answer: &mut [u8],
    ) -> Result<(), EpochError> {
        self.resolve(Some(epoch))?;
        let Some(diffs) = self.diffs_at(epoch) else {
            return Ok(());
        };
        for (&p, diff) in diffs.range(pages) {
            if bit(bits, p as usize) {
                xor_into(answer, diff);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Many epochs through a small window, against a model that keeps every page at every epoch:
    /// each epoch in the window reads back exactly, and a set never holds more pages than the
    /// window's epochs wrote (the bound that the soak found broken).
    #[test]
    fn folds_keep_answers_exact_and_the_sets_bounded() {
        const PS: usize = 16;
        const PAGES: u64 = 64;
        const CAPACITY: usize = 4;
        const WRITES: usize = 3;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut base: Vec<Vec<u8>> = (0..PAGES)
            .map(|_| (0..PS).map(|_| rng.random()).collect())
            .collect();
        // model[e][p]: page p at epoch e.
        let mut model = vec![base.clone()];
        let mut window = DeltaWindow::new(PS, PAGES, 0, CAPACITY);
        for epoch in 1..=300u64 {
            let mut now = model.last().unwrap().clone();
            let writes: Vec<PageWrite> = (0..WRITES)
                .map(|_| {
                    let index = rng.random_range(0..PAGES);
                    // Sometimes a page goes back to an earlier epoch's contents (or stays equal).
                    let page: Vec<u8> = match rng.random_range(0..4) {
                        0 => model[rng.random_range(0..model.len())][index as usize].clone(),
                        _ => (0..PS).map(|_| rng.random()).collect(),
                    };
                    now[index as usize] = page.clone();
                    PageWrite { index, page }
                })
                .collect();
            model.push(now);
            let folded = window
                .push(epoch, &writes, |p| base[p as usize].clone())
                .unwrap();
            for (p, diff) in folded {
                xor_into(&mut base[p as usize], &diff);
            }
            assert_eq!(
                base,
                model[window.oldest() as usize],
                "base after epoch {epoch}"
            );
            for e in window.oldest()..=window.newest() {
                let diffs = window.diffs_at(e);
                for p in 0..PAGES {
                    let mut page = base[p as usize].clone();
                    if let Some(d) = diffs.and_then(|m| m.get(&p)) {
                        xor_into(&mut page, d);
                    }
                    assert_eq!(page, model[e as usize][p as usize], "page {p} at epoch {e}");
                }
                if let Some(d) = diffs {
                    assert!(
                        d.len() <= (CAPACITY - 1) * WRITES,
                        "epoch {e}: {} pages",
                        d.len()
                    );
                }
            }
        }
    }
}
