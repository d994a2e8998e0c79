//! Reading `geth dump --iterative` output as a stream: one JSON object a line, an optional first
//! line `{"root": "…"}` (the state root), then one account a line:
//!
//! ```text
//! {"balance":"1000","nonce":3,"root":"0x56e8…","codeHash":"0xc5d2…","code":"0x6080…",
//!  "storage":{"0x00…01":"2a"},"address":"0x7e5f…","key":"0x…"}
//! ```
//!
//! `balance` is decimal, hex fields come with or without `0x`, storage values without their
//! leading zero bytes (as geth prints them); `code` and `storage` are left out when empty;
//! unknown fields (geth's `key`, the hashed address) are ignored. The dump is the publisher's
//! trusted input: its roots are carried, not recomputed; only what is cheap to check is
//! (a code hash is keccak256 of the code).
//!
//! Memory stays bounded whatever the dump: objects are parsed from the stream without holding a
//! line, and an account's storage, which geth prints before the address it belongs to, is held
//! until the address comes: in memory up to [`SLOTS_IN_MEMORY`] slots, then in a temporary
//! file beside the output (a contract may have tens of millions of slots).
//!
//! Every error names the dump's line.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};

use super::tables::{
    self, keccak256, parse_decimal_u256, parse_fixed, parse_word, Account, EMPTY_CODE_HASH,
    EMPTY_ROOT,
};

/// Storage slots of one account held in memory before they go to a temporary file (64 bytes
/// each: 64 MiB).
pub const SLOTS_IN_MEMORY: usize = 1 << 20;

/// Longest line parsed from memory; a longer one is parsed as a stream.
const LINE_IN_MEMORY: usize = 16 << 20;

/// One thing a dump says, handed to the reader's sink in order: an account, then its storage.
pub enum Item<'a> {
    Account {
        address: [u8; 20],
        account: Account,
        /// The code, when the account has some.
        code: Option<&'a [u8]>,
    },
    /// A non-zero storage value (zero values are absent from the state, as from a node); in a
    /// block's changes, a zero value too (a slot the block cleared).
    Slot {
        address: [u8; 20],
        slot: [u8; 32],
        value: [u8; 32],
    },
    /// A block's changes only ([`read_changes`]): the block deleted the account. The slots its
    /// line lists (each to be cleared) follow as zero [`Item::Slot`]s.
    Deleted {
        address: [u8; 20],
        /// How many slots the line lists.
        slots: u64,
    },
}

/// What a whole dump held.
#[derive(Clone, Copy, Debug, Default)]
pub struct Summary {
    /// The header line's state root, when the dump has one.
    pub root: Option<[u8; 32]>,
    pub accounts: u64,
    pub slots: u64,
    /// Accounts a block's changes deleted (never in a whole dump).
    pub deleted: u64,
    pub lines: u64,
}

impl Summary {
    /// Counts a later part of the dump in (its root, if it read the header; lines apart).
    fn add(&mut self, later: &Summary) {
        if later.root.is_some() {
            self.root = later.root;
        }
        self.accounts += later.accounts;
        self.slots += later.slots;
        self.deleted += later.deleted;
    }
}

/// Reads the dump from `input`, handing each account and slot to `sink` (which may refuse one:
/// its message is reported with the line). `spill_dir` holds the temporary file of a huge
/// account's storage, if one is needed.
pub fn read(
    input: Box<dyn BufRead + Send>,
    max_code_size: usize,
    spill_dir: &Path,
    sink: &mut dyn FnMut(Item) -> Result<(), String>,
) -> anyhow::Result<Summary> {
    read_capped(input, max_code_size, spill_dir, sink, LINE_IN_MEMORY, false)
}

/// [`read`] of a block's changes (`eth import --changes`): lines of the dump's form, each an
/// account as it is after the block, its `storage` holding only the slots the block changed,
/// a zero value for a slot it cleared (handed on as a zero [`Item::Slot`]), and no `storage`
/// when it changed none; or an account the block deleted, `{"address": A, "deleted": true}`
/// and no other field of an account but `storage`, which lists the slots it held, each `"0"`
/// ([`Item::Deleted`], then its slots). Each line's storage is handed on after its account.
pub fn read_changes(
    input: Box<dyn BufRead + Send>,
    max_code_size: usize,
    spill_dir: &Path,
    sink: &mut dyn FnMut(Item) -> Result<(), String>,
) -> anyhow::Result<Summary> {
    read_capped(input, max_code_size, spill_dir, sink, LINE_IN_MEMORY, true)
}

