//! `pirq kv build`: records in, a kv `.pirdb` out.
//!
//! The table is sized from the record count and a target load, then built in place in the
//! output file through a writable mapping ([`db::MappedWriter`]: a temporary file renamed over
//! `--out` only when every record is placed). Memory besides the mapped file: two bytes per
//! page and a few batches of records. Records stream through three stages: one thread parses,
//! rayon hashes each batch (tag and candidates, the SHA-256 work), and the main thread places
//! records one by one (cuckoo placement is sequential).

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use pirq_db::{self as db, Header, MappedWriter, MAX_PAGES};
use pirq_shared::kv::table::DEFAULT_MAX_KICKS;
use pirq_shared::kv::{Candidates, KvLayout, KvParams, PlaceError, Table, Tag, ValueKind};
use pirq_shared::signing::PageSigner;
use rayon::prelude::*;

use super::records::{
    self, Columns, Encoding, Encodings, Format, Record, RecordError, Records, Sizes,
};

#[derive(Args)]
#[command(group = clap::ArgGroup::new("values").args(["value_size", "max_value_size"]))]
pub struct BuildArgs {
    /// Record file, or `-` for standard input.
    #[arg(long)]
    records: PathBuf,
    /// Record file format (default: from the extension, .csv, .bin or .txt for lines, else
    /// JSON lines).
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Bytes of every value; 0 builds a set (keys only: `pirq get` says present or absent).
    /// One of --value-size and --max-value-size is needed, except for --format lines (a set).
    #[arg(long)]
    value_size: Option<u32>,
    /// Values of any length up to this many bytes, each stored with its length (every slot
    /// has room for the largest, so slots are all one size).
    #[arg(long)]
    max_value_size: Option<u32>,
    /// How keys are written in the records: utf8 (text, the default: the text's own bytes),
    /// hex or base64. Recorded in the table, so lookups read keys the same way.
    #[arg(long, value_parser = records::key_encoding, value_name = "utf8|hex|base64")]
    key_encoding: Option<Encoding>,
    /// How values are written: utf8 (text, the default), json (any JSON value, stored as its
    /// compact text), hex or base64. Recorded in the table: lookups print values this way.
    #[arg(long, value_parser = records::value_encoding, value_name = "utf8|json|hex|base64")]
    value_encoding: Option<Encoding>,
    /// CSV: the column of the keys, by its name in the header line (default: the first).
    #[arg(long, value_name = "NAME")]
    key_column: Option<String>,
    /// CSV: the column of the values, by its name in the header line (default: the second, or
    /// the first that is not the key column).
    #[arg(long, value_name = "NAME")]
    value_column: Option<String>,
    /// Bytes of every key (0: any length in 1..=1024; binary records need it).
    #[arg(long, default_value_t = 0)]
    key_size: u32,
    /// Page size: a power of two from 256 to 65536.
    #[arg(long, default_value_t = pirq_db::DEFAULT_PAGE_SIZE)]
    page_size: u32,
    /// Candidate pages per key (d), 2..=4. More choices fill pages fuller; a lookup fetches d
    /// pages.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(2..=4))]
    choices: u8,
    /// Seed of the hashes and of the eviction walk (default: random; printed at the end).
    #[arg(long)]
    seed: Option<u64>,
    /// Number of pages (default: from the record count and --load).
    #[arg(long, conflicts_with = "load")]
    pages: Option<u64>,
    /// Target load factor: records / slots (default: 0.95 where the page holds enough slots
    /// for that to place reliably, lower for pages of few slots; see docs/bench/kv.md).
    #[arg(long)]
    load: Option<f64>,
    /// Number of records, to size the table when they come from standard input.
    #[arg(long)]
    count: Option<u64>,
    /// Epoch of the database (at most 2^53-1).
    #[arg(long, default_value_t = 0)]
    epoch: u64,
    /// Evictions tried per record before the build gives up.
    #[arg(long, default_value_t = DEFAULT_MAX_KICKS)]
    max_kicks: usize,
    /// Output database file.
    #[arg(long)]
    out: PathBuf,
    /// The summary as one JSON object on standard output instead of a line on standard error.
    #[arg(long)]
    json: bool,
    /// Sign every page with this publisher secret key: slots fill each page's usable bytes,
    /// the last 72 are its signature tail (docs/spec/signed.md).
    #[arg(long)]
    sign_key: Option<PathBuf>,
    /// No progress bar, even on a terminal (the summary stays).
    #[arg(long)]
    quiet: bool,
}

