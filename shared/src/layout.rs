//! Every Redis key name pirq uses, in one place.
//!
//! All keys of one party live under its prefix `P` wrapped in a hash tag: the party's own keys
//! under `{P}`, the queue's under the tag of one of its partitions (`{P}`, `{P:1}`, …), so that
//! in a Redis Cluster every script and `MULTI` block (the gateway's submit, the worker's result
//! blocks) touches one slot while the partitions spread over the primaries. `docs/redis.md`
//! describes each key's type, TTL and writers; keep the two in step.

use std::fmt;

/// The forms of a Redis URL, for the message that refuses a malformed one.
pub const REDIS_URL_FORMS: &str =
    "redis://[:PASSWORD@]HOST:PORT[/DB], rediss://... (TLS), unix:///PATH/TO/SOCKET, or for a \
     Redis Cluster redis+cluster://[:PASSWORD@]HOST:PORT[,HOST:PORT...] (rediss+cluster:// over TLS)";

/// What to say about a Redis URL the `redis` crate refused: what is wrong and what to type. The
/// URL itself is not repeated (it may hold a password).
pub fn bad_redis_url(error: impl fmt::Display) -> String {
    format!(
        "the Redis URL (--redis, PIRQ_REDIS_URL) is not valid ({error}); write {REDIS_URL_FORMS}, \
         e.g. redis://127.0.0.1:6379"
    )
}

/// Consumer group every worker of an unsharded party reads the job stream through.
pub const GROUP: &str = "workers";

/// The consumer group of shard `spec`: [`GROUP`] for an unsharded party, else
/// `shard-<I>-of-<S>`. One group per shard makes Redis deliver every job once to every shard,
/// and once only within a shard (its replicas share the group).
pub fn shard_group(spec: crate::shard::ShardSpec) -> String {
    if spec.is_whole() {
        GROUP.to_string()
    } else {
        format!("shard-{}-of-{}", spec.index, spec.count)
    }
}

/// Fields of a job stream entry.
pub mod job_field {
    /// Request id (32 lowercase hex digits, `pirq_queue::RequestId`).
    pub const ID: &str = "id";
    /// bincode [`crate::wire::Job`].
    pub const JOB: &str = "job";
}

/// Fields of the per-query status hash `{P}:q:<id>`.
pub mod query_field {
    /// `queued`, `running`, `done` or `failed`.
    pub const STATUS: &str = "status";
    /// Epoch the answers are for (done only).
    pub const EPOCH: &str = "epoch";
    /// Page size in bytes (done only).
    pub const PAGE_SIZE: &str = "page_size";
    /// The answers, `keys` pages of `page_size` bytes back to back (done only).
    pub const PAGES: &str = "pages";
    /// Error code (failed only).
    pub const ERROR_CODE: &str = "error_code";
    /// Human-readable error message (failed only).
    pub const ERROR_MESSAGE: &str = "error_message";
    /// Index of the offending key, when there is one (failed only).
    pub const KEY_INDEX: &str = "key_index";
    /// Number of keys in the query.
    pub const KEYS: &str = "keys";
    /// Milliseconds since the Unix epoch when the gateway accepted the query.
    pub const ACCEPTED_MS: &str = "accepted_ms";
    /// Microseconds the scanner pass that answered this query took (done only).
    pub const SCAN_US: &str = "scan_us";
    /// Microseconds between the worker reading the job and writing its result (done/failed).
    pub const WORKER_US: &str = "worker_us";
    /// Sharded parties: the shard count `S` the job is answered with (set by the first shard
    /// that starts it; the combine completes the job when `S` partials are in).
    pub const SHARDS: &str = "shards";
    /// Sharded parties: how many shards' partials are XORed in so far.
    pub const PARTS: &str = "parts";
    /// Sharded parties: prefix of the per-shard field `part:<I>`, set once shard `I`'s partial
    /// is in (a replica retrying after a reclaim must not XOR it twice).
    pub const PART_PREFIX: &str = "part:";
    /// Sharded parties: set by the first shard that starts the job (the `running` event is
    /// announced once, and the combine state's expiry set then).
    pub const STARTED: &str = "started";
    /// Database digest (SPEC §2.1) at `epoch`, 64 hex digits (done only).
    pub const DIGEST: &str = "digest";
    /// The query's `Idempotency-Key`, when it came with one: the gateway that hands the final
    /// result over shortens that key's record together with the query's.
    pub const IDEMPOTENCY_KEY: &str = "idem";
}

