//! The protocol's Lua scripts, one file each under `queue/lua/` (each file's header states its
//! KEYS, ARGV and return value), loaded once per process.
//!
//! A script runs through its [`redis::Script`] (`EVALSHA`, loading it on `NOSCRIPT`). Inside a
//! `MULTI` pipeline a missing script cannot be loaded half-way, so there the same text goes as
//! `EVAL` ([`Lua::eval`]); Redis caches it by its SHA either way.

use std::sync::LazyLock;

/// One script: its file's text and the [`redis::Script`] built from it once.
pub struct Lua {
    /// The file's name, for the messages of the header check.
    #[cfg_attr(not(test), allow(dead_code))]
    pub name: &'static str,
    pub source: &'static str,
    script: LazyLock<redis::Script>,
}

impl Lua {
    const fn new(name: &'static str, source: &'static str, make: fn() -> redis::Script) -> Lua {
        Lua {
            name,
            source,
            script: LazyLock::new(make),
        }
    }

    /// The script, for `key(..)`/`arg(..)`/`invoke_async` (`EVALSHA`).
    pub fn script(&self) -> &redis::Script {
        &self.script
    }

    /// `EVAL <source> <number of keys>` for a transaction; add keys, then arguments.
    pub fn eval<'p>(&self, pipe: &'p mut redis::Pipeline, keys: usize) -> &'p mut redis::Pipeline {
        pipe.cmd("EVAL").arg(self.source).arg(keys)
    }
}

macro_rules! lua {
    ($name:ident, $file:literal) => {
        pub static $name: Lua = Lua::new($file, include_str!(concat!("../lua/", $file)), || {
            redis::Script::new(include_str!(concat!("../lua/", $file)))
        });
    };
}

lua!(FAIL, "fail.lua");
lua!(DEAD_LETTER, "dead_letter.lua");
lua!(PUBLISH_WINDOW, "publish_window.lua");
lua!(APPEND_EPOCH, "append_epoch.lua");
lua!(SHARD_START, "shard_start.lua");
lua!(SHARD_COMBINE, "shard_combine.lua");
lua!(PARTY_ID, "party_id.lua");
lua!(REGISTER, "register.lua");
lua!(KV_WRITE, "kv_write.lua");

/// Every script, for the header check.
#[cfg(test)]
pub const ALL: &[&Lua] = &[
    &FAIL,
    &DEAD_LETTER,
    &PUBLISH_WINDOW,
    &APPEND_EPOCH,
    &SHARD_START,
    &SHARD_COMBINE,
    &PARTY_ID,
    &REGISTER,
    &KV_WRITE,
];

#[cfg(test)]
mod tests {
    use pirq_shared::layout::query_field as qf;
    use pirq_shared::wire::QueryStatus;

    use super::*;

    #[test]
    fn every_script_states_keys_argv_and_returns() {
        for lua in ALL {
            let header: String = lua
                .source
                .lines()
                .take_while(|l| l.starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n")
                .to_lowercase();
            for part in ["keys[", "argv", "returns"] {
                assert!(header.contains(part), "{}: header has no {part}", lua.name);
            }
        }
    }

    /// The scripts spell stream fields, statuses and record headers as Lua strings: a renamed
    /// constant in `shared::layout`, or a record grammar changed in `record.rs`, must fail here,
    /// not in production.
    #[test]
    fn scripts_use_the_layout_names_and_the_record_grammar() {
        let quoted = |s: &str| format!("'{s}'");
        let uses = |lua: &Lua, names: &[&str]| {
            for name in names {
                assert!(
                    lua.source.contains(&quoted(name)),
                    "{} does not write {name}",
                    lua.name
                );
            }
        };
        // The record's first word, as the scripts test it (GETRANGE 0 4).
        let done = &QueryStatus::Done.as_str();
        let failed = &QueryStatus::Failed.as_str()[..5];
        uses(&FAIL, &[&format!("{done} ")]);
        uses(&SHARD_START, &[&format!("{done} "), failed]);
        uses(&SHARD_COMBINE, &[&format!("{done} "), failed]);
        assert!(SHARD_COMBINE.source.contains("'done ' .. ARGV[4]"));
        assert!(SHARD_COMBINE.source.contains("'failed internal - '"));
        assert!(
            SHARD_START.source.contains("' 7\\nrunning'"),
            "the running frame: '<id> 7\\nrunning'"
        );
        uses(
            &SHARD_COMBINE,
            &[
                qf::SHARDS,
                qf::PARTS,
                qf::DIGEST,
                qf::SCAN_US,
                qf::WORKER_US,
                qf::EPOCH,
            ],
        );
    }
}
