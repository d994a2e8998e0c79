//! `pirq kv gen`: synthetic records, deterministic in `--seed`, for tests and benchmarks.
//!
//! Record `i`'s key starts with a bijective mix of `i` (so keys of one file never repeat,
//! whatever their length from 8 bytes up) and the rest of the key and the value are random
//! bytes from a generator seeded per chunk of records, so chunks are made in parallel and the
//! output does not depend on the thread count.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use rayon::prelude::*;

use super::records::{Encoding, Format};

#[derive(Args)]
pub struct GenArgs {
    /// Number of records, at least 1.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    records: u64,
    /// Bytes of every key (8 or more: keys are then unique by construction).
    #[arg(long, default_value_t = super::DEFAULT_KEY_SIZE)]
    key_size: usize,
    /// Bytes of every value; 0 writes a set's records (keys only).
    #[arg(long, default_value_t = 32, conflicts_with = "max_value_size")]
    value_size: usize,
    /// Values of random lengths 0..=V instead (for `kv build --max-value-size V`).
    #[arg(long)]
    max_value_size: Option<usize>,
    /// How keys and values are written in JSON and CSV: hex or base64 (random bytes are not
    /// text, so not utf8).
    #[arg(long, value_parser = super::records::key_encoding, default_value = "hex", value_name = "hex|base64")]
    encoding: Encoding,
    /// Seed: the same seed gives the same records on every machine; another seed gives other
    /// keys (to make absent keys for a table, generate with another seed).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Skip the first N records of the sequence (a file of records N.. of the same seed).
    #[arg(long, default_value_t = 0)]
    skip: u64,
    /// Output format (default: from the extension, .csv or .bin, else JSON lines).
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Output file, or `-` for standard output.
    #[arg(long)]
    out: PathBuf,
}

/// Records per independently seeded chunk.
const CHUNK: u64 = 1 << 12;

/// splitmix64's finalizer: a bijection on u64, so distinct indices give distinct prefixes.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    z ^ (z >> 31)
}

/// Record `index` of `seed`: the key, and the value in `value` (all of it, or with variable
/// sizes its first `len` bytes, `len` returned).
fn record(
    seed: u64,
    index: u64,
    rng: &mut StdRng,
    key: &mut [u8],
    value: &mut [u8],
    variable: bool,
) -> usize {
    rng.fill_bytes(key);
    rng.fill_bytes(value);
    let prefix = mix(index ^ mix(seed)).to_be_bytes();
    key[..8].copy_from_slice(&prefix);
    if variable {
        (rng.next_u64() % (value.len() as u64 + 1)) as usize
    } else {
        value.len()
    }
}

fn chunk_rng(seed: u64, chunk: u64) -> StdRng {
    let mut s = [0u8; 32];
    s[..8].copy_from_slice(&seed.to_le_bytes());
    s[8..16].copy_from_slice(&chunk.to_le_bytes());
    s[16..].copy_from_slice(b"pirq kv gen rec\0");
    StdRng::from_seed(s)
}

/// Encodes records `first..first + n` (all in one chunk) into `out`.
fn encode_chunk(args: &GenArgs, format: Format, first: u64, n: u64, out: &mut Vec<u8>) {
    let chunk = first / CHUNK;
    let mut rng = chunk_rng(args.seed, chunk);
    let variable = args.max_value_size.is_some();
    let mut key = vec![0u8; args.key_size];
    let mut value = vec![0u8; args.max_value_size.unwrap_or(args.value_size)];
    let set = value.is_empty() && !variable;
    let text = |bytes: &[u8]| args.encoding.encode(bytes).expect("hex or base64");
    // Advance to `first` inside the chunk (only the first chunk of a --skip starts mid-way).
    for i in chunk * CHUNK..first {
        record(args.seed, i, &mut rng, &mut key, &mut value, variable);
    }
    for i in first..first + n {
        let len = record(args.seed, i, &mut rng, &mut key, &mut value, variable);
        let value = &value[..len];
        match format {
            Format::Jsonl => {
                out.extend_from_slice(b"{\"key\":\"");
                out.extend_from_slice(text(&key).as_bytes());
                if !set {
                    out.extend_from_slice(b"\",\"value\":\"");
                    out.extend_from_slice(text(value).as_bytes());
                }
                out.extend_from_slice(b"\"}\n");
            }
            Format::Lines => {
                out.extend_from_slice(text(&key).as_bytes());
                out.push(b'\n');
            }
            Format::Csv => {
                out.extend_from_slice(text(&key).as_bytes());
                if !set {
                    out.push(b',');
                    out.extend_from_slice(text(value).as_bytes());
                }
                out.push(b'\n');
            }
            Format::Bin => {
                out.extend_from_slice(&key);
                out.extend_from_slice(value);
            }
        }
    }
}

