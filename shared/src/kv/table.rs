//! Cuckoo placement over a whole writable table of pages: what `pirq kv build` and
//! `pirq kv update` run. Not part of the spec: any placement that leaves every record in one of
//! its candidate pages is a valid table (KV §4).
//!
//! Policy: a record goes to the least-filled of its candidates; when all are full, a random
//! walk evicts a random record of a random candidate (never straight back to the page it came
//! from) and re-places it, for at most `max_kicks` moves. A record that still has no place is
//! refused and every move of that walk is undone, so a failed insert leaves the table as it was.
//! Memory besides the pages: two bytes per page (its fill count), plus the pages touched when
//! the caller tracks them for an epoch update.

use std::borrow::Cow;
use std::collections::BTreeSet;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::hash::{Candidates, Tag, TAG_LEN};
use super::layout::KvParams;
use super::{page, KvError};

/// Default bound on evictions per insert.
pub const DEFAULT_MAX_KICKS: usize = 2000;

/// Why a record was not placed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PlaceError {
    /// The tag is already in the table (the same key, or, with probability ~2^-128 per pair,
    /// another key with the same tag: either way one table cannot hold both).
    #[error("duplicate key (its tag is already in the table)")]
    Duplicate,
    /// No place within the eviction bound.
    #[error(
        "cannot place the record: all {choices} candidate pages stayed full after {kicks} \
         evictions, at a load factor of {load:.4} ({records} records in {capacity} slots)"
    )]
    Full {
        choices: usize,
        kicks: usize,
        records: u64,
        capacity: u64,
        load: f64,
    },
}

/// What an upsert did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upserted {
    Inserted,
    Changed,
}

const UNKNOWN: u16 = u16::MAX;

/// A cuckoo table over `pages` (all pages back to back, as in a `.pirdb` file after the header).
pub struct Table<'a> {
    params: KvParams,
    pages: &'a mut [u8],
    /// Occupied slots per page, [`UNKNOWN`] until first counted.
    fill: Vec<u16>,
    rng: StdRng,
    max_kicks: usize,
    touched: Option<BTreeSet<u64>>,
    records: u64,
    kicks: u64,
}

impl<'a> Table<'a> {
    /// A table over pages that are all zero (a new build): every fill count is known to be 0.
    pub fn empty(params: KvParams, pages: &'a mut [u8], rng_seed: u64) -> Table<'a> {
        Self::with_fill(params, pages, rng_seed, 0, 0)
    }

    /// A table over pages that already hold records (an update): `records` is how many (for
    /// the load factor in errors). Fill counts are taken lazily, page by page, and the pages
    /// written are tracked ([`Table::touched`]).
    pub fn existing(
        params: KvParams,
        pages: &'a mut [u8],
        rng_seed: u64,
        records: u64,
    ) -> Table<'a> {
        let mut t = Self::with_fill(params, pages, rng_seed, UNKNOWN, records);
        t.touched = Some(BTreeSet::new());
        t
    }

