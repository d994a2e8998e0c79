//! What `--redis` names ([`RedisTarget`]: the URL and its TLS files) and the connections made
//! to it ([`Connection`]). These two are the only handles on Redis that other crates hold: they
//! never name a type of the `redis` crate, so every command a party sends is written here.
//!
//! `--redis` names either one Redis (`redis://`, `rediss://`, `unix://`) or a Redis Cluster
//! (`redis+cluster://host:port[,host:port…]`, `rediss+cluster://…` over TLS): the nodes listed
//! are only where to start; the cluster's own map of slots is read from them and kept current.
//!
//! A [`Connection`] to one Redis is a multiplexed connection that reconnects by itself (the
//! `redis` crate's `ConnectionManager`); to a cluster, the `redis` crate's cluster connection,
//! which holds a multiplexed connection to each node, routes each command to the node serving
//! its keys' slot, follows `MOVED`/`ASK` redirections and reads the slot map again when a node
//! fails or a slot moves. Commands from many tasks share either kind, which is why no pool is
//! needed for the commands that do not block (`docs/architecture.md`). A command that blocks
//! (`XREADGROUP BLOCK`, `XREAD BLOCK`) gets a connection of its own.
//!
//! Every key of a party hashes to the party's slot (`docs/redis.md`), so a script, a `MULTI` or
//! a pipeline goes to one node. Commands that name no key (`INFO`, `CONFIG GET`, `COMMAND INFO`,
//! `PING`, `WAITAOF`) go, on a cluster, to the node serving the party's slot ([`Conn::node`]):
//! the node whose memory, persistence and version the party depends on.

use std::time::Duration;

use pirq_shared::layout::Layout;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};

use crate::QueueError;

/// The scheme of a cluster URL (`redis+cluster://`); `rediss+cluster://` over TLS.
pub const CLUSTER_SCHEME: &str = "redis+cluster";
/// The scheme of a cluster URL over TLS.
pub const CLUSTER_TLS_SCHEME: &str = "rediss+cluster";

/// Tries of a cluster command before it fails (the first included): a failover or a moved slot
/// is retried inside the `redis` crate, a little over a second in all, and then handed to the
/// caller's own retry (its backoff, or a 503 the client retries).
const CLUSTER_RETRIES: u32 = 6;
/// Least and most wait between two tries of a cluster command, milliseconds (the wait doubles
/// from 10 ms, with jitter).
const CLUSTER_MIN_RETRY_WAIT_MS: u64 = 20;
const CLUSTER_MAX_RETRY_WAIT_MS: u64 = 1000;

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

    fn certificates(self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self.client_cert_key.map(|(client_cert, client_key)| {
                redis::ClientTlsConfig {
                    client_cert,
                    client_key,
                }
            }),
            root_cert: self.ca_cert,
        }
    }
}

/// Why a Redis URL or its TLS files cannot be used. The messages never echo the URL (it may
/// hold a password).
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("{}", pirq_shared::layout::bad_redis_url(.0))]
    Url(String),
    #[error(
        "--redis-ca-cert and --redis-client-cert need a rediss:// or rediss+cluster:// URL \
         (--redis): they configure TLS to Redis"
    )]
    TlsWithoutRediss,
    #[error("the Redis TLS files (--redis-ca-cert, --redis-client-cert/-key): {0}")]
    Tls(String),
}

/// One party's Redis as `--redis` names it: one server or a cluster. Nothing connects until a
/// [`Connection`] sends its first command.
#[derive(Clone)]
pub struct RedisTarget {
    kind: TargetKind,
    /// The node that answers the commands naming no key, on a cluster: the one serving the
    /// party's slot ([`RedisTarget::for_party`]); any primary until then.
    home: SingleNodeRoutingInfo,
}

#[derive(Clone)]
/// Boxed: the clients are large, and a target is cloned into every connection's owner.
enum TargetKind {
    Single {
        /// For every command but pub/sub.
        client: Box<redis::Client>,
        /// RESP3, for the status events: `SSUBSCRIBE` is sent on a multiplexed connection,
        /// whose messages come as RESP3 pushes only.
        events: Box<redis::Client>,
    },
    Cluster {
        /// RESP2, for every command but pub/sub.
        client: Box<ClusterClient>,
        /// RESP3, for the status events: a cluster connection receives pub/sub messages as
        /// RESP3 pushes only.
        events: Box<ClusterClient>,
    },
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The connection info holds the password: never printed.
        f.write_str(match self.kind {
            TargetKind::Single { .. } => "RedisTarget",
            TargetKind::Cluster { .. } => "RedisTarget(cluster)",
        })
    }
}