/// [`read`], lines longer than `cap` bytes parsed as streams.
fn read_capped(
    input: Box<dyn BufRead + Send>,
    max_code_size: usize,
    spill_dir: &Path,
    sink: &mut dyn FnMut(Item) -> Result<(), String>,
    cap: usize,
    changes: bool,
) -> anyhow::Result<Summary> {
    let mut reader = Lines {
        inner: input,
        newlines: 0,
    };
    let mut ctx = Ctx::new(sink, max_code_size, spill_dir, true, changes);
    let mut line = Vec::new();
    loop {
        if !reader.skip_whitespace()? {
            break;
        }
        let start_line = reader.newlines + 1;
        // A line as a whole (fast: parsed from memory), unless it is longer than LINE_IN_MEMORY
        // (a contract with millions of slots): then what was read and the rest of the line are
        // parsed as a stream.
        let result = if reader.read_line_capped(&mut line, cap)? {
            let mut de = serde_json::Deserializer::from_slice(&line);
            LineSeed { ctx: &mut ctx }
                .deserialize(&mut de)
                .and_then(|()| de.end())
        } else {
            let head = io::Cursor::new(std::mem::take(&mut line));
            let mut de = serde_json::Deserializer::from_reader(head.chain(&mut reader));
            LineSeed { ctx: &mut ctx }.deserialize(&mut de)
        };
        if let Err(e) = result {
            return Err(line_error(&e, start_line));
        }
        ctx.first = false;
    }
    ctx.summary.lines = reader.newlines;
    Ok(ctx.summary)
}

/// An [`Item`] that owns its code, for the threads of [`read_parallel`].
pub enum Owned {
    Account {
        address: [u8; 20],
        account: Account,
        code: Option<Vec<u8>>,
    },
    Slot {
        address: [u8; 20],
        slot: [u8; 32],
        value: [u8; 32],
    },
}

impl Owned {
    fn of(item: Item) -> Owned {
        match item {
            Item::Account {
                address,
                account,
                code,
            } => Owned::Account {
                address,
                account,
                code: code.map(<[u8]>::to_vec),
            },
            Item::Slot {
                address,
                slot,
                value,
            } => Owned::Slot {
                address,
                slot,
                value,
            },
            Item::Deleted { .. } => {
                unreachable!(
                    "only a block's changes delete accounts, and they are read by read_changes"
                )
            }
        }
    }
}

/// Bytes of whole lines read before a batch is parsed.
const BATCH_BYTES: usize = 32 << 20;
/// Lines one task of a batch parses.
const TASK_LINES: usize = 1024;
/// Items of a line too long for memory handed on at a time.
const STREAMED_ITEMS: usize = 1 << 16;

/// [`read`] on all cores: lines are read in batches, each batch's lines parsed by rayon's
/// threads in runs of [`TASK_LINES`], each run's items (in order) turned into a `T` by `map` on
/// the same thread; `each` gets every batch's `T`s in input order. A line too long to hold
/// (over 16 MiB: a contract with hundreds of thousands of slots) is parsed alone as a stream,
/// its items handed on in runs of [`STREAMED_ITEMS`]. A bad line stops the read with the first
/// bad line of its batch named.
pub fn read_parallel<T: Send>(
    input: Box<dyn BufRead + Send>,
    max_code_size: usize,
    spill_dir: &Path,
    map: &(dyn Fn(Vec<Owned>) -> T + Sync),
    each: &mut dyn FnMut(Vec<T>) -> anyhow::Result<()>,
) -> anyhow::Result<Summary> {
    let mut reader = Lines {
        inner: input,
        newlines: 0,
    };
    let mut summary = Summary::default();
    let mut first = true;
    let mut buf: Vec<u8> = Vec::with_capacity(BATCH_BYTES + (1 << 20));
    let mut lines: Vec<(usize, usize, u64)> = Vec::new();
    loop {
        buf.clear();
        lines.clear();
        let mut long_line = None;
        let mut ended = false;
        while buf.len() < BATCH_BYTES {
            if !reader.skip_whitespace()? {
                ended = true;
                break;
            }
            let line_no = reader.newlines + 1;
            let start = buf.len();
            if reader.append_line_capped(&mut buf, start + LINE_IN_MEMORY)? {
                lines.push((start, buf.len(), line_no));
            } else {
                long_line = Some((buf.split_off(start), line_no));
                break;
            }
        }
        if !lines.is_empty() {
            let (outs, batch) = parse_batch(&buf, &lines, first, max_code_size, spill_dir, map)?;
            summary.add(&batch);
            first = false;
            each(outs)?;
        }
        if let Some((head, line_no)) = long_line {
            let line = stream_line(
                head,
                line_no,
                &mut reader,
                first,
                max_code_size,
                spill_dir,
                map,
                each,
            )?;
            summary.add(&line);
            first = false;
        }
        if ended {
            break;
        }
    }
    summary.lines = reader.newlines;
    Ok(summary)
}

