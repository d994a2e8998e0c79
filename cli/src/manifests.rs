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
        let list = read_checked(path, signer)?;
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
                check_db_digest(path, &list, db)?;
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

    /// Reads `path` for the update that follows `after`, updates of `db` made since it but not
    /// applied to it (`pirq eth import --after`: updates to epochs `db + 1 ..= db + k`, in
    /// order). Before any work is done on them: the file must end at exactly epoch `db + k`
    /// (the new manifest chains from that one), and its manifest of each epoch `db + i` must be
    /// the publisher's manifest of that very update: the same pages and the digest `D(db + i)`
    /// chained from `db`'s through the updates (SPEC §2.1). The digest binds every byte of
    /// every page, tails included, and the manifest is signed, so that names each update as
    /// the publisher's own, its pages' signatures and `changed_epoch` as they were signed.
    pub fn open_after(
        path: &Path,
        db: &PirDb,
        signer: &PageSigner,
        after: &[Applied],
    ) -> anyhow::Result<ManifestFile> {
        let name = path.display();
        let db_epoch = db.header().epoch;
        let Some(newest) = after.last() else {
            return ManifestFile::open_for(path, db, signer, db_epoch + 1);
        };
        let list = read_checked(path, signer)?;
        let given = || {
            let epochs = match after {
                [one] => format!("epoch {}", one.epoch),
                _ => format!("epochs {} to {}", db_epoch + 1, newest.epoch),
            };
            format!(
                "{} (at epoch {db_epoch}) with --after {} ({epochs})",
                db.path().display(),
                after
                    .iter()
                    .map(|a| a.file.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        };
        let Some(last) = list.last() else {
            bail!(
                "{name} holds no manifest, but the base is {}: each signed update appends its \
                 manifest to the file it was made with, so the file must end at epoch {}; give \
                 that file",
                given(),
                newest.epoch
            );
        };
        if last.epoch != newest.epoch {
            let why = if last.epoch < newest.epoch {
                "it lacks the manifests of the later updates: give the manifest file they were \
                 made with"
            } else {
                "updates were made after these: give --after every update made since the base, \
                 in order"
            };
            bail!(
                "{name} ends at epoch {}, but the base is {}: the manifest file must end at \
                 exactly epoch {}, the next update's manifest chaining from it ({why})",
                last.epoch,
                given(),
                newest.epoch
            );
        }
        check_db_digest(path, &list, db)?;
        let first = list[0].epoch;
        for a in after {
            let Some(m) = a
                .epoch
                .checked_sub(first)
                .and_then(|i| list.get(i as usize))
            else {
                bail!(
                    "{name} holds no manifest of epoch {} (it starts at epoch {first}), the \
                     epoch of {}: give the manifest file that update was made with",
                    a.epoch,
                    a.file.display()
                );
            };
            if m.pages != a.pages || m.digest != a.digest {
                bail!(
                    "{} is not the update of epoch {} that {name} names: its manifest there \
                     says {} pages and digest {}, the update chained on {} makes {} pages and \
                     digest {} (give --after the updates made since the base, in order, with \
                     the manifest file they were made with)",
                    a.file.display(),
                    a.epoch,
                    m.pages.len(),
                    m.digest.short(),
                    db.path().display(),
                    a.pages.len(),
                    a.digest.short()
                );
            }
        }
        let previous = last.digest;
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

/// An update made since a database file and not applied to it, as read by a command that takes
/// it as applied (`pirq eth import --after`): what its manifest must say of it.
pub struct Applied {
    /// The update file, for messages.
    pub file: PathBuf,
    pub epoch: u64,
    /// `D(epoch)`: the file's digest chained through this update and those before it.
    pub digest: Digest,
    /// Its page indices, ascending, each once (as a manifest lists them).
    pub pages: Vec<u64>,
}

impl Applied {
    /// `update`, read from `file`, taken as applied on top of a database at `previous`, its
    /// digest at the epoch before.
    pub fn new(file: &Path, previous: Digest, update: &EpochUpdate) -> Applied {
        let mut pages: Vec<u64> = update.pages.iter().map(|w| w.index).collect();
        pages.sort_unstable();
        pages.dedup();
        Applied {
            file: file.to_path_buf(),
            epoch: update.epoch,
            digest: previous.next(update),
            pages,
        }
    }
}

/// Reads a manifest file (a missing file is an empty list) and checks it is `signer`'s
/// database's: every signature, no gap.
fn read_checked(path: &Path, signer: &PageSigner) -> anyhow::Result<Vec<Manifest>> {
    let name = path.display();
    let list = match std::fs::read(path) {
        Ok(bytes) => Manifest::parse_list(&bytes).with_context(|| name.to_string())?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {name}")),
    };
    Manifest::check_chain(&list, &signer.block)
        .with_context(|| format!("{name} is not this database's manifest file (or was altered)"))?;
    Ok(list)
}

/// Where `db`'s own epoch is in the (non-empty) `list`, its digest must be there too.
fn check_db_digest(path: &Path, list: &[Manifest], db: &PirDb) -> anyhow::Result<()> {
    let db_epoch = db.header().epoch;
    let (first, last) = (list[0].epoch, list[list.len() - 1].epoch);
    if (first..=last).contains(&db_epoch) && list[(db_epoch - first) as usize].digest != db.digest()
    {
        bail!(
            "{}: its manifest of epoch {db_epoch} names digest {}, but {} (at epoch {db_epoch}) \
             has digest {}: the file belongs to another history of this database",
            path.display(),
            list[(db_epoch - first) as usize].digest,
            db.path().display(),
            db.digest()
        );
    }
    Ok(())
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
