//! `pirq kv diff`: the epoch update that turns a built table into a new full export of its
//! records — inserts, changes and deletes found by comparing the two, placed as `kv update`
//! places them — so a publisher who holds only full exports never writes change lines by hand.
//!
//! The new records are read with the table's recorded encodings, then every occupied slot of
//! the table is compared with them by tag: a tag not in the export is deleted, one with another
//! value changed, and what is left of the export inserted. The layout (seed, kind, value size,
//! key size) is the table's: a record that does not fit it means the data needs a new table,
//! which the error says.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Args;
use pirq_db::PirDb;
use pirq_shared::kv::table::DEFAULT_MAX_KICKS;
use pirq_shared::kv::{page, KvParams, PlaceError, Table, Tag};

use super::records::{self, Columns, Encodings, Format, Records, Sizes};

#[derive(Args)]
pub struct DiffArgs {
    /// The kv database as it is served now (as built, or a `pirq db apply` snapshot).
    #[arg(long)]
    table: PathBuf,
    /// The new full export of the records, in any format `pirq kv build` reads, keys and values
    /// written as the table records them.
    #[arg(long)]
    records: PathBuf,
    /// The records' format (default: from the extension, as kv build).
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// CSV: the key column, by name.
    #[arg(long, value_name = "NAME")]
    key_column: Option<String>,
    /// CSV: the value column, by name.
    #[arg(long, value_name = "NAME")]
    value_column: Option<String>,
    /// Epoch of the update (default: the table's epoch + 1, the only one that applies).
    #[arg(long)]
    epoch: Option<u64>,
    /// Seed of the eviction walk.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output update file: JSON if it ends in .json, else bincode (as `pirq epoch make`).
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    signing: crate::publisher::UpdateSigningArgs,
    /// No progress bar, even on a terminal (the summary line stays).
    #[arg(long)]
    quiet: bool,
    /// The summary as one JSON object on standard output instead of a line on standard error.
    #[arg(long)]
    json: bool,
}

pub fn run(args: DiffArgs) -> anyhow::Result<()> {
    crate::db::refuse_overwriting_inputs(&args.out, &[&args.table, &args.records])?;
    let db =
        PirDb::open(&args.table).with_context(|| format!("opening {}", args.table.display()))?;
    let Some(params) = db.kv().copied() else {
        bail!(
            "{} is a page database, not a kv database: compare page databases with pirq db diff",
            args.table.display()
        );
    };
    let next = crate::publisher::next_update(
        &db,
        &args.table,
        args.epoch,
        &args.signing,
        &[&args.table, &args.records, &args.out],
    )?;
    let epoch = next.epoch;

    // Three stages, each with its bar on a terminal: read the export, compare, place.
    let progress = crate::output::Progress::stages(args.quiet);
    let wanted = read_export(&args, &params, &progress)?;
    let diff = compare(&db, &params, wanted, &progress)?;
    let mut pages = db.private_pages()?;
    let mut table = Table::existing(params, pages.as_mut_slice(), args.seed, 0);
    table.set_max_kicks(DEFAULT_MAX_KICKS);
    place(&mut table, &diff, &args.records, &progress)?;
    if diff.deletes.is_empty() && diff.changes.is_empty() && diff.inserts.is_empty() {
        bail!(
            "{} holds exactly the table's records: there is no update to write",
            args.records.display()
        );
    }
    let kicks = table.kicks();
    let touched: Vec<u64> = table.touched().collect();
    drop(table);
    progress.clear();
    let update = super::update::changed_pages(&db, &pages, touched, next.signer.as_ref(), epoch);
    next.write(&update, &args.out)?;
    super::update::report(
        &progress,
        &super::update::Summary {
            out: &args.out,
            epoch,
            inserted: diff.inserts.len() as u64,
            changed: diff.changes.len() as u64,
            deleted: diff.deletes.len() as u64,
            evictions: kicks,
            pages: update.pages.len(),
        },
        args.json,
    )
}