/// One batch of whole lines of [`read_parallel`], parsed in parallel runs of [`TASK_LINES`]:
/// each run's items mapped, in input order, with the batch's summary; the error of the
/// earliest bad line.
fn parse_batch<T: Send>(
    buf: &[u8],
    lines: &[(usize, usize, u64)],
    first: bool,
    max_code_size: usize,
    spill_dir: &Path,
    map: &(dyn Fn(Vec<Owned>) -> T + Sync),
) -> anyhow::Result<(Vec<T>, Summary)> {
    use rayon::prelude::*;
    let results: Vec<Result<(T, Summary), (u64, anyhow::Error)>> = lines
        .par_chunks(TASK_LINES)
        .enumerate()
        .map(|(c, run)| {
            let mut items = Vec::with_capacity(run.len() * 2);
            let mut sink = |item: Item| {
                items.push(Owned::of(item));
                Ok(())
            };
            let mut ctx = Ctx::new(&mut sink, max_code_size, spill_dir, first && c == 0, false);
            for &(start, end, line_no) in run {
                let mut de = serde_json::Deserializer::from_slice(&buf[start..end]);
                LineSeed { ctx: &mut ctx }
                    .deserialize(&mut de)
                    .and_then(|()| de.end())
                    .map_err(|e| (line_no, line_error(&e, line_no)))?;
                ctx.first = false;
            }
            let run_summary = ctx.summary;
            drop(ctx);
            Ok((map(items), run_summary))
        })
        .collect();
    let mut outs = Vec::with_capacity(results.len());
    let mut summary = Summary::default();
    let mut failed: Option<(u64, anyhow::Error)> = None;
    for r in results {
        match r {
            Ok((t, s)) => {
                summary.add(&s);
                outs.push(t);
            }
            Err((line, e)) => {
                if failed.as_ref().is_none_or(|(l, _)| line < *l) {
                    failed = Some((line, e));
                }
            }
        }
    }
    match failed {
        Some((_, e)) => Err(e),
        None => Ok((outs, summary)),
    }
}

/// A line longer than [`LINE_IN_MEMORY`] (a contract with a huge storage): `head`, its start
/// already read, and the rest streamed from `reader`, its items handed to `each` in pieces of
/// [`STREAMED_ITEMS`] as they come.
#[allow(clippy::too_many_arguments)]
fn stream_line<T: Send>(
    head: Vec<u8>,
    line_no: u64,
    reader: &mut Lines,
    first: bool,
    max_code_size: usize,
    spill_dir: &Path,
    map: &(dyn Fn(Vec<Owned>) -> T + Sync),
    each: &mut dyn FnMut(Vec<T>) -> anyhow::Result<()>,
) -> anyhow::Result<Summary> {
    let mut items = Vec::new();
    let mut failed_each = None;
    let mut sink = |item: Item| {
        items.push(Owned::of(item));
        if items.len() >= STREAMED_ITEMS {
            if let Err(e) = each(vec![map(std::mem::take(&mut items))]) {
                let text = format!("{e:#}");
                failed_each = Some(e);
                return Err(text);
            }
        }
        Ok(())
    };
    let mut ctx = Ctx::new(&mut sink, max_code_size, spill_dir, first, false);
    let mut de = serde_json::Deserializer::from_reader(io::Cursor::new(head).chain(reader));
    let result = LineSeed { ctx: &mut ctx }.deserialize(&mut de);
    let line_summary = ctx.summary;
    drop(ctx);
    if let Some(e) = failed_each {
        return Err(e);
    }
    result.map_err(|e| line_error(&e, line_no))?;
    if !items.is_empty() {
        each(vec![map(items)])?;
    }
    Ok(line_summary)
}

/// `line N: why`, from a serde_json error in the object that starts on `start_line`. The line
/// is the object's own (one account a line), even where the parser noticed the fault on a later
/// line (an object left open runs into the next).
fn line_error(e: &serde_json::Error, start_line: u64) -> anyhow::Error {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let why = full.strip_suffix(&suffix).unwrap_or(&full);
    let why = if e.is_eof() {
        "the line ends inside a JSON object (a truncated dump?)"
    } else {
        why
    };
    anyhow::anyhow!("line {start_line}: {why}")
}

/// The input, counting the newlines taken from it (for errors and the summary).
struct Lines {
    inner: Box<dyn BufRead + Send>,
    newlines: u64,
}

