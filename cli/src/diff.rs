//! `pirq db diff`: the epoch update that turns one page database into another of the same
//! layout — the pages that differ, whole, signed like `pirq epoch make`'s — so that your own
//! content (a `db import` of a new version of a file) reaches the parties as an update instead
//! of a new database.
//!
//! The two files must have one layout: page size, page count, the imported length, the kv block
//! and the signing publisher. Anything else is a new database, which the error says to build and
//! serve anew: an update replaces pages, it cannot change what the header says about them.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use pirq_db::PirDb;

#[derive(Args)]
pub struct DiffArgs {
    /// The database as the parties serve it now.
    #[arg(long)]
    old: PathBuf,
    /// The database as it should be (same page size, page count and kind).
    #[arg(long)]
    new: PathBuf,
    /// Epoch of the update (default: the old database's epoch + 1, the only one that applies).
    #[arg(long)]
    epoch: Option<u64>,
    /// Output update file: JSON if it ends in .json, else bincode (as `pirq epoch make`).
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    signing: crate::publisher::UpdateSigningArgs,
    /// No progress bar, even on a terminal (the summary line stays).
    #[arg(long)]
    quiet: bool,
}

/// Why two files cannot be one database at two epochs, if they cannot.
fn layout_change(old: &PirDb, new: &PirDb) -> Option<String> {
    let (o, n) = (old.header(), new.header());
    if (o.page_size, o.num_pages) != (n.page_size, n.num_pages) {
        return Some(format!(
            "the new file has {} pages of {} bytes, the old one {} of {}",
            n.num_pages, n.page_size, o.num_pages, o.page_size
        ));
    }
    let (om, nm) = (old.meta(), new.meta());
    if om.data_len != nm.data_len {
        return Some(format!(
            "the new file holds {} imported bytes, the old one {}",
            nm.data_len, om.data_len
        ));
    }
    if om
        .kv
        .map(|k| (k.choices, k.kind, k.value_size, k.key_size, k.seed))
        != nm
            .kv
            .map(|k| (k.choices, k.kind, k.value_size, k.key_size, k.seed))
    {
        return Some("the kv layouts differ (seed, kind, sizes or choices)".into());
    }
    match (om.signing, nm.signing) {
        (None, None) => None,
        (Some(a), Some(b)) if a.publisher == b.publisher => None,
        (Some(_), Some(_)) => Some("they are signed by different publisher keys".into()),
        _ => Some("one is signed and the other is not".into()),
    }
}

pub fn run(args: DiffArgs) -> anyhow::Result<()> {
    crate::db::refuse_overwriting_inputs(&args.out, &[&args.old, &args.new])?;
    let open = |p: &PathBuf| PirDb::open(p).with_context(|| format!("opening {}", p.display()));
    let (old, new) = (open(&args.old)?, open(&args.new)?);
    if let Some(why) = layout_change(&old, &new) {
        bail!(
            "{} is not {} at a later epoch: {why}. An update replaces pages and cannot change \
             the layout: rebuild the database and serve it as a new one (workers started on the \
             new file, or pirq-worker --replace-db)",
            args.new.display(),
            args.old.display()
        );
    }
    let next = crate::publisher::next_update(
        &old,
        &args.old,
        args.epoch,
        &args.signing,
        &[&args.old, &args.new, &args.out],
    )?;
    let (epoch, signer) = (next.epoch, next.signer.as_ref());
    // A signed page's tail is its signature, which differs between two builds of the same
    // content: the usable bytes decide whether a page changed.
    let usable = old.usable();
    let progress = crate::output::Progress::new(Some(old.num_pages()), "pages", args.quiet);
    let mut pages = Vec::new();
    for p in 0..old.num_pages() {
        let (a, b) = (
            old.page(p).expect("p < num_pages"),
            new.page(p).expect("same count"),
        );
        if a[..usable] != b[..usable] {
            pages.push(pirq_shared::update::PageWrite {
                index: p,
                page: b.to_vec(),
            });
        }
        if p % 4096 == 4095 {
            progress.inc(4096);
        }
    }
    if pages.is_empty() {
        bail!(
            "{} and {} hold the same pages: there is no update to write",
            args.old.display(),
            args.new.display()
        );
    }
    let update = crate::publisher::signed_update(epoch, pages, signer);
    next.write(&update, &args.out)?;
    progress.finish(&format!(
        "wrote {}: epoch {epoch}, {} of {} pages replaced",
        args.out.display(),
        update.pages.len(),
        old.num_pages()
    ));
    Ok(())
}
