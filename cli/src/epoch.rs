//! `pirq epoch make` (a random update, for demos, tests and benches) and `pirq db apply` (fold
//! updates into a new `.pirdb` snapshot, the way a new worker catches up after the updates
//! stream was trimmed).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Args;
use pirq_db::{self as db, Header, PirDb};
use pirq_shared::update::{EpochUpdate, PageWrite};
use rand::{rngs::StdRng, Rng, RngCore, SeedableRng};

#[derive(Args)]
pub struct MakeArgs {
    /// The database the update is for (its geometry bounds the page indices).
    #[arg(long)]
    db: PathBuf,
    /// Epoch number of the update (the database's newest epoch + 1 where it is pushed; epoch 0
    /// is a database's first contents, so updates start at 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    epoch: u64,
    /// How many pages to replace (indices drawn at random, repeats allowed), at least 1.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pages: u64,
    /// Seed for indices and contents.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output file: JSON if it ends in .json, else bincode.
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    signing: crate::publisher::UpdateSigningArgs,
}

#[derive(Args)]
pub struct ApplyArgs {
    /// The database to start from.
    #[arg(long)]
    db: PathBuf,
    /// Update files, in epoch order (each must be the next epoch).
    #[arg(long = "update", required = true)]
    updates: Vec<PathBuf>,
    /// Where the new snapshot goes (a .pirdb at the last update's epoch).
    #[arg(long)]
    out: PathBuf,
    /// No progress bar, even on a terminal (the summary line stays).
    #[arg(long)]
    quiet: bool,
}

/// Reads and parses an update file (JSON or bincode).
pub fn read_update(path: &Path) -> anyhow::Result<EpochUpdate> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    EpochUpdate::parse_file(&bytes).map_err(|e| {
        let form = if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
            "a JSON update"
        } else {
            "a bincode update (a file that does not start with '{' is read as bincode)"
        };
        anyhow::anyhow!(
            "{} is not {form}: {e}\nan update file is JSON such as \
             {{\"epoch\": 1, \"pages\": [{{\"index\": 3, \"page\": \"<base64 of one page>\"}}]}} \
             or its bincode twin, as `pirq epoch make` writes",
            path.display()
        )
    })
}

pub fn make(args: MakeArgs) -> anyhow::Result<()> {
    db::ensure_not_an_input(&args.out, &[&args.db])?;
    db::check_epoch(args.epoch).context("--epoch")?;
    let db = PirDb::open(&args.db)?;
    let signer = args
        .signing
        .sign_key
        .as_deref()
        .map(|path| crate::publisher::signer_for(path, db.signing()))
        .transpose()?;
    let manifests = crate::manifests::open_for_update(
        args.signing.manifests.as_deref(),
        signer.as_ref(),
        &db,
        args.epoch,
        &[&args.db, &args.out],
    )?;
    let next = crate::publisher::NextUpdate {
        epoch: args.epoch,
        signer,
        manifests,
    };
    // The pages come from one seeded stream (the same update for the same seed), then are
    // signed on all cores like every other update's.
    let mut rng = StdRng::seed_from_u64(args.seed ^ args.epoch.rotate_left(32));
    let writes = (0..args.pages)
        .map(|_| {
            let mut page = vec![0u8; db.page_size()];
            rng.fill_bytes(&mut page);
            let index = rng.random_range(0..db.num_pages());
            PageWrite { index, page }
        })
        .collect();
    let update = crate::publisher::signed_update(args.epoch, writes, next.signer.as_ref());
    next.write(&update, &args.out)
}

