//! The field-name check of every Lua script ([`crate::scripts::ALL`]): each name a script spells
//! as a Lua string (a stream field, a hash field, a reply word) is one the Rust side names too
//! (`pirq_shared::layout`, or a reply the caller matches), and each script spells the names its
//! keys hold. A field renamed on one side only, or a new one written by a script alone, fails
//! here instead of in production. (The record grammar is checked beside the scripts, in
//! `scripts.rs`.)

use pirq_shared::layout::{db_field as db, dead_letter_field as dead, job_field as job};
use pirq_shared::layout::{query_field as qf, UPDATE_FIELD};
use pirq_shared::wire::QueryStatus;

use crate::scripts::{self, Lua};

/// The Lua string literals of a script's code (comments left out).
fn literals(source: &str) -> Vec<&str> {
    let mut found = Vec::new();
    for line in source.lines() {
        let code = line.split("--").next().unwrap_or("");
        let mut parts = code.split('\'');
        parts.next();
        while let Some(literal) = parts.next() {
            found.push(literal);
            parts.next();
        }
    }
    found
}

/// Whether a literal reads as a name (a field or a reply word) rather than record grammar, a
/// message or a Redis argument: lowercase letters and underscores, or the `part:` prefix.
fn is_name(literal: &str) -> bool {
    let bare = literal.strip_suffix(':').unwrap_or(literal);
    !bare.is_empty() && bare.chars().all(|c| c.is_ascii_lowercase() || c == '_')
}

/// Every field name the layout declares.
fn layout_names() -> Vec<&'static str> {
    vec![
        job::ID,
        job::JOB,
        qf::STATUS,
        qf::EPOCH,
        qf::PAGE_SIZE,
        qf::PAGES,
        qf::ERROR_CODE,
        qf::ERROR_MESSAGE,
        qf::KEY_INDEX,
        qf::KEYS,
        qf::ACCEPTED_MS,
        qf::SCAN_US,
        qf::WORKER_US,
        qf::SHARDS,
        qf::PARTS,
        qf::PART_PREFIX,
        qf::STARTED,
        qf::DIGEST,
        qf::IDEMPOTENCY_KEY,
        UPDATE_FIELD,
        db::NUM_PAGES,
        db::PAGE_SIZE,
        db::DOMAIN_BITS,
        db::EPOCH,
        db::MIN_EPOCH,
        db::KV,
        db::SHARDS,
        db::DB_ID,
        dead::ENTRY,
        dead::CODE,
        dead::MESSAGE,
        dead::DELIVERIES,
        dead::CONSUMER,
    ]
}

/// Each script: the names it must spell (the fields of its keys that Rust reads or writes too),
/// and the reply words it returns, which its caller matches (`producer.rs`, `registration.rs`;
/// `shard_combine.lua`'s in `queue/tests/shard_combine.rs`).
fn expected(lua: &Lua) -> (Vec<&'static str>, Vec<&'static str>) {
    match lua.name {
        "fail.lua" | "party_id.lua" | "append_epoch.lua" => (vec![], vec![]),
        "dead_letter.lua" => (
            vec![
                dead::ENTRY,
                dead::CODE,
                dead::MESSAGE,
                dead::DELIVERIES,
                dead::CONSUMER,
            ],
            vec![],
        ),
        "publish_window.lua" | "kv_write.lua" => (vec![db::DB_ID], vec![]),
        "register.lua" => (
            vec![
                db::DB_ID,
                db::NUM_PAGES,
                db::PAGE_SIZE,
                db::DOMAIN_BITS,
                db::EPOCH,
                db::MIN_EPOCH,
                db::KV,
            ],
            vec!["ok", "conflict"],
        ),
        "shard_start.lua" => (vec![qf::STARTED, qf::SHARDS, qf::PARTS, qf::EPOCH], vec![]),
        "shard_combine.lua" => (
            vec![
                qf::SHARDS,
                qf::EPOCH,
                qf::DIGEST,
                qf::PARTS,
                qf::PART_PREFIX,
                qf::SCAN_US,
                qf::WORKER_US,
            ],
            vec!["done", "partial", "duplicate", "final", "gone", "mismatch"],
        ),
        other => panic!("{other}: a script the field-name check does not know; add it here"),
    }
}

/// The record heads the scripts test (`GETRANGE 0 4` of a record: `done ` or `faile`), the
/// record grammar's (`record.rs`) rather than a field.
fn record_heads() -> Vec<&'static str> {
    vec![
        QueryStatus::Done.as_str(),
        &QueryStatus::Failed.as_str()[..5],
    ]
}

#[test]
fn every_script_spells_only_names_the_rust_side_knows() {
    let known: Vec<&str> = layout_names().into_iter().chain(record_heads()).collect();
    for lua in scripts::ALL {
        let (fields, replies) = expected(lua);
        let literals = literals(lua.source);
        for name in literals.iter().filter(|l| is_name(l)) {
            assert!(
                known.contains(name) || replies.contains(name),
                "{}: '{name}' is neither a pirq_shared::layout name nor a reply its caller \
                 matches",
                lua.name
            );
        }
        for name in fields.iter().chain(&replies) {
            assert!(
                literals.contains(name),
                "{} does not spell '{name}'",
                lua.name
            );
        }
    }
}

/// The check itself: a literal in a comment is not code, grammar is not a name, and an unknown
/// field is caught.
#[test]
fn the_check_reads_code_literals_and_names() {
    let source = "-- 'commented'\nredis.call('HSET', KEYS[1], 'bogus', 'done ' .. x) -- 'tail'\n";
    assert_eq!(literals(source), ["HSET", "bogus", "done "]);
    assert!(is_name("bogus") && is_name("part:") && is_name("db_id"));
    assert!(!is_name("HSET") && !is_name("done ") && !is_name("-1") && !is_name(""));
    assert!(!layout_names().contains(&"bogus"));
}
