//! `pirq db gen`, `pirq db import`, `pirq db info` and `pirq db verify`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use pirq_shared::db::{self, synthetic, Header, PirDb};

#[derive(Subcommand)]
pub enum DbCommand {
    /// Write a synthetic database at epoch 0 (deterministic in --seed).
    Gen(GenArgs),
    /// Cut a file's bytes into pages: a database of your own data at epoch 0 (the last page
    /// zero-padded; the byte length recorded in the header).
    Import(ImportArgs),
    /// Fold epoch updates into a new database file (a snapshot at the last update's epoch).
    Apply(crate::epoch::ApplyArgs),
    /// Print a database file's header fields as JSON.
    Info {
        /// The .pirdb file.
        file: PathBuf,
    },
    /// Check that a database file's pages match the digest its header records (one read of
    /// the whole file). A snapshot written by `db apply` records a chained digest: give the
    /// file it was made from and the updates, and they are checked too.
    Verify(VerifyArgs),
    /// Cut a database into shard files, one per page-range shard (`pirq-worker --shard I/S`).
    Split(crate::split::SplitArgs),
}

#[derive(Args)]
pub struct VerifyArgs {
    /// The .pirdb file to check.
    file: PathBuf,
    /// For a snapshot: the database it was made from (itself checked by content).
    #[arg(long, requires = "updates")]
    base: Option<PathBuf>,
    /// For a snapshot: the update files applied to --base, in epoch order.
    #[arg(long = "update", requires = "base")]
    updates: Vec<PathBuf>,
}

#[derive(Args)]
pub struct GenArgs {
    /// Number of pages.
    #[arg(long)]
    pages: u64,
    /// Page size in bytes: a power of two from 256 to 65536.
    #[arg(long, default_value_t = pirq_shared::db::DEFAULT_PAGE_SIZE)]
    page_size: u32,
    /// Seed of the synthetic contents (same seed, same bytes, on every machine).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output file.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args)]
pub struct ImportArgs {
    /// The file to import, or `-` for standard input.
    #[arg(long)]
    input: PathBuf,
    /// Page size in bytes: a power of two from 256 to 65536. Page p holds bytes
    /// p*S .. (p+1)*S of the input.
    #[arg(long, default_value_t = pirq_shared::db::DEFAULT_PAGE_SIZE)]
    page_size: u32,
    /// Output file.
    #[arg(long)]
    out: PathBuf,
}

pub fn run(cmd: DbCommand) -> anyhow::Result<()> {
    match cmd {
        DbCommand::Gen(args) => gen(args),
        DbCommand::Import(args) => import(args),
        DbCommand::Apply(args) => crate::epoch::apply(args),
        DbCommand::Info { file } => info(file),
        DbCommand::Verify(args) => verify(args),
        DbCommand::Split(args) => crate::split::split(args),
    }
}

fn gen(args: GenArgs) -> anyhow::Result<()> {
    let header = Header {
        page_size: args.page_size,
        num_pages: args.pages,
        epoch: 0,
    };
    header.validate()?;
    let bar = progress_bar(header.pages_len());
    let digest = db::write(
        &args.out,
        &header,
        |p, page| synthetic::fill_page(args.seed, p, page),
        |done| bar.set_position(done),
    )
    .with_context(|| format!("writing {}", args.out.display()))?;
    bar.finish_and_clear();
    eprintln!(
        "wrote {} ({} pages of {} bytes, domain bits {}), digest {digest}",
        args.out.display(),
        header.num_pages,
        header.page_size,
        header.domain_bits()
    );
    Ok(())
}

/// Refuses an `out` that is one of `inputs` (SPEC-independent: no tool destroys what it reads),
/// where `-` is standard input, which may be redirected from the output file itself.
pub fn refuse_overwriting_inputs(out: &Path, inputs: &[&Path]) -> anyhow::Result<()> {
    for input in inputs {
        if *input == Path::new("-") {
            if db::ensure_not_an_input(out, &[Path::new("/dev/stdin")]).is_err() {
                bail!(
                    "refusing to write {}: standard input is that same file; write to another \
                     path",
                    out.display()
                );
            }
        } else {
            db::ensure_not_an_input(out, &[input])?;
        }
    }
    Ok(())
}

fn import(args: ImportArgs) -> anyhow::Result<()> {
    let stdin = args.input == Path::new("-");
    refuse_overwriting_inputs(&args.out, &[&args.input])?;
    let (name, input, known_len): (String, Box<dyn std::io::Read>, Option<u64>) = if stdin {
        (
            "standard input".into(),
            Box::new(std::io::stdin().lock()),
            None,
        )
    } else {
        let file = std::fs::File::open(&args.input)
            .with_context(|| format!("opening {}", args.input.display()))?;
        let meta = file.metadata()?;
        // A pipe or a device has no length to trust.
        let len = meta.is_file().then_some(meta.len());
        (args.input.display().to_string(), Box::new(file), len)
    };
    let bar = match known_len {
        Some(len) => progress_bar(len),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {bytes} {binary_bytes_per_sec}")
                .expect("valid template"),
        ),
    };
    let imported = db::import::import(&args.out, input, &name, known_len, args.page_size, |done| {
        bar.set_position(done)
    })
    .with_context(|| format!("importing {name} into {}", args.out.display()))?;
    bar.finish_and_clear();
    eprintln!(
        "wrote {} ({} bytes of {name} in {} pages of {} bytes, the last zero-padded), digest {}",
        args.out.display(),
        imported.data_len,
        imported.num_pages,
        args.page_size,
        imported.digest
    );
    Ok(())
}

