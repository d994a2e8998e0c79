//! A user's own bytes as a page database (`pirq db import`, SPEC §2.3): the bytes cut into
//! pages of the usable size, the last one zero-padded, and their length recorded in the header
//! so the padding can be told from the data.
//!
//! The input is read once, as a stream (standard input works), and written without a mapping,
//! so a full disk is an error and not a signal. The content digest needs the page count up
//! front: when the input's length is known (a file) the pages are hashed as they go out, else
//! the written pages are read back once to hash them.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::format::{DIGEST_RANGE, HEADER_LEN, MAX_PAGES, PAGES_DIGEST_RANGE};
use crate::header::header_bytes;
use crate::write::write_atomically_with;
use crate::{DbError, Header, Meta};
use pirq_shared::digest::Digest;

/// What an import wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Imported {
    /// Bytes of data read (the header's `data_len`).
    pub data_len: u64,
    pub num_pages: u64,
    pub digest: Digest,
}

/// Pages read and written per step.
const CHUNK_BYTES: usize = 16 << 20;

/// Writes `input`'s bytes to `out` as a database of `page_size`-byte pages at epoch 0
/// (atomically, see [`super::write_atomically`]). `input_name` names the input in errors;
/// `known_len` is its length when known in advance (a regular file: then it must not change
/// while it is read). `progress(bytes_read)` is called after each chunk.
pub fn import(
    out: &Path,
    input: impl Read,
    input_name: &str,
    known_len: Option<u64>,
    page_size: u32,
    signer: Option<&pirq_shared::signing::PageSigner>,
    mut progress: impl FnMut(u64),
) -> Result<Imported, DbError> {
    // The geometry is checked before anything is read or created.
    Header {
        page_size,
        num_pages: 1,
        epoch: 0,
    }
    .validate()?;
    let ps = page_size as usize;
    // The usable bytes of a page (SPEC §2.5): all of it, less the tail of a signed database.
    let usable = ps - signer.map_or(0, |s| s.block.tail_len() as usize);
    let pages_for = |len: u64| len.div_ceil(usable as u64);
    if let Some(len) = known_len {
        check_len(len, pages_for(len), input_name)?;
    }
    let mut input = BufReader::with_capacity(1 << 20, input);
    let out_io = |source| DbError::Io {
        path: out.to_path_buf(),
        error: source,
    };
    let in_io = |source: io::Error| DbError::Input(format!("reading {input_name}: {source}"));
    write_atomically_with(out, |file| {
        file.write_all(&[0u8; HEADER_LEN]).map_err(out_io)?;
        let mut hasher = known_len.map(|len| Digest::content_hasher(page_size, pages_for(len), 0));
        let mut chunk = vec![0u8; (CHUNK_BYTES / ps).max(1) * ps];
        let (mut data_len, mut num_pages) = (0u64, 0u64);
        loop {
            let mut filled = 0;
            let mut ended = false;
            for page in chunk.chunks_mut(ps) {
                let n = read_full(&mut input, &mut page[..usable]).map_err(in_io)?;
                if n == 0 {
                    ended = true;
                    break;
                }
                page[n..].fill(0);
                data_len += n as u64;
                filled += 1;
                if n < usable {
                    ended = true;
                    break;
                }
            }
            if let Some(signer) = signer {
                use rayon::prelude::*;
                let first = num_pages;
                chunk[..filled * ps]
                    .par_chunks_mut(ps)
                    .enumerate()
                    .for_each(|(i, page)| signer.sign(first + i as u64, 0, page));
            }
            num_pages += filled as u64;
            if num_pages > MAX_PAGES {
                return Err(DbError::Input(format!(
                    "{input_name} is more than 2^40 pages of {page_size} bytes: use larger pages"
                )));
            }
            let bytes = &chunk[..filled * ps];
            if let Some(h) = hasher.as_mut() {
                h.update(bytes);
            }
            file.write_all(bytes).map_err(out_io)?;
            progress(data_len);
            if ended {
                break;
            }
        }
        if known_len.is_some_and(|len| len != data_len) {
            return Err(DbError::Input(format!(
                "{input_name} changed while it was read: {} bytes expected, {data_len} read",
                known_len.unwrap_or_default()
            )));
        }
        check_len(data_len, num_pages, input_name)?;
        let header = Header {
            page_size,
            num_pages,
            epoch: 0,
        };
        let meta = Meta {
            kv: None,
            data_len,
            signing: signer.map(|s| s.block),
        };
        let mut head = header_bytes(&header, &meta, num_pages)?;
        let digest = match hasher {
            Some(h) => h.finish(),
            None => hash_written(file, &header).map_err(out_io)?,
        };
        head[DIGEST_RANGE].copy_from_slice(&digest.0);
        head[PAGES_DIGEST_RANGE].copy_from_slice(&digest.0);
        file.seek(SeekFrom::Start(0)).map_err(out_io)?;
        file.write_all(&head).map_err(out_io)?;
        Ok(Imported {
            data_len,
            num_pages,
            digest,
        })
    })
}