    fn with_fill(
        params: KvParams,
        pages: &'a mut [u8],
        rng_seed: u64,
        fill: u16,
        records: u64,
    ) -> Table<'a> {
        assert_eq!(
            pages.len() as u64,
            params.num_pages * params.page_size as u64,
            "pages do not match the geometry"
        );
        Table {
            fill: vec![fill; params.num_pages as usize],
            params,
            pages,
            rng: StdRng::seed_from_u64(rng_seed),
            max_kicks: DEFAULT_MAX_KICKS,
            touched: None,
            records,
            kicks: 0,
        }
    }

    pub fn set_max_kicks(&mut self, max_kicks: usize) {
        self.max_kicks = max_kicks;
    }

    pub fn params(&self) -> &KvParams {
        &self.params
    }

    /// Records in the table.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Evictions made so far.
    pub fn kicks(&self) -> u64 {
        self.kicks
    }

    /// Records over slots.
    pub fn load(&self) -> f64 {
        self.records as f64 / self.params.capacity() as f64
    }

    /// Pages written since [`Table::existing`], in order.
    pub fn touched(&self) -> impl Iterator<Item = u64> + '_ {
        self.touched.iter().flatten().copied()
    }

    pub fn page(&self, p: u64) -> &[u8] {
        let ps = self.params.page_size as usize;
        &self.pages[p as usize * ps..(p as usize + 1) * ps]
    }

    /// The slots of page `p`: its usable bytes up to the last whole slot (KV §4).
    fn area(&self, p: u64) -> &[u8] {
        self.params.slot_area(self.page(p))
    }

    /// [`Table::area`], writable; records the page as touched.
    fn area_mut(&mut self, p: u64) -> &mut [u8] {
        if let Some(t) = self.touched.as_mut() {
            t.insert(p);
        }
        let ps = self.params.page_size as usize;
        let len = self.params.slots_per_page() * self.params.slot_size();
        &mut self.pages[p as usize * ps..p as usize * ps + len]
    }

    fn fill(&mut self, p: u64) -> usize {
        if self.fill[p as usize] == UNKNOWN {
            let n = page::occupied(self.area(p), self.params.slot_size());
            self.fill[p as usize] = n as u16;
        }
        self.fill[p as usize] as usize
    }

    /// `(page, slot)` holding `tag`, if any.
    pub fn locate(&self, tag: &Tag) -> Option<(u64, usize)> {
        self.locate_in(tag, &self.params.candidates(tag))
    }

    fn locate_in(&self, tag: &Tag, candidates: &Candidates) -> Option<(u64, usize)> {
        let ss = self.params.slot_size();
        candidates
            .iter()
            .find_map(|&p| page::find(self.area(p), ss, tag).map(|s| (p, s)))
    }

    /// The value stored under `tag` (for a set: the empty value); an error for a malformed
    /// variable-size slot.
    pub fn get(&self, tag: &Tag) -> Result<Option<&[u8]>, KvError> {
        let Some((p, s)) = self.locate(tag) else {
            return Ok(None);
        };
        let payload = page::value(self.area(p), self.params.slot_size(), s);
        self.params.payload_value(payload).map(Some)
    }

    /// Adds a record whose tag is not in the table yet. `value` must pass
    /// [`KvParams::check_value`] (the record readers check it).
    pub fn insert(&mut self, tag: &Tag, value: &[u8]) -> Result<(), PlaceError> {
        self.insert_hashed(tag, &self.params.candidates(tag), value)
    }

    /// [`Table::insert`] with the tag's candidates computed by the caller (a builder hashes
    /// batches of records in parallel and places them one by one).
    pub fn insert_hashed(
        &mut self,
        tag: &Tag,
        candidates: &Candidates,
        value: &[u8],
    ) -> Result<(), PlaceError> {
        debug_assert_eq!(*candidates, self.params.candidates(tag));
        if self.locate_in(tag, candidates).is_some() {
            return Err(PlaceError::Duplicate);
        }
        let payload = self.params.slot_payload(value);
        self.place(*tag, &payload, *candidates)
    }

    /// Sets `tag`'s value, adding the record if it is new (`value` as for [`Table::insert`]).
    pub fn upsert(&mut self, tag: &Tag, value: &[u8]) -> Result<Upserted, PlaceError> {
        let ss = self.params.slot_size();
        let payload = self.params.slot_payload(value);
        match self.locate(tag) {
            Some((p, s)) => {
                page::write(self.area_mut(p), ss, s, tag, &payload);
                Ok(Upserted::Changed)
            }
            None => {
                let candidates = self.params.candidates(tag);
                self.place(*tag, &payload, candidates)
                    .map(|()| Upserted::Inserted)
            }
        }
    }

    /// Removes `tag`'s record; false if it was not there.
    pub fn remove(&mut self, tag: &Tag) -> bool {
        let Some((p, s)) = self.locate(tag) else {
            return false;
        };
        let (fill, ss) = (self.fill(p), self.params.slot_size());
        page::clear(self.area_mut(p), ss, s);
        self.fill[p as usize] = (fill - 1) as u16;
        self.records = self.records.saturating_sub(1);
        true
    }

    /// The least-filled candidate with a free slot (first such on ties).
    fn roomiest(&mut self, candidates: &Candidates, except: Option<u64>) -> Option<u64> {
        let spp = self.params.slots_per_page();
        let mut best: Option<(u64, usize)> = None;
        for &p in candidates.iter() {
            if Some(p) == except {
                continue;
            }
            let f = self.fill(p);
            if f < spp && best.is_none_or(|(_, bf)| f < bf) {
                best = Some((p, f));
            }
        }
        best.map(|(p, _)| p)
    }

    fn put(&mut self, p: u64, tag: &Tag, value: &[u8]) {
        let ss = self.params.slot_size();
        let fill = self.fill(p);
        let page = self.area_mut(p);
        let slot = page::first_empty(page, ss).expect("fill count says there is room");
        page::write(page, ss, slot, tag, value);
        self.fill[p as usize] = (fill + 1) as u16;
    }

    /// Cuckoo insertion by random walk (module doc); undoes its moves on failure. `value` is
    /// the slot's bytes after the tag ([`KvParams::slot_payload`]).
    fn place(&mut self, tag: Tag, value: &[u8], candidates: Candidates) -> Result<(), PlaceError> {
        let ss = self.params.slot_size();
        let spp = self.params.slots_per_page();
        // The record in hand: borrowed until an eviction hands us one out of a page.
        let (mut tag, mut value, mut cands) = (tag, Cow::Borrowed(value), candidates);
        let mut from: Option<u64> = None;
        // (page, slot, the record that was there before the swap)
        let mut moves: Vec<(u64, usize, Tag, Vec<u8>)> = Vec::new();
        loop {
            if let Some(p) = self.roomiest(&cands, from) {
                self.put(p, &tag, &value);
                self.records += 1;
                self.kicks += moves.len() as u64;
                return Ok(());
            }
            if moves.len() >= self.max_kicks {
                break;
            }
            let pick: Vec<u64> = cands.iter().copied().filter(|&p| Some(p) != from).collect();
            let p = pick[self.rng.random_range(0..pick.len())];
            let s = self.rng.random_range(0..spp);
            let page = self.area_mut(p);
            let old_tag: Tag = page::tag_at(page, ss, s).try_into().expect("16 bytes");
            let old_value = page::value(page, ss, s).to_vec();
            page::write(page, ss, s, &tag, &value);
            moves.push((p, s, old_tag, old_value.clone()));
            debug_assert_ne!(old_tag, [0; TAG_LEN], "a full page has no empty slot");
            (tag, value) = (old_tag, Cow::Owned(old_value));
            cands = self.params.candidates(&tag);
            from = Some(p);
        }
        for (p, s, old_tag, old_value) in moves.into_iter().rev() {
            page::write(self.area_mut(p), ss, s, &old_tag, &old_value);
        }
        Err(PlaceError::Full {
            choices: self.params.choices(),
            kicks: self.max_kicks,
            records: self.records,
            capacity: self.params.capacity(),
            load: self.load(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::layout::{KvLayout, ValueKind};

    fn params(choices: u8, num_pages: u64) -> KvParams {
        KvParams::new(
            KvLayout {
                choices,
                kind: ValueKind::Fixed,
                value_size: 16,
                key_size: 0,
                seed: [9; 32],
                encodings: Default::default(),
            },
            256,
            num_pages,
        )
        .unwrap()
    }

    fn value_of(k: u32) -> Vec<u8> {
        let mut v = [0u8; 16];
        v[..4].copy_from_slice(&k.to_le_bytes());
        v[15] = 0x5a;
        v.to_vec()
    }

    /// Fills a 64-page table (512 slots) to `n` records and checks every one.
    fn fill_and_check(choices: u8, n: u32) -> Vec<u8> {
        let p = params(choices, 64);
        let mut pages = vec![0u8; 64 * 256];
        let mut t = Table::empty(p, &mut pages, 1);
        for k in 0..n {
            t.insert(&p.tag(&k.to_le_bytes()), &value_of(k)).unwrap();
        }
        assert_eq!(t.records(), n as u64);
        for k in 0..n {
            let tag = p.tag(&k.to_le_bytes());
            assert_eq!(t.get(&tag).unwrap(), Some(&value_of(k)[..]), "key {k}");
            // Every record is in one of its candidate pages.
            let (page, _) = t.locate(&tag).unwrap();
            assert!(p.candidates(&tag).contains(&page));
        }
        for k in n..n + 500 {
            assert_eq!(t.get(&p.tag(&k.to_le_bytes())).unwrap(), None);
        }
        pages
    }

    #[test]
    fn fills_past_ninety_percent_with_evictions() {
        // 8 slots per page: d = 2 holds > 90 %, d = 3 and 4 more.
        fill_and_check(2, 470);
        fill_and_check(3, 490);
        fill_and_check(4, 500);
    }

    #[test]
    fn placement_is_deterministic() {
        assert_eq!(fill_and_check(2, 400), fill_and_check(2, 400));
    }

    #[test]
    fn duplicates_are_refused() {
        let p = params(2, 8);
        let mut pages = vec![0u8; 8 * 256];
        let mut t = Table::empty(p, &mut pages, 1);
        let tag = p.tag(b"k");
        t.insert(&tag, &[1; 16]).unwrap();
        assert_eq!(t.insert(&tag, &[2; 16]), Err(PlaceError::Duplicate));
        assert_eq!(t.get(&tag).unwrap(), Some(&[1u8; 16][..]));
    }

    #[test]
    fn a_full_table_refuses_and_loses_nothing() {
        let p = params(2, 4); // 32 slots
        let mut pages = vec![0u8; 4 * 256];
        let mut t = Table::empty(p, &mut pages, 1);
        t.set_max_kicks(200);
        let mut placed = Vec::new();
        let mut refused = 0;
        for k in 0..40u32 {
            let tag = p.tag(&k.to_le_bytes());
            let before: Vec<u8> = t.pages.to_vec();
            match t.insert(&tag, &value_of(k)) {
                Ok(()) => placed.push(k),
                Err(PlaceError::Full { load, records, .. }) => {
                    refused += 1;
                    assert_eq!(records, placed.len() as u64);
                    assert!(load > 0.5);
                    assert_eq!(
                        t.pages.to_vec(),
                        before,
                        "a refused insert changed the table"
                    );
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(refused >= 8, "32 slots took more than 32 records");
        for k in placed {
            assert_eq!(
                t.get(&p.tag(&k.to_le_bytes())).unwrap(),
                Some(&value_of(k)[..])
            );
        }
        let err = PlaceError::Full {
            choices: 2,
            kicks: 200,
            records: 31,
            capacity: 32,
            load: 31.0 / 32.0,
        };
        assert!(err.to_string().contains("load factor of 0.9688"));
    }

    #[test]
    fn updates_track_pages_and_keep_every_record() {
        let p = params(2, 16); // 128 slots
        let mut pages = vec![0u8; 16 * 256];
        {
            let mut t = Table::empty(p, &mut pages, 1);
            for k in 0..100u32 {
                t.insert(&p.tag(&k.to_le_bytes()), &value_of(k)).unwrap();
            }
        }
        let before = pages.clone();
        let mut t = Table::existing(p, &mut pages, 2, 100);
        assert_eq!(t.touched().count(), 0);
        // Change one, delete one, insert enough to force evictions.
        assert_eq!(
            t.upsert(&p.tag(&5u32.to_le_bytes()), &[7; 16]),
            Ok(Upserted::Changed)
        );
        assert!(t.remove(&p.tag(&6u32.to_le_bytes())));
        assert!(!t.remove(&p.tag(&6u32.to_le_bytes())));
        for k in 100..120u32 {
            assert_eq!(
                t.upsert(&p.tag(&k.to_le_bytes()), &value_of(k)),
                Ok(Upserted::Inserted)
            );
        }
        assert!(
            t.kicks() > 0,
            "120 records in 128 slots without one eviction"
        );
        let touched: Vec<u64> = t.touched().collect();
        for k in 0..120u32 {
            let want = match k {
                5 => Some(vec![7; 16]),
                6 => None,
                _ => Some(value_of(k)),
            };
            assert_eq!(
                t.get(&p.tag(&k.to_le_bytes())).unwrap().map(|v| v.to_vec()),
                want
            );
        }
        // Exactly the touched pages differ from before (or were rewritten identically).
        for pg in 0..16u64 {
            let r = pg as usize * 256..(pg as usize + 1) * 256;
            if pages[r.clone()] != before[r] {
                assert!(touched.contains(&pg), "page {pg} changed untracked");
            }
        }
    }

    fn params_of(kind: ValueKind, value_size: u32, tail_len: u32) -> KvParams {
        let layout = KvLayout {
            choices: 2,
            kind,
            value_size,
            key_size: 0,
            seed: [4; 32],
            encodings: Default::default(),
        };
        KvParams::with_tail(layout, 256, tail_len, 16).unwrap()
    }

    /// Fills a table of `params` with 80 % of its capacity (`value(k)` for key k), then checks
    /// every record, a few absent keys, and that nothing was written outside the slot area.
    fn round_trip(params: KvParams, value: impl Fn(u32) -> Vec<u8>) {
        let n = (params.capacity() * 8 / 10) as u32;
        let mut pages = vec![0u8; 16 * 256];
        let mut t = Table::empty(params, &mut pages, 3);
        for k in 0..n {
            t.insert(&params.tag(&k.to_le_bytes()), &value(k)).unwrap();
        }
        for k in 0..n {
            let got = t.get(&params.tag(&k.to_le_bytes())).unwrap();
            assert_eq!(got, Some(&value(k)[..]), "key {k}");
        }
        for k in n..n + 100 {
            assert_eq!(t.get(&params.tag(&k.to_le_bytes())).unwrap(), None);
        }
        let area = params.slots_per_page() * params.slot_size();
        for page in pages.chunks(256) {
            assert!(page[area..].iter().all(|b| *b == 0), "bytes past the slots");
        }
    }

    #[test]
    fn sets_hold_tags_only() {
        let p = params_of(ValueKind::Set, 0, 0);
        assert_eq!((p.slot_size(), p.slots_per_page()), (16, 16));
        round_trip(p, |_| Vec::new());
    }

    #[test]
    fn variable_values_keep_their_length() {
        let p = params_of(ValueKind::Variable, 30, 0);
        assert_eq!((p.slot_size(), p.slots_per_page()), (48, 5));
        // Lengths 0..=30, the empty value included.
        round_trip(p, |k| vec![k as u8 | 1; k as usize % 31]);
        let mut pages = vec![0u8; 16 * 256];
        let mut t = Table::empty(p, &mut pages, 3);
        let tag = p.tag(b"k");
        t.insert(&tag, b"abc").unwrap();
        assert_eq!(t.upsert(&tag, b"abcdefgh"), Ok(Upserted::Changed));
        assert_eq!(t.get(&tag).unwrap(), Some(&b"abcdefgh"[..]));
        assert_eq!(t.upsert(&tag, b"x"), Ok(Upserted::Changed));
        assert_eq!(t.get(&tag).unwrap(), Some(&b"x"[..]));
        // The slot holds the length, the value, then zeros where the longer value was.
        let (pg, slot) = t.locate(&tag).unwrap();
        let at = slot * 48;
        let s = &t.page(pg)[at..at + 48];
        assert_eq!(&s[16..19], &[1, 0, b'x']);
        assert!(s[19..].iter().all(|b| *b == 0));
    }

    #[test]
    fn a_malformed_length_is_an_error_not_a_value() {
        let p = params_of(ValueKind::Variable, 30, 0);
        let mut pages = vec![0u8; 16 * 256];
        let tag = p.tag(b"k");
        {
            let mut t = Table::empty(p, &mut pages, 3);
            t.insert(&tag, b"abc").unwrap();
        }
        let (pg, slot) = Table::empty(p, &mut pages.clone(), 3).locate(&tag).unwrap();
        let at = pg as usize * 256 + slot * 48 + 16;
        pages[at..at + 2].copy_from_slice(&31u16.to_le_bytes());
        let t = Table::empty(p, &mut pages, 3);
        assert_eq!(t.get(&tag), Err(KvError::SlotLength { len: 31, max: 30 }));
        assert!(p.find(t.page(pg), &tag).is_err());
    }

    #[test]
    fn slots_stay_out_of_a_signature_tail() {
        // 256-byte pages with a 72-byte tail: 184 usable bytes, 11 set slots, 5 of 32 bytes.
        let set = params_of(ValueKind::Set, 0, 72);
        assert_eq!((set.usable, set.slots_per_page()), (184, 11));
        round_trip(set, |_| Vec::new());
        let fixed = params_of(ValueKind::Fixed, 16, 72);
        assert_eq!(fixed.slots_per_page(), 5);
        round_trip(fixed, |k| vec![k as u8; 16]);
    }
}
