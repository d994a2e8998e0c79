//! `pirq kv get` and `pirq kv stats`: check a built table offline, before it ships.
//!
//! Both read the `.pirdb` file directly (no party): `get` finds keys in their candidate pages
//! exactly as a client does after combining the parties' answers (KV §6 step 4), reading keys and
//! printing values the way the table records them; `stats` counts the records and their value
//! sizes and shows what the header says (layout, encodings, epoch, digest, signing).

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use pirq_db::PirDb;
use pirq_shared::kv::{layout::LEN_FIELD, page, KvParams, ValueKind, TAG_LEN};
use serde_json::json;

use crate::get::{self, ValueFormat};

#[derive(Args)]
pub struct GetArgs {
    /// The kv database file.
    #[arg(long)]
    db: PathBuf,
    /// Key to look up, written the way the table's keys are (as `pirq get --key`).
    #[arg(long = "key")]
    keys: Vec<String>,
    /// Key to look up as text, whatever the table records.
    #[arg(long = "key-text")]
    key_texts: Vec<String>,
    /// Key to look up as hex digits, whatever the table records.
    #[arg(long = "key-hex")]
    key_hexes: Vec<String>,
    /// How values are printed (default: as the table records them).
    #[arg(long, value_enum)]
    value_format: Option<ValueFormat>,
}

#[derive(Args)]
pub struct StatsArgs {
    /// The kv database file.
    db: PathBuf,
    /// One JSON object instead of lines of text.
    #[arg(long)]
    json: bool,
    /// No progress bar while the pages are read, even on a terminal.
    #[arg(long)]
    quiet: bool,
}

fn open(path: &PathBuf) -> anyhow::Result<(PirDb, KvParams)> {
    let db = PirDb::open(path).with_context(|| format!("opening {}", path.display()))?;
    let Some(params) = db.kv().copied() else {
        bail!(
            "{} is a page database, not a kv database (pirq db info shows it)",
            path.display()
        );
    };
    Ok((db, params))
}

