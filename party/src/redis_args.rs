//! The flags every server of a party takes to find its Redis, declared once so that the gateway
//! and the worker cannot drift apart on a name, an env var or a default, and what they name: the
//! Redis (a [`RedisTarget`] of `pirq-queue`, over TLS for `rediss://` URLs) and the key layout.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use pirq_queue::connect::{RedisTarget, TlsFiles};
use pirq_shared::layout::{Layout, PrefixError};

/// `--redis` and `--prefix` (env `PIRQ_REDIS_URL`, `PIRQ_PREFIX`), and the TLS files of a
/// `rediss://` URL; `#[command(flatten)]` them into a server's config.
#[derive(Args, Debug, Clone)]
pub struct RedisArgs {
    /// Redis URL of this party (each party has its own Redis): `redis://` in plain TCP, or
    /// `rediss://` over TLS (the system's trust roots unless `--redis-ca-cert` names a CA); a
    /// Redis Cluster as `redis+cluster://HOST:PORT[,HOST:PORT...]` (`rediss+cluster://` over
    /// TLS): one or more of its nodes, from which the rest of the cluster is found.
    #[arg(
        long = "redis",
        env = "PIRQ_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,

    /// Key prefix of this party in Redis; keys are `{PREFIX}:...`. The gateways and workers of
    /// one party use the same.
    #[arg(long, env = "PIRQ_PREFIX", default_value = "pirq")]
    pub prefix: String,

    /// PEM certificate of the CA that signed Redis's certificate, trusted instead of the system's
    /// roots (a private CA). Needs a `rediss://` URL.
    #[arg(long, env = "PIRQ_REDIS_CA_CERT")]
    pub redis_ca_cert: Option<PathBuf>,

    /// PEM client certificate for a Redis that asks for one (`tls-auth-clients yes`); with
    /// `--redis-client-key`. Needs a `rediss://` URL.
    #[arg(long, env = "PIRQ_REDIS_CLIENT_CERT", requires = "redis_client_key")]
    pub redis_client_cert: Option<PathBuf>,

    /// PEM private key of `--redis-client-cert`.
    #[arg(long, env = "PIRQ_REDIS_CLIENT_KEY", requires = "redis_client_cert")]
    pub redis_client_key: Option<PathBuf>,
}

impl RedisArgs {
    /// The Redis `--redis` names (nothing connects yet), over TLS for `rediss://` with the CA
    /// and client certificate given; on a cluster, the commands that name no key go to the node
    /// serving this party's keys (`--prefix`). A malformed URL is refused with the forms to write
    /// instead, without echoing it (it may hold a password); an unreadable file, with its path.
    pub fn target(&self) -> anyhow::Result<RedisTarget> {
        let tls_files = self.redis_ca_cert.is_some() || self.redis_client_cert.is_some();
        RedisTarget::check_url(&self.redis_url, tls_files)?;
        let read = |p: &PathBuf, what: &str| {
            std::fs::read(p).with_context(|| format!("reading the {what} {}", p.display()))
        };
        let ca_cert = match &self.redis_ca_cert {
            Some(p) => Some(read(p, "Redis CA certificate (--redis-ca-cert)")?),
            None => None,
        };
        let client_cert_key = match (&self.redis_client_cert, &self.redis_client_key) {
            (Some(cert), Some(key)) => Some((
                read(cert, "Redis client certificate (--redis-client-cert)")?,
                read(key, "Redis client key (--redis-client-key)")?,
            )),
            _ => None,
        };
        let target = RedisTarget::open(
            &self.redis_url,
            TlsFiles {
                ca_cert,
                client_cert_key,
            },
        )?;
        // A bad prefix is refused where the layout is made, with its own message.
        Ok(match self.layout() {
            Ok(layout) => target.for_party(&layout),
            Err(_) => target,
        })
    }

    /// The key names under `--prefix`, once the prefix is checked.
    pub fn layout(&self) -> Result<Layout, PrefixError> {
        Layout::new(&self.prefix)
    }

    /// The Redis URL for logs: a password (or a lone user name, which Redis 6 ACLs also treat
    /// as a secret when it is the only credential) becomes `***`.
    pub fn redis_url_redacted(&self) -> String {
        redact_url(&self.redis_url)
    }
}

/// `scheme://user:secret@host` → `scheme://user:***@host`; `scheme://secret@host` →
/// `scheme://***@host`. Anything without credentials is returned as it is.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    let userinfo = &rest[..at];
    let redacted = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => "***".to_string(),
    };
    format!("{scheme}://{redacted}{}", &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("redis://:s3cret@10.0.0.1:6379/0"),
            "redis://:***@10.0.0.1:6379/0"
        );
        assert_eq!(
            redact_url("rediss://app:p@ss@host:6380"),
            "rediss://app:***@host:6380"
        );
        assert_eq!(redact_url("redis://tok@host"), "redis://***@host");
        assert_eq!(
            redact_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        assert_eq!(redact_url("unix:///tmp/r.sock"), "unix:///tmp/r.sock");
    }
}
