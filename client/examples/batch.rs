//! Look many keys up in one query per party, and keep one client for many lookups:
//! `cargo run -p pirq-client --example batch -- key-1 key-2 key-3`.
//!
//! All keys of a `get_many` go out together (split only where the parties' key limit says
//! so), so a party sees one query of `d × keys` DPF keys whatever the keys are. The client
//! reads the parties' `/v1/info` once and reuses it: each later lookup is one request a party.

use pirq_client::Client;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let keys: Vec<String> = std::env::args().skip(1).collect();
    if keys.is_empty() {
        return Err("usage: batch KEY...".into());
    }
    let client = Client::builder()
        .party_a(std::env::var("PIRQ_PARTY_A")?)
        .party_b(std::env::var("PIRQ_PARTY_B")?)
        .build()?;
    let values = client.get_many(&keys).await?;
    for (key, value) in keys.iter().zip(&values.values) {
        match value {
            Some(v) => println!("{key}: {}", String::from_utf8_lossy(v)),
            None => println!("{key}: absent"),
        }
    }
    // Again, without reading /v1/info: one round trip a party.
    let again = client.get_many(&keys).await?;
    assert_eq!(again.values, values.values);
    println!(
        "{} keys at epoch {}; /v1/info read {} times for two lookups",
        keys.len(),
        values.epoch,
        client.stats().info_requests
    );
    Ok(())
}
