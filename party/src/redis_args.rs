//! The two flags every server of a party takes to find its Redis, declared once so that the
//! gateway and the worker cannot drift apart on a name, an env var or a default, and what they
//! name: the Redis client and the key layout.

use clap::Args;
use pirq_shared::layout::{Layout, PrefixError};

/// `--redis` and `--prefix` (env `PIRQ_REDIS_URL`, `PIRQ_PREFIX`); `#[command(flatten)]` them
/// into a server's config.
#[derive(Args, Debug, Clone)]
pub struct RedisArgs {
    /// Redis URL of this party (each party has its own Redis).
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
}

impl RedisArgs {
    /// A client of `--redis` (nothing connects yet). A malformed URL is refused with the forms
    /// to write instead, without echoing it (it may hold a password).
    pub fn client(&self) -> anyhow::Result<redis::Client> {
        redis::Client::open(self.redis_url.as_str())
            .map_err(|e| anyhow::anyhow!(pirq_shared::layout::bad_redis_url(e)))
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