/// Default load target for pages of `slots` slots and `d` choices: below the load where
/// random-walk cuckoo placement starts to fail (measured: docs/bench/kv.md), with a margin.
pub fn default_load(slots: usize, d: u8) -> f64 {
    match (d, slots) {
        (2, 1) => 0.45,
        (2, 2) => 0.83,
        (2, 3) => 0.90,
        (2, 4..=7) => 0.93,
        (3, 1) => 0.85,
        (4, 1) => 0.92,
        _ => 0.95,
    }
}

/// Records per batch between the stages.
const BATCH: usize = 1 << 14;

struct Hashed {
    record: Record,
    tag: Tag,
    candidates: Candidates,
}

pub fn run(args: BuildArgs) -> anyhow::Result<()> {
    let plan = Plan::from_args(&args)?;
    let start = Instant::now();
    let meta = db::Meta {
        kv: Some(plan.layout),
        signing: plan.signer.as_ref().map(|s| s.block),
        ..db::Meta::default()
    };
    let mut writer = MappedWriter::create_meta(&args.out, &plan.header, &meta)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let progress = crate::output::Progress::stages(args.quiet);
    progress.stage("", plan.count, "records");
    let filled = fill(&args, &plan, &mut writer, &progress)?;
    progress.clear();
    if let Some(c) = plan.count {
        if args.count.is_some() && filled.records != c {
            bail!("--count said {c} records, the input had {}", filled.records);
        }
    }
    let signed = sign(&plan, &mut writer);
    writer
        .commit()
        .with_context(|| format!("writing {}", args.out.display()))?;
    report(&args, &plan, &filled, start.elapsed().as_secs_f64(), signed)
}

/// What the flags ask for, checked and sized before a byte is written: the record format, the
/// table's layout and geometry, the signer.
struct Plan {
    format: Format,
    kind: ValueKind,
    sizes: Sizes,
    encodings: Encodings,
    columns: Columns,
    seed: u64,
    layout: KvLayout,
    signer: Option<PageSigner>,
    slots: usize,
    load: f64,
    /// Records expected: counted in the file, or `--count`; none for standard input sized by
    /// `--pages`.
    count: Option<u64>,
    params: KvParams,
    header: Header,
}

impl Plan {
    fn from_args(args: &BuildArgs) -> anyhow::Result<Plan> {
        let format = Format::pick(args.format, &args.records);
        if format == Format::Bin && args.key_size == 0 {
            bail!("binary records need --key-size (the key bytes before each value)");
        }
        let (kind, value_size) = value_kind(args, format)?;
        if format != Format::Csv && (args.key_column.is_some() || args.value_column.is_some()) {
            bail!("--key-column and --value-column name CSV columns; these records are not CSV");
        }
        if format == Format::Bin && kind == ValueKind::Variable {
            bail!("binary records are fixed-width: variable-size values need JSON lines or CSV");
        }
        let encodings = encodings(args, format);
        let columns = Columns {
            key: args.key_column.clone(),
            value: args.value_column.clone(),
        };
        db::check_epoch(args.epoch).context("--epoch")?;
        // The records are read to the end before the output is renamed into place, but a build
        // must never replace what it reads.
        crate::db::refuse_overwriting_inputs(&args.out, &[&args.records])?;
        let seed = args.seed.unwrap_or_else(rand::random);
        let layout = KvLayout {
            choices: args.choices,
            kind,
            value_size,
            key_size: args.key_size,
            seed: super::layout_seed(seed),
            encodings: pirq_shared::kv::Encodings {
                key: Some(encodings.key),
                // A set has no values to write back.
                value: (kind != ValueKind::Set).then_some(encodings.value),
            },
        };
        let signer = crate::publisher::new_signer(args.sign_key.as_deref())?;
        let tail = signer.as_ref().map_or(0, |s| s.block.tail_len());
        // Geometry checks first, on a table of the smallest legal size.
        let probe = KvParams::with_tail(layout, args.page_size, tail, args.choices as u64)?;
        let slots = probe.slots_per_page();
        let sizes = Sizes {
            key_size: args.key_size as usize,
            kind,
            value_size: value_size as usize,
        };
        let load = args
            .load
            .unwrap_or_else(|| default_load(slots, args.choices));
        if !(load > 0.0 && load <= 1.0) {
            bail!("--load must be in (0, 1], got {load}");
        }
        let count = record_count(args, format, sizes, &columns)?;
        let num_pages = match args.pages {
            Some(p) => p,
            None => {
                let c = count.expect("a count when --pages is not given");
                ((c as f64 / (slots as f64 * load)).ceil() as u64).max(args.choices as u64)
            }
        };
        if num_pages > MAX_PAGES {
            bail!("{num_pages} pages are more than a database holds (2^40)");
        }
        Ok(Plan {
            format,
            kind,
            sizes,
            encodings,
            columns,
            seed,
            layout,
            slots,
            load,
            count,
            params: KvParams::with_tail(layout, args.page_size, tail, num_pages)?,
            header: Header {
                page_size: args.page_size,
                num_pages,
                epoch: args.epoch,
            },
            signer,
        })
    }
}

