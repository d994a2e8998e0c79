//! Placing a new table's records on all cores, with the same result whatever the number of
//! cores: what `eth import` and `eth gen --tables` write (so the two write the same bytes, and
//! two parties importing one dump with one `--seed` get the same tables).
//!
//! The sequential builder ([`Table`]: each record to the least-filled candidate, evicting when
//! both are full) cannot run on many cores, since every insert reads the fill of pages anywhere
//! in the table. Here placement goes in rounds instead, each of them parallel over ranges of
//! pages:
//! 1. every record goes to its first candidate page while that page has room, in input order
//!    (records are routed to the thread that owns their page, kept in input order per page), so
//!    a page holds the first records of the input that chose it;
//! 2. what did not fit (a few percent: a page's first-candidate count is a Poisson variable
//!    around the load) tries its second candidate, then its third (d = 3), the same way;
//! 3. the few left go in one by one, in input order, with the cuckoo walk of [`Table`].
//!
//! Each step depends only on the records and their order, never on which thread ran first, so
//! the file is a function of the input (and the seeds). Memory besides the pages: two bytes a
//! page, the batch in hand, and the records that missed their first page (their payloads).

use std::collections::HashSet;

use anyhow::bail;
use pirq_shared::kv::{page, KvParams, PlaceError, Table, Tag};
use rayon::prelude::*;

/// What a second record of one key means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repeats {
    /// The input's error, naming what the key is ("address", "storage slot").
    Refuse(&'static str),
    /// The same record again (a code under its hash): the first stays.
    Skip,
}

/// Records for one table in input order, each hashed (tag, first candidate page) by the thread
/// that made it.
#[derive(Default)]
pub struct Recs {
    tags: Vec<Tag>,
    pages: Vec<u64>,
    ends: Vec<usize>,
    bytes: Vec<u8>,
}

impl Recs {
    /// Adds `key` = `value` (a value the table's kind takes: [`KvParams::check_value`]).
    pub fn push(&mut self, params: &KvParams, key: &[u8], value: &[u8]) {
        let tag = params.tag(key);
        self.tags.push(tag);
        self.pages.push(params.candidates(&tag)[0]);
        self.bytes.extend_from_slice(&params.slot_payload(value));
        self.ends.push(self.bytes.len());
    }

    pub fn len(&self) -> usize {
        self.tags.len()
    }

    fn payload(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }
}

/// A record that missed a round: its tag and slot bytes.
struct Left {
    tag: Tag,
    payload: Vec<u8>,
}

/// One table being filled.
pub struct Builder<'a> {
    params: KvParams,
    pages: &'a mut [u8],
    fill: Vec<u16>,
    repeats: Repeats,
    /// Pages a thread owns in one step.
    shard: usize,
    /// Records that missed their first page, in input order.
    left: Vec<Left>,
    placed: u64,
}

/// What a finished table holds.
pub struct Built {
    pub records: u64,
    pub load: f64,
    /// Records placed in a later candidate page, and by the cuckoo walk.
    pub later: u64,
    pub walked: u64,
}

