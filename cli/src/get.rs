//! `pirq get`: look keys up privately in a kv database served by two parties.
//!
//! Output and exit status follow grep: each value as lowercase hex on its own line, in the
//! order of `--key`, or `absent`; exit 0 when every key was found, 1 when any is absent, 2 on
//! an error (nothing is printed on stdout then).

use crate::parties::{self, PartiesArgs};

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    pub parties: PartiesArgs,
    /// Key to look up, in hex; repeat for several (they go out as one query per party).
    #[arg(long = "key", required = true)]
    pub keys: Vec<String>,
}

/// Runs `pirq get` and exits with its status.
pub fn run(args: GetArgs) -> ! {
    let code = match lookup(&args) {
        Ok(values) => {
            let mut all_found = true;
            let mut out = String::new();
            for v in &values {
                match v {
                    Some(v) => out.push_str(&hex::encode(v)),
                    None => {
                        all_found = false;
                        out.push_str("absent");
                    }
                }
                out.push('\n');
            }
            print!("{out}");
            if all_found {
                0
            } else {
                1
            }
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            2
        }
    };
    std::process::exit(code)
}

fn lookup(args: &GetArgs) -> anyhow::Result<Vec<Option<Vec<u8>>>> {
    let keys = args
        .keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            hex::decode(k.trim())
                .map_err(|e| anyhow::anyhow!("--key number {}: not hex: {e}", i + 1))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let client = args.parties.client(args.parties.options())?;
    Ok(parties::runtime()?.block_on(client.get(&keys))?.values)
}