/// Fields a dead letter adds to the job entry's own (`id`, `job`) in `{P}:dead`
/// (`queue/lua/dead_letter.lua`): what operators read when they inspect a poison job.
pub mod dead_letter_field {
    /// The job stream entry's id.
    pub const ENTRY: &str = "entry";
    /// Why it was given up: a pirq error code.
    pub const CODE: &str = "code";
    pub const MESSAGE: &str = "message";
    /// How many times the group delivered it.
    pub const DELIVERIES: &str = "deliveries";
    /// The worker that gave up on it.
    pub const CONSUMER: &str = "consumer";
}

/// Field of an updates stream entry holding the bincode update.
pub const UPDATE_FIELD: &str = "update";

/// Fields of the database registration hash `{P}:db`.
pub mod db_field {
    pub const NUM_PAGES: &str = "num_pages";
    pub const PAGE_SIZE: &str = "page_size";
    pub const DOMAIN_BITS: &str = "domain_bits";
    /// Newest epoch: raised by a gateway when it appends an update, and by workers (never
    /// lowered while the geometry stays the same).
    pub const EPOCH: &str = "epoch";
    /// Oldest epoch still answered exactly: raised by workers as they fold their base forward.
    pub const MIN_EPOCH: &str = "min_epoch";
    /// The key-value layout (`docs/spec/kv.md` §5) as JSON; absent for a page database.
    pub const KV: &str = "kv";
    /// Shard count `S` of the party (absent or 1: unsharded), written by its workers.
    pub const SHARDS: &str = "shards";
    /// Random id of the registered database, drawn by the worker that registered it first (or
    /// replaced it with `--replace-db`); every worker serving it carries the same id, and a
    /// worker that finds another id has been replaced and stops.
    pub const DB_ID: &str = "db_id";
}

/// Why a prefix was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid prefix {0:?}: use 1..=64 characters from [A-Za-z0-9_.-]")]
pub struct PrefixError(pub String);

/// Why a partition count was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid partition count {0}: use 1..={MAX_PARTITIONS}")]
pub struct PartitionsError(pub u32);

/// The partition count of a party by default (`--partitions`): one partition keeps every key
/// name as it was before partitions existed (`{P}:jobs`, `{P}:q:<id>`, …).
pub const DEFAULT_PARTITIONS: u32 = 1;

/// The most partitions a party may have: far more than the primaries of any cluster it would run
/// on (a few dozen), while each partition costs every worker one blocking connection.
pub const MAX_PARTITIONS: u32 = 256;

/// The key names of one party, built from its prefix and its partition count.
///
/// A party's queue is split into `partitions` partitions, each under a hash tag of its own
/// (partition 0: `{P}`, partition `p > 0`: `{P:p}`), so that a Redis Cluster spreads them over
/// its primaries while every script and `MULTI` block still touches one slot: a request lives
/// in one partition (its job entry, its record, its idempotency record, its shards' partials).
/// Which partition a request lives in is a function of its id ([`Layout::partition_of_id`]);
/// the keys of the party as a whole (registration, updates, heartbeats) stay under `{P}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `{P}`: the party's prefix inside its hash tag (the party-wide keys: its identity, its
    /// partition count, its read counter, its list of tables).
    party_tag: String,
    /// The tag of this table's keys: `{P}` for the table [`DEFAULT_TABLE`], `{P:t:NAME}` for
    /// the table `NAME` ([`Layout::table`]).
    tag: String,
    /// The table these keys are of.
    table: String,
    partitions: u32,
}

