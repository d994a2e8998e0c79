//! What this Redis offers, asked rather than assumed (written once for both servers).
//!
//! The worker probes `XACKDEL` (Redis 8.2: one command instead of `XACK` + `XDEL`), the gateway
//! `WAITAOF` (Redis 7.2: wait for the fsync of an accepted job); both log the server version.

use redis::aio::ConnectionLike;
use redis::Value;

/// `redis_version` from `INFO server` (`unknown` when absent).
pub async fn server_version<C: ConnectionLike>(conn: &mut C) -> redis::RedisResult<String> {
    let info: String = redis::cmd("INFO").arg("server").query_async(conn).await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("unknown")
        .trim()
        .to_string())
}

/// Whether the server knows the command `name` (`COMMAND INFO` answers nil for unknown ones).
pub async fn command_exists<C: ConnectionLike>(
    conn: &mut C,
    name: &str,
) -> redis::RedisResult<bool> {
    let reply: Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(name)
        .query_async(conn)
        .await?;
    Ok(matches!(&reply, Value::Array(items) if items.iter().any(|v| !matches!(v, Value::Nil))))
}
