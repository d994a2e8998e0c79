//! `pirq publisher keygen`: the publisher's Ed25519 key pair (`docs/spec/signed.md` §1), and
//! the `--sign-key` / `--publisher-key` flags every signing or verifying command shares.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use pirq_db::PirDb;
use pirq_shared::signing::{PageSigner, PublisherKey, SecretKey, SigningBlock};
use pirq_shared::update::{EpochUpdate, PageWrite};

use crate::manifests::ManifestFile;

#[derive(Subcommand)]
pub enum PublisherCommand {
    /// Make a publisher key pair: the secret key file (`pirq-publisher-secret-v1:`, mode 0600,
    /// never printed) signs databases and updates (`--sign-key`); the public key file
    /// (`pirq-publisher-public-v1:` and 64 hex digits) is what clients pin (`--publisher-key`).
    Keygen(KeygenArgs),
}

#[derive(Args)]
pub struct KeygenArgs {
    /// Where the secret key goes (created 0600; an existing file is never overwritten).
    #[arg(long)]
    secret: PathBuf,
    /// Where the public key goes (one line: `pirq-publisher-public-v1:` and 64 hex digits).
    #[arg(long)]
    public: PathBuf,
}

pub fn run(cmd: PublisherCommand) -> anyhow::Result<()> {
    match cmd {
        PublisherCommand::Keygen(args) => keygen(args),
    }
}

fn keygen(args: KeygenArgs) -> anyhow::Result<()> {
    if args.public.exists() {
        anyhow::bail!(
            "{} exists: refusing to overwrite a public key",
            args.public.display()
        );
    }
    let key = SecretKey::generate();
    key.write_file(&args.secret)?;
    let public = key.public();
    pirq_db::write_atomically(&args.public, |f| {
        std::io::Write::write_all(f, public.to_text().as_bytes())
    })
    .with_context(|| format!("writing {}", args.public.display()))?;
    eprintln!(
        "wrote the secret key to {} (keep it private) and the public key {public} to {}",
        args.secret.display(),
        args.public.display()
    );
    Ok(())
}

/// Reads `--sign-key` for a new database: a fresh `db_id`.
pub fn new_signer(path: Option<&Path>) -> anyhow::Result<Option<PageSigner>> {
    path.map(|p| Ok(PageSigner::new(SecretKey::read_file(p)?)))
        .transpose()
}

/// Reads `--sign-key` for more pages of the database signed by `block` (an update, a kv
/// update): the key must be that database's publisher.
pub fn signer_for(path: &Path, block: Option<&SigningBlock>) -> anyhow::Result<PageSigner> {
    let Some(block) = block else {
        anyhow::bail!(
            "--sign-key: the database is not signed; sign it first (pirq db sign) or leave \
             --sign-key out"
        );
    };
    Ok(PageSigner::for_block(*block, SecretKey::read_file(path)?)?)
}

/// The update of `epoch` that writes `writes`, each page signed as changed at `epoch` when
/// `signer` is given, on all cores (rayon's pool): each page's signature depends on its index,
/// epoch and bytes alone, so the update is the same bytes whatever the number of threads
/// (Ed25519 is deterministic), and a block's few thousand signatures (~20 µs each) no longer
/// wait on one core.
pub fn signed_update(
    epoch: u64,
    mut writes: Vec<PageWrite>,
    signer: Option<&PageSigner>,
) -> EpochUpdate {
    use rayon::prelude::*;
    if let Some(signer) = signer {
        writes
            .par_iter_mut()
            .for_each(|w| signer.sign(w.index, epoch, &mut w.page));
    }
    EpochUpdate {
        epoch,
        pages: writes,
    }
}

/// `--sign-key` and `--manifests` of every command that writes an update (`pirq epoch make`,
/// `pirq db diff`, `pirq kv diff`, `pirq kv update`).
#[derive(Args)]
pub struct UpdateSigningArgs {
    /// Sign the replaced pages with the publisher's secret key, the one that signed the
    /// database (a signed database's updates must be signed). Needs --manifests.
    #[arg(long)]
    pub sign_key: Option<PathBuf>,
    /// The publisher's manifest file (docs/spec/signed.md §4.2; needs --sign-key): the
    /// update's signed manifest is appended to it (the file is created if absent), for both
    /// parties to serve at GET /v1/manifests so clients can refuse rolled-back pages.
    #[arg(long, requires = "sign_key")]
    pub manifests: Option<PathBuf>,
}

