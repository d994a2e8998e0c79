//! `pirq eth import`: a geth dump into the three tables of its state ([`super::tables`]), or,
//! with `--base`, into the block update of each ([`super::update`]).
//!
//! A fresh import reads the dump twice, on all cores ([`dump::read_parallel`]): once to count
//! what each table will hold (accounts, storage slots, distinct codes) and check every line, so
//! that each table is sized before a byte is written and a bad line costs no output; then to
//! place the records ([`super::build`]), straight into the three tables' files through writable
//! mappings (`pirq_db::MappedWriter`). [`write_tables`] is shared with `eth gen --tables`, which
//! feeds it the same records in the same order without a dump. Memory besides the mapped files:
//! a batch of lines and its records, two bytes a page, the records that missed their first page,
//! and 8 bytes a distinct code while counting (codes are shared: mainnet's ~70 M contracts have
//! a few million distinct codes).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use pirq_db::{Header, MappedWriter, Meta as DbMeta, MAX_PAGES};
use pirq_shared::kv::KvParams;
use pirq_shared::signing::PageSigner;

use super::build::{Builder, Recs, Repeated, Repeats};
use super::dump::{self, Owned};
use super::tables::{self, storage_key, Meta, TableSpec, META_KEY};

#[derive(Args)]
pub struct ImportArgs {
    /// The dump: `geth dump --iterative` output (one JSON object a line; a first line with the
    /// state root only is allowed). A file: a fresh import reads it twice.
    #[arg(long, required_unless_present = "changes")]
    pub dump: Option<PathBuf>,
    /// Update mode, instead of --dump: the block's changes only, lines of the dump's form (the
    /// header line with the new state root, then each account the block changed or added, as
    /// it is after the block, with `storage` holding only the slots the block changed: "0"
    /// for a slot it cleared), and each account it deleted as `{"address": "0x…", "deleted":
    /// true, "storage": {slot: "0", …}}` listing the slots it held. Costs the size of the
    /// change, not of the state. Codes are never deleted this way (they are shared; a whole
    /// --dump drops those no account names). docs/eth.md has the format.
    #[arg(long, requires = "base", conflicts_with = "dump")]
    pub changes: Option<PathBuf>,
    /// Update mode: updates already made since the base (UDIR of earlier runs, oldest first),
    /// taken as applied on top of it, so a block can follow the last without `pirq db apply`
    /// rewriting the tables. Signed tables: --manifests MDIR must be the directory those
    /// updates appended to, each file ending at the last of them and naming each.
    #[arg(long, requires = "base", num_args = 1..)]
    pub after: Vec<PathBuf>,
    /// Where the tables go: DIR/accounts.pirdb, DIR/code.pirdb, DIR/storage.pirdb and
    /// DIR/eth.json (what was imported). The directory is created if missing.
    #[arg(long, required_unless_present = "base", conflicts_with = "base")]
    pub out: Option<PathBuf>,
    /// The block number the dump is the state after (recorded in the accounts table's
    /// metadata record; `eth serve` answers it as eth_blockNumber). Default: 0 for an import,
    /// the base's block + 1 for an update.
    #[arg(long)]
    pub block: Option<u64>,
    /// Update mode: the tables as served now (DIR of an import, or the snapshots of the last
    /// update: `pirq db apply`). The dump is the new block's whole state; what differs goes
    /// into one epoch update per table.
    #[arg(long, requires = "update_out")]
    pub base: Option<PathBuf>,
    /// Update mode: where the updates go, UDIR/NAME.update per table (bincode, for `pirq epoch
    /// push --table NAME`), and UDIR/eth.json (the block and epoch).
    #[arg(long, requires = "base")]
    pub update_out: Option<PathBuf>,
    /// Sign every page with this publisher secret key (each table gets its own database id;
    /// docs/spec/signed.md); an update of signed tables must be signed too.
    #[arg(long)]
    pub sign_key: Option<PathBuf>,
    /// Update mode with --sign-key: the directory of the publisher's manifest files,
    /// DIR/NAME.manifests.json per table (each update appends its manifest).
    #[arg(long, requires = "sign_key")]
    pub manifests: Option<PathBuf>,
    /// The largest code the code table holds (its slots are this size): EIP-170's limit.
    #[arg(long, default_value_t = tables::MAX_CODE_SIZE)]
    pub max_code_size: u32,
    /// Seed of the tables' hashes and eviction walks (default: random).
    #[arg(long)]
    pub seed: Option<u64>,
    /// No progress bar, even on a terminal (the summary stays).
    #[arg(long)]
    pub quiet: bool,
}