impl<'a> Builder<'a> {
    /// A builder over `pages`, all zero (a new file's).
    pub fn new(params: KvParams, pages: &'a mut [u8], repeats: Repeats) -> Builder<'a> {
        let n = params.num_pages as usize;
        assert_eq!(pages.len(), n * params.page_size as usize);
        // Enough ranges that every core has several, few enough that each is worth a task.
        let shard = n.div_ceil(rayon::current_num_threads() * 8).max(64);
        Builder {
            params,
            pages,
            fill: vec![0; n],
            repeats,
            shard,
            left: Vec::new(),
            placed: 0,
        }
    }

    pub fn params(&self) -> &KvParams {
        &self.params
    }

    /// Places a batch: the records of `batch`, in order, into their first candidate pages;
    /// those whose page is full wait for [`Builder::finish`].
    pub fn add(&mut self, batch: &[&Recs]) {
        let mut order: Vec<(u64, u32, u32)> =
            Vec::with_capacity(batch.iter().map(|r| r.len()).sum());
        for (b, recs) in batch.iter().enumerate() {
            order.extend(
                recs.pages
                    .iter()
                    .enumerate()
                    .map(|(i, &p)| (p, b as u32, i as u32)),
            );
        }
        // Stable: a page's records stay in input order.
        order.par_sort_by_key(|&(p, _, _)| p);
        let missed = self.round(&order, |&(_, b, i)| {
            let recs = batch[b as usize];
            (&recs.tags[i as usize], recs.payload(i as usize))
        });
        let mut missed: Vec<(u32, u32)> = missed
            .into_iter()
            .map(|k| (order[k].1, order[k].2))
            .collect();
        missed.sort_unstable();
        self.left.extend(missed.into_iter().map(|(b, i)| {
            let recs = batch[b as usize];
            Left {
                tag: recs.tags[i as usize],
                payload: recs.payload(i as usize).to_vec(),
            }
        }));
    }

    /// One parallel round: each of `order`'s records (sorted by page, input order within a
    /// page; `record` gives its tag and slot bytes) into its page while the page has room.
    /// Returns the positions in `order` of the records that did not fit.
    fn round<'r, T: Sync>(
        &mut self,
        order: &[(u64, T, T)],
        record: impl Fn(&(u64, T, T)) -> (&'r Tag, &'r [u8]) + Sync,
    ) -> Vec<usize> {
        let (ps, ss, spp) = (
            self.params.page_size as usize,
            self.params.slot_size(),
            self.params.slots_per_page(),
        );
        let shard = self.shard;
        let placed = std::sync::atomic::AtomicU64::new(0);
        let mut missed: Vec<usize> = self
            .pages
            .par_chunks_mut(shard * ps)
            .zip(self.fill.par_chunks_mut(shard))
            .enumerate()
            .flat_map_iter(|(s, (pages, fill))| {
                let first = (s * shard) as u64;
                let start = order.partition_point(|r| r.0 < first);
                let end = order.partition_point(|r| r.0 < first + shard as u64);
                let mut missed = Vec::new();
                let mut n = 0;
                for (k, r) in order[start..end].iter().enumerate() {
                    let local = (r.0 - first) as usize;
                    let f = fill[local] as usize;
                    if f < spp {
                        let (tag, payload) = record(r);
                        page::write(
                            &mut pages[local * ps..(local + 1) * ps],
                            ss,
                            f,
                            tag,
                            payload,
                        );
                        fill[local] += 1;
                        n += 1;
                    } else {
                        missed.push(start + k);
                    }
                }
                placed.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                missed
            })
            .collect();
        missed.sort_unstable();
        self.placed += placed.into_inner();
        missed
    }

    /// Places what missed its first page (later candidates, then the cuckoo walk seeded with
    /// `rng_seed`), after checking for repeated keys.
    pub fn finish(mut self, rng_seed: u64) -> anyhow::Result<Built> {
        self.repeats_in_pages()?;
        let left = std::mem::take(&mut self.left);
        let mut left = self.repeats_left(left)?;
        let missed_first = left.len() as u64;
        for c in 1..self.params.choices() {
            if left.is_empty() {
                break;
            }
            let params = self.params;
            let mut order: Vec<(u64, usize, usize)> = left
                .par_iter()
                .enumerate()
                .map(|(k, l)| (params.candidates(&l.tag)[c], k, k))
                .collect();
            order.par_sort_by_key(|&(p, _, _)| p);
            let missed = self.round(&order, |&(_, k, _)| (&left[k].tag, &left[k].payload[..]));
            let mut keep: Vec<usize> = missed.into_iter().map(|m| order[m].1).collect();
            keep.sort_unstable();
            let mut taken: Vec<Option<Left>> = left.into_iter().map(Some).collect();
            left = keep
                .into_iter()
                .map(|k| taken[k].take().expect("once"))
                .collect();
        }
        let records = self.placed + left.len() as u64;
        let mut table = Table::existing(self.params, self.pages, rng_seed, self.placed);
        for l in &left {
            let value = self
                .params
                .payload_value(&l.payload)
                .expect("payloads are made by slot_payload");
            match table.insert(&l.tag, value) {
                Ok(()) => {}
                Err(e @ PlaceError::Full { .. }) => bail!(
                    "placing a record: {e} (the table was sized for the input: a bug, please \
                     report it)"
                ),
                Err(e) => bail!("placing a record: {e}"),
            }
        }
        Ok(Built {
            records,
            load: records as f64 / self.params.capacity() as f64,
            later: missed_first - left.len() as u64,
            walked: left.len() as u64,
        })
    }