/// The table a party serves when it is given one database (`pirq-worker --db FILE`), and the
/// one today's routes (`/v1/queries`, `/v1/info`, …) mean. Its keys are the party's from before
/// tables existed (`{P}:jobs`, `{P}:db`, …), so a party upgraded in place needs no migration.
pub const DEFAULT_TABLE: &str = "default";

/// Why a table name was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid table name {0:?}: use 1..=64 characters from [A-Za-z0-9_-]")]
pub struct TableNameError(pub String);

/// Checks a table name: letters, digits, `_` and `-` only, so that it is one URL path segment
/// as it is (`/v1/tables/{name}/…`) and one piece of a key (no `:`, braces or dots).
pub fn check_table_name(name: &str) -> Result<(), TableNameError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(TableNameError(name.to_string()))
    }
}

/// The keys of one partition of a party's queue: its job stream and the records of the
/// requests that live in it, all under the partition's hash tag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionKeys {
    /// `{P}` (partition 0) or `{P:p}`.
    tag: String,
}

impl PartitionKeys {
    /// Stream of jobs (`XADD` by gateways, read by the [`GROUP`] consumer group).
    pub fn jobs(&self) -> String {
        format!("{}:jobs", self.tag)
    }

    /// One query's record: a string, `queued` while pending (only for a query whose client
    /// polls), then its final answer or failure (`pirq_queue::record`). Has a TTL.
    pub fn query(&self, id: &str) -> String {
        format!("{}:q:{id}", self.tag)
    }

    /// Sharded parties: a query's combine state (shard count, pinned epoch, partials in,
    /// digest, slowest timings), a hash that lives while the query is pending.
    pub fn shard_state(&self, id: &str) -> String {
        format!("{}:sh:{id}", self.tag)
    }

    /// Dead-letter stream for the partition's jobs that could not be answered.
    pub fn dead_letters(&self) -> String {
        format!("{}:dead", self.tag)
    }

    /// Idempotency-Key record.
    pub fn idempotency(&self, key: &str) -> String {
        format!("{}:idem:{key}", self.tag)
    }

    /// Sharded parties: the running XOR of a query's partial answers.
    pub fn partial_sum(&self, id: &str) -> String {
        format!("{}:acc:{id}", self.tag)
    }

    /// Sharded parties: where shard `index`'s partial is staged for the `BITOP`.
    pub fn partial_in(&self, id: &str, index: u32) -> String {
        format!("{}:part:{id}:{index}", self.tag)
    }

    /// Sharded pub/sub channel where workers announce the status changes of the partition's
    /// requests as `"<id> <status>"` (`SPUBLISH`). One per partition, under its tag: a sharded
    /// channel lives in its slot like a key, so the announcement goes in the same pipeline (to
    /// the same node) as the result it announces, and on a Redis Cluster reaches that node only
    /// (a classic `PUBLISH` is broadcast to every node). Gateways `SSUBSCRIBE` to every
    /// partition's.
    pub fn events(&self) -> String {
        format!("{}:done", self.tag)
    }
}

impl Layout {
    /// Checks the prefix: braces, spaces or colons would break the hash tag or the key grammar.
    pub fn new(prefix: &str) -> Result<Layout, PrefixError> {
        let ok = !prefix.is_empty()
            && prefix.len() <= 64
            && prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !ok {
            return Err(PrefixError(prefix.to_string()));
        }
        Ok(Layout {
            party_tag: format!("{{{prefix}}}"),
            tag: format!("{{{prefix}}}"),
            table: DEFAULT_TABLE.to_string(),
            partitions: DEFAULT_PARTITIONS,
        })
    }