/// A cluster URL's parts: the node URLs (each `redis://` or `rediss://` with the URL's
/// credentials, database and query) and whether it is over TLS. `None`: not a cluster URL.
fn cluster_nodes(url: &str) -> Option<Result<(Vec<String>, bool), TargetError>> {
    let (scheme, rest) = url.split_once("://")?;
    let tls = match scheme.to_ascii_lowercase().as_str() {
        CLUSTER_SCHEME => false,
        CLUSTER_TLS_SCHEME => true,
        _ => return None,
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let node_scheme = if tls { "rediss" } else { "redis" };
    let mut nodes = Vec::new();
    for host in hosts.split(',') {
        if host.is_empty() {
            return Some(Err(TargetError::Url(format!(
                "{scheme}:// needs host:port nodes separated by commas, and one of them is empty"
            ))));
        }
        let node = format!("{node_scheme}://{userinfo}{host}{tail}");
        if let Err(e) = redis::IntoConnectionInfo::into_connection_info(node.as_str()) {
            // The node is not echoed either: it carries the credentials.
            return Some(Err(TargetError::Url(format!(
                "node {} of {scheme}://: {e}",
                nodes.len() + 1
            ))));
        }
        nodes.push(node);
    }
    Some(Ok((nodes, tls)))
}

impl RedisTarget {
    /// Checks `url` before any file it needs is read: a URL Redis cannot parse, a cluster URL
    /// with an empty or malformed node, or TLS files (`with_tls_files`) given with a URL that
    /// is not `rediss://` or `rediss+cluster://`.
    pub fn check_url(url: &str, with_tls_files: bool) -> Result<(), TargetError> {
        let tls = match cluster_nodes(url) {
            Some(nodes) => nodes?.1,
            None => {
                let info = redis::IntoConnectionInfo::into_connection_info(url)
                    .map_err(|e| TargetError::Url(e.to_string()))?;
                matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. })
            }
        };
        if with_tls_files && !tls {
            return Err(TargetError::TlsWithoutRediss);
        }
        Ok(())
    }

    /// Checks `url` (`redis://`, `rediss://`, `unix://`, `redis+cluster://`,
    /// `rediss+cluster://`) and builds the client, over TLS with `tls` for a `rediss` URL.
    pub fn open(url: &str, tls: TlsFiles) -> Result<RedisTarget, TargetError> {
        Self::check_url(url, tls.any())?;
        let kind = match cluster_nodes(url) {
            Some(nodes) => {
                let (nodes, _) = nodes?;
                let build = |protocol: redis::ProtocolVersion| {
                    let mut builder = ClusterClientBuilder::new(nodes.clone())
                        .use_protocol(protocol)
                        .retries(CLUSTER_RETRIES)
                        .min_retry_wait(CLUSTER_MIN_RETRY_WAIT_MS)
                        .max_retry_wait(CLUSTER_MAX_RETRY_WAIT_MS);
                    if tls.any() {
                        builder = builder.certs(tls.clone().certificates());
                    }
                    builder.build().map_err(|e| match tls.any() {
                        true => TargetError::Tls(e.to_string()),
                        false => TargetError::Url(e.to_string()),
                    })
                };
                TargetKind::Cluster {
                    client: Box::new(build(redis::ProtocolVersion::RESP2)?),
                    events: Box::new(build(redis::ProtocolVersion::RESP3)?),
                }
            }
            None => {
                let info = redis::IntoConnectionInfo::into_connection_info(url)
                    .map_err(|e| TargetError::Url(e.to_string()))?;
                let build = |protocol: redis::ProtocolVersion| {
                    let settings = info.redis_settings().clone().set_protocol(protocol);
                    let info = info.clone().set_redis_settings(settings);
                    if tls.any() {
                        redis::Client::build_with_tls(info, tls.clone().certificates())
                            .map_err(|e| TargetError::Tls(e.to_string()))
                    } else {
                        redis::Client::open(info).map_err(|e| TargetError::Url(e.to_string()))
                    }
                };
                TargetKind::Single {
                    // The URL's own protocol (RESP2 unless it asks for `protocol=resp3`).
                    client: Box::new(build(info.redis_settings().protocol())?),
                    events: Box::new(build(redis::ProtocolVersion::RESP3)?),
                }
            }
        };
        Ok(RedisTarget {
            kind,
            home: SingleNodeRoutingInfo::RandomPrimary,
        })
    }

    /// The same Redis, with the commands that name no key sent, on a cluster, to the node
    /// serving the party's slot (that of every key under `layout`'s prefix).
    pub fn for_party(mut self, layout: &Layout) -> RedisTarget {
        self.home =
            SingleNodeRoutingInfo::SpecificNode(Route::with_key(layout.db(), SlotAddr::Master));
        self
    }

    /// Whether `--redis` names a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.kind, TargetKind::Cluster { .. })
    }

    /// A reconnecting connection for commands that never block, whose replies are awaited up
    /// to `timeout` (connection attempts too).
    pub fn connection(&self, timeout: Duration) -> Result<Connection, QueueError> {
        self.connection_with(Settings {
            connect_timeout: timeout,
            response_timeout: timeout,
            reconnect_retries: None,
            max_reconnect_delay: None,
        })
    }

    /// A reconnecting connection with the worker's settings ([`connection_settings`])
    /// for commands that block up to `block` (`Duration::ZERO`: none do).
    pub fn worker_connection(&self, block: Duration) -> Result<Connection, QueueError> {
        self.connection_with(connection_settings(block))
    }

    pub(crate) fn connection_with(&self, settings: Settings) -> Result<Connection, QueueError> {
        let conn = match &self.kind {
            TargetKind::Single { client, .. } => {
                let mut config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(settings.connect_timeout))
                    .set_response_timeout(Some(settings.response_timeout));
                if let Some(n) = settings.reconnect_retries {
                    config = config.set_number_of_retries(n);
                }
                if let Some(d) = settings.max_reconnect_delay {
                    config = config.set_max_delay(d);
                }
                Conn::Single(ConnectionManager::new_lazy_with_config(
                    (**client).clone(),
                    config,
                )?)
            }
            TargetKind::Cluster { client, .. } => {
                let config = ClusterConfig::new()
                    .set_connection_timeout(settings.connect_timeout)
                    .set_response_timeout(settings.response_timeout);
                Conn::Cluster {
                    conn: client.get_pending_async_connection_with_config(config),
                    home: None,
                    node: self.home.clone(),
                }
            }
        };
        Ok(Connection { conn })
    }

    pub(crate) fn kind(&self) -> Kind<'_> {
        match &self.kind {
            TargetKind::Single { events, .. } => Kind::Single { events },
            TargetKind::Cluster { events, .. } => Kind::Cluster { events },
        }
    }
}

