//! Publisher-signed pages (`docs/spec/signed.md`, SPEC §2.4): the publisher's keys and their
//! files, the signing block of a `.pirdb` header, the signature tail of every page, the signed
//! message, and the epoch manifests that let a client tell a current page from an older one.
//!
//! A party can XOR anything it likes into its answer; the digest stamp cannot catch that, a
//! signature over the page (bound to the database, the page index and the epoch at which the
//! page last changed) can. Everything here is pure: no I/O beyond the key files.

use std::path::Path;

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};

use crate::digest::Digest;

/// Where the signing block sits in a `.pirdb` header: bytes 560..688.
pub const BLOCK: std::ops::Range<usize> = 560..688;
/// First 8 bytes of a signing block.
pub const MAGIC: [u8; 8] = *b"PIRQSIGN";
/// The one scheme defined: pure Ed25519 (RFC 8032).
pub const SCHEME_ED25519: u8 = 1;
/// Bytes of the signature tail at the end of every page under scheme 1: the page's
/// `changed_epoch` (u64 LE), then its 64-byte signature.
pub const TAIL_LEN: u32 = 72;
/// Domain separation of a page's signed message.
pub const PAGE_CONTEXT: &[u8] = b"pirq.page.v1";
/// Domain separation of an epoch manifest's signed message.
pub const MANIFEST_CONTEXT: &[u8] = b"pirq.manifest.v1";

/// Why a key, a signing block or a signed page was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    #[error("{0}")]
    Key(String),
    #[error("signing block: {0}")]
    Block(String),
    /// The page's signature does not verify under the pinned key for this database and index:
    /// tampered with, from another database or publisher, or not a page of this index.
    #[error(
        "page {index}: the signature does not verify (publisher key {publisher}, database {db_id})"
    )]
    BadSignature {
        index: u64,
        publisher: String,
        db_id: String,
    },
    /// The page claims to have changed at an epoch after the one it was served for.
    #[error("page {index} says it changed at epoch {changed}, after the answered epoch {epoch}")]
    FromTheFuture {
        index: u64,
        changed: u64,
        epoch: u64,
    },
    /// A signed manifest names a later change of this page than the version served: a rolled
    /// back (stale) page.
    #[error(
        "page {index} is the version of epoch {changed}, but the publisher's manifest of epoch \
         {later} replaced it: a stale page"
    )]
    Stale {
        index: u64,
        changed: u64,
        later: u64,
    },
    #[error("manifest: {0}")]
    Manifest(String),
}

/// The first bytes of a public key file (`docs/spec/signed.md` §1): what the file is, and the
/// version of its format. A key file says what it is, so that a secret given where a public key
/// is expected is refused instead of pinned (and printed).
pub const PUBLIC_KEY_PREFIX: &str = "pirq-publisher-public-v1:";

/// The first bytes of a secret key file.
pub const SECRET_KEY_PREFIX: &str = "pirq-publisher-secret-v1:";

/// What every pirq key file starts with, whatever its kind or version.
const KEY_FILE_PREFIX: &str = "pirq-publisher-";

/// The hex of a key file's text: after `wanted`'s prefix, or the whole text of a file written
/// before key files had prefixes (bare hex). A file of the other kind (`other`, described by
/// `mistake`) or of an unknown kind or version is refused; the message never holds key bytes.
fn key_file_hex<'a>(
    text: &'a str,
    wanted: &str,
    other: &str,
    mistake: &str,
) -> Result<&'a str, SignError> {
    let text = text.trim();
    if let Some(hex) = text.strip_prefix(wanted) {
        return Ok(hex);
    }
    if text.starts_with(other) {
        return Err(SignError::Key(mistake.into()));
    }
    if text.starts_with(KEY_FILE_PREFIX) {
        let kind: String = text
            .chars()
            .take_while(|c| *c != ':')
            .take(40)
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        return Err(SignError::Key(format!(
            "a key file of another kind or version ({kind}); this pirq reads {wanted}"
        )));
    }
    Ok(text)
}