impl Lines {
    /// Skips whitespace before the next object; false at the end of the input.
    fn skip_whitespace(&mut self) -> io::Result<bool> {
        loop {
            let buf = self.inner.fill_buf()?;
            if buf.is_empty() {
                return Ok(false);
            }
            let ws = buf
                .iter()
                .take_while(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
                .count();
            self.newlines += buf[..ws].iter().filter(|&&b| b == b'\n').count() as u64;
            let more = ws < buf.len();
            self.inner.consume(ws);
            if more {
                return Ok(true);
            }
        }
    }
}

impl Lines {
    /// Appends the rest of the line (without its newline) to `line`: true when it ended
    /// (newline or end of input) before `line` reached `cap` bytes, false when it reached
    /// `cap` and the line goes on.
    fn append_line_capped(&mut self, line: &mut Vec<u8>, cap: usize) -> io::Result<bool> {
        loop {
            let buf = self.inner.fill_buf()?;
            if buf.is_empty() {
                return Ok(true);
            }
            let room = cap - line.len();
            let window = &buf[..buf.len().min(room)];
            if let Some(end) = window.iter().position(|&b| b == b'\n') {
                line.extend_from_slice(&window[..end]);
                self.inner.consume(end + 1);
                self.newlines += 1;
                return Ok(true);
            }
            let n = window.len();
            line.extend_from_slice(window);
            self.inner.consume(n);
            if line.len() >= cap {
                return Ok(false);
            }
        }
    }

    /// Reads the rest of the line (without its newline) into `line`, replacing what was there:
    /// true when it ended (newline or end of input) within `cap` bytes, false when `cap` bytes
    /// were read and the line goes on.
    fn read_line_capped(&mut self, line: &mut Vec<u8>, cap: usize) -> io::Result<bool> {
        line.clear();
        self.append_line_capped(line, cap)
    }
}

impl Read for Lines {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(out)?;
        self.newlines += out[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        Ok(n)
    }
}

struct Ctx<'s> {
    sink: &'s mut dyn FnMut(Item) -> Result<(), String>,
    max_code_size: usize,
    held: Held,
    summary: Summary,
    first: bool,
    /// Reading a block's changes ([`read_changes`]), not a whole state.
    changes: bool,
}

impl<'s> Ctx<'s> {
    /// A reader's state before its first line: `first` when that line may be the header,
    /// `changes` when it reads a block's changes.
    fn new(
        sink: &'s mut dyn FnMut(Item) -> Result<(), String>,
        max_code_size: usize,
        spill_dir: &Path,
        first: bool,
        changes: bool,
    ) -> Ctx<'s> {
        Ctx {
            sink,
            max_code_size,
            held: Held::new(spill_dir),
            summary: Summary::default(),
            first,
            changes,
        }
    }
}

/// One line's object.
struct LineSeed<'c, 's> {
    ctx: &'c mut Ctx<'s>,
}

impl<'de> DeserializeSeed<'de> for LineSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

/// The fields of an account line as they come.
#[derive(Default)]
struct Fields {
    balance: Option<String>,
    nonce: Option<u64>,
    root: Option<String>,
    code_hash: Option<String>,
    code: Option<String>,
    address: Option<[u8; 20]>,
    /// Whether a `storage` object was there (possibly empty).
    storage: bool,
    /// `deleted` (a block's changes: the block deleted the account).
    deleted: Option<bool>,
    others: bool,
}

impl<'de> Visitor<'de> for LineSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object: an account of geth's dump (or a first line with root only)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let ctx = self.ctx;
        let mut f = Fields::default();
        ctx.held.clear().map_err(de::Error::custom)?;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "balance" => f.balance = Some(map.next_value()?),
                "nonce" => f.nonce = Some(map.next_value()?),
                "root" => f.root = Some(map.next_value()?),
                "codeHash" => f.code_hash = Some(map.next_value()?),
                "code" => f.code = Some(map.next_value()?),
                "address" => {
                    let text: String = map.next_value()?;
                    f.address =
                        Some(parse_fixed::<20>(&text, "address").map_err(de::Error::custom)?);
                }
                "storage" => {
                    f.storage = true;
                    // A block's changes: the slots held until the line is checked whole (a
                    // deleted account's must be zero, and "deleted" may come after them).
                    let address = if ctx.changes { None } else { f.address };
                    map.next_value_seed(StorageSeed {
                        ctx: &mut *ctx,
                        address,
                    })?;
                }
                "deleted" => f.deleted = Some(map.next_value()?),
                _ => {
                    f.others = true;
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        account(ctx, f).map_err(de::Error::custom)
    }
}