/// What a [`RedisTarget`] is, for the code that must treat a cluster apart (the pub/sub of
/// [`crate::events`]).
pub(crate) enum Kind<'a> {
    Single { events: &'a redis::Client },
    Cluster { events: &'a ClusterClient },
}

/// How long a worker's connection attempt may take: a Redis that has not accepted within 5 s
/// is down or cut off, and the command fails so that the caller's back-off (and its warning)
/// takes over instead of a worker that hangs without a word.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How much longer than its block time a command may wait for its reply: a reply that takes 5 s
/// beyond it means Redis or the network is stalled, so the command fails and is retried.
const REPLY_SLACK: Duration = Duration::from_secs(5);

/// Longest wait between reconnect attempts: a worker serves again within a second of Redis
/// coming back.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// The settings of a worker's Redis connections, for commands that block up to `block`
/// (`XREADGROUP ... BLOCK` of the consumer, the updates follower's `XREAD ... BLOCK`; `Duration::ZERO` for
/// a connection whose commands never block). The reply timeout is `block` + [`REPLY_SLACK`]:
/// a blocking read holds its connection for the whole block time when no entry arrives, so a
/// shorter timeout would fail every idle read (and log a warning every couple of seconds).
pub(crate) fn connection_settings(block: Duration) -> Settings {
    Settings {
        connect_timeout: CONNECT_TIMEOUT,
        response_timeout: block + REPLY_SLACK,
        reconnect_retries: None,
        max_reconnect_delay: Some(MAX_RECONNECT_DELAY),
    }
}

/// How a connection waits: for its connection attempts, for each reply, and between
/// reconnections (one Redis; a cluster retries as [`CLUSTER_RETRIES`] says).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    /// Reconnection attempts before a command fails (`None`: the `redis` crate's default).
    pub reconnect_retries: Option<usize>,
    /// Longest wait between reconnection attempts (`None`: the default).
    pub max_reconnect_delay: Option<Duration>,
}

/// A connection to one Redis or to a cluster, for every command of this crate: a command with
/// keys goes where its keys are; [`Conn::node`] gives one for the commands that name none.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster {
        conn: ClusterConnection,
        /// `Some`: every command goes to this node (a [`Conn::node`] connection).
        home: Option<SingleNodeRoutingInfo>,
        /// The node of the party's slot, for [`Conn::node`].
        node: SingleNodeRoutingInfo,
    },
}

