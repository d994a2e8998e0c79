//! `pirq eth gen`: a synthetic state as geth's `dump --iterative` prints one, for tests and for
//! measuring at Ethereum's size (docs/bench/eth.md).
//!
//! Account `i` has address keccak256(seed ‖ i)[12..], a balance and nonce drawn from the same
//! hash; every `--contract-every`-th account is a contract with one of `--codes` distinct codes
//! (code 0 is the largest, 24,576 bytes; the others of assorted sizes) and `--slots` storage
//! slots (slot 0 holds a small value, printed without leading zeros as geth does). Storage is
//! printed before the address, as geth does. Roots are stand-ins (the dump's roots are carried,
//! never recomputed); code hashes are real (keccak256 of the code), since the import checks them.
//!
//! `--changed M` prints the same state one block later: about M accounts (drawn) changed
//! (balance, nonce), contracts among them with slot 1 changed, slot 2 cleared and a slot added,
//! and M/10 new accounts at the end; `--blocks K` with it, K blocks later (each block its own
//! draw), so `--blocks 1..5` are five successive blocks; `--changes-only` prints block K's
//! changes alone (the accounts it changed or added, only their changed slots, "0" for a cleared
//! one: `eth import --changes`). `--deleted D` with it: each block also deletes about D of the
//! base's accounts (never the first contract of a code, so every code keeps the contract it is
//! placed at), absent from every later state; `--changes-only` prints each as a deletion line
//! listing the slots it held. Without it (0) nothing is drawn: the outputs are as before.
//!
//! `--tables DIR` writes, instead of the dump, the tables `eth import` makes of it: each
//! account's records computed on all cores and placed in the dump's order by the import's own
//! placement ([`super::import::write_tables`]), so the files are the same bytes, without the
//! text (Ethereum's size in about a minute on a GPU host, docs/bench/eth.md).

use std::collections::HashSet;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Args;
use pirq_shared::kv::KvParams;
use rayon::prelude::*;

use super::import::{Counts, Part, Settings};
use super::tables::{
    self, keccak256, storage_key, Account, EMPTY_CODE_HASH, EMPTY_ROOT, MAX_CODE_SIZE,
};

#[derive(Args)]
pub struct GenArgs {
    /// Accounts in the state (before --changed adds some).
    #[arg(long)]
    accounts: u64,
    /// Every this-many-th account is a contract (account 0 included).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    contract_every: u64,
    /// Storage slots of each contract.
    #[arg(long, default_value_t = 4)]
    slots: u64,
    /// Distinct codes the contracts share.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    codes: u64,
    /// The state one block later: about this many accounts (and contracts' slots) changed.
    #[arg(long, default_value_t = 0)]
    changed: u64,
    /// With --changed: the state this many blocks later, each block changing its own draw of
    /// about --changed accounts (and adding --changed/10), so successive values give
    /// successive blocks of like size.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    blocks: u64,
    /// With --changed: each block also deletes about this many of the base's accounts
    /// (contracts with their slots; never the first contract of a code).
    #[arg(long, default_value_t = 0, requires = "changed")]
    deleted: u64,
    /// With --changed: print only the last block's changes (`eth import --changes` form: the
    /// accounts it changed or added, each with only the slots it changed, "0" for a cleared
    /// one), what `eth import --base` of the block before needs.
    #[arg(long, requires = "changed")]
    changes_only: bool,
    /// Seed of everything (the same seed and counts give the same dump).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output file (`-`: standard output).
    #[arg(long, required_unless_present = "tables")]
    out: Option<PathBuf>,
    /// Instead of the dump, the tables `eth import --dump DUMP --out DIR` writes of it
    /// (DIR/NAME.pirdb and DIR/eth.json, the same bytes with the same --block and
    /// --layout-seed), made on all cores straight from the accounts.
    #[arg(long, conflicts_with = "out")]
    tables: Option<PathBuf>,
    /// With --tables: eth import's --block.
    #[arg(long, default_value_t = 0, requires = "tables")]
    block: u64,
    /// With --tables: eth import's --seed (the tables' hashes; random when absent).
    #[arg(long, requires = "tables")]
    layout_seed: Option<u64>,
    /// With --tables: eth import's --sign-key.
    #[arg(long, requires = "tables")]
    sign_key: Option<PathBuf>,
    /// No progress bar, even on a terminal.
    #[arg(long)]
    quiet: bool,
}