/// The publisher's public key: what a client pins. Its file is one line:
/// [`PUBLIC_KEY_PREFIX`] then 64 lowercase hex digits (the 32-byte RFC 8032 public key); readers
/// accept surrounding white space, upper-case digits and a file of the bare hex digits (as
/// written before the prefix).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublisherKey(pub [u8; 32]);

impl PublisherKey {
    /// Parses the text of a public key file.
    pub fn parse(text: &str) -> Result<PublisherKey, SignError> {
        let text = text.trim();
        let bytes = hex::decode(text).map_err(|e| {
            SignError::Key(format!(
                "a publisher key is 64 hex digits (32 bytes), this is not hex: {e}"
            ))
        })?;
        let raw: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
            SignError::Key(format!(
                "a publisher key is 64 hex digits (32 bytes), this is {} bytes",
                b.len()
            ))
        })?;
        VerifyingKey::from_bytes(&raw)
            .map_err(|_| SignError::Key("not a valid Ed25519 public key".into()))?;
        Ok(PublisherKey(raw))
    }

    /// Parses the text of a public key file: [`PUBLIC_KEY_PREFIX`] and the key, or the bare
    /// key; a secret key file is refused without a byte of it in the message.
    pub fn parse_file(text: &str) -> Result<PublisherKey, SignError> {
        let hex = key_file_hex(
            text,
            PUBLIC_KEY_PREFIX,
            SECRET_KEY_PREFIX,
            "this is a publisher SECRET key file, not the public key: give the file `pirq \
             publisher keygen --public` wrote (the secret signs; it never goes to a client)",
        )?;
        PublisherKey::parse(hex)
    }

    /// Reads a public key file (`pirq publisher keygen --public`).
    pub fn read_file(path: &Path) -> Result<PublisherKey, SignError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| SignError::Key(format!("{}: {e}", path.display())))?;
        PublisherKey::parse_file(&text)
            .map_err(|e| SignError::Key(format!("{}: {e}", path.display())))
    }

    /// The text of a public key file: [`PUBLIC_KEY_PREFIX`], 64 lowercase hex digits and a
    /// newline.
    pub fn to_text(&self) -> String {
        format!("{PUBLIC_KEY_PREFIX}{}\n", hex::encode(self.0))
    }

    fn verifying(&self) -> VerifyingKey {
        VerifyingKey::from_bytes(&self.0).expect("checked when parsed")
    }
}

impl std::fmt::Display for PublisherKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl std::fmt::Debug for PublisherKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublisherKey({self})")
    }
}

/// The publisher's secret key: the 32-byte RFC 8032 secret (seed). Its file is one line of 64
/// hex digits, mode 0600; it is never printed, logged or shown in a `Debug`.
pub struct SecretKey(SigningKey);

impl SecretKey {
    /// A fresh key from the operating system's random source.
    pub fn generate() -> SecretKey {
        let seed: [u8; 32] = rand::random();
        SecretKey(SigningKey::from_bytes(&seed))
    }

    /// The key of a 32-byte secret (test vectors).
    pub fn from_seed(seed: [u8; 32]) -> SecretKey {
        SecretKey(SigningKey::from_bytes(&seed))
    }