pub fn apply(args: ApplyArgs) -> anyhow::Result<()> {
    // The output is written beside it and renamed into place, but an input is never replaced:
    // a mistyped command must not cost the database it reads.
    let mut inputs: Vec<&Path> = vec![&args.db];
    inputs.extend(args.updates.iter().map(PathBuf::as_path));
    db::ensure_not_an_input(&args.out, &inputs)?;
    let db = PirDb::open(&args.db)?;
    let mut header = *db.header();
    // The snapshot records the chained digest (SPEC §2.1), the one a worker that followed the
    // same updates computes.
    let mut digest = db.digest();
    let updates = args
        .updates
        .iter()
        .map(|p| read_update(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Last write of each page wins, across updates in order.
    let mut latest = std::collections::HashMap::new();
    for u in &updates {
        if u.epoch != header.epoch + 1 {
            bail!(
                "update for epoch {} does not follow epoch {}",
                u.epoch,
                header.epoch
            );
        }
        u.validate(header.num_pages, db.page_size())?;
        if let Some(block) = db.signing() {
            check_signed_update(block, u)?;
        }
        for w in &u.pages {
            latest.insert(w.index, &w.page);
        }
        digest = digest.next(u);
        header.epoch = u.epoch;
    }
    let out = Header {
        epoch: header.epoch,
        ..*db.header()
    };
    // A snapshot of a kv database is one too, and of an imported file one too: the layout block
    // and the imported length go along.
    let progress = crate::output::Progress::stages(args.quiet);
    progress.stage(
        &format!("writing {}", args.out.display()),
        Some(out.pages_len()),
        crate::output::BYTES,
    );
    db::write_with_digest(
        &args.out,
        &out,
        &db.meta(),
        digest,
        |p, page| match latest.get(&p) {
            Some(new) => page.copy_from_slice(new),
            None => page.copy_from_slice(db.page(p).expect("p < num_pages")),
        },
        |done| progress.set_position(done),
    )?;
    progress.finish(&format!(
        "wrote {} at epoch {} ({} pages replaced), digest {digest}",
        args.out.display(),
        out.epoch,
        latest.len()
    ));
    Ok(())
}

/// A signed database takes only signed updates: every replaced page must carry the
/// publisher's signature for its index, as changed at the update's epoch (so the snapshot holds
/// exactly the pages a party that applied the update serves).
pub fn check_signed_update(
    block: &pirq_shared::signing::SigningBlock,
    update: &EpochUpdate,
) -> anyhow::Result<()> {
    use rayon::prelude::*;
    // On all cores (a block's thousands of Ed25519 checks); the first bad page in the update's
    // order is the one named, whatever the threads.
    let bad = update.pages.par_iter().find_first(
        |w| !matches!(block.verify_page(w.index, &w.page), Ok(changed) if changed == update.epoch),
    );
    let Some(w) = bad else { return Ok(()) };
    let changed = block.verify_page(w.index, &w.page).with_context(|| {
        format!(
            "the update for epoch {} is not signed by the database's publisher (make it with pirq epoch make --sign-key or pirq kv update --sign-key)",
            update.epoch
        )
    })?;
    bail!(
        "the update for epoch {}: page {} is signed as changed at epoch {changed}",
        update.epoch,
        w.index
    )
}

#[derive(Args)]
pub struct PushArgs {
    /// The party's gateway, or its admin listener (`https://host:port`; http:// only for
    /// this machine unless --insecure-http). Push the same updates to both parties.
    #[arg(long)]
    party: String,
    #[command(flatten)]
    transport: crate::parties::TransportArgs,
    /// The party's admin token (its gateway's `--admin-token`).
    #[arg(long, env = "PIRQ_ADMIN_TOKEN", hide_env_values = true)]
    token: String,
    /// Update file (JSON or bincode, as `pirq epoch make` writes).
    #[arg(long)]
    from: PathBuf,
    /// The party's table the update is for (`POST /v1/admin/tables/NAME/epochs`; default: the
    /// table `default`). No other table's epoch moves.
    #[arg(long, env = "PIRQ_TABLE", value_name = "NAME")]
    table: Option<String>,
}

pub fn push(args: PushArgs) -> anyhow::Result<()> {
    pirq_client::check_party_url(&args.party, args.transport.insecure_http)?;
    if let Some(table) = &args.table {
        pirq_shared::layout::check_table_name(table)?;
    }
    let update = read_update(&args.from)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let http = pirq_client::http_client(args.transport.roots()?, args.transport.proxy.as_deref())?;
    let party = pirq_client::Party::new(http, &args.party).with_table(args.table.as_deref());
    let epoch = runtime.block_on(party.push_epoch(&args.token, &update))?;
    let table = match &args.table {
        Some(name) => format!(" table {name}:"),
        None => String::new(),
    };
    eprintln!(
        "{}:{table} epoch {epoch} appended ({} pages)",
        args.party,
        update.pages.len()
    );
    Ok(())
}
