//! `pirq eth import --base DIR --update-out UDIR`: the block update of every table, from the
//! new block's whole dump and the tables as served now.
//!
//! Three steps, memory bounded by the change rather than the state: (1) the dump is read and
//! each of its records looked up in the base tables (read-only), on all cores, the results
//! taken in input order: found and equal, the record's slot is marked seen (one bit a slot);
//! found and different, a change; not found, an insert. (2) Occupied slots never marked are
//! the deletes (found on all cores, in page order). With `--changes` instead, the lines are
//! the block's changed records alone, a zero slot value a delete and a `deleted` account line
//! the delete of its record and of the slots it lists (codes stay: [`compare_changes`]); with
//! `--after`, earlier
//! updates' pages are read on top of the base files (a signed table's manifest file must name
//! each of them, and the new manifest chains from theirs). (3) Deletes, changes and inserts
//! are applied to a private copy-on-write mapping of each table with the builder's placement,
//! and the pages that differ become that table's update (`pirq kv update` does the same for
//! change lines). Every table gets the same next epoch, an empty update where nothing changed,
//! so the tables' epochs keep naming the same block (`docs/eth.md`).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use pirq_db::PirDb;
use pirq_shared::kv::{page, KvParams, PlaceError, Table, Tag, ValueKind};

use super::dump::{self, Item};
use super::import::ImportArgs;
use super::tables::{
    self, storage_key, Account, Meta, ACCOUNT_LEN, EMPTY_ROOT, META_KEY, STORAGE_KEY_LEN,
};

/// Where a record sits in a base table, and its value: (page, slot, value).
type Found<'a> = Option<(u64, usize, &'a [u8])>;

/// One base table and what the new dump does to it.
struct Base {
    name: &'static str,
    path: PathBuf,
    db: PirDb,
    params: KvParams,
    /// One bit a slot: the record there is in the new dump.
    seen: Vec<u64>,
    changes: Vec<(Tag, Vec<u8>)>,
    inserts: Vec<(Tag, Vec<u8>)>,
    /// (page, slot, tag), applied in page order.
    deletes: Vec<(u64, usize, Tag)>,
    /// Pages of the updates applied on top of the file (`--after`), the last write winning.
    overlay: HashMap<u64, Vec<u8>>,
    /// The epoch the base is at: the file's, plus one an update applied on top.
    epoch: u64,
    /// A signed table's `--after` updates, as its manifests must name them.
    applied: Vec<crate::manifests::Applied>,
}

impl Base {
    fn open(dir: &Path, name: &'static str, after: &[PathBuf]) -> anyhow::Result<Base> {
        let path = dir.join(format!("{name}.pirdb"));
        let db = PirDb::open(&path).with_context(|| format!("opening {}", path.display()))?;
        let Some(params) = db.kv().copied() else {
            bail!(
                "{} is not a kv table (made by pirq eth import?)",
                path.display()
            );
        };
        let slots = params.num_pages as usize * params.slots_per_page();
        let mut epoch = db.header().epoch;
        let mut overlay = HashMap::new();
        let mut applied: Vec<crate::manifests::Applied> = Vec::new();
        for udir in after {
            let file = udir.join(format!("{name}.update"));
            let update = crate::epoch::read_update(&file)?;
            if update.epoch != epoch + 1 {
                bail!(
                    "{} is epoch {}, but the base is at epoch {epoch} there: give --after the \
                     updates made since the base, in order",
                    file.display(),
                    update.epoch
                );
            }
            update
                .validate(params.num_pages, params.page_size as usize)
                .with_context(|| format!("{}", file.display()))?;
            if db.signing().is_some() {
                let previous = applied.last().map_or(db.digest(), |a| a.digest);
                applied.push(crate::manifests::Applied::new(&file, previous, &update));
            }
            for w in update.pages {
                overlay.insert(w.index, w.page);
            }
            epoch += 1;
        }
        Ok(Base {
            name,
            path,
            db,
            params,
            seen: vec![0; slots.div_ceil(64)],
            changes: Vec::new(),
            inserts: Vec::new(),
            deletes: Vec::new(),
            overlay,
            epoch,
            applied,
        })
    }

