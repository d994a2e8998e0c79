//! `pirq eth import`: a geth dump into the three tables of its state ([`super::tables`]), or,
//! with `--base`, into the block update of each ([`super::update`]).
//!
//! A fresh import reads the dump twice: once to count what each table will hold (accounts,
//! storage slots, distinct codes) and check every line, so that each table is sized before a
//! byte is written and a bad line costs no output; then to place the records, straight into
//! the three tables' files through writable mappings (`pirq_db::MappedWriter`, as `pirq kv
//! build` does). Memory besides the mapped files: two bytes a page, one account's code, and
//! 16 bytes a distinct code while counting (codes are shared: mainnet's ~70 M contracts have
//! a few million distinct codes).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use pirq_db::{Header, MappedWriter, Meta as DbMeta, MAX_PAGES};
use pirq_shared::kv::{KvParams, PlaceError, Table};
use pirq_shared::signing::PageSigner;

use super::dump::{self, Item};
use super::tables::{self, storage_key, Meta, TableSpec, META_KEY};

#[derive(Args)]
pub struct ImportArgs {
    /// The dump: `geth dump --iterative` output (one JSON object a line; a first line with the
    /// state root only is allowed). A file: a fresh import reads it twice.
    #[arg(long)]
    pub dump: PathBuf,
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
    if args.dump == Path::new("-") {
        bail!("--dump must be a file: the import reads it twice (to size the tables, then to fill them)");
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let started = Instant::now();
    let progress = crate::output::Progress::stages(args.quiet);
    let counts = count(&args, out, &progress)?;
    let seeds = match args.seed {
        Some(s) => [0, 1, 2].map(|i| crate::kv::layout_seed(s.wrapping_add(i))),
        None => [0; 3].map(|_| rand::random()),
    };
    let specs = tables::specs(seeds, args.max_code_size);
    let block = args.block.unwrap_or(0);
    let records = [counts.accounts + 1, counts.codes, counts.slots];
    let mut built = Vec::new();
    for (spec, records) in specs.iter().zip(records) {
        let path = out.join(format!("{}.pirdb", spec.name));
        built.push(Building::create(
            spec,
            records,
            &path,
            args.sign_key.as_deref(),
        )?);
    }
    let [accounts, code, storage] = &mut built[..] else {
        unreachable!("three tables")
    };
    let rng_seed = args.seed.unwrap_or_else(rand::random);
    let mut accounts_t = Table::empty(accounts.params, accounts.writer.pages_mut(), rng_seed);
    let mut code_t = Table::empty(code.params, code.writer.pages_mut(), rng_seed ^ 1);
    let mut storage_t = Table::empty(storage.params, storage.writer.pages_mut(), rng_seed ^ 2);
    progress.stage(
        &format!("filling the tables from {}", args.dump.display()),
        crate::output::file_len(&args.dump),
        crate::output::BYTES,
    );
    let input = progress.wrap_read(crate::kv::records::open(&args.dump)?);
    let summary = dump::read(
        input,
        args.max_code_size as usize,
        out,
        &mut |item| match item {
            Item::Account {
                address,
                account,
                code,
            } => {
                place(&mut accounts_t, &address, &account.to_bytes(), "address")?;
                if let Some(code) = code {
                    let tag = code_t.params().tag(&account.code_hash);
                    match code_t.insert(&tag, code) {
                        // Shared code: the hash was checked to be the code's, so it is the same.
                        Ok(()) | Err(PlaceError::Duplicate) => {}
                        Err(e) => return Err(full(e, "code")),
                    }
                }
                Ok(())
            }
            Item::Slot {
                address,
                slot,
                value,
            } => place(
                &mut storage_t,
                &storage_key(&address, &slot),
                &value,
                "storage slot",
            ),
        },
    )
    .with_context(|| format!("reading {}", args.dump.display()))?;
    let meta = Meta {
        block,
        state_root: summary.root.unwrap_or_default(),
    };
    place(&mut accounts_t, META_KEY, &meta.to_bytes(), "metadata key")
        .map_err(anyhow::Error::msg)?;
    let loads = [accounts_t.load(), code_t.load(), storage_t.load()];
    let distinct_codes = code_t.records();
    drop((accounts_t, code_t, storage_t));
    progress.clear();
    for b in built {
        b.finish()?;
    }
    let report = serde_json::json!({
        "block": block,
        "state_root": summary.root.map(|r| tables::data(&r)),
        "epoch": 0,
        "accounts": summary.accounts,
        "storage_slots": summary.slots,
        "codes": distinct_codes,
        "signed": args.sign_key.is_some(),
        "tables": specs.iter().zip(loads).map(|(s, load)| serde_json::json!({
            "name": s.name, "file": format!("{}.pirdb", s.name), "load": load,
        })).collect::<Vec<_>>(),
    });
    write_report(&out.join("eth.json"), &report)?;
    progress.finish(&format!(
        "wrote {}: block {block}, {} accounts, {} storage slots, {distinct_codes} distinct codes \
         in accounts.pirdb, storage.pirdb, code.pirdb (epoch 0), {:.1} s",
        out.display(),
        summary.accounts,
        summary.slots,
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// What the first pass counted.
struct Counts {
    accounts: u64,
    slots: u64,
    /// Distinct code hashes, counted by their first 8 bytes (a collision only sizes the table
    /// one record smaller).
    codes: u64,
}

fn count(
    args: &ImportArgs,
    out: &Path,
    progress: &crate::output::Progress,
) -> anyhow::Result<Counts> {
    progress.stage(
        &format!("checking {}", args.dump.display()),
        crate::output::file_len(&args.dump),
        crate::output::BYTES,
    );
    let input = progress.wrap_read(crate::kv::records::open(&args.dump)?);
    let mut codes: HashSet<u64> = HashSet::new();
    let summary = dump::read(input, args.max_code_size as usize, out, &mut |item| {
        if let Item::Account {
            code: Some(_),
            account,
            ..
        } = item
        {
            codes.insert(u64::from_le_bytes(
                account.code_hash[..8].try_into().expect("8 bytes"),
            ));
        }
        Ok(())
    })
    .with_context(|| format!("reading {}", args.dump.display()))?;
    if summary.accounts == 0 {
        bail!(
            "{} holds no account: there is nothing to import",
            args.dump.display()
        );
    }
    Ok(Counts {
        accounts: summary.accounts,
        slots: summary.slots,
        codes: codes.len() as u64,
    })
}

/// Inserts a new record; a duplicate key is the dump's error.
pub fn place(table: &mut Table, key: &[u8], value: &[u8], what: &str) -> Result<(), String> {
    let tag = table.params().tag(key);
    match table.insert(&tag, value) {
        Ok(()) => Ok(()),
        Err(PlaceError::Duplicate) => Err(format!("duplicate {what}: an earlier line has it")),
        Err(e) => Err(full(e, what)),
    }
}

fn full(e: PlaceError, what: &str) -> String {
    format!("placing a {what}: {e} (the table was sized for the dump: a bug, please report it)")
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