pub fn run(args: GenArgs) -> anyhow::Result<()> {
    if args.key_size < 8 || args.key_size > 1024 {
        bail!(
            "--key-size must be 8..=1024 (synthetic keys start with 8 bytes that make them unique)"
        );
    }
    if !matches!(args.encoding, Encoding::Hex | Encoding::Base64) {
        bail!("--encoding utf8: synthetic keys are random bytes, not text; use hex or base64");
    }
    let format = Format::pick(args.format, &args.out);
    if format == Format::Bin && args.max_value_size.is_some() {
        bail!("binary records are fixed-width: variable-size values need JSON lines or CSV");
    }
    if args.out.as_os_str() == "-" {
        return write_records(&args, format, &mut io::stdout().lock(), true);
    }
    pirq_db::write_atomically(&args.out, |file| {
        write_records(&args, format, file, false).map_err(|e| io::Error::other(format!("{e:#}")))
    })
    .with_context(|| format!("writing {}", args.out.display()))
}

/// Writes the records to `sink` (standard output when `stdout`).
fn write_records(
    args: &GenArgs,
    format: Format,
    sink: &mut dyn Write,
    stdout: bool,
) -> anyhow::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 20, sink);
    if format == Format::Csv {
        let set = args.value_size == 0 && args.max_value_size.is_none();
        out.write_all(if set { b"key\n" } else { b"key,value\n" })?;
    }
    let (start, end) = (args.skip, args.skip + args.records);
    // Chunk boundaries aligned to CHUNK, so a record's bytes do not depend on --skip.
    let mut bounds = Vec::new();
    let mut i = start;
    while i < end {
        let next = ((i / CHUNK + 1) * CHUNK).min(end);
        bounds.push((i, next - i));
        i = next;
    }
    // A window of chunks at a time: parallel encoding, in-order writing, bounded memory.
    for window in bounds.chunks(256) {
        let encoded: Vec<Vec<u8>> = window
            .par_iter()
            .map(|&(first, n)| {
                let mut buf = Vec::new();
                encode_chunk(args, format, first, n, &mut buf);
                buf
            })
            .collect();
        for buf in &encoded {
            if let Err(e) = out.write_all(buf) {
                if stdout && e.kind() == io::ErrorKind::BrokenPipe {
                    // The reader stopped (e.g. a build that failed): its error is the one to read.
                    return Ok(());
                }
                return Err(e).context("writing records");
            }
        }
    }
    out.flush().context("writing records")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_gives_the_same_records() {
        let args = |skip, records| GenArgs {
            records,
            key_size: 20,
            value_size: 8,
            max_value_size: None,
            encoding: Encoding::Hex,
            seed: 3,
            skip,
            format: Some(Format::Bin),
            out: "-".into(),
        };
        let mut all = Vec::new();
        encode_chunk(&args(0, 10), Format::Bin, 0, 10, &mut all);
        let mut tail = Vec::new();
        encode_chunk(&args(4, 6), Format::Bin, 4, 6, &mut tail);
        assert_eq!(&all[4 * 28..], &tail[..]);
        let keys: std::collections::HashSet<&[u8]> = all.chunks(28).map(|r| &r[..20]).collect();
        assert_eq!(keys.len(), 10);
    }
}
