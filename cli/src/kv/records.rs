//! Record files for `pirq kv build` and change files for `pirq kv update`, read as streams.
//!
//! Formats (`--format`, else from the file name's extension, else JSON lines):
//! - JSON lines: `{"key":"…","value":"…"}` per line (blank lines skipped); a set's records
//!   are `{"key":"…"}`;
//! - CSV (RFC 4180 quoting): `key,value` records, a set's just `key`; a header line naming the
//!   columns (`key,value` or `key`), optional while both encodings are hex (no hex field reads
//!   `key`) and required otherwise, where a first record could look like a header;
//! - fixed-width binary: `key_size` key bytes then `value_size` value bytes, per record.
//!
//! Keys and values in JSON and CSV are text in an [`Encoding`] (`--key-encoding`,
//! `--value-encoding`; hex unless told, so older record files keep their meaning): hex, base64,
//! or the text's own UTF-8 bytes, taken exactly as written (KV §3.0).
//!
//! Every error names its line (record number for binary files) so a bad record can be found.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use base64::Engine;
use pirq_shared::kv::ValueKind;
use serde::Deserialize;

/// A record file's encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// JSON lines: {"key":"…","value":"…"} ({"key":"…"} for a set)
    Jsonl,
    /// key,value (key for a set), with a header line naming the columns
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

/// How a key or value is written as text (KV §3.0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Encoding {
    /// Two hex digits per byte, either case.
    Hex,
    /// RFC 4648 standard base64, padding optional.
    Base64,
    /// The text's UTF-8 bytes, exactly as written (no trimming or normalisation).
    Utf8,
}

/// Base64 as KV §3.0 takes it: the standard alphabet, with or without `=` padding.
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

impl Encoding {
    /// The bytes `text` stands for; `what` names the field in the error.
    pub fn decode(self, what: &str, text: &str) -> Result<Vec<u8>, String> {
        match self {
            Encoding::Hex => {
                hex::decode(text.trim()).map_err(|e| format!("{what} is not hex: {e}"))
            }
            Encoding::Base64 => BASE64
                .decode(text.trim())
                .map_err(|e| format!("{what} is not base64: {e}")),
            Encoding::Utf8 => Ok(text.as_bytes().to_vec()),
        }
    }

    /// `bytes` written in this encoding; `None` when they are not UTF-8 and it is [`Utf8`].
    ///
    /// [`Utf8`]: Encoding::Utf8
    pub fn encode(self, bytes: &[u8]) -> Option<String> {
        match self {
            Encoding::Hex => Some(hex::encode(bytes)),
            Encoding::Base64 => Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
            Encoding::Utf8 => String::from_utf8(bytes.to_vec()).ok(),
        }
    }
}

/// The encodings of a record file's keys and values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encodings {
    pub key: Encoding,
    pub value: Encoding,
}

impl Default for Encodings {
    fn default() -> Self {
        Encodings {
            key: Encoding::Hex,
            value: Encoding::Hex,
        }
    }
}

/// A record and where it was read.
pub struct Record {
    /// 1-based line (JSON lines, CSV) or record number (binary).
    pub line: u64,
    pub key: Vec<u8>,
    /// Empty for a set's record.
    pub value: Vec<u8>,
}

/// A line of a change file: a value to set (empty for a set's key), or `None` to delete the key.
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

/// What a record must look like: `key_size` 0 = any length in 1..=1024; the value as the
/// table's kind says (`value_size` bytes, none for a set, at most `value_size` for variable).
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    pub key_size: usize,
    pub kind: ValueKind,
    pub value_size: usize,
}

impl Sizes {
    /// Bytes of one binary record (a variable-size table has no binary form).
    fn binary_len(&self) -> usize {
        self.key_size + self.value_size
    }

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
        let Some(v) = value else { return Ok(()) };
        match self.kind {
            ValueKind::Fixed if v.len() != self.value_size => Err(format!(
                "value is {} bytes, this table's values are {}",
                v.len(),
                self.value_size
            )),
            ValueKind::Variable if v.len() > self.value_size => Err(format!(
                "value is {} bytes, more than this table's largest, {} (--max-value-size)",
                v.len(),
                self.value_size
            )),
            _ => Ok(()),
        }
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
    encodings: Encodings,
    line: u64,
}

