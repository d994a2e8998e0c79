//! A throwaway certificate authority for tests over TLS: a CA, and certificates it signs for
//! loopback names, written as PEM files in a temporary directory (what `--tls-cert`,
//! `--tls-key`, `--ca-cert`, `--redis-ca-cert` read).

use std::path::{Path, PathBuf};

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tempfile::TempDir;

/// A CA whose certificate is at [`TestCa::ca_cert`]; [`TestCa::issue`] signs leaf certificates.
pub struct TestCa {
    dir: TempDir,
    issuer: Issuer<'static, KeyPair>,
    ca_cert: PathBuf,
}

/// A leaf certificate and its key, as PEM files.
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TestCa {
    pub fn new() -> anyhow::Result<TestCa> {
        let dir = tempfile::tempdir()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "pirq test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        let ca_cert = dir.path().join("ca.pem");
        std::fs::write(&ca_cert, cert.pem())?;
        Ok(TestCa {
            issuer: Issuer::new(params, key),
            ca_cert,
            dir,
        })
    }

    /// The CA's certificate (PEM): the trust root to hand clients.
    pub fn ca_cert(&self) -> &Path {
        &self.ca_cert
    }

    /// A new key and a certificate for `localhost`, `127.0.0.1` and `::1`, usable by a server
    /// and a client, written as `<name>.crt` and `<name>.key`.
    pub fn issue(&self, name: &str) -> anyhow::Result<CertFiles> {
        let mut params = CertificateParams::new(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ])?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        let files = CertFiles {
            cert: self.dir.path().join(format!("{name}.crt")),
            key: self.dir.path().join(format!("{name}.key")),
        };
        std::fs::write(&files.cert, cert.pem()).context("writing a test certificate")?;
        std::fs::write(&files.key, key.serialize_pem()).context("writing a test key")?;
        Ok(files)
    }
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa")
            .field("ca_cert", &self.ca_cert)
            .finish()
    }
}
