//! `pirq get`: look keys up privately in a kv database served by two parties.
//!
//! Output and exit status follow grep: each value as lowercase hex on its own line, in the
//! order of `--key`, or `absent`; exit 0 when every key was found, 1 when any is absent, 2 on
//! an error (nothing is printed on stdout then).

use std::time::Duration;

use pirq_client::{Client, Options};

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    /// Base URL of party A's gateway, e.g. http://127.0.0.1:8080.
    #[arg(long, env = "PIRQ_PARTY_A")]
    pub party_a: String,
    /// Base URL of party B's gateway.
    #[arg(long, env = "PIRQ_PARTY_B")]
    pub party_b: String,
    /// Key to look up, in hex; repeat for several (they go out as one query per party).
    #[arg(long = "key", required = true)]
    pub keys: Vec<String>,
    /// Wait by polling instead of Server-Sent Events.
    #[arg(long)]
    pub poll: bool,
    /// Send requests and read answers as bincode instead of JSON.
    #[arg(long)]
    pub bincode: bool,
    /// Seconds to wait for the answers.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
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
    let options = Options::from_flags(
        args.poll.then_some(Duration::from_millis(20)),
        args.bincode,
        Duration::from_secs(args.timeout),
    );
    let client = Client::with_options(&args.party_a, &args.party_b, options)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    Ok(runtime.block_on(client.get(&keys))?.values)
}