/// A byte progress bar, drawn only for writes big enough to watch (and only on a terminal).
fn progress_bar(total: u64) -> ProgressBar {
    if total < 64 << 20 {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .expect("valid template"),
    );
    bar
}

fn info(file: PathBuf) -> anyhow::Result<()> {
    let db = PirDb::open(&file)?;
    let h = db.header();
    let mut info = serde_json::json!({
        "page_size": h.page_size,
        "num_pages": h.num_pages,
        "epoch": h.epoch,
        "domain_bits": h.domain_bits(),
        "pages_bytes": h.pages_len(),
        "digest": db.recorded_digest(),
        "pages_digest": db.recorded_pages_digest(),
    });
    if db.data_len() != 0 {
        info["data_len"] = db.data_len().into();
    }
    if let Some(kv) = db.kv() {
        info["kv"] = serde_json::to_value(kv.info())?;
    }
    if let Some(s) = db.shard() {
        info["shard"] = serde_json::json!({
            "shard": s.spec.to_string(),
            "first_page": s.first_page,
            "total_pages": s.total_pages,
        });
    }
    println!("{}", serde_json::to_string_pretty(&info)?);
    Ok(())
}

/// Recomputes what a file's digest stands for and compares. Exit status 1 on any mismatch.
fn verify(args: VerifyArgs) -> anyhow::Result<()> {
    let db = PirDb::open(&args.file)?;
    let name = args.file.display();
    let Some(recorded) = db.recorded_digest() else {
        bail!("{name} records no digest (written before digests existed); its content digest is {}; rewrite it with `pirq db apply` or the tool that made it", db.content_digest());
    };
    let Some(base_path) = args.base else {
        if db.recorded_pages_digest().is_none() && db.content_digest() != recorded {
            bail!(
                "{name}: the header records digest {recorded} but the pages hash to {}: \
                 the file is damaged, or it is a snapshot (pirq db apply) written before files \
                 recorded pages_digest, whose digest chains its updates: then verify it with \
                 --base FILE --update U1 --update U2 ...",
                db.content_digest()
            );
        }
        let pages = db.verify_pages()?;
        if pages == recorded {
            println!("{name}: pages match digest {recorded}");
        } else {
            println!(
                "{name}: pages match pages_digest {pages} (the database's digest {recorded} is \
                 inherited: check its history with --base and --update)"
            );
        }
        return Ok(());
    };
    let base = PirDb::open(&base_path)?;
    let base_recorded = base.digest();
    let base_content = base.content_digest();
    if base_content != base_recorded {
        bail!(
            "{}: the header records digest {base_recorded} but the pages hash to {base_content}",
            base_path.display()
        );
    }
    let mut digest = base_content;
    let mut latest = std::collections::HashMap::new();
    for path in &args.updates {
        let u = crate::epoch::read_update(path)?;
        u.validate(base.num_pages(), base.page_size())?;
        digest = digest.next(&u);
        for w in u.pages {
            latest.insert(w.index, w.page);
        }
    }
    if digest != recorded {
        bail!(
            "{name}: the header records digest {recorded}, {} with these updates chains to {digest}",
            base_path.display()
        );
    }
    if db.header().num_pages != base.num_pages() || db.page_size() != base.page_size() {
        bail!("{name}: not the shape of {}", base_path.display());
    }
    for p in 0..db.num_pages() {
        let want = latest
            .get(&p)
            .map(Vec::as_slice)
            .unwrap_or_else(|| base.page(p).expect("p < num_pages"));
        if db.page(p) != Some(want) {
            bail!(
                "{name}: page {p} differs from {} with these updates applied",
                base_path.display()
            );
        }
    }
    println!(
        "{name}: pages match digest {recorded} ({} with {} updates)",
        base_path.display(),
        args.updates.len()
    );
    Ok(())
}