    /// The keys of the party's table `name`: the party's own for [`DEFAULT_TABLE`], else a
    /// namespace of the table's own under the tag `{P:t:NAME}` (its partitions `{P:t:NAME:p}`),
    /// with its own job streams, records, events, registration, digests, updates and worker
    /// heartbeats. The party-wide keys ([`Layout::party`], [`Layout::partition_count`],
    /// [`Layout::fetched_bytes`], [`Layout::tables`]) stay the party's. A table tag cannot be
    /// another party's (a prefix holds no `:`) nor a partition's (`t` is not a number).
    pub fn table(&self, name: &str) -> Result<Layout, TableNameError> {
        check_table_name(name)?;
        let party = self.prefix();
        let tag = if name == DEFAULT_TABLE {
            self.party_tag.clone()
        } else {
            format!("{{{party}:t:{name}}}")
        };
        Ok(Layout {
            party_tag: self.party_tag.clone(),
            tag,
            table: name.to_string(),
            partitions: self.partitions,
        })
    }

    /// The table these keys are of ([`DEFAULT_TABLE`] unless made by [`Layout::table`]).
    pub fn table_name(&self) -> &str {
        &self.table
    }

    /// Whether these are the keys of the [`DEFAULT_TABLE`].
    pub fn is_default_table(&self) -> bool {
        self.table == DEFAULT_TABLE
    }

    /// Set of the party's table names other than [`DEFAULT_TABLE`] (`SADD` by the workers that
    /// register one): what a gateway reads to learn the tables it serves. A name stays listed
    /// once added; a gateway lists a table only while its registration ([`Layout::db`]) exists.
    pub fn tables(&self) -> String {
        format!("{}:tables", self.party_tag)
    }

    /// The same party split into `count` partitions (1..=[`MAX_PARTITIONS`]).
    pub fn with_partitions(self, count: u32) -> Result<Layout, PartitionsError> {
        if !(1..=MAX_PARTITIONS).contains(&count) {
            return Err(PartitionsError(count));
        }
        Ok(Layout {
            partitions: count,
            ..self
        })
    }

    /// The party's prefix as given.
    pub fn prefix(&self) -> &str {
        &self.party_tag[1..self.party_tag.len() - 1]
    }

    /// How many partitions the party's queue has.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// The keys of partition `p` (`p < partitions()`): `{P}` for partition 0, so that a party of
    /// one partition keeps the key names it had before partitions existed, else `{P:p}` (a
    /// prefix cannot hold `:`, so no other party's tag looks like it).
    pub fn partition(&self, p: u32) -> PartitionKeys {
        debug_assert!(p < self.partitions, "partition {p} of {}", self.partitions);
        let tag = if p == 0 {
            self.tag.clone()
        } else {
            format!("{{{}:{p}}}", &self.tag[1..self.tag.len() - 1])
        };
        PartitionKeys { tag }
    }

