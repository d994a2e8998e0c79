//! The client over TLS, against fake parties serving HTTPS with certificates of a throwaway CA:
//! the CA given as a root works, an unknown CA fails at the handshake, and two parties with the
//! same certificate key (one operator) are refused like one party given twice.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

use pirq_client::{Client, ClientError, Phase};
use pirq_testkit::fake_party::{FakeConfig, FakeParty};

struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "pirq client test CA");
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for 127.0.0.1 and `key`: `(chain PEM, key PEM)`.
    fn issue(&self, key: &KeyPair) -> (Vec<u8>, Vec<u8>) {
        let params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        let cert = params.signed_by(key, &self.issuer).unwrap();
        (cert.pem().into_bytes(), key.serialize_pem().into_bytes())
    }
}

async fn https(tls: (Vec<u8>, Vec<u8>)) -> FakeParty {
    FakeParty::start(FakeConfig {
        tls: Some(tls),
        ..FakeConfig::default()
    })
    .await
    .unwrap()
}

fn client(a: &FakeParty, b: &FakeParty, ca: Option<&Ca>) -> Client {
    let mut builder = Client::builder().party_a(&a.url).party_b(&b.url);
    if let Some(ca) = ca {
        builder = builder.ca_cert_pem(ca.pem.as_bytes());
    }
    builder.build().unwrap()
}

#[tokio::test]
async fn parties_over_tls_with_a_private_ca() {
    let ca = Ca::new();
    let (key_a, key_b) = (KeyPair::generate().unwrap(), KeyPair::generate().unwrap());
    let a = https(ca.issue(&key_a)).await;
    let b = https(ca.issue(&key_b)).await;
    assert!(a.url.starts_with("https://127.0.0.1:"), "{}", a.url);

    let mut page = vec![0u8; 256];
    pirq_shared::synthetic::fill_page(FakeConfig::default().seed, 11, &mut page);
    assert_eq!(
        client(&a, &b, Some(&ca)).fetch(&[11]).await.unwrap().pages[0],
        page
    );

    // Without the CA the handshake fails: an error naming the party and the phase.
    let e = client(&a, &b, None).fetch(&[11]).await.unwrap_err();
    assert!(
        matches!(
            &e,
            ClientError::Http {
                phase: Phase::Info,
                ..
            }
        ),
        "{e}"
    );

    // A renewed certificate for party A's key, served by "party B": the same TLS identity.
    let renewed = https(ca.issue(&key_a)).await;
    let e = client(&a, &renewed, Some(&ca))
        .fetch(&[11])
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::SameTlsIdentity { .. }), "{e}");
    assert!(
        e.to_string().contains("same TLS certificate public key"),
        "{e}"
    );
    // ... accepted only where one party on purpose is (capacity benchmarks).
    let twice = Client::builder()
        .party_a(&a.url)
        .party_b(&renewed.url)
        .ca_cert_pem(ca.pem.as_bytes())
        .allow_same_party(true)
        .build()
        .unwrap();
    assert_eq!(twice.fetch(&[11]).await.unwrap().pages[0], page);
}

#[test]
fn a_ca_file_that_is_not_pem_is_a_configuration_error() {
    let e = Client::builder()
        .party_a("https://a.example.invalid")
        .party_b("https://b.example.invalid")
        .ca_cert_pem(b"not a certificate")
        .build()
        .unwrap_err();
    assert!(matches!(e, ClientError::Config(_)), "{e}");
    let e = Client::builder()
        .party_a("https://a.example.invalid")
        .party_b("https://b.example.invalid")
        .ca_cert_file("/nonexistent/ca.pem")
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
}
