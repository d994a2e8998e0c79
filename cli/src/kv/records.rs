//! Record files for `pirq kv build` (and `kv diff`, `bench load --kv-records`) and change files
//! for `pirq kv update`, read as streams.
//!
//! Formats (`--format`, else from the file name's extension, else JSON lines):
//! - JSON lines: `{"key":"…","value":…}` per line (blank lines skipped); a set's records are
//!   `{"key":"…"}`. The value is a JSON string in the value encoding, or any JSON value when
//!   the values are JSON (stored as compact JSON text);
//! - lines (`.txt`): one key a line, a set (blank lines and a final newline ignored, a line's
//!   `\r` before its newline too);
//! - CSV (RFC 4180 quoting, the `csv` crate): a key column and a value column. A first line that
//!   names the columns is a header: `key,value` (`key` for a set), or the names given with
//!   `--key-column`/`--value-column`, which then must be there. Without names the columns are the
//!   first two;
//! - fixed-width binary: `key_size` key bytes then `value_size` value bytes, per record.
//!
//! Keys and values in JSON, CSV and lines are text in an [`Encoding`] (KV §3.0): the text's own
//! UTF-8 bytes unless told, taken exactly as written; hex; base64; values also JSON.
//!
//! Every error names its line (record number for binary files) so a bad record can be found.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

pub use pirq_shared::kv::Encoding;
use pirq_shared::kv::ValueKind;
use serde_json::Value;

/// A record file's encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// JSON lines: {"key":"…","value":…} ({"key":"…"} for a set)
    Jsonl,
    /// One key a line: a set
    Lines,
    /// key and value columns, a header line naming them (--key-column, --value-column)
    Csv,
    /// fixed-width: key bytes then value bytes (needs --key-size)
    Bin,
}

impl Format {
    /// `--format` if given, else by extension (`.csv`, `.bin`, `.txt`), else JSON lines.
    pub fn pick(given: Option<Format>, path: &Path) -> Format {
        given.unwrap_or_else(|| match path.extension().and_then(|e| e.to_str()) {
            Some("csv") => Format::Csv,
            Some("bin") => Format::Bin,
            Some("txt") => Format::Lines,
            _ => Format::Jsonl,
        })
    }
}

/// `--key-encoding`'s parser: an [`Encoding`] that keys may have (not JSON).
pub fn key_encoding(text: &str) -> Result<Encoding, String> {
    let e: Encoding = text.parse()?;
    if !e.for_keys() {
        return Err("keys are utf8 (text), hex or base64: JSON is for values".into());
    }
    Ok(e)
}

/// `--value-encoding`'s parser.
pub fn value_encoding(text: &str) -> Result<Encoding, String> {
    text.parse()
}

/// The encodings a record file's keys and values are read in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encodings {
    pub key: Encoding,
    pub value: Encoding,
}

impl Default for Encodings {
    /// Text keys and text values: how users hold their data.
    fn default() -> Self {
        Encodings {
            key: Encoding::Utf8,
            value: Encoding::Utf8,
        }
    }
}

impl Encodings {
    /// Hex keys and values (tables built before encodings were recorded, binary records).
    pub const HEX: Encodings = Encodings {
        key: Encoding::Hex,
        value: Encoding::Hex,
    };

    /// How a table's recorded encodings read (not recorded: hex).
    pub fn of_table(recorded: pirq_shared::kv::Encodings) -> Encodings {
        Encodings {
            key: recorded.key_or_hex(),
            value: recorded.value_or_hex(),
        }
    }
}