/// The table's kind and value size from `--value-size`, `--max-value-size` and the format.
fn value_kind(args: &BuildArgs, format: Format) -> anyhow::Result<(ValueKind, u32)> {
    Ok(match (args.value_size, args.max_value_size) {
        (Some(0), _) => (ValueKind::Set, 0),
        (None, None) if format == Format::Lines => (ValueKind::Set, 0),
        (_, _) if format == Format::Lines => {
            bail!("--format lines builds a set (one key a line): leave out --value-size and --max-value-size")
        }
        (Some(v), _) => (ValueKind::Fixed, v),
        (None, Some(v)) => (ValueKind::Variable, v),
        (None, None) => bail!(
            "give --max-value-size N (values of up to N bytes), --value-size N (every value N \
             bytes) or --value-size 0 (a set of keys)"
        ),
    })
}

/// The encodings the records are read in: the flags', else text, or hex for binary records
/// (they are bytes: their keys and values read back as hex unless told).
fn encodings(args: &BuildArgs, format: Format) -> Encodings {
    let default = if format == Format::Bin {
        Encodings::HEX
    } else {
        Encodings::default()
    };
    Encodings {
        key: args.key_encoding.unwrap_or(default.key),
        value: args.value_encoding.unwrap_or(default.value),
    }
}

/// How many records the table is sized for: `--count`, else counted in the file; none when
/// they come from standard input and `--pages` sizes the table.
fn record_count(
    args: &BuildArgs,
    format: Format,
    sizes: Sizes,
    columns: &Columns,
) -> anyhow::Result<Option<u64>> {
    Ok(match (args.pages, args.count) {
        (_, Some(c)) => Some(c),
        (Some(_), None) if is_stdin(&args.records) => None,
        (None, None) if is_stdin(&args.records) => bail!(
            "records come from standard input: give --count N (how many records) or --pages N \
             so the table can be sized before they arrive"
        ),
        _ => Some(
            records::count(&args.records, format, sizes, columns)
                .with_context(|| format!("counting records in {}", args.records.display()))?,
        ),
    })
}

/// What placing the records left in the table.
struct Filled {
    records: u64,
    kicks: u64,
    load: f64,
}

/// Streams the records into the table in `writer`'s pages: one thread parses (the channel
/// bounds the batches in flight), rayon hashes each batch, this thread places them in file
/// order. Fails on the first bad record or one that does not fit, and on no records at all.
fn fill(
    args: &BuildArgs,
    plan: &Plan,
    writer: &mut MappedWriter,
    progress: &crate::output::Progress,
) -> anyhow::Result<Filled> {
    let (tx, rx) = mpsc::sync_channel::<Vec<Result<Record, RecordError>>>(4);
    let input = records::open(&args.records)?;
    let (format, sizes, encodings, columns) = (
        plan.format,
        plan.sizes,
        plan.encodings,
        plan.columns.clone(),
    );
    let reader = std::thread::spawn(move || {
        let mut recs = Records::new(input, format, sizes, encodings, columns);
        loop {
            let batch: Vec<_> = std::iter::from_fn(|| recs.next_record())
                .take(BATCH)
                .collect();
            let done = batch.len() < BATCH || batch.last().is_some_and(|r| r.is_err());
            if tx.send(batch).is_err() || done {
                break;
            }
        }
    });
    let mut table = Table::empty(plan.params, writer.pages_mut(), plan.seed);
    table.set_max_kicks(args.max_kicks);
    let result = rx
        .into_iter()
        .try_for_each(|batch| place_batch(args, plan, &mut table, batch, progress));
    let parsed = reader.join();
    result?;
    if parsed.is_err() {
        bail!("the record reader panicked");
    }
    if table.records() == 0 {
        bail!(
            "{} has no records: there is nothing to build",
            if is_stdin(&args.records) {
                "standard input".to_string()
            } else {
                args.records.display().to_string()
            }
        );
    }
    Ok(Filled {
        records: table.records(),
        kicks: table.kicks(),
        load: table.load(),
    })
}

