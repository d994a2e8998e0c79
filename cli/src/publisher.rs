//! `pirq publisher keygen`: the publisher's Ed25519 key pair (`docs/spec/signed.md` §1), and
//! the `--sign-key` / `--publisher-key` flags every signing or verifying command shares.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use pirq_db::PirDb;
use pirq_shared::signing::{PageSigner, PublisherKey, SecretKey, SigningBlock};

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

/// The next update of an existing database, as `pirq db diff`, `pirq kv diff` and `pirq kv
/// update` make it: its epoch, its signer and the manifest file its manifest joins.
pub struct NextUpdate {
    pub epoch: u64,
    pub signer: Option<PageSigner>,
    pub manifests: Option<ManifestFile>,
}

/// The flags that say how the next update of a database is made.
pub struct NextUpdateFlags<'a> {
    /// `--epoch`; none: the one after the database's.
    pub epoch: Option<u64>,
    /// `--sign-key`.
    pub sign_key: Option<&'a Path>,
    /// `--manifests`.
    pub manifests: Option<&'a Path>,
    /// The command's other files, which the manifest file must not be.
    pub other_files: &'a [&'a Path],
}

/// Checks the next update of `db` (read from `db_path`) before anything is written: its epoch
/// is the one after the database's (no other applies), a signed database's updates are signed
/// by its publisher, and a signed update's manifest file is read and checked (a bad one costs no
/// update file).
pub fn next_update(
    db: &PirDb,
    db_path: &Path,
    flags: NextUpdateFlags,
) -> anyhow::Result<NextUpdate> {
    let next = db.header().epoch + 1;
    let epoch = flags.epoch.unwrap_or(next);
    pirq_db::check_epoch(epoch).context("--epoch")?;
    let signer = match (flags.sign_key, db.signing()) {
        (Some(path), block) => Some(signer_for(path, block)?),
        (None, Some(_)) => bail!(
            "{} is a signed database: its updates must be signed too; give --sign-key (the \
             publisher's secret key)",
            db_path.display()
        ),
        (None, None) => None,
    };
    if epoch != next {
        bail!(
            "{} is at epoch {}: its update is epoch {next} (got --epoch {epoch}); pass the \
             snapshot of the epoch before (pirq db apply)",
            db_path.display(),
            db.header().epoch,
        );
    }
    let manifests = crate::manifests::open_for_update(
        flags.manifests,
        signer.as_ref(),
        db,
        epoch,
        flags.other_files,
    )?;
    Ok(NextUpdate {
        epoch,
        signer,
        manifests,
    })
}

/// Reads `--publisher-key`.
pub fn read_public(path: &Path) -> anyhow::Result<PublisherKey> {
    Ok(PublisherKey::read_file(path)?)
}
