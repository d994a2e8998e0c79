//! TLS for the gateway's listeners (`--tls-cert`, `--tls-key`): rustls, HTTP/2 or HTTP/1.1 by
//! ALPN, and the certificate re-read on SIGHUP.
//!
//! Why it matters: a client sends one DPF key to each party, and whoever reads both connections
//! (the client's Wi-Fi, its ISP, a proxy) can combine the two keys and learn the index. TLS on
//! both parties is what keeps the keys apart on the wire (`docs/security.md`).
//!
//! Rotation: the certificate and key live behind a [`ResolvesServerCert`] that every new
//! handshake asks; [`Tls::reload`] swaps what it answers. Connections already open keep their
//! session, so a rotation drops none of them. A reload that fails (a missing file, a key that
//! does not match the certificate) keeps the certificate in use and says why.
//!
//! Failed handshakes (scanners, clients that speak plain HTTP to the TLS port, clients without
//! the CA) are normal on a public port: they count in
//! [`pirq_shared::metrics::GATEWAY_TLS_HANDSHAKE_FAILURES`] and are logged at debug only.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{anyhow, Context};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// ALPN protocol ids, most preferred first.
const ALPN_H2: &[u8] = b"h2";
const ALPN_HTTP11: &[u8] = b"http/1.1";

/// The gateway's TLS: an acceptor whose certificate can be swapped while it serves.
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
    current: Arc<CurrentCert>,
    cert_path: PathBuf,
    key_path: PathBuf,
}

impl Tls {
    /// Reads the PEM certificate chain and private key; fails with the file and the reason.
    pub fn load(cert_path: &Path, key_path: &Path) -> anyhow::Result<Tls> {
        install_crypto_provider();
        let key = read_certified_key(cert_path, key_path)?;
        let current = Arc::new(CurrentCert(RwLock::new(Arc::new(key))));
        let mut config = ServerConfig::builder()
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        config.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()];
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            current,
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
        })
    }

    /// Reads the files again; new handshakes use them from now on. On failure the certificate in
    /// use stays.
    pub fn reload(&self) -> anyhow::Result<()> {
        let key = read_certified_key(&self.cert_path, &self.key_path)?;
        *self.current.0.write().expect("certificate lock") = Arc::new(key);
        Ok(())
    }

    /// The TLS handshake on `io`, within `timeout` (the header timeout: a client that connects
    /// and says nothing is closed as soon as on a plain listener). `None` when it failed or timed
    /// out; counted and logged at debug.
    pub async fn accept<IO>(&self, io: IO, timeout: Duration) -> Option<TlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let why = match tokio::time::timeout(timeout, self.acceptor.accept(io)).await {
            Ok(Ok(stream)) => return Some(stream),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no handshake within {timeout:?}"),
        };
        metrics::counter!(pirq_shared::metrics::GATEWAY_TLS_HANDSHAKE_FAILURES).increment(1);
        tracing::debug!(reason = %why, "TLS handshake failed");
        None
    }
}

/// Whether the client chose HTTP/2 by ALPN on this connection.
pub fn negotiated_h2<IO>(stream: &TlsStream<IO>) -> bool {
    stream.get_ref().1.alpn_protocol() == Some(ALPN_H2)
}

/// rustls's process-wide crypto provider: ring, the one every pirq crate builds with. Redis
/// (`rediss://`) and reqwest pick it up too. Idempotent.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The certificate new handshakes get; swapped by [`Tls::reload`].
#[derive(Debug)]
struct CurrentCert(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for CurrentCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().expect("certificate lock").clone())
    }
}

/// The chain from `cert_path` and the key from `key_path`, checked to belong together.
fn read_certified_key(cert_path: &Path, key_path: &Path) -> anyhow::Result<CertifiedKey> {
    let chain = CertificateDer::pem_file_iter(cert_path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("reading the certificate chain {}", cert_path.display()))?;
    if chain.is_empty() {
        anyhow::bail!(
            "{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            cert_path.display()
        );
    }
    let key = PrivateKeyDer::from_pem_file(key_path)
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("reading the private key {}", key_path.display()))?;
    let provider = rustls::crypto::ring::default_provider();
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .with_context(|| format!("loading the private key {}", key_path.display()))?;
    let certified = CertifiedKey::new(chain, signing_key);
    certified.keys_match().map_err(|e| {
        anyhow!(
            "the key {} does not belong to the certificate {}: {e}",
            key_path.display(),
            cert_path.display()
        )
    })?;
    Ok(certified)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let (c, k) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.cert.pem()).unwrap();
        std::fs::write(&k, cert.signing_key.serialize_pem()).unwrap();
        (c, k)
    }

    #[test]
    fn loads_a_pair_and_refuses_mismatches_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let (c1, k1) = write_pair(dir.path(), "one");
        let (_c2, k2) = write_pair(dir.path(), "two");
        assert!(Tls::load(&c1, &k1).is_ok());
        let e = Tls::load(&c1, &k2).err().unwrap();
        assert!(format!("{e:#}").contains("does not belong"), "{e:#}");
        let e = Tls::load(&dir.path().join("nope.crt"), &k1).err().unwrap();
        assert!(format!("{e:#}").contains("nope.crt"), "{e:#}");
        std::fs::write(dir.path().join("empty.crt"), "not a pem").unwrap();
        let e = Tls::load(&dir.path().join("empty.crt"), &k1).err().unwrap();
        assert!(format!("{e:#}").contains("no PEM certificate"), "{e:#}");
    }

    #[test]
    fn a_failed_reload_keeps_the_certificate_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = write_pair(dir.path(), "one");
        let tls = Tls::load(&c, &k).unwrap();
        let before = tls.current.0.read().unwrap().clone();
        std::fs::write(&k, "garbage").unwrap();
        assert!(tls.reload().is_err());
        assert!(Arc::ptr_eq(&before, &tls.current.0.read().unwrap()));
        let (c2, k2) = write_pair(dir.path(), "two");
        std::fs::rename(c2, &c).unwrap();
        std::fs::rename(k2, &k).unwrap();
        tls.reload().unwrap();
        assert!(!Arc::ptr_eq(&before, &tls.current.0.read().unwrap()));
    }
}
