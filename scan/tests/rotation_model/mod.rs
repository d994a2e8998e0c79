//! A rotating scan driven at random against a model that holds every page at every epoch:
//! keys join at random steps pinned to random epochs of the window, updates land between steps
//! (folding the base forward mid-turn, writing the very pages the keys in flight select), and
//! every answer is checked when its turn ends. Shared by the CPU and GPU suites.

use std::collections::HashMap;

use pirq_scan::epoch_window::{EpochError, PageWrite};
use pirq_scan::rotation::{Rotation, Ticket};
use pirq_scan::{ScanError, Scanner};
use pirq_shared::bits::{bit, xor_into};
use pirq_shared::dpf::{eval_full, generate, DpfKey};
use pirq_shared::update::EpochUpdate;
use pirq_testkit::TestDb;
use rand::{rngs::StdRng, Rng, RngCore};

/// Every page at every epoch from `first_epoch` on.
pub struct Model {
    pub pages: Vec<Vec<Vec<u8>>>,
    pub first_epoch: u64,
}

impl Model {
    /// The pages of `file`, which is at `epoch`: the model before any update.
    pub fn of(file: &TestDb, epoch: u64) -> Model {
        let pages = (0..file.db.num_pages())
            .map(|p| file.page(p).to_vec())
            .collect();
        Model {
            pages: vec![pages],
            first_epoch: epoch,
        }
    }

    pub fn page(&self, epoch: u64, p: u64) -> &[u8] {
        &self.pages[(epoch - self.first_epoch) as usize][p as usize]
    }
}

/// What a run saw: it must have checked answers across base folds for the test to mean much.
#[derive(Debug, Default)]
pub struct Seen {
    /// Pairs whose combined answers equalled the model's page.
    pub exact: usize,
    /// Of those, pairs during whose turn the base moved (an update folded it).
    pub exact_across_folds: usize,
    /// Of those, pairs pinned to an epoch older than the newest when they finished.
    pub exact_at_old_epochs: usize,
    /// Pairs refused because their epoch left the window mid-turn.
    pub refused: usize,
}

struct Pending {
    pair: usize,
    party: usize,
    joined_step: usize,
    keys: Vec<DpfKey>,
}

/// One party's answer the slow, obvious way (`pirq_shared`'s full-domain evaluation): the XOR
/// of the pages at `epoch` that the key selects.
fn reference_answer(model: &Model, key: &DpfKey, epoch: u64) -> Vec<u8> {
    let bits = eval_full(key);
    let pages = &model.pages[(epoch - model.first_epoch) as usize];
    let mut acc = vec![0u8; pages[0].len()];
    for (p, page) in pages.iter().enumerate() {
        if bit(&bits, p) {
            xor_into(&mut acc, page);
        }
    }
    acc
}

struct Pair {
    alphas: Vec<u64>,
    epoch: u64,
    oldest_at_join: u64,
    halves: [Option<Vec<u8>>; 2],
}