/// keccak256(seed ‖ i ‖ what): every number of account `i`, reproducibly.
fn draw(seed: u64, i: u64, what: &[u8]) -> [u8; 32] {
    draw2(seed, i, what, &[])
}

/// [`draw`] of `what ‖ more`, without joining them first (hundreds of millions of draws make a
/// state of Ethereum's size).
fn draw2(seed: u64, i: u64, what: &[u8], more: &[u8]) -> [u8; 32] {
    use sha3::Digest;
    sha3::Keccak256::new()
        .chain_update(seed.to_le_bytes())
        .chain_update(i.to_le_bytes())
        .chain_update(what)
        .chain_update(more)
        .finalize()
        .into()
}

/// Code `j` of the state: code 0 the largest a contract may have, the others 1..=4096 bytes.
fn code(seed: u64, j: u64) -> Vec<u8> {
    let len = if j == 0 {
        MAX_CODE_SIZE as usize
    } else {
        1 + u64::from_le_bytes(draw(seed, j, b"code-len")[..8].try_into().expect("8")) as usize
            % 4096
    };
    let mut out = Vec::with_capacity(len);
    let mut block = 0u64;
    while out.len() < len {
        out.extend_from_slice(&draw(seed, j << 20 | block, b"code"));
        block += 1;
    }
    out.truncate(len);
    out
}

/// The synthetic state: every account's numbers from its index, the same for the dump printer
/// and the table writer.
struct Synth {
    seed: u64,
    accounts: u64,
    contract_every: u64,
    slots: u64,
    codes: Vec<(Vec<u8>, [u8; 32])>,
    changed: u64,
    /// Blocks after the base (0 without --changed).
    blocks: u64,
    /// One account changed in this many, each block (with --changed).
    step: Option<u64>,
    /// One account deleted in this many, each block (with --deleted).
    delete_step: Option<u64>,
}

/// Account `i` of the state.
struct SynthAccount {
    address: [u8; 20],
    /// Wei, below 2^80.
    balance: u128,
    nonce: u64,
    /// (code index, storage root) of a contract.
    contract: Option<(usize, [u8; 32])>,
    /// The last block (of 1..=blocks) that changed the account, 0 for none.
    version: u64,
}

impl Synth {
    fn new(args: &GenArgs) -> anyhow::Result<Synth> {
        if args.changed > 0 && args.slots > 1000 {
            bail!("--changed adds slot 1000 to changed contracts: give --slots 1000 or fewer");
        }
        let codes = (0..args.codes)
            .map(|j| {
                let c = code(args.seed, j);
                let h = keccak256(&c);
                (c, h)
            })
            .collect();
        Ok(Synth {
            seed: args.seed,
            accounts: args.accounts,
            contract_every: args.contract_every,
            slots: args.slots,
            codes,
            changed: args.changed,
            blocks: if args.changed > 0 { args.blocks } else { 0 },
            step: (args.changed > 0).then(|| (args.accounts / args.changed).max(1)),
            delete_step: (args.changed > 0 && args.deleted > 0)
                .then(|| (args.accounts / args.deleted).max(1)),
        })
    }

    /// Accounts added per block.
    fn added_per_block(&self) -> u64 {
        self.changed / 10
    }

    /// Accounts in the state `blocks` blocks after the base.
    fn total(&self) -> u64 {
        self.accounts + self.added_per_block() * self.blocks
    }