    /// Page `p` of the base: the file's, or the last update's on top.
    fn page(&self, p: u64) -> &[u8] {
        match self.overlay.get(&p) {
            Some(page) => page,
            None => self.db.page(p).expect("a page of the table"),
        }
    }

    /// Where `tag` is in the base: (page, slot, value).
    fn locate(&self, tag: &Tag) -> Result<Found<'_>, String> {
        let ss = self.params.slot_size();
        for &p in self.params.candidates(tag).iter() {
            let area = self.params.slot_area(self.page(p));
            if let Some(s) = page::find(area, ss, tag) {
                let value = self
                    .params
                    .payload_value(page::value(area, ss, s))
                    .map_err(|e| format!("{}: {e}", self.path.display()))?;
                return Ok(Some((p, s, value)));
            }
        }
        Ok(None)
    }

    fn mark(&mut self, p: u64, s: usize) {
        let bit = p as usize * self.params.slots_per_page() + s;
        self.seen[bit / 64] |= 1 << (bit % 64);
    }

    fn is_seen(&self, p: u64, s: usize) -> bool {
        let bit = p as usize * self.params.slots_per_page() + s;
        self.seen[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// The new state has `key` = `value`: a change, an insert, or nothing.
    fn want(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        let tag = self.params.tag(key);
        match self.locate(&tag)? {
            Some((p, s, old)) => {
                let differs = old != value;
                self.mark(p, s);
                if differs {
                    self.changes.push((tag, value.to_vec()));
                }
            }
            None => self.inserts.push((tag, value.to_vec())),
        }
        Ok(())
    }

    /// A block's changes clear `key` (a delete when the base has it).
    fn clear(&mut self, key: &[u8]) -> Result<(), String> {
        let tag = self.params.tag(key);
        if let Some((p, s, _)) = self.locate(&tag)? {
            self.deletes.push((p, s, tag));
        }
        Ok(())
    }

    /// A block's changes delete the account at `address`, listing `slots` of its storage to
    /// clear: a delete when the base has it (nothing when it has not, as for a cleared slot).
    /// The storage table cannot find an account's slots by itself (its keys are hashed), so an
    /// account the base holds with storage (a root other than the empty trie's) must list them.
    fn delete_account(&mut self, address: &[u8; 20], slots: u64) -> Result<(), String> {
        let tag = self.params.tag(address);
        let Some((p, s, value)) = self.locate(&tag)? else {
            return Ok(());
        };
        let old = Account::from_bytes(value).ok_or_else(|| {
            format!(
                "{}: an account record of the wrong size",
                self.path.display()
            )
        })?;
        if slots == 0 && old.storage_root != EMPTY_ROOT {
            return Err(format!(
                "the deleted account {} has storage in the base (its storage root is not the \
                 empty trie's), but the line lists none of its slots: list every slot it held \
                 (\"storage\": {{\"0x…\": \"0\", …}}) so that the storage table drops them \
                 (or import a whole --dump)",
                tables::data(address)
            ));
        }
        self.deletes.push((p, s, tag));
        Ok(())
    }

    /// Every occupied slot the dump did not mark is a delete.
    fn find_deletes(&mut self) {
        use rayon::prelude::*;
        let ss = self.params.slot_size();
        let base = &*self;
        // On all cores, in page order (the order they are applied in).
        let deletes = (0..base.params.num_pages)
            .into_par_iter()
            .flat_map_iter(|p| {
                let area = base.params.slot_area(base.page(p));
                (0..page::slots(area, ss))
                    .filter(|&s| !page::is_empty(area, ss, s) && !base.is_seen(p, s))
                    .map(|s| {
                        let tag: Tag = page::tag_at(area, ss, s).try_into().expect("16 bytes");
                        (p, s, tag)
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        self.deletes = deletes;
    }
}

pub fn run(args: &ImportArgs) -> anyhow::Result<()> {
    let base_dir = args.base.as_deref().expect("update mode");
    let out = args
        .update_out
        .as_deref()
        .expect("clap requires it with --base");
    let (mut bases, epoch) = open_bases(base_dir, &args.after)?;
    let (input_path, changes) = match (&args.dump, &args.changes) {
        (Some(dump), None) => (dump.as_path(), false),
        (None, Some(changes)) => (changes.as_path(), true),
        _ => bail!("give --dump (the new block's whole state) or --changes (its changes)"),
    };
    let meta_tag = bases[0].params.tag(META_KEY);
    let base_meta = match bases[0].locate(&meta_tag).map_err(anyhow::Error::msg)? {
        Some((p, s, value)) => {
            let meta = Meta::from_bytes(value).map_err(anyhow::Error::msg)?;
            bases[0].mark(p, s);
            meta
        }
        None => bail!(
            "{} has no metadata record: it was not made by pirq eth import",
            bases[0].path.display()
        ),
    };
    let block = args.block.unwrap_or(base_meta.block + 1);
    // Signing checked (and each table's manifest file read) before any work.
    let nexts = next_updates(args, &bases, epoch, input_path, out)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;

    let progress = crate::output::Progress::stages(args.quiet);
    progress.stage(
        &format!(
            "comparing {} with {}",
            input_path.display(),
            base_dir.display()
        ),
        crate::output::file_len(input_path),
        crate::output::BYTES,
    );
    let input = progress.wrap_read(crate::kv::records::open(input_path)?);
    let [accounts, code, storage] = &mut bases[..] else {
        unreachable!("three tables")
    };
    let summary = if !changes {
        compare_parallel(input, out, [&mut *accounts, &mut *code, &mut *storage])
    } else {
        compare_changes(input, out, [&mut *accounts, &mut *code, &mut *storage])
    }
    .with_context(|| format!("reading {}", input_path.display()))?;
    let meta = Meta {
        block,
        state_root: summary.root.unwrap_or_default(),
    };
    if meta != base_meta {
        accounts.changes.push((meta_tag, meta.to_bytes().to_vec()));
    }

    let written = write_updates(&mut bases, nexts, changes, epoch, args.seed, out, &progress)?;
    progress.clear();
    report(
        out,
        block,
        &base_meta,
        &summary,
        epoch + 1,
        written,
        &progress,
    )
}

/// The base's three tables (with `--after` updates stacked on), checked to be one state: the
/// same shape rules and one epoch.
fn open_bases(base_dir: &Path, after: &[PathBuf]) -> anyhow::Result<(Vec<Base>, u64)> {
    let bases = tables::ALL
        .iter()
        .map(|name| Base::open(base_dir, name, after))
        .collect::<anyhow::Result<Vec<_>>>()?;
    check_shapes(&bases)?;
    let epoch = bases[0].epoch;
    if let Some(b) = bases.iter().find(|b| b.epoch != epoch) {
        bail!(
            "{} is at epoch {}, {} at epoch {epoch}: the tables of one state move together \
             (apply every table's updates: pirq db apply)",
            b.path.display(),
            b.epoch,
            bases[0].path.display()
        );
    }
    Ok((bases, epoch))
}

/// Each table's next update: its epoch, and its signer and manifests when signed, all checked
/// (and the manifest files read) before any work. With `--after`, a signed table's manifest
/// file must end at the last of those updates and name each of them ([`ManifestFile::open_after`]):
/// the new manifest chains from theirs as if they had been applied.
///
/// [`ManifestFile::open_after`]: crate::manifests::ManifestFile::open_after
fn next_updates(
    args: &ImportArgs,
    bases: &[Base],
    epoch: u64,
    input_path: &Path,
    out: &Path,
) -> anyhow::Result<Vec<crate::publisher::NextUpdate>> {
    bases
        .iter()
        .map(|b| {
            let signing = crate::publisher::UpdateSigningArgs {
                sign_key: args.sign_key.clone(),
                manifests: args
                    .manifests
                    .as_ref()
                    .map(|dir| dir.join(format!("{}.manifests.json", b.name))),
            };
            let update = out.join(format!("{}.update", b.name));
            if args.after.is_empty() {
                return crate::publisher::next_update(
                    &b.db,
                    &b.path,
                    None,
                    &signing,
                    &[&b.path, input_path, &update],
                );
            }
            let signer = crate::publisher::update_signer(&b.db, &b.path, &signing)?;
            crate::manifests::require(signing.manifests.as_deref(), signer.is_some())?;
            let manifests = match (&signing.manifests, &signer) {
                (Some(path), Some(signer)) => {
                    let mut others = vec![b.path.as_path(), input_path, &update];
                    others.extend(b.applied.iter().map(|a| a.file.as_path()));
                    crate::manifests::check_path(path, &others)?;
                    Some(crate::manifests::ManifestFile::open_after(
                        path, &b.db, signer, &b.applied,
                    )?)
                }
                _ => None,
            };
            Ok(crate::publisher::NextUpdate {
                epoch: epoch + 1,
                signer,
                manifests,
            })
        })
        .collect()
}

/// Places each table's changes and writes its update (signed when its next update is), in the
/// base's page order; a line of the report per table.
fn write_updates(
    bases: &mut [Base],
    nexts: Vec<crate::publisher::NextUpdate>,
    changes: bool,
    epoch: u64,
    seed: Option<u64>,
    out: &Path,
    progress: &crate::output::Progress,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut written = Vec::new();
    for (b, next) in bases.iter_mut().zip(nexts) {
        if changes {
            // In the order a whole dump's comparison finds them: the base's page order.
            b.deletes.sort_unstable();
            b.deletes.dedup();
        } else {
            progress.stage(
                &format!("finding what {} lost", b.name),
                None,
                crate::output::BYTES,
            );
            b.find_deletes();
        }
        progress.stage(&format!("placing {}", b.name), None, "records");
        let path = out.join(format!("{}.update", b.name));
        let update = apply(b, next.signer.as_ref(), epoch + 1, seed.unwrap_or(0))?;
        written.push(serde_json::json!({
            "name": b.name,
            "file": format!("{}.update", b.name),
            "inserted": b.inserts.len(),
            "changed": b.changes.len(),
            "deleted": b.deletes.len(),
            "pages": update.pages.len(),
        }));
        next.write(&update, &path)?;
    }
    Ok(written)
}

/// `eth.json` beside the updates, and the closing line.
fn report(
    out: &Path,
    block: u64,
    base_meta: &Meta,
    summary: &dump::Summary,
    epoch: u64,
    written: Vec<serde_json::Value>,
    progress: &crate::output::Progress,
) -> anyhow::Result<()> {
    let report = serde_json::json!({
        "block": block,
        "base_block": base_meta.block,
        "state_root": summary.root.map(|r| tables::data(&r)),
        "epoch": epoch,
        "accounts": summary.accounts,
        "storage_slots": summary.slots,
        "deleted_accounts": summary.deleted,
        "tables": written,
    });
    super::import::write_report(&out.join("eth.json"), &report)?;
    progress.finish(&format!(
        "wrote {}: block {} -> {block} as epoch {} of every table ({})",
        out.display(),
        base_meta.block,
        epoch,
        report["tables"]
            .as_array()
            .expect("tables")
            .iter()
            .map(|t| format!(
                "{}: {} inserted, {} changed, {} deleted, {} pages",
                t["name"].as_str().unwrap_or_default(),
                t["inserted"],
                t["changed"],
                t["deleted"],
                t["pages"]
            ))
            .collect::<Vec<_>>()
            .join("; ")
    ));
    Ok(())
}

/// [`run`]'s reading of a block's changes (`--changes`): each line's account wanted, its code
/// inserted when the base lacks it, its slots changed or (zero) cleared; a deleted account's
/// record and listed slots cleared. Its code stays: codes are shared by hash and the table
/// counts no users, so a block cannot know a code lost its last one (a whole `--dump` drops a
/// code no account names). An account on two lines is refused: the file says what each account
/// is after the block, once.
fn compare_changes(
    input: Box<dyn std::io::BufRead + Send>,
    out: &Path,
    bases: [&mut Base; 3],
) -> anyhow::Result<dump::Summary> {
    let [accounts, code, storage] = bases;
    let mut new_codes: HashSet<Tag> = HashSet::new();
    let mut lines: HashSet<[u8; 20]> = HashSet::new();
    let mut once = |address: &[u8; 20]| {
        if lines.insert(*address) {
            Ok(())
        } else {
            Err(format!(
                "the account {} is on an earlier line too: a block's changes give each account \
                 once, as it is after the block",
                tables::data(address)
            ))
        }
    };
    dump::read_changes(
        input,
        code.params.value_size(),
        out,
        &mut |item| match item {
            Item::Account {
                address,
                account,
                code: bytes,
            } => {
                once(&address)?;
                accounts.want(&address, &account.to_bytes())?;
                if let Some(bytes) = bytes {
                    let tag = code.params.tag(&account.code_hash);
                    match code.locate(&tag)? {
                        Some((p, s, _)) => code.mark(p, s),
                        None if new_codes.insert(tag) => code.inserts.push((tag, bytes.to_vec())),
                        None => {}
                    }
                }
                Ok(())
            }
            Item::Deleted { address, slots } => {
                once(&address)?;
                accounts.delete_account(&address, slots)
            }
            Item::Slot {
                address,
                slot,
                value,
            } if value == [0; 32] => storage.clear(&storage_key(&address, &slot)),
            Item::Slot {
                address,
                slot,
                value,
            } => storage.want(&storage_key(&address, &slot), &value),
        },
    )
}

/// What one record of a whole dump is to the base, found on rayon's threads (the base is only
/// read while the dump is compared): applied in input order by [`compare_parallel`].
enum Step {
    /// The record is in table `t` at (page, slot); its new value when it differs.
    Found(usize, u64, usize, Option<(Tag, Vec<u8>)>),
    /// Not in table `t`: an insert (of a code: the first time its hash comes).
    Missing(usize, Tag, Vec<u8>),
}

/// [`run`]'s comparison of a whole dump with the base, on all cores: the dump is parsed and
/// each record looked up in parallel ([`dump::read_parallel`]), then the marks, changes and
/// inserts are taken in input order, so the update is the one a sequential comparison makes.
fn compare_parallel(
    input: Box<dyn std::io::BufRead + Send>,
    out: &Path,
    bases: [&mut Base; 3],
) -> anyhow::Result<dump::Summary> {
    let [accounts, code, storage] = bases;
    let (a, c, s) = (&*accounts, &*code, &*storage);
    let max_code = c.params.value_size();
    let look = |t: usize, base: &Base, key: &[u8], value: &[u8]| -> Result<Step, String> {
        let tag = base.params.tag(key);
        Ok(match base.locate(&tag)? {
            Some((p, s, old)) => {
                Step::Found(t, p, s, (old != value).then(|| (tag, value.to_vec())))
            }
            None => Step::Missing(t, tag, value.to_vec()),
        })
    };
    let map = |items: Vec<dump::Owned>| -> Result<Vec<Step>, String> {
        let mut steps = Vec::with_capacity(items.len() + items.len() / 8);
        for item in items {
            match item {
                dump::Owned::Account {
                    address,
                    account,
                    code: bytes,
                } => {
                    steps.push(look(0, a, &address, &account.to_bytes())?);
                    if let Some(bytes) = bytes {
                        let tag = c.params.tag(&account.code_hash);
                        steps.push(match c.locate(&tag)? {
                            Some((p, s, _)) => Step::Found(1, p, s, None),
                            None => Step::Missing(1, tag, bytes),
                        });
                    }
                }
                dump::Owned::Slot {
                    address,
                    slot,
                    value,
                } => steps.push(look(2, s, &storage_key(&address, &slot), &value)?),
            }
        }
        Ok(steps)
    };
    // Marks and lists kept apart while the threads read the bases, added to them after.
    let mut new_codes: HashSet<Tag> = HashSet::new();
    let spp = [a, c, s].map(|b| b.params.slots_per_page());
    let mut seen = [a, c, s].map(|b| vec![0u64; b.seen.len()]);
    let mut changes = [a, c, s].map(|_| Vec::new());
    let mut inserts = [a, c, s].map(|_| Vec::new());
    let summary = {
        dump::read_parallel(input, max_code, out, &map, &mut |runs| {
            for run in runs {
                for step in run.map_err(anyhow::Error::msg)? {
                    match step {
                        Step::Found(t, p, s, change) => {
                            let bit = p as usize * spp[t] + s;
                            seen[t][bit / 64] |= 1 << (bit % 64);
                            changes[t].extend(change);
                        }
                        Step::Missing(1, tag, bytes) => {
                            if new_codes.insert(tag) {
                                inserts[1].push((tag, bytes));
                            }
                        }
                        Step::Missing(t, tag, value) => inserts[t].push((tag, value)),
                    }
                }
            }
            Ok(())
        })?
    };
    let lists = seen.into_iter().zip(changes).zip(inserts);
    for (base, ((seen, changes), inserts)) in [accounts, code, storage].into_iter().zip(lists) {
        for (word, more) in base.seen.iter_mut().zip(seen) {
            *word |= more;
        }
        base.changes.extend(changes);
        base.inserts.extend(inserts);
    }
    Ok(summary)
}

/// The base tables are the three an import makes (kinds and sizes), so their records read the
/// way this command writes them.
fn check_shapes(bases: &[Base]) -> anyhow::Result<()> {
    let want = [
        (ValueKind::Fixed, Some(ACCOUNT_LEN), 0),
        (ValueKind::Variable, None, tables::WORD),
        (ValueKind::Fixed, Some(tables::WORD), STORAGE_KEY_LEN),
    ];
    for (b, (kind, value, key)) in bases.iter().zip(want) {
        let l = &b.params.layout;
        if l.kind != kind
            || value.is_some_and(|v| v != l.value_size as usize)
            || l.key_size as usize != key
        {
            bail!(
                "{} is not the {} table of pirq eth import (its layout differs)",
                b.path.display(),
                b.name
            );
        }
    }
    Ok(())
}

/// Applies `b`'s deletes, changes and inserts to a private copy of its pages; the pages that
/// differ are the update of `epoch`.
fn apply(
    b: &Base,
    signer: Option<&pirq_shared::signing::PageSigner>,
    epoch: u64,
    seed: u64,
) -> anyhow::Result<pirq_shared::update::EpochUpdate> {
    let mut pages = b.db.private_pages()?;
    for (&p, page) in &b.overlay {
        pages.page_mut(p).copy_from_slice(page);
    }
    let mut table = Table::existing(b.params, pages.as_mut_slice(), seed, 0);
    for (_, _, tag) in &b.deletes {
        table.remove(tag);
    }
    for (tag, value) in b.changes.iter().chain(&b.inserts) {
        match table.upsert(tag, value) {
            Ok(_) => {}
            Err(e @ PlaceError::Full { .. }) => bail!(
                "the {} table is too full for this block ({e}): import the dump afresh \
                 (pirq eth import --out), which sizes the tables with room to grow",
                b.name
            ),
            Err(e) => bail!("the {} table: {e}", b.name),
        }
    }
    let touched: Vec<u64> = table.touched().collect();
    drop(table);
    // The pages that differ from the base's (with its --after updates on top).
    let writes = touched
        .into_iter()
        .filter(|&p| pages.page(p) != b.page(p))
        .map(|p| pirq_shared::update::PageWrite {
            index: p,
            page: pages.page(p).to_vec(),
        })
        .collect();
    Ok(crate::publisher::signed_update(epoch, writes, signer))
}
