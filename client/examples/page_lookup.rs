//! Fetch one page privately: `cargo run -p pirq-client --example page_lookup -- 42`.
//!
//! The parties come from `PIRQ_PARTY_A` and `PIRQ_PARTY_B` (https://, or http:// on this
//! machine); `PIRQ_CA_CERT` names a private CA's PEM certificate if the parties use one.

use std::time::Duration;

use pirq_client::Client;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let index: u64 = std::env::args().nth(1).unwrap_or("0".into()).parse()?;
    let mut builder = Client::builder()
        .party_a(std::env::var("PIRQ_PARTY_A")?)
        .party_b(std::env::var("PIRQ_PARTY_B")?)
        .deadline(Duration::from_secs(30));
    if let Ok(ca) = std::env::var("PIRQ_CA_CERT") {
        builder = builder.ca_cert_file(ca);
    }
    let client = builder.build()?;
    let fetched = client.fetch(&[index]).await?;
    let page = &fetched.pages[0];
    println!(
        "page {index}: {} bytes at epoch {}, first bytes {}",
        page.len(),
        fetched.epoch,
        page.iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    Ok(())
}