pub fn run(args: ImportArgs) -> anyhow::Result<()> {
    if args.base.is_some() {
        return super::update::run(&args);
    }
    let out = args
        .out
        .as_deref()
        .expect("clap requires --out without --base");
    if args.manifests.is_some() {
        bail!(
            "--manifests is for updates (--base): an import writes epoch 0, which needs no \
             manifest"
        );
    }
    let dump_path = args
        .dump
        .as_deref()
        .expect("clap requires --dump without --base");
    if dump_path == Path::new("-") {
        bail!("--dump must be a file: the import reads it twice (to size the tables, then to fill them)");
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let started = Instant::now();
    let progress = crate::output::Progress::stages(args.quiet);
    let counts = count(&args, dump_path, out, &progress)?;
    let settings = Settings {
        out,
        block: args.block.unwrap_or(0),
        seed: args.seed,
        sign_key: args.sign_key.as_deref(),
        max_code_size: args.max_code_size,
    };
    let max_code_size = args.max_code_size as usize;
    let written = write_tables(&settings, &counts, &progress, |fill| {
        progress.stage(
            &format!("filling the tables from {}", dump_path.display()),
            crate::output::file_len(dump_path),
            crate::output::BYTES,
        );
        let input = progress.wrap_read(crate::kv::records::open(dump_path)?);
        let params = fill.params();
        let summary = dump::read_parallel(
            input,
            max_code_size,
            out,
            &|items| {
                let mut part = Part::default();
                for item in items {
                    match item {
                        Owned::Account {
                            address,
                            account,
                            code,
                        } => {
                            part.accounts
                                .push(&params[0], &address, &account.to_bytes());
                            if let Some(code) = code {
                                part.codes.push((account.code_hash, code));
                            }
                        }
                        Owned::Slot {
                            address,
                            slot,
                            value,
                        } => part
                            .storage
                            .push(&params[2], &storage_key(&address, &slot), &value),
                    }
                }
                part
            },
            &mut |parts| {
                fill.add(&parts);
                Ok(())
            },
        )
        .with_context(|| format!("reading {}", dump_path.display()))?;
        Ok(summary.root)
    });
    let written = match written {
        Err(e) => match e.downcast_ref::<Repeated>() {
            Some(r) => return Err(repeated_line(&args, dump_path, out, r, &progress)),
            None => return Err(e),
        },
        Ok(w) => w,
    };
    progress.clear();
    progress.finish(&format!(
        "wrote {}: block {}, {} accounts, {} storage slots, {} distinct codes in \
         accounts.pirdb, storage.pirdb, code.pirdb (epoch 0), {:.1} s",
        out.display(),
        settings.block,
        counts.accounts,
        counts.slots,
        written.codes,
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// The error of a key repeated in the dump, with the line that repeats it: the placement found
/// the repeat without lines, so the dump is read once more (on this error only) for it.
fn repeated_line(
    args: &ImportArgs,
    dump_path: &Path,
    out: &Path,
    r: &Repeated,
    progress: &crate::output::Progress,
) -> anyhow::Error {
    progress.stage(
        &format!("finding the line that repeats a {}", r.what),
        crate::output::file_len(dump_path),
        crate::output::BYTES,
    );
    let input = match crate::kv::records::open(dump_path) {
        Ok(i) => progress.wrap_read(i),
        Err(e) => return e,
    };
    let mut seen = false;
    let result = dump::read(input, args.max_code_size as usize, out, &mut |item| {
        let key = match item {
            dump::Item::Account { address, .. } if r.what == ADDRESS => address.to_vec(),
            dump::Item::Slot { address, slot, .. } if r.what == SLOT => {
                storage_key(&address, &slot).to_vec()
            }
            _ => return Ok(()),
        };
        if r.params.tag(&key) == r.tag {
            if seen {
                return Err(format!("duplicate {}: an earlier line has it", r.what));
            }
            seen = true;
        }
        Ok(())
    });
    progress.clear();
    match result {
        Err(e) => e.context(format!("reading {}", dump_path.display())),
        Ok(_) => anyhow::anyhow!("duplicate {} in {}", r.what, dump_path.display()),
    }
}

/// What [`Repeated`] calls the keys of the accounts and storage tables.
const ADDRESS: &str = "address";
const SLOT: &str = "storage slot";

/// What the tables of a new state will hold: they are sized from it before a byte is written.
pub struct Counts {
    pub accounts: u64,
    pub slots: u64,
    /// Distinct code hashes, counted by their first 8 bytes (a collision only sizes the table
    /// one record smaller).
    pub codes: u64,
}

/// Where and how a new state's tables are written.
pub struct Settings<'a> {
    pub out: &'a Path,
    pub block: u64,
    /// Seed of the tables' hashes and walks (`--seed`); random when absent.
    pub seed: Option<u64>,
    pub sign_key: Option<&'a Path>,
    pub max_code_size: u32,
}

/// Records of the three tables from one run of the input, in its order.
#[derive(Default)]
pub struct Part {
    pub accounts: Recs,
    /// (code hash, code) of each account with code, repeats included.
    pub codes: Vec<([u8; 32], Vec<u8>)>,
    pub storage: Recs,
}

/// The three tables being filled.
pub struct Fill<'a> {
    accounts: Builder<'a>,
    code: Builder<'a>,
    storage: Builder<'a>,
    /// Code hashes seen: a contract's code is placed once, at its first account.
    codes_seen: HashSet<[u8; 32]>,
}

impl Fill<'_> {
    /// The tables' parameters, for hashing records ([`Recs::push`]): accounts, code, storage.
    pub fn params(&self) -> [KvParams; 3] {
        [
            *self.accounts.params(),
            *self.code.params(),
            *self.storage.params(),
        ]
    }

    /// Places the records of `parts`, in order.
    pub fn add(&mut self, parts: &[Part]) {
        self.accounts
            .add(&parts.iter().map(|p| &p.accounts).collect::<Vec<_>>());
        self.storage
            .add(&parts.iter().map(|p| &p.storage).collect::<Vec<_>>());
        let mut codes = Recs::default();
        let params = *self.code.params();
        for (hash, code) in parts.iter().flat_map(|p| &p.codes) {
            if self.codes_seen.insert(*hash) {
                codes.push(&params, hash, code);
            }
        }
        if codes.len() > 0 {
            self.code.add(&[&codes]);
        }
    }
}

/// What [`write_tables`] wrote.
pub struct Written {
    pub codes: u64,
}

/// Writes a new state's three tables into `settings.out` (and its `eth.json`): sized from
/// `counts`, filled by `fill` (which returns the state root, when there is one), the metadata
/// record last.
pub fn write_tables(
    settings: &Settings,
    counts: &Counts,
    progress: &crate::output::Progress,
    fill: impl FnOnce(&mut Fill) -> anyhow::Result<Option<[u8; 32]>>,
) -> anyhow::Result<Written> {
    let out = settings.out;
    let seeds = match settings.seed {
        Some(s) => [0, 1, 2].map(|i| crate::kv::layout_seed(s.wrapping_add(i))),
        None => [0; 3].map(|_| rand::random()),
    };
    let specs = tables::specs(seeds, settings.max_code_size);
    let records = [counts.accounts + 1, counts.codes, counts.slots];
    let mut built = Vec::new();
    for (spec, records) in specs.iter().zip(records) {
        let path = out.join(format!("{}.pirdb", spec.name));
        built.push(Building::create(spec, records, &path, settings.sign_key)?);
    }
    let [accounts, code, storage] = &mut built[..] else {
        unreachable!("three tables")
    };
    let rng_seed = settings.seed.unwrap_or_else(rand::random);
    let mut tables = Fill {
        accounts: Builder::new(
            accounts.params,
            accounts.writer.pages_mut(),
            Repeats::Refuse(ADDRESS),
        ),
        code: Builder::new(code.params, code.writer.pages_mut(), Repeats::Skip),
        storage: Builder::new(
            storage.params,
            storage.writer.pages_mut(),
            Repeats::Refuse(SLOT),
        ),
        codes_seen: HashSet::new(),
    };
    let root = fill(&mut tables)?;
    let meta = Meta {
        block: settings.block,
        state_root: root.unwrap_or_default(),
    };
    let mut last = Recs::default();
    last.push(tables.accounts.params(), META_KEY, &meta.to_bytes());
    tables.accounts.add(&[&last]);
    progress.stage("placing what missed its first page", None, "records");
    let Fill {
        accounts: a,
        code: c,
        storage: s,
        ..
    } = tables;
    let a = a.finish(rng_seed)?;
    let c = c.finish(rng_seed ^ 1)?;
    let s = s.finish(rng_seed ^ 2)?;
    if a.records != counts.accounts + 1 || s.records != counts.slots {
        bail!(
            "the input changed between its two reads ({} accounts and {} slots counted, {} \
             and {} placed): a dump must be a file that stays as it is",
            counts.accounts,
            counts.slots,
            a.records - 1,
            s.records
        );
    }
    progress.stage("writing the tables", None, crate::output::BYTES);
    for b in built {
        b.finish()?;
    }
    let built_tables = [&a, &c, &s];
    let report = serde_json::json!({
        "block": settings.block,
        "state_root": root.map(|r| tables::data(&r)),
        "epoch": 0,
        "accounts": counts.accounts,
        "storage_slots": counts.slots,
        "codes": c.records,
        "signed": settings.sign_key.is_some(),
        "tables": specs.iter().zip(built_tables).map(|(s, b)| serde_json::json!({
            "name": s.name, "file": format!("{}.pirdb", s.name), "load": b.load,
            "records": b.records,
            // Placed in a later candidate page, and by the cuckoo walk (cli/src/eth/build.rs).
            "placed_later": b.later, "placed_by_walk": b.walked,
        })).collect::<Vec<_>>(),
    });
    write_report(&out.join("eth.json"), &report)?;
    Ok(Written { codes: c.records })
}

/// The first read of the dump: every line checked, and what each table will hold counted.
fn count(
    args: &ImportArgs,
    dump_path: &Path,
    out: &Path,
    progress: &crate::output::Progress,
) -> anyhow::Result<Counts> {
    progress.stage(
        &format!("checking {}", dump_path.display()),
        crate::output::file_len(dump_path),
        crate::output::BYTES,
    );
    let input = progress.wrap_read(crate::kv::records::open(dump_path)?);
    let mut codes: HashSet<u64> = HashSet::new();
    let summary = dump::read_parallel(
        input,
        args.max_code_size as usize,
        out,
        &|items| {
            items
                .into_iter()
                .filter_map(|item| match item {
                    Owned::Account {
                        code: Some(_),
                        account,
                        ..
                    } => Some(code_key(&account.code_hash)),
                    _ => None,
                })
                .collect::<Vec<u64>>()
        },
        &mut |runs| {
            codes.extend(runs.into_iter().flatten());
            Ok(())
        },
    )
    .with_context(|| format!("reading {}", dump_path.display()))?;
    if summary.accounts == 0 {
        bail!(
            "{} holds no account: there is nothing to import",
            dump_path.display()
        );
    }
    Ok(Counts {
        accounts: summary.accounts,
        slots: summary.slots,
        codes: codes.len() as u64,
    })
}

/// A code hash as the count pass tells codes apart: its first 8 bytes.
pub fn code_key(hash: &[u8; 32]) -> u64 {
    u64::from_le_bytes(hash[..8].try_into().expect("8 bytes"))
}

/// One table being written.
struct Building {
    params: KvParams,
    writer: MappedWriter,
    signer: Option<PageSigner>,
}

impl Building {
    /// The table's file, sized for `records` with room to grow: a load below the builder's
    /// default (`pirq kv build`) by 0.1, so blocks can add accounts for a long while before
    /// the table needs rebuilding.
    fn create(
        spec: &TableSpec,
        records: u64,
        path: &Path,
        sign_key: Option<&Path>,
    ) -> anyhow::Result<Building> {
        let signer = crate::publisher::new_signer(sign_key)?;
        let tail = signer.as_ref().map_or(0, |s| s.block.tail_len());
        let d = spec.layout.choices;
        let probe = KvParams::with_tail(spec.layout, spec.page_size, tail, d as u64)?;
        let slots = probe.slots_per_page();
        let load = crate::kv::default_load(slots, d) - 0.1;
        let pages = ((records as f64 / (slots as f64 * load)).ceil() as u64).max(16);
        if pages > MAX_PAGES {
            bail!(
                "the {} table would need {pages} pages, more than a database holds",
                spec.name
            );
        }
        let params = KvParams::with_tail(spec.layout, spec.page_size, tail, pages)?;
        let header = Header {
            page_size: spec.page_size,
            num_pages: pages,
            epoch: 0,
        };
        let meta = DbMeta {
            kv: Some(spec.layout),
            signing: signer.as_ref().map(|s| s.block),
            ..DbMeta::default()
        };
        let writer = MappedWriter::create_meta(path, &header, &meta)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(Building {
            params,
            writer,
            signer,
        })
    }

    fn finish(mut self) -> anyhow::Result<()> {
        if let Some(signer) = &self.signer {
            self.writer.sign_pages(signer, 0);
        }
        self.writer.commit().context("writing a table")?;
        Ok(())
    }
}

/// `DIR/eth.json`: what an import or update wrote, for people and scripts.
pub fn write_report(path: &Path, report: &serde_json::Value) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(report).expect("JSON");
    text.push('\n');
    pirq_db::write_atomically(path, |f| std::io::Write::write_all(f, text.as_bytes()))
        .with_context(|| format!("writing {}", path.display()))
}
