//! `pirq get`: look keys up privately in a kv database served by two parties.
//!
//! Output and exit status follow grep: one line per key, in the order given — the value as
//! lowercase hex (a set: `present`), or `absent`; exit 0 when every key was found, 1 when any is
//! absent, 2 on an error (nothing is printed on stdout then).

use pirq_shared::kv::ValueKind;

use crate::parties::{self, PartiesArgs};

#[derive(clap::Args, Debug)]
#[command(group = clap::ArgGroup::new("keys").required(true).multiple(true).args(["keys", "key_texts"]))]
pub struct GetArgs {
    #[command(flatten)]
    pub parties: PartiesArgs,
    /// Key to look up, in hex; repeat for several (they go out as one query per party).
    #[arg(long = "key")]
    pub keys: Vec<String>,
    /// Key to look up as text: the key is the string's UTF-8 bytes, exactly as given (no
    /// normalisation). Repeatable; --key-text keys come after --key keys in the output.
    #[arg(long = "key-text")]
    pub key_texts: Vec<String>,
}

/// Runs `pirq get` and exits with its status.
pub fn run(args: GetArgs) -> ! {
    let code = match lookup(&args) {
        Ok((kind, values)) => {
            let mut all_found = true;
            let mut out = String::new();
            for v in &values {
                match (v, kind) {
                    (Some(_), ValueKind::Set) => out.push_str("present"),
                    (Some(v), _) => out.push_str(&hex::encode(v)),
                    (None, _) => {
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

/// The table's kind and each key's value, `--key` keys first, then `--key-text` keys.
fn lookup(args: &GetArgs) -> anyhow::Result<(ValueKind, Vec<Option<Vec<u8>>>)> {
    let mut keys = args
        .keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            hex::decode(k.trim())
                .map_err(|e| anyhow::anyhow!("--key number {}: not hex: {e}", i + 1))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    keys.extend(args.key_texts.iter().map(|t| t.as_bytes().to_vec()));
    let client = args.parties.client(args.parties.options())?;
    let values = parties::runtime()?.block_on(client.get(&keys))?;
    Ok((values.kind, values.values))
}