    /// Reads a secret key file, refusing one that other users can read (as ssh does).
    pub fn read_file(path: &Path) -> Result<SecretKey, SignError> {
        use std::os::unix::fs::PermissionsExt;
        let err = |m: String| SignError::Key(format!("{}: {m}", path.display()));
        let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(err(format!(
                "the secret key file has mode {mode:o}, readable by others; chmod 600 it"
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let hex = key_file_hex(
            &text,
            SECRET_KEY_PREFIX,
            PUBLIC_KEY_PREFIX,
            "this is the publisher's public key file; --sign-key needs the secret key file \
             (`pirq publisher keygen --secret`)",
        )
        .map_err(|e| err(e.to_string()))?;
        let bytes = hex::decode(hex)
            .map_err(|_| err("not a secret key file (64 hex digits expected)".into()))?;
        let seed: [u8; 32] = bytes
            .try_into()
            .map_err(|_| err("not a secret key file (64 hex digits expected)".into()))?;
        Ok(SecretKey(SigningKey::from_bytes(&seed)))
    }

    /// Writes the secret key file, created 0600 and never over an existing file.
    pub fn write_file(&self, path: &Path) -> Result<(), SignError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let err = |e: std::io::Error| SignError::Key(format!("{}: {e}", path.display()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(err)?;
        file.write_all(
            format!("{SECRET_KEY_PREFIX}{}\n", hex::encode(self.0.to_bytes())).as_bytes(),
        )
        .map_err(err)?;
        file.sync_all().map_err(err)
    }

    pub fn public(&self) -> PublisherKey {
        PublisherKey(self.0.verifying_key().to_bytes())
    }

    fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.0.sign(message).to_bytes()
    }
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretKey(public {})", self.public())
    }
}

/// The signing block of a header (SPEC §2.4): who signed the pages, and which database they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SigningBlock {
    pub publisher: PublisherKey,
    /// The database's identity: random, drawn when it is first signed, kept by every later
    /// epoch, update, split and snapshot.
    pub db_id: [u8; 32],
}

impl SigningBlock {
    /// A block for a newly signed database: a fresh random `db_id`.
    pub fn new(publisher: PublisherKey) -> SigningBlock {
        SigningBlock {
            publisher,
            db_id: rand::random(),
        }
    }

    /// Bytes of the signature tail at the end of every page.
    pub fn tail_len(&self) -> u32 {
        TAIL_LEN
    }

    /// The 128 bytes of header range [`BLOCK`].
    pub fn to_block(&self) -> [u8; 128] {
        let mut out = [0u8; 128];
        out[..8].copy_from_slice(&MAGIC);
        out[8] = SCHEME_ED25519;
        out[12..16].copy_from_slice(&TAIL_LEN.to_le_bytes());
        out[16..48].copy_from_slice(&self.publisher.0);
        out[48..80].copy_from_slice(&self.db_id);
        out
    }

    /// The block of header `bytes` (at least 688 of them): `None` when it is all zero, an error
    /// for anything SPEC §2.4 does not allow (`page_size` is the header's).
    pub fn from_header(bytes: &[u8], page_size: u32) -> Result<Option<SigningBlock>, SignError> {
        let block = &bytes[BLOCK];
        if block.iter().all(|b| *b == 0) {
            return Ok(None);
        }
        let bad = |m: &str| Err(SignError::Block(m.to_string()));
        if block[..8] != MAGIC {
            return bad("unknown magic (not a pirq signing block)");
        }
        if block[8] != SCHEME_ED25519 {
            return Err(SignError::Block(format!(
                "unknown scheme {} (1 = Ed25519 is the only one defined)",
                block[8]
            )));
        }
        if block[9..12].iter().any(|b| *b != 0) || block[80..].iter().any(|b| *b != 0) {
            return bad("reserved bytes are not zero");
        }
        let tail_len = u32::from_le_bytes(block[12..16].try_into().expect("4 bytes"));
        if tail_len != TAIL_LEN {
            return Err(SignError::Block(format!(
                "tail_len {tail_len}, scheme 1 has {TAIL_LEN}"
            )));
        }
        if page_size < TAIL_LEN + 16 {
            return Err(SignError::Block(format!(
                "pages of {page_size} bytes cannot hold a {TAIL_LEN}-byte tail"
            )));
        }
        let publisher_raw: [u8; 32] = block[16..48].try_into().expect("32 bytes");
        if VerifyingKey::from_bytes(&publisher_raw).is_err() {
            return bad("publisher_key is not a valid Ed25519 public key");
        }
        Ok(Some(SigningBlock {
            publisher: PublisherKey(publisher_raw),
            db_id: block[48..80].try_into().expect("32 bytes"),
        }))
    }

    /// The `signing` object a party advertises in `/v1/info`.
    pub fn info(&self) -> SigningInfo {
        SigningInfo {
            scheme: "ed25519".into(),
            tail_len: TAIL_LEN,
            publisher_key: self.publisher.to_string(),
            db_id: hex::encode(self.db_id),
        }
    }

