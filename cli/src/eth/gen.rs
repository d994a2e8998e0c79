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
//! draw), so `--blocks 1..5` are five successive blocks.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use super::tables::{self, keccak256, EMPTY_CODE_HASH, EMPTY_ROOT, MAX_CODE_SIZE};

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
    /// Seed of everything (the same seed and counts give the same dump).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output file (`-`: standard output).
    #[arg(long)]
    out: PathBuf,
    /// No progress bar, even on a terminal.
    #[arg(long)]
    quiet: bool,
}

/// keccak256(seed ‖ i ‖ what): every number of account `i`, reproducibly.
fn draw(seed: u64, i: u64, what: &[u8]) -> [u8; 32] {
    let mut input = Vec::with_capacity(16 + what.len());
    input.extend_from_slice(&seed.to_le_bytes());
    input.extend_from_slice(&i.to_le_bytes());
    input.extend_from_slice(what);
    keccak256(&input)
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

pub fn run(args: GenArgs) -> anyhow::Result<()> {
    let file: Box<dyn Write> = if args.out == std::path::Path::new("-") {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(
            std::fs::File::create(&args.out)
                .with_context(|| format!("creating {}", args.out.display()))?,
        )
    };
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let codes: Vec<(Vec<u8>, [u8; 32])> = (0..args.codes)
        .map(|j| {
            let c = code(args.seed, j);
            let h = keccak256(&c);
            (c, h)
        })
        .collect();
    let step = (args.changed > 0).then(|| (args.accounts / args.changed).max(1));
    let blocks = if args.changed > 0 { args.blocks } else { 0 };
    let added = args.changed / 10 * blocks;
    let total = args.accounts + added;
    let progress = crate::output::Progress::new(Some(total), "accounts", args.quiet);
    let header = format!(
        "{{\"root\":\"{}\"}}",
        tables::data(&draw(args.seed, args.changed, &blocks.to_le_bytes()))
    );
    // The io::Error stays in the chain: a reader that stops early (a closed pipe) ends the
    // command quietly, as for every other command.
    let io = |e: std::io::Error| {
        anyhow::Error::from(e).context(format!("writing {}", args.out.display()))
    };
    writeln!(w, "{header}").map_err(io)?;
    for i in 0..total {
        // The last block (of 1..=blocks) that changed account i, 0 for none.
        let version = match step {
            _ if i >= args.accounts => 1 + (i - args.accounts) / (args.changed / 10).max(1),
            Some(s) => (1..=blocks)
                .rev()
                .find(|k| {
                    let d = draw(
                        args.seed,
                        i,
                        &[b"changed" as &[u8], &k.to_le_bytes()].concat(),
                    );
                    u64::from_le_bytes(d[..8].try_into().expect("8")) % s == 0
                })
                .unwrap_or(0),
            None => 0,
        };
        let state = version.to_le_bytes();
        let state: &[u8] = &state;
        let address: [u8; 20] = draw(args.seed, i, b"address")[12..]
            .try_into()
            .expect("20 bytes");
        let money = draw(args.seed, i, &[b"balance" as &[u8], state].concat());
        // Up to 2^80 wei (~1.2 M ether): a decimal of up to 25 digits.
        let balance = u128::from_be_bytes(money[..16].try_into().expect("16")) >> 48;
        let nonce = u64::from_le_bytes(money[16..24].try_into().expect("8")) % 1000
            + if i < args.accounts { version } else { 0 };
        let contract = i % args.contract_every == 0 && i < args.accounts;
        write!(w, "{{\"balance\":\"{balance}\",\"nonce\":{nonce},").map_err(io)?;
        if contract {
            let (code, hash) = &codes[(i / args.contract_every % args.codes) as usize];
            let root = draw(args.seed, i, &[b"root" as &[u8], state].concat());
            write!(
                w,
                "\"root\":\"{}\",\"codeHash\":\"{}\",\"code\":\"{}\",\"storage\":{{",
                tables::data(&root),
                tables::data(hash),
                tables::data(code)
            )
            .map_err(io)?;
            let mut first = true;
            for (slot, value) in contract_storage(args.seed, i, args.slots, version) {
                let sep = if first { "" } else { "," };
                first = false;
                // Values without their leading zero bytes and without 0x, as geth prints them.
                let v = hex::encode(value);
                let v = v.trim_start_matches("00");
                write!(w, "{sep}\"{}\":\"{v}\"", tables::data(&slot)).map_err(io)?;
            }
            write!(w, "}},").map_err(io)?;
        } else {
            write!(
                w,
                "\"root\":\"{}\",\"codeHash\":\"{}\",",
                tables::data(&EMPTY_ROOT),
                tables::data(&EMPTY_CODE_HASH)
            )
            .map_err(io)?;
        }
        writeln!(
            w,
            "\"address\":\"{}\",\"key\":\"{}\"}}",
            tables::data(&address),
            tables::data(&keccak256(&address))
        )
        .map_err(io)?;
        if i % 4096 == 0 {
            progress.set_position(i);
        }
    }
    w.flush().map_err(io)?;
    progress.finish(&format!(
        "wrote {}: {total} accounts ({} contracts of {} distinct codes, {} slots each){}",
        args.out.display(),
        args.accounts.div_ceil(args.contract_every),
        args.codes,
        args.slots,
        match step {
            Some(s) => format!(
                ", {blocks} block(s) later: each block changed one account in {s} and added {}",
                args.changed / 10
            ),
            None => String::new(),
        }
    ));
    Ok(())
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
        let what: Vec<u8> = if changed && k == 1 {
            [b"slot-next" as &[u8], &version.to_le_bytes()].concat()
        } else {
            b"slot".to_vec()
        };
        let mut value = draw(seed, i << 16 | k, &what);
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