/// Checks an account line's fields and hands the account, then its storage, to the sink; or
/// takes a first line's state root.
fn account(ctx: &mut Ctx, f: Fields) -> Result<(), String> {
    let header_only = f.root.is_some()
        && f.balance.is_none()
        && f.nonce.is_none()
        && f.code_hash.is_none()
        && f.code.is_none()
        && f.address.is_none()
        && !f.storage
        && f.deleted.is_none()
        && !f.others;
    if header_only {
        if !ctx.first {
            return Err(
                "a line with only \"root\" is the dump's header: it may only be the first line"
                    .into(),
            );
        }
        let root = f.root.as_deref().unwrap_or_default();
        ctx.summary.root = Some(parse_fixed::<32>(root, "root")?);
        return Ok(());
    }
    if f.deleted == Some(true) {
        return deleted(ctx, f);
    }
    let missing = |name: &str| format!("the account has no {name:?}");
    let Some(address) = f.address else {
        return Err(
            "the account has no \"address\" (geth prints only the hashed key when it lacks \
             the address's preimage: dump from a node that keeps preimages)"
                .into(),
        );
    };
    let balance = parse_decimal_u256(f.balance.as_deref().ok_or_else(|| missing("balance"))?)
        .map_err(|e| format!("balance: {e}"))?;
    let nonce = f.nonce.ok_or_else(|| missing("nonce"))?;
    let storage_root =
        parse_fixed::<32>(f.root.as_deref().ok_or_else(|| missing("root"))?, "root")?;
    let code_hash = parse_fixed::<32>(
        f.code_hash.as_deref().ok_or_else(|| missing("codeHash"))?,
        "codeHash",
    )?;
    let code = match &f.code {
        Some(text) => tables::parse_hex(text).map_err(|e| format!("code: {e}"))?,
        None => Vec::new(),
    };
    if code.len() > ctx.max_code_size {
        return Err(format!(
            "the code is {} bytes, more than the largest the code table holds ({}; \
             --max-code-size)",
            code.len(),
            ctx.max_code_size
        ));
    }
    if code.is_empty() && code_hash != EMPTY_CODE_HASH {
        return Err(
            "the account's codeHash is not the empty code's, but the line has no \"code\" \
             (dump with code: geth dump without --nocode)"
                .into(),
        );
    }
    if !code.is_empty() && keccak256(&code) != code_hash {
        return Err("codeHash is not keccak256 of the code".into());
    }
    if !f.storage && storage_root != EMPTY_ROOT && !ctx.changes {
        return Err(
            "the account has storage (its root is not the empty trie's) but the line has no \
             \"storage\" (dump with storage: geth dump without --nostorage)"
                .into(),
        );
    }
    let account = Account {
        balance,
        nonce,
        code_hash,
        storage_root,
    };
    (ctx.sink)(Item::Account {
        address,
        account,
        code: (!code.is_empty()).then_some(&code[..]),
    })?;
    ctx.summary.accounts += 1;
    // Storage printed before the address waited for it.
    let sink = &mut *ctx.sink;
    let slots = ctx.held.drain(&mut |slot, value| {
        sink(Item::Slot {
            address,
            slot,
            value,
        })
    })?;
    ctx.summary.slots += slots;
    Ok(())
}

/// A block's changes' line `{"address": A, "deleted": true, "storage": {slot: "0", …}}`: the
/// account, then the slots it lists, to the sink; anything else an account line has is refused
/// (a deleted account has no balance, nonce, roots or code).
fn deleted(ctx: &mut Ctx, f: Fields) -> Result<(), String> {
    if !ctx.changes {
        return Err(
            "\"deleted\" is for a block's changes (eth import --changes): a whole dump \
                    lists only the accounts that exist"
                .into(),
        );
    }
    let present = [
        ("balance", f.balance.is_some()),
        ("nonce", f.nonce.is_some()),
        ("root", f.root.is_some()),
        ("codeHash", f.code_hash.is_some()),
        ("code", f.code.is_some()),
    ];
    if let Some((name, _)) = present.iter().find(|(_, there)| *there) {
        return Err(format!(
            "a deleted account's line has only \"address\", \"deleted\" and the slots it \
             held (\"storage\", each \"0\"), not {name:?}"
        ));
    }
    let Some(address) = f.address else {
        return Err("a deleted account's line has no \"address\"".into());
    };
    let slots = ctx.held.len();
    (ctx.sink)(Item::Deleted { address, slots })?;
    ctx.summary.deleted += 1;
    let sink = &mut *ctx.sink;
    let cleared = ctx.held.drain(&mut |slot, value| {
        if value != [0; 32] {
            return Err(format!(
                "a deleted account's storage lists the slots it held, each \"0\": slot {} has \
                 a value",
                tables::quantity(&slot)
            ));
        }
        sink(Item::Slot {
            address,
            slot,
            value,
        })
    })?;
    ctx.summary.slots += cleared;
    Ok(())
}

/// An account's `storage` object: each value (non-zero but in a block's changes) to the sink
/// now when the address is known, else held.
struct StorageSeed<'c, 's> {
    ctx: &'c mut Ctx<'s>,
    address: Option<[u8; 20]>,
}

impl<'de> DeserializeSeed<'de> for StorageSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for StorageSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object of storage slots and values (hex strings)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some((slot, value)) = map.next_entry::<String, String>()? {
            let slot =
                parse_word(&slot).map_err(|e| de::Error::custom(format!("storage slot: {e}")))?;
            let value =
                parse_word(&value).map_err(|e| de::Error::custom(format!("storage value: {e}")))?;
            if value == [0; 32] && !self.ctx.changes {
                continue;
            }
            match self.address {
                Some(address) => {
                    (self.ctx.sink)(Item::Slot {
                        address,
                        slot,
                        value,
                    })
                    .map_err(de::Error::custom)?;
                    self.ctx.summary.slots += 1;
                }
                None => self.ctx.held.push(slot, value).map_err(de::Error::custom)?,
            }
        }
        Ok(())
    }
}