    /// Every partition, 0 first.
    pub fn all_partitions(&self) -> impl Iterator<Item = (u32, PartitionKeys)> + '_ {
        (0..self.partitions).map(|p| (p, self.partition(p)))
    }

    /// The partition a request id (32 hex digits) lives in: its value modulo the count. Its
    /// gateway draws the id at random within the partition it chose, so every part of the
    /// protocol finds the request's keys from the id alone. Text that is not hex (never a
    /// request id: patterns in tests) maps to partition 0.
    pub fn partition_of_id(&self, id: &str) -> u32 {
        // One partition (the default): nothing to parse (a gateway asks twice a submit).
        if self.partitions <= 1 {
            return 0;
        }
        u128::from_str_radix(id, 16).map_or(0, |v| (v % u128::from(self.partitions)) as u32)
    }

    /// The partition of a request that carries an `Idempotency-Key`: a function of the key
    /// (64-bit FNV-1a, stable across builds and machines), so that a retry, whichever gateway
    /// takes it, finds the key's record in the same partition as the first attempt.
    pub fn partition_of_idempotency_key(&self, key: &str) -> u32 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.bytes() {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        (hash % u64::from(self.partitions)) as u32
    }

    /// The partition count the party's processes were started with, recorded by the first of
    /// them (a decimal string): a gateway or worker started with another count refuses to run,
    /// since it would look for requests in the wrong partitions.
    pub fn partition_count(&self) -> String {
        format!("{}:partitions", self.party_tag)
    }

    /// Partition 0's job stream (the party's only one with one partition); every partition's:
    /// [`Layout::partition`].
    pub fn jobs(&self) -> String {
        self.partition(0).jobs()
    }

    /// The record of the request `id`, in the id's partition.
    pub fn query(&self, id: &str) -> String {
        self.partition(self.partition_of_id(id)).query(id)
    }

    /// Every partition's status event channel ([`PartitionKeys::events`]), partition 0's
    /// (`{P}:done`, the party's only one with one partition) first: what a gateway subscribes
    /// to.
    pub fn events(&self) -> Vec<String> {
        self.all_partitions()
            .map(|(_, keys)| keys.events())
            .collect()
    }

    /// Hash describing the database the party serves ([`db_field`]); written by workers.
    pub fn db(&self) -> String {
        format!("{}:db", self.tag)
    }

    /// Hash epoch (decimal) → database digest at that epoch (SPEC §2.1, 64 hex digits), written
    /// by the workers that applied it; trimmed with the updates stream.
    pub fn digests(&self) -> String {
        format!("{}:digests", self.tag)
    }

    /// The party's identity (32 hex digits), drawn once with `SET NX` by the first gateway and
    /// shared by all of them; `/v1/info` shows it so a client can refuse one party twice.
    pub fn party(&self) -> String {
        format!("{}:party", self.party_tag)
    }

    /// Set of worker ids that have registered; members whose heartbeat key is gone are dead.
    pub fn workers(&self) -> String {
        format!("{}:workers", self.tag)
    }

    /// One worker's heartbeat (JSON registration), expiring unless refreshed.
    pub fn worker(&self, worker_id: &str) -> String {
        format!("{}:worker:{worker_id}", self.tag)
    }

    /// Stream of epoch updates: entry id `<epoch>-0`, field [`UPDATE_FIELD`] = bincode
    /// [`crate::update::EpochUpdate`]. Appended by gateways (one entry per epoch, so an epoch is
    /// applied whole or not at all), read in full by every worker (no consumer group).
    pub fn updates(&self) -> String {
        format!("{}:updates", self.tag)
    }

    /// Sharded parties: the running XOR of a query's partial answers (a string, `BITOP XOR`
    /// target), deleted when the last shard's partial completes the query. Has a TTL. In the
    /// id's partition.
    pub fn partial_sum(&self, id: &str) -> String {
        self.partition(self.partition_of_id(id)).partial_sum(id)
    }

    /// Sharded parties: where shard `index`'s partial is staged for the `BITOP` inside the
    /// combine script (set and deleted by that one script). In the id's partition.
    pub fn partial_in(&self, id: &str, index: u32) -> String {
        self.partition(self.partition_of_id(id))
            .partial_in(id, index)
    }

    /// Partition 0's dead-letter stream; every partition's: [`Layout::partition`].
    pub fn dead_letters(&self) -> String {
        self.partition(0).dead_letters()
    }

    /// The record of an `Idempotency-Key`, in the key's partition.
    pub fn idempotency(&self, key: &str) -> String {
        self.partition(self.partition_of_idempotency_key(key))
            .idempotency(key)
    }

    /// Counter of the result bytes the party's gateways have handed over to clients, ever: its
    /// growth is the party's read rate, from which every gateway sizes how long a read result
    /// is kept (`--fetched-result-bytes`).
    pub fn fetched_bytes(&self) -> String {
        format!("{}:fetched_bytes", self.party_tag)
    }
}