/// Hashes one batch in parallel and places it in file order. A batch ends at the first bad
/// record, which the reader sends last: the good ones before it are placed, then it fails.
fn place_batch(
    args: &BuildArgs,
    plan: &Plan,
    table: &mut Table,
    batch: Vec<Result<Record, RecordError>>,
    progress: &crate::output::Progress,
) -> anyhow::Result<()> {
    let mut good = Vec::with_capacity(batch.len());
    let mut bad = None;
    for r in batch {
        match r {
            Ok(record) => good.push(record),
            Err(e) => {
                bad = Some(e);
                break;
            }
        }
    }
    let params = plan.params;
    let hashed: Vec<Hashed> = good
        .into_par_iter()
        .map(|record| {
            let tag = params.tag(&record.key);
            let candidates = params.candidates(&tag);
            Hashed {
                record,
                tag,
                candidates,
            }
        })
        .collect();
    for h in &hashed {
        table
            .insert_hashed(&h.tag, &h.candidates, &h.record.value)
            .map_err(|e| place_error(e, h.record.line, args, table, plan.slots, plan.load))?;
    }
    progress.inc(hashed.len() as u64);
    match bad {
        Some(e) => Err(anyhow::Error::from(e).context(format!(
            "building {} ({} records placed)",
            args.out.display(),
            table.records()
        ))),
        None => Ok(()),
    }
}

/// Signs every page when `--sign-key` was given; the summary's words about it.
fn sign(plan: &Plan, writer: &mut MappedWriter) -> Option<String> {
    let signer = plan.signer.as_ref()?;
    let started = Instant::now();
    writer.sign_pages(signer, plan.header.epoch);
    let secs = started.elapsed().as_secs_f64();
    let num_pages = plan.header.num_pages;
    Some(format!(
        "; {num_pages} pages signed by publisher key {} in {secs:.1} s ({:.0} pages/s), db_id {}",
        signer.block.publisher,
        num_pages as f64 / secs.max(1e-9),
        hex::encode(signer.block.db_id)
    ))
}

/// The summary: one JSON object on standard output with `--json`, else one line on standard
/// error.
fn report(
    args: &BuildArgs,
    plan: &Plan,
    filled: &Filled,
    secs: f64,
    signed: Option<String>,
) -> anyhow::Result<()> {
    let (encodings, kind, slots, seed) = (plan.encodings, plan.kind, plan.slots, plan.seed);
    let (records, num_pages) = (filled.records, plan.header.num_pages);
    if args.json {
        let summary = serde_json::json!({
            "out": args.out,
            "records": records,
            "pages": num_pages,
            "page_size": args.page_size,
            "choices": args.choices,
            "slots_per_page": slots,
            "slot_size": plan.params.slot_size(),
            "key_encoding": encodings.key.name(),
            "value_encoding": (kind != ValueKind::Set).then(|| encodings.value.name()),
            "load": filled.load,
            "evictions": filled.kicks,
            "seed": seed,
            "seconds": secs,
            "signed": plan.signer.is_some(),
        });
        return crate::output::println(summary.to_string());
    }
    eprintln!(
        "wrote {}: {records} records in {num_pages} pages of {} bytes (d = {}, {slots} slots of \
         {} bytes per page), keys {}{}, load factor {:.4}, {} evictions, seed \
         {seed}, {secs:.1} s ({:.0} records/s){}",
        args.out.display(),
        args.page_size,
        args.choices,
        plan.params.slot_size(),
        encodings.key,
        match kind {
            ValueKind::Set => String::new(),
            _ => format!(", values {}", encodings.value),
        },
        filled.load,
        filled.kicks,
        records as f64 / secs.max(1e-9),
        signed.unwrap_or_default(),
    );
    Ok(())
}

fn is_stdin(path: &Path) -> bool {
    path == Path::new("-")
}

fn place_error(
    e: PlaceError,
    line: u64,
    args: &BuildArgs,
    table: &Table,
    slots: usize,
    load: f64,
) -> anyhow::Error {
    let at = if args.format == Some(Format::Bin)
        || args.records.extension().is_some_and(|x| x == "bin")
    {
        "record"
    } else {
        "line"
    };
    match e {
        PlaceError::Duplicate => {
            anyhow::anyhow!("{at} {line}: duplicate key (the same key was on an earlier {at})")
        }
        full @ PlaceError::Full { .. } => anyhow::anyhow!(
            "{at} {line}: {full}. The table is too full for d = {} with {slots} slots per page: \
             build it with more pages ({}) or more choices (--choices {})",
            args.choices,
            match args.pages {
                Some(p) => format!("--pages above {p}"),
                None => format!("--load below {load}"),
            },
            (args.choices + 1).min(4),
        ),
    }
    .context(format!(
        "building {} ({} records placed)",
        args.out.display(),
        table.records()
    ))
}