/// The export's records by tag, each with its line (for errors) and value; a duplicate key or
/// a record that does not fit the table's layout is an error.
fn read_export(
    args: &DiffArgs,
    params: &KvParams,
    progress: &crate::output::Progress,
) -> anyhow::Result<HashMap<Tag, (u64, Vec<u8>)>> {
    let format = Format::pick(args.format, &args.records);
    progress.stage(
        &format!("reading {}", args.records.display()),
        crate::output::file_len(&args.records),
        crate::output::BYTES,
    );
    let mut reader = Records::new(
        progress.wrap_read(records::open(&args.records)?),
        format,
        Sizes {
            key_size: params.layout.key_size as usize,
            kind: params.kind(),
            value_size: params.value_size(),
        },
        Encodings::of_table(params.encodings()),
        Columns {
            key: args.key_column.clone(),
            value: args.value_column.clone(),
        },
    );
    let mut wanted: HashMap<Tag, (u64, Vec<u8>)> = HashMap::new();
    while let Some(record) = reader.next_record() {
        let r = record.map_err(|e| {
            anyhow::anyhow!(
                "{}: {e} (the table's layout is fixed: data that does not fit it needs a new \
                 table, pirq kv build)",
                args.records.display()
            )
        })?;
        let tag = params.tag(&r.key);
        if let Some((first, _)) = wanted.insert(tag, (r.line, r.value)) {
            bail!(
                "{}: line {}: duplicate key (the same key was on line {first})",
                args.records.display(),
                r.line
            );
        }
    }
    Ok(wanted)
}

/// What turns the table into the export.
struct Diff {
    /// Records of the table the export does not have.
    deletes: Vec<Tag>,
    /// Records whose value the export changes.
    changes: Vec<(Tag, Vec<u8>)>,
    /// Records only the export has, in its order: (line, tag, value).
    inserts: Vec<(u64, Tag, Vec<u8>)>,
}

/// Compares the table's records with the export's, by tag.
fn compare(
    db: &PirDb,
    params: &KvParams,
    mut wanted: HashMap<Tag, (u64, Vec<u8>)>,
    progress: &crate::output::Progress,
) -> anyhow::Result<Diff> {
    let slot = params.slot_size();
    let mut deletes = Vec::new();
    let mut changes = Vec::new();
    progress.stage("comparing", Some(params.num_pages), "pages");
    for p in 0..params.num_pages {
        let area = params.slot_area(db.page(p).expect("a page of the table"));
        for s in 0..page::slots(area, slot) {
            if page::is_empty(area, slot, s) {
                continue;
            }
            let tag: Tag = page::tag_at(area, slot, s).try_into().expect("16 bytes");
            let value = params.payload_value(page::value(area, slot, s))?;
            match wanted.remove(&tag) {
                None => deletes.push(tag),
                Some((_, new)) if new != value => changes.push((tag, new)),
                Some(_) => {}
            }
        }
        progress.inc(1);
    }
    let mut inserts: Vec<(u64, Tag, Vec<u8>)> = wanted
        .into_iter()
        .map(|(t, (line, v))| (line, t, v))
        .collect();
    inserts.sort_by_key(|(line, _, _)| *line);
    Ok(Diff {
        deletes,
        changes,
        inserts,
    })
}

/// Applies `diff` to the table: deletes first (they make room for the inserts), then changes,
/// then inserts in the export's order. `records` names the export in errors.
fn place(
    table: &mut Table,
    diff: &Diff,
    records: &Path,
    progress: &crate::output::Progress,
) -> anyhow::Result<()> {
    progress.stage(
        "placing",
        Some((diff.deletes.len() + diff.changes.len() + diff.inserts.len()) as u64),
        "records",
    );
    for tag in &diff.deletes {
        table.remove(tag);
        progress.inc(1);
    }
    for (tag, value) in &diff.changes {
        table.upsert(tag, value)?;
        progress.inc(1);
    }
    for (line, tag, value) in &diff.inserts {
        progress.inc(1);
        match table.upsert(tag, value) {
            Ok(_) => {}
            Err(PlaceError::Full { kicks, .. }) => bail!(
                "{}: line {line}: the table is too full to place this record ({kicks} \
                 evictions): rebuild it with more pages (pirq kv build)",
                records.display()
            ),
            Err(e) => bail!("{}: line {line}: {e}", records.display()),
        }
    }
    Ok(())
}