/// Runs `steps` steps (then drains), joining with probability `join_p` per step and applying
/// an update with probability `update_p`. `scanner` is the one `rotation` rotates over.
pub fn drive(
    rotation: &mut dyn Rotation,
    scanner: &dyn Scanner,
    model: &mut Model,
    rng: &mut StdRng,
    steps: usize,
    join_p: f64,
    update_p: f64,
) -> Seen {
    let g = scanner.geometry();
    let segments = rotation.segments();
    let mut seen = Seen::default();
    let mut pending: HashMap<Ticket, Pending> = HashMap::new();
    let mut pairs: Vec<Pair> = Vec::new();
    let mut step_no = 0usize;
    while step_no < steps || rotation.in_flight() > 0 {
        let window = scanner.epoch_window();
        let k = rng.random_range(1..4usize);
        if step_no < steps && rng.random_bool(join_p) && rotation.fits(2 * k) {
            let epoch = rng.random_range(window.oldest..=window.newest);
            let alphas: Vec<u64> = (0..k).map(|_| rng.next_u64() % g.num_pages).collect();
            let keys: Vec<_> = alphas
                .iter()
                .map(|&a| generate(g.domain_bits, a, rng).unwrap())
                .collect();
            let pair = pairs.len();
            pairs.push(Pair {
                alphas,
                epoch,
                oldest_at_join: window.oldest,
                halves: [None, None],
            });
            for party in 0..2 {
                let half: Vec<_> = keys
                    .iter()
                    .map(|(a, b)| if party == 0 { a.clone() } else { b.clone() })
                    .collect();
                let ticket = rotation.join(&half, epoch).unwrap();
                pending.insert(
                    ticket,
                    Pending {
                        pair,
                        party,
                        joined_step: step_no,
                        keys: half,
                    },
                );
            }
        }
        if step_no < steps && rng.random_bool(update_p) {
            // Random pages, and the pages some pair in flight selects.
            let indices: Vec<u64> = (0..rng.random_range(0..4))
                .map(|_| rng.next_u64() % g.num_pages)
                .chain(
                    pending
                        .values()
                        .take(2)
                        .flat_map(|p| pairs[p.pair].alphas.clone()),
                )
                .collect();
            let mut writes: Vec<PageWrite> = indices
                .into_iter()
                .map(|index| {
                    let mut page = vec![0u8; g.page_size];
                    rng.fill_bytes(&mut page);
                    PageWrite { index, page }
                })
                .collect();
            writes.sort_by_key(|w| w.index);
            let epoch = window.newest + 1;
            scanner
                .apply_epoch(&EpochUpdate {
                    epoch,
                    pages: writes.clone(),
                })
                .unwrap();
            let mut next = model.pages.last().unwrap().clone();
            for w in writes {
                next[w.index as usize] = w.page;
            }
            model.pages.push(next);
        }
        let step = rotation.step().unwrap();
        for f in step.finished {
            let p = pending.remove(&f.ticket).expect("a ticket of ours");
            let pair = &mut pairs[p.pair];
            match f.answers {
                Ok(answers) => {
                    assert_eq!(
                        step_no + 1 - p.joined_step,
                        segments + rotation.steps_ahead(),
                        "a group leaves after exactly one turn (its answers back the steps the \
                         backend queues ahead later)"
                    );
                    assert_eq!(answers.len(), pair.alphas.len());
                    // Each party's answer alone (the XOR of both hides an error in any page
                    // but the one looked up).
                    for (i, key) in p.keys.iter().enumerate() {
                        assert_eq!(
                            answers.answer(i),
                            &reference_answer(model, key, pair.epoch)[..],
                            "party {} at epoch {} (step {step_no})",
                            p.party,
                            pair.epoch
                        );
                    }
                    pair.halves[p.party] = Some(answers.into_bytes());
                }
                Err(ScanError::Epoch(EpochError::OutsideWindow { epoch, oldest, .. })) => {
                    assert_eq!(epoch, pair.epoch);
                    assert!(epoch < oldest, "refused inside the window");
                    if p.party == 0 {
                        seen.refused += 1;
                    }
                }
                Err(e) => panic!("unexpected error: {e}"),
            }
            if let [Some(a), Some(b)] = &pair.halves {
                let mut combined = a.clone();
                xor_into(&mut combined, b);
                for (i, &alpha) in pair.alphas.iter().enumerate() {
                    assert_eq!(
                        &combined[i * g.page_size..(i + 1) * g.page_size],
                        model.page(pair.epoch, alpha),
                        "page {alpha} at epoch {} (step {step_no})",
                        pair.epoch
                    );
                }
                seen.exact += 1;
                let now = scanner.epoch_window();
                if now.oldest != pair.oldest_at_join {
                    seen.exact_across_folds += 1;
                }
                if pair.epoch < now.newest {
                    seen.exact_at_old_epochs += 1;
                }
                pair.halves = [None, None];
            }
        }
        step_no += 1;
        assert!(step_no < steps + 10 * segments + 10, "the rotation drains");
    }
    assert!(pending.is_empty(), "every group finished");
    seen
}