    fn root(&self) -> [u8; 32] {
        draw(self.seed, self.changed, &self.blocks.to_le_bytes())
    }

    fn is_contract(&self, i: u64) -> bool {
        i.is_multiple_of(self.contract_every) && i < self.accounts
    }

    /// The code index of contract `i`.
    fn code_of(&self, i: u64) -> usize {
        (i / self.contract_every % self.codes.len() as u64) as usize
    }

    /// Whether block `k` changed account `i` (of the base's accounts).
    fn changed_in(&self, i: u64, k: u64) -> bool {
        let Some(s) = self.step else { return false };
        let d = draw2(self.seed, i, b"changed", &k.to_le_bytes());
        u64::from_le_bytes(d[..8].try_into().expect("8")) % s == 0
    }

    /// Whether block `k` deleted account `i`: a base account, not the first contract of its
    /// code (where the import places the code), drawn apart from the changes.
    fn deleted_in(&self, i: u64, k: u64) -> bool {
        let Some(s) = self.delete_step else {
            return false;
        };
        if i >= self.accounts
            || (self.is_contract(i) && i / self.contract_every < self.codes.len() as u64)
        {
            return false;
        }
        let d = draw2(self.seed, i, b"deleted", &k.to_le_bytes());
        u64::from_le_bytes(d[..8].try_into().expect("8")) % s == 0
    }

    /// Whether a block up to `upto` deleted account `i`.
    fn deleted_by(&self, i: u64, upto: u64) -> bool {
        self.delete_step.is_some() && (1..=upto).any(|k| self.deleted_in(i, k))
    }

    /// The last block up to `upto` that changed account `i` (or added it), 0 for none.
    fn version(&self, i: u64, upto: u64) -> u64 {
        if i >= self.accounts {
            return 1 + (i - self.accounts) / self.added_per_block().max(1);
        }
        (1..=upto)
            .rev()
            .find(|&k| self.changed_in(i, k))
            .unwrap_or(0)
    }

    fn account(&self, i: u64) -> SynthAccount {
        self.account_at(i, self.version(i, self.blocks))
    }

    fn account_at(&self, i: u64, version: u64) -> SynthAccount {
        let state = version.to_le_bytes();
        let state: &[u8] = &state;
        let address: [u8; 20] = draw(self.seed, i, b"address")[12..]
            .try_into()
            .expect("20 bytes");
        let money = draw2(self.seed, i, b"balance", state);
        // Up to 2^80 wei (~1.2 M ether): a decimal of up to 25 digits.
        let balance = u128::from_be_bytes(money[..16].try_into().expect("16")) >> 48;
        let nonce = u64::from_le_bytes(money[16..24].try_into().expect("8")) % 1000
            + if i < self.accounts { version } else { 0 };
        let contract = self
            .is_contract(i)
            .then(|| (self.code_of(i), draw2(self.seed, i, b"root", state)));
        SynthAccount {
            address,
            balance,
            nonce,
            contract,
            version,
        }
    }

    /// The account record `eth import` makes of the account's line.
    fn record(&self, a: &SynthAccount) -> Account {
        let mut balance = [0u8; 32];
        balance[16..].copy_from_slice(&a.balance.to_be_bytes());
        let (code_hash, storage_root) = match a.contract {
            Some((j, root)) => (self.codes[j].1, root),
            None => (EMPTY_CODE_HASH, EMPTY_ROOT),
        };
        Account {
            balance,
            nonce: a.nonce,
            code_hash,
            storage_root,
        }
    }

    /// Contract `i`'s storage at `version`.
    fn storage(&self, i: u64, version: u64) -> Vec<([u8; 32], [u8; 32])> {
        contract_storage(self.seed, i, self.slots, version)
    }