    /// Signs page `index` of this database as changed at `changed_epoch`: writes its tail
    /// (the last [`TAIL_LEN`] bytes of `page`) from the usable bytes before it.
    pub fn sign_page(&self, key: &SecretKey, index: u64, changed_epoch: u64, page: &mut [u8]) {
        let usable = page.len() - TAIL_LEN as usize;
        let message = page_message(&self.db_id, index, changed_epoch, &page[..usable]);
        let signature = key.sign(&message);
        page[usable..usable + 8].copy_from_slice(&changed_epoch.to_le_bytes());
        page[usable + 8..].copy_from_slice(&signature);
    }

    /// Checks page `index` (a whole stored page, tail included) against this block's key and
    /// database; returns the epoch at which the page last changed.
    pub fn verify_page(&self, index: u64, page: &[u8]) -> Result<u64, SignError> {
        let bad = || SignError::BadSignature {
            index,
            publisher: self.publisher.to_string(),
            db_id: hex::encode(self.db_id),
        };
        let usable = page.len().checked_sub(TAIL_LEN as usize).ok_or_else(bad)?;
        let changed_epoch = changed_epoch(page);
        let signature: [u8; 64] = page[usable + 8..].try_into().expect("64 bytes");
        let message = page_message(&self.db_id, index, changed_epoch, &page[..usable]);
        self.publisher
            .verifying()
            .verify_strict(&message, &Signature::from_bytes(&signature))
            .map_err(|_| bad())?;
        Ok(changed_epoch)
    }
}

/// A secret key with the signing block it signs for: what a tool that writes signed pages holds.
pub struct PageSigner {
    pub block: SigningBlock,
    key: SecretKey,
}

impl PageSigner {
    /// Signs a new database: a fresh random `db_id`.
    pub fn new(key: SecretKey) -> PageSigner {
        PageSigner {
            block: SigningBlock::new(key.public()),
            key,
        }
    }

    /// Signs more pages of an existing signed database (an update, a re-signed file): the key
    /// must be the block's publisher.
    pub fn for_block(block: SigningBlock, key: SecretKey) -> Result<PageSigner, SignError> {
        if key.public() != block.publisher {
            return Err(SignError::Key(format!(
                "the database is signed by publisher key {}, this secret key's public key is {}",
                block.publisher,
                key.public()
            )));
        }
        Ok(PageSigner { block, key })
    }

    /// Writes page `index`'s tail (see [`SigningBlock::sign_page`]).
    pub fn sign(&self, index: u64, changed_epoch: u64, page: &mut [u8]) {
        self.block.sign_page(&self.key, index, changed_epoch, page);
    }

    /// Signs an epoch manifest (§4 of `docs/spec/signed.md`).
    pub fn manifest(&self, epoch: u64, digest: Digest, pages: Vec<u64>) -> Manifest {
        Manifest::sign(&self.block, &self.key, epoch, digest, pages)
    }
}

/// The `changed_epoch` field of a signed page's tail (not checked: see
/// [`SigningBlock::verify_page`]).
pub fn changed_epoch(page: &[u8]) -> u64 {
    let at = page.len().saturating_sub(TAIL_LEN as usize);
    page.get(at..at + 8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

/// The signed message of a page (SPEC §2.4):
/// `"pirq.page.v1" || db_id || u64le(index) || u64le(changed_epoch) || usable bytes`.
pub fn page_message(db_id: &[u8; 32], index: u64, changed_epoch: u64, usable: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(PAGE_CONTEXT.len() + 48 + usable.len());
    m.extend_from_slice(PAGE_CONTEXT);
    m.extend_from_slice(db_id);
    m.extend_from_slice(&index.to_le_bytes());
    m.extend_from_slice(&changed_epoch.to_le_bytes());
    m.extend_from_slice(usable);
    m
}

/// The `signing` object of `/v1/info` (SPEC §2.4).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SigningInfo {
    pub scheme: String,
    pub tail_len: u32,
    pub publisher_key: String,
    pub db_id: String,
}

impl SigningInfo {
    /// The block this object describes, refusing anything but scheme 1.
    pub fn block(&self) -> Result<SigningBlock, SignError> {
        if self.scheme != "ed25519" || self.tail_len != TAIL_LEN {
            return Err(SignError::Block(format!(
                "scheme {:?} with a {}-byte tail is not defined (ed25519 with {TAIL_LEN} is)",
                self.scheme, self.tail_len
            )));
        }
        let publisher = PublisherKey::parse(&self.publisher_key)?;
        let db_id: [u8; 32] = hex::decode(&self.db_id)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| SignError::Block("db_id is not 64 hex digits".into()))?;
        Ok(SigningBlock { publisher, db_id })
    }
}

/// A publisher-signed epoch manifest (`docs/spec/signed.md` §4): which pages the update to
/// `epoch` replaced, and the database digest it produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    pub epoch: u64,
    /// D(epoch), SPEC §2.1.
    pub digest: Digest,
    /// The replaced page indices, ascending, each once.
    pub pages: Vec<u64>,
    pub signature: [u8; 64],
}