/// An update about to be written: its epoch, its signer and the manifest file its manifest
/// joins, all checked before anything is written.
pub struct NextUpdate {
    pub epoch: u64,
    pub signer: Option<PageSigner>,
    pub manifests: Option<ManifestFile>,
}

/// Checks the next update of `db` (read from `db_path`), as `pirq db diff`, `pirq kv diff` and
/// `pirq kv update` make it: its epoch (`--epoch`, else the one after the database's) is the one
/// after the database's, no other applies; a signed database's updates are signed by its
/// publisher; and a signed update's manifest file is read and checked (a bad one costs no
/// update file). `other_files` are the command's files, which the manifest file must not be.
pub fn next_update(
    db: &PirDb,
    db_path: &Path,
    epoch: Option<u64>,
    signing: &UpdateSigningArgs,
    other_files: &[&Path],
) -> anyhow::Result<NextUpdate> {
    let next = db.header().epoch + 1;
    let epoch = epoch.unwrap_or(next);
    pirq_db::check_epoch(epoch).context("--epoch")?;
    let signer = update_signer(db, db_path, signing)?;
    if epoch != next {
        bail!(
            "{} is at epoch {}: its update is epoch {next} (got --epoch {epoch}); pass the \
             snapshot of the epoch before (pirq db apply)",
            db_path.display(),
            db.header().epoch,
        );
    }
    let manifests = crate::manifests::open_for_update(
        signing.manifests.as_deref(),
        signer.as_ref(),
        db,
        epoch,
        other_files,
    )?;
    Ok(NextUpdate {
        epoch,
        signer,
        manifests,
    })
}

/// The signer of an update of `db` (read from `db_path`): `--sign-key`, which must be the
/// publisher of a signed database; none for an unsigned one, whose updates are not signed.
pub fn update_signer(
    db: &PirDb,
    db_path: &Path,
    signing: &UpdateSigningArgs,
) -> anyhow::Result<Option<PageSigner>> {
    Ok(match (&signing.sign_key, db.signing()) {
        (Some(path), block) => Some(signer_for(path, block)?),
        (None, Some(_)) => bail!(
            "{} is a signed database: its updates must be signed too; give --sign-key (the \
             publisher's secret key)",
            db_path.display()
        ),
        (None, None) => None,
    })
}

impl NextUpdate {
    /// Writes `update` to `out`, JSON if the name ends in .json, else bincode: staged, then put
    /// in place only once its signed manifest is appended to the manifest file (when one was
    /// given), so that a failure leaves neither.
    pub fn write(self, update: &EpochUpdate, out: &Path) -> anyhow::Result<()> {
        let bytes = if out.extension().is_some_and(|e| e == "json") {
            update.to_json()
        } else {
            update.to_bincode()
        };
        let staged = pirq_db::outfile::stage(out, pirq_db::outfile::Contents::Public, &bytes)
            .with_context(|| format!("writing {}", out.display()))?;
        let appended = match (self.manifests, &self.signer) {
            (Some(file), Some(signer)) => {
                let path = file.path().to_path_buf();
                Some((file.append(signer, update)?, path))
            }
            _ => None,
        };
        staged
            .commit()
            .with_context(|| format!("writing {}", out.display()))?;
        if let Some((manifest, path)) = appended {
            eprintln!(
                "appended the manifest of epoch {} ({} pages, digest {}) to {}",
                manifest.epoch,
                manifest.pages.len(),
                manifest.digest,
                path.display()
            );
        }
        Ok(())
    }
}

/// Reads `--publisher-key`.
pub fn read_public(path: &Path) -> anyhow::Result<PublisherKey> {
    Ok(PublisherKey::read_file(path)?)
}
