//! Redis commands counted the way Redis counts them: `INFO commandstats`, summed over a party's
//! primaries (issue 35, "a host path whose cost is counted, not guessed").
//!
//! Every command a Redis runs is one `calls=` in its `cmdstat_<name>` line, the commands a
//! script runs (`redis.call`) and those inside `MULTI`/`EXEC` included, beside the `EVALSHA`,
//! `MULTI` and `EXEC` themselves. [`reset`] is `CONFIG RESETSTAT` on every primary and
//! [`read`] the sum of their `INFO commandstats` afterwards, less the resets' own calls: what
//! the party's processes sent in between, and nothing the harness sent.

use std::collections::BTreeMap;

use redis::aio::MultiplexedConnection;

use crate::Party;

/// Calls by command name (`hset`, `evalsha`, `config|resetstat`, …): one Redis's or a sum.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Calls(pub BTreeMap<String, u64>);

impl Calls {
    /// Every call, whatever the command.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// The calls of `INFO commandstats` text (`cmdstat_hset:calls=12,usec=…`).
    pub fn parse(info: &str) -> Calls {
        let mut calls = BTreeMap::new();
        for line in info.lines() {
            let Some((name, fields)) = line
                .strip_prefix("cmdstat_")
                .and_then(|rest| rest.split_once(':'))
            else {
                continue;
            };
            let count = fields
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))
                .and_then(|n| n.trim().parse::<u64>().ok())
                .unwrap_or(0);
            *calls.entry(name.to_string()).or_default() += count;
        }
        Calls(calls)
    }

    fn add(&mut self, other: Calls) {
        for (name, n) in other.0 {
            *self.0.entry(name).or_default() += n;
        }
    }

    /// Takes one call of `name` away (a command of the harness's own), dropping the line at 0.
    fn forget_one(&mut self, name: &str) {
        if let Some(n) = self.0.get_mut(name) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.0.remove(name);
            }
        }
    }
}

/// Connections to the party's primaries: its one Redis, or every primary of its Redis Cluster
/// (`INFO replication` says `role:master`; a replica's calls are the replication stream, not
/// the party's).
pub async fn primaries(party: &Party) -> anyhow::Result<Vec<MultiplexedConnection>> {
    if party.redis.cluster().is_none() {
        return Ok(vec![party.redis().await?]);
    }
    let mut conns = Vec::new();
    for port in party.redis.node_ports() {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let replication: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await?;
        if replication.contains("role:master") {
            conns.push(conn);
        }
    }
    Ok(conns)
}

/// `CONFIG RESETSTAT` on every connection: the counting starts.
pub async fn reset(conns: &mut [MultiplexedConnection]) -> anyhow::Result<()> {
    for conn in conns {
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async::<()>(conn)
            .await?;
    }
    Ok(())
}

/// The calls since [`reset`], summed over the connections, without the resets themselves
/// (`INFO` does not count itself: Redis counts a command once it has run).
pub async fn read(conns: &mut [MultiplexedConnection]) -> anyhow::Result<Calls> {
    let mut sum = Calls::default();
    for conn in conns {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(conn)
            .await?;
        let mut calls = Calls::parse(&info);
        calls.forget_one("config|resetstat");
        sum.add(calls);
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_read_from_every_cmdstat_line_and_subcommands_kept_apart() {
        let info = "# Commandstats\r\n\
            cmdstat_hset:calls=27,usec=81,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_evalsha:calls=14,usec=900,usec_per_call=64.29,rejected_calls=0,failed_calls=1\r\n\
            cmdstat_config|resetstat:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_client|setinfo:calls=2,usec=1,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n";
        let mut calls = Calls::parse(info);
        assert_eq!(calls.total(), 44);
        assert_eq!(calls.0["client|setinfo"], 2);
        calls.forget_one("config|resetstat");
        assert_eq!(calls.total(), 43);
        assert!(!calls.0.contains_key("config|resetstat"));
        calls.forget_one("nothing");
        assert_eq!(calls.total(), 43);
    }
}
