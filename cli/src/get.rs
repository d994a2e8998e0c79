//! `pirq get`: look keys up privately in a kv database served by two parties.
//!
//! Keys are read the way the table records its keys (KV §2: text for tables built now, hex for
//! tables that record nothing), so `--key alice` finds the record built from `"key":"alice"`;
//! `--key-text` and `--key-hex` override that per key. Values print the way they were given:
//! text as text, JSON as JSON, bytes as hex (`--value-format` overrides).
//!
//! Output and exit status follow grep: one line per key, in the order given (`--key`, then
//! `--key-text`, then `--key-hex`, then `--keys-file`) — the value (a set: `present`), or
//! `absent`; exit 0 when every key was found, 1 when any is absent, 2 on an error (nothing is
//! printed on stdout then). `--json` prints one object a key instead: {"key", "value" (null
//! when absent; "" for a set's present key), "epoch", "digest"}.
//!
//! A keys file is looked up in batches of as many lookups as one query per party carries, all
//! pinned to the first batch's epoch, with a progress bar on a terminal and one summary line
//! on standard error otherwise.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use pirq_client::{Client, KvEncoding as Encoding, KvParams, ValueKind};
use serde_json::Value;

use crate::output::{BytesAs, JsonLine};
use crate::parties::{self, PartiesArgs};

#[derive(clap::Args, Debug)]
#[command(group = clap::ArgGroup::new("any_keys").required(true).multiple(true).args(["keys", "key_texts", "key_hexes", "keys_file"]))]
pub struct GetArgs {
    #[command(flatten)]
    pub parties: PartiesArgs,
    /// Key to look up, written the way the table's keys are (text unless the table records
    /// hex or base64; --key-encoding overrides). Repeat for several (all keys go out as one
    /// query per party, split only where a party's key limit says so).
    #[arg(long = "key")]
    pub keys: Vec<String>,
    /// Key to look up as text: the key is the string's UTF-8 bytes, exactly as given (no
    /// normalisation), whatever the table records. Repeatable.
    #[arg(long = "key-text")]
    pub key_texts: Vec<String>,
    /// Key to look up as hex digits, whatever the table records. Repeatable.
    #[arg(long = "key-hex")]
    pub key_hexes: Vec<String>,
    /// A file of keys, one a line (`-` for standard input), written as --key's; empty lines
    /// are skipped.
    #[arg(long, value_name = "FILE")]
    pub keys_file: Option<PathBuf>,
    /// How --key and --keys-file lines write a key (default: as the table records).
    #[arg(long, value_parser = crate::kv::records::key_encoding, value_name = "utf8|hex|base64")]
    pub key_encoding: Option<Encoding>,
    /// How values are printed (default: as the table records them: text, json, hex or base64;
    /// hex for a table that records nothing). raw writes one value's bytes as they are.
    #[arg(long, value_enum)]
    pub value_format: Option<ValueFormat>,
    /// One JSON object per key on standard output: {"key", "value", "epoch", "digest"}.
    #[arg(long)]
    pub json: bool,
    /// With --json: write keys and values as hex or base64 strings, whatever the table records.
    #[arg(long, value_enum, requires = "json")]
    pub bytes: Option<BytesAs>,
    /// No progress bar for a keys file, even on a terminal (the summary line stays).
    #[arg(long)]
    pub quiet: bool,
}

/// How `pirq get` prints a value.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueFormat {
    /// The value's bytes as they are (one key only).
    Raw,
    Hex,
    Base64,
    /// UTF-8 text.
    Text,
    /// JSON text.
    Json,
}

impl ValueFormat {
    /// How a table's recorded value encoding prints.
    pub fn of(encoding: Encoding) -> ValueFormat {
        match encoding {
            Encoding::Utf8 => ValueFormat::Text,
            Encoding::Json => ValueFormat::Json,
            Encoding::Hex => ValueFormat::Hex,
            Encoding::Base64 => ValueFormat::Base64,
        }
    }
}

/// Runs `pirq get` and exits with its status.
pub fn run(args: GetArgs) -> ! {
    let code = match lookup(&args).and_then(|found| print(&args, &found)) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) if crate::output::is_broken_pipe(&e) => crate::output::BROKEN_PIPE_STATUS,
        Err(e) => {
            eprintln!("error: {e:#}");
            2
        }
    };
    std::process::exit(code)
}

/// A key as given: its bytes and how it was written (to write it back in `--json`).
struct Key {
    bytes: Vec<u8>,
    written: Encoding,
}

