//! Record files for `pirq kv build` and change files for `pirq kv update`, read as streams.
//!
//! Formats (`--format`, else from the file name's extension, else JSON lines):
//! - JSON lines: `{"key":"<hex>","value":"<hex>"}` per line (blank lines skipped);
//! - CSV: `key,value` with hex fields, an optional `key,value` header line;
//! - fixed-width binary: `key_size` key bytes then `value_size` value bytes, per record.
//!
//! Every error names its line (record number for binary files) so a bad record can be found.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use serde::Deserialize;

/// A record file's encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// JSON lines: {"key":"<hex>","value":"<hex>"}
    Jsonl,
    /// key,value (hex), optional header line
    Csv,
    /// fixed-width: key bytes then value bytes (needs --key-size)
    Bin,
}

impl Format {
    /// `--format` if given, else by extension (`.csv`, `.bin`), else JSON lines.
    pub fn pick(given: Option<Format>, path: &Path) -> Format {
        given.unwrap_or_else(|| match path.extension().and_then(|e| e.to_str()) {
            Some("csv") => Format::Csv,
            Some("bin") => Format::Bin,
            _ => Format::Jsonl,
        })
    }
}

/// A record and where it was read.
pub struct Record {
    /// 1-based line (JSON lines, CSV) or record number (binary).
    pub line: u64,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// A line of a change file: a value to set, or `None` to delete the key.
pub struct Change {
    pub line: u64,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// A bad record: where, and why.
#[derive(Debug, thiserror::Error)]
#[error("{where_} {line}: {message}", where_ = if *.binary { "record" } else { "line" })]
pub struct RecordError {
    pub line: u64,
    pub binary: bool,
    pub message: String,
}

/// The sizes a record must have: `key_size` 0 = any length in 1..=1024.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    pub key_size: usize,
    pub value_size: usize,
}

impl Sizes {
    fn check(&self, key: &[u8], value: Option<&[u8]>) -> Result<(), String> {
        if self.key_size != 0 && key.len() != self.key_size {
            return Err(format!(
                "key is {} bytes, this table's keys are {}",
                key.len(),
                self.key_size
            ));
        }
        if key.is_empty() || key.len() > pirq_shared::kv::layout::MAX_KEY_LEN as usize {
            return Err(format!(
                "key is {} bytes: keys are 1..=1024 bytes",
                key.len()
            ));
        }
        if let Some(v) = value {
            if v.len() != self.value_size {
                return Err(format!(
                    "value is {} bytes, this table's values are {}",
                    v.len(),
                    self.value_size
                ));
            }
        }
        Ok(())
    }
}

/// `path`, or standard input for `-`, buffered.
pub fn open(path: &Path) -> anyhow::Result<Box<dyn BufRead + Send>> {
    if path == Path::new("-") {
        return Ok(Box::new(BufReader::with_capacity(1 << 20, io::stdin())));
    }
    let file = File::open(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(Box::new(BufReader::with_capacity(1 << 20, file)))
}

fn unhex(what: &str, text: &str) -> Result<Vec<u8>, String> {
    hex::decode(text.trim()).map_err(|e| format!("{what} is not hex: {e}"))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRecord {
    key: String,
    value: Option<String>,
    #[serde(default)]
    delete: bool,
}

/// Records of a file, in order.
pub struct Records {
    source: Source,
    sizes: Sizes,
    line: u64,
}

enum Source {
    Jsonl(Box<dyn BufRead + Send>, String),
    Csv(csv::Reader<Box<dyn BufRead + Send>>, csv::StringRecord),
    Bin(Box<dyn BufRead + Send>, Vec<u8>),
}

impl Records {
    pub fn new(input: Box<dyn BufRead + Send>, format: Format, sizes: Sizes) -> Records {
        let source = match format {
            Format::Jsonl => Source::Jsonl(input, String::new()),
            Format::Csv => Source::Csv(
                csv::ReaderBuilder::new()
                    .has_headers(false)
                    .trim(csv::Trim::All)
                    .from_reader(input),
                csv::StringRecord::new(),
            ),
            Format::Bin => Source::Bin(input, vec![0; sizes.key_size + sizes.value_size]),
        };
        Records {
            source,
            sizes,
            line: 0,
        }
    }

    fn error(&self, message: String) -> RecordError {
        RecordError {
            line: self.line,
            binary: matches!(self.source, Source::Bin(..)),
            message,
        }
    }

    /// The next record, `None` at the end of the input.
    pub fn next_record(&mut self) -> Option<Result<Record, RecordError>> {
        self.next_entry(false).map(|r| {
            r.map(|c| Record {
                line: c.line,
                key: c.key,
                value: c.value.expect("records have values"),
            })
        })
    }

    /// The next change (JSON lines only): a value to set, or `None` to delete the key.
    pub fn next_change(&mut self) -> Option<Result<Change, RecordError>> {
        self.next_entry(true)
    }

    fn next_entry(&mut self, changes: bool) -> Option<Result<Change, RecordError>> {
        let parsed = match &mut self.source {
            Source::Jsonl(input, buf) => loop {
                buf.clear();
                self.line += 1;
                match input.read_line(buf) {
                    Ok(0) => return None,
                    Ok(_) if buf.trim().is_empty() => continue,
                    Ok(_) => break parse_json(buf, changes),
                    Err(e) => break Err(format!("reading: {e}")),
                }
            },
            Source::Csv(reader, record) => {
                match reader.read_record(record) {
                    Ok(false) => return None,
                    Ok(true) => {}
                    Err(e) => {
                        self.line = e.position().map_or(self.line + 1, |p| p.line());
                        return Some(Err(self.error(format!("bad CSV: {e}"))));
                    }
                }
                self.line = record.position().map_or(self.line + 1, |p| p.line());
                if self.line == 1
                    && record.len() == 2
                    && &record[0] == "key"
                    && &record[1] == "value"
                {
                    return self.next_entry(changes);
                }
                if record.len() != 2 {
                    Err(format!("{} fields, expected key,value", record.len()))
                } else {
                    unhex("key", &record[0])
                        .and_then(|k| Ok((k, Some(unhex("value", &record[1])?))))
                }
            }
            Source::Bin(input, buf) => {
                self.line += 1;
                match read_full(input, buf) {
                    Ok(0) => return None,
                    Ok(n) if n < buf.len() => Err(format!(
                        "the file ends inside a record ({n} of {} bytes)",
                        buf.len()
                    )),
                    Ok(_) => {
                        let (k, v) = buf.split_at(self.sizes.key_size);
                        Ok((k.to_vec(), Some(v.to_vec())))
                    }
                    Err(e) => Err(format!("reading: {e}")),
                }
            }
        };
        let checked = parsed.and_then(|(key, value)| {
            self.sizes.check(&key, value.as_deref())?;
            Ok(Change {
                line: self.line,
                key,
                value,
            })
        });
        Some(checked.map_err(|m| self.error(m)))
    }
}

fn parse_json(line: &str, changes: bool) -> Result<(Vec<u8>, Option<Vec<u8>>), String> {
    let expected = if changes {
        r#"{"key":"<hex>","value":"<hex>"} or {"key":"<hex>","delete":true}"#
    } else {
        r#"{"key":"<hex>","value":"<hex>"}"#
    };
    let r: JsonRecord = serde_json::from_str(line).map_err(|e| format!("not {expected}: {e}"))?;
    let key = unhex("key", &r.key)?;
    match (r.value, r.delete) {
        (Some(v), false) => Ok((key, Some(unhex("value", &v)?))),
        (None, true) if changes => Ok((key, None)),
        _ => Err(format!("not {expected}")),
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
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

/// Records in a file without parsing them (to size a table before the build): non-blank lines
/// (JSON lines), lines without a header (CSV), length over record size (binary).
pub fn count(path: &Path, format: Format, sizes: Sizes) -> anyhow::Result<u64> {
    match format {
        Format::Bin => {
            let len = std::fs::metadata(path)?.len();
            Ok(len / (sizes.key_size + sizes.value_size) as u64)
        }
        Format::Jsonl | Format::Csv => {
            let mut input = open(path)?;
            let mut lines = 0u64;
            let mut first = true;
            let mut buf = Vec::new();
            loop {
                buf.clear();
                if input.read_until(b'\n', &mut buf)? == 0 {
                    break;
                }
                let blank = buf.iter().all(|b| b.is_ascii_whitespace());
                let header = first && format == Format::Csv && buf.starts_with(b"key,value");
                first = false;
                if !blank && !header {
                    lines += 1;
                }
            }
            Ok(lines)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &[u8], format: Format, sizes: Sizes) -> Vec<Result<Record, RecordError>> {
        let mut r = Records::new(Box::new(io::Cursor::new(text.to_vec())), format, sizes);
        std::iter::from_fn(|| r.next_record()).collect()
    }

    const SIZES: Sizes = Sizes {
        key_size: 2,
        value_size: 3,
    };

    #[test]
    fn jsonl_records_and_errors() {
        let text = b"{\"key\":\"0a0b\",\"value\":\"010203\"}\n\n{\"key\":\"zz\",\"value\":\"010203\"}\n{\"key\":\"0a0c\",\"value\":\"0102\"}\n{\"key\":\"0a\",\"value\":\"010203\"}\n[1]\n";
        let got = read(text, Format::Jsonl, SIZES);
        assert_eq!(got.len(), 5);
        let first = got[0].as_ref().unwrap();
        assert_eq!(
            (first.line, &first.key[..], &first.value[..]),
            (1, &[10u8, 11][..], &[1u8, 2, 3][..])
        );
        let errs: Vec<String> = got[1..]
            .iter()
            .map(|r| r.as_ref().err().unwrap().to_string())
            .collect();
        assert!(errs[0].starts_with("line 3: key is not hex"), "{}", errs[0]);
        assert_eq!(
            errs[1],
            "line 4: value is 2 bytes, this table's values are 3"
        );
        assert_eq!(errs[2], "line 5: key is 1 bytes, this table's keys are 2");
        assert!(errs[3].starts_with("line 6: not {\"key\""), "{}", errs[3]);
    }

    #[test]
    fn csv_records_with_and_without_header() {
        let text = b"key,value\n0a0b,010203\n 0a0c , 040506 \n0a0d\n";
        let got = read(text, Format::Csv, SIZES);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].as_ref().unwrap().line, 2);
        assert_eq!(got[1].as_ref().unwrap().value, vec![4, 5, 6]);
        let e = got[2].as_ref().err().unwrap().to_string();
        assert!(e.starts_with("line 4:"), "{e}");
        let got = read(b"0a0b,010203\n", Format::Csv, SIZES);
        assert_eq!(got[0].as_ref().unwrap().line, 1);
    }

    #[test]
    fn binary_records_and_a_short_tail() {
        let text = [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        let got = read(&text, Format::Bin, SIZES);
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].as_ref().unwrap().key, vec![6, 7]);
        assert_eq!(
            got[2].as_ref().err().unwrap().to_string(),
            "record 3: the file ends inside a record (2 of 5 bytes)"
        );
    }

    #[test]
    fn changes_set_and_delete() {
        let text = b"{\"key\":\"0a0b\",\"value\":\"010203\"}\n{\"key\":\"0a0b\",\"delete\":true}\n{\"key\":\"0a0b\"}\n";
        let mut r = Records::new(
            Box::new(io::Cursor::new(text.to_vec())),
            Format::Jsonl,
            SIZES,
        );
        assert_eq!(r.next_change().unwrap().unwrap().value, Some(vec![1, 2, 3]));
        assert_eq!(r.next_change().unwrap().unwrap().value, None);
        assert!(r.next_change().unwrap().is_err());
        assert!(r.next_change().is_none());
        // A record file does not take deletes.
        let got = read(
            b"{\"key\":\"0a0b\",\"delete\":true}\n",
            Format::Jsonl,
            SIZES,
        );
        assert!(got[0].is_err());
    }
}