/// Looks keys up in the file; exits 0 when all are found, 1 when any is absent, 2 on an error.
pub fn get(args: GetArgs) -> ! {
    let code = match lookup(&args) {
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

fn lookup(args: &GetArgs) -> anyhow::Result<bool> {
    let (db, params) = open(&args.db)?;
    let keys = get::read_keys(&args.keys, &args.key_texts, &args.key_hexes, None, &params)?;
    if keys.is_empty() {
        bail!("no keys to look up: give --key, --key-text or --key-hex");
    }
    let format = args
        .value_format
        .unwrap_or_else(|| ValueFormat::of(params.encodings().value_or_hex()));
    let mut out = String::new();
    let mut all = true;
    for (i, key) in keys.iter().enumerate() {
        params
            .check_key(key)
            .with_context(|| format!("key number {}", i + 1))?;
        let tag = params.tag(key);
        let mut found = None;
        for &p in params.candidates(&tag).iter() {
            let page = db.page(p).expect("candidates are pages of the table");
            if let Some(v) = params.find(page, &tag)? {
                found = Some(v);
                break;
            }
        }
        match (found, params.kind()) {
            (None, _) => {
                all = false;
                out.push_str("absent");
            }
            (Some(_), ValueKind::Set) => out.push_str("present"),
            (Some(v), _) => out.push_str(&get::show(v, format, i + 1)?),
        }
        out.push('\n');
    }
    crate::output::print(out)?;
    Ok(all)
}

/// What `pirq kv stats` counts in the pages.
#[derive(Default)]
struct Counts {
    records: u64,
    fullest_page: usize,
    empty_pages: u64,
    value_min: Option<usize>,
    value_max: usize,
    value_sum: u64,
}

/// Every slot of every page is read: on a large table that takes a while (64 GiB from a disk),
/// hence the bar, which is gone before the figures are printed.
fn count(db: &PirDb, params: &KvParams, progress: &crate::output::Progress) -> Counts {
    let slot = params.slot_size();
    let mut c = Counts::default();
    progress.stage("reading", Some(params.num_pages), "pages");
    for p in 0..params.num_pages {
        if p % 1024 == 0 {
            progress.set_position(p);
        }
        let area = params.slot_area(db.page(p).expect("a page of the table"));
        let occupied = page::occupied(area, slot);
        c.records += occupied as u64;
        c.fullest_page = c.fullest_page.max(occupied);
        c.empty_pages += u64::from(occupied == 0);
        for s in 0..page::slots(area, slot) {
            if page::is_empty(area, slot, s) {
                continue;
            }
            let len = match params.kind() {
                ValueKind::Fixed => params.value_size(),
                ValueKind::Set => 0,
                ValueKind::Variable => {
                    let at = s * slot + TAG_LEN;
                    let len = u16::from_le_bytes([area[at], area[at + 1]]) as usize;
                    debug_assert!(at + LEN_FIELD <= area.len());
                    len
                }
            };
            c.value_min = Some(c.value_min.map_or(len, |m| m.min(len)));
            c.value_max = c.value_max.max(len);
            c.value_sum += len as u64;
        }
    }
    progress.set_position(params.num_pages);
    progress.clear();
    c
}

pub fn stats(args: StatsArgs) -> anyhow::Result<()> {
    let (db, params) = open(&args.db)?;
    let c = count(&db, &params, &crate::output::Progress::stages(args.quiet));
    let header = db.header();
    let encodings = params.encodings();
    let name = |e: Option<pirq_shared::kv::Encoding>| match e {
        Some(e) => e.name().to_string(),
        None => "not recorded (hex)".to_string(),
    };
    let load = c.records as f64 / params.capacity() as f64;
    let mean = c.value_sum as f64 / c.records.max(1) as f64;
    let digest = db.recorded_digest().map(|d| d.to_string());
    let signing = db
        .signing()
        .map(|s| json!({"publisher": s.publisher.to_string(), "db_id": hex::encode(s.db_id)}));
    let stats = json!({
        "file": args.db,
        "records": c.records,
        "capacity": params.capacity(),
        "load": load,
        "kind": params.kind().name(),
        "key_encoding": encodings.key.map(|e| e.name()),
        "value_encoding": encodings.value.map(|e| e.name()),
        "key_size": params.layout.key_size,
        "value_size": params.layout.value_size,
        "values": {"min": c.value_min.unwrap_or(0), "mean": mean, "max": c.value_max},
        "choices": params.choices(),
        "page_size": params.page_size,
        "num_pages": params.num_pages,
        "slots_per_page": params.slots_per_page(),
        "fullest_page": c.fullest_page,
        "empty_pages": c.empty_pages,
        "epoch": header.epoch,
        "digest": digest,
        "signing": signing,
        "seed": hex::encode(params.layout.seed),
    });
    if args.json {
        return crate::output::println(serde_json::to_string_pretty(&stats)?);
    }
    let key_size = match params.layout.key_size {
        0 => "any length".to_string(),
        n => format!("{n} bytes"),
    };
    let values = match params.kind() {
        ValueKind::Set => "none (a set)".to_string(),
        ValueKind::Fixed => format!("{} bytes each", params.value_size()),
        ValueKind::Variable => format!(
            "{} to {} bytes, mean {mean:.1} (room for {})",
            c.value_min.unwrap_or(0),
            c.value_max,
            params.value_size()
        ),
    };
    let text = format!(
        "file: {}\nrecords: {} in {} slots (load {load:.4})\nkind: {}\nkeys: {}, {key_size}\n\
         values: {}, {values}\npages: {} of {} bytes, {} slots each, d = {}; fullest page {} \
         slots, {} empty pages\nepoch: {}\ndigest: {}\nsigning: {}",
        args.db.display(),
        c.records,
        params.capacity(),
        params.kind().name(),
        name(encodings.key),
        if params.kind() == ValueKind::Set {
            "-".to_string()
        } else {
            name(encodings.value)
        },
        params.num_pages,
        params.page_size,
        params.slots_per_page(),
        params.choices(),
        c.fullest_page,
        c.empty_pages,
        header.epoch,
        digest.as_deref().unwrap_or("not recorded"),
        match db.signing() {
            Some(s) => format!(
                "publisher key {}, db_id {}",
                s.publisher,
                hex::encode(s.db_id)
            ),
            None => "unsigned".to_string(),
        }
    );
    crate::output::println(text)
}