/// CSV columns by name (`--key-column`, `--value-column`); none: the first two.
#[derive(Clone, Debug, Default)]
pub struct Columns {
    pub key: Option<String>,
    pub value: Option<String>,
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

/// Records of a file, in order.
pub struct Records {
    source: Source,
    sizes: Sizes,
    encodings: Encodings,
    line: u64,
}

/// Where a CSV file's key and value are, once its first line has been seen.
struct CsvLayout {
    key: usize,
    value: Option<usize>,
    /// Fields of the header line, when there is one: every record has as many.
    width: Option<usize>,
}

enum Source {
    Jsonl(Box<dyn BufRead + Send>, String),
    Lines(Box<dyn BufRead + Send>, String),
    Csv {
        reader: csv::Reader<Box<dyn BufRead + Send>>,
        record: csv::StringRecord,
        columns: Columns,
        layout: Option<CsvLayout>,
    },
    Bin(Box<dyn BufRead + Send>, Vec<u8>),
}

/// The column names of a header line without `--key-column`/`--value-column`.
fn csv_header(kind: ValueKind) -> &'static [&'static str] {
    match kind {
        ValueKind::Set => &["key"],
        ValueKind::Fixed | ValueKind::Variable => &["key", "value"],
    }
}

/// Whether a first CSV line is a header, and where the key and value are. With column names
/// the line must name them; without, it is a header when it is `key,value` (`key` for a set).
fn csv_layout<'f>(
    first: impl Iterator<Item = &'f str> + Clone,
    columns: &Columns,
    kind: ValueKind,
) -> Result<(CsvLayout, bool), String> {
    let names: Vec<&str> = first.map(str::trim).collect();
    let wants_value = kind != ValueKind::Set;
    if columns.key.is_none() && columns.value.is_none() {
        let is_header = names
            .iter()
            .map(|n| n.to_ascii_lowercase())
            .eq(csv_header(kind).iter().map(|h| h.to_string()));
        let layout = CsvLayout {
            key: 0,
            value: wants_value.then_some(1),
            width: is_header.then_some(names.len()),
        };
        return Ok((layout, is_header));
    }
    let find = |flag: &str, name: &str| {
        names.iter().position(|n| *n == name).ok_or_else(|| {
            format!(
                "{flag} {name:?} is not a column of the header line (its columns: {})",
                names.join(", ")
            )
        })
    };
    let key = match &columns.key {
        Some(name) => find("--key-column", name)?,
        None => 0,
    };
    let value = match (&columns.value, wants_value) {
        (_, false) => None,
        (Some(name), true) => Some(find("--value-column", name)?),
        (None, true) => Some(if key == 0 { 1 } else { 0 }),
    };
    if value.is_some_and(|v| v >= names.len()) {
        return Err(format!(
            "the header line has {} column(s): name the value column with --value-column",
            names.len()
        ));
    }
    let layout = CsvLayout {
        key,
        value,
        width: Some(names.len()),
    };
    Ok((layout, true))
}

