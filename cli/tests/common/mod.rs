//! What the suites that run the `pirq` tool share: running the binary cargo built for them and
//! reading what it said. Each suite uses part of it.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Runs `pirq ARGS` to completion.
pub fn pirq(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pirq"))
        .args(args)
        .output()
        .expect("running pirq")
}

/// Runs `pirq ARGS`, which must succeed; its standard output.
pub fn ok(args: &[&str]) -> String {
    let out = pirq(args);
    assert!(out.status.success(), "pirq {args:?}: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `pirq ARGS`, which must succeed; all it said: standard output, then standard error.
pub fn said(args: &[&str]) -> String {
    let out = pirq(args);
    assert!(out.status.success(), "pirq {args:?}: {}", stderr(&out));
    format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out))
}

/// Runs `pirq ARGS`, which must fail; its standard error.
pub fn fails(args: &[&str]) -> String {
    let out = pirq(args);
    assert!(!out.status.success(), "pirq {args:?} succeeded");
    stderr(&out)
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A path as the `&str` argument it is given as (the tests' paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `pirq db gen` of `pages` synthetic pages of 256 bytes into `out`: the page database many
/// cases start from.
pub fn db_gen_args<'a>(pages: &'a str, out: &'a str) -> Vec<&'a str> {
    vec![
        "db",
        "gen",
        "--pages",
        pages,
        "--page-size",
        "256",
        "--out",
        out,
    ]
}

/// `pirq kv build` of hex keys and hex values of `value_size` bytes from `records` into `out`,
/// `more` flags after them: the fixed-size table many cases start from.
pub fn hex_kv_build<'a>(
    records: &'a str,
    value_size: &'a str,
    out: &'a str,
    more: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "kv",
        "build",
        "--key-encoding",
        "hex",
        "--value-encoding",
        "hex",
        "--records",
        records,
        "--value-size",
        value_size,
        "--out",
        out,
    ];
    args.extend_from_slice(more);
    args
}