/// `text` as a key in `encoding`; the error names the encoding and the flag that changes it.
fn decode_key(text: &str, encoding: Encoding, whence: &str, table: bool) -> anyhow::Result<Key> {
    let bytes = encoding.decode(text).map_err(|e| {
        let shown: String = text.chars().take(40).collect();
        let hint = match (encoding, table) {
            (Encoding::Utf8, _) => String::new(),
            (_, true) => format!(
                ": this table's keys are {encoding} (recorded in the table); for the text \
                 {shown:?} use --key-text"
            ),
            (_, false) => format!(" (--key-encoding {encoding}); for text use --key-text"),
        };
        anyhow::anyhow!("{whence}: key {shown:?} is {e}{hint}")
    })?;
    Ok(Key {
        bytes,
        written: encoding,
    })
}

/// Keys from `--key` (in `key_encoding`, else the table's), `--key-text` and `--key-hex`, in
/// that order: their bytes (`pirq kv get` reads keys as `pirq get` does).
pub fn read_keys(
    keys: &[String],
    texts: &[String],
    hexes: &[String],
    key_encoding: Option<Encoding>,
    params: &KvParams,
) -> anyhow::Result<Vec<Vec<u8>>> {
    Ok(command_line_keys(keys, texts, hexes, key_encoding, params)?
        .into_iter()
        .map(|k| k.bytes)
        .collect())
}

fn command_line_keys(
    keys: &[String],
    texts: &[String],
    hexes: &[String],
    key_encoding: Option<Encoding>,
    params: &KvParams,
) -> anyhow::Result<Vec<Key>> {
    let (encoding, from_table) = match key_encoding {
        Some(e) => (e, false),
        None => (params.encodings().key_or_hex(), true),
    };
    let mut out = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        out.push(decode_key(
            k,
            encoding,
            &format!("--key number {}", i + 1),
            from_table,
        )?);
    }
    for t in texts {
        out.push(Key {
            bytes: t.as_bytes().to_vec(),
            written: Encoding::Utf8,
        });
    }
    for (i, h) in hexes.iter().enumerate() {
        out.push(decode_key(
            h,
            Encoding::Hex,
            &format!("--key-hex number {}", i + 1),
            false,
        )?);
    }
    Ok(out)
}

/// The keys, from `--key`, `--key-text`, `--key-hex` then `--keys-file`, read against the
/// table's recorded key encoding.
fn keys(args: &GetArgs, params: &KvParams) -> anyhow::Result<Vec<Key>> {
    let mut keys = command_line_keys(
        &args.keys,
        &args.key_texts,
        &args.key_hexes,
        args.key_encoding,
        params,
    )?;
    let (encoding, from_table) = match args.key_encoding {
        Some(e) => (e, false),
        None => (params.encodings().key_or_hex(), true),
    };
    if let Some(path) = &args.keys_file {
        let reader: Box<dyn BufRead> = if path.as_os_str() == "-" {
            Box::new(std::io::stdin().lock())
        } else {
            let file = std::fs::File::open(path)
                .with_context(|| format!("opening --keys-file {}", path.display()))?;
            Box::new(std::io::BufReader::new(file))
        };
        for (i, line) in reader.lines().enumerate() {
            let line = line.with_context(|| format!("reading {}", path.display()))?;
            let line = line.strip_suffix('\r').unwrap_or(&line);
            if line.is_empty() {
                continue;
            }
            let whence = format!("{} line {}", path.display(), i + 1);
            keys.push(decode_key(line, encoding, &whence, from_table)?);
        }
    }
    anyhow::ensure!(!keys.is_empty(), "no keys to look up");
    Ok(keys)
}

/// What was looked up, and what came back.
struct Found {
    keys: Vec<Key>,
    values: Vec<Option<Vec<u8>>>,
    kind: ValueKind,
    value_encoding: Encoding,
    epoch: u64,
    digest: Option<pirq_client::Digest>,
}

fn lookup(args: &GetArgs) -> anyhow::Result<Found> {
    let client = args.parties.client(args.parties.options())?;
    let runtime = parties::runtime()?;
    let (params, _, max_keys) = runtime.block_on(client.kv_layout(None))?;
    let keys = keys(args, &params)?;
    if args.value_format == Some(ValueFormat::Raw) && (keys.len() != 1 || args.json) {
        bail!("--value-format raw writes one value's bytes as they are: give one key, no --json");
    }
    // A keys file goes in batches so that progress can be shown; keys on the command line go
    // in one call.
    let batch = if args.keys_file.is_some() {
        (max_keys / params.choices()).max(1)
    } else {
        keys.len()
    };
    let progress = crate::output::Progress::new(
        args.keys_file.is_some().then_some(keys.len() as u64),
        "keys",
        args.quiet,
    );
    let start = Instant::now();
    let (values, epoch, digest) =
        runtime.block_on(get_in_batches(&client, &keys, batch, &progress))?;
    let found = values.iter().filter(|v| v.is_some()).count();
    progress.finish(&format!(
        "looked up {} keys: {found} found, {} absent, {:.1} s",
        keys.len(),
        keys.len() - found,
        start.elapsed().as_secs_f64()
    ));
    Ok(Found {
        keys,
        values,
        kind: params.kind(),
        value_encoding: params.encodings().value_or_hex(),
        epoch,
        digest,
    })
}