impl Records {
    pub fn new(
        input: Box<dyn BufRead + Send>,
        format: Format,
        sizes: Sizes,
        encodings: Encodings,
        columns: Columns,
    ) -> Records {
        let source = match format {
            Format::Jsonl => Source::Jsonl(input, String::new()),
            Format::Lines => Source::Lines(input, String::new()),
            // Fields are not trimmed here: a UTF-8 key is taken exactly as written. Hex and
            // base64 fields are trimmed when they are decoded.
            Format::Csv => Source::Csv {
                reader: csv::ReaderBuilder::new()
                    .has_headers(false)
                    .flexible(true)
                    .from_reader(input),
                record: csv::StringRecord::new(),
                columns,
                layout: None,
            },
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
            Source::Lines(input, buf) => loop {
                buf.clear();
                self.line += 1;
                match input.read_line(buf) {
                    Ok(0) => return None,
                    Ok(_) if buf.trim().is_empty() => continue,
                    Ok(_) => {
                        let line = buf.strip_suffix('\n').unwrap_or(buf);
                        let line = line.strip_suffix('\r').unwrap_or(line);
                        break decode(enc.key, "key", line).map(|k| (k, Some(Vec::new())));
                    }
                    Err(e) => break Err(format!("reading: {e}")),
                }
            },
            Source::Csv {
                reader,
                record,
                columns,
                layout,
            } => {
                match reader.read_record(record) {
                    Ok(false) => return None,
                    Ok(true) => {}
                    Err(e) => {
                        self.line = e.position().map_or(self.line + 1, |p| p.line());
                        return Some(Err(self.error(format!("bad CSV: {e}"))));
                    }
                }
                self.line = record.position().map_or(self.line + 1, |p| p.line());
                if layout.is_none() {
                    match csv_layout(record.iter(), columns, kind) {
                        Ok((found, is_header)) => {
                            *layout = Some(found);
                            if is_header {
                                return self.next_entry(changes);
                            }
                        }
                        Err(message) => return Some(Err(self.error(message))),
                    }
                }
                parse_csv(record, layout.as_ref().expect("set above"), kind, enc)
            }
            Source::Bin(input, buf) => {
                self.line += 1;
                match pirq_db::import::read_full(input, buf) {
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

/// `text` in `encoding`, the error naming the field, the encoding and the flag that sets it.
fn decode(encoding: Encoding, what: &str, text: &str) -> Result<Vec<u8>, String> {
    encoding.decode(text).map_err(|e| {
        let shown: String = text.chars().take(40).collect();
        format!(
            "{what} {shown:?} is {e} (the {what}s are read as {encoding}: --{what}-encoding \
             utf8|hex|base64{})",
            if what == "value" { "|json" } else { "" }
        )
    })
}

fn parse_csv(
    record: &csv::StringRecord,
    layout: &CsvLayout,
    kind: ValueKind,
    enc: Encodings,
) -> Result<(Vec<u8>, Option<Vec<u8>>), String> {
    let needed = layout.value.map_or(layout.key, |v| v.max(layout.key)) + 1;
    match layout.width {
        Some(width) if record.len() != width => {
            return Err(format!(
                "{} fields, the header line has {width}",
                record.len()
            ))
        }
        None if record.len() != needed => {
            return Err(format!(
                "{} fields, expected {} ({})",
                record.len(),
                needed,
                csv_header(kind).join(",")
            ))
        }
        _ => {}
    }
    let key = decode(enc.key, "key", &record[layout.key])?;
    let value = match layout.value {
        None => Vec::new(),
        Some(v) => decode(enc.value, "value", &record[v])?,
    };
    Ok((key, Some(value)))
}

/// The name of a JSON value's type, for errors.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
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
        (_, false) => r#"{"key":"…","value":…}"#,
        (_, true) => r#"{"key":"…","value":…} or {"key":"…","delete":true}"#,
    };
    let hint = " (a file of one key a line is --format lines)";
    let parsed: Value = serde_json::from_str(line)
        .map_err(|e| format!("not {expected}: {e}{}", if changes { "" } else { hint }))?;
    let Value::Object(mut fields) = parsed else {
        return Err(format!(
            "a JSON {}, not {expected}{}",
            json_type(&parsed),
            if changes { "" } else { hint }
        ));
    };
    if let Some(other) = fields
        .keys()
        .find(|k| !["key", "value", "delete"].contains(&k.as_str()))
    {
        return Err(format!("unknown field {other:?}: write {expected}"));
    }
    let key = match fields.remove("key") {
        Some(Value::String(k)) => decode(enc.key, "key", &k)?,
        Some(other) => {
            return Err(format!(
                "the key is a JSON {}: keys are strings ({expected})",
                json_type(&other)
            ))
        }
        None => return Err(format!("no \"key\": write {expected}")),
    };
    let delete = match fields.remove("delete") {
        None | Some(Value::Bool(false)) => false,
        Some(Value::Bool(true)) => true,
        Some(_) => return Err("\"delete\" is true or false".into()),
    };
    match (kind, fields.remove("value"), delete) {
        (ValueKind::Set, None, false) => Ok((key, Some(Vec::new()))),
        (ValueKind::Set, Some(_), _) => Err(format!(
            "a value, but this table is a set (keys only): write {expected}"
        )),
        (ValueKind::Fixed | ValueKind::Variable, Some(v), false) => {
            Ok((key, Some(json_value(v, enc.value)?)))
        }
        (_, None, true) if changes => Ok((key, None)),
        _ => Err(format!("not {expected}")),
    }
}

/// A JSON line's value as bytes: any JSON value as its compact text when the values are JSON,
/// else a string in the value encoding.
fn json_value(v: Value, encoding: Encoding) -> Result<Vec<u8>, String> {
    match (encoding, v) {
        (Encoding::Json, v) => Ok(v.to_string().into_bytes()),
        (_, Value::String(s)) => decode(encoding, "value", &s),
        (_, other) => Err(format!(
            "the value is a JSON {}, and values are read as {encoding} strings: values of any \
             JSON type need --value-encoding json (a table built with it)",
            json_type(&other)
        )),
    }
}

/// Records in a file without decoding them (to size a table before the build): non-blank lines
/// (JSON lines), CSV records less a header line, length over record size (binary).
pub fn count(path: &Path, format: Format, sizes: Sizes, columns: &Columns) -> anyhow::Result<u64> {
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
            let mut record = csv::ByteRecord::new();
            let mut records = 0u64;
            let mut first = true;
            while reader.read_byte_record(&mut record)? {
                if std::mem::take(&mut first) {
                    let fields: Vec<String> = record
                        .iter()
                        .map(|f| String::from_utf8_lossy(f).into_owned())
                        .collect();
                    let header = csv_layout(fields.iter().map(String::as_str), columns, sizes.kind)
                        .is_ok_and(|(_, is_header)| is_header);
                    if header {
                        continue;
                    }
                }
                records += 1;
            }
            Ok(records)
        }
        Format::Jsonl | Format::Lines => {
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
        read_as(text, format, sizes, Encodings::HEX)
    }

    fn read_as(
        text: &[u8],
        format: Format,
        sizes: Sizes,
        encodings: Encodings,
    ) -> Vec<Result<Record, RecordError>> {
        read_with(text, format, sizes, encodings, Columns::default())
    }

    fn read_with(
        text: &[u8],
        format: Format,
        sizes: Sizes,
        encodings: Encodings,
        columns: Columns,
    ) -> Vec<Result<Record, RecordError>> {
        let input = Box::new(io::Cursor::new(text.to_vec()));
        let mut r = Records::new(input, format, sizes, encodings, columns);
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
            err(&got[3]).starts_with("line 4: value \"A-Q\" is not base64"),
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
            Encoding::Base64.decode("////").unwrap(),
            vec![255, 255, 255]
        );
        assert_eq!(Encoding::Base64.encode(&[255, 255]).unwrap(), "//8=");
        assert_eq!(Encoding::Utf8.encode(&[0xff]), None);
    }

    #[test]
    fn csv_in_utf8_keeps_spaces_and_quotes() {
        let utf8 = Encodings {
            key: Encoding::Utf8,
            value: Encoding::Utf8,
        };
        let text = "key,value\n alice ,\"a, b\"\n\"two\nlines\",v\n";
        let got = read_as(text.as_bytes(), Format::Csv, VARIABLE, utf8);
        assert_eq!(ok(&got[0]), (2, b" alice ".to_vec(), b"a, b".to_vec()));
        assert_eq!(ok(&got[1]).1, b"two\nlines".to_vec());
        assert_eq!(got.len(), 2);
        // Without a header line the first line is a record.
        let got = read_as(b"alice,v\n", Format::Csv, VARIABLE, utf8);
        assert_eq!(ok(&got[0]), (1, b"alice".to_vec(), b"v".to_vec()));
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
        assert_eq!(err(&got[0]), "line 1: 2 fields, expected 1 (key)");
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
        assert_eq!(
            count(&csv, Format::Csv, VARIABLE, &Columns::default()).unwrap(),
            2
        );
        std::fs::write(&csv, "key\n0a\n0b\n0c\n").unwrap();
        assert_eq!(
            count(&csv, Format::Csv, SET, &Columns::default()).unwrap(),
            3
        );
        std::fs::write(&csv, "0a,01\n").unwrap();
        assert_eq!(
            count(&csv, Format::Csv, SIZES, &Columns::default()).unwrap(),
            1
        );
        let jsonl = dir.path().join("r.jsonl");
        std::fs::write(&jsonl, "{\"key\":\"0a\"}\n\n{\"key\":\"0b\"}\n").unwrap();
        assert_eq!(
            count(&jsonl, Format::Jsonl, SET, &Columns::default()).unwrap(),
            2
        );
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
        assert!(
            errs[0].starts_with("line 3: key \"zz\" is not hex"),
            "{}",
            errs[0]
        );
        assert_eq!(
            errs[1],
            "line 4: value is 2 bytes, this table's values are 3"
        );
        assert_eq!(errs[2], "line 5: key is 1 bytes, this table's keys are 2");
        assert!(
            errs[3].starts_with("line 6: a JSON array, not {\"key\""),
            "{}",
            errs[3]
        );
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
            Encodings::HEX,
            Columns::default(),
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

    #[test]
    fn text_keys_and_values_by_default() {
        // The issue's trap: a text key that looks like hex stays the text.
        let text = b"{\"key\":\"1234\",\"value\":\"abcd\"}\n";
        let got = read_as(text, Format::Jsonl, VARIABLE, Encodings::default());
        assert_eq!(ok(&got[0]), (1, b"1234".to_vec(), b"abcd".to_vec()));
        // A key that cannot be hex names the encoding and the flag.
        let got = read(
            b"{\"key\":\"alice\",\"value\":\"00\"}\n",
            Format::Jsonl,
            VARIABLE,
        );
        let e = err(&got[0]);
        assert!(e.contains("key \"alice\" is not hex"), "{e}");
        assert!(e.contains("read as hex: --key-encoding"), "{e}");
    }

    #[test]
    fn json_values_of_any_type_are_stored_compact() {
        let json = Encodings {
            key: Encoding::Utf8,
            value: Encoding::Json,
        };
        let big = Sizes {
            value_size: 100,
            ..VARIABLE
        };
        let text = "{\"key\":\"a\",\"value\":{\"b\": [1, 2.5, null], \"a\": true}}\n\
                    {\"key\":\"n\",\"value\":42}\n\
                    {\"key\":\"s\",\"value\":\"x y\"}\n\
                    {\"key\":\"z\",\"value\":null}\n";
        let got = read_as(text.as_bytes(), Format::Jsonl, big, json);
        assert_eq!(ok(&got[0]).2, br#"{"a":true,"b":[1,2.5,null]}"#.to_vec());
        assert_eq!(ok(&got[1]).2, b"42".to_vec());
        assert_eq!(ok(&got[2]).2, br#""x y""#.to_vec());
        assert_eq!(ok(&got[3]).2, b"null".to_vec());
        // Text values refuse other JSON types, naming the flag.
        let got = read_as(
            b"{\"key\":\"a\",\"value\":{\"b\":1}}\n",
            Format::Jsonl,
            big,
            Encodings::default(),
        );
        let e = err(&got[0]);
        assert!(e.starts_with("line 1: the value is a JSON object"), "{e}");
        assert!(e.contains("--value-encoding json"), "{e}");
        // CSV fields are JSON text under JSON values.
        let got = read_as(b"key,value\na,\"[1, 2]\"\n", Format::Csv, big, json);
        assert_eq!(ok(&got[0]).2, b"[1,2]".to_vec());
    }

    #[test]
    fn lines_are_a_set() {
        let text = b"5e884898da28\n\n  \r\nalice smith\r\nlast";
        let got = read_as(text, Format::Lines, SET, Encodings::default());
        assert_eq!(got.len(), 3);
        assert_eq!(ok(&got[0]), (1, b"5e884898da28".to_vec(), vec![]));
        assert_eq!(ok(&got[1]), (4, b"alice smith".to_vec(), vec![]));
        assert_eq!(ok(&got[2]).1, b"last".to_vec());
        let got = read(b"0a0b\nzz\n", Format::Lines, SET);
        assert_eq!(ok(&got[0]).1, vec![10, 11]);
        assert!(err(&got[1]).starts_with("line 2: key \"zz\" is not hex"));
        // A list fed as JSON lines says what it is.
        let got = read(b"5\n", Format::Jsonl, SET);
        assert!(err(&got[0]).contains("--format lines"), "{}", err(&got[0]));
        assert_eq!(Format::pick(None, Path::new("hashes.txt")), Format::Lines);
    }

    #[test]
    fn csv_columns_by_name() {
        let text = "id,email,name\n1,a@x.org,\"Smith, Ann\"\n2,b@x.org,Bob\n";
        let cols = |k: Option<&str>, v: Option<&str>| Columns {
            key: k.map(Into::into),
            value: v.map(Into::into),
        };
        let utf8 = Encodings::default();
        let got = read_with(
            text.as_bytes(),
            Format::Csv,
            VARIABLE_BIG,
            utf8,
            cols(Some("email"), Some("name")),
        );
        assert_eq!(
            ok(&got[0]),
            (2, b"a@x.org".to_vec(), b"Smith, Ann".to_vec())
        );
        assert_eq!(ok(&got[1]).2, b"Bob".to_vec());
        // Only the key column named: the value is the first other column.
        let got = read_with(
            text.as_bytes(),
            Format::Csv,
            VARIABLE_BIG,
            utf8,
            cols(Some("email"), None),
        );
        assert_eq!(ok(&got[0]).2, b"1".to_vec());
        let got = read_with(
            text.as_bytes(),
            Format::Csv,
            VARIABLE_BIG,
            utf8,
            cols(Some("mail"), None),
        );
        assert_eq!(
            err(&got[0]),
            "line 1: --key-column \"mail\" is not a column of the header line (its columns: id, \
             email, name)"
        );
        // A set by a named column of a hashes file.
        let got = read_with(
            b"hash\nabc\n",
            Format::Csv,
            SET,
            utf8,
            cols(Some("hash"), None),
        );
        assert_eq!(got.len(), 1);
        assert_eq!(ok(&got[0]), (2, b"abc".to_vec(), vec![]));
        // Without names: a `key,value` header is skipped, else the first two columns.
        let got = read_as(b"Key,Value\na,1\n", Format::Csv, VARIABLE_BIG, utf8);
        assert_eq!(ok(&got[0]).1, b"a".to_vec());
        let got = read_as(b"a,1\nb,2,3\n", Format::Csv, VARIABLE_BIG, utf8);
        assert_eq!(ok(&got[0]), (1, b"a".to_vec(), b"1".to_vec()));
        assert_eq!(err(&got[1]), "line 2: 3 fields, expected 2 (key,value)");
        // A record of another width than the header names its line.
        let got = read_with(
            text.as_bytes(),
            Format::Csv,
            VARIABLE_BIG,
            utf8,
            cols(Some("id"), None),
        );
        assert!(got.iter().all(|r| r.is_ok()));
        let got = read_with(
            b"a,b\n1\n",
            Format::Csv,
            VARIABLE_BIG,
            utf8,
            cols(Some("a"), None),
        );
        assert_eq!(err(&got[0]), "line 2: 1 fields, the header line has 2");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.csv");
        std::fs::write(&path, text).unwrap();
        assert_eq!(
            count(&path, Format::Csv, VARIABLE_BIG, &cols(Some("email"), None)).unwrap(),
            2
        );
    }

    const VARIABLE_BIG: Sizes = Sizes {
        key_size: 0,
        kind: ValueKind::Variable,
        value_size: 100,
    };
}