enum Source {
    Jsonl(Box<dyn BufRead + Send>, String),
    Csv(csv::Reader<Box<dyn BufRead + Send>>, csv::StringRecord),
    Bin(Box<dyn BufRead + Send>, Vec<u8>),
}

/// The header line a CSV file of this kind starts with.
fn csv_header(kind: ValueKind) -> &'static [&'static str] {
    match kind {
        ValueKind::Set => &["key"],
        ValueKind::Fixed | ValueKind::Variable => &["key", "value"],
    }
}

impl Records {
    pub fn new(
        input: Box<dyn BufRead + Send>,
        format: Format,
        sizes: Sizes,
        encodings: Encodings,
    ) -> Records {
        let source = match format {
            Format::Jsonl => Source::Jsonl(input, String::new()),
            // Fields are not trimmed here: a UTF-8 key is taken exactly as written. Hex and
            // base64 fields are trimmed when they are decoded.
            Format::Csv => Source::Csv(
                csv::ReaderBuilder::new()
                    .has_headers(false)
                    .flexible(true)
                    .from_reader(input),
                csv::StringRecord::new(),
            ),
            Format::Bin => Source::Bin(input, vec![0; sizes.binary_len()]),
        };
        Records {
            source,
            sizes,
            encodings,
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
        let (kind, enc) = (self.sizes.kind, self.encodings);
        let parsed = match &mut self.source {
            Source::Jsonl(input, buf) => loop {
                buf.clear();
                self.line += 1;
                match input.read_line(buf) {
                    Ok(0) => return None,
                    Ok(_) if buf.trim().is_empty() => continue,
                    Ok(_) => break parse_json(buf, changes, kind, enc),
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
                let first = self.line == 0;
                self.line = record.position().map_or(self.line + 1, |p| p.line());
                let header = csv_header(kind);
                let is_header = record.iter().map(str::trim).eq(header.iter().copied());
                if first && is_header {
                    return self.next_entry(changes);
                }
                if first && enc != Encodings::default() {
                    Err(format!(
                        "the first line must be the header `{}`: with --key-encoding or \
                         --value-encoding other than hex, a first record could read as a header",
                        header.join(",")
                    ))
                } else {
                    parse_csv(record, kind, enc)
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

fn parse_csv(
    record: &csv::StringRecord,
    kind: ValueKind,
    enc: Encodings,
) -> Result<(Vec<u8>, Option<Vec<u8>>), String> {
    let expected = csv_header(kind);
    if record.len() != expected.len() {
        return Err(format!(
            "{} fields, expected {}",
            record.len(),
            expected.join(",")
        ));
    }
    let key = enc.key.decode("key", &record[0])?;
    let value = match kind {
        ValueKind::Set => Vec::new(),
        ValueKind::Fixed | ValueKind::Variable => enc.value.decode("value", &record[1])?,
    };
    Ok((key, Some(value)))
}

fn parse_json(
    line: &str,
    changes: bool,
    kind: ValueKind,
    enc: Encodings,
) -> Result<(Vec<u8>, Option<Vec<u8>>), String> {
    let expected = match (kind, changes) {
        (ValueKind::Set, false) => r#"{"key":"…"}"#,
        (ValueKind::Set, true) => r#"{"key":"…"} or {"key":"…","delete":true}"#,
        (_, false) => r#"{"key":"…","value":"…"}"#,
        (_, true) => r#"{"key":"…","value":"…"} or {"key":"…","delete":true}"#,
    };
    let r: JsonRecord = serde_json::from_str(line).map_err(|e| format!("not {expected}: {e}"))?;
    let key = enc.key.decode("key", &r.key)?;
    match (kind, r.value, r.delete) {
        (ValueKind::Set, None, false) => Ok((key, Some(Vec::new()))),
        (ValueKind::Set, Some(_), _) => Err(format!(
            "a value, but this table is a set (keys only): write {expected}"
        )),
        (ValueKind::Fixed | ValueKind::Variable, Some(v), false) => {
            Ok((key, Some(enc.value.decode("value", &v)?)))
        }
        (_, None, true) if changes => Ok((key, None)),
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

/// Records in a file without decoding them (to size a table before the build): non-blank lines
/// (JSON lines), CSV records less a header line, length over record size (binary).
pub fn count(path: &Path, format: Format, sizes: Sizes) -> anyhow::Result<u64> {
    match format {
        Format::Bin => {
            let len = std::fs::metadata(path)?.len();
            Ok(len / sizes.binary_len().max(1) as u64)
        }
        Format::Csv => {
            // Parsed (not split at newlines): a quoted UTF-8 field may hold a line break.
            let mut reader = csv::ReaderBuilder::new()
                .has_headers(false)
                .flexible(true)
                .from_reader(open(path)?);
            let header = csv_header(sizes.kind);
            let mut record = csv::ByteRecord::new();
            let mut records = 0u64;
            while reader.read_byte_record(&mut record)? {
                let is_header = records == 0
                    && record
                        .iter()
                        .map(|f| f.trim_ascii())
                        .eq(header.iter().map(|h| h.as_bytes()));
                if !is_header {
                    records += 1;
                }
            }
            Ok(records)
        }
        Format::Jsonl => {
            let mut input = open(path)?;
            let mut lines = 0u64;
            let mut buf = Vec::new();
            loop {
                buf.clear();
                if input.read_until(b'\n', &mut buf)? == 0 {
                    break;
                }
                if !buf.iter().all(|b| b.is_ascii_whitespace()) {
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
        read_as(text, format, sizes, Encodings::default())
    }

    fn read_as(
        text: &[u8],
        format: Format,
        sizes: Sizes,
        encodings: Encodings,
    ) -> Vec<Result<Record, RecordError>> {
        let input = Box::new(io::Cursor::new(text.to_vec()));
        let mut r = Records::new(input, format, sizes, encodings);
        std::iter::from_fn(|| r.next_record()).collect()
    }

    const SIZES: Sizes = Sizes {
        key_size: 2,
        kind: ValueKind::Fixed,
        value_size: 3,
    };

    const SET: Sizes = Sizes {
        key_size: 0,
        kind: ValueKind::Set,
        value_size: 0,
    };

    const VARIABLE: Sizes = Sizes {
        key_size: 0,
        kind: ValueKind::Variable,
        value_size: 4,
    };

    fn ok(r: &Result<Record, RecordError>) -> (u64, Vec<u8>, Vec<u8>) {
        let r = r.as_ref().unwrap();
        (r.line, r.key.clone(), r.value.clone())
    }

    fn err(r: &Result<Record, RecordError>) -> String {
        r.as_ref().err().unwrap().to_string()
    }

    #[test]
    fn keys_and_values_in_every_encoding() {
        let utf8 = Encodings {
            key: Encoding::Utf8,
            value: Encoding::Base64,
        };
        // JSON escapes are decoded; the text is taken as written: spaces, case and the two
        // spellings of é stay apart.
        let text = "{\"key\":\"Caf\\u00e9 \",\"value\":\"AQID\"}\n\
                    {\"key\":\"Cafe\u{301}\",\"value\":\"AQI=\"}\n\
                    {\"key\":\"x\",\"value\":\"AQ\"}\n\
                    {\"key\":\"y\",\"value\":\"A-Q\"}\n";
        let got = read_as(text.as_bytes(), Format::Jsonl, VARIABLE, utf8);
        assert_eq!(ok(&got[0]), (1, "Café ".as_bytes().to_vec(), vec![1, 2, 3]));
        assert_eq!(ok(&got[1]).1, b"Cafe\xcc\x81".to_vec());
        assert_eq!(ok(&got[2]).2, vec![1], "unpadded base64");
        assert!(
            err(&got[3]).starts_with("line 4: value is not base64"),
            "{}",
            err(&got[3])
        );
        // Hex either case.
        let got = read(
            b"{\"key\":\"0A0b\",\"value\":\"FFfe00\"}\n",
            Format::Jsonl,
            SIZES,
        );
        assert_eq!(ok(&got[0]).1, vec![10, 11]);
        assert_eq!(
            Encoding::Base64.decode("key", "////").unwrap(),
            vec![255, 255, 255]
        );
        assert_eq!(Encoding::Base64.encode(&[255, 255]).unwrap(), "//8=");
        assert_eq!(Encoding::Utf8.encode(&[0xff]), None);
    }

    #[test]
    fn csv_in_utf8_needs_its_header_and_keeps_spaces() {
        let utf8 = Encodings {
            key: Encoding::Utf8,
            value: Encoding::Utf8,
        };
        let text = "key,value\n alice ,\"a, b\"\n\"two\nlines\",v\n";
        let got = read_as(text.as_bytes(), Format::Csv, VARIABLE, utf8);
        assert_eq!(ok(&got[0]), (2, b" alice ".to_vec(), b"a, b".to_vec()));
        assert_eq!(ok(&got[1]).1, b"two\nlines".to_vec());
        assert_eq!(got.len(), 2);
        let got = read_as(b"alice,v\n", Format::Csv, VARIABLE, utf8);
        assert!(err(&got[0]).contains("the first line must be the header `key,value`"));
        let got = read_as(b"key,value\nbob,toolong\n", Format::Csv, VARIABLE, utf8);
        assert_eq!(
            err(&got[0]),
            "line 2: value is 7 bytes, more than this table's largest, 4 (--max-value-size)"
        );
        let got = read_as(b"key,value\n\xff,v\n", Format::Csv, VARIABLE, utf8);
        assert!(
            err(&got[0]).starts_with("line 2: bad CSV"),
            "{}",
            err(&got[0])
        );
    }

    #[test]
    fn sets_have_keys_only() {
        let got = read(b"key\n0a0b\n0c\n", Format::Csv, SET);
        assert_eq!(ok(&got[0]), (2, vec![10, 11], vec![]));
        assert_eq!(ok(&got[1]).1, vec![12]);
        let got = read(b"0a0b,01\n", Format::Csv, SET);
        assert_eq!(err(&got[0]), "line 1: 2 fields, expected key");
        let got = read(
            b"{\"key\":\"0a\"}\n{\"key\":\"0b\",\"value\":\"01\"}\n",
            Format::Jsonl,
            SET,
        );
        assert_eq!(ok(&got[0]).2, Vec::<u8>::new());
        assert!(
            err(&got[1]).contains("this table is a set"),
            "{}",
            err(&got[1])
        );
        let bin = Sizes { key_size: 2, ..SET };
        let got = read(&[1, 2, 3, 4], Format::Bin, bin);
        assert_eq!(ok(&got[1]), (2, vec![3, 4], vec![]));
    }

    #[test]
    fn counts_match_what_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("r.csv");
        std::fs::write(&csv, "key,value\n\"a\nb\",v\nc,d\n").unwrap();
        assert_eq!(count(&csv, Format::Csv, VARIABLE).unwrap(), 2);
        std::fs::write(&csv, "key\n0a\n0b\n0c\n").unwrap();
        assert_eq!(count(&csv, Format::Csv, SET).unwrap(), 3);
        std::fs::write(&csv, "0a,01\n").unwrap();
        assert_eq!(count(&csv, Format::Csv, SIZES).unwrap(), 1);
        let jsonl = dir.path().join("r.jsonl");
        std::fs::write(&jsonl, "{\"key\":\"0a\"}\n\n{\"key\":\"0b\"}\n").unwrap();
        assert_eq!(count(&jsonl, Format::Jsonl, SET).unwrap(), 2);
    }

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
            Encodings::default(),
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