impl Conn {
    /// This connection with every command sent to the node of the party's slot, for the
    /// commands that name no key (`INFO`, `CONFIG GET`, `COMMAND INFO`, `PING`, `WAITAOF`).
    /// On one Redis, the same connection. On a cluster the same node connection serves it, so
    /// `WAITAOF` counts the writes this connection sent before it.
    pub(crate) fn node(&self) -> Conn {
        match self {
            Conn::Single(c) => Conn::Single(c.clone()),
            Conn::Cluster { conn, node, .. } => Conn::Cluster {
                conn: conn.clone(),
                home: Some(node.clone()),
                node: node.clone(),
            },
        }
    }
}

impl Conn {
    /// This connection with every command sent to the primary serving `key`'s slot (on one
    /// Redis, the same connection): for `WAIT` and `INFO replication` about the node that holds
    /// one partition ([`crate::replication`]). On a cluster the node connection is the one the
    /// commands naming `key`'s slot use, so `WAIT` counts their writes.
    pub(crate) fn primary_of(&self, key: &str) -> Conn {
        match self {
            Conn::Single(c) => Conn::Single(c.clone()),
            Conn::Cluster { conn, node, .. } => Conn::Cluster {
                conn: conn.clone(),
                home: Some(SingleNodeRoutingInfo::SpecificNode(Route::with_key(
                    key,
                    SlotAddr::Master,
                ))),
                node: node.clone(),
            },
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster {
                conn,
                home: Some(node),
                ..
            } => Box::pin(conn.route_command(
                cmd.clone(),
                redis::cluster_routing::RoutingInfo::SingleNode(node.clone()),
            )),
            Conn::Cluster { conn, .. } => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster {
                conn,
                home: Some(node),
                ..
            } => Box::pin(conn.route_pipeline(pipeline.clone(), offset, count, node.clone())),
            Conn::Cluster { conn, .. } => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster { conn, .. } => conn.get_db(),
        }
    }
}

/// A reconnecting, multiplexed connection to the party's Redis (one server or a cluster);
/// cheap to clone (clones share it). The commands are the methods of this crate's modules that
/// take it.
#[derive(Clone)]
pub struct Connection {
    pub(crate) conn: Conn,
}

impl Connection {
    /// `PING` within `within`: whether Redis (on a cluster, the node of the party's slot)
    /// answers now.
    pub async fn ping(&self, within: Duration) -> Result<(), QueueError> {
        let mut conn = self.conn.node();
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
        let e = RedisTarget::open("redis://127.0.0.1:6379", tls.clone()).unwrap_err();
        assert!(matches!(e, TargetError::TlsWithoutRediss), "{e}");
        let e = RedisTarget::open("redis+cluster://127.0.0.1:7000", tls).unwrap_err();
        assert!(matches!(e, TargetError::TlsWithoutRediss), "{e}");
        assert!(RedisTarget::open("redis://127.0.0.1:6379", TlsFiles::default()).is_ok());
    }

    #[test]
    fn cluster_urls_name_every_node_with_the_credentials() {
        let (nodes, tls) = cluster_nodes("redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7001/0")
            .unwrap()
            .unwrap();
        assert!(!tls);
        assert_eq!(
            nodes,
            ["redis://:pw@10.0.0.1:7000/0", "redis://:pw@10.0.0.2:7001/0"]
        );
        let (nodes, tls) = cluster_nodes("rediss+cluster://[::1]:7000")
            .unwrap()
            .unwrap();
        assert!(tls);
        assert_eq!(nodes, ["rediss://[::1]:7000"]);
        assert!(cluster_nodes("redis://127.0.0.1:6379").is_none());
        let target = RedisTarget::open(
            "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
            TlsFiles::default(),
        )
        .unwrap();
        assert!(target.is_cluster());
        assert!(RedisTarget::check_url("rediss+cluster://127.0.0.1:7000", true).is_ok());
    }

    #[test]
    fn bad_cluster_urls_say_what_is_wrong_without_the_password() {
        for bad in [
            "redis+cluster://:hunter2@",
            "redis+cluster://:hunter2@127.0.0.1:7000,,127.0.0.1:7001",
            "redis+cluster://:hunter2@127.0.0.1:7000,127.0.0.1:notaport",
        ] {
            let e = RedisTarget::open(bad, TlsFiles::default()).unwrap_err();
            let text = e.to_string();
            assert!(matches!(e, TargetError::Url(_)), "{bad}: {text}");
            assert!(!text.contains("hunter2"), "{bad}: {text}");
            assert!(text.contains("redis+cluster://"), "{bad}: {text}");
        }
    }
}