impl Manifest {
    /// Signs the manifest of `epoch` (`pages` are sorted and deduplicated here).
    pub fn sign(
        block: &SigningBlock,
        key: &SecretKey,
        epoch: u64,
        digest: Digest,
        mut pages: Vec<u64>,
    ) -> Manifest {
        pages.sort_unstable();
        pages.dedup();
        let signature = key.sign(&manifest_message(&block.db_id, epoch, &digest, &pages));
        Manifest {
            epoch,
            digest,
            pages,
            signature,
        }
    }

    /// Checks the signature, and that the pages are ascending and distinct.
    pub fn verify(&self, block: &SigningBlock) -> Result<(), SignError> {
        if self.pages.windows(2).any(|w| w[0] >= w[1]) {
            return Err(SignError::Manifest(format!(
                "epoch {}: page indices are not ascending and distinct",
                self.epoch
            )));
        }
        let message = manifest_message(&block.db_id, self.epoch, &self.digest, &self.pages);
        block
            .publisher
            .verifying()
            .verify_strict(&message, &Signature::from_bytes(&self.signature))
            .map_err(|_| {
                SignError::Manifest(format!(
                    "epoch {}: the signature does not verify (publisher key {})",
                    self.epoch, block.publisher
                ))
            })
    }

    /// Checks a manifest file's list (`docs/spec/signed.md` §4.2) before anything is added to
    /// it: every signature verifies under `block`, and the epochs are consecutive (epoch `e`'s
    /// manifest follows `e - 1`'s), so a client reading it never finds a gap.
    pub fn check_chain(list: &[Manifest], block: &SigningBlock) -> Result<(), SignError> {
        for m in list {
            m.verify(block)?;
        }
        if let Some(w) = list.windows(2).find(|w| w[1].epoch != w[0].epoch + 1) {
            return Err(SignError::Manifest(format!(
                "epoch {} follows epoch {}: the list has a gap",
                w[1].epoch, w[0].epoch
            )));
        }
        Ok(())
    }

    /// Whether this epoch replaced page `index`.
    pub fn replaced(&self, index: u64) -> bool {
        self.pages.binary_search(&index).is_ok()
    }
}

/// The JSON form of a manifest (`docs/spec/signed.md` §4.1), in manifest files and in
/// `GET /v1/manifests`.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestJson {
    epoch: u64,
    digest: String,
    pages: Vec<u64>,
    signature: String,
}

/// The most manifests a list may hold when read (a party's answer is bounded by bytes too).
pub const MAX_MANIFESTS: usize = 1 << 20;

