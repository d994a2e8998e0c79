//! `--manifests FILE` of `pirq epoch make` and `pirq kv update`: the publisher's epoch manifest
//! file (`docs/spec/signed.md` §4.2), a JSON array of signed manifests, one per epoch,
//! ascending. Each signed update appends its manifest; the file is checked first (every
//! signature, no gap, the update's epoch next) and replaced atomically, so an error never
//! costs the file it read.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use pirq_db::{self as db, PirDb};
use pirq_shared::digest::Digest;
use pirq_shared::signing::{Manifest, PageSigner};
use pirq_shared::update::EpochUpdate;

/// A manifest file read and checked for the update to one epoch.
pub struct ManifestFile {
    path: PathBuf,
    list: Vec<Manifest>,
    /// D(epoch - 1): the digest the update's manifest chains from (SPEC §2.1).
    previous: Digest,
}

impl ManifestFile {
    /// Reads `path` (a missing file is an empty list) for the update to `epoch` of `db`, signed
    /// by `signer`. The new manifest's digest chains from the file's last manifest, or, for the
    /// file's first one, from `db` itself, which must then be at `epoch - 1`.
    pub fn open_for(
        path: &Path,
        db: &PirDb,
        signer: &PageSigner,
        epoch: u64,
    ) -> anyhow::Result<ManifestFile> {
        let name = path.display();
        let list = match std::fs::read(path) {
            Ok(bytes) => Manifest::parse_list(&bytes).with_context(|| name.to_string())?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {name}")),
        };
        Manifest::check_chain(&list, &signer.block).with_context(|| {
            format!("{name} is not this database's manifest file (or was altered)")
        })?;
        let db_epoch = db.header().epoch;
        let previous = match list.last() {
            Some(last) => {
                if last.epoch + 1 != epoch {
                    bail!(
                        "{name} ends at epoch {}: the next manifest is epoch {}, not {epoch} \
                         (a manifest file is never rewritten: give --epoch {})",
                        last.epoch,
                        last.epoch + 1,
                        last.epoch + 1
                    );
                }
                // Where the database's own epoch is in the file, its digest must be there too.
                let first = list[0].epoch;
                if (first..=last.epoch).contains(&db_epoch)
                    && list[(db_epoch - first) as usize].digest != db.digest()
                {
                    bail!(
                        "{name}: its manifest of epoch {db_epoch} names digest {}, but {} (at \
                         epoch {db_epoch}) has digest {}: the file belongs to another history \
                         of this database",
                        list[(db_epoch - first) as usize].digest,
                        db.path().display(),
                        db.digest()
                    );
                }
                last.digest
            }
            None => {
                if db_epoch + 1 != epoch {
                    bail!(
                        "{name} holds no manifest yet: its first one chains from the database's \
                         own digest, so the update must be epoch {} of {} (at epoch \
                         {db_epoch}), not {epoch}; or give the snapshot of epoch {} (pirq db \
                         apply)",
                        db_epoch + 1,
                        db.path().display(),
                        epoch.saturating_sub(1)
                    );
                }
                db.digest()
            }
        };
        Ok(ManifestFile {
            path: path.to_path_buf(),
            list,
            previous,
        })
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Signs `update`'s manifest and writes the file with it appended (a temporary file renamed
    /// over the old one). Returns the new manifest.
    pub fn append(mut self, signer: &PageSigner, update: &EpochUpdate) -> anyhow::Result<Manifest> {
        let digest = self.previous.next(update);
        let pages = update.pages.iter().map(|w| w.index).collect();
        let manifest = signer.manifest(update.epoch, digest, pages);
        self.list.push(manifest.clone());
        let bytes = Manifest::list_to_json(&self.list);
        db::write_atomically(&self.path, |f| std::io::Write::write_all(f, &bytes))
            .with_context(|| format!("writing {}", self.path.display()))?;
        Ok(manifest)
    }
}

/// The manifest file a signed update's manifest joins, read and checked before anything is
/// written (a bad manifest file costs no update file): `--manifests` must come with
/// `--sign-key` ([`require`]) and be none of the command's `other_files` ([`check_path`]).
pub fn open_for_update(
    manifests: Option<&Path>,
    signer: Option<&PageSigner>,
    db: &PirDb,
    epoch: u64,
    other_files: &[&Path],
) -> anyhow::Result<Option<ManifestFile>> {
    require(manifests, signer.is_some())?;
    let (Some(path), Some(signer)) = (manifests, signer) else {
        return Ok(None);
    };
    check_path(path, other_files)?;
    Ok(Some(ManifestFile::open_for(path, db, signer, epoch)?))
}

/// `--sign-key` without `--manifests` is refused: a signed update without its manifest makes
/// every verifying client refuse the pages it did not replace ("the parties do not serve the
/// publisher's manifest of epoch N"), which a new user cannot tell from an attack.
pub fn require(manifests: Option<&Path>, signing: bool) -> anyhow::Result<()> {
    if signing && manifests.is_none() {
        bail!(
            "--sign-key needs --manifests FILE: the publisher's manifest of each signed epoch \
             (docs/spec/signed.md §4), appended to FILE, is what both parties serve \
             (pirq-gateway --manifests FILE) so that verifying clients can show unchanged \
             pages current; without it they refuse them"
        );
    }
    Ok(())
}

/// Refuses a `--manifests` path that is one of the command's other files (the database, the
/// update written, the change lines): appending must never replace one of them. A FIFO or a
/// device there is refused before it is read.
pub fn check_path(manifests: &Path, others: &[&Path]) -> anyhow::Result<()> {
    pirq_db::outfile::mode_for(manifests, pirq_db::outfile::Contents::Public)
        .with_context(|| format!("--manifests {}", manifests.display()))?;
    use std::os::unix::fs::MetadataExt;
    let same_file = |a: &Path, b: &Path| match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => a == b,
    };
    if let Some(other) = others.iter().find(|o| same_file(manifests, o)) {
        bail!(
            "--manifests {} is also {}: the manifest file is a file of its own",
            manifests.display(),
            other.display()
        );
    }
    Ok(())
}
