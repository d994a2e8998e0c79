//! `pirq get`: look keys up privately in a kv database served by two parties.
//!
//! Output and exit status follow grep: one line per key, in the order given (`--key`, then
//! `--key-text`, then `--keys-file`) — the value as lowercase hex (a set: `present`), or
//! `absent`; exit 0 when every key was found, 1 when any is absent, 2 on an error (nothing is
//! printed on stdout then). `--json` prints one object a key instead: {"key", "value" (null
//! when absent; "" for a set's present key), "epoch", "digest"}.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::Context;
use base64::Engine as _;

use pirq_shared::kv::ValueKind;

use crate::output::{BytesAs, JsonLine};
use crate::parties::{self, PartiesArgs};

#[derive(clap::Args, Debug)]
#[command(group = clap::ArgGroup::new("any_keys").required(true).multiple(true).args(["keys", "key_texts", "keys_file"]))]
pub struct GetArgs {
    #[command(flatten)]
    pub parties: PartiesArgs,
    /// Key to look up (hex, or as --key-encoding says); repeat for several (all keys go out as
    /// one query per party, split only where a party's key limit says so).
    #[arg(long = "key")]
    pub keys: Vec<String>,
    /// Key to look up as text: the key is the string's UTF-8 bytes, exactly as given (no
    /// normalisation). Repeatable; --key-text keys come after --key keys in the output.
    #[arg(long = "key-text")]
    pub key_texts: Vec<String>,
    /// A file of keys, one a line (`-` for standard input); empty lines are skipped.
    #[arg(long, value_name = "FILE")]
    pub keys_file: Option<PathBuf>,
    /// How --key and --keys-file lines write a key: hex digits, UTF-8 text (the line's bytes,
    /// as is), or base64.
    #[arg(long, value_enum, default_value_t = KeyEncoding::Hex)]
    pub key_encoding: KeyEncoding,
    /// One JSON object per key on standard output: {"key", "value", "epoch", "digest"}.
    #[arg(long)]
    pub json: bool,
    /// How --json writes keys and values.
    #[arg(long, value_enum, default_value_t = BytesAs::Hex, requires = "json")]
    pub bytes: BytesAs,
}

/// How a key is written on the command line or in a keys file.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyEncoding {
    Hex,
    Utf8,
    Base64,
}

impl KeyEncoding {
    fn decode(self, text: &str) -> anyhow::Result<Vec<u8>> {
        Ok(match self {
            KeyEncoding::Hex => hex::decode(text.trim()).context("not hex")?,
            KeyEncoding::Utf8 => text.as_bytes().to_vec(),
            KeyEncoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(text.trim())
                .context("not standard base64")?,
        })
    }
}

/// Runs `pirq get` and exits with its status.
pub fn run(args: GetArgs) -> ! {
    let code = match lookup(&args).and_then(|(keys, values)| print(&args, &keys, &values)) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("error: {e:#}");
            2
        }
    };
    std::process::exit(code)
}

/// The keys, from `--key` then `--keys-file`.
fn keys(args: &GetArgs) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut keys = args
        .keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            args.key_encoding
                .decode(k)
                .with_context(|| format!("--key number {}", i + 1))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    keys.extend(args.key_texts.iter().map(|t| t.as_bytes().to_vec()));
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
            let key = args
                .key_encoding
                .decode(line)
                .with_context(|| format!("{} line {}", path.display(), i + 1))?;
            keys.push(key);
        }
    }
    anyhow::ensure!(!keys.is_empty(), "no keys to look up");
    Ok(keys)
}

fn lookup(args: &GetArgs) -> anyhow::Result<(Vec<Vec<u8>>, pirq_client::Values)> {
    let keys = keys(args)?;
    let client = args.parties.client(args.parties.options())?;
    let values = parties::runtime()?.block_on(client.get_many(&keys))?;
    parties::note_unverified(values.verification);
    Ok((keys, values))
}

/// Prints the values; `Ok(true)` when every key was found.
fn print(args: &GetArgs, keys: &[Vec<u8>], values: &pirq_client::Values) -> anyhow::Result<bool> {
    let mut out = String::new();
    for (key, v) in keys.iter().zip(&values.values) {
        if args.json {
            let mut line = JsonLine::new();
            line.bytes("key", key, args.bytes)
                .maybe_bytes("value", v.as_deref(), args.bytes)
                .num("epoch", values.epoch)
                .digest(values.digest);
            out.push_str(&line.finish());
        } else {
            match (v, values.kind) {
                (Some(_), ValueKind::Set) => out.push_str("present"),
                (Some(v), _) => out.push_str(&hex::encode(v)),
                (None, _) => out.push_str("absent"),
            }
        }
        out.push('\n');
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(values.values.iter().all(Option::is_some))
}