    /// A key twice in one page: refused, or (Skip) the later copy cleared.
    fn repeats_in_pages(&mut self) -> anyhow::Result<()> {
        let (ps, ss) = (self.params.page_size as usize, self.params.slot_size());
        if self.params.slots_per_page() < 2 {
            return Ok(());
        }
        let (repeats, params) = (self.repeats, self.params);
        let cleared: u64 = self
            .pages
            .par_chunks_mut(ps)
            .zip(self.fill.par_iter_mut())
            .map(|(page, fill)| -> Result<u64, Repeated> {
                let n = *fill as usize;
                let mut tags: Vec<(Tag, usize)> = (0..n)
                    .map(|s| (page::tag_at(page, ss, s).try_into().expect("16 bytes"), s))
                    .collect();
                tags.sort_unstable();
                let mut gone = Vec::new();
                for w in tags.windows(2) {
                    if w[0].0 == w[1].0 {
                        match repeats {
                            Repeats::Refuse(what) => {
                                return Err(Repeated {
                                    what,
                                    params,
                                    tag: w[0].0,
                                })
                            }
                            // Sorted by (tag, slot): the later slot is the second.
                            Repeats::Skip => gone.push(w[1].1),
                        }
                    }
                }
                if gone.is_empty() {
                    return Ok(0);
                }
                // Slots stay packed from the first (a round writes at the fill count).
                let mut to = 0;
                for s in 0..n {
                    if !gone.contains(&s) {
                        if to != s {
                            page.copy_within(s * ss..(s + 1) * ss, to * ss);
                        }
                        to += 1;
                    }
                }
                page[to * ss..n * ss].fill(0);
                let cleared = gone.len() as u64;
                *fill -= cleared as u16;
                Ok(cleared)
            })
            .try_reduce(|| 0, |a, b| Ok(a + b))?;
        self.placed -= cleared;
        Ok(())
    }

    /// Records that missed their first page and repeat a placed key or each other: refused,
    /// or (Skip) dropped. The rest, in input order.
    fn repeats_left(&self, left: Vec<Left>) -> anyhow::Result<Vec<Left>> {
        let (ps, ss) = (self.params.page_size as usize, self.params.slot_size());
        let params = self.params;
        let pages = &*self.pages;
        let in_page: Vec<bool> = left
            .par_iter()
            .map(|l| {
                let p = params.candidates(&l.tag)[0] as usize;
                let area = params.slot_area(&pages[p * ps..(p + 1) * ps]);
                page::find(area, ss, &l.tag).is_some()
            })
            .collect();
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(left.len());
        for (l, placed) in left.into_iter().zip(in_page) {
            if placed || !seen.insert(l.tag) {
                match self.repeats {
                    Repeats::Refuse(what) => {
                        return Err(Repeated {
                            what,
                            params: self.params,
                            tag: l.tag,
                        }
                        .into())
                    }
                    Repeats::Skip => continue,
                }
            }
            out.push(l);
        }
        Ok(out)
    }
}