impl Manifest {
    /// A JSON array of manifests (a manifest file, a `/v1/manifests` body), ascending by epoch,
    /// each epoch once. Signatures are not checked here ([`Manifest::verify`]).
    pub fn parse_list(bytes: &[u8]) -> Result<Vec<Manifest>, SignError> {
        let bad = |m: String| SignError::Manifest(m);
        let list: Vec<ManifestJson> =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("not a manifest list: {e}")))?;
        if list.len() > MAX_MANIFESTS {
            return Err(bad(format!("more than {MAX_MANIFESTS} manifests")));
        }
        let mut out: Vec<Manifest> = Vec::with_capacity(list.len());
        for m in list {
            let digest = Digest::from_hex(&m.digest)
                .ok_or_else(|| bad(format!("epoch {}: digest is not 64 hex digits", m.epoch)))?;
            let signature: [u8; 64] = hex::decode(&m.signature)
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| {
                    bad(format!(
                        "epoch {}: signature is not 128 hex digits",
                        m.epoch
                    ))
                })?;
            if out.last().is_some_and(|last| last.epoch >= m.epoch) {
                return Err(bad(format!("epoch {} is out of order", m.epoch)));
            }
            out.push(Manifest {
                epoch: m.epoch,
                digest,
                pages: m.pages,
                signature,
            });
        }
        Ok(out)
    }

    /// The JSON array of `manifests` (see [`Manifest::parse_list`]).
    pub fn list_to_json(manifests: &[Manifest]) -> Vec<u8> {
        let list: Vec<ManifestJson> = manifests
            .iter()
            .map(|m| ManifestJson {
                epoch: m.epoch,
                digest: m.digest.to_hex(),
                pages: m.pages.clone(),
                signature: hex::encode(m.signature),
            })
            .collect();
        let mut out = serde_json::to_vec_pretty(&list).expect("plain data serializes");
        out.push(b'\n');
        out
    }
}

/// The signed message of an epoch manifest:
/// `"pirq.manifest.v1" || db_id || u64le(epoch) || digest || u64le(k) || k × u64le(index)`.
pub fn manifest_message(db_id: &[u8; 32], epoch: u64, digest: &Digest, pages: &[u64]) -> Vec<u8> {
    let mut m = Vec::with_capacity(MANIFEST_CONTEXT.len() + 80 + pages.len() * 8);
    m.extend_from_slice(MANIFEST_CONTEXT);
    m.extend_from_slice(db_id);
    m.extend_from_slice(&epoch.to_le_bytes());
    m.extend_from_slice(&digest.0);
    m.extend_from_slice(&(pages.len() as u64).to_le_bytes());
    for p in pages {
        m.extend_from_slice(&p.to_le_bytes());
    }
    m
}