    /// Slots of a contract at `version` (non-zero values, as the import counts them).
    fn storage_len(&self, version: u64) -> u64 {
        if version == 0 {
            self.slots
        } else {
            self.slots - u64::from(self.slots > 2) + 1
        }
    }

    /// What `eth import` of the dump counts: accounts, slots, distinct codes.
    fn counts(&self) -> Counts {
        let contracts = self.accounts.div_ceil(self.contract_every);
        let slots: u64 = (0..contracts)
            .into_par_iter()
            .map(|c| {
                let i = c * self.contract_every;
                if self.deleted_by(i, self.blocks) {
                    return 0;
                }
                self.storage_len(self.version(i, self.blocks))
            })
            .sum();
        let deleted = match self.delete_step {
            Some(_) => (0..self.accounts)
                .into_par_iter()
                .filter(|&i| self.deleted_by(i, self.blocks))
                .count() as u64,
            None => 0,
        };
        let codes: HashSet<u64> = self
            .codes
            .iter()
            .take(contracts.min(self.codes.len() as u64) as usize)
            .map(|(_, h)| super::import::code_key(h))
            .collect();
        Counts {
            accounts: self.total() - deleted,
            slots,
            codes: codes.len() as u64,
        }
    }
}

pub fn run(args: GenArgs) -> anyhow::Result<()> {
    let synth = Synth::new(&args)?;
    match (&args.out, &args.tables) {
        (Some(out), None) => print_dump(&args, &synth, out),
        (None, Some(dir)) => write_tables(&args, &synth, dir),
        _ => bail!("give --out (a dump) or --tables (the tables eth import would write of it)"),
    }
}

fn print_dump(args: &GenArgs, synth: &Synth, out: &Path) -> anyhow::Result<()> {
    let file: Box<dyn Write> = if out == Path::new("-") {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?)
    };
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let total = synth.total();
    // Each line: the account and the version its storage is compared with (--changes-only).
    let lines: Box<dyn Iterator<Item = (u64, Option<u64>)>> = if args.changes_only {
        let k = synth.blocks;
        // An account this block deletes, or an earlier one did, has no line of its own here.
        let mut changed: Vec<u64> = (0..synth.accounts)
            .into_par_iter()
            .filter(|&i| synth.changed_in(i, k) && !synth.deleted_by(i, k))
            .collect();
        changed.sort_unstable();
        let added = synth.accounts + synth.added_per_block() * (k - 1)..total;
        Box::new(
            changed
                .into_iter()
                .map(move |i| (i, Some(synth.version(i, k - 1))))
                .chain(added.map(|i| (i, Some(0)))),
        )
    } else {
        Box::new(
            (0..total)
                .filter(|&i| !synth.deleted_by(i, synth.blocks))
                .map(|i| (i, None)),
        )
    };
    let progress = crate::output::Progress::new(Some(total), "accounts", args.quiet);
    let header = format!("{{\"root\":\"{}\"}}", tables::data(&synth.root()));
    // The io::Error stays in the chain: a reader that stops early (a closed pipe) ends the
    // command quietly, as for every other command.
    let io =
        |e: std::io::Error| anyhow::Error::from(e).context(format!("writing {}", out.display()));
    writeln!(w, "{header}").map_err(io)?;
    let mut printed = 0u64;
    for (i, before) in lines {
        printed += 1;
        print_account(&mut w, synth, i, before).map_err(io)?;
        if i % 4096 == 0 {
            progress.set_position(i);
        }
    }
    let deleted = if args.changes_only {
        print_deletions(synth, &mut w).map_err(io)?
    } else {
        0
    };
    w.flush().map_err(io)?;
    if args.changes_only {
        let deleted = if deleted > 0 {
            format!(", {deleted} deleted")
        } else {
            String::new()
        };
        progress.finish(&format!(
            "wrote {}: the changes of block {} ({printed} accounts changed or added{deleted})",
            out.display(),
            synth.blocks
        ));
        return Ok(());
    }
    progress.finish(&format!(
        "wrote {}: {total} accounts ({} contracts of {} distinct codes, {} slots each){}",
        out.display(),
        args.accounts.div_ceil(args.contract_every),
        args.codes,
        args.slots,
        match synth.step {
            Some(s) => format!(
                ", {} block(s) later: each block changed one account in {s} and added {}",
                synth.blocks,
                synth.added_per_block()
            ),
            None => String::new(),
        }
    ));
    Ok(())
}

