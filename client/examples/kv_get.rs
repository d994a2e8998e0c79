//! Look one key up privately in a key-value database:
//! `cargo run -p pirq-client --example kv_get -- 'some key'`.
//!
//! The key is the argument's UTF-8 bytes. Parties from `PIRQ_PARTY_A`/`PIRQ_PARTY_B`, as in
//! `page_lookup`; `PIRQ_TOKEN_A`/`PIRQ_TOKEN_B` if the parties ask for query tokens.

use pirq_client::Client;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let key = std::env::args().nth(1).ok_or("usage: kv_get KEY")?;
    let mut builder = Client::builder()
        .party_a(std::env::var("PIRQ_PARTY_A")?)
        .party_b(std::env::var("PIRQ_PARTY_B")?);
    if let Ok(token) = std::env::var("PIRQ_TOKEN_A") {
        builder = builder.token_a(token);
    }
    if let Ok(token) = std::env::var("PIRQ_TOKEN_B") {
        builder = builder.token_b(token);
    }
    let client = builder.build()?;
    match client.get(key.as_bytes()).await? {
        Some(value) => println!("{key}: {}", String::from_utf8_lossy(&value)),
        None => println!("{key}: absent"),
    }
    Ok(())
}