/// Refuses an input with nothing in it or more pages than a database holds.
fn check_len(len: u64, pages: u64, input_name: &str) -> Result<(), DbError> {
    if len == 0 {
        return Err(DbError::Input(format!(
            "{input_name} is empty: there is nothing to import"
        )));
    }
    if pages > MAX_PAGES {
        return Err(DbError::Input(format!(
            "{input_name} ({len} bytes) is more than 2^40 pages: use larger pages"
        )));
    }
    Ok(())
}

/// The content digest of the pages just written to `file` (read back once).
fn hash_written(file: &mut File, header: &Header) -> io::Result<Digest> {
    let mut hasher = Digest::content_hasher(header.page_size, header.num_pages, header.epoch);
    file.seek(SeekFrom::Start(HEADER_LEN as u64))?;
    let mut reader = file.take(header.pages_len());
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        let n = read_full(&mut reader, &mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finish())
}

/// Reads until `buf` is full or the input ends; returns the bytes read (`Read::read_exact`
/// without the error at the end: a short last chunk is data). `pirq kv build` reads binary
/// records with it too.
pub fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PirDb;

    fn import_bytes(
        data: &[u8],
        known: bool,
        page_size: u32,
    ) -> (PirDb, Imported, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("i.pirdb");
        let len = known.then_some(data.len() as u64);
        let imported = import(&out, data, "input", len, page_size, None, |_| {}).unwrap();
        (PirDb::open(&out).unwrap(), imported, dir)
    }

    #[test]
    fn bytes_become_padded_pages_with_their_length() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8 + 1).collect();
        for known in [true, false] {
            let (db, imported, _dir) = import_bytes(&data, known, 256);
            assert_eq!(imported.num_pages, 4);
            assert_eq!(imported.data_len, 1000);
            assert_eq!(db.data_len(), 1000);
            assert_eq!(&db.pages()[..1000], &data[..]);
            assert!(db.pages()[1000..].iter().all(|b| *b == 0));
            // The digest recorded is the content digest, hashed inline or read back.
            assert_eq!(db.recorded_digest(), Some(db.content_digest()));
            assert_eq!(imported.digest, db.content_digest());
        }
        // Exactly whole pages: no padding page.
        let (db, imported, _dir) = import_bytes(&data[..512], true, 256);
        assert_eq!((imported.num_pages, db.data_len()), (2, 512));
    }

    #[test]
    fn empty_inputs_and_bad_page_sizes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("e.pirdb");
        for known in [Some(0), None] {
            let err = import(&out, &[][..], "empty.bin", known, 256, None, |_| {}).unwrap_err();
            assert_eq!(
                err.to_string(),
                "empty.bin is empty: there is nothing to import"
            );
        }
        assert!(import(&out, &[1u8][..], "x", Some(1), 300, None, |_| {}).is_err());
        assert!(!out.exists());
        // Nothing but the (refused) output was ever created: no temporary file is left.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn an_input_that_changes_length_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("c.pirdb");
        let err = import(&out, &[1u8; 300][..], "grown", Some(200), 256, None, |_| {}).unwrap_err();
        assert!(
            err.to_string().contains("changed while it was read"),
            "{err}"
        );
        assert!(!out.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