/// One account's line of the dump: its fields, and for a contract its code and storage (with
/// `before`, the version its storage is compared with under --changes-only: only the slots
/// that changed, and "0" for those cleared).
fn print_account(
    w: &mut impl Write,
    synth: &Synth,
    i: u64,
    before: Option<u64>,
) -> std::io::Result<()> {
    let a = synth.account(i);
    write!(w, "{{\"balance\":\"{}\",\"nonce\":{},", a.balance, a.nonce)?;
    if let Some((j, root)) = a.contract {
        let (code, hash) = &synth.codes[j];
        write!(
            w,
            "\"root\":\"{}\",\"codeHash\":\"{}\",\"code\":\"{}\",\"storage\":{{",
            tables::data(&root),
            tables::data(hash),
            tables::data(code)
        )?;
        let mut first = true;
        let now = synth.storage(i, a.version);
        let old = before.map(|v| synth.storage(i, v)).unwrap_or_default();
        let cleared = old.iter().filter(|(s, _)| now.iter().all(|(n, _)| n != s));
        let cleared = cleared.map(|&(s, _)| (s, [0u8; 32]));
        for (slot, value) in now
            .iter()
            .filter(|&slot| before.is_none() || !old.contains(slot))
            .copied()
            .chain(cleared)
        {
            let sep = if first { "" } else { "," };
            first = false;
            // Values without their leading zero bytes and without 0x, as geth prints them
            // ("0" for a cleared slot of --changes-only).
            let v = hex::encode(value);
            let v = v.trim_start_matches("00");
            let v = if v.is_empty() { "0" } else { v };
            write!(w, "{sep}\"{}\":\"{v}\"", tables::data(&slot))?;
        }
        write!(w, "}},")?;
    } else {
        write!(
            w,
            "\"root\":\"{}\",\"codeHash\":\"{}\",",
            tables::data(&EMPTY_ROOT),
            tables::data(&EMPTY_CODE_HASH)
        )?;
    }
    writeln!(
        w,
        "\"address\":\"{}\",\"key\":\"{}\"}}",
        tables::data(&a.address),
        tables::data(&keccak256(&a.address))
    )?;
    Ok(())
}

/// The deletion lines of the last block's changes (`{"address": A, "deleted": true, "storage":
/// {slot: "0", …}}`, each listing the slots the account held): how many.
fn print_deletions(synth: &Synth, w: &mut impl Write) -> std::io::Result<u64> {
    let k = synth.blocks;
    if synth.delete_step.is_none() {
        return Ok(0);
    }
    let mut deleted: Vec<u64> = (0..synth.accounts)
        .into_par_iter()
        .filter(|&i| synth.deleted_in(i, k) && !synth.deleted_by(i, k - 1))
        .collect();
    deleted.sort_unstable();
    for &i in &deleted {
        let a = synth.account_at(i, synth.version(i, k - 1));
        write!(
            w,
            "{{\"address\":\"{}\",\"deleted\":true",
            tables::data(&a.address)
        )?;
        if a.contract.is_some() {
            let slots: Vec<String> = synth
                .storage(i, a.version)
                .iter()
                .map(|(slot, _)| format!("\"{}\":\"0\"", tables::data(slot)))
                .collect();
            write!(w, ",\"storage\":{{{}}}", slots.join(","))?;
        }
        writeln!(w, "}}")?;
    }
    Ok(deleted.len() as u64)
}