/// Checks a verified page's freshness: it was served at `epoch`, says it changed at
/// `changed`, and no manifest of an epoch in `changed + 1 ..= epoch` may name it. `manifests`
/// must be verified and cover every epoch of that range the client has not already checked.
pub fn check_fresh(
    index: u64,
    changed: u64,
    epoch: u64,
    manifests: &[Manifest],
) -> Result<(), SignError> {
    if changed > epoch {
        return Err(SignError::FromTheFuture {
            index,
            changed,
            epoch,
        });
    }
    if let Some(later) = manifests
        .iter()
        .filter(|m| m.epoch > changed && m.epoch <= epoch)
        .find(|m| m.replaced(index))
    {
        return Err(SignError::Stale {
            index,
            changed,
            later: later.epoch,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block() -> (SecretKey, SigningBlock) {
        let key = SecretKey::from_seed([7; 32]);
        let block = SigningBlock {
            publisher: key.public(),
            db_id: [9; 32],
        };
        (key, block)
    }

    /// Issue 36, item 6: key files say what they are; a secret where a public key is expected
    /// (and the other way round) is refused without a byte of the key in the message; bare-hex
    /// files still load.
    #[test]
    fn key_files_say_what_they_are_and_a_secret_is_never_pinned() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let key = SecretKey::from_seed([0x88; 32]);
        let (secret, public) = (dir.path().join("secret"), dir.path().join("public"));
        key.write_file(&secret).unwrap();
        std::fs::write(&public, key.public().to_text()).unwrap();
        let secret_text = std::fs::read_to_string(&secret).unwrap();
        assert!(secret_text.starts_with(SECRET_KEY_PREFIX), "{secret_text}");
        assert!(key.public().to_text().starts_with(PUBLIC_KEY_PREFIX));
        assert_eq!(PublisherKey::read_file(&public).unwrap(), key.public());
        assert_eq!(
            SecretKey::read_file(&secret).unwrap().public(),
            key.public()
        );

        let e = PublisherKey::read_file(&secret).unwrap_err().to_string();
        assert!(e.contains("SECRET key file") && !e.contains("8888"), "{e}");
        std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = SecretKey::read_file(&public).err().unwrap().to_string();
        assert!(e.contains("public key file"), "{e}");
        let e = PublisherKey::parse_file("pirq-publisher-public-v9:abcd").unwrap_err();
        assert!(e.to_string().contains("pirq-publisher-public-v9"), "{e}");

        // Bare hex, as written before the prefix: both kinds still load.
        let bare = dir.path().join("bare");
        std::fs::write(&bare, format!("{}\n", "88".repeat(32))).unwrap();
        std::fs::set_permissions(&bare, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(SecretKey::read_file(&bare).unwrap().public(), key.public());
        std::fs::write(&public, format!("{}\n", key.public())).unwrap();
        assert_eq!(PublisherKey::read_file(&public).unwrap(), key.public());
    }

    #[test]
    fn a_signed_page_verifies_and_any_flipped_bit_is_refused() {
        let (key, block) = block();
        let mut page: Vec<u8> = (0..256u32).map(|i| i as u8).collect();
        block.sign_page(&key, 5, 3, &mut page);
        assert_eq!(block.verify_page(5, &page), Ok(3));
        assert!(block.verify_page(4, &page).is_err(), "another index");
        for bit in (0..page.len() * 8).step_by(37) {
            let mut bad = page.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(block.verify_page(5, &bad).is_err(), "bit {bit}");
        }
        let other = SigningBlock {
            db_id: [8; 32],
            ..block
        };
        assert!(other.verify_page(5, &page).is_err(), "another database");
    }

    #[test]
    fn the_block_round_trips_and_malformed_blocks_are_refused() {
        let (_, block) = block();
        let mut header = vec![0u8; 4096];
        assert_eq!(SigningBlock::from_header(&header, 4096), Ok(None));
        header[BLOCK].copy_from_slice(&block.to_block());
        assert_eq!(SigningBlock::from_header(&header, 4096), Ok(Some(block)));
        assert!(SigningBlock::from_header(&header, 64).is_err());
        for at in [560, 568, 569, 572, 650] {
            let mut bad = header.clone();
            bad[at] ^= 0x40;
            assert!(SigningBlock::from_header(&bad, 4096).is_err(), "byte {at}");
        }
        assert_eq!(block.info().block(), Ok(block));
    }

    #[test]
    fn key_text_round_trips_and_junk_is_refused() {
        let (key, _) = block();
        let public = key.public();
        assert_eq!(PublisherKey::parse_file(&public.to_text()), Ok(public));
        // Files of the bare hex digits (before the prefix) still load.
        assert_eq!(PublisherKey::parse_file(&format!("{public}\n")), Ok(public));
        assert!(PublisherKey::parse("zz").is_err());
        assert!(PublisherKey::parse(&"ab".repeat(31)).is_err());
        assert!(!format!("{key:?}").contains(&hex::encode([7u8; 32])));
    }

    #[test]
    fn manifests_name_stale_pages() {
        let (key, block) = block();
        let m = Manifest::sign(&block, &key, 2, Digest([1; 32]), vec![9, 3, 3]);
        assert_eq!(m.pages, vec![3, 9]);
        m.verify(&block).unwrap();
        let mut forged = m.clone();
        forged.pages = vec![3];
        assert!(forged.verify(&block).is_err());
        assert!(check_fresh(3, 2, 2, std::slice::from_ref(&m)).is_ok());
        assert!(check_fresh(4, 0, 2, std::slice::from_ref(&m)).is_ok());
        assert_eq!(
            check_fresh(3, 1, 2, std::slice::from_ref(&m)),
            Err(SignError::Stale {
                index: 3,
                changed: 1,
                later: 2
            })
        );
        assert!(check_fresh(3, 3, 2, &[]).is_err());
    }
}