type Looked = (Vec<Option<Vec<u8>>>, u64, Option<pirq_client::Digest>);

async fn get_in_batches(
    client: &Client,
    keys: &[Key],
    batch: usize,
    progress: &crate::output::Progress,
) -> anyhow::Result<Looked> {
    let mut values = Vec::with_capacity(keys.len());
    let mut pinned: Option<(u64, Option<pirq_client::Digest>)> = None;
    for chunk in keys.chunks(batch) {
        let bytes: Vec<&[u8]> = chunk.iter().map(|k| k.bytes.as_slice()).collect();
        // Every batch at the first one's epoch: one consistent snapshot for the whole file.
        let got = client
            .get_many_at(&bytes, pinned.map(|(epoch, _)| epoch))
            .await?;
        parties::note_unverified(got.verification);
        if pinned.is_none() {
            pinned = Some((got.epoch, got.digest));
        }
        values.extend(got.values);
        progress.inc(chunk.len() as u64);
    }
    let (epoch, digest) = pinned.expect("at least one key");
    Ok((values, epoch, digest))
}

/// `value` in `format`: what `pirq get` prints, or why it cannot (the flag that prints it).
pub fn show(value: &[u8], format: ValueFormat, key_number: usize) -> anyhow::Result<String> {
    let encoding = match format {
        ValueFormat::Text => Encoding::Utf8,
        ValueFormat::Json => Encoding::Json,
        ValueFormat::Hex => Encoding::Hex,
        ValueFormat::Base64 => Encoding::Base64,
        ValueFormat::Raw => unreachable!("raw is written as bytes"),
    };
    encoding.encode(value).ok_or_else(|| {
        anyhow::anyhow!(
            "the value of key number {key_number} is not {}: print it with --value-format hex",
            if format == ValueFormat::Text {
                "UTF-8 text"
            } else {
                "JSON"
            }
        )
    })
}

/// A key as `--json` writes it: as it was written, unless `--bytes` says otherwise.
fn key_json(key: &Key, bytes: Option<BytesAs>) -> Value {
    match (bytes, key.written) {
        (Some(how), _) => how.encode(&key.bytes).into(),
        (None, written) => written
            .encode(&key.bytes)
            .unwrap_or_else(|| hex::encode(&key.bytes))
            .into(),
    }
}

/// Prints the values; `Ok(true)` when every key was found.
fn print(args: &GetArgs, found: &Found) -> anyhow::Result<bool> {
    let format = args
        .value_format
        .unwrap_or_else(|| ValueFormat::of(found.value_encoding));
    let mut out = Vec::new();
    for (i, (key, v)) in found.keys.iter().zip(&found.values).enumerate() {
        if format == ValueFormat::Raw {
            out.extend_from_slice(v.as_deref().unwrap_or_default());
            continue;
        }
        if args.json {
            let value = match (v, found.kind, args.bytes) {
                (None, _, _) => Value::Null,
                (Some(_), ValueKind::Set, _) => "".into(),
                (Some(v), _, Some(how)) => how.encode(v).into(),
                (Some(v), _, None) => {
                    let text = show(v, format, i + 1)?;
                    match format {
                        ValueFormat::Json => serde_json::from_str(&text)?,
                        _ => text.into(),
                    }
                }
            };
            let mut line = JsonLine::new();
            line.value("key", key_json(key, args.bytes))
                .value("value", value)
                .num("epoch", found.epoch)
                .digest(found.digest);
            out.extend_from_slice(line.finish().as_bytes());
        } else {
            match (v, found.kind) {
                (Some(_), ValueKind::Set) => out.extend_from_slice(b"present"),
                (Some(v), _) => out.extend_from_slice(show(v, format, i + 1)?.as_bytes()),
                (None, _) => out.extend_from_slice(b"absent"),
            }
        }
        out.push(b'\n');
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&out)?;
    stdout.flush()?;
    Ok(found.values.iter().all(Option::is_some))
}