/// Accounts one task makes.
const TASK_ACCOUNTS: u64 = 1 << 14;

/// The tables `eth import --dump D --out DIR --block N --seed S` writes of the dump D that
/// --out would print, made straight from the accounts on all cores (no text in between): the
/// records in the dump's order through the same placement ([`super::build`]), so the same
/// bytes.
fn write_tables(args: &GenArgs, synth: &Synth, dir: &Path) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let progress = crate::output::Progress::stages(args.quiet);
    progress.stage("counting", None, "records");
    let counts = synth.counts();
    let settings = Settings {
        out: dir,
        block: args.block,
        seed: args.layout_seed,
        sign_key: args.sign_key.as_deref(),
        max_code_size: MAX_CODE_SIZE,
    };
    let total = synth.total();
    let written = super::import::write_tables(&settings, &counts, &progress, |fill| {
        progress.stage("placing the accounts", Some(total), "accounts");
        let params = fill.params();
        let batch = TASK_ACCOUNTS * rayon::current_num_threads() as u64 * 4;
        let mut start = 0;
        while start < total {
            let end = (start + batch).min(total);
            let parts: Vec<Part> = (start..end)
                .step_by(TASK_ACCOUNTS as usize)
                .collect::<Vec<_>>()
                .into_par_iter()
                .map(|from| {
                    let mut part = Part::default();
                    for i in from..(from + TASK_ACCOUNTS).min(end) {
                        synth.add_records(i, &params, &mut part);
                    }
                    part
                })
                .collect();
            fill.add(&parts);
            progress.set_position(end);
            start = end;
        }
        Ok(Some(synth.root()))
    })?;
    progress.clear();
    progress.finish(&format!(
        "wrote {}: block {}, {total} accounts, {} storage slots, {} distinct codes (the tables \
         of the dump --out would print), {:.1} s",
        dir.display(),
        args.block,
        counts.slots,
        written.codes,
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

impl Synth {
    /// Account `i`'s records, as the import makes them of its line: the account, its code at
    /// its first contract (the import places a code once), its non-zero slots in order.
    fn add_records(&self, i: u64, params: &[KvParams; 3], part: &mut Part) {
        if self.deleted_by(i, self.blocks) {
            return;
        }
        let a = self.account(i);
        let record = self.record(&a);
        part.accounts
            .push(&params[0], &a.address, &record.to_bytes());
        if let Some((j, _)) = a.contract {
            if i / self.contract_every < self.codes.len() as u64 {
                let (code, hash) = &self.codes[j];
                part.codes.push((*hash, code.clone()));
            }
            for (slot, value) in self.storage(i, a.version) {
                if value != [0; 32] {
                    part.storage
                        .push(&params[2], &storage_key(&a.address, &slot), &value);
                }
            }
        }
    }
}

/// Contract `i`'s storage: slot k (k < `slots`) = a value drawn for it, slot 0 a small one.
/// Changed by block `version` (> 0): slot 1 has a new value, slot 2 is cleared, slot 1000 is
/// new.
fn contract_storage(seed: u64, i: u64, slots: u64, version: u64) -> Vec<([u8; 32], [u8; 32])> {
    let changed = version > 0;
    let word = |k: u64| {
        let mut w = [0u8; 32];
        w[24..].copy_from_slice(&k.to_be_bytes());
        w
    };
    let mut out = Vec::new();
    for k in 0..slots {
        if changed && k == 2 {
            continue;
        }
        let next = version.to_le_bytes();
        let mut value = if changed && k == 1 {
            draw2(seed, i << 16 | k, b"slot-next", &next)
        } else {
            draw(seed, i << 16 | k, b"slot")
        };
        if k == 0 {
            value = word(value[31] as u64 + 1);
        }
        out.push((word(k), value));
    }
    if changed {
        out.push((word(1000), draw(seed, i ^ version << 48, b"slot-added")));
    }
    out
}