impl fmt::Display for Layout {
    /// The prefix, and the table when it is not the default one (`pirq`, `pirq table small`):
    /// what messages name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.prefix())?;
        if !self.is_default_table() {
            write!(f, " table {}", self.table)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let l = Layout::new("party-a").unwrap();
        assert_eq!(l.prefix(), "party-a");
        assert_eq!(l.jobs(), "{party-a}:jobs");
        assert_eq!(l.query("ab"), "{party-a}:q:ab");
        assert_eq!(l.events(), ["{party-a}:done"]);
        assert_eq!(l.db(), "{party-a}:db");
        assert_eq!(l.workers(), "{party-a}:workers");
        assert_eq!(l.worker("w1"), "{party-a}:worker:w1");
        for key in [
            l.jobs(),
            l.query("x"),
            l.db(),
            l.workers(),
            l.dead_letters(),
            l.partial_sum("x"),
            l.partial_in("x", 2),
        ] {
            assert!(key.starts_with("{party-a}:"));
        }
    }

    #[test]
    fn partitions_have_tags_of_their_own_and_one_partition_keeps_the_old_names() {
        let one = Layout::new("a").unwrap();
        let id = "0000000000000000000000000000000b";
        assert_eq!(one.query(id), "{a}:q:0000000000000000000000000000000b");
        assert_eq!(one.idempotency("k"), "{a}:idem:k");
        let four = Layout::new("a").unwrap().with_partitions(4).unwrap();
        assert_eq!(four.partition_of_id(id), 3);
        assert_eq!(four.query(id), "{a:3}:q:0000000000000000000000000000000b");
        assert_eq!(four.partition(0).jobs(), "{a}:jobs");
        assert_eq!(four.partition(2).jobs(), "{a:2}:jobs");
        assert_eq!(four.partial_sum(id), format!("{{a:3}}:acc:{id}"));
        assert_eq!(
            four.events(),
            ["{a}:done", "{a:1}:done", "{a:2}:done", "{a:3}:done"]
        );
        let p = four.partition_of_idempotency_key("retry-me");
        assert_eq!(
            four.idempotency("retry-me"),
            four.partition(p).idempotency("retry-me")
        );
        // Keys spread: 64 keys land in every one of 4 partitions.
        let hit: std::collections::HashSet<u32> = (0..64)
            .map(|i| four.partition_of_idempotency_key(&format!("key-{i}")))
            .collect();
        assert_eq!(hit.len(), 4);
        assert_eq!(four.partition_count(), "{a}:partitions");
        for bad in [0, MAX_PARTITIONS + 1] {
            assert!(Layout::new("a").unwrap().with_partitions(bad).is_err());
        }
    }

    #[test]
    fn a_table_has_keys_of_its_own_and_the_default_table_the_party_s() {
        let party = Layout::new("a").unwrap().with_partitions(2).unwrap();
        let default = party.table(DEFAULT_TABLE).unwrap();
        assert_eq!(default, party);
        assert_eq!(default.db(), "{a}:db");
        let small = party.table("small").unwrap();
        assert_eq!(small.table_name(), "small");
        assert_eq!(small.prefix(), "a");
        assert_eq!(small.jobs(), "{a:t:small}:jobs");
        assert_eq!(small.partition(1).jobs(), "{a:t:small:1}:jobs");
        assert_eq!(small.db(), "{a:t:small}:db");
        assert_eq!(small.updates(), "{a:t:small}:updates");
        assert_eq!(small.digests(), "{a:t:small}:digests");
        assert_eq!(small.workers(), "{a:t:small}:workers");
        assert_eq!(small.events(), ["{a:t:small}:done", "{a:t:small:1}:done"]);
        // The party-wide keys stay the party's, whichever table asks.
        assert_eq!(small.party(), "{a}:party");
        assert_eq!(small.partition_count(), "{a}:partitions");
        assert_eq!(small.fetched_bytes(), "{a}:fetched_bytes");
        assert_eq!(small.tables(), "{a}:tables");
        assert_eq!(small.to_string(), "a table small");
        assert_eq!(party.to_string(), "a");
        for bad in ["", "a.b", "a:b", "a b", "a/b", "..", &"x".repeat(65)] {
            assert!(party.table(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bad_prefixes_are_rejected() {
        for p in ["", "a b", "a{b", "a}b", "a:b", &"x".repeat(65)] {
            assert!(Layout::new(p).is_err(), "{p:?}");
        }
    }
}
