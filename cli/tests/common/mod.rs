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
