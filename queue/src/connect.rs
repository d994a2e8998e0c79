//! What `--redis` names ([`RedisTarget`]: the URL and its TLS files) and the connections made
//! to it ([`Connection`]). These two are the only handles on Redis that other crates hold: they
//! never name a type of the `redis` crate, so every command a party sends is written here.
//!
//! A [`Connection`] is a multiplexed connection that reconnects by itself (the `redis` crate's
//! `ConnectionManager`): commands from many tasks share it, which is why no pool is needed for
//! the commands that do not block (`docs/architecture.md`). A command that blocks (`XREADGROUP
//! BLOCK`, `XREAD BLOCK`) gets a connection of its own.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::QueueError;

/// The TLS files of a `rediss://` URL, read by the caller (which names them in its errors).
#[derive(Clone, Debug, Default)]
pub struct TlsFiles {
    /// PEM certificate of the CA that signed Redis's certificate, trusted instead of the
    /// system's roots.
    pub ca_cert: Option<Vec<u8>>,
    /// PEM client certificate and private key, for a Redis that asks for one.
    pub client_cert_key: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsFiles {
    fn any(&self) -> bool {
        self.ca_cert.is_some() || self.client_cert_key.is_some()
    }
}

/// Why a Redis URL or its TLS files cannot be used. The messages never echo the URL (it may
/// hold a password).
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("{}", pirq_shared::layout::bad_redis_url(.0))]
    Url(String),
    #[error(
        "--redis-ca-cert and --redis-client-cert need a rediss:// URL (--redis): they configure \
         TLS to Redis"
    )]
    TlsWithoutRediss,
    #[error("the Redis TLS files (--redis-ca-cert, --redis-client-cert/-key): {0}")]
    Tls(String),
}

/// One party's Redis as `--redis` names it. Nothing connects until a [`Connection`] sends its
/// first command.
#[derive(Clone)]
pub struct RedisTarget {
    client: redis::Client,
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The connection info holds the password: never printed.
        f.write_str("RedisTarget")
    }
}

impl RedisTarget {
    /// Checks `url` before any file it needs is read: a URL Redis cannot parse, or TLS files
    /// (`with_tls_files`) given with a URL that is not `rediss://`.
    pub fn check_url(url: &str, with_tls_files: bool) -> Result<(), TargetError> {
        let info = redis::IntoConnectionInfo::into_connection_info(url)
            .map_err(|e| TargetError::Url(e.to_string()))?;
        if with_tls_files && !matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            return Err(TargetError::TlsWithoutRediss);
        }
        Ok(())
    }

    /// Checks `url` (`redis://`, `rediss://`, `unix://`) and builds the client, over TLS with
    /// `tls` for a `rediss://` URL.
    pub fn open(url: &str, tls: TlsFiles) -> Result<RedisTarget, TargetError> {
        let info = redis::IntoConnectionInfo::into_connection_info(url)
            .map_err(|e| TargetError::Url(e.to_string()))?;
        if !tls.any() {
            let client = redis::Client::open(info).map_err(|e| TargetError::Url(e.to_string()))?;
            return Ok(RedisTarget { client });
        }
        if !matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            return Err(TargetError::TlsWithoutRediss);
        }
        let client_tls =
            tls.client_cert_key
                .map(|(client_cert, client_key)| redis::ClientTlsConfig {
                    client_cert,
                    client_key,
                });
        let client = redis::Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls,
                root_cert: tls.ca_cert,
            },
        )
        .map_err(|e| TargetError::Tls(e.to_string()))?;
        Ok(RedisTarget { client })
    }

    /// A reconnecting connection for commands that never block, whose replies are awaited up
    /// to `timeout` (connection attempts too).
    pub fn connection(&self, timeout: Duration) -> Result<Connection, QueueError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        self.connection_with(config)
    }

    /// A reconnecting connection with the worker's settings ([`crate::consumer::connection_config`])
    /// for commands that block up to `block` (`Duration::ZERO`: none do).
    pub fn worker_connection(&self, block: Duration) -> Result<Connection, QueueError> {
        self.connection_with(crate::consumer::connection_config(block))
    }

    pub(crate) fn connection_with(
        &self,
        config: ConnectionManagerConfig,
    ) -> Result<Connection, QueueError> {
        let conn = ConnectionManager::new_lazy_with_config(self.client.clone(), config)?;
        Ok(Connection { conn })
    }

    pub(crate) fn client(&self) -> &redis::Client {
        &self.client
    }
}

/// A reconnecting, multiplexed connection to the party's Redis; cheap to clone (clones share
/// it). The commands are the methods of this crate's modules that take it.
#[derive(Clone)]
pub struct Connection {
    pub(crate) conn: ConnectionManager,
}

impl Connection {
    /// `PING` within `within`: whether Redis answers now.
    pub async fn ping(&self, within: Duration) -> Result<(), QueueError> {
        let mut conn = self.conn.clone();
        let cmd = redis::cmd("PING");
        let ping = cmd.query_async::<String>(&mut conn);
        match tokio::time::timeout(within, ping).await {
            Ok(r) => r.map(drop).map_err(QueueError::from),
            Err(_) => Err(QueueError::Timeout(within)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_urls_are_refused_without_echoing_them() {
        let e = RedisTarget::open("http://:hunter2@host", TlsFiles::default()).unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert!(e.to_string().contains("redis://"), "{e}");
        let tls = TlsFiles {
            ca_cert: Some(b"pem".to_vec()),
            client_cert_key: None,
        };
        let e = RedisTarget::open("redis://127.0.0.1:6379", tls).unwrap_err();
        assert!(matches!(e, TargetError::TlsWithoutRediss), "{e}");
        assert!(RedisTarget::open("redis://127.0.0.1:6379", TlsFiles::default()).is_ok());
    }
}
