//! `pirq db split`: a database cut into shard files, one per page-range shard.
//!
//! A worker started with `--shard I/S` can read its range from the whole `.pirdb`; a shard file
//! holds only that range, for hosts that should not store (or receive) the rest. Each file is a
//! `.pirdb` of the shard's pages whose header block 512..544 says which shard of which database
//! it is (`docs/spec/v1.md` §2.2) and which records the whole database's digest; a worker given
//! it serves that shard (`--shard` may be left out, and must agree when given).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use pirq_db::{self as db, PirDb};
use pirq_shared::shard::ShardSpec;

#[derive(Args)]
pub struct SplitArgs {
    /// The whole database (.pirdb).
    file: PathBuf,
    /// Number of shards S: files for shards 0..S-1 (as `pirq-worker --shard I/S` splits it).
    #[arg(long)]
    shards: u32,
    /// Directory for the shard files, named `<stem>.shard-<I>-of-<S>.pirdb`.
    #[arg(long)]
    out_dir: PathBuf,
}

pub fn split(args: SplitArgs) -> anyhow::Result<()> {
    let source =
        PirDb::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
    if source.shard().is_some() {
        anyhow::bail!(
            "{} is a shard file already; split the whole database",
            args.file.display()
        );
    }
    // Checks the count against the database before anything is written.
    ShardSpec::all_ranges(args.shards, source.num_pages())?;
    std::fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("creating {}", args.out_dir.display()))?;
    let stem = args
        .file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "db".into());
    let mut files = Vec::new();
    for index in 0..args.shards {
        let spec = ShardSpec::new(index, args.shards)?;
        let path = args
            .out_dir
            .join(format!("{stem}.shard-{index}-of-{}.pirdb", args.shards));
        let origin = db::write_shard(&path, &source, spec, |_| {})
            .with_context(|| format!("writing {}", path.display()))?;
        files.push(serde_json::json!({
            "shard": spec.to_string(),
            "file": path,
            "pages": [origin.first_page, origin.first_page + (path_pages(&path)?)],
        }));
    }
    crate::outln!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
            "database": args.file,
            "num_pages": source.num_pages(),
            "digest": source.digest(),
            "shards": files,
        }))?
    );
    Ok(())
}

fn path_pages(path: &std::path::Path) -> anyhow::Result<u64> {
    Ok(PirDb::open(path)?.num_pages())
}
