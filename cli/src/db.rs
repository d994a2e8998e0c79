//! `pirq db gen`, `pirq db import`, `pirq db sign`, `pirq db info` and `pirq db verify`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use pirq_db::{self as db, Header, PirDb};
use pirq_shared::synthetic;

#[derive(Subcommand)]
pub enum DbCommand {
    /// Write a synthetic database at epoch 0 (deterministic in --seed).
    Gen(GenArgs),
    /// Cut a file's bytes into pages: a database of your own data at epoch 0 (the last page
    /// zero-padded; the byte length recorded in the header).
    Import(ImportArgs),
    /// Fold epoch updates into a new database file (a snapshot at the last update's epoch).
    Apply(crate::epoch::ApplyArgs),
    /// The epoch update from one database file to another of the same layout (the pages that
    /// differ), for `pirq epoch push`: your own new content as an update.
    Diff(crate::diff::DiffArgs),
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
    /// Sign an existing database's pages with a publisher key (docs/spec/signed.md): a plain
    /// page file whose pages' last 72 bytes are zero, an imported file (cut again into pages
    /// with room for the signature), or a signed file (signed again). A kv table is signed by
    /// building it again: `pirq kv build --sign-key`.
    Sign(SignArgs),
}

#[derive(Args)]
pub struct SignArgs {
    /// The database to sign.
    #[arg(long)]
    db: PathBuf,
    /// The publisher's secret key file (`pirq publisher keygen --secret`).
    #[arg(long)]
    sign_key: PathBuf,
    /// Where the signed database goes.
    #[arg(long)]
    out: PathBuf,
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
    /// Check every page's publisher signature too: the file must be signed by this public key
    /// (`pirq publisher keygen --public`).
    #[arg(long)]
    publisher_key: Option<PathBuf>,
}

#[derive(Args)]
pub struct GenArgs {
    /// Number of pages.
    #[arg(long)]
    pages: u64,
    /// Page size in bytes: a power of two from 256 to 65536.
    #[arg(long, default_value_t = pirq_db::DEFAULT_PAGE_SIZE)]
    page_size: u32,
    /// Seed of the synthetic contents (same seed, same bytes, on every machine).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output file.
    #[arg(long)]
    out: PathBuf,
    /// Sign every page with this publisher secret key (the last 72 bytes of each page become
    /// its signature tail).
    #[arg(long)]
    sign_key: Option<PathBuf>,
}

#[derive(Args)]
pub struct ImportArgs {
    /// The file to import, or `-` for standard input.
    #[arg(long)]
    input: PathBuf,
    /// Page size in bytes: a power of two from 256 to 65536. Page p holds bytes
    /// p*U .. (p+1)*U of the input, U = the page size (less 72 with --sign-key).
    #[arg(long, default_value_t = pirq_db::DEFAULT_PAGE_SIZE)]
    page_size: u32,
    /// Output file.
    #[arg(long)]
    out: PathBuf,
    /// Sign every page with this publisher secret key (each page then holds 72 bytes less of
    /// the input: the rest is its signature tail).
    #[arg(long)]
    sign_key: Option<PathBuf>,
}

pub fn run(cmd: DbCommand) -> anyhow::Result<()> {
    match cmd {
        DbCommand::Gen(args) => gen(args),
        DbCommand::Import(args) => import(args),
        DbCommand::Apply(args) => crate::epoch::apply(args),
        DbCommand::Diff(args) => crate::diff::run(args),
        DbCommand::Info { file } => info(file),
        DbCommand::Verify(args) => verify(args),
        DbCommand::Split(args) => crate::split::split(args),
        DbCommand::Sign(args) => sign(args),
    }
}

fn gen(args: GenArgs) -> anyhow::Result<()> {
    let header = Header {
        page_size: args.page_size,
        num_pages: args.pages,
        epoch: 0,
    };
    header.validate()?;
    let signer = crate::publisher::new_signer(args.sign_key.as_deref())?;
    let meta = db::Meta {
        signing: signer.as_ref().map(|s| s.block),
        ..db::Meta::default()
    };
    let bar = progress_bar(header.pages_len());
    let started = std::time::Instant::now();
    let digest = db::write_meta(
        &args.out,
        &header,
        &meta,
        |p, page| {
            synthetic::fill_page(args.seed, p, page);
            if let Some(signer) = &signer {
                signer.sign(p, 0, page);
            }
        },
        |done| bar.set_position(done),
    )
    .with_context(|| format!("writing {}", args.out.display()))?;
    bar.finish_and_clear();
    eprintln!(
        "wrote {} ({} pages of {} bytes, domain bits {}), digest {digest}{}",
        args.out.display(),
        header.num_pages,
        header.page_size,
        header.domain_bits(),
        signed_note(signer.as_ref(), header.num_pages, started)
    );
    Ok(())
}