/// Numbers the spill files of one process (threads may each have one).
static SPILLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Slots waiting for their account's address: in memory, then in a temporary file.
struct Held {
    memory: Vec<([u8; 32], [u8; 32])>,
    dir: PathBuf,
    file: Option<(BufWriter<File>, pirq_db::tempfiles::Registration, PathBuf)>,
    in_file: u64,
}

impl Held {
    fn new(dir: &Path) -> Held {
        Held {
            memory: Vec::new(),
            dir: dir.to_path_buf(),
            file: None,
            in_file: 0,
        }
    }

    fn push(&mut self, slot: [u8; 32], value: [u8; 32]) -> Result<(), String> {
        if self.memory.len() < SLOTS_IN_MEMORY {
            self.memory.push((slot, value));
            return Ok(());
        }
        if self.file.is_none() {
            let path = self.dir.join(format!(
                ".pirq-eth-storage-{}-{}.tmp",
                std::process::id(),
                SPILLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ));
            let file = File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .map_err(|e| format!("creating {}: {e}", path.display()))?;
            let registration = pirq_db::tempfiles::register(&path);
            self.file = Some((BufWriter::new(file), registration, path));
        }
        let (w, _, path) = self.file.as_mut().expect("opened above");
        w.write_all(&slot)
            .and_then(|()| w.write_all(&value))
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        self.in_file += 1;
        Ok(())
    }

    /// How many slots are held.
    fn len(&self) -> u64 {
        self.memory.len() as u64 + self.in_file
    }

    /// Hands every held slot to `each`, memory first, then the file's; returns how many.
    fn drain(
        &mut self,
        each: &mut dyn FnMut([u8; 32], [u8; 32]) -> Result<(), String>,
    ) -> Result<u64, String> {
        let mut n = 0;
        for (slot, value) in self.memory.drain(..) {
            each(slot, value)?;
            n += 1;
        }
        if let Some((w, _, path)) = self.file.as_mut() {
            let io = |e: io::Error| format!("reading back {}: {e}", path.display());
            w.flush().map_err(io)?;
            let file = w.get_mut();
            file.rewind().map_err(io)?;
            let mut r = BufReader::new(&mut *file);
            let mut record = [0u8; 64];
            for _ in 0..self.in_file {
                r.read_exact(&mut record).map_err(io)?;
                let slot = record[..32].try_into().expect("32 bytes");
                let value = record[32..].try_into().expect("32 bytes");
                each(slot, value)?;
                n += 1;
            }
        }
        self.clear()?;
        Ok(n)
    }

