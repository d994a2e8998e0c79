//! `pirq kv update`: insert, change and delete records by key, as one epoch update.
//!
//! The database (the snapshot as of the previous epoch) is mapped copy-on-write, the changes
//! are applied in file order with the same cuckoo placement as the build, and every page that
//! ends up different — including pages that evictions moved records into or out of — becomes a
//! whole-page replacement of the new epoch. All of them go out together, so a lookup pinned to
//! either epoch sees a complete table.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use pirq_db::{self as db, PirDb};
use pirq_shared::kv::table::{Upserted, DEFAULT_MAX_KICKS};
use pirq_shared::kv::{page, PlaceError, Table};
use pirq_shared::update::{EpochUpdate, PageWrite};

use super::records::{self, Columns, Encoding, Encodings, Format, Records, Sizes};

#[derive(Args)]
pub struct UpdateArgs {
    /// The kv database as of the previous epoch (as built, or a `pirq db apply` snapshot).
    #[arg(long)]
    db: PathBuf,
    /// Change lines (JSON): {"key":"…","value":"…"} (insert or change; a set's lines are
    /// {"key":"…"}) or {"key":"…","delete":true}; `-` for standard input.
    #[arg(long)]
    changes: PathBuf,
    /// How keys are written in the change lines (default: as the table records; hex for a
    /// table that records nothing).
    #[arg(long, value_parser = records::key_encoding, value_name = "utf8|hex|base64")]
    key_encoding: Option<Encoding>,
    /// How values are written in the change lines (default: as the table records).
    #[arg(long, value_parser = records::value_encoding, value_name = "utf8|json|hex|base64")]
    value_encoding: Option<Encoding>,
    /// Epoch of the update: the database's epoch + 1.
    #[arg(long)]
    epoch: u64,
    /// Seed of the eviction walk.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Evictions tried per insert before the update gives up.
    #[arg(long, default_value_t = DEFAULT_MAX_KICKS)]
    max_kicks: usize,
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

pub fn run(args: UpdateArgs) -> anyhow::Result<()> {
    crate::db::refuse_overwriting_inputs(&args.out, &[&args.db, &args.changes])?;
    let db = PirDb::open(&args.db).with_context(|| format!("opening {}", args.db.display()))?;
    let Some(params) = db.kv().copied() else {
        bail!(
            "{} is a page database, not a kv database (build one with pirq kv build)",
            args.db.display()
        );
    };
    let next = crate::publisher::next_update(
        &db,
        &args.db,
        Some(args.epoch),
        &args.signing,
        &[&args.db, &args.changes, &args.out],
    )?;
    let epoch = next.epoch;
    let mut pages = db.private_pages()?;
    // The change lines are read and placed as they come: the bar counts their bytes.
    let progress = crate::output::Progress::stages(args.quiet);
    progress.stage(
        &format!("applying {}", args.changes.display()),
        crate::output::file_len(&args.changes),
        crate::output::BYTES,
    );
    let mut changes = Records::new(
        progress.wrap_read(records::open(&args.changes)?),
        Format::Jsonl,
        Sizes {
            key_size: params.layout.key_size as usize,
            kind: params.kind(),
            value_size: params.value_size(),
        },
        {
            let table = Encodings::of_table(params.encodings());
            Encodings {
                key: args.key_encoding.unwrap_or(table.key),
                value: args.value_encoding.unwrap_or(table.value),
            }
        },
        Columns::default(),
    );
    let (mut inserted, mut changed, mut deleted) = (0u64, 0u64, 0u64);
    let mut table = Table::existing(params, pages.as_mut_slice(), args.seed, 0);
    table.set_max_kicks(args.max_kicks);
    let where_ = |line: u64| format!("{}: line {line}", args.changes.display());
    while let Some(change) = changes.next_change() {
        let records::Change { line, key, value } =
            change.map_err(|e| anyhow::anyhow!("{}: {e}", args.changes.display()))?;
        let tag = params.tag(&key);
        match value {
            Some(value) => match table.upsert(&tag, &value) {
                Ok(Upserted::Inserted) => inserted += 1,
                Ok(Upserted::Changed) => changed += 1,
                Err(PlaceError::Full { kicks, .. }) => {
                    let records = (0..params.num_pages)
                        .map(|p| page::occupied(table.page(p), params.slot_size()) as u64)
                        .sum::<u64>();
                    bail!(
                        "{}: cannot place the record: all {} candidate pages stayed full after \
                         {kicks} evictions, at a load factor of {:.4} ({records} records in {} \
                         slots). The table is too full: rebuild it with more pages (pirq kv \
                         build --load lower or --pages more) or more choices",
                        where_(line),
                        params.choices(),
                        records as f64 / params.capacity() as f64,
                        params.capacity()
                    )
                }
                Err(e) => bail!("{}: {e}", where_(line)),
            },
            None => {
                if !table.remove(&tag) {
                    bail!("{}: delete of a key that is not in the table", where_(line));
                }
                deleted += 1;
            }
        }
    }
    if inserted + changed + deleted == 0 {
        bail!(
            "{} has no change lines: there is no update to write",
            args.changes.display()
        );
    }
    let kicks = table.kicks();
    let touched: Vec<u64> = table.touched().collect();
    drop(table);
    progress.clear();
    let written = changed_pages(&db, &pages, touched, next.signer.as_ref(), epoch);
    next.write(&written, &args.out)?;
    report(
        &progress,
        &Summary {
            out: &args.out,
            epoch,
            inserted,
            changed,
            deleted,
            evictions: kicks,
            pages: written.pages.len(),
        },
        args.json,
    )
}

/// What an update of a kv table holds, for its summary.
pub struct Summary<'a> {
    pub out: &'a std::path::Path,
    pub epoch: u64,
    pub inserted: u64,
    pub changed: u64,
    pub deleted: u64,
    pub evictions: u64,
    pub pages: usize,
}

/// The summary of `kv update` and `kv diff`: one line on standard error, or with `json` one
/// object on standard output (for scripts; kv build's `--json` does the same).
pub fn report(progress: &crate::output::Progress, s: &Summary, json: bool) -> anyhow::Result<()> {
    if json {
        progress.clear();
        let summary = serde_json::json!({
            "out": s.out,
            "epoch": s.epoch,
            "inserted": s.inserted,
            "changed": s.changed,
            "deleted": s.deleted,
            "evictions": s.evictions,
            "pages_replaced": s.pages,
        });
        return crate::output::println(summary.to_string());
    }
    progress.finish(&format!(
        "wrote {}: epoch {}, {} inserted, {} changed, {} deleted, {} evictions, {} pages \
         replaced",
        s.out.display(),
        s.epoch,
        s.inserted,
        s.changed,
        s.deleted,
        s.evictions,
        s.pages
    ));
    Ok(())
}

/// The update of `epoch`: the pages of `touched` that differ from the database's (pages
/// written back to what they were, a change undone later in the file, are left out), signed
/// when `signer` is given.
pub fn changed_pages(
    db: &PirDb,
    pages: &db::PrivatePages,
    touched: Vec<u64>,
    signer: Option<&pirq_shared::signing::PageSigner>,
    epoch: u64,
) -> EpochUpdate {
    let writes: Vec<PageWrite> = touched
        .into_iter()
        .filter(|&p| Some(pages.page(p)) != db.page(p))
        .map(|p| PageWrite {
            index: p,
            page: pages.page(p).to_vec(),
        })
        .collect();
    crate::publisher::signed_update(epoch, writes, signer)
}