/// What a tool that signed pages says about them: the publisher, the database id, the rate.
fn signed_note(
    signer: Option<&pirq_shared::signing::PageSigner>,
    pages: u64,
    started: std::time::Instant,
) -> String {
    let Some(signer) = signer else {
        return String::new();
    };
    let secs = started.elapsed().as_secs_f64();
    format!(
        "; {pages} pages signed by publisher key {} in {secs:.1} s ({:.0} pages/s), db_id {}",
        signer.block.publisher,
        pages as f64 / secs.max(1e-9),
        hex::encode(signer.block.db_id)
    )
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
    let signer = crate::publisher::new_signer(args.sign_key.as_deref())?;
    let started = std::time::Instant::now();
    let imported = db::import::import(
        &args.out,
        input,
        &name,
        known_len,
        args.page_size,
        signer.as_ref(),
        |done| bar.set_position(done),
    )
    .with_context(|| format!("importing {name} into {}", args.out.display()))?;
    bar.finish_and_clear();
    eprintln!(
        "wrote {} ({} bytes of {name} in {} pages of {} bytes, the last zero-padded), digest {}{}",
        args.out.display(),
        imported.data_len,
        imported.num_pages,
        args.page_size,
        imported.digest,
        signed_note(signer.as_ref(), imported.num_pages, started)
    );
    Ok(())
}

/// `pirq db sign`: the pages of an existing database, signed. Signing shrinks the usable bytes
/// of a page (SPEC §2.5), so data never sits under a tail: imported bytes are cut again, a
/// plain file is signed only where its tails are free, a kv table is refused (its slots are
/// laid out by `kv build`).
fn sign(args: SignArgs) -> anyhow::Result<()> {
    use pirq_shared::signing::{PageSigner, SecretKey, TAIL_LEN};
    db::ensure_not_an_input(&args.out, &[&args.db])?;
    let source = PirDb::open(&args.db)?;
    let name = args.db.display();
    let key = SecretKey::read_file(&args.sign_key)?;
    if source.shard().is_some() {
        bail!("{name} is a shard file: sign the whole database, then split it (pirq db split)");
    }
    let started = std::time::Instant::now();
    let header = *source.header();
    let ps = source.page_size();
    let tail = TAIL_LEN as usize;
    let (signer, keep_epochs) = match source.signing() {
        // Signed again: by the same publisher the database keeps its identity; by another it
        // is another database.
        Some(block) if block.publisher == key.public() => {
            (PageSigner::for_block(*block, key)?, true)
        }
        Some(_) => (PageSigner::new(key), true),
        None if source.kv().is_some() => bail!(
 "{name} is a kv table: its slots must move out of the signature tails, so build it again from its records with pirq kv build --sign-key"
        ),
        None if source.data_len() != 0 => {
            let data = &source.pages()[..source.data_len() as usize];
            let signer = PageSigner::new(key);
            let imported = db::import::import(
                &args.out,
                data,
                &name.to_string(),
                Some(data.len() as u64),
                header.page_size,
                Some(&signer),
                |_| {},
            )?;
            eprintln!(
                "wrote {} (the {} imported bytes of {name} cut again into {} pages with room for the signature; a new database at epoch 0), digest {}{}",
                args.out.display(),
                imported.data_len,
                imported.num_pages,
                imported.digest,
                signed_note(Some(&signer), imported.num_pages, started)
            );
            return Ok(());
        }
        None => {
            if let Some(p) = source
                .pages()
                .chunks(ps)
                .position(|page| page[ps - tail..].iter().any(|b| *b != 0))
            {
                bail!(
                    "{name}: page {p} has data in its last {tail} bytes, where the signature goes; make the database again with --sign-key (pirq db gen, db import, kv build) so its data fits beside the signature"
                );
            }
            (PageSigner::new(key), false)
        }
    };
    let meta = db::Meta {
        signing: Some(signer.block),
        ..source.meta()
    };
    let digest = db::write_meta(
        &args.out,
        &header,
        &meta,
        |p, page| {
            page.copy_from_slice(source.page(p).expect("p < num_pages"));
            // A page's last change: as signed before, or (first signed now) this epoch.
            let changed = if keep_epochs {
                pirq_shared::signing::changed_epoch(page)
            } else {
                header.epoch
            };
            signer.sign(p, changed, page);
        },
        |_| {},
    )?;
    eprintln!(
        "wrote {} at epoch {}, digest {digest}{}",
        args.out.display(),
        header.epoch,
        signed_note(Some(&signer), header.num_pages, started)
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
    if let Some(block) = db.signing() {
        info["signing"] = serde_json::to_value(block.info())?;
        info["usable"] = db.usable().into();
    }
    if let Some(s) = db.shard() {
        info["shard"] = serde_json::json!({
            "shard": s.spec.to_string(),
            "first_page": s.first_page,
            "total_pages": s.total_pages,
        });
    }
    crate::outln!("{}", serde_json::to_string_pretty(&info)?);
    Ok(())
}

/// Recomputes what a file's digest stands for and compares. Exit status 1 on any mismatch.
fn verify(args: VerifyArgs) -> anyhow::Result<()> {
    let db = PirDb::open(&args.file)?;
    let name = args.file.display();
    if let Some(path) = &args.publisher_key {
        let key = crate::publisher::read_public(path)?;
        let pages = db.verify_signatures(&key)?;
        crate::outln!("{name}: all {pages} pages carry valid signatures of publisher key {key}");
    }
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
            crate::outln!("{name}: pages match digest {recorded}");
        } else {
            crate::outln!(
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
    crate::outln!(
        "{name}: pages match digest {recorded} ({} with {} updates)",
        base_path.display(),
        args.updates.len()
    );
    Ok(())
}