    /// Forgets what is held (a new account begins).
    fn clear(&mut self) -> Result<(), String> {
        self.memory.clear();
        if let Some((w, _, path)) = self.file.as_mut() {
            let io = |e: io::Error| format!("{}: {e}", path.display());
            w.flush().map_err(io)?;
            w.get_mut().rewind().map_err(io)?;
            w.get_mut().set_len(0).map_err(io)?;
        }
        self.in_file = 0;
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some((_, _, path)) = self.file.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_text(text: &str) -> Result<(Summary, Vec<String>), String> {
        read_text_capped(text, LINE_IN_MEMORY)
    }

    fn read_text_capped(text: &str, cap: usize) -> Result<(Summary, Vec<String>), String> {
        read_text_as(text, cap, false)
    }

    /// [`read_text`] of a block's changes.
    fn read_changes_text(text: &str) -> Result<(Summary, Vec<String>), String> {
        read_text_as(text, LINE_IN_MEMORY, true)
    }

    fn read_text_as(
        text: &str,
        cap: usize,
        changes: bool,
    ) -> Result<(Summary, Vec<String>), String> {
        let mut seen = Vec::new();
        let dir = std::env::temp_dir();
        let summary = read_capped(
            Box::new(io::Cursor::new(text.as_bytes().to_vec())),
            24_576,
            &dir,
            &mut |item| {
                seen.push(match item {
                    Item::Account {
                        address,
                        account,
                        code,
                    } => format!(
                        "account {} nonce {} balance {} code {}",
                        hex::encode(address),
                        account.nonce,
                        tables::quantity(&account.balance),
                        code.map(hex::encode).unwrap_or_default()
                    ),
                    Item::Slot {
                        address,
                        slot,
                        value,
                    } => format!(
                        "slot {} {} = {}",
                        hex::encode(address),
                        tables::quantity(&slot),
                        tables::quantity(&value)
                    ),
                    Item::Deleted { address, slots } => {
                        format!("deleted {} listing {slots} slots", hex::encode(address))
                    }
                });
                Ok(())
            },
            cap,
            changes,
        )
        .map_err(|e| e.to_string())?;
        Ok((summary, seen))
    }

    const EOA: &str = r#"{"balance":"10","nonce":1,"root":"0x56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421","codeHash":"0xc5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470","address":"0x00000000000000000000000000000000000000aa","key":"0x1234"}"#;

    fn contract() -> String {
        // Storage before the address, values without leading zeros, no 0x: as geth prints.
        let code = [0x60u8, 0x00, 0x60, 0x00, 0xf3];
        format!(
            r#"{{"balance":"0","nonce":1,"root":"{}","codeHash":"{}","code":"0x{}","storage":{{"0x0000000000000000000000000000000000000000000000000000000000000001":"2a","0000000000000000000000000000000000000000000000000000000000000002":"00"}},"address":"00000000000000000000000000000000000000bb"}}"#,
            hex::encode([1u8; 32]),
            hex::encode(keccak256(&code)),
            hex::encode(code)
        )
    }

    #[test]
    fn a_header_accounts_and_storage_stream_in_order() {
        let header = format!(r#"{{"root":"0x{}"}}"#, hex::encode([3u8; 32]));
        let text = format!("{header}\n{EOA}\n\n{}\n", contract());
        let (summary, seen) = read_text(&text).unwrap();
        assert_eq!(summary.root, Some([3; 32]));
        assert_eq!((summary.accounts, summary.slots), (2, 1));
        assert_eq!(seen.len(), 3);
        assert!(seen[0]
            .starts_with("account 00000000000000000000000000000000000000aa nonce 1 balance 0xa"));
        assert_eq!(
            seen[2],
            "slot 00000000000000000000000000000000000000bb 0x1 = 0x2a"
        );
    }

    #[test]
    fn lines_longer_than_the_cap_are_parsed_as_streams_alike() {
        let header = format!(r#"{{"root":"0x{}"}}"#, hex::encode([3u8; 32]));
        let text = format!("{header}\n{EOA}\n{}\n{EOA}", contract());
        let text = text.replacen(EOA, &EOA.replace("aa\"", "ab\""), 1);
        let whole = read_text(&text).unwrap();
        let streamed = read_text_capped(&text, 40).unwrap();
        assert_eq!(whole.1, streamed.1);
        assert_eq!(whole.0.lines, streamed.0.lines);
        let bad = format!("{EOA}\n{}", EOA.replace("\"10\"", "\"ten\""));
        assert!(read_text_capped(&bad, 40)
            .unwrap_err()
            .starts_with("line 2: balance"));
    }

    /// A contract line past [`LINE_IN_MEMORY`] between short lines: the parallel reader streams
    /// it, handing its items on in pieces of [`STREAMED_ITEMS`], and counts what the sequential
    /// reader counts.
    #[test]
    fn the_parallel_reader_streams_a_line_past_the_cap_as_the_sequential_one_reads_it() {
        let slots = LINE_IN_MEMORY / 70 + 1;
        let storage: Vec<String> = (0..slots)
            .map(|i| format!(r#""{:064x}":"2a""#, i + 0x100))
            .collect();
        let huge = contract().replacen(
            r#""storage":{"#,
            &format!(r#""storage":{{{},"#, storage.join(",")),
            1,
        );
        assert!(huge.len() > LINE_IN_MEMORY);
        let header = format!(r#"{{"root":"0x{}"}}"#, hex::encode([3u8; 32]));
        let text = format!("{header}\n{EOA}\n{huge}\n{}\n", EOA.replace("aa\"", "ab\""));
        let (sequential, seen) = read_text(&text).unwrap();
        let mut pieces = Vec::new();
        let parallel = read_parallel(
            Box::new(io::Cursor::new(text.into_bytes())),
            24_576,
            &std::env::temp_dir(),
            &|items: Vec<Owned>| items.len(),
            &mut |counts| {
                pieces.extend(counts);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(parallel.root, Some([3; 32]));
        assert_eq!(
            (parallel.accounts, parallel.slots, parallel.lines),
            (sequential.accounts, sequential.slots, sequential.lines)
        );
        // Ours and the contract's one non-zero slot (its other holds zero: no slot).
        assert_eq!(parallel.slots, slots as u64 + 1);
        assert_eq!(pieces.iter().sum::<usize>(), seen.len());
        assert!(pieces.len() > 2, "the long line went in pieces: {pieces:?}");
    }

    #[test]
    fn bad_lines_are_named_by_their_line() {
        let cases = [
            (format!("{EOA}\n{{\"balance\":"), "line 2:"),
            (format!("{EOA}\nnot json"), "line 2:"),
            (
                format!("{EOA}\n{}", EOA.replace("\"10\"", "\"ten\"")),
                "line 2: balance",
            ),
            (
                format!(
                    "{EOA}\n\n{}",
                    EOA.replace(
                        ",\"address\":\"0x00000000000000000000000000000000000000aa\"",
                        ""
                    )
                ),
                "line 3: the account has no \"address\"",
            ),
            (
                format!("{EOA}\n{{\"root\":\"0x00\"}}"),
                "line 2: a line with only \"root\"",
            ),
            (
                EOA.replace("0xc5d2", "0xc5d3"),
                "line 1: the account's codeHash",
            ),
            (
                contract().replace("\"code\":\"0x", "\"code\":\"0x00"),
                "line 1: codeHash is not keccak256",
            ),
            (
                contract().replace("\"2a\"", "\"xyz\""),
                "line 1: storage value",
            ),
            (EOA.replace("\"nonce\":1", "\"nonce\":-1"), "line 1:"),
        ];
        for (text, want) in cases {
            let e = read_text(&text).unwrap_err();
            assert!(e.starts_with(want), "{text}\n=> {e}\nwanted {want}");
        }
    }

    /// A block's changes: a deleted account (its listed slots, before or after "deleted", come
    /// after it as zero slots), beside a changed account whose slots all come after it too.
    #[test]
    fn a_block_s_changes_delete_accounts_with_the_slots_they_held() {
        let slot = |n: u8| format!("\"0x{:064x}\"", n);
        let gone = format!(
            r#"{{"storage":{{{}:"0",{}:"0x00"}},"address":"0x00000000000000000000000000000000000000cc","deleted":true}}"#,
            slot(1),
            slot(2)
        );
        let eoa_gone = r#"{"deleted":true,"address":"00000000000000000000000000000000000000dd"}"#;
        let text = format!("{}\n{gone}\n{eoa_gone}\n", contract());
        let (summary, seen) = read_changes_text(&text).unwrap();
        assert_eq!((summary.accounts, summary.deleted), (1, 2));
        assert_eq!(
            summary.slots, 4,
            "two of the contract's, two of the deleted one's"
        );
        assert_eq!(
            seen[3..],
            [
                "deleted 00000000000000000000000000000000000000cc listing 2 slots".to_string(),
                "slot 00000000000000000000000000000000000000cc 0x1 = 0x0".into(),
                "slot 00000000000000000000000000000000000000cc 0x2 = 0x0".into(),
                "deleted 00000000000000000000000000000000000000dd listing 0 slots".into(),
            ]
        );
        assert!(seen[0].starts_with("account 00000000000000000000000000000000000000bb"));
        // "deleted": false is an account line like any other.
        let kept = EOA.replace("\"key\"", "\"deleted\":false,\"key\"");
        let (summary, _) = read_changes_text(&kept).unwrap();
        assert_eq!((summary.accounts, summary.deleted), (1, 0));
    }

    #[test]
    fn bad_deletions_are_named_by_their_line() {
        let gone = r#"{"address":"0x00000000000000000000000000000000000000cc","deleted":true}"#;
        let cases = [
            (
                format!("{EOA}\n{}", gone.replace("}", r#","balance":"0"}"#)),
                "line 2: a deleted account's line has only \"address\", \"deleted\"",
            ),
            (
                format!("{EOA}\n\n{}", gone.replace("}", r#","nonce":0}"#)),
                "line 3: a deleted account's line has only",
            ),
            (
                gone.replace(
                    r#""address":"0x00000000000000000000000000000000000000cc","#,
                    "",
                ),
                "line 1: a deleted account's line has no \"address\"",
            ),
            (
                gone.replace("}", r#","storage":{"0x01":"0x2a"}}"#),
                "line 1: a deleted account's storage lists the slots it held, each \"0\": slot 0x1",
            ),
            (gone.replace("true", "\"yes\""), "line 1: invalid type"),
        ];
        for (text, want) in cases {
            let e = read_changes_text(&text).unwrap_err();
            assert!(e.starts_with(want), "{text}\n=> {e}\nwanted {want}");
        }
        // A whole dump lists the accounts that exist: "deleted" is for changes only.
        let e = read_text(&format!("{EOA}\n{gone}")).unwrap_err();
        assert!(
            e.starts_with("line 2: \"deleted\" is for a block's changes"),
            "{e}"
        );
    }

    #[test]
    fn held_storage_spills_to_a_file_and_comes_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut held = Held::new(dir.path());
        let n = SLOTS_IN_MEMORY + 3;
        for i in 0..n {
            let mut slot = [0u8; 32];
            slot[..8].copy_from_slice(&(i as u64).to_be_bytes());
            held.push(slot, [1; 32]).unwrap();
        }
        let mut count = 0u64;
        let mut last = 0u64;
        held.drain(&mut |slot, _| {
            last = u64::from_be_bytes(slot[..8].try_into().unwrap());
            count += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!((count, last), (n as u64, n as u64 - 1));
        drop(held);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