/// A key twice in the input: the table's parameters and the key's tag, so the caller can find
/// the line that repeats it ([`Builder`] keeps no lines).
#[derive(Debug, thiserror::Error)]
#[error("the input has a {what} twice")]
pub struct Repeated {
    pub what: &'static str,
    pub params: KvParams,
    pub tag: Tag,
}

#[cfg(test)]
mod tests {
    use super::*;
    use pirq_shared::kv::{KvLayout, ValueKind};

    fn params(num_pages: u64, choices: u8, value_size: u32, kind: ValueKind) -> KvParams {
        KvParams::new(
            KvLayout {
                choices,
                kind,
                value_size,
                key_size: 0,
                seed: [5; 32],
                encodings: Default::default(),
            },
            256,
            num_pages,
        )
        .unwrap()
    }

    fn value(k: u32) -> [u8; 16] {
        let mut v = [0x5a; 16];
        v[..4].copy_from_slice(&k.to_le_bytes());
        v
    }

    /// Builds `n` records in batches of `batch` keys, on `threads` threads.
    fn build(p: KvParams, n: u32, batch: usize, threads: usize) -> Vec<u8> {
        let mut pages = vec![0u8; p.num_pages as usize * 256];
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut b = Builder::new(p, &mut pages, Repeats::Refuse("key"));
            let keys: Vec<u32> = (0..n).collect();
            for chunk in keys.chunks(batch) {
                let parts: Vec<Recs> = chunk
                    .chunks(7)
                    .map(|c| {
                        let mut r = Recs::default();
                        for k in c {
                            r.push(&p, &k.to_le_bytes(), &value(*k));
                        }
                        r
                    })
                    .collect();
                b.add(&parts.iter().collect::<Vec<_>>());
            }
            let built = b.finish(3).unwrap();
            assert_eq!(built.records, n as u64);
            assert!(
                built.later > 0 && built.walked > 0,
                "{} {}",
                built.later,
                built.walked
            );
        });
        let mut t = Table::existing(p, &mut pages, 0, n as u64);
        for k in 0..n {
            let tag = p.tag(&k.to_le_bytes());
            assert_eq!(t.get(&tag).unwrap(), Some(&value(k)[..]), "key {k}");
        }
        // An update can still add a record.
        assert!(t.upsert(&p.tag(b"new"), &[1; 16]).is_ok());
        drop(t);
        pages
    }

    #[test]
    fn every_record_is_found_and_the_bytes_do_not_depend_on_threads_or_batches() {
        // 8 slots a page: at 0.85 a first-candidate page overflows often, so all three steps
        // (first pages, second pages, the cuckoo walk) place records.
        let p = params(500, 2, 16, ValueKind::Fixed);
        let n = (p.capacity() as f64 * 0.85) as u32;
        let one = build(p, n, 1 << 20, 1);
        assert_eq!(one, build(p, n, 100, 4));
        assert_eq!(one, build(p, n, 33, 3));
    }

    #[test]
    fn repeated_keys_are_refused_or_skipped() {
        let p = params(64, 3, 16, ValueKind::Fixed);
        for skip in [false, true] {
            let mut pages = vec![0u8; 64 * 256];
            let repeats = if skip {
                Repeats::Skip
            } else {
                Repeats::Refuse("address")
            };
            let mut b = Builder::new(p, &mut pages, repeats);
            let mut r = Recs::default();
            // Enough of one key's page-mates that a copy misses the page, plus copies in it.
            for k in 0..300u32 {
                r.push(&p, &k.to_le_bytes(), &value(k));
            }
            r.push(&p, &7u32.to_le_bytes(), &value(7));
            r.push(&p, &299u32.to_le_bytes(), &value(299));
            b.add(&[&r]);
            match b.finish(1) {
                Ok(built) => {
                    assert!(skip);
                    assert_eq!(built.records, 300);
                }
                Err(e) => {
                    assert!(!skip);
                    assert!(e.to_string().contains("address twice"), "{e}");
                    assert!(e.downcast_ref::<Repeated>().is_some());
                }
            }
        }
    }
}
